"""Localisation: from failed pairs to the bad node, the bad path, or the straggler. Pure.

Round 1 screens the fleet in disjoint pairs. Round 2 splits every failed pair and
re-pairs each member with a *different* node already proven good: a node that fails
with two partners is the bad node; a pair whose members both pass with new partners
points at the path between them, which round 3 confirms by running the pair again.
So one bad node is named in two rounds (three when N is odd and it sat out round 1)
whatever the size of the cluster, and K bad nodes cost K split jobs more, not K rounds.

The caller drives it: `while pairs := loc.next_round(): loc.record(run(pairs))`.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

from cluster_tool.gate.plan import pair_rotation, sort_by_su

# Iglewicz & Hoaglin's modified z-score (0.6745 (x - median) / MAD): robust to the bad
# nodes themselves, and 3.5 is their recommended outlier cut.
_MAD_SCALE = 0.6745
DEFAULT_STRAGGLER_Z = 3.5
# Below this many measurements a z-score says nothing.
_MIN_SAMPLES = 5


@dataclass(frozen=True)
class PairResult:
    """What one job said: passed or not, its busbw, and in words why it failed."""

    nodes: tuple[str, ...]
    passed: bool
    busbw_gbs: float | None
    detail: str = ""
    check: str = "nccl.pair"
    components: tuple[str, ...] = ()

    def partner_of(self, node: str) -> str:
        others = [n for n in self.nodes if n != node]
        return others[0] if others else node


@dataclass(frozen=True)
class FleetStats:
    """Median and MAD of the busbw of passing jobs: what "far below the fleet" is measured from."""

    median: float
    mad: float
    samples: int

    def z(self, value: float) -> float:
        mad = max(self.mad, 1e-9 * max(self.median, 1.0))
        return _MAD_SCALE * (value - self.median) / mad


def fleet_stats(values: Sequence[float]) -> FleetStats | None:
    if len(values) < _MIN_SAMPLES:
        return None
    med = statistics.median(values)
    mad = statistics.median(abs(v - med) for v in values)
    return FleetStats(med, mad, len(values))


def is_straggler(
    value: float,
    stats: FleetStats | None,
    z_cut: float = DEFAULT_STRAGGLER_Z,
    min_drop: float = 0.05,
) -> bool:
    """Far below the fleet (robust z under -z_cut) and at least `min_drop` below its median."""
    if stats is None:
        return False
    return stats.z(value) < -z_cut and value < stats.median * (1.0 - min_drop)


def stragglers(
    values: Mapping[str, float], z_cut: float = DEFAULT_STRAGGLER_Z, min_drop: float = 0.05
) -> dict[str, float]:
    """Nodes whose own busbw (e.g. the single rung) is far below the fleet: node -> z-score."""
    stats = fleet_stats(list(values.values()))
    if stats is None:
        return {}
    return {
        n: round(stats.z(v), 2)
        for n, v in sorted(values.items())
        if is_straggler(v, stats, z_cut, min_drop)
    }


@dataclass
class Localisation:
    """What localisation concluded, with the jobs that prove it."""

    nodes: int
    rounds: int = 0
    jobs: int = 0
    bad: dict[str, list[PairResult]] = field(default_factory=dict)
    stragglers: dict[str, tuple[float, list[PairResult]]] = field(default_factory=dict)
    paths: list[PairResult] = field(default_factory=list)
    flaky: list[PairResult] = field(default_factory=list)
    unresolved: dict[str, str] = field(default_factory=dict)
    good: set[str] = field(default_factory=set)
    stop_reason: str | None = None
    stats: FleetStats | None = None


class Localizer:
    """The pair ladder's state machine: plans each round from what the previous one said."""

    def __init__(
        self,
        nodes: Sequence[str],
        *,
        su_of: Mapping[str, int] | None = None,
        rotation: int = 0,
        max_fail_share: float = 0.25,
        straggler_z: float = DEFAULT_STRAGGLER_Z,
        min_drop: float = 0.05,
    ) -> None:
        if len(set(nodes)) != len(nodes):
            raise ValueError("duplicate node names")
        self._su = dict(su_of or {})
        self._nodes = sort_by_su(nodes, self._su)
        self._rotation = rotation
        self._max_share = max_fail_share
        self._z = straggler_z
        self._drop = min_drop
        self.result = Localisation(nodes=len(self._nodes))
        self._planned: list[tuple[str, ...]] = []
        self._done = len(self._nodes) < 2
        self._left_out: str | None = None
        self._first: dict[str, PairResult] = {}  # suspect -> the round-1 job it failed in
        self._hard_pairs: list[PairResult] = []
        self._tested: dict[str, set[str]] = {}  # node -> partners it ran with
        self._cleared: set[str] = set()
        self._solo_failed: dict[str, PairResult] = {}  # left-out node failed with one partner
        self._confirm_paths: list[PairResult] = []
        self._score: dict[str, float] = {}  # proven-good node -> its best busbw

        if len(self._nodes) == 1:
            self.result.unresolved[self._nodes[0]] = "a single node has no partner"

    # -- driving ---------------------------------------------------------------------------

    def next_round(self) -> list[tuple[str, ...]]:
        """The jobs of the next round (each a tuple of nodes run together); [] when done."""
        if self._done:
            return []
        r = self.result.rounds
        if r == 0:
            pairs, self._left_out = pair_rotation(self._nodes, self._rotation, self._su)
            planned: list[tuple[str, ...]] = list(pairs)
        elif r == 1:
            planned = self._plan_split()
        else:
            planned = self._plan_confirm()
        if not planned:
            self._finish()
            return []
        self._planned = planned
        return list(planned)

    def record(self, results: Sequence[PairResult]) -> None:
        """Take the results of the round `next_round` planned (any order)."""
        by_nodes = {frozenset(r.nodes): r for r in results}
        missing = [p for p in self._planned if frozenset(p) not in by_nodes]
        if missing or len(by_nodes) != len(self._planned):
            raise ValueError(f"results do not match the planned round: missing {missing}")
        self.result.rounds += 1
        self.result.jobs += len(self._planned)
        ordered = [by_nodes[frozenset(p)] for p in self._planned]
        for res in ordered:
            for n in res.nodes:
                self._tested.setdefault(n, set()).update(m for m in res.nodes if m != n)
        if self.result.rounds == 1:
            self._record_screen(ordered)
        elif self.result.rounds == 2:
            self._record_split(ordered)
        else:
            self._record_confirm(ordered)
        self._planned = []

    def verdict(self) -> Localisation:
        """Drive to the end first; asking early returns what is known so far."""
        return self.result

    # -- rounds ----------------------------------------------------------------------------

    def _kind(self, res: PairResult) -> str:
        if not res.passed:
            return "fail"
        if res.busbw_gbs is not None and is_straggler(
            res.busbw_gbs, self.result.stats, self._z, self._drop
        ):
            return "slow"
        return "ok"

    def _mark_good(self, res: PairResult, node: str) -> None:
        self.result.good.add(node)
        if res.busbw_gbs is not None:
            self._score[node] = max(self._score.get(node, 0.0), res.busbw_gbs)

    def _record_screen(self, results: list[PairResult]) -> None:
        passed = [r.busbw_gbs for r in results if r.passed and r.busbw_gbs is not None]
        self.result.stats = fleet_stats(passed)
        for res in results:
            kind = self._kind(res)
            if kind == "ok":
                for n in res.nodes:
                    self._mark_good(res, n)
                continue
            if kind == "fail":
                self._hard_pairs.append(res)
            for n in res.nodes:
                self._first[n] = res
        failed_pairs = len(self._hard_pairs)
        if failed_pairs > self._max_share * len(self._nodes):
            # Every failed pair holds at least one failing node (or path): this many is
            # already more than the share a healthy fabric and software stack explain.
            self._stop(
                f"{failed_pairs} of {len(results)} pairs failed in the screen, so at least "
                f"{failed_pairs} of {len(self._nodes)} nodes fail (more than "
                f"{self._max_share:.0%}): suspect the fabric or the software, not the nodes"
            )

    def _plan_split(self) -> list[tuple[str, ...]]:
        suspects = list(self._first)
        if self._left_out is not None:
            suspects.append(self._left_out)
        return self._pair_with_good(suspects)

    def _pair_with_good(self, suspects: list[str]) -> list[tuple[str, ...]]:
        # Best-proven partners first, and from another SU when there is one, so the
        # re-test also crosses the spines.
        pool = sorted(self.result.good, key=lambda n: (-self._score.get(n, 0.0), n))
        used: set[str] = set()
        planned: list[tuple[str, ...]] = []
        for s in suspects:
            tried = self._tested.get(s, set())
            options = [g for g in pool if g not in used and g not in tried and g != s]
            if not options:
                self.result.unresolved[s] = "no proven-good partner left to re-test it with"
                continue
            su = self._su.get(s)
            other_su = [g for g in options if su is None or self._su.get(g) != su]
            partner = (other_su or options)[0]
            used.add(partner)
            planned.append((s, partner))
        return planned

    def _suspect_of(self, res: PairResult) -> str:
        return next(n for n in res.nodes if n not in self.result.good)

    def _record_split(self, results: list[PairResult]) -> None:
        for res in results:
            s = self._suspect_of(res)
            kind = self._kind(res)
            first = self._first.get(s)
            if kind == "ok":
                self._cleared.add(s)
                self._mark_good(res, s)
            elif first is None:  # the node that sat out round 1: one partner is not enough
                self._solo_failed[s] = res
            elif kind == "fail":
                self.result.bad[s] = [first, res]
            else:
                self._add_straggler(s, [first, res])
        for pair in self._hard_pairs:
            if all(n in self._cleared for n in pair.nodes):
                self._confirm_paths.append(pair)

    def _plan_confirm(self) -> list[tuple[str, ...]]:
        planned: list[tuple[str, ...]] = [p.nodes for p in self._confirm_paths]
        planned += self._pair_with_good(list(self._solo_failed))
        return planned

    def _record_confirm(self, results: list[PairResult]) -> None:
        paths = {frozenset(p.nodes): p for p in self._confirm_paths}
        for res in results:
            first_path = paths.get(frozenset(res.nodes))
            if first_path is not None:
                # Failing again together, after both passed with others: the path. Passing
                # now: the first failure was transient, worth a warning, not a drain.
                if self._kind(res) == "fail":
                    self.result.paths.append(first_path)
                else:
                    self.result.flaky.append(first_path)
                continue
            s = self._suspect_of(res)
            kind = self._kind(res)
            earlier = self._solo_failed[s]
            if kind == "fail" and not earlier.passed:
                self.result.bad[s] = [earlier, res]
            elif kind == "ok":
                self._mark_good(res, s)
                if not earlier.passed:
                    self.result.flaky.append(earlier)
            else:
                self._add_straggler(s, [earlier, res])
        self._finish()

    def _add_straggler(self, node: str, evidence: list[PairResult]) -> None:
        stats = self.result.stats
        worst = min((r.busbw_gbs for r in evidence if r.busbw_gbs is not None), default=None)
        z = round(stats.z(worst), 2) if stats is not None and worst is not None else float("nan")
        self.result.stragglers[node] = (z, evidence)

    def _stop(self, reason: str) -> None:
        self.result.stop_reason = reason
        self.result.bad.clear()
        self._done = True

    def _finish(self) -> None:
        self._done = True
        n_bad = len(self.result.bad)
        if self.result.stop_reason is None and n_bad > self._max_share * len(self._nodes):
            self._stop(
                f"{n_bad} of {len(self._nodes)} nodes failed (more than {self._max_share:.0%}): "
                "suspect the fabric or the software, not the nodes"
            )


def localize(
    nodes: Sequence[str],
    run_round: Callable[[list[tuple[str, ...]]], Sequence[PairResult]],
    *,
    su_of: Mapping[str, int] | None = None,
    rotation: int = 0,
    max_fail_share: float = 0.25,
    straggler_z: float = DEFAULT_STRAGGLER_Z,
    min_drop: float = 0.05,
) -> Localisation:
    """Run the whole localisation with `run_round(jobs) -> results`, one call per round."""
    loc = Localizer(
        nodes,
        su_of=su_of,
        rotation=rotation,
        max_fail_share=max_fail_share,
        straggler_z=straggler_z,
        min_drop=min_drop,
    )
    while jobs := loc.next_round():
        loc.record(run_round(jobs))
    return loc.verdict()
