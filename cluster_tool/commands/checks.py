"""`cluster-tool fabric check`, `cluster-tool validate`, `cluster-tool node-check`, `node-file`:
the health and wiring checks, run from captured text, over SSH, or on the node itself."""

import json
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from cluster_tool import output
from cluster_tool.errors import ParseError, UsageError

# The libraries are imported inside the commands: every run (Slurm's HealthCheckProgram on
# every node, every interval) pays only for the command it runs.
if TYPE_CHECKING:
    from cluster_tool.checks.node import NodeExpectations
    from cluster_tool.findings import Report

fabric_app = typer.Typer(
    name="fabric", help="The InfiniBand fabric against the cabling plan.", no_args_is_help=True
)

JsonOpt = Annotated[bool, typer.Option("--json", help="Machine output on stdout.")]
SpecOpt = Annotated[Path | None, typer.Option("--spec", help="The cluster spec.")]


def _read(path: Path, what: str) -> str:
    from cluster_tool.fileio import read_input_bytes

    # Tool output is kept as it came: bytes that are not UTF-8 are replaced, not refused.
    try:
        return read_input_bytes(path).decode("utf-8", errors="replace")
    except UsageError as exc:
        raise UsageError(f"{what} {exc}") from None


def _located(exc: ParseError, path: Path) -> UsageError:
    # The parsers name the line; the command knows the file.
    text = str(exc)
    if text.startswith("<input>"):
        text = f"{path}{text[len('<input>') :]}"
    return UsageError(text)


def _spec(path: Path | None, positional: Path | None = None):  # type: ignore[no-untyped-def]
    from cluster_tool.commands._context import load_cluster

    chosen = path or positional
    if chosen is None:
        raise UsageError("give the cluster spec: --spec FILE")
    return load_cluster(chosen)


def _print_report(report: "Report", json_out: bool, extra: dict[str, object] | None = None) -> None:
    if json_out:
        data = report.to_json()
        data.update(extra or {})
        output.emit_json(data)
        return
    out = output.stdout
    for f in report.findings:
        out.print(f"{f.severity.upper():7} {f.check:18} {f.message}", markup=False)
    s = report.summary
    counts = f"{s.get('errors', 0)} errors, {s.get('warnings', 0)} warnings"
    out.print(f"{report.status.upper()}: {counts}", markup=False)


@fabric_app.command("check")
def fabric_check(
    spec: SpecOpt = None,
    ibnetdiscover: Annotated[
        Path | None, typer.Option("--ibnetdiscover", help="ibnetdiscover output (a file).")
    ] = None,
    counters: Annotated[
        Path | None,
        typer.Option("--counters", help="ibqueryerrors or perfquery output, for fabric.errors."),
    ] = None,
    cabling: Annotated[
        Path | None,
        typer.Option("--cabling", help="A rendered cabling.csv (default: derived from the spec)."),
    ] = None,
    switch_links_csv: Annotated[
        Path | None,
        typer.Option("--switch-links", help="A rendered switch-links.csv (default: the spec's)."),
    ] = None,
    nodes: Annotated[
        str | None, typer.Option("--nodes", help="Only these nodes' cables (hostlist).")
    ] = None,
    json_out: JsonOpt = False,
) -> int:
    """The discovered fabric against the plan: exit 0 when no error finding, 1 otherwise."""
    from cluster_tool.checks.fabric import fabric_findings, parse_counters
    from cluster_tool.fabric.plan import plan_for, read_cabling_csv, read_switch_links_csv
    from cluster_tool.findings import Report
    from cluster_tool.nodes import select_gpu_nodes
    from cluster_tool.parsers.ibnetdiscover import parse_ibnetdiscover

    cluster = _spec(spec)
    if ibnetdiscover is None:
        raise UsageError("give the discovered fabric: --ibnetdiscover FILE")
    text = _read(ibnetdiscover, "--ibnetdiscover")
    try:
        discovered = parse_ibnetdiscover(text)
    except ParseError as exc:
        raise _located(exc, ibnetdiscover) from None
    found_counters = None
    if counters is not None:
        ctext = _read(counters, "--counters")
        try:
            found_counters = parse_counters(ctext)
        except ParseError as exc:
            raise _located(exc, counters) from None
    plan = plan_for(
        cluster,
        read_cabling_csv(cabling) if cabling else None,
        read_switch_links_csv(switch_links_csv) if switch_links_csv else None,
    )
    only = select_gpu_nodes(cluster, nodes) if nodes else None
    # The files are the operator's input (unreadable: exit 2 above); judged as validate --fabric
    # judges what the subnet manager showed, without counters when none were given.
    findings = fabric_findings(
        cluster,
        discovered,
        found_counters,
        host=cluster.fabric.subnet_manager,
        plan=plan,
        nodes=only,
        counters_required=False,
    )
    report = Report.from_findings(
        findings,
        {
            "switches": len(discovered.switches),
            "cas": len(discovered.cas),
            "planned_hca_cables": len(plan.rows),
            "planned_switch_links": len(plan.links),
        },
    )
    _print_report(report, json_out)
    return report.exit_code


def validate(
    spec_arg: Annotated[
        Path | None, typer.Argument(metavar="[SPEC]", help="The cluster spec (or --spec).")
    ] = None,
    spec: SpecOpt = None,
    health: Annotated[bool, typer.Option("--health", help="GPU/HCA/software health.")] = False,
    fabric: Annotated[bool, typer.Option("--fabric", help="Wiring and port counters.")] = False,
    nodes: Annotated[
        str | None, typer.Option("--nodes", help="Only these GPU nodes (hostlist).")
    ] = None,
    junit: Annotated[
        Path | None, typer.Option("--junit", help="Also write a JUnit XML file.")
    ] = None,
    save: Annotated[
        Path | None, typer.Option("--save", help="Save every raw output under this folder.")
    ] = None,
    replay: Annotated[
        Path | None, typer.Option("--from", help="Replay a saved capture; no SSH.")
    ] = None,
    concurrency: Annotated[
        int, typer.Option("--concurrency", help="Hosts probed at once.", min=1)
    ] = 32,
    ssh_config: Annotated[
        Path | None,
        typer.Option(
            "--ssh-config", help="OpenSSH config naming the hosts (default ~/.ssh/config)."
        ),
    ] = None,
    transport: Annotated[
        str, typer.Option("--transport", help="paramiko (default) or openssh.")
    ] = "paramiko",
    dcgm: Annotated[
        bool, typer.Option("--dcgm/--no-dcgm", help="Run `dcgmi diag -r 1` on every node.")
    ] = True,
    after_maintenance: Annotated[
        bool,
        typer.Option(
            "--after-maintenance",
            help="The whole fabric, then health + gate on --switch's nodes (or --nodes); "
            "writes a run record (see `validate-after`).",
        ),
    ] = False,
    switch: Annotated[
        str | None, typer.Option("--switch", help="With --after-maintenance: the leaf or spine.")
    ] = None,
    admit: Annotated[
        bool, typer.Option("--admit", help="With --after-maintenance: resume what is proven.")
    ] = False,
    gate: Annotated[
        bool, typer.Option("--gate/--no-gate", help="With --after-maintenance: the NCCL gate.")
    ] = True,
    admit_unproven: Annotated[
        bool,
        typer.Option(
            "--admit-unproven", help="With --after-maintenance --admit: see `validate-after`."
        ),
    ] = False,
    burn_in: Annotated[
        str | None,
        typer.Option(
            "--burn-in",
            metavar="DURATION",
            help="With --after-maintenance: after the gate, an NCCL soak of this length (20s, "
            "30m; `default`: 30 min) and `dcgmi diag -r 3` (see `validate-after`).",
        ),
    ] = None,
    via: Annotated[
        str,
        typer.Option(
            "--via",
            help="ssh: probe each node over SSH; slurm: node-check on every idle node as one "
            "Slurm job step (drained, busy or non-Slurm nodes still over SSH).",
        ),
    ] = "ssh",
    slurm_via: Annotated[
        str | None,
        typer.Option(
            "--slurm-via", help="With --via slurm: run srun over SSH on this host (the controller)."
        ),
    ] = None,
    workdir: Annotated[
        Path | None,
        typer.Option(
            "--workdir",
            help="With --via slurm: a folder the GPU nodes see at the same path (default the "
            "context's gate work folder); node files and records go below it.",
        ),
    ] = None,
    json_out: JsonOpt = False,
) -> int:
    """Health and fabric checks, read-only. Exit 0 pass, 1 failed, 3 unreachable."""
    if via not in ("ssh", "slurm"):
        raise UsageError("--via: ssh or slurm")
    if via == "ssh" and (slurm_via or workdir):
        raise UsageError("--slurm-via and --workdir go with --via slurm")
    if after_maintenance or switch or admit or admit_unproven:
        # The after-maintenance job (cluster_tool.workflows.jobs) owns this path.
        from cluster_tool.commands._context import validate_after_job
        from cluster_tool.context import Reach
        from cluster_tool.workflows.jobs import ValidateAfterJob

        chosen_spec = spec or spec_arg
        if not after_maintenance or chosen_spec is None:
            raise UsageError("--switch and --admit go with --after-maintenance and a spec")
        if via != "ssh":
            raise UsageError("--via slurm goes with a plain validate, not --after-maintenance")
        if health or fabric:
            # Honoured or refused, never ignored: this workflow always does both.
            raise UsageError(
                "--after-maintenance checks the whole fabric and the nodes' health; "
                "drop --health/--fabric"
            )
        job = ValidateAfterJob(
            chosen_spec, Reach(None, ssh_config, None, None, None), switch=switch, nodes=nodes,
            admit=admit, gate=gate, admit_unproven=admit_unproven, junit=junit, save=save,
            replay=replay, concurrency=concurrency, transport=transport, dcgm=dcgm,
            burn_in=burn_in,
        )  # fmt: skip
        return validate_after_job(job, json_out)
    if burn_in is not None:
        raise UsageError("--burn-in goes with --after-maintenance (plain validate runs no gate)")
    if not gate:
        raise UsageError("--no-gate goes with --after-maintenance (plain validate runs no gate)")
    from cluster_tool.nodes import select_gpu_nodes
    from cluster_tool.remote.fanout import transport_named
    from cluster_tool.workflows.collect import junit_xml, run_validate

    cluster = _spec(spec, spec_arg)
    if not health and not fabric:
        health = fabric = True
    if save is not None and replay is not None:
        raise UsageError("--save and --from exclude each other")
    if via == "slurm" and (save is not None or replay is not None):
        raise UsageError(
            "--via slurm gathers node-check records, not probe captures: drop --from/--save"
        )
    slurm = None
    if replay is None:
        from cluster_tool.commands._context import reach_cluster

        reached = reach_cluster(
            cluster, ssh_config=ssh_config, slurm_via=slurm_via, gate_workdir=workdir
        )
        ssh_config = reached.ssh_config
        if via == "slurm":
            from cluster_tool.slurm import connect

            if reached.gate_workdir is None:
                raise UsageError("--via slurm needs --workdir, a folder the GPU nodes share")
            slurm, workdir = connect(reached.slurm_via, ssh_config), reached.gate_workdir
    from cluster_tool.remote.known_hosts import KnownHosts

    # Nodes are reached with the keys the cluster recorded (the converge's first contact).
    chosen = transport_named(transport, ssh_config, KnownHosts.for_cluster(cluster.name))
    selected = select_gpu_nodes(cluster, nodes or None)

    def progress(result: object) -> None:
        host = getattr(result, "host", "?")
        err = getattr(result, "error", None)
        output.progress(f"{host}: {'unreachable: ' + err if err else 'collected'}")

    result = run_validate(
        cluster,
        health=health,
        fabric=fabric,
        nodes=selected if nodes else None,
        transport=chosen,
        concurrency=concurrency,
        save=save,
        replay=replay,
        dcgm=dcgm,
        on_done=progress,
        slurm=slurm,
        shared=workdir,
    )
    if junit is not None:
        from cluster_tool.fileio import atomic_write

        junit.parent.mkdir(parents=True, exist_ok=True)
        atomic_write(junit, output.redact_encoded(junit_xml(result)))
    step = result.report.summary.get("slurm_step")
    if step and not json_out:
        # Which nodes the step read and which SSH read instead, before the findings.
        output.stdout.print(
            f"slurm step: {step['nodes']} node(s), records in {step['records']} ({step['srun']})",
            markup=False,
        )
        for name, why in step["over_ssh"].items():
            output.stdout.print(f"over ssh: {name}: {why}", markup=False)
    _print_report(result.report, json_out, {"unreachable": result.unreachable})
    return result.exit_code


def node_check(
    slurm: Annotated[
        bool,
        typer.Option("--slurm", help="As Slurm's HealthCheckProgram: drain on failure, resume."),
    ] = False,
    node_file: Annotated[
        Path | None,
        typer.Option("--node-file", help="Node file (default /etc/cluster-tool/node.json)."),
    ] = None,
    spec: Annotated[
        Path | None, typer.Option("--spec", help="Instead of a node file: the spec and --node.")
    ] = None,
    node: Annotated[
        str | None, typer.Option("--node", help="This node's name (default: the node file's).")
    ] = None,
    dcgm: Annotated[bool, typer.Option("--dcgm", help="Also run `dcgmi diag -r 1`.")] = False,
    versions: Annotated[
        bool,
        typer.Option(
            "--versions", help="Also report what the node runs (validate --via slurm judges it)."
        ),
    ] = False,
    dry_run: Annotated[
        bool, typer.Option("--dry-run", help="With --slurm: say what it would do, change nothing.")
    ] = False,
    prolog: Annotated[
        bool,
        typer.Option(
            "--prolog",
            help="As Slurm's Prolog: the fast checks; a failing node is drained and the job "
            "refused (exit 1); keeps the job's Xid and counter baseline for --epilog.",
        ),
    ] = False,
    epilog: Annotated[
        bool,
        typer.Option(
            "--epilog",
            help="As Slurm's Epilog: drain on Xids and HCA counter errors the job's run added.",
        ),
    ] = False,
    job_id: Annotated[
        str | None,
        typer.Option("--job-id", help="With --prolog/--epilog (default $SLURM_JOB_ID)."),
    ] = None,
    timeout: Annotated[
        float | None,
        typer.Option(
            "--timeout",
            min=1,
            help="Seconds the probes may take (default 600; 30 with --prolog/--epilog).",
        ),
    ] = None,
    json_out: JsonOpt = False,
) -> int:
    """The node checks on this node. Exit 0 healthy, 1 a check failed (with --prolog: the job
    is refused)."""
    from dataclasses import replace

    from cluster_tool.checks.node import NODE_FILE, expectations_for, read_node_file
    from cluster_tool.findings import Report
    from cluster_tool.remote.fanout import TransportError
    from cluster_tool.slurm import SlurmCLI
    from cluster_tool.workflows.node_check import (
        SlurmAction,
        health_drain_reason,
        local_node_name,
        run_node_check,
        slurm_health_action,
    )

    if sum((slurm, prolog, epilog)) > 1:
        raise UsageError("node-check: --slurm, --prolog and --epilog are one each")
    if spec is not None:
        expect = expectations_for(_spec(spec), node or local_node_name())
    else:
        expect = read_node_file(node_file or NODE_FILE)
        if node:
            expect = replace(expect, node=node)
    if prolog or epilog:
        return _job_check(expect, prolog=prolog, job_id=job_id, timeout=timeout, json_out=json_out)
    try:
        checked = run_node_check(expect, dcgm=dcgm, timeout=timeout or 600.0)
    except TransportError as exc:
        raise UsageError(f"node-check: the probes did not run: {exc}") from None
    findings = checked.findings
    report = Report.from_findings(findings, {"node": expect.node})
    extra: dict[str, object] = {}
    if versions:
        from cluster_tool.workflows.via_slurm import node_versions_record

        extra["versions"] = node_versions_record(expect.node)
    if slurm:
        if dry_run:
            reason = health_drain_reason(expect.node, findings)
            action = SlurmAction("drain" if reason else "resume-if-own", expect.node, reason)
        else:
            action = slurm_health_action(expect.node, findings, SlurmCLI(), not_run=checked.not_run)
        extra["slurm"] = action.to_json()
    _print_report(report, json_out, extra)
    if slurm and not json_out:
        a = extra["slurm"]
        assert isinstance(a, dict)
        output.stdout.print(
            f"slurm: {a['action']} {a['node']}" + (f" ({a['reason']})" if a["reason"] else ""),
            markup=False,
        )
    return report.exit_code


def _job_check(
    expect: "NodeExpectations",
    *,
    prolog: bool,
    job_id: str | None,
    timeout: float | None,
    json_out: bool,
) -> int:
    """node-check --prolog / --epilog. The prolog's exit is 1 on a failing node (Slurm then
    requeues the job); the epilog drains by itself and exits 0, so that Slurm's own `Epilog
    error` drain does not follow; an error that stopped either (probes hung, Slurm refused the
    drain) exits non-zero and Slurm drains the node itself."""
    import os

    from cluster_tool.findings import Report
    from cluster_tool.remote.fanout import TransportError
    from cluster_tool.slurm import SlurmCLI
    from cluster_tool.workflows.job_checks import run_epilog, run_prolog

    job = job_id or os.environ.get("SLURM_JOB_ID")
    mode = "--prolog" if prolog else "--epilog"
    if not job:
        raise UsageError(f"node-check {mode}: no job id (--job-id, or $SLURM_JOB_ID from Slurm)")
    run = run_prolog if prolog else run_epilog
    try:
        check = run(expect, job, SlurmCLI(), timeout=timeout or 30.0)
    except TransportError as exc:
        raise UsageError(f"node-check {mode}: the probes did not run: {exc}") from None
    report = Report.from_findings(check.findings, {"node": expect.node, "job": job})
    action = check.action.to_json()
    _print_report(report, json_out, {"slurm": action, "notes": check.notes})
    if not json_out:
        output.stdout.print(
            f"slurm: {action['action']} {action['node']}"
            + (f" ({action['reason']})" if action["reason"] else ""),
            markup=False,
        )
    return 1 if check.refused else 0


def _rendered_spec(inventory: Path):  # type: ignore[no-untyped-def]
    """The spec a rendered inventory was made from (its spec.json), as rendered: the model's
    validation, not the spec file's cross-checks, which its owner may have added to (a lab puts
    its SSH settings in ansible_vars)."""
    from pydantic import ValidationError

    from cluster_tool.fileio import read_input_bytes
    from cluster_tool.spec.models import Cluster

    path = inventory / "spec.json"
    if not path.is_file():
        raise UsageError(f"{path}: no rendered spec (cluster-tool render writes it)")
    try:
        return Cluster.model_validate_json(read_input_bytes(path))
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"])
        raise UsageError(f"{path}: not a rendered spec: {where}: {first['msg']}") from None


def node_file(
    node: Annotated[str, typer.Argument(help="The GPU node the file is for.")],
    spec: SpecOpt = None,
    inventory: Annotated[
        Path | None,
        typer.Option(
            "--inventory", help="Instead of --spec: a rendered inventory (its spec.json)."
        ),
    ] = None,
    out: Annotated[
        Path | None, typer.Option("-o", "--output", help="Write here (default: stdout).")
    ] = None,
    json_out: JsonOpt = False,
) -> int:
    """The node file `node-check` reads (/etc/cluster-tool/node.json) for one node."""
    from cluster_tool.checks.node import expectations_for

    cluster = _rendered_spec(inventory) if inventory is not None else _spec(spec)
    data = expectations_for(cluster, node).to_node_file()
    text = json.dumps(data, indent=2, sort_keys=True) + "\n"
    if out is not None:
        from cluster_tool.fileio import atomic_write

        out.parent.mkdir(parents=True, exist_ok=True)
        atomic_write(out, text, mode=0o644)  # installed as /etc/cluster-tool/node.json
        if json_out:
            output.emit_json({"written": str(out), "node": node})
        return 0
    output.emit_json(data)
    return 0


def register(app: typer.Typer) -> None:
    app.add_typer(fabric_app, name="fabric")
    app.command("validate")(validate)
    app.command("node-check")(node_check)
    app.command("node-file")(node_file)
