"""`cluster-tool gate`: the nccl-tests ladder through Slurm, and `gate simulate` to see its cost."""

import dataclasses
import os
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from cluster_tool import output
from cluster_tool.commands._shape import SpecOptionGroup
from cluster_tool.errors import UsageError
from cluster_tool.fileio import fresh_dir
from cluster_tool.gate.rungs import RUNG_NAMES

# The ladder, the simulator and Slurm are imported inside the commands: every other command,
# and --help, starts without them.
if TYPE_CHECKING:
    from cluster_tool.gate.ladder import GateResult

gate_app = typer.Typer(
    name="gate",
    cls=SpecOptionGroup,
    help="Run the nccl-tests gate through Slurm and name the bad node or cable.",
    no_args_is_help=False,
    invoke_without_command=True,
)


def _default_workdir() -> Path:
    # A fresh folder per run under a shared base, so no run reads another's outputs.
    base = Path(os.environ.get("CLUSTER_TOOL_GATE_RUNS_DIR") or "gate-runs")
    return fresh_dir(base)


def _rungs(value: str) -> tuple[str, ...]:
    rungs = tuple(r.strip() for r in value.split(",") if r.strip())
    unknown = [r for r in rungs if r not in RUNG_NAMES]
    if unknown or not rungs:
        raise UsageError(f"--rungs: unknown {unknown}; choose from {', '.join(RUNG_NAMES)}")
    return rungs


def _print_result(result: "GateResult", json_out: bool) -> None:
    if json_out:
        output.emit_json(result.to_json())
        return
    out = output.stdout
    for name, info in result.rungs.items():
        out.print(f"{name}: " + ", ".join(f"{k}={v}" for k, v in info.items()))
    for f in result.report.findings:
        where = f.node or f.component or "-"
        out.print(output.severity_line(f.severity, f"{f.check:16} {where}: {f.message}"))
    for line in result.drains.lines():
        out.print(line)
    summary = result.report.summary
    out.print(
        f"gate {result.report.status.upper()}: {summary.get('jobs', 0)} jobs, "
        f"{summary.get('gpu_hours', 0)} GPU-hours"
    )


@gate_app.callback()
def gate(
    ctx: typer.Context,
    spec: Annotated[Path | None, typer.Option("--spec", help="The cluster spec.")] = None,
    rungs: Annotated[
        str, typer.Option("--rungs", help="Comma-separated rungs: single,pairs,full.")
    ] = ",".join(RUNG_NAMES),
    rails: Annotated[bool, typer.Option("--rails", help="Also run per-rail all_reduce.")] = False,
    nodes: Annotated[
        str | None, typer.Option("--nodes", help="Only these GPU nodes (hostlist).")
    ] = None,
    rotation: Annotated[
        int, typer.Option("--rotation", help="Pair rotation; change it between runs.")
    ] = 0,
    workdir: Annotated[
        Path | None,
        typer.Option("--workdir", help="Job scripts and outputs; must be shared with the nodes."),
    ] = None,
    slurm_via: Annotated[
        str | None,
        typer.Option(
            "--slurm-via",
            envvar="CLUSTER_TOOL_SLURM_VIA",
            help="Run Slurm commands over SSH on this host (the controller).",
        ),
    ] = None,
    ssh_config: Annotated[
        Path | None, typer.Option("--ssh-config", help="ssh -F file for --slurm-via.")
    ] = None,
    drain: Annotated[bool, typer.Option("--drain", help="Drain the guilty nodes.")] = False,
    dry_run: Annotated[
        bool,
        typer.Option(
            "--check", "--dry-run", help="Say what --drain would drain (--dry-run: the same)."
        ),
    ] = False,
    watchdog: Annotated[
        float | None,
        typer.Option("--watchdog", help="Cancel a job whose output is silent this long (s)."),
    ] = None,
    pending_timeout: Annotated[
        float, typer.Option("--pending-timeout", help="Cancel a job still queued after (s).")
    ] = 1800.0,
    poll_s: Annotated[float, typer.Option("--poll", help="Seconds between polls.")] = 10.0,
    screens: Annotated[
        int | None,
        typer.Option(
            "--screens",
            min=1,
            help="Pair screens, each node with a new partner (default: the spec's "
            "thresholds.nccl_gate.screens).",
        ),
    ] = None,
    json_out: Annotated[bool, typer.Option("--json", help="Machine output on stdout.")] = False,
) -> int:
    """Climb the ladder (single, pairs, full; --rails) and localise what fails.

    Job scripts and outputs go to --workdir (default $CLUSTER_TOOL_GATE_RUNS_DIR/TIME,
    else ./gate-runs/TIME), which must be at the same path on this machine and the nodes: Slurm
    writes the outputs there. In the lab: <labdir>/shared/... (`lab status`: shared_dir).
    Exit 0 pass, 1 something failed, 2 bad input.
    """
    if ctx.invoked_subcommand is not None:
        return 0
    from cluster_tool import slurm as slurm_door
    from cluster_tool.commands._context import load_cluster
    from cluster_tool.gate.from_spec import gate_inputs
    from cluster_tool.gate.ladder import run_gate
    from cluster_tool.gate.runner import SlurmRunner
    from cluster_tool.nodes import select_gpu_nodes

    if spec is None:
        raise UsageError("gate: --spec FILE is required (or use `gate simulate`)")
    if drain and dry_run:
        raise UsageError("--drain and --dry-run are exclusive")
    cluster = load_cluster(spec)
    from cluster_tool.commands._context import reach_cluster

    via = reach_cluster(cluster, ssh_config=ssh_config, slurm_via=slurm_via, gate_workdir=workdir)
    ssh_config, slurm_via, workdir = via.ssh_config, via.slurm_via, via.gate_workdir
    inputs = gate_inputs(cluster)
    selected = select_gpu_nodes(cluster, nodes) if nodes else inputs.nodes
    runner = SlurmRunner(
        slurm=slurm_door.connect(slurm_via, ssh_config),
        workdir=(workdir or _default_workdir()).resolve(),
        params=inputs.params,
        gpus_per_node=inputs.thresholds.profile.gpus_per_node,
        watchdog_s=watchdog if watchdog is not None else inputs.watchdog_s,
        pending_s=pending_timeout,
        poll_s=poll_s,
    )
    options = dataclasses.replace(
        inputs.options,
        rungs=_rungs(rungs),
        rails=rails,
        rotation=rotation,
        drain=drain,
        dry_run=dry_run,
        screens=screens if screens is not None else inputs.options.screens,
    )
    result = run_gate(selected, runner, inputs.thresholds, inputs.params, inputs.topology, options)
    _print_result(result, json_out)
    raise typer.Exit(result.report.exit_code)


# The simulated gate's cost per node is flat (benchmarks/gate_simulate.py: 4,096 nodes in well
# under a minute of one core); no fleet the gate runs on is larger.
SIMULATE_MAX_NODES = 4096


@gate_app.command("simulate")
def simulate_command(
    nodes: Annotated[
        int, typer.Option("--nodes", min=2, max=SIMULATE_MAX_NODES, help="Fleet size.")
    ],
    bad: Annotated[int, typer.Option("--bad", min=0, help="Faulty nodes to plant.")],
    seed: Annotated[int, typer.Option("--seed", help="Random seed.")] = 0,
    fault_model: Annotated[
        str,
        typer.Option(
            "--fault-model",
            help="ideal: bad nodes far under the floor, paths on screen pairs. adversarial: "
            "hard, marginal (0.78-0.90x) and intermittent (30-70 % of jobs) nodes, a bad path "
            "anywhere and two stragglers.",
        ),
    ] = "adversarial",
    bad_links: Annotated[
        int | None,
        typer.Option(
            "--bad-links", min=0, help="Bad paths between healthy nodes (model's default)."
        ),
    ] = None,
    stragglers: Annotated[
        int | None,
        typer.Option("--stragglers", min=0, help="Slow but healthy nodes (model's default)."),
    ] = None,
    rails: Annotated[bool, typer.Option("--rails", help="Also run the per-rail rung.")] = False,
    screens: Annotated[
        int | None, typer.Option("--screens", min=1, help="Pair screens (the gate's default: 12).")
    ] = None,
    job_minutes: Annotated[
        float, typer.Option("--job-minutes", min=0.1, help="Minutes one job takes.")
    ] = 5.0,
    json_out: Annotated[bool, typer.Option("--json", help="Machine output on stdout.")] = False,
) -> int:
    """Run the whole gate on a simulated fleet with planted faults; print its cost and whom
    `cluster_tool.verdicts` would admit.

    Exit 0 when no planted fault the gate must catch would be admitted and no healthy node is
    blamed, 1 otherwise.
    """
    from ClusterShell.NodeSet import NodeSet

    from cluster_tool.gate.simulate import FAULT_MODELS, plant_fleet, simulate

    if fault_model not in FAULT_MODELS:
        raise UsageError(f"--fault-model: {fault_model!r}; choose from {', '.join(FAULT_MODELS)}")
    if bad > nodes:
        raise UsageError(f"--bad {bad} is more than --nodes {nodes}")
    try:
        fleet = plant_fleet(
            nodes,
            bad,
            seed=seed,
            bad_paths=bad_links,
            stragglers=stragglers,
            fault_model=fault_model,
            job_minutes=job_minutes,
        )
    except ValueError as exc:  # more bad links than healthy pairs to put them on
        raise UsageError(f"--bad-links: {exc}") from exc
    from cluster_tool.gate.ladder import GateOptions

    options = GateOptions(rails=rails)
    if screens is not None:
        options = dataclasses.replace(options, screens=screens)
    result, gate = simulate(fleet, options=options)
    if json_out:
        output.emit_json(result.to_json())
    else:
        out = output.stdout

        def hosts(names: list[str]) -> str:
            return str(NodeSet.fromlist(names)) if names else "-"

        out.print(
            f"{result.fault_model}: rounds={result.rounds} jobs={result.jobs} "
            f"gpu_hours={result.gpu_hours}"
        )
        out.print(
            "gpu_hours by rung: "
            + ", ".join(f"{rung}={hours:g}" for rung, hours in result.gpu_hours_by_rung.items())
        )
        for node, fault in result.faults.items():
            out.print(f"planted {node}: " + " ".join(f"{k}={v}" for k, v in fault.items()))
        for a, b in result.paths:
            out.print(f"planted path {a} <-> {b}")
        out.print(f"bad_nodes:    {hosts(result.bad_nodes)}")
        out.print(f"found:        {hosts(result.found)}")
        out.print(f"admitted_bad: {hosts(result.admitted_bad)}")
        out.print(f"blamed_good:  {hosts(result.blamed_good)}")
        out.print("recall: " + ", ".join(f"{k}={v}" for k, v in result.recall.items()))
        for f in gate.report.findings:
            if f.severity == "info":
                continue
            where = f.node or f.component
            out.print(output.severity_line(f.severity, f"{f.check:16} {where}: {f.message}"))
    return 0 if not result.admitted_bad and not result.blamed_good else 1


def register(app: typer.Typer) -> None:
    app.add_typer(gate_app, name="gate")
