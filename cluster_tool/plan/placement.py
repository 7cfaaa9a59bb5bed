"""Rank placement: which node runs which ranks, so that TP stays inside a node, pipeline
neighbours share an SU (one leaf hop) and data-parallel peers sit on the same rail.

Ranks follow Megatron-LM's default order, `tp-cp-dp-pp` (TP fastest, PP slowest), and a
launcher gives node `node_rank` the ranks `node_rank·G … node_rank·G + G−1` (G GPUs per
node). The planner therefore only chooses the order of the hostfile: which physical node
takes each node rank.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from functools import cached_property
from itertools import pairwise

from cluster_tool.errors import UsageError
from cluster_tool.plan.cluster import ClusterShape, PlanNode
from cluster_tool.plan.estimate import Layout


@dataclass(frozen=True)
class RankSlot:
    """One rank: where it runs and its coordinates in the parallel grid."""

    rank: int
    node: str
    su: int
    local_rank: int
    tp: int
    cp: int
    pp: int
    dp: int


@dataclass(frozen=True)
class Placement:
    """Hostfile order (node rank → node) and, derived from it, every rank's place."""

    layout: Layout
    hostfile: tuple[str, ...]
    sus: tuple[int, ...]  # SU of each hostfile line
    gpus_per_node: int
    pp_chains_whole_in_su: bool  # every pipeline sits inside one SU
    idle_nodes: tuple[str, ...]

    @cached_property
    def ranks(self) -> tuple[RankSlot, ...]:
        g = self.gpus_per_node
        slots = []
        for rank in range(self.layout.gpus):
            node = rank // g
            tp, cp, dp, pp = coordinates(rank, self.layout)
            slots.append(
                RankSlot(
                    rank=rank,
                    node=self.hostfile[node],
                    su=self.sus[node],
                    local_rank=rank % g,
                    tp=tp,
                    cp=cp,
                    pp=pp,
                    dp=dp,
                )
            )
        return tuple(slots)

    def tp_groups(self) -> list[list[RankSlot]]:
        return _groups(self.ranks, lambda r: (r.cp, r.pp, r.dp))

    def dp_groups(self) -> list[list[RankSlot]]:
        return _groups(self.ranks, lambda r: (r.tp, r.cp, r.pp))

    def pp_groups(self) -> list[list[RankSlot]]:
        return [
            sorted(group, key=lambda r: r.pp)
            for group in _groups(self.ranks, lambda r: (r.tp, r.cp, r.dp))
        ]

    def pp_pairs(self) -> list[tuple[RankSlot, RankSlot]]:
        """Adjacent pipeline stages: the point-to-point pairs."""
        return [(a, b) for group in self.pp_groups() for a, b in pairwise(group)]

    def pp_pairs_across_su(self) -> int:
        """Point-to-point pairs whose ends are in different SUs (counted per node, not per
        rank, so that it stays cheap on 16K GPUs)."""
        g = self.gpus_per_node
        stage = self.layout.tp * self.layout.cp * self.layout.dp
        slots = len(self.hostfile)
        if stage % g == 0:
            # Every rank of node j has its successor on node j + stage/g.
            step = stage // g
            return g * sum(1 for j in range(slots - step) if self.sus[j] != self.sus[j + step])
        # Several stages per node: only the last stage of node j continues on node j + 1.
        return stage * sum(1 for j in range(slots - 1) if self.sus[j] != self.sus[j + 1])


def _groups(ranks: tuple[RankSlot, ...], key: object) -> list[list[RankSlot]]:
    groups: dict[object, list[RankSlot]] = defaultdict(list)
    for slot in ranks:
        groups[key(slot)].append(slot)  # type: ignore[operator]
    return list(groups.values())


def coordinates(rank: int, layout: Layout) -> tuple[int, int, int, int]:
    """(tp, cp, dp, pp) of a global rank in Megatron's `tp-cp-dp-pp` order."""
    tp = rank % layout.tp
    cp = (rank // layout.tp) % layout.cp
    dp = (rank // (layout.tp * layout.cp)) % layout.dp
    pp = rank // (layout.tp * layout.cp * layout.dp)
    return tp, cp, dp, pp


def placeable(layout: Layout, gpus_per_node: int) -> bool:
    """Whether the layout lines up with node boundaries: TP divides a node, whole nodes are
    used, and a node holds either whole pipeline stages or whole slices of one stage."""
    g = gpus_per_node
    if g % layout.tp or layout.gpus % g:
        return False
    stage = layout.tp * layout.cp * layout.dp  # ranks of one pipeline stage
    return stage % g == 0 or g % stage == 0


def place(layout: Layout, cluster: ClusterShape) -> Placement:
    """Assign node ranks to usable nodes: whole pipelines inside one SU when they fit."""
    g = cluster.gpus_per_node
    if not placeable(layout, g):
        raise UsageError(
            f"layout TP {layout.tp} CP {layout.cp} PP {layout.pp} DP {layout.dp} does not line "
            f"up with {g}-GPU nodes"
        )
    slots = layout.gpus // g
    usable = cluster.usable_nodes
    if slots > len(usable):
        raise UsageError(f"layout needs {slots} nodes, {len(usable)} are usable")
    stage = layout.tp * layout.cp * layout.dp
    # Node rank j runs pipeline stage(s) of chain j mod D at position j // D: D chains of
    # `length` nodes each, and the nodes of one chain talk to each other point-to-point.
    chains = max(1, stage // g)
    length = slots // chains

    by_su: dict[int, list[PlanNode]] = defaultdict(list)
    for node in sorted(usable, key=lambda n: (n.su, n.name)):
        by_su[node.su].append(node)
    assigned: list[list[PlanNode]] = []
    leftovers: list[PlanNode] = []
    for su in sorted(by_su):
        pool = by_su[su]
        while len(pool) >= length and len(assigned) < chains:
            assigned.append(pool[:length])
            pool = pool[length:]
        leftovers.extend(pool)
    whole = len(assigned) == chains
    while len(assigned) < chains:  # spill the rest over SU boundaries, in SU order
        assigned.append(leftovers[:length])
        leftovers = leftovers[length:]

    hostfile: list[PlanNode] = [assigned[j % chains][j // chains] for j in range(slots)]
    used = {n.name for n in hostfile}
    return Placement(
        layout=layout,
        hostfile=tuple(n.name for n in hostfile),
        sus=tuple(n.su for n in hostfile),
        gpus_per_node=g,
        pp_chains_whole_in_su=whole,
        idle_nodes=tuple(n.name for n in usable if n.name not in used),
    )
