"""`cluster-tool lab up|down|status|ssh|inject|heal`: the emulated cluster on this machine.

cluster-tool finds `register` through the `cluster_tool.commands` entry point this distribution
(cluster-tool-lab) declares, so the command exists only where the lab is installed.
"""

import os
import shutil
import subprocess
from pathlib import Path
from typing import Annotated

import typer

from cluster_tool import output
from cluster_tool.errors import UsageError

lab_app = typer.Typer(
    name="lab",
    help="An emulated cluster on this machine (needs root): nodes, repository, fabric, BMCs.",
    no_args_is_help=True,
)

JsonOpt = Annotated[bool, typer.Option("--json", help="Machine output on stdout.")]


@lab_app.command("up")
def up(
    spec: Annotated[
        Path | None,
        typer.Option("--spec", help="Lab cluster spec (default examples/lab.yml)."),
    ] = None,
    json_out: JsonOpt = False,
) -> int:
    """Bring the lab up; on a running lab, report it and change nothing."""
    from cluster_lab import lifecycle
    from cluster_lab.config import LabConfig

    config = LabConfig.from_env()
    output.progress(f"lab: bringing up {spec or 'examples/lab.yml'} in {config.lab_dir}")
    result = lifecycle.up(config, spec)
    if json_out:
        output.emit_json(result.to_json())
        return 0
    if result.already_running:
        output.stdout.print(f"lab already running in {result.lab_dir}; nothing changed")
    else:
        output.stdout.print(f"lab up in {result.elapsed_s} s ({result.lab_dir})")
    _print_nodes(result)
    output.stdout.print(f"ssh -F {result.ssh_config} NODE   |   inventory: {result.inventory}")
    return 0


@lab_app.command("down")
def down(json_out: JsonOpt = False) -> int:
    """Stop everything the lab started; remove its namespaces, links, cgroups and processes."""
    from cluster_lab import lifecycle
    from cluster_lab.config import LabConfig

    removed = lifecycle.down(LabConfig.from_env())
    if json_out:
        output.emit_json({"removed": removed})
    elif removed:
        output.stdout.print(f"lab down: removed {len(removed)} objects")
    else:
        output.stdout.print("no lab was running")
    return 0


@lab_app.command("status")
def status(json_out: JsonOpt = False) -> int:
    """Nodes (name, address, role), services and active faults of the lab."""
    from cluster_lab import lifecycle
    from cluster_lab.config import LabConfig

    result = lifecycle.status(LabConfig.from_env())
    if json_out:
        output.emit_json(result.to_json())
        return 0
    if not result.nodes and not result.running:
        output.stdout.print("no lab is running")
        return 0
    output.stdout.print(f"lab {'running' if result.running else 'DEGRADED'} in {result.lab_dir}")
    _print_nodes(result)
    for name, alive in result.services.items():
        output.stdout.print(f"  service {name:<14} {'up' if alive else 'DOWN'}")
    for fault in result.faults:
        output.stdout.print(f"  fault {fault.get('id')}: {fault.get('kind')} {fault.get('target')}")
    return 0


def _print_nodes(result: object) -> None:
    for node in getattr(result, "nodes", []):
        state = "up" if node.running else "DOWN"
        output.stdout.print(f"  {node.name:<10} {node.address:<15} {node.role:<5} {state}")


@lab_app.command("ssh", context_settings={"allow_extra_args": True, "ignore_unknown_options": True})
def ssh(
    node: Annotated[str, typer.Argument(help="Lab node name, e.g. gpu001.")],
    command: Annotated[
        list[str] | None, typer.Argument(help="Command to run; a shell when left out.")
    ] = None,
    json_out: JsonOpt = False,
) -> int:
    """Run a command on a lab node over SSH (or open a shell)."""
    from cluster_lab import lifecycle
    from cluster_lab.config import LabConfig

    config = LabConfig.from_env()
    current = lifecycle.status(config)
    names = [n.name for n in current.nodes]
    if node not in names:
        known = ", ".join(names) or "none (is the lab up?)"
        raise UsageError(f"no lab node {node!r}; nodes: {known}")
    if shutil.which("ssh") is None:
        raise UsageError("ssh is not installed")
    argv = lifecycle.ssh_argv(config, node, command or [])
    if json_out:
        proc = subprocess.run(argv, capture_output=True, text=True, check=False)
        output.emit_json(
            {
                "node": node,
                "command": command or [],
                "exit_code": proc.returncode,
                "stdout": proc.stdout,
                "stderr": proc.stderr,
            }
        )
        return proc.returncode
    # Hand the terminal to ssh: its exit status is the command's.
    os.execvp(argv[0], argv)
    return 0  # not reached


def register(app: typer.Typer) -> None:
    """Adds `cluster-tool lab`: the `cluster_tool.commands` entry point of cluster-tool-lab."""
    from cluster_lab import cli_faults

    cli_faults.add_to(lab_app)  # `lab inject` / `lab heal` (part 2)
    app.add_typer(lab_app, name="lab")
