"""How a command reaches its cluster: the command line's options, the rest from the cluster's
context (`cluster_tool.context`; `lab up` writes the lab's); the options and the output the job
commands (bringup, reimage, validate after maintenance) share."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from cluster_tool import output

if TYPE_CHECKING:
    from cluster_tool.context import Reach
    from cluster_tool.spec import Cluster
    from cluster_tool.workflows.jobs import RunOutcome, ValidateAfterJob


def load_cluster(path: Path) -> Cluster:
    """The spec, and its run's secrets handed to the output sink: what this command shows (its
    lines, `--json`, progress, errors) hides the secrets its run folder hides."""
    from cluster_tool.spec import load_spec
    from cluster_tool.workflows.runs import run_secrets

    cluster = load_spec(path)
    output.hide(run_secrets(cluster))
    return cluster


def reach_cluster(
    cluster: Cluster,
    inventory: Path | None = None,
    ssh_config: Path | None = None,
    slurm_via: str | None = None,
    gate_workdir: Path | None = None,
) -> Reach:
    """Options filled from the context, which is named on stderr so the operator sees where a
    run reaches the cluster from."""
    from cluster_tool.context import reach

    via = reach(
        cluster.name,
        inventory=inventory,
        ssh_config=ssh_config,
        slurm_via=slurm_via,
        gate_workdir=gate_workdir,
    )
    if via.context is not None:
        output.progress(f"cluster context: {via.context}")
    return via


# --- the options and the output every job command shares ------------------------------------

SpecArg = Annotated[Path, typer.Argument(help="The cluster spec (YAML).")]
JsonOpt = Annotated[bool, typer.Option("--json", help="Machine output (the summary) on stdout.")]
RunsDirOpt = Annotated[
    Path | None,
    typer.Option(
        "--runs-dir", help="Where run records go (default $CLUSTER_TOOL_RUNS_DIR or runs/)."
    ),
]
InventoryOpt = Annotated[
    Path | None,
    typer.Option("--inventory", help="A rendered inventory to use (default: render the spec)."),
]
SshConfigOpt = Annotated[
    Path | None, typer.Option("--ssh-config", help="OpenSSH config naming the hosts.")
]
SlurmViaOpt = Annotated[
    str | None,
    typer.Option(
        "--slurm-via",
        help="Run Slurm commands over SSH on this host (default $CLUSTER_TOOL_SLURM_VIA).",
    ),
]
AdmitUnprovenOpt = Annotated[
    bool,
    typer.Option(
        "--admit-unproven",
        help="Also admit a node whose only gap is the gate's proof (no gate, no proven "
        "partner); the run record and report say so.",
    ),
]
GateWorkdirOpt = Annotated[
    Path | None,
    typer.Option("--gate-workdir", help="Gate job scripts and outputs; shared with the nodes."),
]
DcgmOpt = Annotated[bool, typer.Option("--dcgm/--no-dcgm", help="Run `dcgmi diag -r 1`.")]


def progress(line: str) -> None:
    """A job's progress line on stderr (a TTY only); task names and messages may hold
    [brackets]: shown as text, never as rich markup."""
    from rich.markup import escape  # rich loads on first output, not with the CLI

    output.progress(escape(line))


def show_run(outcome: RunOutcome, json_out: bool) -> int:
    """A finished job on stdout: its summary as JSON, or its phases, the nodes that did not
    pass and the headline with the report's path; returns the job's exit code."""
    output.hide(outcome.record.secrets)  # with what the run learnt (a vault's BMC password)
    summary = outcome.summary
    if json_out:
        output.emit_json({**summary.to_json(), "run_dir": str(outcome.record.path)})
        return outcome.exit_code
    out = output.stdout
    for phase in summary.phases:
        detail = f" ({phase['detail']})" if phase.get("detail") else ""
        out.print(f"{phase['name']:10} {phase['status']}{detail}", markup=False)
    for node, v in summary.nodes.items():
        if v.get("verdict") != "pass":
            out.print(f"{node}: {v.get('verdict')}: {v.get('reason') or ''}", markup=False)
    headline = summary.headline or summary.verdict.upper()
    out.print(f"{headline}  report: {outcome.report}", markup=False)
    return outcome.exit_code


def validate_after_job(job: ValidateAfterJob, json_out: bool) -> int:
    """`validate-after` and `validate --after-maintenance`: the options checked before the spec
    is read, the cluster reached (a replay reaches nothing), the job run and shown."""
    from dataclasses import replace

    from cluster_tool.workflows.jobs import check_validate_after, run_validate_after

    check_validate_after(job)
    cluster = load_cluster(job.spec)
    if job.replay is None:
        r = job.reach
        job = replace(
            job, reach=reach_cluster(cluster, None, r.ssh_config, r.slurm_via, r.gate_workdir)
        )
    return show_run(run_validate_after(cluster, job, progress=progress), json_out)
