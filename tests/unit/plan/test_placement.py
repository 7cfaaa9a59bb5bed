"""Rank placement properties: TP in one node, pipelines in one SU when it is large enough,
DP peers on one rail, drained nodes never used."""

from __future__ import annotations

from collections import defaultdict

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from cluster_tool.errors import UsageError
from cluster_tool.plan import ClusterShape, Layout, place, placeable
from cluster_tool.plan.placement import coordinates


@st.composite
def clusters_and_layouts(draw: st.DrawFn) -> tuple[ClusterShape, Layout]:
    g = draw(st.sampled_from([4, 8]))
    nodes = draw(st.integers(min_value=1, max_value=48))
    per_su = draw(st.integers(min_value=1, max_value=16))
    cluster = ClusterShape.synthetic(nodes=nodes, nodes_per_su=per_su, gpus_per_node=g)
    names = [n.name for n in cluster.nodes]
    drained = draw(st.lists(st.sampled_from(names), max_size=max(0, nodes // 3), unique=True))
    cluster = cluster.with_drained(drained)
    tp = draw(st.sampled_from([t for t in (1, 2, 4, 8) if t <= g]))
    cp = draw(st.sampled_from([1, 1, 2]))
    # Draw only layouts that fit (drawing freely and filtering rejected too many: Hypothesis
    # fails its filter_too_much health check now and then).
    usable = cluster.usable_gpus
    pp = draw(st.integers(min_value=1, max_value=max(1, min(12, usable // (tp * cp)))))
    fitting = [
        d
        for d in range(1, 17)
        if placeable(Layout(tp=tp, pp=pp, dp=d, cp=cp), g) and tp * cp * pp * d <= usable
    ]
    assume(fitting)
    layout = Layout(tp=tp, pp=pp, dp=draw(st.sampled_from(fitting)), cp=cp)
    return cluster, layout


@settings(max_examples=300, deadline=None)
@given(clusters_and_layouts())
def test_placement_properties(case: tuple[ClusterShape, Layout]) -> None:
    cluster, layout = case
    placement = place(layout, cluster)
    g = cluster.gpus_per_node
    drained = {n.name for n in cluster.nodes if n.drained}
    su_of = {n.name: n.su for n in cluster.nodes}

    # Every rank placed exactly once, G per node, on a usable node.
    assert len(placement.ranks) == layout.gpus
    assert len(set(placement.hostfile)) == len(placement.hostfile) == layout.gpus // g
    assert not drained & set(placement.hostfile)
    per_node: dict[str, int] = defaultdict(int)
    for slot in placement.ranks:
        per_node[slot.node] += 1
        assert (slot.tp, slot.cp, slot.dp, slot.pp) == coordinates(slot.rank, layout)
        assert su_of[slot.node] == slot.su
    assert set(per_node.values()) == {g}

    # Every TP group within one node.
    for group in placement.tp_groups():
        assert len(group) == layout.tp
        assert len({s.node for s in group}) == 1

    # DP rail-aligned: members on different nodes use the same local ranks (same rails).
    for group in placement.dp_groups():
        by_node: dict[str, set[int]] = defaultdict(set)
        for s in group:
            by_node[s.node].add(s.local_rank)
        assert len({frozenset(v) for v in by_node.values()}) == 1

    # The per-node count of SU-crossing pipeline pairs agrees with the per-rank truth.
    pairs = placement.pp_pairs()
    assert len(pairs) == layout.tp * layout.cp * layout.dp * (layout.pp - 1)
    assert placement.pp_pairs_across_su() == sum(1 for a, b in pairs if a.su != b.su)

    # Every PP pair within one SU when the SUs are large enough to hold whole pipelines.
    stage = layout.tp * layout.cp * layout.dp
    chains = max(1, stage // g)
    length = (layout.gpus // g) // chains
    sizes = cluster.su_sizes()
    if sum(size // length for size in sizes.values()) >= chains:
        assert placement.pp_chains_whole_in_su
        assert placement.pp_pairs_across_su() == 0
        for a, b in placement.pp_pairs():
            assert a.su == b.su


def test_pipeline_neighbours_stay_in_one_su_on_a_4su_cluster() -> None:
    # 4 SUs of 32 nodes, TP 8, PP 8, DP 16: 16 pipelines of 8 nodes, 4 per SU.
    cluster = ClusterShape.synthetic(nodes=128, nodes_per_su=32)
    placement = place(Layout(tp=8, pp=8, dp=16), cluster)
    assert placement.pp_pairs_across_su() == 0
    # A plain rank-order hostfile (gpu001, gpu002, ...) would put stage k on nodes
    # 16k..16k+15, so every pipeline would cross all four SUs.
    su_of_rank = {s.rank: s.su for s in placement.ranks}
    pipeline0 = [r for r in range(0, 1024, 128)]
    assert len({su_of_rank[r] for r in pipeline0}) == 1


def test_drained_node_is_skipped_and_spare_nodes_are_reported_idle() -> None:
    cluster = ClusterShape.synthetic(nodes=6, nodes_per_su=6).with_drained(["gpu002"])
    placement = place(Layout(tp=8, pp=2, dp=2), cluster)
    assert "gpu002" not in placement.hostfile
    assert len(placement.hostfile) == 4
    assert len(placement.idle_nodes) == 1
    assert placement.idle_nodes[0] not in (*placement.hostfile, "gpu002")


def test_layout_that_does_not_line_up_or_fit_is_a_usage_error() -> None:
    cluster = ClusterShape.synthetic(nodes=2)
    with pytest.raises(UsageError, match="line up"):
        place(Layout(tp=3, pp=1, dp=8), cluster)
    with pytest.raises(UsageError, match="usable"):
        place(Layout(tp=8, pp=4, dp=1), cluster)
