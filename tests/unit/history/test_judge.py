"""Who a drop is laid on: judge() over one run's measurements and the nodes' baselines. The
figures are the real captures' peak busbw (480.16 GB/s single-node NVLS, 469.21 GB/s between two
NDR nodes; hand-read from the top quarter of their tables)."""

from __future__ import annotations

from cluster_tool.history import Baseline, Identity, Measurement, judge
from cluster_tool.spec.thresholds import HistoryThresholds

SINGLE, PAIR = 480.16, 469.21
SINGLE_KEY, PAIR_KEY = "single-nvls nvls-all_reduce", "pairs all_reduce"
NODES = ("gpu003", "gpu004")
IDS = {n: Identity(n, (f"serial-{n}",), (f"guid-{n}",)) for n in NODES}
BASELINES = {
    (IDS[n].fingerprint, "busbw_gbs", key): Baseline(value, 1.0, 5)
    for n in NODES
    for key, value in ((SINGLE_KEY, SINGLE), (PAIR_KEY, PAIR))
}


def run(single: dict[str, float], pair: float) -> list[Measurement]:
    """A two-node validation: each node's single rung, and their one pair."""
    return [Measurement(n, "busbw_gbs", SINGLE_KEY, SINGLE * single[n]) for n in NODES] + [
        Measurement("gpu003", "busbw_gbs", PAIR_KEY, PAIR * pair, ("gpu004",)),
        Measurement("gpu004", "busbw_gbs", PAIR_KEY, PAIR * pair, ("gpu003",)),
    ]


def named(measurements: list[Measurement]) -> list[tuple[str | None, str | None]]:
    found = judge(measurements, IDS, BASELINES, HistoryThresholds())
    return [(f.node, f.component) for f in found]


def test_a_slow_node_takes_the_drop_of_its_pair_and_its_partner_is_not_named() -> None:
    # gpu003's only pair is with gpu004 and dropped with it; gpu004 dropped alone too.
    assert named(run({"gpu003": 1.0, "gpu004": 0.93}, 0.93)) == [("gpu004", SINGLE_KEY)]


def test_a_pair_that_dropped_while_both_nodes_alone_did_not_names_both() -> None:
    # The path between them (a cable, a leaf port): nothing tells which end; both are said.
    assert named(run({"gpu003": 1.0, "gpu004": 1.0}, 0.90)) == [
        ("gpu003", PAIR_KEY),
        ("gpu004", PAIR_KEY),
    ]


def test_nothing_is_said_when_nobody_dropped() -> None:
    assert named(run({"gpu003": 0.99, "gpu004": 1.0}, 0.985)) == []


def test_a_drop_shared_with_a_partner_that_has_no_history_names_nobody() -> None:
    fresh = Identity("gpu004", ("a new board",), ("guid-gpu004",))
    found = judge(
        run({"gpu003": 1.0, "gpu004": 0.93}, 0.93),
        {**IDS, "gpu004": fresh},
        BASELINES,
        HistoryThresholds(),
    )
    # gpu004 is new hardware, judged from scratch; gpu003's drop is on its pair with gpu004,
    # which nothing of gpu004's can clear or confirm: nobody is named for it.
    assert found == []
