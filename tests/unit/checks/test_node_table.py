"""check_node is a table, probe -> the checks that judge its reading: every node check the
registry files under a probe has that probe's row, and every row's probe is one the health
check collects (a row for a probe nobody runs would never judge anything)."""

from __future__ import annotations

from cluster_tool.checks.node import NODE_CHECKS_BY_PROBE
from cluster_tool.probes.node import HEALTH_PROBES
from cluster_tool.registry import CHECKS, NODE_CHECKS


def test_every_row_of_the_table_judges_a_probe_the_health_check_collects() -> None:
    rows = [row.probe.name for row in NODE_CHECKS_BY_PROBE if row.probe is not None]
    assert len(set(rows)) == len(rows), "one row per probe"
    assert set(rows) - {p.name for p in HEALTH_PROBES} == set()


def test_every_node_check_has_the_row_of_the_probe_the_registry_names() -> None:
    rows = {row.probe.name for row in NODE_CHECKS_BY_PROBE if row.probe is not None}
    # os.unreachable names no probe: the host did not answer at all.
    without_row = sorted(
        f"{c} (probe {CHECKS[c].probe})"
        for c in NODE_CHECKS
        if CHECKS[c].probe is not None and CHECKS[c].probe not in rows
    )
    assert without_row == []
