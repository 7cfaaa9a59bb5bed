"""Where a cabling plan departs from the rail-optimized rule: every HCA of a node on its own
SU's leaf of its rail, at the same down-port on every rail; one leaf per rail per SU; every
leaf with the same number of uplinks, spread over every spine.

A plan derived from the rule has none. A plan adopted from a running cluster keeps the
fabric as it is cabled, so these are its departures: warnings for the operator to judge
(`fabric.departure`), never errors, since the cluster runs that way.
"""

from __future__ import annotations

from collections import Counter, defaultdict

from cluster_tool.fabric.plan import CablingRow, FabricPlan
from cluster_tool.findings import Finding
from cluster_tool.spec.models import Cluster

CHECK = "fabric.departure"


def departures(plan: FabricPlan, cluster: Cluster | None = None) -> list[Finding]:
    """Every departure of `plan` from the rail-optimized rule, as warnings; with the spec, its
    compute HCAs it says are not cabled too."""
    out: list[Finding] = []
    out += _split_rails(plan)
    by_node: dict[str, list[CablingRow]] = defaultdict(list)
    for row in plan.rows:
        by_node[row.node].append(row)
    for node, rows in by_node.items():
        out += _node_departures(plan, node, rows)
    for cable in cluster.fabric.cables if cluster is not None else ():
        if cable.leaf is None:
            out.append(
                _finding(
                    f"{cable.node} {cable.hca} is not cabled",
                    node=cable.node,
                    component=cable.hca,
                    expected="on its rail's leaf",
                    observed="not cabled",
                )
            )
    out += _uplink_departures(plan)
    return out


def _finding(
    message: str,
    *,
    node: str | None = None,
    component: str | None = None,
    expected: str | None = None,
    observed: str | None = None,
) -> Finding:
    return Finding(
        check=CHECK,
        severity="warning",
        node=node,
        component=component,
        expected=expected,
        observed=observed,
        message=message,
    )


def _split_rails(plan: FabricPlan) -> list[Finding]:
    """One SU's rail over two leaves (its nodes cannot all meet on one leaf)."""
    used = {row.leaf for row in plan.rows}
    leaves_of: dict[tuple[int, int], list[str]] = defaultdict(list)
    for name, (su, rail) in plan.leaf_of.items():
        if name in used:
            leaves_of[(su, rail)].append(name)
    out = []
    for (su, rail), names in sorted(leaves_of.items()):
        if len(names) > 1:
            out.append(
                _finding(
                    f"rail {rail} of SU {su} is split across {len(names)} leaves: "
                    + ", ".join(sorted(names)),
                    component=sorted(names)[0],
                    expected=f"one leaf for rail {rail} of SU {su}",
                    observed=", ".join(sorted(names)),
                )
            )
    return out


def _node_departures(plan: FabricPlan, node: str, rows: list[CablingRow]) -> list[Finding]:
    out = []
    ports = Counter(row.leaf_port for row in rows)
    port = ports.most_common(1)[0][0]
    leaves_used: dict[str, list[str]] = defaultdict(list)
    for row in rows:
        leaves_used[row.leaf].append(row.hca)
        place = plan.leaf_of.get(row.leaf)
        where = f"{row.leaf} port {row.leaf_port}"
        if place is None:
            out.append(
                _finding(
                    f"{node} {row.hca} (rail {row.rail}) is on {where}, which is not a leaf",
                    node=node,
                    component=row.hca,
                    expected=f"a rail-{row.rail} leaf",
                    observed=where,
                )
            )
            continue
        su, rail = place
        if su != row.su:
            out.append(
                _finding(
                    f"{node} {row.hca} is on {where}, a leaf of SU {su}; {node} is in SU "
                    f"{row.su} (a node on the wrong SU)",
                    node=node,
                    component=row.hca,
                    expected=f"a leaf of SU {row.su}",
                    observed=where,
                )
            )
        if rail != row.rail:
            out.append(
                _finding(
                    f"{node} {row.hca} (rail {row.rail}) is on {where}, the rail-{rail} leaf "
                    "(a rail on another rail's leaf)",
                    node=node,
                    component=row.hca,
                    expected=f"a rail-{row.rail} leaf",
                    observed=where,
                )
            )
        if row.leaf_port != port:
            out.append(
                _finding(
                    f"{node} {row.hca} is on port {row.leaf_port}; its other HCAs are on "
                    f"port {port}",
                    node=node,
                    component=row.hca,
                    expected=f"port {port}",
                    observed=where,
                )
            )
    for leaf, hcas in sorted(leaves_used.items()):
        if len(hcas) > 1:
            out.append(
                _finding(
                    f"{node} has {len(hcas)} HCAs on one leaf, {leaf}: {', '.join(hcas)}",
                    node=node,
                    component=",".join(hcas),
                    expected="one HCA per leaf",
                    observed=leaf,
                )
            )
    return out


def _uplink_departures(plan: FabricPlan) -> list[Finding]:
    """Leaves with fewer uplinks than the most any leaf has, or none to a spine others reach."""
    count: Counter[str] = Counter()
    reach: dict[str, Counter[str]] = defaultdict(Counter)
    for link in plan.links:
        count[link.leaf] += 1
        reach[link.leaf][link.spine] += 1
    used = {row.leaf for row in plan.rows}
    leaves = sorted(used | set(count))
    if not count:
        return []
    most = max(count.values())
    spines = sorted({link.spine for link in plan.links})
    out = []
    for leaf in leaves:
        have = count.get(leaf, 0)
        if have < most:
            out.append(
                _finding(
                    f"{leaf} has {have} uplinks; the most any leaf has is {most} "
                    "(a missing uplink)",
                    component=leaf,
                    expected=f"{most} uplinks",
                    observed=f"{have} uplinks",
                )
            )
        if most >= len(spines):  # every leaf can reach every spine
            absent = [s for s in spines if not reach[leaf][s]]
            if absent and have:
                out.append(
                    _finding(
                        f"{leaf} has no uplink to {', '.join(absent)}",
                        component=leaf,
                        expected="an uplink to every spine",
                        observed=f"none to {len(absent)} of {len(spines)} spines",
                    )
                )
    return out
