"""`cluster-tool adopt`: a spec draft from a running fabric, closed on itself.

The expected values never come from adopt: the cabling rendered from the draft is held to the
fabric as the existing parser reads it (`parse_ibnetdiscover(...).ca_uplinks()` and its switch
ports), `fabric check` of the draft runs against the same text, and the departure is the cable
this test moved. The real capture's figures were read by hand (awk over the file).
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from cluster_tool.checks.fabric import check_fabric
from cluster_tool.fabric.plan import (
    cabling_plan,
    plan_for,
    read_cabling_csv,
    read_switch_links_csv,
    spines,
    switch_links,
)
from cluster_tool.parsers.ibnetdiscover import SWITCH, parse_ibnetdiscover
from cluster_tool.render import render
from cluster_tool.spec import load_spec_text
from cluster_tool.spec.models import DEFAULT_SWITCH_NAME_PATTERN, NodeProfile, builtin_profile
from cluster_tool.workflows.adopt import adopt
from tests.conftest import FIXTURES, REPO
from tests.unit.checks.fabric_text import FabricText, real_style

NAME = re.compile(DEFAULT_SWITCH_NAME_PATTERN)


def switch(description: str | None) -> str:
    """A switch's name from its node description, by the spec's default pattern."""
    match = NAME.match(description or "")
    assert match is not None, description
    return match.group("name")


def generated_spec(nodes: int) -> Any:
    """examples/h200-4su.yml grown to `nodes` GPU nodes, 32 per SU. Leaves keep 28 of their 32
    up-ports for 28 director-class spines, so ports 61-64 are free to move a cable to."""
    data = yaml.safe_load((REPO / "examples" / "h200-4su.yml").read_text())
    data["management"]["network"] = "10.0.0.0/8"
    data["nodes"][2]["hosts"] = f"gpu[0001-{nodes:04d}]"
    data["nodes"][2]["address"] = "10.1.0.1"
    data["bmc"]["address_pattern"] = "{name}-bmc"
    sus = -(-nodes // 32)
    data["fabric"]["uplinks_per_leaf"] = 28
    data["fabric"]["spines"] = 28
    data["fabric"]["spine_ports"] = max(64, sus * 8)
    data["slurm"]["partitions"] = [{"name": "gpu", "default": True}]
    return load_spec_text(yaml.safe_dump(data), "generated.yml")


def generated_fabric(nodes: int) -> tuple[Any, FabricText]:
    cluster = generated_spec(nodes)
    rows, links = real_style(cabling_plan(cluster), switch_links(cluster))
    return cluster, FabricText.from_plan(rows, links)


def cabled(text: str) -> tuple[set[tuple[str, str, str, int]], set[tuple[str, int, str, int]]]:
    """The fabric's host cables and switch links as the existing parser reads them."""
    fabric = parse_ibnetdiscover(text)
    hosts = {
        (u.host, u.hca or "", switch(u.switch_description), u.switch_port)
        for u in fabric.ca_uplinks()
    }
    kinds = {n.node_id: n.kind for n in fabric.nodes}
    links = set()
    for node in fabric.nodes:
        if node.kind != SWITCH or "LEAF" not in node.description:
            continue
        for p in node.ports:
            if kinds.get(p.peer_id) == SWITCH:
                links.add(
                    (
                        switch(node.description),
                        p.port,
                        switch(p.peer_description),
                        p.peer_port,
                    )
                )
    return hosts, links


def rendered(cluster: Any, tmp: Path) -> tuple[set[Any], set[Any], Any]:
    render(cluster, tmp)
    rows = read_cabling_csv(tmp / "cabling.csv")
    links = read_switch_links_csv(tmp / "switch-links.csv")
    return (
        {(r.node, r.hca, r.leaf, r.leaf_port) for r in rows},
        {(s.leaf, s.leaf_port, s.spine, s.spine_port) for s in links},
        plan_for(cluster, rows, links),
    )


def adopted(text: str, profile: str = "hgx-h200-8x-ndr", **kw: Any) -> Any:
    return adopt(
        text,
        source="fabric.txt",
        name="adopted",
        profile_name=profile,
        profile=builtin_profile(profile),
        profile_body=None,
        network="10.0.0.0/16",
        **kw,
    )


def test_a_1024_node_fabric_with_one_rail_moved(tmp_path: Path) -> None:
    _cluster, fabric = generated_fabric(1024)
    # gpu0005's rail-1 HCA (mlx5_3 on the H200 box) moved to the rail-2 leaf of its SU,
    # on a free port: the cabling a rushed repair leaves.
    fabric.move("gpu0005", "mlx5_3", "A09-P1-IBLEAF-01-03", 61)
    text = fabric.text()
    result = adopted(text)

    # render(adopt(F)) is F's cabling, as the parser reads F.
    hosts, links = cabled(text)
    assert len(hosts) == 1024 * 8 and len(links) == 256 * 28
    rows, uplinks, plan = rendered(result.cluster, tmp_path)
    assert rows == hosts
    assert uplinks == links

    # Leaves and spines by their own names and GUIDs, each leaf on the SU and rail it was
    # generated for (A09 carries rails 1-4, B09 rails 5-8: no leaf_name_pattern fits).
    parsed = parse_ibnetdiscover(text)
    guid = {switch(n.description): n.guid for n in parsed.nodes if n.kind == SWITCH}
    leaves = result.cluster.fabric.leaves
    assert len(leaves) == 256
    assert (leaves["A09-P1-IBLEAF-01-01"].su, leaves["A09-P1-IBLEAF-01-01"].rail) == (1, 0)
    assert (leaves["B12-P1-IBLEAF-32-08"].su, leaves["B12-P1-IBLEAF-32-08"].rail) == (32, 7)
    assert all(leaf.guid == guid[name] for name, leaf in leaves.items())
    assert list(result.cluster.fabric.spine_switches) == [
        f"C10-P1-IBSPINE-{n:02d}" for n in range(1, 29)
    ]

    # The departure is listed, and only what the move made.
    moved = [f for f in result.departures if f.node == "gpu0005"]
    assert {f.component for f in result.departures} == {"mlx5_3", "mlx5_3,mlx5_4"}
    assert any(
        "gpu0005 mlx5_3 (rail 1) is on A09-P1-IBLEAF-01-03 port 61, the rail-2 leaf" in f.message
        for f in moved
    )
    assert "A09-P1-IBLEAF-01-03 port 61" in result.text  # and in the draft's header

    # fabric check of the draft against the same fabric: no error, the departure as a warning.
    findings = check_fabric(result.cluster, parsed, plan=plan)
    assert [f for f in findings if f.severity == "error"] == []
    assert {(f.check, f.node) for f in findings} == {("fabric.departure", "gpu0005")}
    assert all(f.severity == "warning" for f in findings)


def test_a_regular_fabric_has_no_departure(tmp_path: Path) -> None:
    _cluster, fabric = generated_fabric(64)
    text = fabric.text()
    result = adopted(text)
    assert result.departures == []
    assert result.cluster.fabric.cables == []
    assert result.cluster.su_count == 2
    rows, uplinks, plan = rendered(result.cluster, tmp_path)
    assert (rows, uplinks) == cabled(text)
    assert check_fabric(result.cluster, parse_ibnetdiscover(text), plan=plan) == []


def test_a_split_rail_a_wrong_su_and_a_missing_uplink() -> None:
    _cluster, fabric = generated_fabric(64)
    # gpu0040 (SU 2) has its rail-4 HCA (mlx5_6) on SU 1's rail-4 leaf; gpu0001's rail 0 is cut;
    # one uplink of SU 2's rail-8 leaf is unplugged.
    fabric.move("gpu0040", "mlx5_6", "B09-P1-IBLEAF-01-05", 62)
    fabric.cut("gpu0001", "mlx5_0")
    fabric.links = [c for c in fabric.links if (c.a, c.a_port) != ("B09-P1-IBLEAF-02-08", 33)]
    result = adopted(fabric.text())
    messages = "\n".join(f.message for f in result.departures)
    assert (
        "gpu0040 mlx5_6 is on B09-P1-IBLEAF-01-05 port 62, a leaf of SU 1; gpu0040 is in SU 2"
        in messages
    )
    assert "gpu0001 mlx5_0 is not cabled" in messages
    assert "B09-P1-IBLEAF-02-08 has 27 uplinks; the most any leaf has is 28" in messages
    assert "B09-P1-IBLEAF-02-08 has no uplink to C10-P1-IBSPINE-01" in messages
    assert all(f.severity == "warning" and f.check == "fabric.departure" for f in result.departures)


def test_a_rail_split_across_two_leaves() -> None:
    # SU 1's rail-2 HCAs of gpu0017-0032 on a second rail-2 leaf (a leaf added when one failed).
    _cluster, fabric = generated_fabric(32)
    fabric.switches.append("A09-P1-IBLEAF-01-02B")
    for n in range(17, 33):
        fabric.move(f"gpu{n:04d}", "mlx5_3", "A09-P1-IBLEAF-01-02B", n)
    result = adopted(fabric.text())
    messages = [f.message for f in result.departures]
    assert messages[0] == (
        "rail 1 of SU 1 is split across 2 leaves: A09-P1-IBLEAF-01-02, A09-P1-IBLEAF-01-02B"
    )
    # The spare leaf has no uplink: every other leaf's 28 are missing there.
    assert any(m.startswith("A09-P1-IBLEAF-01-02B has 0 uplinks") for m in messages)


def test_leaf_names_read_by_a_pattern(tmp_path: Path) -> None:
    # Names with 1-based, zero-padded rails and a wildcard for the rack row.
    _cluster, fabric = generated_fabric(64)
    result = adopted(fabric.text(), leaf_name_pattern="*-P1-IBLEAF-{su:02d}-{rail1:02d}")
    leaves = result.cluster.fabric.leaves
    assert (leaves["B09-P1-IBLEAF-02-05"].su, leaves["B09-P1-IBLEAF-02-05"].rail) == (2, 4)
    with pytest.raises(Exception, match="does not fit --leaf-name-pattern"):
        adopted(fabric.text(), leaf_name_pattern="A09-P1-IBLEAF-{su:02d}-{rail1:02d}")


# --- a real capture ------------------------------------------------------------------------

REAL = FIXTURES / "parsers" / "real" / "ibnetdiscover_quantum2_mqm9701_ndr_dgx_h100_topograph.txt"


def test_a_real_quantum2_fabric() -> None:
    """NVIDIA topograph's capture (source on its line 1): nodes a08-p1-dgx-04-c01..c17 have
    mlx5_0, mlx5_1, mlx5_4, mlx5_5 on leaves A09-P1-IBLEAF-01-04 .. 04-04 (names: rail, then
    SU), each at the port of its number; the rest name their HCAs `HCA-N` and are left out.
    Read by hand: 01-04 and 03-04 have 18 uplinks, 02-04 and 04-04 have 16; `ubuntu mlx5_0` is
    on B09-P1-IBLEAF-03-08 port 21, `ubuntu mlx5_1` on B09-P1-IBLEAF-04-08 port 21."""
    base = builtin_profile("hgx-h100-8x-ndr").model_dump()
    hcas = [
        {**hca, "device": dev, "rail": rail}
        for rail, (hca, dev) in enumerate(
            zip(base["hcas"][:4], ["mlx5_0", "mlx5_1", "mlx5_4", "mlx5_5"], strict=True)
        )
    ]
    body = {**base, "hcas": hcas, "nics": []}
    result = adopt(
        REAL.read_text(encoding="utf-8"),
        source=REAL.name,
        name="topograph",
        profile_name="plane4",
        profile=NodeProfile.model_validate(body),
        profile_body=body,
        network="10.0.0.0/16",
        leaf_name_pattern="*-P1-IBLEAF-{rail1:02d}-{su:02d}",
    )
    fabric = result.cluster.fabric
    assert sorted(fabric.placement) == [f"a08-p1-dgx-04-c{n:02d}" for n in range(1, 18)] + [
        "ubuntu"
    ]
    assert all(
        (p.su, p.port) == (4, int(name[-2:]))
        for name, p in fabric.placement.items()
        if name != "ubuntu"
    )
    assert fabric.leaves["A09-P1-IBLEAF-04-04"].guid == "0x2c5eab0300b87b40"
    assert (fabric.leaves["A09-P1-IBLEAF-02-04"].su, fabric.leaves["A09-P1-IBLEAF-02-04"].rail) == (
        4,
        1,
    )
    assert list(fabric.spine_switches) == [
        *(f"A10-P1-IBSPINE-0{n}" for n in range(1, 5)),
        *(f"B10-P1-IBSPINE-0{n}" for n in range(5, 10)),
    ]
    uplinks: dict[str, int] = {}
    for leaf, *_ in fabric.uplinks:
        uplinks[leaf] = uplinks.get(leaf, 0) + 1
    assert {k: v for k, v in uplinks.items() if k.endswith("-04")} == {
        "A09-P1-IBLEAF-01-04": 18,
        "A09-P1-IBLEAF-02-04": 16,
        "A09-P1-IBLEAF-03-04": 18,
        "A09-P1-IBLEAF-04-04": 16,
    }
    messages = [f.message for f in result.departures]
    assert (
        "A09-P1-IBLEAF-02-04 has 16 uplinks; the most any leaf has is 18 (a missing uplink)"
        in messages
    )
    assert (
        "A09-P1-IBLEAF-04-04 has 16 uplinks; the most any leaf has is 18 (a missing uplink)"
        in messages
    )
    assert any(
        m.startswith("ubuntu mlx5_0 (rail 0) is on B09-P1-IBLEAF-03-08 port 21") for m in messages
    )
    assert any("HCA-6 is not a compute HCA" in why for why in result.adopted.not_adopted)
    # The draft is a spec: spec check reads it as written.
    loaded = load_spec_text(result.text, "draft.yml")
    assert len(loaded.gpu_nodes()) == 18


def test_leaves_without_spines(tmp_path: Path) -> None:
    # One SU whose leaves have no uplinks yet (a first SU racked before its spines).
    cluster = generated_spec(32)
    rows, _links = real_style(cabling_plan(cluster), switch_links(cluster))
    text = FabricText.from_plan(rows, []).text()
    result = adopted(text)
    rendered_rows, uplinks, plan = rendered(result.cluster, tmp_path)
    assert (rendered_rows, uplinks) == cabled(text)
    assert uplinks == set()
    assert check_fabric(result.cluster, parse_ibnetdiscover(text), plan=plan) == []
    assert spines(result.cluster) == []
