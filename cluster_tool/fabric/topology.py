"""Where nodes sit on the fabric (SU, leaf per rail, spines per leaf): the gate's view of the plan.

The gate needs it twice: to prefer pairs that cross SUs, and to name the leaf/spine hops
between two nodes that fail only together.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from ClusterShell.NodeSet import NodeSet

from cluster_tool.fabric.plan import FabricPlan


@dataclass(frozen=True)
class Topology:
    """SU of each node, leaf and HCA of each (node, rail), spines each leaf is cabled to."""

    su_of: Mapping[str, int] = field(default_factory=dict)
    leaf_of: Mapping[tuple[str, int], str] = field(default_factory=dict)
    hca_of: Mapping[tuple[str, int], str] = field(default_factory=dict)
    spines_of: Mapping[str, frozenset[str]] = field(default_factory=dict)

    @classmethod
    def from_plan(cls, plan: FabricPlan) -> Topology:
        """From the plan's cabling rows and leaf–spine links."""
        su_of: dict[str, int] = {}
        leaf_of: dict[tuple[str, int], str] = {}
        hca_of: dict[tuple[str, int], str] = {}
        for row in plan.rows:
            su_of[row.node] = row.su
            leaf_of[(row.node, row.rail)] = row.leaf
            hca_of[(row.node, row.rail)] = row.hca
        spines: dict[str, set[str]] = defaultdict(set)
        for link in plan.links:
            spines[link.leaf].add(link.spine)
        return cls(su_of, leaf_of, hca_of, {k: frozenset(v) for k, v in spines.items()})

    def rails_of(self, node: str) -> list[int]:
        return sorted(r for (n, r) in self.leaf_of if n == node)

    def path(self, a: str, b: str, rails: Iterable[int] | None = None) -> list[str]:
        """Hops between two nodes per rail: `rail 0: a/mlx5_0 > leaf > spines > leaf > b/mlx5_0`."""
        wanted = list(rails) if rails is not None else self.rails_of(a)
        hops = []
        for rail in wanted:
            la, lb = self.leaf_of.get((a, rail)), self.leaf_of.get((b, rail))
            end_a = f"{a}/{self.hca_of.get((a, rail), '?')}"
            end_b = f"{b}/{self.hca_of.get((b, rail), '?')}"
            if la is None or lb is None:
                hops.append(f"rail {rail}: {end_a} > ? > {end_b} (not in the cabling plan)")
            elif la == lb:
                hops.append(f"rail {rail}: {end_a} > {la} > {end_b}")
            else:
                common = self.spines_of.get(la, frozenset()) & self.spines_of.get(lb, frozenset())
                middle = str(NodeSet.fromlist(sorted(common))) if common else "no common spine"
                hops.append(f"rail {rail}: {end_a} > {la} > {middle} > {lb} > {end_b}")
        return hops
