"""Localisation: from failed jobs to the bad node, the bad path, or the straggler. Pure.

The screen runs the fleet in disjoint pairs, `screens` times with another partner each time
(successive rotations of the circle schedule): an intermittent node that fails 30 % of its jobs
slips through one screen 70 % of the time, through twelve 1.4 % of the time. Every failure is
then explained or re-tested:

- a node that fails with two different partners is bad, once the failures that a bad partner
  explains are set aside (the node with most failures is judged first);
- a node that fails once and is far below the fleet in its other jobs is bad too (a marginal
  node near the floor passes some jobs and fails others);
- a node with a failure no bad partner explains is re-tested `retests` times in a row with
  proven-good partners: one more failure names it, all passing clears it;
- a failed pair whose members are both cleared is run again: failing again, it is the path
  between them; passing, a transient (`nccl.flaky`).

A node that is never cleared of a failure is `unresolved`, which the findings make an error.
`FullSplit` localises a full job that fails though every node passed its pairs (a bad path
between two nodes the screens never paired): it halves the job until the pair is left.

The caller drives both: `while jobs := loc.next_round(): loc.record(run(jobs))` (or
`Localizer(...).run(run)`). The limits (`max_fail_share`, `straggler_z`) default to the spec's
`thresholds.nccl_gate`, whose model is the one place they are written.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable, Container, Mapping, Sequence
from dataclasses import dataclass, field

from cluster_tool.gate.plan import pair_rotation, sort_by_su
from cluster_tool.gate.thresholds import SPEC_DEFAULTS

# Iglewicz & Hoaglin's modified z-score (0.6745 (x - median) / MAD): robust to the bad
# nodes themselves; the cut is the spec's `straggler_zscore`.
_MAD_SCALE = 0.6745
STRAGGLER_Z = SPEC_DEFAULTS.straggler_zscore
# A straggler is also at least this far below the fleet's median: a fleet whose busbw never
# varies (MAD 0) is not flagged for a wobble.
MIN_DROP = 0.05
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
    z_cut: float = STRAGGLER_Z,
    min_drop: float = MIN_DROP,
) -> bool:
    """Far below the fleet (robust z under -z_cut) and at least `min_drop` below its median."""
    if stats is None:
        return False
    return stats.z(value) < -z_cut and value < stats.median * (1.0 - min_drop)


def stragglers(
    values: Mapping[str, float],
    z_cut: float = STRAGGLER_Z,
    min_drop: float = MIN_DROP,
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
    # Nodes with a failure nobody explained that could not be cleared: they must not pass.
    suspect: dict[str, list[PairResult]] = field(default_factory=dict)
    good: set[str] = field(default_factory=set)
    stop_reason: str | None = None
    stats: FleetStats | None = None


# Consecutive passes with proven partners that clear a node of a failure nobody explains: a node
# failing 30 % of its jobs passes eight in a row 6 % of the time, and it had to slip through
# the screens (and will still meet the full job) first.
DEFAULT_RETESTS = 8


@dataclass(frozen=True)
class _Seen:
    """One job as one of its members saw it."""

    round: int
    kind: str  # ok | slow | fail
    res: PairResult

    def others(self, node: str) -> frozenset[str]:
        return frozenset(n for n in self.res.nodes if n != node)


class Localizer:
    """The pair ladder's state machine: plans each round from what the previous ones said."""

    def __init__(
        self,
        nodes: Sequence[str],
        *,
        su_of: Mapping[str, int] | None = None,
        rotation: int = 0,
        max_fail_share: float = SPEC_DEFAULTS.max_failing_share,
        straggler_z: float = STRAGGLER_Z,
        min_drop: float = MIN_DROP,
        # One screen unless asked: the gate asks for the spec's `screens`, and the rails rung
        # re-runs nodes the pairs rung already screened.
        screens: int = 1,
        retests: int = DEFAULT_RETESTS,
    ) -> None:
        if len(set(nodes)) != len(nodes):
            raise ValueError("duplicate node names")
        if screens < 1 or retests < 1:
            raise ValueError("screens and retests must be at least 1")
        self._su = dict(su_of or {})
        self._nodes = sort_by_su(nodes, self._su)
        self._rotation = rotation
        self._max_share = max_fail_share
        self._z = straggler_z
        self._drop = min_drop
        self._screens = screens
        self._retests = retests
        self.result = Localisation(nodes=len(self._nodes))
        self._planned: list[tuple[str, ...]] = []
        self._phase = "screen"
        self._done = len(self._nodes) < 2
        self._seen: dict[str, list[_Seen]] = {n: [] for n in self._nodes}
        self._tested: dict[str, set[str]] = {}  # node -> partners it ran with
        self._score: dict[str, float] = {}  # node -> its best busbw with a clean job
        self._bad: dict[str, list[PairResult]] = {}
        self._slow: dict[str, list[PairResult]] = {}
        self._needs: dict[str, int] = {}  # suspect -> passes in a row still needed
        self._retest_rounds = 0
        self._confirming: dict[frozenset[str], PairResult] = {}
        self._confirmed: set[frozenset[str]] = set()

        if len(self._nodes) == 1:
            self.result.unresolved[self._nodes[0]] = "a single node has no partner"

    # -- driving ---------------------------------------------------------------------------

    @property
    def phase(self) -> str:
        """What the round `next_round` planned is for: `screen`, `retest` or `confirm`."""
        return self._phase

    def next_round(self) -> list[tuple[str, ...]]:
        """The jobs of the next round (each a tuple of nodes run together); [] when done."""
        planned: list[tuple[str, ...]] = []
        while not self._done and not planned:
            if self._phase == "screen":
                if self.result.rounds < self._screens:
                    pairs, _ = pair_rotation(
                        [n for n in self._nodes if n not in self._bad],
                        self._rotation + self.result.rounds,
                        self._su,
                    )
                    planned = list(pairs)
                    if not planned:
                        self._phase = "retest"
                else:
                    self._phase = "retest"
            elif self._phase == "retest":
                planned = self._plan_retests()
                if not planned:
                    self._phase = "confirm"
            elif self._phase == "confirm":
                planned = self._plan_confirm()
                if not planned:
                    self._finish()
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
        if self.result.rounds == 1:
            passed = [r.busbw_gbs for r in ordered if r.passed and r.busbw_gbs is not None]
            self.result.stats = fleet_stats(passed)
        for res in ordered:
            kind = self._kind(res)
            key = frozenset(res.nodes)
            if self._phase == "confirm" and key in self._confirming:
                first = self._confirming.pop(key)
                self._confirmed.add(key)
                # Failing again together, after both passed with others: the path. Passing
                # now: the first failure was transient, worth a warning, not a drain.
                (self.result.paths if kind == "fail" else self.result.flaky).append(first)
                continue
            for n in res.nodes:
                self._tested.setdefault(n, set()).update(m for m in res.nodes if m != n)
                self._seen.setdefault(n, []).append(_Seen(self.result.rounds, kind, res))
                if kind == "ok" and res.busbw_gbs is not None:
                    self._score[n] = max(self._score.get(n, 0.0), res.busbw_gbs)
        self._planned = []
        if self.result.rounds == 1:
            failed = sum(1 for r in ordered if not r.passed)
            if failed > self._max_share * len(self._nodes):
                # Every failed pair holds at least one failing node (or path): this many is
                # already more than the share a healthy fabric and software stack explain.
                self._stop(
                    f"{failed} of {len(ordered)} pairs failed in the screen, so at least "
                    f"{failed} of {len(self._nodes)} nodes fail (more than "
                    f"{self._max_share:.0%}): suspect the fabric or the software, not the nodes"
                )
                return
        self._judge()
        if self._phase == "retest":
            self._retest_rounds += 1

    def verdict(self) -> Localisation:
        """Drive to the end first; asking early returns what is known so far."""
        return self.result

    def run(
        self, run_round: Callable[[list[tuple[str, ...]]], Sequence[PairResult]]
    ) -> Localisation:
        """The whole localisation with `run_round(jobs) -> results`, one call per round."""
        while jobs := self.next_round():
            self.record(run_round(jobs))
        return self.verdict()

    # -- judging ---------------------------------------------------------------------------

    def _kind(self, res: PairResult) -> str:
        if not res.passed:
            return "fail"
        if res.busbw_gbs is not None and is_straggler(
            res.busbw_gbs, self.result.stats, self._z, self._drop
        ):
            return "slow"
        return "ok"

    def _edges(self, node: str, kind: str, blame: Container[str]) -> dict[str, list[PairResult]]:
        """The partners `node` ran a `kind` job with, and those jobs, leaving out partners in
        `blame` (a bad or slow partner explains the job)."""
        out: dict[str, list[PairResult]] = {}
        for s in self._seen.get(node, ()):
            partner = s.res.partner_of(node)
            if s.kind == kind and partner not in blame:
                out.setdefault(partner, []).append(s.res)
        return out

    def _unexplained(self, node: str, kind: str, blame: Container[str]) -> list[_Seen]:
        return [
            s
            for s in self._seen.get(node, ())
            if s.kind == kind and s.res.partner_of(node) not in blame
        ]

    def _judge(self) -> None:
        """Who is bad, who is slow, who is still a suspect, from every job so far.

        Each failed pair holds at least one culprit, so the bad nodes are a small cover of the
        failed pairs: the node failing with most partners is taken first (on a tie, the one
        whose partners failed with no one else: a partner that fails only with it is cleared by
        it), and the pairs it explains are set aside; a node named in an earlier round is
        taken before any other. A node is bad only with two partners
        left: with one, it or its partner or the path between them is re-tested.
        """
        bad: dict[str, list[PairResult]] = {}
        while True:
            best: tuple[tuple[bool, int, int, int], str] | None = None
            for n in self._nodes:
                if n in bad:
                    continue
                fails = self._edges(n, "fail", bad)
                if not fails:
                    continue
                # Failing once and far below the fleet with another partner: a marginal node.
                slows = self._edges(n, "slow", bad)
                partners = set(fails) | set(slows)
                if len(partners) < 2:
                    continue
                leaves = sum(1 for p in fails if len(self._edges(p, "fail", bad)) == 1)
                # Named before, judged first: more evidence must not turn two bad nodes that
                # failed together into one explaining the other.
                score = (n in self._bad, len(fails), leaves, len(partners))
                if best is None or score > best[0]:
                    best = (score, n)
            if best is None:
                break
            n = best[1]
            evidence = [
                s for s in self._seen[n] if s.kind != "ok" and s.res.partner_of(n) not in bad
            ]
            bad[n] = [s.res for s in evidence]
        slow: dict[str, list[PairResult]] = {}
        while True:
            pick: tuple[tuple[int, int], str] | None = None
            for n in self._nodes:
                if n in bad or n in slow:
                    continue
                slows = self._edges(n, "slow", {**bad, **slow})
                if len(slows) < 2:
                    continue
                leaves = sum(1 for p in slows if len(self._edges(p, "slow", bad)) == 1)
                if pick is None or (len(slows), leaves) > pick[0]:
                    pick = ((len(slows), leaves), n)
            if pick is None:
                break
            n = pick[1]
            slow[n] = [r for rs in self._edges(n, "slow", {**bad, **slow}).values() for r in rs]
        self._bad = bad
        self._slow = slow
        self.result.bad = dict(bad)
        self._needs = {}
        screens_done = self._screens
        for n in self._nodes:
            if n in bad or n in slow:
                continue
            seen = self._seen.get(n, [])
            failed = self._unexplained(n, "fail", bad)
            slowed = self._unexplained(n, "slow", {**bad, **slow})
            if failed:
                last = max(s.round for s in failed)
                streak = sum(
                    1 for s in seen if s.round > max(last, screens_done) and s.kind == "ok"
                )
                need = self._retests - streak
            elif slowed:
                last = max(s.round for s in slowed)
                need = 1 - sum(1 for s in seen if s.round > last and s.kind == "ok")
            else:
                need = 0 if any(s.kind == "ok" for s in seen) else 1
            if need > 0:
                self._needs[n] = need

    def _plan_retests(self) -> list[tuple[str, ...]]:
        if not self._needs:
            return []
        if self._retest_rounds >= 2 * self._retests + 1:
            for n in self._needs:
                self.result.unresolved[n] = (
                    f"not cleared after {self._retest_rounds} rounds of re-tests"
                )
            return []
        suspects = sorted(self._needs, key=lambda n: (-self._needs[n], n))
        planned = self._pair_with_good(suspects)
        if not planned:
            for n in suspects:
                self.result.unresolved.setdefault(
                    n, "no proven-good partner left to re-test it with"
                )
        return planned

    def _clean(self) -> list[str]:
        return [
            n
            for n in self._nodes
            if n not in self._bad
            and n not in self._slow
            and n not in self._needs
            and n not in self.result.unresolved
        ]

    def _pair_with_good(self, suspects: list[str]) -> list[tuple[str, ...]]:
        # Best-proven partners first, and from another SU when there is one, so the re-test
        # also crosses the spines; a partner it has not run with before when there is one.
        pool = sorted(self._clean(), key=lambda n: (-self._score.get(n, 0.0), n))
        used: set[str] = set()
        planned: list[tuple[str, ...]] = []
        for s in suspects:
            if s in used:
                continue
            tried = self._tested.get(s, set())
            options = [g for g in pool if g not in used and g != s]
            fresh = [g for g in options if g not in tried]
            if not options:
                continue
            su = self._su.get(s)
            choice = fresh or options
            other_su = [g for g in choice if su is None or self._su.get(g) != su]
            partner = (other_su or choice)[0]
            used |= {partner, s}
            planned.append((s, partner))
        return planned

    def _plan_confirm(self) -> list[tuple[str, ...]]:
        # Failed jobs no bad node explains, whose members are all cleared: run each once more.
        cleared = set(self._clean())
        planned: list[tuple[str, ...]] = []
        busy: set[str] = set()
        for n in self._nodes:
            for s in self._unexplained(n, "fail", self._bad):
                key = frozenset(s.res.nodes)
                if key in self._confirmed or key in self._confirming:
                    continue
                if not key <= cleared or key & busy:
                    continue
                self._confirming[key] = s.res
                busy |= key
                planned.append(s.res.nodes)
        return planned

    def _stop(self, reason: str) -> None:
        self.result.stop_reason = reason
        self.result.bad.clear()
        self._done = True

    def _finish(self) -> None:
        self._done = True
        res = self.result
        res.bad = dict(self._bad)
        stats = res.stats
        for node, evidence in self._slow.items():
            worst = min((r.busbw_gbs for r in evidence if r.busbw_gbs is not None), default=None)
            z = (
                round(stats.z(worst), 2)
                if stats is not None and worst is not None
                else float("nan")
            )
            res.stragglers[node] = (z, evidence)
        for node in self._needs:
            fails = self._unexplained(node, "fail", self._bad)
            if fails:
                res.suspect[node] = [s.res for s in fails]
        res.good = set(self._clean())
        n_bad = len(res.bad)
        if res.stop_reason is None and n_bad > self._max_share * len(self._nodes):
            self._stop(
                f"{n_bad} of {len(self._nodes)} nodes failed (more than {self._max_share:.0%}): "
                "suspect the fabric or the software, not the nodes"
            )


class FullSplit:
    """A job over many nodes failed though each passed its pairs: find the two nodes that fail
    only together (a bad path the screens never crossed), or else the smallest set that fails.

    Each step halves the set known to fail: its halves run side by side; if neither fails, the
    two ends sit in different halves, and the quarters are crossed (Q1+Q3 beside Q2+Q4, then
    Q1+Q4 beside Q2+Q3). Every job of a round is disjoint, so a round costs the set once. A
    set that then never fails again was entered on a fluke (a node just above the floor
    dipping under it once): the split goes back to the set before it, at most `backtracks`
    times. The last pair is run once more before it is named.
    """

    def __init__(self, nodes: Sequence[str], first: PairResult, backtracks: int = 2) -> None:
        self.suspects: list[str] = list(nodes)
        self.evidence: list[PairResult] = [first]
        self.path: PairResult | None = None
        self.rounds = 0
        self.jobs = 0
        self.done = len(self.suspects) < 2
        self._step = 0
        self._stack: list[list[str]] = []
        self._backtracks = backtracks
        self._planned: list[tuple[str, ...]] = []

    def _quarters(self) -> list[list[str]]:
        n = self.suspects
        q = [len(n) * i // 4 for i in range(5)]
        return [n[q[i] : q[i + 1]] for i in range(4)]

    def next_round(self) -> list[tuple[str, ...]]:
        if self.done:
            return []
        if len(self.suspects) == 2:
            self._planned = [tuple(self.suspects)]
            return list(self._planned)
        a, b, c, d = self._quarters()
        crossings = ([a + b, c + d], [a + c, b + d], [a + d, b + c])
        self._planned = [tuple(g) for g in crossings[self._step] if len(g) >= 2]
        return list(self._planned)

    def record(self, results: Sequence[PairResult]) -> None:
        self.rounds += 1
        self.jobs += len(results)
        failed = [r for r in results if not r.passed]
        if len(self.suspects) == 2:
            if failed:
                self.evidence.append(failed[0])
                self.path = failed[0]
                self.done = True
            else:
                self._back()
            return
        if len(failed) == 1:
            (res,) = failed
            self.evidence.append(res)
            self._stack.append(self.suspects)
            members = set(res.nodes)
            self.suspects = [n for n in self.suspects if n in members]
            self._step = 0
            return
        if failed:
            # Both halves fail: two faults, and the set as it stands is all that can be said.
            self.done = True
        elif self._step == 2:
            self._back()
        else:
            self._step += 1

    def _back(self) -> None:
        if self._stack and self._backtracks > 0:
            self._backtracks -= 1
            self.suspects = self._stack.pop()
            self._step = 0
        else:
            self.done = True
