"""The cluster shape the planner plans on: from the spec, drained nodes, gate results."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from cluster_tool.errors import UsageError
from cluster_tool.parsers import to_jsonable
from cluster_tool.parsers.nccl_tests import parse_nccl_tests
from cluster_tool.plan import ClusterShape, parse_hostlist, read_gate_results
from cluster_tool.spec import load_spec
from tests.conftest import read_real_output

EXAMPLES = Path(__file__).resolve().parents[3] / "examples"


def test_shape_from_the_h200_4su_example() -> None:
    cluster = load_spec(EXAMPLES / "h200-4su.yml")
    shape = ClusterShape.from_spec(cluster, drained=["gpu005"])
    nodes = cluster.gpu_nodes()
    assert len(shape.nodes) == len(nodes)
    assert {n.su for n in shape.nodes} == {n.su for n in nodes} == {1, 2, 3, 4}
    assert shape.hbm_gib == 141 and shape.gpu.peak("bf16") == 989
    assert shape.gpus_per_node == 8 and shape.nvlink_domain == 8 and shape.rails == 8
    assert [n.name for n in shape.nodes if n.drained] == ["gpu005"]
    assert shape.usable_gpus == (len(nodes) - 1) * 8
    assert shape.busbw_source == "profile"


def test_unknown_drained_node_is_a_usage_error() -> None:
    shape = ClusterShape.synthetic(nodes=4)
    with pytest.raises(UsageError, match="gpu009"):
        shape.with_drained(parse_hostlist("gpu[001,009]"))
    with pytest.raises(UsageError, match="hostlist"):
        parse_hostlist("gpu[001-")


def test_gate_report_gives_fabric_busbw_and_drains(tmp_path: Path) -> None:
    report = {
        "status": "fail",
        "findings": [
            {"check": "nccl.busbw", "severity": "error", "node": "gpu003", "message": "slow"},
            {"check": "nccl.busbw", "severity": "warning", "node": "gpu004", "message": "meh"},
        ],
        "summary": {
            "rungs": {"full": {"jobs": 1, "nodes": 30, "passed": True, "busbw_gbs": 352.5}},
            "drain": {"applied": False, "nodes": {"gpu007": "nccl.hca: mlx5_3 down"}},
        },
    }
    path = tmp_path / "gate.json"
    path.write_text(json.dumps(report))
    gate = read_gate_results(path)
    assert gate.fabric_busbw_gbs == 352.5
    assert gate.nvlink_busbw_gbs is None
    assert gate.drained == ("gpu003", "gpu007")


def test_gate_results_from_real_nccl_tests_output(tmp_path: Path) -> None:
    # Two nodes, 16 ranks: fabric busbw at the largest message, 469.1 GB/s (in place).
    multi = to_jsonable(
        parse_nccl_tests(read_real_output("all_reduce_perf_h100_2node_16gpu_ib_ndr_xe9680.txt"))
    )
    single = to_jsonable(
        parse_nccl_tests(
            read_real_output("all_reduce_perf_h100_single_node_8gpu_nvls_nvidia_dgxc.txt")
        )
    )
    path = tmp_path / "runs.json"
    path.write_text(json.dumps({"runs": [multi, single]}))
    gate = read_gate_results(path)
    assert gate.fabric_busbw_gbs == pytest.approx(469.1)
    assert gate.nvlink_busbw_gbs == pytest.approx(479.99, abs=0.5)
    shape = ClusterShape.synthetic(nodes=4).with_busbw(
        fabric=gate.fabric_busbw_gbs, nvlink=gate.nvlink_busbw_gbs, source=str(path)
    )
    assert shape.rail_busbw_gbs == pytest.approx(469.1 / 8)
    assert shape.busbw_source == str(path)


def test_bad_gate_results_are_usage_errors(tmp_path: Path) -> None:
    path = tmp_path / "bad.json"
    path.write_text("{not json")
    with pytest.raises(UsageError, match=r"bad\.json:1:2"):
        read_gate_results(path)
    with pytest.raises(UsageError, match=r"missing\.json"):
        read_gate_results(tmp_path / "missing.json")


def test_unknown_gpu_model_is_a_usage_error() -> None:
    from cluster_tool.plan import gpu_spec

    assert gpu_spec("NVIDIA H200").hbm_gib == 141
    with pytest.raises(UsageError, match="no compute figures"):
        gpu_spec("mi300x")


def test_synthetic_cluster_fills_sus_in_order() -> None:
    shape = ClusterShape.synthetic(nodes=70, nodes_per_su=32)
    assert shape.su_sizes() == {1: 32, 2: 32, 3: 6}
    assert shape.usable_gpus == 560


def test_gate_results_from_a_bringup_summary(tmp_path: Path) -> None:
    """A bring-up's summary.json (shape and figures from a lab bring-up's record): pairs'
    all_reduce at the largest message is the fabric busbw (the lowest pair counts), one node's
    NVLS all_reduce the NVLink busbw; alltoall and ring do not count; an unproven node is out."""

    def job(label: str, nodes: list[str], last: float) -> dict[str, object]:
        points = [[8, 0.0], [1048576, 66.77], [17179869184, last]]
        return {"label": label, "floor_gbs": 170.0, "nodes": nodes, "points": points}

    summary = {
        "verdict": "fail",
        "nodes": {"gpu001": {"verdict": "pass"}, "gpu004": {"verdict": "held"}},
        "busbw": [
            job("gpu001 nvls-all_reduce", ["gpu001"], 478.82),
            job("gpu002 nvls-all_reduce", ["gpu002"], 471.12),
            job("gpu002 ring-all_reduce", ["gpu002"], 363.06),
            job("gpu001+gpu002 all_reduce", ["gpu001", "gpu002"], 190.44),
            job("gpu001+gpu003 all_reduce", ["gpu001", "gpu003"], 191.86),
            job("gpu001+gpu002 alltoall", ["gpu001", "gpu002"], 109.9),
        ],
    }
    path = tmp_path / "summary.json"
    path.write_text(json.dumps(summary))
    gate = read_gate_results(path)
    assert (gate.fabric_busbw_gbs, gate.nvlink_busbw_gbs) == (190.44, 471.12)
    assert gate.drained == ("gpu004",)


def test_gate_results_carry_the_whole_curves_the_model_uses(tmp_path: Path) -> None:
    """The busbw of every message size the gate measured, not only the largest: the slowest
    pair's all_reduce curve (with the nodes it ran on) and the slowest node's NVLS curve."""
    points = [[8, 0.0], [1048576, 27.33], [134217728, 336.29], [1073741824, 448.9]]
    slow = [[8, 0.0], [1048576, 20.0], [134217728, 250.0], [1073741824, 300.0]]
    summary = {
        "busbw": [
            {"label": "gpu001+gpu002 all_reduce", "nodes": ["gpu001", "gpu002"], "points": points},
            {"label": "gpu003+gpu004 all_reduce", "nodes": ["gpu003", "gpu004"], "points": slow},
            {"label": "gpu001 nvls-all_reduce", "nodes": ["gpu001"], "points": points},
        ],
    }
    path = tmp_path / "summary.json"
    path.write_text(json.dumps(summary))
    gate = read_gate_results(path)
    assert gate.fabric_curve == ((1048576.0, 20.0), (134217728.0, 250.0), (1073741824.0, 300.0))
    assert gate.fabric_curve_nodes == 2 and len(gate.nvlink_curve) == 3
    shape = ClusterShape.synthetic(nodes=4).with_busbw(
        fabric=gate.fabric_busbw_gbs,
        fabric_curve=gate.fabric_curve,
        fabric_curve_nodes=gate.fabric_curve_nodes,
        source=str(path),
    )
    network = shape.fabric().network
    assert network.peak == 300.0 and network.fraction(134217728) == pytest.approx(250 / 300)
