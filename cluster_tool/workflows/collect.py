"""Collection for `validate`: the health probes from GPU nodes and the fabric's from the
subnet-manager host (over SSH, or replayed from a saved capture), judged by the checks, in one
report with what did not run and why.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from cluster_tool.checks.counters import CounterSnapshot, snapshot
from cluster_tool.checks.fabric import fabric_findings
from cluster_tool.checks.fleet_versions import node_versions
from cluster_tool.checks.node import FleetExpectations, check_node
from cluster_tool.checks.versions import NodeVersions, check_fleet_outliers, check_node_versions
from cluster_tool.errors import EXIT_UNREACHABLE, ParseError, UsageError
from cluster_tool.findings import Finding, Report
from cluster_tool.parsers.ibcounters import parse_ibqueryerrors
from cluster_tool.probes import Probe, ProbeOutput, Readings
from cluster_tool.probes.fabric import FABRIC_PROBES
from cluster_tool.probes.node import health_probes
from cluster_tool.probes.versions import PROBE_NAME as VERSIONS_PROBE
from cluster_tool.registry import (
    CHECKS,
    FABRIC_CHECKS,
    NEEDS,
    NODE_CHECKS,
    VERSION_CHECKS,
    node_checks_not_run,
)
from cluster_tool.remote.fanout import (
    HostResult,
    Target,
    Transport,
    collect,
    load_capture,
    save_capture,
)
from cluster_tool.report.junit import validate_junit
from cluster_tool.slurm import SlurmSteps
from cluster_tool.spec.models import Cluster
from cluster_tool.workflows.via_slurm import StepOutcome, run_node_checks_via_slurm

__all__ = [
    "ValidateResult",
    "junit_xml",
    "run_validate",
    "skipped_checks",
]


@dataclass
class ValidateResult:
    """The report, which hosts answered, and what ran (for JUnit and run records)."""

    report: Report
    results: dict[str, HostResult]
    nodes: list[str]
    fabric_host: str | None
    unreachable: list[str] = field(default_factory=list)
    # Per JUnit suite (node or `fabric`): the checks that did not run, and why.
    skipped: dict[str, dict[str, str]] = field(default_factory=dict)
    # The port counters this collection read, for a run that judges later reads as deltas.
    counters: CounterSnapshot | None = None

    @property
    def exit_code(self) -> int:
        """3 when a host could not be reached (the contract), else the report's 0/1."""
        return EXIT_UNREACHABLE if self.unreachable else self.report.exit_code


def run_validate(
    cluster: Cluster,
    *,
    health: bool = True,
    fabric: bool = True,
    nodes: Sequence[str] | None = None,
    transport: Transport | None = None,
    concurrency: int = 32,
    save: Path | None = None,
    replay: Path | None = None,
    dcgm: bool = True,
    on_done: Callable[[HostResult], None] | None = None,
    counters_before: CounterSnapshot | None = None,
    rebooted: Collection[str] = (),
    slurm: SlurmSteps | None = None,
    shared: Path | None = None,
) -> ValidateResult:
    """Collect (or replay), check, report. `nodes` narrows health and the host-cable part of
    the fabric check; leaf-spine links are always checked in full. With `counters_before` (the
    run's snapshot from before its traffic) port counters are judged as deltas; without, the
    LinkDowned of `rebooted` nodes' cables is not held against them. With `slurm` (and `shared`,
    a folder the GPU nodes see at the same path) the node checks run as one Slurm job step
    (`cluster_tool.workflows.via_slurm`); the nodes it cannot run on are read over SSH."""
    if not health and not fabric:
        raise UsageError("nothing to validate: give --health, --fabric or both")
    started = time.monotonic()
    selected = list(nodes) if nodes is not None else [n.name for n in cluster.gpu_nodes()]
    fabric_host = cluster.fabric.subnet_manager if fabric else None
    step: StepOutcome | None = None
    over_ssh = selected
    if health and slurm is not None:
        if replay is not None or save is not None:
            raise UsageError(
                "--via slurm gathers node-check records, not probe captures: drop --from/--save"
            )
        if shared is None:
            raise UsageError("--via slurm needs --workdir, a folder the GPU nodes share")
        step = run_node_checks_via_slurm(cluster, selected, slurm, shared, dcgm=dcgm)
        over_ssh = [n for n in selected if n in step.to_ssh]
        if on_done is not None:
            for name in selected:
                if name not in step.to_ssh:
                    on_done(HostResult(name, error=step.no_record.get(name)))
    jobs: dict[str, list[Probe]] = {}
    if health:
        for name in over_ssh:
            jobs.setdefault(name, []).extend(health_probes(dcgm=dcgm))
    if fabric_host is not None:
        jobs.setdefault(fabric_host, []).extend(FABRIC_PROBES)

    if replay is not None:
        results = load_capture(replay, jobs)
        for name in jobs:
            results.setdefault(
                name, HostResult(name, error=f"not in the capture {replay}", probes=())
            )
    elif not jobs:
        results = {}  # every node answered in the Slurm step, and no fabric asked for
    else:
        if transport is None:
            raise UsageError("no transport to reach the hosts")
        address = {h.name: h.address for h in cluster.hosts()}
        results = collect(
            [(Target(name, address.get(name)), probes) for name, probes in jobs.items()],
            transport,
            concurrency=concurrency,
            on_done=on_done,
        )
        if fabric_host is not None:
            _rerun_crashed(results, Target(fabric_host, address.get(fabric_host)), transport)
        if save is not None:
            save_capture(save, results)

    findings: list[Finding] = []
    if step is not None:
        # A stepped node is judged by its own node-check; one without a readable record did
        # not answer, as a host that SSH could not reach.
        for name, why in step.no_record.items():
            results[name] = HostResult(name, error=why)
        for name in step.findings:
            results[name] = HostResult(name)
    order: dict[str, int] = {}
    for n in [*jobs, *(n for n in selected if n not in jobs)]:
        order.setdefault(n, len(order))
    unreachable = sorted((n for n, r in results.items() if not r.reachable), key=order.__getitem__)
    for name in unreachable:
        stepped = step is not None and name in step.no_record
        findings.append(
            Finding(
                check="os.unreachable",
                node=name,
                expected="a node-check record from the Slurm step"
                if stepped
                else "reachable over SSH",
                observed=results[name].error,
                message=f"{name}: unreachable: {results[name].error}",
            )
        )
    unread_versions: dict[str, str] = {}
    if health:
        expectations = FleetExpectations(cluster)
        versions: dict[str, NodeVersions | str] = {}
        for name in over_ssh:
            result = results[name]
            if not result.reachable:
                continue
            # One reading of each probe per node, for its health checks and its versions; gone
            # with the node, so a fleet's parsed outputs are never all held at once.
            readings = Readings(result.outputs)
            findings += check_node(expectations(name), readings)
            versions[name] = _node_versions(name, readings)
        if step is not None:
            for node_findings in step.findings.values():
                findings += node_findings
        version_findings, unread_versions = _version_findings(cluster, versions, step)
        findings += version_findings
    read: CounterSnapshot | None = None
    if fabric_host is not None and results[fabric_host].reachable:
        outputs = results[fabric_host].outputs
        read_at = time.time()
        findings += fabric_findings(
            cluster,
            outputs.get("ibnetdiscover"),
            outputs.get("ibqueryerrors"),
            host=fabric_host,
            nodes=nodes,
            counters_before=counters_before,
            read_at=read_at,
            rebooted=rebooted,
        )
        read = _counter_snapshot(outputs.get("ibqueryerrors"), read_at)
    summary: dict[str, object] = {
        "nodes": len(selected) if health else 0,
        "unreachable": len(unreachable),
        "fabric_host": fabric_host,
        "health": health,
        "fabric": fabric,
        "elapsed_s": round(time.monotonic() - started, 2),
        "replayed_from": str(replay) if replay is not None else None,
    }
    if step is not None:
        summary["via"] = "slurm"
        summary["slurm_step"] = {
            "nodes": len(selected) - len(step.to_ssh),
            "records": str(step.folder) if step.folder is not None else None,
            "srun": step.srun,
            "elapsed_s": step.elapsed_s,
            "over_ssh": step.to_ssh,
        }
    report = Report.from_findings(_worst_first(findings), summary)
    skipped = skipped_checks(
        findings,
        nodes=selected if health else [],
        unreachable={n: results[n].error or "unreachable" for n in unreachable},
        fabric_host=fabric_host,
        dcgm=dcgm,
        collected={n: set(results[n].outputs) for n in over_ssh if n in results},
    )
    for name, why in unread_versions.items():
        skipped.setdefault(name, {}).update({c: why for c in VERSION_CHECKS})
    return ValidateResult(report, results, selected, fabric_host, unreachable, skipped, read)


def _node_versions(name: str, readings: Readings) -> NodeVersions | str:
    """What the version probe read on one node, or why it was not judged: a probe that did not
    answer (timed out, failed, printed nothing), a capture made before the probe rode with the
    health probes, or output that could not be read (its version checks did not run)."""
    out = readings.outputs.get(VERSIONS_PROBE)
    if out is None or out.rc != 0 or not out.stdout.strip():
        # Not judged is not passed: a node whose probe timed out may run an unpinned driver.
        why = "not collected" if out is None else f"exit {out.rc}" if out.rc else "no output"
        return f"the version probe did not answer ({why})"
    try:
        return node_versions(name, readings)
    except ParseError as exc:
        return f"the version probe's output: {exc}"


def _version_findings(
    cluster: Cluster,
    versions: Mapping[str, NodeVersions | str],
    step: StepOutcome | None = None,
) -> tuple[list[Finding], dict[str, str]]:
    """What the nodes' version probes read (`_node_versions`), judged as `cluster-tool versions`
    judges it: drift from the spec's pins and broken matrix rules per node, outliers across the
    nodes read. Returns the findings and the nodes not judged, with why. The nodes of a Slurm
    step (`step`) report what they run themselves."""
    read = [v for v in versions.values() if isinstance(v, NodeVersions)]
    unread = {name: v for name, v in versions.items() if isinstance(v, str)}
    if step is not None:
        read += step.versions.values()
        unread.update(step.unread_versions)
    if not read:
        return [], unread
    return check_node_versions(cluster, read) + check_fleet_outliers(read), unread


def _rerun_crashed(results: dict[str, HostResult], target: Target, transport: Transport) -> None:
    """A fabric tool killed by a signal (exit 128+N: ibqueryerrors has crashed with SIGSEGV while
    ports changed state under it) is run once more; what the second run gives is kept, so a
    second crash still answers as unread."""
    result = results.get(target.name)
    if result is None or not result.reachable:
        return
    crashed = [p for p in FABRIC_PROBES if (o := result.outputs.get(p.name)) and o.rc >= 128]
    if not crashed:
        return
    again = collect([(target, crashed)], transport).get(target.name)
    if again is not None and again.reachable:
        result.outputs.update(
            {p.name: again.outputs[p.name] for p in crashed if p.name in again.outputs}
        )


def _counter_snapshot(out: ProbeOutput | None, read_at: float) -> CounterSnapshot | None:
    """The ibqueryerrors read as a snapshot; None when it printed nothing or nothing readable
    (the fabric check already said so as ib.counters-unread). Its exit status is not asked:
    like the fabric check, what it printed is read (ibqueryerrors exits 1 whenever it lists a
    port over threshold: `rc = print_summary(); if (rc) rc = 1;` in infiniband-diags)."""
    if out is None or not out.stdout.strip():
        return None
    try:
        return snapshot(parse_ibqueryerrors(out.stdout), read_at)
    except ParseError:
        return None


def skipped_checks(
    findings: Sequence[Finding],
    *,
    nodes: Sequence[str],
    unreachable: dict[str, str],
    fabric_host: str | None,
    dcgm: bool,
    collected: Mapping[str, Collection[str]] | None = None,
) -> dict[str, dict[str, str]]:
    """The checks that did not run, per suite, and why: everything on a host that did not
    answer, the DCGM checks without --dcgm, the checks whose probe's output is not among the
    node's `collected` probes, and the checks whose probe failed (`NEEDS`;
    `registry.node_checks_not_run`)."""
    skipped: dict[str, dict[str, str]] = {}
    # Each node's own findings, gathered once: not every finding of the fleet for every node.
    own: dict[str | None, list[Finding]] = {}
    for f in findings:
        own.setdefault(f.node, []).append(f)
    for node in nodes:
        mine = skipped.setdefault(node, {})
        if node in unreachable:
            why = f"unreachable: {unreachable[node]}"
            unrun = (*NODE_CHECKS, *VERSION_CHECKS)
            mine.update({c: why for c in unrun if c != "os.unreachable"})
            continue
        seen = None if collected is None else collected.get(node)
        mine.update(node_checks_not_run(node, own.get(node, ()), seen))
        if not dcgm:
            mine.update({c: "--no-dcgm" for c in NODE_CHECKS if CHECKS[c].probe == "dcgmi-diag"})
    if fabric_host is not None:
        fab: dict[str, str] = {}
        if fabric_host in unreachable:
            fab = {c: f"{fabric_host} unreachable" for c in FABRIC_CHECKS}
        for f in own.get(fabric_host, ()):
            if f.fails and f.check in NEEDS:
                fab.update({c: f"{f.check}: {f.message}" for c in NEEDS[f.check]})
        skipped["fabric"] = fab
    return {suite: why for suite, why in skipped.items() if why}


_RANK = {"error": 0, "warning": 1, "info": 2}


def _worst_first(findings: list[Finding]) -> list[Finding]:
    return sorted(findings, key=lambda f: _RANK[f.severity])


def junit_xml(result: ValidateResult) -> str:
    """JUnit XML of a validate run (`cluster_tool.report.junit.validate_junit`)."""
    return validate_junit(
        result.report, nodes=result.nodes, fabric_host=result.fabric_host, skipped=result.skipped
    )
