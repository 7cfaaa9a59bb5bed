"""One watch cycle: read every GPU node's cheap signals and the fabric's port counters, judge
what changed since the last cycle, name stragglers of running jobs, and act by policy.

Detect, then act, as NVSentinel does for Kubernetes, but through Slurm's own states: the
watcher's drain carries the finding id (`drains.watch_reason`), so the drain is the node's
quarantine record and every later run knows whose it is. Never more than `max_drained_share`
of the GPU nodes drained by the watcher: past it, many nodes failing at once say more about
the fabric than about the nodes, so it stops acting and raises `watch.fleet`.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from cluster_tool.admission import Breaker, Door
from cluster_tool.checks.counters import (
    CounterSnapshot,
    LinkWait,
    check_counter_deltas,
    check_kernel_link_flaps,
    link_waits,
    snapshot,
)
from cluster_tool.checks.health import check_gpus, check_xids, driver_unreachable
from cluster_tool.drains import Owner, owner, watch_check, watch_reason
from cluster_tool.errors import EXIT_UNREACHABLE, EXIT_USAGE, ParseError
from cluster_tool.fabric.plan import cabling_plan
from cluster_tool.findings import Finding
from cluster_tool.history import HistoryError
from cluster_tool.parsers.kernel_log import XidEvent
from cluster_tool.parsers.link_events import LinkEvent
from cluster_tool.parsers.port_counters import DATA_COUNTERS
from cluster_tool.probes import Probe, ProbeOutput, lines
from cluster_tool.probes.fabric import Ibnetdiscover, Ibqueryerrors
from cluster_tool.probes.node import KernelLog, NvidiaSmiQ
from cluster_tool.probes.signals import GpuClocks, PortCounters
from cluster_tool.remote.fanout import HostResult
from cluster_tool.slurm import (
    NodeState,
    RunningJob,
    SlurmAdmin,
    SlurmError,
    SlurmMissing,
    SlurmUnreachable,
)
from cluster_tool.spec.models import Cluster, NodeProfile, Watch
from cluster_tool.watch.probes import Probing, probe_round
from cluster_tool.watch.reports import JobReports
from cluster_tool.watch.signals import Sources
from cluster_tool.watch.state import SEEN_LINES_MAX, WatchState
from cluster_tool.watch.straggler import Signal, find_slow, judge_stragglers

__all__ = ["Action", "CycleResult", "Policy", "drain_cap", "opted_in", "run_cycle"]

Policy = Literal["observe", "drain", "requeue"]

# Findings that say a signal could not be read, or speak for the fleet or Slurm: never a
# reason to drain the node they name.
_KERNEL_LOG = KernelLog()
_NOT_ACTIONABLE = ("os.", "slurm.", "watch.unread", "watch.fleet", "watch.slurm", "watch.state")


@dataclass(frozen=True)
class Action:
    """What the watcher did through Slurm: drained a node, requeued a job, or released a job it
    requeued from Slurm's begin-time hold."""

    kind: Literal["drain", "signal", "requeue", "checkpointed", "release"]
    check: str
    node: str | None = None
    job_id: str | None = None
    detail: str = ""
    # Seconds between the checkpoint signal and the requeue (or the job's own end).
    grace_s: float | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "action": self.kind,
            "check": self.check,
            "node": self.node,
            "job_id": self.job_id,
            "detail": self.detail,
            "grace_s": self.grace_s,
        }


@dataclass
class CycleResult:
    """One cycle: every finding now (with when each was first seen), those new this cycle,
    the actions taken, the nodes the watcher holds drained and the rates it read."""

    at: float
    policy: Policy
    findings: list[Finding]
    first_seen: dict[str, float]
    new: list[Finding]
    resolved: list[dict[str, Any]]
    actions: list[Action]
    drained: list[str]
    rates: dict[str, dict[str, dict[str, float]]] = field(default_factory=dict)
    events: list[dict[str, Any]] = field(default_factory=list)
    # (node, rail) -> (latest probe busbw, its baseline): the last probe of each node.
    busbw: dict[tuple[str, int], tuple[float, float | None]] = field(default_factory=dict)
    probed: list[tuple[str, str]] = field(default_factory=list)  # this cycle's probe pairs
    # The hosts this cycle could not read (`slurm` for a controller that did not answer), and
    # why Slurm could not be asked at all (no client here: the watch was pointed wrongly).
    unreachable: list[str] = field(default_factory=list)
    misdirected: str | None = None

    @property
    def exit_code(self) -> int:
        """The contract's codes: 2 Slurm cannot be reached the way it was pointed at, 3 a host
        (or Slurm) did not answer, 1 an error finding, 0 nothing failing."""
        if self.misdirected:
            return EXIT_USAGE
        if self.unreachable:
            return EXIT_UNREACHABLE
        return 1 if any(f.fails for f in self.findings) else 0

    def to_json(self) -> dict[str, Any]:
        return {
            "status": "fail" if self.exit_code else "pass",
            "at": self.at,
            "policy": self.policy,
            "findings": [
                {**f.model_dump(), "first_seen": self.first_seen.get(finding_key(f))}
                for f in self.findings
            ],
            "new": [finding_key(f) for f in self.new],
            "resolved": self.resolved,
            "actions": [a.to_json() for a in self.actions],
            "drained": self.drained,
            "probed": [list(p) for p in self.probed],
            "unreachable": self.unreachable,
            "summary": {
                "errors": sum(f.severity == "error" for f in self.findings),
                "warnings": sum(f.severity == "warning" for f in self.findings),
                "info": sum(f.severity == "info" for f in self.findings),
                "drained_by_watch": len(self.drained),
            },
        }


def finding_key(f: Finding) -> str:
    return f"{f.check}|{f.node or ''}|{f.component or ''}"


def drain_cap(watch: Watch, gpu_nodes: int) -> int:
    """How many GPU nodes the watcher may hold drained: the spec's share, at least one (the
    admission door's fleet breaker)."""
    return Breaker(watch.max_drained_share, gpu_nodes, at_least=1).cap


_WORDS = re.compile(r"[\s,&|()\[\]*]+")


def opted_in(job: RunningJob, marker: str) -> bool:
    """A job opts in to being requeued with the marker as a word of its comment or features."""
    return marker in _WORDS.split(f"{job.comment} {job.features}")


def _unread(node: str, probe: Probe, why: str) -> Finding:
    return Finding(
        check="watch.unread",
        severity="warning",
        node=node,
        component=probe.name,
        expected=f"{probe.described} readable",
        observed=why,
        message=f"{node}: {probe.described} not read this cycle: {why}",
    )


def _output(result: HostResult, probe: Probe) -> tuple[ProbeOutput | None, str | None]:
    out = result.outputs.get(probe.name)
    if out is None:
        return None, "not collected"
    if not probe.read_anyway(out):
        err = (out.stderr or out.stdout).strip().splitlines()
        return None, f"exit {out.rc}" + (f": {err[-1][:160]}" if err else "")
    return out, None


def _driver_lost(node: str, result: HostResult) -> Finding | None:
    """`gpu.driver` when the node answered and its nvidia-smi said it cannot reach the driver or
    a GPU: positive evidence of a broken node, unlike a host that did not answer."""
    out = result.outputs.get(NvidiaSmiQ.name)
    return None if out is None else driver_unreachable(node, out.rc, out.stdout, out.stderr)


def _fingerprint(event: XidEvent | LinkEvent) -> str:
    when = event.uptime_s if event.uptime_s is not None else event.timestamp
    if isinstance(event, XidEvent):
        text = f"xid|{event.kind}|{event.code}|{event.pci_bus_id}|{when}|{event.message}"
    else:
        text = f"link|{event.pci}|{event.netdev}|{event.state}|{when}"
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def _kernel_log(
    cluster: Cluster,
    node: str,
    profile: NodeProfile,
    text: str,
    state: WatchState,
    gpu_pci: Sequence[str | None],
) -> list[Finding]:
    """Xids, SXids and link flaps the node's kernel log gained since the last cycle. The first
    read is the baseline: what the log held before the watcher saw the node is bring-up's and
    node-check's to judge, not the watcher's."""
    memory = state.node(node)
    reading = _KERNEL_LOG.process(lines(text))
    xids, links = reading.xids, reading.checked_links()
    # The state keeps the newest SEEN_LINES_MAX fingerprints; only the newest that many
    # events of this read are compared with them, so a log longer than that does not show
    # its oldest lines again as new.
    both: list[XidEvent | LinkEvent] = [*xids, *links]
    events = sorted(both, key=lambda e: e.line_no)[-SEEN_LINES_MAX:]
    seen = set(memory.seen_lines)
    new = [e for e in events if _fingerprint(e) not in seen]
    new_xids = [e for e in new if isinstance(e, XidEvent)]
    new_links = [e for e in new if isinstance(e, LinkEvent)]
    memory.seen_lines = [_fingerprint(e) for e in events]
    if not memory.log_read:
        memory.log_read = True
        return []
    t = cluster.thresholds.health
    cables = {r.hca: (r.leaf, r.leaf_port) for r in cabling_plan(cluster) if r.node == node}
    out = check_xids(node, profile, t, new_xids, gpu_pci)
    out += check_kernel_link_flaps(node, new_links, profile.compute_hcas, t, cables=cables)
    return out


def _rates(
    node: str, counters: Mapping[str, Mapping[str, int]], state: WatchState, now: float
) -> dict[str, dict[str, float]]:
    """Per HCA and counter, the increase per second since the last cycle (data counters in
    bytes); nothing for a counter that went backwards (reset) or on the first read."""
    memory = state.node(node)
    before, at = memory.counters, memory.counters_at
    memory.counters = {h: dict(c) for h, c in counters.items()}
    memory.counters_at = now
    if at is None or now <= at:
        return {}
    rates: dict[str, dict[str, float]] = {}
    for hca, values in counters.items():
        for name, value in values.items():
            was = before.get(hca, {}).get(name)
            if was is None or value < was:
                continue
            scale = 4 if name in DATA_COUNTERS else 1
            rates.setdefault(hca, {})[name] = (value - was) * scale / (now - at)
    return rates


def _straggler_signals(
    profile: NodeProfile, rates: Mapping[str, Mapping[str, float]]
) -> list[Signal]:
    out: list[Signal] = []
    for hca in profile.compute_hcas:
        got = rates.get(hca.device, {})
        where = f"{hca.device} rail {hca.rail}"
        if "PortXmitData" in got:
            out.append(Signal("PortXmitData", where, got["PortXmitData"], "B/s", "low"))
        # Not the node's own PortXmitWait: a port that waits is held up by the far end of its
        # cable and beyond (the receivers of what it sends), never by itself. The waits that
        # point at the node are the leaf ports' sending to it (`_waits_toward`).
    return out


def _step_time_signals(job: RunningJob, reports: JobReports) -> dict[str, Signal]:
    """The job's own view: per node of the job, the median of its ranks' recent step times (the
    per-rank times a framework's straggler detector reads), as one more rate the robust rule
    compares across the job's nodes. A rank on a slow GPU or link holds its node's steps up."""
    out: dict[str, Signal] = {}
    for node, times in reports.step_times(job.job_id).items():
        if node in job.nodes and times:
            recent = sorted(times)
            median = recent[len(recent) // 2]
            out[node] = Signal("step time", "median of its ranks", median, "s", "high")
    return out


def _waits_toward(profile: NodeProfile, waits: Sequence[LinkWait]) -> list[Signal]:
    """The credit waits of the leaf ports sending to the node's compute HCAs: high on several of
    its links at once, the node is slow to take what its job sends it."""
    rail = {hca.device: hca.rail for hca in profile.compute_hcas}
    return [
        Signal(
            "PortXmitWait toward",
            f"{w.hca} rail {rail[w.hca]}",
            w.to_host,
            "ticks/s",
            "high",
            link=f"at {w.leaf_port}",
            corroborate=2,
        )
        for w in waits
        if w.to_host is not None and w.hca in rail
    ]


# A reboot of Slurm's own (`scontrol reboot`): requested (REBOOT_REQUESTED, while the jobs end),
# under way (REBOOT_ISSUED: `DOWN+REBOOT_ISSUED` with reason `Reboot ASAP : reboot issued`, as
# `scontrol show node` prints it; aws-parallelcluster-node tests/common/schedulers/
# test_slurm_commands.py), or REBOOT before Slurm 20.11 split it in two.
_SLURM_REBOOT = frozenset({"REBOOT_REQUESTED", "REBOOT_ISSUED", "REBOOT"})


def _reboots(states: Mapping[str, NodeState], state: WatchState) -> dict[str, str]:
    """The nodes rebooted since the last cycle, and how that is known: Slurm showed a reboot of
    its own requested or under way, now or at the last cycle, or the node's BootTime moved.
    Remembers this cycle's flags and boot times in `state`."""
    out: dict[str, str] = {}
    for name, s in sorted(states.items()):
        memory = state.node(name)
        flags = sorted(s.flags & _SLURM_REBOOT)
        moved = bool(s.boot_time) and memory.boot_time not in (None, s.boot_time)
        if flags:
            out[name] = f"Slurm's reboot, {'+'.join(flags)}"
        elif memory.slurm_reboot:
            out[name] = "Slurm's reboot" + (f", booted {s.boot_time}" if moved else "")
        elif moved:
            out[name] = f"booted {s.boot_time}, BootTime was {memory.boot_time}; no Slurm reboot"
        memory.slurm_reboot = bool(flags)
        memory.boot_time = s.boot_time or memory.boot_time
    return out


def _fabric(
    cluster: Cluster,
    result: HostResult | None,
    state: WatchState,
    nodes: Sequence[str],
    now: float,
    rebooted: Mapping[str, str],
) -> tuple[list[Finding], list[LinkWait]]:
    """Port counter deltas of both ends of every cable since the last cycle (`link.flap`,
    `link.errors`, `link.congestion`), from ibqueryerrors on the subnet-manager host; on the
    cables of `rebooted` nodes a LinkDowned climb is the reboot's (`link.downed-reboot`).
    Also each host cable's credit waits, both directions (for the straggler check)."""
    if result is None:
        return [], []
    host = result.host
    if not result.reachable:
        return [_unread(host, Ibqueryerrors(), f"unreachable: {result.error}")], []
    found: list[Finding] = []
    read: dict[str, Any] = {}
    for probe in (Ibnetdiscover(), Ibqueryerrors()):
        out, why = _output(result, probe)
        if out is None:
            found.append(_unread(host, probe, why or "not read"))
            continue
        try:
            read[probe.name] = probe.process(lines(out.stdout))
        except ParseError as exc:
            found.append(_unread(host, probe, str(exc)))
    if "ibqueryerrors" not in read:
        return found, []
    after = snapshot(read["ibqueryerrors"], now)
    before = state.fabric_counters
    state.fabric_counters = after.to_json()
    if before is None or "ibnetdiscover" not in read:
        return found, []
    try:
        earlier = CounterSnapshot.from_json(before)
    except ValueError:
        return found, []
    discovered = read["ibnetdiscover"]
    found += check_counter_deltas(
        cluster, discovered, earlier, after, nodes=nodes, rebooted=rebooted
    )
    return found, link_waits(cluster, discovered, earlier, after)


def _slurm_finding(what: str, exc: Exception) -> Finding:
    return Finding(
        check="watch.slurm",
        node=None,
        expected=f"Slurm answers ({what})",
        observed=str(exc),
        message=f"watch could not {what} through Slurm: {exc}",
    )


def _actionable(f: Finding, gpu: set[str]) -> bool:
    return f.fails and f.node in gpu and not f.check.startswith(_NOT_ACTIONABLE)


def run_cycle(
    cluster: Cluster,
    state: WatchState,
    sources: Sources,
    slurm: SlurmAdmin,
    policy: Watch,
    now: float,
    probing: Probing | None = None,
    reports: JobReports | None = None,
) -> CycleResult:
    """One cycle against `state` (updated in place; the caller saves it): read, judge, probe
    the idle nodes when the spec allows it and it is their turn, act by `policy.policy`, and
    say what was found and done."""
    hosts = {h.name: h for h in cluster.gpu_nodes()}
    nodes = list(hosts)
    findings: list[Finding] = []
    rates: dict[str, dict[str, dict[str, float]]] = {}
    signals: dict[str, list[Signal]] = {}
    serials: dict[str, list[str]] = {}

    unreachable: list[str] = []
    misdirected: str | None = None
    results = sources.node_outputs(nodes)
    for node in nodes:
        host, result = hosts[node], results.get(node)
        profile = host.profile
        assert profile is not None  # a GPU node has a profile
        if result is None or not result.reachable:
            why = result.error if result is not None else "not collected"
            findings.append(_unread(node, PortCounters(), f"unreachable: {why}"))
            unreachable.append(node)
            continue
        gpu_pci: list[str | None] = []
        smi_out, why = _output(result, NvidiaSmiQ())
        lost = _driver_lost(node, result) if smi_out is None else None
        if lost is not None:
            findings.append(lost)  # the node answered: its driver did not, an error to act on
        elif smi_out is None:
            findings.append(_unread(node, NvidiaSmiQ(), why or ""))
        else:
            try:
                smi = NvidiaSmiQ().process(lines(smi_out.stdout))
                gpu_pci = [g.pci for g in smi.gpus]
                serials[node] = [g.serial for g in smi.gpus if g.serial]
                findings += check_gpus(node, profile, cluster.thresholds.health, smi)
            except ParseError as exc:
                findings.append(_unread(node, NvidiaSmiQ(), str(exc)))
        log_out, why = _output(result, _KERNEL_LOG)
        if log_out is None:
            findings.append(_unread(node, _KERNEL_LOG, why or ""))
        else:
            try:
                findings += _kernel_log(cluster, node, profile, log_out.stdout, state, gpu_pci)
            except ParseError as exc:
                findings.append(_unread(node, _KERNEL_LOG, str(exc)))
        counters_out, why = _output(result, PortCounters())
        if counters_out is None:
            findings.append(_unread(node, PortCounters(), why or ""))
        else:
            try:
                counters = PortCounters().process(lines(counters_out.stdout))
            except ParseError as exc:
                findings.append(_unread(node, PortCounters(), str(exc)))
            else:
                rates[node] = _rates(node, counters, state, now)
                signals.setdefault(node, []).extend(_straggler_signals(profile, rates[node]))
        clocks_out, why = _output(result, GpuClocks())
        if clocks_out is None:
            if lost is None:  # with the driver gone, the same nvidia-smi failing: said once
                findings.append(_unread(node, GpuClocks(), why or ""))
        else:
            try:
                clocks = [c for _, c, _ in GpuClocks().process(lines(clocks_out.stdout)) if c]
            except ParseError as exc:
                findings.append(_unread(node, GpuClocks(), str(exc)))
            else:
                if clocks:
                    slowest = Signal("SM clock", "slowest GPU", min(clocks), "MHz", "low")
                    signals.setdefault(node, []).append(slowest)

    jobs: list[RunningJob] = []
    states: dict[str, NodeState] = {}
    slurm_ok = True
    try:
        jobs = slurm.running_jobs()
        states = {s.name: s for s in slurm.node_states(nodes)}
    except SlurmError as exc:
        slurm_ok = False
        findings.append(_slurm_finding("read the jobs and node states", exc))
        if isinstance(exc, SlurmUnreachable):
            unreachable.append("slurm")
        elif isinstance(exc, SlurmMissing):
            misdirected = str(exc)

    # Slurm first: a link that went down because Slurm rebooted its node is no flap.
    rebooted = _reboots(states, state)
    fabric = sources.fabric_outputs()
    if fabric is not None and not fabric.reachable:
        unreachable.append(fabric.host)
    found, waits = _fabric(cluster, fabric, state, nodes, now, rebooted)
    findings += found
    for node, host in hosts.items():
        assert host.profile is not None  # a GPU node has a profile
        mine = [w for w in waits if w.node == node and w.node not in rebooted]
        signals.setdefault(node, []).extend(_waits_toward(host.profile, mine))

    probed: list[tuple[str, str]] = []
    its_turn = state.cycles % policy.probe_every == 0
    if probing is not None and policy.probes and slurm_ok and its_turn:
        found, probed = _probe(cluster, policy, probing, jobs, states, serials, state, now)
        findings += found

    if reports is not None:
        for job in jobs:
            for node, signal in _step_time_signals(job, reports).items():
                signals.setdefault(node, []).append(signal)
    slow = find_slow(jobs, signals, policy)
    findings += judge_stragglers(slow, state.stragglers, jobs, policy)

    released: list[Action] = []
    if slurm_ok:
        released, extra = _release(policy, state, slurm, now)
        findings += extra
    actions, drained, extra = _act(
        cluster, policy, findings, jobs, states, slurm, state, slurm_ok, now, reports
    )
    actions = released + actions
    findings += extra

    first_seen, new, resolved = _remember(state, findings, now)
    state.cycles += 1
    state.last_cycle_at = now
    events = [{"at": now, "event": "finding", **f.model_dump()} for f in new] + [
        {"at": now, "event": "resolved", **r} for r in resolved
    ]
    events += [{"at": now, "event": a.kind, **a.to_json()} for a in actions]
    return CycleResult(
        at=now,
        policy=policy.policy,
        findings=_worst_first(findings),
        first_seen=first_seen,
        new=new,
        resolved=resolved,
        actions=actions,
        drained=drained,
        rates=rates,
        events=events,
        busbw={
            (node, int(rail)): (float(v[0] or 0.0), v[1])
            for node, rails in state.probe_busbw.items()
            for rail, v in rails.items()
        },
        probed=probed,
        unreachable=unreachable,
        misdirected=misdirected,
    )


def _probe(
    cluster: Cluster,
    policy: Watch,
    probing: Probing,
    jobs: Sequence[RunningJob],
    states: Mapping[str, NodeState],
    serials: Mapping[str, list[str]],
    state: WatchState,
    now: float,
) -> tuple[list[Finding], list[tuple[str, str]]]:
    """NCCL probes between neighbours of the GPU nodes Slurm shows IDLE: never a node of a
    running job, a drained one or one Slurm would not start a job on."""
    busy = {n for job in jobs for n in job.nodes}
    idle = [
        h.name
        for h in cluster.gpu_nodes()
        if h.name in states
        and states[h.name].state == "IDLE"
        and states[h.name].usable
        and h.name not in busy
    ]
    hca_of = {
        (h.name, hca.rail): hca.device
        for h in cluster.gpu_nodes()
        if h.profile is not None
        for hca in h.profile.compute_hcas
    }
    try:
        outcome = probe_round(
            probing.prober,
            probing.store_path,
            idle,
            serials,
            hca_of,
            cluster.thresholds.history,
            policy.probe_min_drop,
            run_id=f"watch-probe-{now:.0f}",
        )
    except SlurmError as exc:
        return [_slurm_finding("run the NCCL probes", exc)], []
    except HistoryError as exc:
        unread = Finding(
            check="watch.unread",
            severity="warning",
            node=None,
            component="probe-history",
            expected="the probe baselines' store readable",
            observed=str(exc),
            message=f"watch could not keep the NCCL probe baselines: {exc}",
        )
        return [unread], []
    for (node, rail), (latest, baseline) in outcome.busbw.items():
        state.probe_busbw.setdefault(node, {})[str(rail)] = [latest, baseline]
    return outcome.findings, outcome.pairs


def _act(
    cluster: Cluster,
    policy: Watch,
    findings: list[Finding],
    jobs: Sequence[RunningJob],
    states: Mapping[str, NodeState],
    slurm: SlurmAdmin,
    state: WatchState,
    slurm_ok: bool,
    now: float,
    reports: JobReports | None = None,
) -> tuple[list[Action], list[str], list[Finding]]:
    """Drain and requeue by policy; returns the actions, the nodes the watcher now holds
    drained, and the findings acting raised (`watch.fleet`, `watch.slurm`)."""
    gpu = {n.name for n in cluster.gpu_nodes()}
    ours = {
        n: watch_check(s.reason) or ""
        for n, s in states.items()
        if s.drained and owner(s.reason) is Owner.WATCH
    }
    first: dict[str, Finding] = {}
    for f in findings:
        if _actionable(f, gpu) and f.node is not None:
            first.setdefault(f.node, f)
    # A node drained already, by anyone, is left as it is: never a second drain over the
    # watcher's own, never the watcher's reason over an operator's.
    wanted = [n for n in first if not (n in states and states[n].drained)]
    if not slurm_ok:
        return [], sorted(ours), []
    cap = drain_cap(policy, len(gpu))
    extra: list[Finding] = []
    if len(ours) + len(wanted) > cap:
        extra.append(
            Finding(
                check="watch.fleet",
                node=None,
                expected=f"at most {cap} of {len(gpu)} GPU nodes drained by watch "
                f"(max_drained_share {policy.max_drained_share:g})",
                observed=f"{len(ours)} drained, {len(wanted)} more failing: "
                + ", ".join(sorted(wanted)[:10]),
                message=f"{len(ours) + len(wanted)} GPU nodes failing at once is more than "
                f"watch may drain ({cap}): suspect the fabric or a shared cause, not the "
                "nodes; nothing more is drained until an operator looks",
            )
        )
        wanted = []
    if policy.policy == "observe":
        return [], sorted(ours), extra
    actions: list[Action] = []
    door = Door(slurm, Owner.WATCH)
    for node in wanted:
        f = first[node]
        reason = watch_reason(f.check, f.component, f.message)
        try:
            if not door.hold([node], reason):
                continue  # drained by someone since the cycle read it: theirs stays
        except SlurmError as exc:
            extra.append(_slurm_finding(f"drain {node}", exc))
            continue
        ours[node] = f.check
        actions.append(Action("drain", f.check, node=node, detail=reason))
    if policy.policy == "requeue":
        found, more = _requeue(policy, jobs, ours, slurm, state, now, reports)
        actions += found
        extra += more
    return actions, sorted(ours), extra


def _requeue(
    policy: Watch,
    jobs: Sequence[RunningJob],
    ours: Mapping[str, str],
    slurm: SlurmAdmin,
    state: WatchState,
    now: float,
    reports: JobReports | None,
) -> tuple[list[Action], list[Finding]]:
    """Requeue the opted-in jobs on the nodes the watcher holds drained, each told first: its
    batch step gets SIGUSR1 (what `plan --sbatch` jobs trap to checkpoint, requeue themselves
    and exit) and up to `checkpoint_grace_s` to report a new complete checkpoint or to end;
    then a job still running is requeued. The grace is judged once a cycle. A job that did not
    opt in is never signalled nor requeued."""
    actions: list[Action] = []
    extra: list[Finding] = []
    done = set(state.requeued)
    running = {j.job_id for j in jobs}
    for job_id, sig in sorted(state.signalled.items()):
        if job_id in running:
            continue
        # It ended (or requeued itself) after the signal: nothing more to do but release it.
        del state.signalled[job_id]
        done.add((job_id, sig["check"]))
        state.requeued.append((job_id, sig["check"]))
        state.held[job_id] = now
        waited = now - sig["at"]
        saved = _saved_since(reports, job_id, sig)
        actions.append(
            Action(
                "checkpointed" if saved is not None else "requeue",
                sig["check"],
                node=sig["node"],
                job_id=job_id,
                detail=(
                    f"left within {waited:.0f} s of the checkpoint signal"
                    + (
                        f", checkpoint iteration {saved}"
                        if saved is not None
                        else ", no new checkpoint seen"
                    )
                ),
                grace_s=waited,
            )
        )
    for job in jobs:
        hit = sorted(set(job.nodes) & set(ours))
        if not hit or not opted_in(job, policy.requeue_marker):
            continue
        found_id = ours[hit[0]]
        if (job.job_id, found_id) in done:
            continue
        pending = state.signalled.get(job.job_id)
        if pending is None and policy.checkpoint_grace_s > 0:
            before = reports.checkpoint(job.job_id) if reports is not None else None
            try:
                slurm.signal_batch(job.job_id, "USR1")
            except SlurmError as exc:
                extra.append(_slurm_finding(f"signal job {job.job_id}", exc))
                continue
            state.signalled[job.job_id] = {
                "at": now,
                "check": found_id,
                "node": hit[0],
                "before": None if before is None else before.iteration,
            }
            actions.append(
                Action(
                    "signal",
                    found_id,
                    node=hit[0],
                    job_id=job.job_id,
                    detail=f"SIGUSR1 to its batch step: {policy.checkpoint_grace_s} s to "
                    f"checkpoint ({found_id} on {', '.join(hit)})",
                )
            )
            continue
        waited = None if pending is None else now - pending["at"]
        saved = None if pending is None else _saved_since(reports, job.job_id, pending)
        if pending is not None and saved is None and (waited or 0.0) < policy.checkpoint_grace_s:
            continue  # still within its grace
        try:
            slurm.requeue(job.job_id)
        except SlurmError as exc:
            extra.append(_slurm_finding(f"requeue job {job.job_id}", exc))
            continue
        state.signalled.pop(job.job_id, None)
        done.add((job.job_id, found_id))
        state.requeued.append((job.job_id, found_id))
        state.held[job.job_id] = now
        why = f"{found_id} on {', '.join(hit)}"
        if waited is not None:
            why += (
                f"; checkpoint iteration {saved} {waited:.0f} s after the signal"
                if saved is not None
                else f"; no new checkpoint in its {waited:.0f} s grace"
            )
        actions.append(
            Action("requeue", found_id, node=hit[0], job_id=job.job_id, detail=why, grace_s=waited)
        )
    return actions, extra


def _saved_since(reports: JobReports | None, job_id: str, sig: Mapping[str, Any]) -> int | None:
    """The iteration of a complete checkpoint the job reported after it was signalled."""
    cp = reports.checkpoint(job_id) if reports is not None else None
    # Written after the signal, not only completed after it: a periodic checkpoint the trainer
    # saved just before the signal completes (synced) after it, while the one the job saves on
    # the signal is still being written; requeueing then kills that write (the lab's test:
    # iteration 15 completed 4 s after the signal, the job's own 18 was set aside torn).
    if cp is None or (cp.saved_at if cp.saved_at is not None else cp.at) < sig["at"]:
        return None
    if sig.get("before") is not None and cp.iteration <= sig["before"]:
        return None
    return cp.iteration


# A job the watcher requeued waits in `state.held` until Slurm's requeue has finished (the job
# PENDING for BeginTime) and is then released; one that waits this long is forgotten.
HELD_FORGET_S = 86400.0
# Squeue's state for a requeued job whose previous run is still being cleaned up (the
# COMPLETING / REQUEUE flags over PENDING): not yet releasable, still ours to release.
_REQUEUING = {"COMPLETING", "REQUEUED", "REQUEUE_FED"}


def _release(
    policy: Watch, state: WatchState, slurm: SlurmAdmin, now: float
) -> tuple[list[Action], list[Finding]]:
    """End Slurm's begin-time hold on the jobs the watcher requeued in an earlier cycle.

    Slurm (job_mgr.c, batch_requeue_fini) sets a requeued batch job's begin time to now +
    AuthInfo cred_expire + 1 (121 s by default) once every node of its previous run has
    finished its epilog: "the time stamp on the new batch launch credential must be larger than
    the time stamp on the revoke request". A slurmd refuses a launch whose credential is not
    newer than the job's revocation (slurm_cred_revoked: ctime <= revoked), and a credential
    issued after it purges the old record (slurm_cred_handle_reissue). So once squeue shows the
    job PENDING for BeginTime, a cycle after the requeue, starting it now issues a credential
    stamped after the revocation, and the job runs on the nodes Slurm picks (never the drained
    one) two minutes sooner. Only under the requeue policy with `release_requeued`; never a job
    held for any other reason (a user's or an admin's hold, a dependency)."""
    if policy.policy != "requeue" or not state.held:
        return [], []
    if not policy.release_requeued:
        state.held.clear()
        return [], []
    try:
        jobs = slurm.job_states(sorted(state.held))
    except SlurmError as exc:
        return [], [_slurm_finding("read the requeued jobs", exc)]
    actions: list[Action] = []
    found: list[Finding] = []
    for job_id, at in sorted(state.held.items()):
        job = jobs.get(job_id)
        if job is not None and job.state in _REQUEUING and now - at < HELD_FORGET_S:
            continue  # its previous run is still being cleaned up: next cycle
        del state.held[job_id]
        if job is None or job.state != "PENDING" or job.reason != "BeginTime" or now <= at:
            continue  # running again, ended, or held for another reason: not ours to touch
        try:
            slurm.start_now(job_id)
        except SlurmError as exc:
            found.append(_slurm_finding(f"release job {job_id}", exc))
            continue
        check = next((c for j, c in reversed(state.requeued) if j == job_id), "")
        why = f"requeued {now - at:.0f} s ago for {check}; Slurm's begin-time hold ended"
        actions.append(Action("release", check, job_id=job_id, detail=why))
    return actions, found


def _remember(
    state: WatchState, findings: Sequence[Finding], now: float
) -> tuple[dict[str, float], list[Finding], list[dict[str, Any]]]:
    """Open findings carried across cycles: when each was first seen, which are new, which
    went away."""
    current: dict[str, Finding] = {}
    for f in findings:
        current.setdefault(finding_key(f), f)
    new = [f for k, f in current.items() if k not in state.open]
    resolved = [
        {"check": v.get("check"), "node": v.get("node"), "component": v.get("component")}
        for k, v in state.open.items()
        if k not in current
    ]
    opened: dict[str, dict[str, Any]] = {}
    for k, f in current.items():
        first = state.open.get(k, {}).get("first_seen", now)
        opened[k] = {
            "check": f.check,
            "node": f.node,
            "component": f.component,
            "severity": f.severity,
            "first_seen": first,
            "last_seen": now,
        }
    state.open = opened
    return {k: v["first_seen"] for k, v in opened.items()}, new, resolved


_RANK = {"error": 0, "warning": 1, "info": 2}


def _worst_first(findings: list[Finding]) -> list[Finding]:
    return sorted(findings, key=lambda f: _RANK[f.severity])
