"""Slurm's Prolog and Epilog on a GPU node (`node-check --prolog`, `node-check --epilog`).

The prolog runs the fast checks before a job and refuses a failing node: it drains it with
node-check's own reason (`cluster-tool: ID ...`, which node-check lifts once the node is
healthy) and exits non-zero, and Slurm requeues the job (SchedMD's Prolog and Epilog Guide,
Failure Handling). Either way it keeps the job's baseline: the kernel log's Xid lines and the
HCA port counters. The epilog judges what the job's run added to them (new Xids, a link that
went down, error counters over the spec's per-hour limits) and drains with
`cluster-tool epilog: ID ...` (cluster_tool.drains), which node-check does not lift: it cannot
re-prove a delta. Neither calls a Slurm command unless the node failed: the guide asks these
scripts to stay short, and a Slurm command from every node of every job loads slurmctld.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from cluster_tool.admission import Door
from cluster_tool.checks.counters import COUNTER_MAX, LINK_DOWNED, _allowed, _limits
from cluster_tool.checks.health import check_xids
from cluster_tool.checks.node import NodeExpectations, check_node
from cluster_tool.drains import Owner, epilog_reason
from cluster_tool.errors import ParseError, UsageError
from cluster_tool.findings import Finding
from cluster_tool.parsers.kernel_log import XidEvent
from cluster_tool.probes import Probe, ProbeOutput, lines
from cluster_tool.probes.host import HOST_PROBES
from cluster_tool.probes.node import (
    HEALTH_PROBES,
    DcgmiDiag,
    KernelLog,
    Lspci,
    Mlxlink,
    NvlinkErrorCounters,
)
from cluster_tool.probes.signals import PortCounters
from cluster_tool.probes.versions import Versions
from cluster_tool.remote.fanout import LocalTransport, Target, Transport, TransportError, collect
from cluster_tool.slurm import Slurm
from cluster_tool.workflows.node_check import (
    SlurmAction,
    health_drain_reason,
    slurm_health_action,
)

__all__ = [
    "JOB_STATE_DIR",
    "JobBaseline",
    "JobCheck",
    "judge_job",
    "probes_for_prolog",
    "run_epilog",
    "run_prolog",
]

# Where the prolog leaves each job's baseline for the epilog (tmpfs: a reboot ends the job too).
JOB_STATE_DIR = Path("/run/cluster-tool/jobs")


def probes_for_prolog() -> tuple[Probe, ...]:
    """The fast checks a job waits for: GPUs (nvidia-smi -q, topology), HCAs (ibstat), the
    kernel log, the loaded modules, the NCCL configuration; not DCGM's diag, mlxlink's per-port
    reads, lspci or the NVLink counters (HealthCheckProgram runs those between jobs)."""
    slow = {DcgmiDiag.name, Mlxlink.name, Lspci.name, NvlinkErrorCounters.name, Versions.name}
    # What the node is made of does not change under a job: validate and node-check read it.
    slow |= {p.name for p in HOST_PROBES}
    return tuple(p for p in HEALTH_PROBES if p.name not in slow)


def _xid_key(event: XidEvent) -> str:
    """One kernel line, the same in the prolog's read and the epilog's."""
    when = event.uptime_s if event.uptime_s is not None else event.timestamp
    return f"{event.kind}|{event.code}|{event.pci_bus_id}|{when}|{event.message}"


@dataclass(frozen=True)
class JobBaseline:
    """What the node showed when a job began: the kernel log's Xid lines and every HCA's
    port counters (sysfs), for the epilog to judge what the job's run added."""

    job_id: str
    taken_at: float
    xids: frozenset[str]
    counters: Mapping[str, Mapping[str, int]]

    def to_json(self) -> dict[str, Any]:
        return {
            "job_id": self.job_id,
            "taken_at": self.taken_at,
            "xids": sorted(self.xids),
            "counters": {hca: dict(c) for hca, c in sorted(self.counters.items())},
        }

    @classmethod
    def from_json(cls, data: Any) -> JobBaseline:
        """ValueError when `data` is not a baseline."""
        try:
            return cls(
                job_id=str(data["job_id"]),
                taken_at=float(data["taken_at"]),
                xids=frozenset(str(x) for x in data["xids"]),
                counters={
                    str(h): {str(k): int(v) for k, v in c.items()}
                    for h, c in data["counters"].items()
                },
            )
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            raise ValueError(f"not a job baseline: {exc!r}") from None


@dataclass(frozen=True)
class JobCheck:
    """What the prolog or epilog found and did. `refused`: the prolog's exit is non-zero."""

    findings: list[Finding]
    action: SlurmAction
    refused: bool = False
    notes: list[str] = field(default_factory=list)


def _baseline_path(state_dir: Path, job_id: str) -> Path:
    if not job_id.isdigit():  # SLURM_JOB_ID (the array task's own id too) is a number
        raise UsageError(f"job id {job_id!r} is not a Slurm job id")
    return state_dir / f"{job_id}.json"


def _read_counters(outputs: Mapping[str, ProbeOutput]) -> dict[str, dict[str, int]] | None:
    out = outputs.get(PortCounters.name)
    if out is None or out.rc != 0:
        return None
    try:
        counters: dict[str, dict[str, int]] = PortCounters().process(out.stdout.splitlines())
    except ParseError:
        return None
    return counters


def _read_xids(outputs: Mapping[str, ProbeOutput]) -> list[XidEvent] | None:
    out = outputs.get(KernelLog.name)
    if out is None or out.rc != 0:
        return None
    try:
        return KernelLog().process(lines(out.stdout)).xids
    except ParseError:
        return None


def run_prolog(
    expect: NodeExpectations,
    job_id: str,
    slurm: Slurm,
    *,
    transport: Transport | None = None,
    state_dir: Path = JOB_STATE_DIR,
    timeout: float = 30.0,
    clock: Callable[[], float] = time.time,
) -> JobCheck:
    """The fast checks before job `job_id`: on an error the node is drained with node-check's
    reason (unless someone else's drain holds it) and the job refused; either way the job's
    baseline is kept for the epilog. TransportError when the probes did not finish."""
    from cluster_tool.fileio import atomic_write

    path = _baseline_path(state_dir, job_id)
    transport = transport or LocalTransport()
    probes = (*probes_for_prolog(), PortCounters())
    result = collect([(Target(expect.node), probes)], transport, concurrency=1, timeout=timeout)[
        expect.node
    ]
    if not result.reachable:
        raise TransportError(result.error or "probes failed")
    findings = check_node(expect, result.outputs)
    xids = _read_xids(result.outputs) or []
    counters = _read_counters(result.outputs) or {}
    baseline = JobBaseline(job_id, clock(), frozenset(_xid_key(e) for e in xids), counters)
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    atomic_write(path, json.dumps(baseline.to_json()))
    if health_drain_reason(expect.node, findings) is None:
        return JobCheck(findings, SlurmAction("none", expect.node))  # no Slurm call
    action = slurm_health_action(expect.node, findings, slurm)
    return JobCheck(findings, action, refused=True)


def judge_job(
    expect: NodeExpectations,
    baseline: JobBaseline,
    xids: list[XidEvent] | None,
    counters: Mapping[str, Mapping[str, int]] | None,
    now: float,
) -> list[Finding]:
    """What the job's run added since `baseline`: new Xid lines (check_xids: the spec's fatal
    codes are errors), a compute HCA's LinkDownedCounter climbing (link.flap) or its error
    counters climbing faster than the spec's per-hour limits allow over the job (link.errors)."""
    node, t = expect.node, expect.thresholds
    findings: list[Finding] = []
    if xids is not None:
        new = [e for e in xids if _xid_key(e) not in baseline.xids]
        findings += check_xids(node, expect.profile, t, new)
    if counters is None:
        return findings
    hours = max(now - baseline.taken_at, 1.0) / 3600
    limits = _limits(t)
    job = f"during job {baseline.job_id}"
    for hca in (h.device for h in expect.profile.compute_hcas):
        was, is_ = baseline.counters.get(hca), counters.get(hca)
        if was is None or is_ is None:
            continue
        grew: dict[str, int] = {}
        for name, limit in limits.items():
            a, b = was.get(name), is_.get(name)
            if a is None or b is None or b <= a:
                continue  # not read, unchanged, or cleared during the job: nothing to judge
            top = COUNTER_MAX.get(name)
            if b - a > _allowed(limit, hours) or (top is not None and b >= top > a):
                grew[name] = b - a
        downs = grew.pop(LINK_DOWNED, None)
        if downs is not None:
            findings.append(
                Finding(
                    check="link.flap",
                    node=node,
                    component=hca,
                    expected="LinkDownedCounter unchanged during the job",
                    observed=f"+{downs}",
                    message=f"{node} {hca}: LinkDownedCounter +{downs} {job}",
                )
            )
        if grew:
            what = ", ".join(f"{name} +{n}" for name, n in sorted(grew.items()))
            findings.append(
                Finding(
                    check="link.errors",
                    node=node,
                    component=hca,
                    expected="within the spec's per-hour limits",
                    observed=what,
                    message=f"{node} {hca}: {what} {job}",
                )
            )
    return findings


def run_epilog(
    expect: NodeExpectations,
    job_id: str,
    slurm: Slurm,
    *,
    transport: Transport | None = None,
    state_dir: Path = JOB_STATE_DIR,
    timeout: float = 30.0,
    clock: Callable[[], float] = time.time,
) -> JobCheck:
    """After job `job_id`: judge what its run added since the prolog's baseline and drain the
    node with `cluster-tool epilog: ...` on an error (someone else's drain is left alone).
    Without a baseline (no prolog ran) nothing is judged: the node's state before the job is
    unknown, and node-check judges the whole log anyway."""
    path = _baseline_path(state_dir, job_id)
    node = expect.node
    try:
        baseline = JobBaseline.from_json(json.loads(path.read_text()))
    except FileNotFoundError:
        return JobCheck([], SlurmAction("none", node), notes=[f"no baseline for job {job_id}"])
    except ValueError as exc:
        path.unlink(missing_ok=True)
        return JobCheck([], SlurmAction("none", node), notes=[f"{path}: {exc}"])
    transport = transport or LocalTransport()
    probes = (KernelLog(), PortCounters())
    result = collect([(Target(node), probes)], transport, concurrency=1, timeout=timeout)[node]
    if not result.reachable:
        raise TransportError(result.error or "probes failed")
    xids, counters = _read_xids(result.outputs), _read_counters(result.outputs)
    notes = [
        f"{what} not read"
        for what, v in (("kernel log", xids), ("counters", counters))
        if v is None
    ]
    findings = judge_job(expect, baseline, xids, counters, clock())
    path.unlink(missing_ok=True)
    errors = [f for f in findings if f.fails]
    if not errors:
        return JobCheck(findings, SlurmAction("none", node), notes=notes)
    first = errors[0]
    text = first.message.removeprefix(f"{node} {first.component}: ").removeprefix(f"{node}: ")
    more = f" (+{len(errors) - 1} more)" if len(errors) > 1 else ""
    reason = epilog_reason(first.check, first.component, text + more)
    # Through the door: never over another's reason (an operator's, the watcher's Xid).
    door = Door(slurm, Owner.EPILOG)
    state = door.look([node]).get(node)
    previous = state.reason if state is not None and state.drained else None
    if not door.hold([node], reason) and previous != reason:
        return JobCheck(findings, SlurmAction("left", node, reason, previous), notes=notes)
    return JobCheck(findings, SlurmAction("drain", node, reason, previous), notes=notes)
