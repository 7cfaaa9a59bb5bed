"""`cluster-tool bringup`, `reimage`, `validate-after` and `report`: each job command parses its
options, calls the job's entry point in `cluster_tool.workflows.jobs` (which writes the run record,
runs/<timestamp>-<id>/) and prints the outcome."""

from pathlib import Path
from typing import Annotated

import typer

from cluster_tool import output
from cluster_tool.commands._context import (
    AdmitUnprovenOpt,
    DcgmOpt,
    GateWorkdirOpt,
    InventoryOpt,
    JsonOpt,
    RunsDirOpt,
    SlurmViaOpt,
    SpecArg,
    SshConfigOpt,
    progress,
    reach_cluster,
    show_run,
    validate_after_job,
)
from cluster_tool.commands._shape import SpecArgumentCommand
from cluster_tool.errors import UsageError

# The workflows (ansible-runner, sushy, the gate) are imported inside the commands: any other
# command, and --help, starts without them.

BurnInOpt = Annotated[
    str | None,
    typer.Option(
        "--burn-in",
        metavar="DURATION",
        help="After the gate: an NCCL soak of this length (20s, 30m, 4h; `default`: the spec's, "
        "4 h bring-up, 30 min re-image/validate), then `dcgmi diag -r 3`; a node whose busbw "
        "sags, whose counters climb or whose GPUs fail is not admitted.",
    ),
]


# --- the jobs ------------------------------------------------------------------------------


def bringup(
    spec: SpecArg,
    limit: Annotated[
        str | None,
        typer.Option("--nodes", "--limit", help="Only these hosts (hostlist; --limit: the same)."),
    ] = None,
    phase: Annotated[
        str | None,
        typer.Option("--phase", help="Only this phase (os, driver, fabric, comms, slurm, tools)."),
    ] = None,
    check: Annotated[bool, typer.Option("--check", help="Dry run: what would change.")] = False,
    diff: Annotated[bool, typer.Option("--diff", help="Show file diffs (with --check).")] = False,
    retry_failed: Annotated[
        bool,
        typer.Option(
            "--retry-failed",
            help="Only the hosts that failed in the last bringup of this spec (exit 2 when "
            "that run has no summary: it crashed, was killed or still runs).",
        ),
    ] = False,
    gate: Annotated[bool, typer.Option("--gate/--no-gate", help="Run the NCCL gate.")] = True,
    preflight: Annotated[
        bool,
        typer.Option(
            "--preflight/--no-preflight",
            help="First, in seconds: the secrets the run reads and every host answering SSH "
            "(exit 2 naming a missing secret, 3 naming the hosts that did not answer).",
        ),
    ] = True,
    burn_in: BurnInOpt = None,
    admit_unproven: AdmitUnprovenOpt = False,
    inventory: InventoryOpt = None,
    ssh_config: SshConfigOpt = None,
    slurm_via: SlurmViaOpt = None,
    gate_workdir: GateWorkdirOpt = None,
    dcgm: DcgmOpt = True,
    runs_dir: RunsDirOpt = None,
    json_out: JsonOpt = False,
) -> int:
    """Render, converge (site.yml), validate, gate, admit what is proven. Exit 0 every node
    proven and admitted, 1 otherwise, 3 a host unreachable."""
    from cluster_tool.commands._context import load_cluster
    from cluster_tool.workflows.jobs import BringupJob, run_bringup

    cluster = load_cluster(spec)
    via = reach_cluster(cluster, inventory, ssh_config, slurm_via, gate_workdir)
    job = BringupJob(
        spec, via, limit=limit, phase=phase, check=check, diff=diff, retry_failed=retry_failed,
        gate=gate, admit_unproven=admit_unproven, dcgm=dcgm, runs_dir=runs_dir, burn_in=burn_in,
        preflight=preflight,
    )  # fmt: skip
    return show_run(run_bringup(cluster, job, progress=progress), json_out)


def preflight(
    spec: SpecArg,
    nodes: Annotated[
        str | None, typer.Option("--nodes", help="Only these hosts (hostlist; default: all).")
    ] = None,
    ssh_config: SshConfigOpt = None,
    slurm_via: SlurmViaOpt = None,
    workdir: GateWorkdirOpt = None,
    slurm: Annotated[
        bool | None,
        typer.Option(
            "--slurm/--no-slurm",
            help="Also ask Slurm, the way the jobs will (default: when --slurm-via or the "
            "context names a host; a cluster before its bring-up has none).",
        ),
    ] = None,
    json_out: JsonOpt = False,
) -> int:
    """What a job needs, in seconds: the secrets it reads, every host answering SSH, each GPU
    node's hardware (PCI bus, RDMA devices, CPUs, memory) against its profile, the gate's
    folder (--workdir, or the context's) written here and read back on a GPU node, Slurm. Exit 0
    all there, 2 a secret missing, a node unlike its profile or the folder not shared, 3 a host
    or Slurm not answering. What a bare node cannot show yet is listed as not read."""
    from cluster_tool.bounds import expand_hostlist
    from cluster_tool.commands._context import load_cluster
    from cluster_tool.slurm import connect
    from cluster_tool.workflows.preflight import run_preflight, ssh_transport

    cluster = load_cluster(spec)
    via = reach_cluster(cluster, ssh_config=ssh_config, slurm_via=slurm_via, gate_workdir=workdir)
    hosts = [h.name for h in cluster.hosts()]
    if nodes:
        named = set(expand_hostlist(nodes, "--nodes"))
        unknown = named - set(hosts)
        if unknown:
            from ClusterShell.NodeSet import NodeSet

            raise UsageError(f"--nodes: not hosts of the spec: {NodeSet.fromlist(list(unknown))}")
        hosts = [h for h in hosts if h in named]
    ask_slurm = slurm if slurm is not None else via.slurm_via is not None
    result = run_preflight(
        cluster,
        hosts,
        ssh_transport(cluster, via.ssh_config),
        slurm=connect(via.slurm_via, via.ssh_config) if ask_slurm else None,
        shared=via.gate_workdir,
        spec=str(spec),
    )
    if result.problems:  # on stderr too: a script's log shows why it stopped
        output.error_line(result.line())
    if json_out:
        output.emit_json(result.to_json())
    else:
        for item, state in result.checked.items():
            output.stdout.print(f"{item:8} {state}", markup=False)
        for what in result.not_read:
            output.stdout.print(output.severity_line("info", f"not read: {what}"))
        for warning in result.warnings:
            output.stdout.print(output.severity_line("warning", warning))
        for problem in result.problems:
            output.stdout.print(output.severity_line("error", problem.text))
        verdict = "PASS" if not result.problems else "FAIL"
        output.stdout.print(f"{verdict} ({result.elapsed_s:g} s)", markup=False)
    return result.exit_code


def reimage(
    spec: SpecArg,
    nodes: Annotated[
        str | None, typer.Option("--nodes", help="The GPU nodes to re-image (hostlist).")
    ] = None,
    batch: Annotated[int, typer.Option("--batch", min=1, help="Nodes per batch.")] = 1,
    per_su: Annotated[
        int, typer.Option("--per-su", min=1, help="At most this many of one SU at once.")
    ] = 1,
    max_fail: Annotated[
        int, typer.Option("--max-fail", min=0, help="Stop once more nodes failed.")
    ] = 0,
    resume: Annotated[
        str | None,
        typer.Option("--resume", help="Continue this run (id or folder) where it stopped."),
    ] = None,
    force: Annotated[
        bool, typer.Option("--force", help="Cancel jobs still running after --drain-timeout.")
    ] = False,
    drain_timeout: Annotated[
        float, typer.Option("--drain-timeout", min=0, help="Seconds to wait for running jobs.")
    ] = 3600.0,
    ssh_timeout: Annotated[
        float, typer.Option("--ssh-timeout", min=1, help="Seconds to wait for a node to come back.")
    ] = 1800.0,
    insecure_bmc: Annotated[
        bool,
        typer.Option("--insecure-bmc", help="Do not verify BMC TLS certificates (or allow http)."),
    ] = False,
    ca_bundle: Annotated[
        Path | None, typer.Option("--ca-bundle", help="CA bundle that signs the BMC certificates.")
    ] = None,
    bmc_scheme: Annotated[
        str, typer.Option("--bmc-scheme", help="https (default) or http (needs --insecure-bmc).")
    ] = "https",
    vault_file: Annotated[
        Path | None, typer.Option("--vault-file", help="Ansible vault holding the BMC credentials.")
    ] = None,
    vault_password_file: Annotated[
        Path | None, typer.Option("--vault-password-file", help="The vault's password file.")
    ] = None,
    inventory: InventoryOpt = None,
    ssh_config: SshConfigOpt = None,
    slurm_via: SlurmViaOpt = None,
    gate_workdir: GateWorkdirOpt = None,
    gate: Annotated[
        bool, typer.Option("--gate/--no-gate", help="Single + pair gate in the node ladder.")
    ] = True,
    burn_in: BurnInOpt = None,
    admit_unproven: AdmitUnprovenOpt = False,
    admit: Annotated[
        bool,
        typer.Option(
            "--admit",
            help="Lift the drains the nodes had when the run began (an operator's), once proven.",
        ),
    ] = False,
    dcgm: DcgmOpt = True,
    runs_dir: RunsDirOpt = None,
    preflight: Annotated[
        bool,
        typer.Option(
            "--preflight/--no-preflight",
            help="First, in seconds: Slurm answering and every node's BMC taking a "
            "connection, before the first drain (exit 3 naming what did not answer).",
        ),
    ] = True,
    check: Annotated[
        bool,
        typer.Option(
            "--check",
            help="Dry run: print the batches, the partners and each node's drain and BMC "
            "actions; change nothing (Slurm is only read, no BMC is asked, no run record).",
        ),
    ] = False,
    json_out: JsonOpt = False,
) -> int:
    """Rolling re-image: drain → PXE + power cycle → SSH → converge → node ladder → resume."""
    from cluster_tool.commands._context import load_cluster
    from cluster_tool.workflows.jobs import ReimageJob, plan_reimage, run_reimage

    cluster = load_cluster(spec)
    via = reach_cluster(cluster, inventory, ssh_config, slurm_via, gate_workdir)
    job = ReimageJob(
        spec, via, nodes=nodes, batch=batch, per_su=per_su, max_fail=max_fail, resume=resume,
        force=force, drain_timeout_s=drain_timeout, ssh_timeout_s=ssh_timeout,
        insecure_bmc=insecure_bmc, ca_bundle=ca_bundle, bmc_scheme=bmc_scheme,
        vault_file=vault_file, vault_password_file=vault_password_file, gate=gate,
        admit_unproven=admit_unproven, dcgm=dcgm, runs_dir=runs_dir, burn_in=burn_in,
        admit=admit, preflight=preflight,
    )  # fmt: skip
    if check:
        plan = plan_reimage(cluster, job, progress=progress)
        if json_out:
            output.emit_json(plan.to_json())
        else:
            for line in plan.lines():
                output.stdout.print(line, markup=False)
            output.stdout.print("CHECK: nothing was changed", markup=False)
        return 0
    return show_run(run_reimage(cluster, job, progress=progress), json_out)


def validate_after(
    spec: SpecArg,
    switch: Annotated[
        str | None, typer.Option("--switch", help="The leaf or spine that was touched.")
    ] = None,
    nodes: Annotated[
        str | None, typer.Option("--nodes", help="Or these GPU nodes (hostlist).")
    ] = None,
    admit: Annotated[
        bool, typer.Option("--admit", help="Resume what is proven; drain what is not.")
    ] = False,
    gate: Annotated[bool, typer.Option("--gate/--no-gate", help="Run the NCCL gate.")] = True,
    burn_in: BurnInOpt = None,
    admit_unproven: AdmitUnprovenOpt = False,
    junit: Annotated[
        Path | None, typer.Option("--junit", help="Also write the run's JUnit XML here.")
    ] = None,
    save: Annotated[
        Path | None, typer.Option("--save", help="Save every raw output under this folder.")
    ] = None,
    replay: Annotated[
        Path | None,
        typer.Option("--from", help="Replay a saved capture; no SSH (needs --no-gate)."),
    ] = None,
    concurrency: Annotated[
        int, typer.Option("--concurrency", help="Hosts probed at once.", min=1)
    ] = 32,
    transport: Annotated[
        str, typer.Option("--transport", help="openssh (default) or paramiko.")
    ] = "openssh",
    ssh_config: SshConfigOpt = None,
    slurm_via: SlurmViaOpt = None,
    gate_workdir: GateWorkdirOpt = None,
    dcgm: DcgmOpt = True,
    runs_dir: RunsDirOpt = None,
    preflight: Annotated[
        bool,
        typer.Option(
            "--preflight/--no-preflight",
            help="First, in seconds: the nodes and the fabric's host answering SSH, Slurm "
            "answering (with the gate or --admit), before the run starts (exit 3 naming the "
            "hosts that did not answer as one hostlist).",
        ),
    ] = True,
    json_out: JsonOpt = False,
) -> int:
    """After maintenance: the whole fabric, then health + gate on the switch's nodes."""
    from cluster_tool.context import Reach
    from cluster_tool.workflows.jobs import ValidateAfterJob

    job = ValidateAfterJob(
        spec, Reach(None, ssh_config, slurm_via, gate_workdir, None), switch=switch, nodes=nodes,
        admit=admit, gate=gate, admit_unproven=admit_unproven, junit=junit, save=save,
        replay=replay, concurrency=concurrency, transport=transport, dcgm=dcgm, runs_dir=runs_dir,
        burn_in=burn_in, preflight=preflight,
    )  # fmt: skip
    return validate_after_job(job, json_out)


# --- report --------------------------------------------------------------------------------


def report(
    run: Annotated[str, typer.Argument(help="The run: its folder, or its id under --runs-dir.")],
    runs_dir: RunsDirOpt = None,
    json_out: JsonOpt = False,
) -> int:
    """Re-render junit.xml and report.html of a run from its summary.json and findings.json."""
    from cluster_tool.report import load_run, write_report
    from cluster_tool.workflows.runs import RunRecord, default_runs_dir

    record = RunRecord.open(run, runs_dir or default_runs_dir())
    written = write_report(record.path)
    summary, _ = load_run(record.path)
    if json_out:
        output.emit_json(
            {
                "run_dir": str(record.path),
                "written": [str(p) for p in written],
                "verdict": summary.get("verdict"),
            }
        )
    else:
        output.stdout.print(
            f"{str(summary.get('verdict', '?')).upper()}  {record.path / 'report.html'}",
            markup=False,
        )
    return 0 if summary.get("verdict") == "pass" else 1


def register(app: typer.Typer) -> None:
    for name, command in (
        ("preflight", preflight),
        ("bringup", bringup),
        ("reimage", reimage),
        ("validate-after", validate_after),
    ):
        app.command(name, cls=SpecArgumentCommand)(command)
    app.command("report")(report)
