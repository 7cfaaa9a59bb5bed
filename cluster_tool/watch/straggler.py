"""Stragglers found from outside the job: per node of a running job, the rates the watcher
reads anyway (data sent per rail, the credit waits of the leaf ports sending to it, its slowest
GPU's SM clock), each compared with the same rate on the job's other nodes. A node whose rate
is far from theirs (robust z-score, and by a share of their median) is the slow one this cycle;
named only when it is the slow one `straggler_cycles` cycles running, so a one-off blip (a
checkpoint write, a data loader stall) is not.

A port's PortXmitWait says it had data and no credits from the far end of its cable: it points
past the port that counted it. So a node's own HCA waiting is never evidence against the node
(its receivers, or the fabric, held it up). The leaf ports sending to the node waiting is
evidence against the node, counted only when it shows on several of the node's links at once:
one slow link is the link's (its cable, its HCA), named as `link.congestion` on that cable, and
not reason enough to drain the node and requeue its job.
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from cluster_tool.findings import Finding
from cluster_tool.slurm import RunningJob
from cluster_tool.spec.models import Watch

__all__ = ["Signal", "Slow", "find_slow", "judge_stragglers", "robust_z"]

# 0.6745 x distance / MAD: the modified z-score (Iglewicz and Hoaglin), as the gate's and
# history's straggler cuts use it.
_MAD_SCALE = 0.6745


@dataclass(frozen=True)
class Signal:
    """One rate of one node: what it is (`PortXmitData`), where (`mlx5_0 rail 0`), its value,
    its unit, and which way is bad (`low`: less data, a slower clock; `high`: more waiting).
    `link` names the port it was read at when that is not the node's own (the leaf's end of
    its cable); `corroborate`: on how many of the node's links (keys of this name) it must be
    the odd one out before it speaks against the node (all of them when it has fewer)."""

    name: str
    where: str
    value: float
    unit: str
    bad: str = "low"
    link: str = ""
    corroborate: int = 1

    @property
    def key(self) -> tuple[str, str]:
        return (self.name, self.where)


@dataclass(frozen=True)
class Slow:
    """A node that was the slow one of its job this cycle, and the figures that say so."""

    job_id: str
    node: str
    evidence: tuple[str, ...]


def robust_z(value: float, others: Sequence[float]) -> float:
    """How far `value` sits from `others` in MADs (modified z-score; infinite when the others
    all agree and `value` differs)."""
    median = statistics.median(others)
    mad = statistics.median(abs(o - median) for o in others)
    if mad == 0:
        return 0.0 if value == median else float("inf") * (1 if value > median else -1)
    return _MAD_SCALE * (value - median) / mad


def _fmt(value: float, unit: str) -> str:
    if unit == "B/s":
        return f"{value / 1e9:.2f} GB/s"
    if unit == "MHz":
        return f"{value:.0f} MHz"
    return f"{value:.3g} {unit}"


def find_slow(
    jobs: Sequence[RunningJob],
    signals: Mapping[str, Sequence[Signal]],
    watch: Watch,
) -> list[Slow]:
    """The nodes that are the slow one of their job this cycle. A job needs three nodes with
    the signal read (with two, neither is the odd one out)."""
    found: list[Slow] = []
    for job in jobs:
        by_key: dict[tuple[str, str], dict[str, Signal]] = {}
        for node in job.nodes:
            for s in signals.get(node, ()):
                by_key.setdefault(s.key, {})[node] = s
        # node -> signal name -> (signal, its figures) where the node is the odd one out
        odd: dict[str, dict[str, list[tuple[Signal, str]]]] = {}
        for (name, where), per_node in sorted(by_key.items()):
            if len(per_node) < 3:
                continue
            for node, s in per_node.items():
                others = [o.value for n, o in per_node.items() if n != node]
                median = statistics.median(others)
                z = robust_z(s.value, others)
                worse = -z if s.bad == "low" else z
                gap = (median - s.value) if s.bad == "low" else (s.value - median)
                scale = abs(median) if median else max(abs(s.value), 1e-12)
                if worse > watch.straggler_z and gap >= watch.straggler_min_drop * scale:
                    zs = "inf" if abs(z) == float("inf") else f"{z:+.1f}"
                    at = f" {s.link}" if s.link else ""
                    odd.setdefault(node, {}).setdefault(name, []).append(
                        (
                            s,
                            f"{name} {where}{at} {_fmt(s.value, s.unit)} against the job's "
                            f"other nodes' median {_fmt(median, s.unit)} (z {zs})",
                        )
                    )
        evidence: dict[str, list[str]] = {}
        for node, by_name in odd.items():
            for name, hits in by_name.items():
                links = sum(1 for s in signals.get(node, ()) if s.name == name)
                if len(hits) >= min(hits[0][0].corroborate, links):
                    evidence.setdefault(node, []).extend(text for _, text in hits)
        found += [Slow(job.job_id, n, tuple(e)) for n, e in sorted(evidence.items())]
    return found


def judge_stragglers(
    slow: Sequence[Slow],
    streaks: dict[str, dict[str, int]],
    jobs: Sequence[RunningJob],
    watch: Watch,
) -> list[Finding]:
    """Count each (job, node) slow cycle in `streaks` (updated in place: a cycle not slow
    starts the count again, a job that ended is forgotten) and name `watch.straggler` for a
    node slow `straggler_cycles` cycles running."""
    running = {j.job_id for j in jobs}
    slow_now = {(s.job_id, s.node): s for s in slow}
    for job in list(streaks):
        if job not in running:
            del streaks[job]
    for job in running:
        counts = streaks.get(job, {})
        kept = {n: counts.get(n, 0) + 1 for (j, n) in slow_now if j == job}
        if kept:
            streaks[job] = kept
        else:
            streaks.pop(job, None)
    out: list[Finding] = []
    for (job, node), s in sorted(slow_now.items()):
        cycles = streaks[job][node]
        if cycles < watch.straggler_cycles:
            continue
        out.append(
            Finding(
                check="watch.straggler",
                node=node,
                component=f"job {job}",
                expected=f"rates within the job's other nodes' (z <= {watch.straggler_z:g})",
                observed=f"slow {cycles} cycles running: " + "; ".join(s.evidence),
                message=f"{node} is the slow node of job {job}, {cycles} cycles running: "
                + "; ".join(s.evidence),
            )
        )
    return out
