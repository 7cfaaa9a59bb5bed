"""`cluster-tool context set|show|list`: make and read a cluster's context, how this controller
reaches that cluster (its inventory, SSH config, Slurm host, the gate's shared folder, the BMCs'
transport, and the secrets the runs read), kept 0600 (cluster_tool.context)."""

import os
import re
import sys
from dataclasses import asdict
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from cluster_tool import output
from cluster_tool.errors import UsageError

if TYPE_CHECKING:
    from cluster_tool.context import SiteContext

context_app = typer.Typer(
    name="context",
    help="Make and read a cluster's context: how this controller reaches it.",
    no_args_is_help=True,
)

JsonOpt = Annotated[bool, typer.Option("--json", help="Machine output on stdout.")]
ClusterArg = Annotated[
    str, typer.Argument(help="The cluster: its spec (the name is read from it) or its name.")
]
# Typer reads the commands' annotations as objects: no `from __future__ import annotations` here
# (tests/unit/test_cli_startup.py). A context is a file named after its cluster: a name that
# could not be one is refused.
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,62}")
_ENV_NAME = re.compile(r"[A-Z_][A-Z0-9_]{0,127}")


def _cluster_name(given: str) -> str:
    path = Path(given)
    if given.endswith((".yml", ".yaml")) or path.is_file():
        from cluster_tool.spec import load_spec

        return load_spec(path).name
    if not _NAME.fullmatch(given):
        raise UsageError(f"{given!r}: not a cluster name (letters, digits, . _ -) nor a spec")
    return given


def _secret(name: str) -> str:
    """A secret's value: from this environment, else typed at a prompt, never from argv."""
    if not _ENV_NAME.fullmatch(name):
        # Not echoed: `--env NAME=value` would put the value on this terminal and in logs.
        raise UsageError(
            "--env takes a variable's name (A-Z, 0-9, _); its value comes from the "
            "environment or a prompt, never the command line"
        )
    value = os.environ.get(name)
    if value:
        return value
    if not sys.stdin.isatty():
        raise UsageError(f"--env {name}: set it in the environment (or run on a terminal)")
    import getpass

    value = getpass.getpass(f"{name}: ")
    if not value:
        raise UsageError(f"--env {name}: empty")
    return value


def _shown(context: "SiteContext") -> dict[str, object]:
    """The context as it may be shown: every secret by its name only."""
    data = asdict(context)
    data["env"] = sorted(context.env)
    return data


@context_app.command("set")
def set_context(
    cluster: ClusterArg,
    inventory: Annotated[
        Path | None, typer.Option("--inventory", help="A rendered inventory.")
    ] = None,
    ssh_config: Annotated[
        Path | None, typer.Option("--ssh-config", help="OpenSSH config naming the hosts.")
    ] = None,
    slurm_via: Annotated[
        str | None,
        typer.Option("--slurm-via", help="The host Slurm commands run on (over SSH)."),
    ] = None,
    workdir: Annotated[
        Path | None,
        typer.Option("--workdir", help="The gate's folder, shared with the GPU nodes."),
    ] = None,
    bmc_insecure: Annotated[
        bool | None,
        typer.Option("--bmc-insecure/--bmc-verified", help="BMC TLS certificates not checked."),
    ] = None,
    bmc_scheme: Annotated[
        str | None, typer.Option("--bmc-scheme", help="https (default) or http.")
    ] = None,
    env: Annotated[
        list[str] | None,
        typer.Option(
            "--env",
            metavar="NAME",
            help="Keep this secret (CLUSTER_TOOL_SLURMDBD_PASSWORD, the BMC credentials the "
            "spec names): its value is read from the environment or a prompt, never from "
            "the command line. Repeat for more.",
        ),
    ] = None,
    unset_env: Annotated[
        list[str] | None,
        typer.Option("--unset-env", metavar="NAME", help="Forget this secret."),
    ] = None,
    json_out: JsonOpt = False,
) -> int:
    """Create or update a cluster's context (0600): what is given here replaces what it held."""
    from cluster_tool.context import SiteContext, load_context, save_context

    name = _cluster_name(cluster)
    if bmc_scheme is not None and bmc_scheme not in ("https", "http"):
        raise UsageError(f"--bmc-scheme: https or http, not {bmc_scheme!r}")
    context = load_context(name) or SiteContext(cluster=name, written_by="cluster-tool context")
    for field, value in (
        ("inventory", inventory),
        ("ssh_config", ssh_config),
        ("gate_workdir", workdir),
    ):
        if value is not None:
            setattr(context, field, str(value.resolve()))
    if slurm_via is not None:
        context.slurm_via = slurm_via
    if bmc_insecure is not None:
        context.bmc_insecure = bmc_insecure
    if bmc_scheme is not None:
        context.bmc_scheme = bmc_scheme
    for variable in env or []:
        context.env[variable] = _secret(variable)
    for variable in unset_env or []:
        context.env.pop(variable, None)
    path = save_context(context)
    if json_out:
        output.emit_json({"path": str(path), "context": _shown(context)})
    else:
        output.stdout.print(f"{path} (0600)", markup=False)
    return 0


@context_app.command("show")
def show_context(cluster: ClusterArg, json_out: JsonOpt = False) -> int:
    """A cluster's context, its secrets by name only. Exit 2 when it has none."""
    from cluster_tool.context import load_context

    name = _cluster_name(cluster)
    context = load_context(name)
    if context is None:
        raise UsageError(f"no context for cluster {name}: `cluster-tool context set {name} ...`")
    shown = _shown(context)
    if json_out:
        output.emit_json({"path": str(context.path()), "context": shown})
        return 0
    output.stdout.print(str(context.path()), markup=False)
    for key, value in shown.items():
        if key == "env":
            value = ", ".join(context.env) + " (values hidden)" if context.env else ""
        if value not in (None, "", False):
            output.stdout.print(f"  {key:13} {value}", markup=False)
    return 0


@context_app.command("list")
def list_contexts(json_out: JsonOpt = False) -> int:
    """Every cluster with a context on this controller."""
    from cluster_tool.context import context_dir, load_context

    found = []
    folder = context_dir()
    for path in sorted(folder.glob("*.json")) if folder.is_dir() else []:
        try:
            context = load_context(path.stem)
        except UsageError as exc:  # one unreadable context does not hide the others
            found.append({"cluster": path.stem, "path": str(path), "error": str(exc)})
            continue
        if context is not None:
            found.append(
                {"cluster": context.cluster, "path": str(path), "written_by": context.written_by}
            )
    if json_out:
        output.emit_json({"contexts": found})
        return 0
    for item in found:
        note = item.get("error") or item.get("written_by") or ""
        output.stdout.print(f"{item['cluster']:20} {item['path']}  {note}", markup=False)
    return 0


def register(app: typer.Typer) -> None:
    app.add_typer(context_app, name="context")
