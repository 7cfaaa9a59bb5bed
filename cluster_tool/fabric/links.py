"""The run record's rail × node link matrix: every planned HCA of the run's nodes, `up` or the
fabric finding on it, as the report draws it."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from cluster_tool.fabric.plan import FabricPlan
from cluster_tool.findings import Finding


def link_matrix(
    plan: FabricPlan,
    nodes: Iterable[str],
    findings: Sequence[Finding],
    fabric_checked: bool,
) -> list[dict[str, Any]]:
    """One entry per (node, rail): `up`, or the fabric check that failed on that HCA."""
    wanted = set(nodes)
    by_hca: dict[tuple[str, str], Finding] = {}
    for f in findings:
        if not f.check.startswith("fabric.") or f.node is None or not f.fails:
            continue
        # A swap names two HCAs (typed); every other fabric finding's component is one HCA.
        for hca in f.swapped or (f.component,):
            if hca is not None:
                by_hca.setdefault((f.node, hca), f)
    links = []
    for row in plan.rows:
        if row.node not in wanted:
            continue
        bad = by_hca.get((row.node, row.hca))
        if not fabric_checked:
            state, detail = "unknown", "fabric not checked"
        elif bad is not None:
            state, detail = bad.check.removeprefix("fabric."), bad.message
        else:
            state, detail = "up", f"{row.hca} on {row.leaf} port {row.leaf_port}"
        links.append(
            {"node": row.node, "rail": row.rail, "hca": row.hca, "state": state, "detail": detail}
        )
    return links
