"""Expected busbw per rung, derived from the profile and fabric, held against real captures."""

from __future__ import annotations

from pathlib import Path

import pytest

from cluster_tool.gate.evaluate import evaluate_step
from cluster_tool.gate.from_spec import gate_inputs
from cluster_tool.gate.plan import Step
from cluster_tool.gate.thresholds import GateProfile, Rung, Thresholds, profile_from_node_profile
from cluster_tool.plan import ClusterShape
from cluster_tool.spec import builtin_profile, load_spec
from tests.conftest import read_real_output
from tests.unit.gate.fakes import PAIR, SINGLE, scaled_output

EXAMPLES = Path(__file__).resolve().parents[3] / "examples"
NDR = Thresholds(GateProfile(), min_fraction=0.9)


def test_h100_ndr_defaults_match_the_published_figures() -> None:
    assert NDR.expect(Rung.SINGLE_NVLS).expected_gbs == pytest.approx(480, abs=1)
    assert NDR.expect(Rung.SINGLE_RING).expected_gbs == pytest.approx(370, abs=1)
    pairs = NDR.expect(Rung.PAIRS)
    assert 370 <= pairs.expected_gbs <= 396
    # The floor quoted in the drain reason: 333 GB/s.
    assert pairs.floor_gbs == pytest.approx(333, abs=0.5)
    assert NDR.expect(Rung.RAILS).expected_gbs == pytest.approx(370 / 8, abs=0.2)


def test_hdr_halves_the_network_rungs_but_not_nvlink() -> None:
    hdr = Thresholds(GateProfile(rail_gbs=25.0), min_fraction=0.9)
    assert hdr.expect(Rung.PAIRS).expected_gbs == pytest.approx(
        NDR.expect(Rung.PAIRS).expected_gbs / 2, abs=0.1
    )
    assert hdr.expect(Rung.SINGLE_NVLS) == NDR.expect(Rung.SINGLE_NVLS)


def test_nvls_only_helps_all_reduce_on_a_board_with_nvls() -> None:
    no_nvls = Thresholds(GateProfile(nvls=False))
    assert (
        no_nvls.expect(Rung.SINGLE_NVLS).expected_gbs == NDR.expect(Rung.SINGLE_RING).expected_gbs
    )
    assert NDR.expect(Rung.SINGLE_NVLS, "all_gather").expected_gbs < 400


def test_alltoall_bound_follows_the_off_node_share() -> None:
    two = NDR.expect(Rung.PAIRS, "alltoall", nodes=2).expected_gbs
    many = NDR.expect(Rung.FULL, "alltoall", nodes=128).expected_gbs
    # (n-1)/(n-g): 15/8 of a rail on two nodes, one rail's rate at scale.
    assert two == pytest.approx(50 * 15 / 8 * 0.75, abs=0.1)
    assert many == pytest.approx(50 * 0.75, abs=0.5)


def test_fraction_sets_the_floor() -> None:
    loose = Thresholds(GateProfile(), min_fraction=0.5)
    assert loose.expect(Rung.PAIRS).floor_gbs == pytest.approx(185, abs=0.1)


def test_unknown_collective_is_refused() -> None:
    with pytest.raises(ValueError, match="unknown collective"):
        NDR.expect(Rung.PAIRS, "allreduce")


def test_profile_adapter_reads_the_spec_profile() -> None:
    p = profile_from_node_profile(builtin_profile("hgx-h200-8x-ndr"))
    assert p.gpus_per_node == 8 and p.rail_gbs == 50.0 and p.nvlink_gbs_per_gpu == 450.0
    # Rails follow the profile's HCA list (rail 1 is mlx5_3 on HGX), not the mlx5 index.
    assert p.rail_hcas[:2] == ("mlx5_0", "mlx5_3")


@pytest.mark.parametrize(
    ("spec", "nodes", "pairs_gbs", "fraction"),
    [
        ("lab.yml", 4, 185.0, 0.85),
        ("h100-1su.yml", 31, 370.0, 0.85),
        ("h200-4su.yml", 127, 370.0, 0.85),
    ],
)
def test_gate_inputs_from_example_specs(
    spec: str, nodes: int, pairs_gbs: float, fraction: float
) -> None:
    inputs = gate_inputs(load_spec(EXAMPLES / spec))
    assert len(inputs.nodes) == nodes
    exp = inputs.thresholds.expect(Rung.PAIRS)
    assert exp.expected_gbs == pytest.approx(pairs_gbs, abs=0.1)
    assert exp.floor_gbs == pytest.approx(pairs_gbs * fraction, abs=0.1)
    assert inputs.params.bin_dir and inputs.params.collectives[0] == "all_reduce"


def test_real_single_node_capture_passes_with_nvls() -> None:
    out = evaluate_step(
        Step("s", "all_reduce", Rung.SINGLE_NVLS),
        read_real_output(SINGLE),
        NDR.expect(Rung.SINGLE_NVLS),
    )
    assert out.passed and out.busbw_gbs == pytest.approx(480.16)


def test_real_two_node_capture_passes_pairs() -> None:
    out = evaluate_step(
        Step("p", "all_reduce", Rung.PAIRS), read_real_output(PAIR), NDR.expect(Rung.PAIRS)
    )
    assert out.passed and out.busbw_gbs == pytest.approx(469.21)


def test_slow_pair_fails_with_the_numbers_in_words() -> None:
    out = evaluate_step(
        Step("p", "all_reduce", Rung.PAIRS), scaled_output(PAIR, 0.45), NDR.expect(Rung.PAIRS)
    )
    assert not out.passed and out.check == "nccl.pair"
    assert out.detail == "211 GB/s < 333 GB/s"


def test_wrong_values_fail_even_at_line_rate() -> None:
    out = evaluate_step(
        Step("p", "all_reduce", Rung.PAIRS),
        scaled_output(PAIR, 1.0, wrong=3),
        NDR.expect(Rung.PAIRS),
    )
    assert not out.passed and out.check == "nccl.wrong" and "3 #wrong" in out.detail


def test_out_of_bounds_fails_even_at_line_rate() -> None:
    text = read_real_output(PAIR).replace(
        "# Out of bounds values : 0 OK", "# Out of bounds values : 12 FAILED"
    )
    out = evaluate_step(Step("p", "all_reduce", Rung.PAIRS), text, NDR.expect(Rung.PAIRS))
    assert not out.passed and out.check == "nccl.wrong" and "12 out-of-bounds" in out.detail


def test_cut_short_run_is_classified_by_its_error_line() -> None:
    text = scaled_output(PAIR, 1.0, cut_after=10) + (
        "gpu002:41234:41290 [3] transport/net_ib.cc:1696 NCCL WARN NET/IB : Got completion "
        "from peer 10.77.0.11<52345> with status=12 opcode=0 len=0 vendor err 129 (Recv)\n"
    )
    out = evaluate_step(Step("p", "all_reduce", Rung.PAIRS), text, NDR.expect(Rung.PAIRS))
    assert not out.passed and out.check == "nccl.ib"


def test_missing_output_is_a_launch_failure() -> None:
    out = evaluate_step(Step("p", "all_reduce", Rung.PAIRS), None, NDR.expect(Rung.PAIRS))
    assert not out.passed and out.check == "nccl.launch"


def test_topology_from_the_cabling_plan_names_leaves_and_spines() -> None:
    inputs = gate_inputs(load_spec(EXAMPLES / "h200-4su.yml"))
    topo = inputs.topology
    assert topo.su_of["gpu001"] == 1 and topo.su_of["gpu127"] == 4
    (hops,) = topo.path("gpu001", "gpu127", [1])
    assert hops.startswith("rail 1: gpu001/mlx5_3 > su1-leaf-r1 > spine")
    assert hops.endswith("> su4-leaf-r1 > gpu127/mlx5_3")
    (same_leaf,) = topo.path("gpu001", "gpu002", [0])
    assert same_leaf == "rail 0: gpu001/mlx5_0 > su1-leaf-r0 > gpu002/mlx5_0"


def test_planner_and_gate_expect_the_same_busbw_derived_or_from_the_profile(
    tmp_path: Path,
) -> None:
    derived = load_spec(EXAMPLES / "lab.yml")
    shape = ClusterShape.from_spec(derived)
    thresholds = gate_inputs(derived).thresholds
    assert shape.fabric_busbw_gbs == thresholds.expect(Rung.PAIRS).expected_gbs == 185.0
    assert shape.nvlink_busbw_gbs == thresholds.expect(Rung.SINGLE_NVLS).expected_gbs == 480.0

    text = (EXAMPLES / "lab.yml").read_text()
    marker = "    expected_rate_gbps: 200\n"
    assert marker in text
    spec = tmp_path / "lab.yml"
    spec.write_text(text.replace(marker, marker + "    expected_busbw_multi_node_gbs: 170.0\n"))
    measured = load_spec(spec)
    pairs = gate_inputs(measured).thresholds.expect(Rung.PAIRS)
    assert (pairs.expected_gbs, pairs.floor_gbs) == (170.0, 144.5)
    assert "expected_busbw_multi_node_gbs" in pairs.basis
    assert ClusterShape.from_spec(measured).fabric_busbw_gbs == 170.0
    # The override is all_reduce's: a rail alone and alltoall keep their derivation.
    assert gate_inputs(measured).thresholds.expect(Rung.RAILS).expected_gbs == 23.1
