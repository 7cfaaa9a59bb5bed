"""The cabling plan: SuperPOD rule, reference switch counts, properties, CSV round trip."""

from __future__ import annotations

from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cluster_tool.errors import ParseError
from cluster_tool.fabric.plan import (
    CablingRow,
    SwitchLink,
    cabling_plan,
    leaves,
    parse_cabling_csv,
    parse_switch_links_csv,
    read_cabling_csv,
    read_switch_links_csv,
    spines,
    switch_links,
    write_cabling_csv,
    write_switch_links_csv,
)
from cluster_tool.spec import BUILTIN_PROFILES, Cluster, load_spec, spec_from_dict

EXAMPLES = Path(__file__).resolve().parents[3] / "examples"


def spec(nodes: int, **fabric: Any) -> dict[str, Any]:
    """A spec dict of `nodes` HGX H100 nodes; `fabric` overrides fabric keys."""
    return {
        "apiVersion": "cluster-tool/v1",
        "kind": "Cluster",
        "name": "t",
        "management": {"network": "10.0.0.0/16"},
        "bmc": {
            "address_pattern": "{name}-bmc",
            "credentials": {"username": {"env": "U"}, "password": {"env": "P"}},
        },
        "nodes": [
            {"hosts": "head", "address": "10.0.0.10"},
            {
                "hosts": f"gpu[0001-{nodes:04d}]",
                "profile": fabric.pop("profile", "hgx-h100-8x-ndr"),
                "address": "10.0.1.1",
            },
        ],
        "profiles": fabric.pop("profiles", {}),
        "fabric": {"subnet_manager": "head", **fabric},
        "slurm": {"controller": "head"},
    }


@pytest.mark.parametrize(
    ("sus", "leaf_count", "spine_count"), [(1, 8, 4), (2, 16, 8), (3, 24, 16), (4, 32, 16)]
)
@pytest.mark.parametrize("short", [0, 1], ids=["full", "one-port-for-ufm"])
def test_switch_counts_follow_the_superpod_reference(
    sus: int, leaf_count: int, spine_count: int, short: int
) -> None:
    cluster = spec_from_dict(spec(32 * sus - short))
    assert len(leaves(cluster)) == leaf_count
    assert len(spines(cluster)) == spine_count
    links = switch_links(cluster)
    assert len(links) == leaf_count * 32
    # Every spine gets the same number of links from every leaf.
    per_pair = Counter((link.leaf, link.spine) for link in links)
    assert set(per_pair.values()) == {32 // spine_count}
    assert len(per_pair) == leaf_count * spine_count


def test_superpod_rule_in_the_h200_example() -> None:
    cluster = load_spec(EXAMPLES / "h200-4su.yml")
    rows = {(r.node, r.rail): r for r in cabling_plan(cluster)}
    # gpu033 is node 1 of SU 2; its rail-5 HCA (mlx5_9, GPU 5) goes to su2-leaf-r5 port 1.
    assert rows[("gpu033", 5)] == CablingRow("gpu033", "mlx5_9", 5, 5, 2, "su2-leaf-r5", 1)
    assert rows[("gpu127", 0)] == CablingRow("gpu127", "mlx5_0", 0, 0, 4, "su4-leaf-r0", 31)
    links = switch_links(cluster)
    assert links[0] == SwitchLink("su1-leaf-r0", 33, "spine01", 1)
    assert links[1] == SwitchLink("su1-leaf-r0", 34, "spine02", 1)
    assert links[16] == SwitchLink("su1-leaf-r0", 49, "spine01", 2)


def test_rail_comes_from_the_profile_not_the_mlx5_index() -> None:
    base = dict(BUILTIN_PROFILES["hgx-h100-8x-ndr"])
    # A board where mlx5_0 sits next to GPU 7 and is cabled to rail 7.
    hcas = [dict(h) for h in base["hcas"]]
    hcas[0]["rail"], hcas[7]["rail"] = 7, 0
    hcas[0]["gpu"], hcas[7]["gpu"] = 7, 0
    cluster = spec_from_dict(
        spec(2, profile="odd", profiles={"odd": {"extends": "hgx-h100-8x-ndr", "hcas": hcas}})
    )
    row = next(r for r in cabling_plan(cluster) if r.hca == "mlx5_0" and r.node == "gpu0001")
    assert (row.rail, row.gpu, row.leaf) == (7, 7, "su1-leaf-r7")


@st.composite
def clusters(draw: st.DrawFn) -> Cluster:
    rails = draw(st.integers(1, 8))
    su_size = draw(st.integers(1, 16))
    sus = draw(st.integers(1, 4))
    nodes = draw(st.integers(1, su_size * sus))
    uplinks = draw(st.integers(1, su_size))
    divisors = [d for d in range(1, uplinks + 1) if uplinks % d == 0]
    spine_count = draw(st.sampled_from(divisors))
    leaf_count = rails * -(-nodes // su_size)
    spine_ports = max(2, leaf_count * uplinks // spine_count)
    # Shuffle which device serves which rail: the plan must follow the profile.
    order = draw(st.permutations(list(range(rails))))
    hcas = [
        {"device": f"mlx5_{i}", "pci": f"0000:{16 + i:02x}:00.0", "gpu": order[i], "rail": order[i]}
        for i in range(rails)
    ]
    profile = {
        "extends": "hgx-h100-8x-ndr",
        "gpu_count": 8,
        "hcas": hcas,
        "nics": [],
    }
    return spec_from_dict(
        spec(
            nodes,
            profile="p",
            profiles={"p": profile},
            rails=rails,
            su_size=su_size,
            uplinks_per_leaf=uplinks,
            spines=spine_count,
            leaf_ports=su_size + uplinks,
            spine_ports=spine_ports,
        )
    )


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(clusters())
def test_cabling_plan_properties(cluster: Cluster) -> None:
    rows = cabling_plan(cluster)
    rails = cluster.fabric.rails
    nodes = [n.name for n in cluster.gpu_nodes()]
    # Every HCA has exactly one leaf port.
    assert Counter((r.node, r.hca) for r in rows) == {
        (n, f"mlx5_{i}"): 1 for n in nodes for i in range(rails)
    }
    # No leaf port is used twice.
    assert len({(r.leaf, r.leaf_port) for r in rows}) == len(rows)
    # Each leaf holds exactly one rail (and one SU).
    rails_on_leaf: dict[str, set[tuple[int, int]]] = defaultdict(set)
    for r in rows:
        rails_on_leaf[r.leaf].add((r.rail, r.su))
    assert all(len(v) == 1 for v in rails_on_leaf.values())
    # Every node appears on all rails.
    assert {n: {r.rail for r in rows if r.node == n} for n in nodes} == {
        n: set(range(rails)) for n in nodes
    }
    # Down-ports stay below the up-ports.
    assert all(1 <= r.leaf_port <= cluster.fabric.su_size for r in rows)
    links = switch_links(cluster)
    assert len({(link.leaf, link.leaf_port) for link in links}) == len(links)
    assert len({(link.spine, link.spine_port) for link in links}) == len(links)
    assert all(
        cluster.fabric.su_size < link.leaf_port <= cluster.fabric.leaf_ports for link in links
    )
    assert all(1 <= link.spine_port <= cluster.fabric.spine_port_count for link in links)
    per_pair = Counter((link.leaf, link.spine) for link in links)
    assert len(set(per_pair.values())) == 1
    assert len(per_pair) == len(leaves(cluster)) * len(spines(cluster))


def test_csv_round_trip(tmp_path: Path) -> None:
    cluster = load_spec(EXAMPLES / "lab.yml")
    rows, links = cabling_plan(cluster), switch_links(cluster)
    write_cabling_csv(tmp_path / "cabling.csv", rows)
    write_switch_links_csv(tmp_path / "switch-links.csv", links)
    assert read_cabling_csv(tmp_path / "cabling.csv") == rows
    assert read_switch_links_csv(tmp_path / "switch-links.csv") == links
    text = (tmp_path / "cabling.csv").read_text()
    assert text.splitlines()[0] == "node,hca,gpu,rail,su,leaf,leaf_port"
    assert text.splitlines()[1] == "gpu001,mlx5_0,0,0,1,su1-leaf-r0,1"


@pytest.mark.parametrize(
    ("text", "line", "what"),
    [
        ("node,hca\n", 1, "expected header"),
        ("node,hca,gpu,rail,su,leaf,leaf_port\ngpu001,mlx5_0,0,0,1,su1-leaf-r0\n", 2, "fields"),
        ("node,hca,gpu,rail,su,leaf,leaf_port\ngpu001,mlx5_0,0,x,1,l,1\n", 2, "rail must be"),
        ("node,hca,gpu,rail,su,leaf,leaf_port\ngpu001,,0,0,1,l,1\n", 2, "hca is empty"),
    ],
)
def test_bad_cabling_csv_names_the_line(text: str, line: int, what: str) -> None:
    with pytest.raises(ParseError) as info:
        parse_cabling_csv(text)
    assert info.value.line_no == line
    assert what in str(info.value)


def test_bad_switch_links_csv_names_the_line() -> None:
    with pytest.raises(ParseError) as info:
        parse_switch_links_csv("leaf,leaf_port,spine,spine_port\nsu1-leaf-r0,33,spine01\n")
    assert info.value.line_no == 2
