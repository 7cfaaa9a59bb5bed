"""Real switch names in the spec: 1-based, zero-padded rails in `leaf_name_pattern`, and an
explicit switch map with the cabling as it is (what `cluster-tool adopt` writes), while every
existing spec keeps its meaning."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from cluster_tool.errors import SpecError
from cluster_tool.fabric.plan import cabling_plan, leaves, spines, switch_links
from cluster_tool.spec import load_spec_text

LAB = (Path(__file__).resolve().parents[3] / "examples" / "lab.yml").read_text(encoding="utf-8")
# The lab's profile: compute HCAs by rail (hgx-h100-8x-ndr, the DGX H100 layout).
HCAS = ["mlx5_0", "mlx5_3", "mlx5_4", "mlx5_5", "mlx5_6", "mlx5_9", "mlx5_10", "mlx5_11"]


def lab_with(**fabric: object) -> str:
    data = yaml.safe_load(LAB)
    data["fabric"].update(fabric)
    return yaml.safe_dump(data, sort_keys=False)


def problems_of(text: str) -> list[str]:
    with pytest.raises(SpecError) as info:
        load_spec_text(text, "c.yml")
    return [str(p) for p in info.value.problems]


def test_one_based_zero_padded_rails() -> None:
    cluster = load_spec_text(lab_with(leaf_name_pattern="IBLEAF-{su:02d}-{rail1:02d}"), "c.yml")
    assert [leaf.name for leaf in leaves(cluster)] == [f"IBLEAF-01-0{r}" for r in range(1, 9)]
    rows = cabling_plan(cluster)
    assert (rows[0].node, rows[0].hca, rows[0].leaf, rows[0].leaf_port) == (
        "gpu001",
        "mlx5_0",
        "IBLEAF-01-01",
        1,
    )
    assert (rows[-1].node, rows[-1].hca, rows[-1].leaf) == ("gpu004", "mlx5_11", "IBLEAF-01-08")


def test_old_patterns_keep_their_names() -> None:
    cluster = load_spec_text(LAB, "c.yml")
    assert [leaf.name for leaf in leaves(cluster)][:2] == ["su1-leaf-r0", "su1-leaf-r1"]
    assert spines(cluster) == ["spine01", "spine02"]


# Two racks' names (A09 carries rails 1-4, B09 rails 5-8): no format string fits both.
MAP = {
    **{f"A09-P1-IBLEAF-01-{r:02d}": {"su": 1, "rail": r - 1} for r in range(1, 5)},
    **{f"B09-P1-IBLEAF-01-{r:02d}": {"su": 1, "rail": r - 1} for r in range(5, 9)},
}
SPINES = {"A10-P1-IBSPINE-01": {"guid": "0x2c5eab0300c26240"}, "B10-P1-IBSPINE-05": {}}


def test_a_free_switch_map_with_the_cabling_as_it_is() -> None:
    uplinks = [[name, 5, "A10-P1-IBSPINE-01", i + 1] for i, name in enumerate(MAP)]
    uplinks.append(["A09-P1-IBLEAF-01-01", 6, "B10-P1-IBSPINE-05", 1])
    text = lab_with(
        leaves=MAP,
        spine_switches=SPINES,
        # gpu003 on port 9, gpu004 in port 3's place; gpu002's rail-3 HCA on the rail-2 leaf.
        placement={
            "gpu001": {"su": 1, "port": 1},
            "gpu002": {"su": 1, "port": 2},
            "gpu003": {"su": 1, "port": 9},
            "gpu004": {"su": 1, "port": 3},
        },
        cables=[
            {"node": "gpu002", "hca": "mlx5_5", "leaf": "A09-P1-IBLEAF-01-03", "port": 12},
            {"node": "gpu004", "hca": "mlx5_11"},  # not cabled
        ],
        uplinks=uplinks,
    )
    cluster = load_spec_text(text, "c.yml")
    rows = {(r.node, r.hca): (r.leaf, r.leaf_port) for r in cabling_plan(cluster)}
    assert len(rows) == 4 * 8 - 1
    assert ("gpu004", "mlx5_11") not in rows
    assert rows[("gpu002", "mlx5_5")] == ("A09-P1-IBLEAF-01-03", 12)
    assert rows[("gpu002", "mlx5_4")] == ("A09-P1-IBLEAF-01-03", 2)
    assert rows[("gpu003", "mlx5_6")] == ("B09-P1-IBLEAF-01-05", 9)
    assert rows[("gpu004", "mlx5_0")] == ("A09-P1-IBLEAF-01-01", 3)
    assert [(s.leaf, s.leaf_port, s.spine, s.spine_port) for s in switch_links(cluster)] == [
        tuple(u) for u in uplinks
    ]
    assert spines(cluster) == ["A10-P1-IBSPINE-01", "B10-P1-IBSPINE-05"]
    assert cluster.su_count == 1


def test_the_switch_map_names_what_exists() -> None:
    text = lab_with(
        leaves={k: v for k, v in MAP.items() if not k.endswith("-08")},
        spine_switches=SPINES,
        placement={f"gpu00{i}": {"su": 1, "port": i} for i in range(1, 4)}
        | {"head": {"su": 1, "port": 5}},
        cables=[{"node": "gpu001", "hca": "mlx5_1", "leaf": "nowhere", "port": 1}],
        uplinks=[["A09-P1-IBLEAF-01-01", 33, "C10-SPINE", 1]],
    )
    problems = problems_of(text)
    joined = "\n".join(problems)
    assert "fabric.placement.head: head is not a GPU node" in joined
    assert "1 GPU nodes have no placement (first: gpu004)" in joined
    assert "no leaf for SU 1 rail 7" in joined
    assert "fabric.cables[0].hca: mlx5_1 is not a compute HCA of gpu001" in joined
    assert "fabric.cables[0].leaf: nowhere is not in fabric.leaves" in joined
    assert "C10-SPINE is not in fabric.spine_switches" in joined


def test_names_from_the_fabric_are_typed() -> None:
    for bad in ("leaf\nINJECTED: x\x1b[2J", "A09;rm", "-lead"):
        problems = problems_of(lab_with(leaves={bad: {"su": 1, "rail": 0}}))
        assert len(problems) == 1 and ": fabric.leaves." in problems[0], problems
        # The key is shown escaped: the problem is one line, no escape reaches a terminal.
        assert "\n" not in problems[0] and "\x1b" not in problems[0], problems
    problems = problems_of(lab_with(spine_switches={"S1": {"guid": "2c5e"}}))
    assert any("GUID" in p for p in problems), problems
