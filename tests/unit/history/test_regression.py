"""A node judged against its own history: the gate's busbw (the real gate over real nccl-tests
captures scaled per node) recorded run after run beside the run records; a node at 0.93x, above
the fleet floor so the gate passes it, is `history.regression` and its partners are not."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

import pytest

from cluster_tool.history import STORE_NAME, HistoryStore, judge_and_record
from cluster_tool.spec.thresholds import HistoryThresholds
from tests.unit.history.runs import NODES, gate_rows, write_run

DEFAULTS = HistoryThresholds()
# Five healthy runs: each node a little faster or slower from run to run, as real runs are.
HEALTHY = [
    {"gpu001": 1.0, "gpu002": 0.99, "gpu003": 1.01, "gpu004": 1.0},
    {"gpu001": 0.99, "gpu002": 1.0, "gpu003": 1.0, "gpu004": 1.01},
    {"gpu001": 1.01, "gpu002": 1.0, "gpu003": 0.99, "gpu004": 0.995},
    {"gpu001": 1.0, "gpu002": 1.01, "gpu003": 1.0, "gpu004": 1.0},
    {"gpu001": 0.995, "gpu002": 1.0, "gpu003": 1.005, "gpu004": 1.005},
]


def record(
    runs: Path,
    run_id: str,
    factors: Mapping[str, float],
    thresholds: HistoryThresholds = DEFAULTS,
    **kwargs: object,
) -> list[dict[str, object]]:
    rows = gate_rows(factors, runs.parent / f"work-{run_id}")
    run_dir, summary = write_run(runs, run_id, rows, **kwargs)  # type: ignore[arg-type]
    return [f.model_dump() for f in judge_and_record(run_dir, summary, thresholds)]


def history_of(runs: Path, thresholds: HistoryThresholds = DEFAULTS) -> None:
    for i, factors in enumerate(HEALTHY):
        assert record(runs, f"run{i}", factors, thresholds) == []


def test_a_node_at_0_93x_is_a_regression_against_its_own_history_and_its_partners_are_not(
    tmp_path: Path,
) -> None:
    runs = tmp_path / "runs"
    history_of(runs)
    # gpu004 at 0.93x: every job it is in runs at that pace, its pairs with the others too;
    # the gate passes it (gate_rows asserts the gate's verdict), its own history does not.
    found = record(runs, "run5", {"gpu001": 1.0, "gpu002": 1.0, "gpu003": 1.0, "gpu004": 0.93})
    assert [(f["check"], f["severity"], f["node"]) for f in found] == [
        ("history.regression", "warning", "gpu004")
    ]
    # Its baseline is its own: 479.99 GB/s single-node NVLS busbw (the capture's top quarter,
    # 480.16 at 8 GiB) x its five runs' paces, median 1.0; now 0.93x of it.
    assert "0.93x" in str(found[0]["observed"])
    assert "last 5 runs" in str(found[0]["message"])


def test_fewer_runs_than_min_runs_judge_nobody(tmp_path: Path) -> None:
    runs = tmp_path / "runs"
    for i, factors in enumerate(HEALTHY[:4]):
        assert record(runs, f"run{i}", factors) == []
    slow = {n: (0.93 if n == "gpu004" else 1.0) for n in NODES}
    assert record(runs, "run4", slow) == []
    # With the spec's min_runs at 4, the same history is enough.
    runs2 = tmp_path / "runs2"
    four = HistoryThresholds(min_runs=4)
    for i, factors in enumerate(HEALTHY[:4]):
        assert record(runs2, f"run{i}", factors, four) == []
    assert [f["node"] for f in record(runs2, "run4", slow, four)] == ["gpu004"]


def test_nodes_whose_runs_always_spread_that_wide_are_not_flagged_for_0_93x(
    tmp_path: Path,
) -> None:
    runs = tmp_path / "runs"
    # Every run's busbw (single and pairs alike) a few per cent off the usual, either way.
    spread = [0.94, 1.06, 0.95, 1.05, 1.0]
    for i, pace in enumerate(spread):
        assert record(runs, f"run{i}", dict.fromkeys(NODES, pace)) == []
    # Median 1.0, MAD 0.05: 0.93 is 0.6745 x 0.07 / 0.05 = 0.94 MADs away, under 3.5.
    assert record(runs, "run5", {n: (0.93 if n == "gpu004" else 1.0) for n in NODES}) == []


@pytest.mark.parametrize(("pace", "flagged"), [(0.97, []), (0.94, ["gpu004"])])
def test_on_a_node_that_never_varied_only_a_drop_past_min_drop_is_flagged(
    tmp_path: Path, pace: float, flagged: list[str]
) -> None:
    runs = tmp_path / "runs"
    for i in range(5):
        assert record(runs, f"run{i}", dict.fromkeys(NODES, 1.0)) == []
    found = record(runs, "run5", {n: (pace if n == "gpu004" else 1.0) for n in NODES})
    assert [f["node"] for f in found] == flagged


def test_a_swapped_board_is_a_new_identity_with_no_history_yet(tmp_path: Path) -> None:
    runs = tmp_path / "runs"
    history_of(runs)
    slow = {n: (0.93 if n == "gpu004" else 1.0) for n in NODES}
    # gpu004's GPU board was replaced: new serials, a new identity, judged from scratch.
    assert record(runs, "run5", slow, boards={"gpu004": 1}) == []
    with HistoryStore.open(runs / STORE_NAME, read_only=True) as store:
        trend = store.trend("gpu004")
    busbw = next(s for s in trend if s.key == "single-nvls nvls-all_reduce")
    assert len({p.identity for p in busbw.points}) == 2
    assert len(busbw.points) == 6


def test_a_replayed_run_is_neither_judged_nor_recorded(tmp_path: Path) -> None:
    runs = tmp_path / "runs"
    history_of(runs)
    slow = {n: (0.93 if n == "gpu004" else 1.0) for n in NODES}
    assert record(runs, "run5", slow, replayed=True) == []
    with HistoryStore.open(runs / STORE_NAME, read_only=True) as store:
        assert store.runs_of("gpu004") == 5


def test_a_store_that_cannot_be_used_is_a_warning_and_the_run_goes_on(tmp_path: Path) -> None:
    runs = tmp_path / "runs"
    runs.mkdir()
    (runs / STORE_NAME).write_text("not a database, whatever the name says\n" * 100)
    found = record(runs, "run0", dict.fromkeys(NODES, 1.0))
    assert [(f["check"], f["severity"]) for f in found] == [("history.store", "warning")]
    assert "not a history store" in str(found[0]["message"])
