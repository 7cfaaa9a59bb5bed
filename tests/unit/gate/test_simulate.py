"""The whole gate on simulated fleets with adversarial faults (issue 21, finding 8): nothing it
must catch is admitted, almost no healthy node is blamed, and the cost counts every rung."""

from __future__ import annotations

import pytest

from cluster_tool.gate.plan import pair_rotation
from cluster_tool.gate.simulate import NodeFault, plant_fleet, simulate


@pytest.mark.parametrize("k", [1, 4])
def test_adversarial_faults_are_not_admitted_and_healthy_nodes_are_not_blamed(k: int) -> None:
    for seed in range(1, 21):
        result, _ = simulate(plant_fleet(128, k, seed=seed, fault_model="adversarial"))
        assert result.admitted_bad == [], (seed, result.faults)
        assert len(result.blamed_good) <= 0.01 * 128, (seed, result.blamed_good)


def test_adversarial_goal_holds_at_1024_nodes() -> None:
    result, _ = simulate(plant_fleet(1024, 4, seed=3, fault_model="adversarial"))
    assert result.admitted_bad == [] and len(result.blamed_good) <= 10
    assert result.recall["path"] == 1.0


def test_an_intermittent_node_is_not_admitted() -> None:
    fleet = plant_fleet(64, 0, seed=4, fault_model="ideal")
    fleet.plant("gpu020", NodeFault("intermittent", fail_rate=0.3))
    result, gate = simulate(fleet)
    assert "gpu020" in result.found and result.admitted_bad == []
    assert result.blamed_good == [] and result.recall["intermittent"] == 1.0
    named = [f for f in gate.report.findings if f.node == "gpu020" and f.severity == "error"]
    assert named and named[0].check == "nccl.ib"


def test_a_marginal_node_at_0_80_is_named_bad_not_a_straggler() -> None:
    fleet = plant_fleet(64, 0, seed=5, fault_model="ideal")
    fleet.plant("gpu033", NodeFault("marginal", 0.80))
    result, gate = simulate(fleet)
    assert result.found == ["gpu033"] and result.blamed_good == []
    checks = {f.check for f in gate.report.findings if f.node == "gpu033"}
    assert "nccl.pair" in checks and "nccl.straggler" not in checks


def test_a_marginal_node_just_under_the_floor_is_not_admitted() -> None:
    # 0.845x of expected: about half its jobs land above the 0.85 floor.
    fleet = plant_fleet(64, 0, seed=6, fault_model="ideal")
    fleet.plant("gpu040", NodeFault("marginal", 0.845))
    result, gate = simulate(fleet)
    assert result.admitted_bad == [] and result.found == ["gpu040"]
    assert result.blamed_good == [] and gate.rungs["full"]["passed"] is True


def test_a_bad_path_off_the_screen_pairs_is_found_and_holds_only_its_two_nodes() -> None:
    fleet = plant_fleet(64, 0, seed=7, fault_model="ideal")
    screened = {
        frozenset(p) for r in range(12) for p in pair_rotation(fleet.nodes, r, fleet.su_of)[0]
    }
    a, b = next(
        (x, y) for x in fleet.nodes for y in fleet.nodes if x < y and {x, y} not in screened
    )
    fleet.bad_paths[frozenset((a, b))] = 0.5
    result, gate = simulate(fleet)
    paths = [f for f in gate.report.findings if f.check == "nccl.path"]
    assert [f.component for f in paths] == [f"path {a} <-> {b}"]
    assert result.recall["path"] == 1.0 and result.blamed_good == [] and result.found == []
    held = [f for f in gate.report.findings if f.check == "nccl.full"]
    assert held == []


def test_a_straggler_is_admitted_with_a_warning() -> None:
    fleet = plant_fleet(64, 0, seed=8, fault_model="ideal")
    fleet.plant("gpu010", NodeFault("straggler", 0.93))
    result, gate = simulate(fleet)
    assert result.blamed_good == [] and result.found == []
    assert any(f.check == "nccl.straggler" and f.node == "gpu010" for f in gate.report.findings)


def test_rounds_and_gpu_hours_count_the_single_and_full_rungs() -> None:
    fleet = plant_fleet(32, 0, seed=9, fault_model="ideal", job_minutes=6.0)
    result, gate = simulate(fleet)
    pairs = gate.rungs["pairs"]
    assert result.rounds == 1 + pairs["rounds"] + 1  # single, pair rounds, full
    assert result.jobs == 32 + pairs["jobs"] + 1
    node_jobs = 32 + 2 * pairs["jobs"] + 32
    assert result.gpu_hours == pytest.approx(node_jobs * 6.0 / 60 * 8)
    assert gate.rungs["full"]["passed"] is True


def test_ideal_and_adversarial_fleets_differ_and_are_deterministic() -> None:
    ideal = plant_fleet(128, 4, seed=2, fault_model="ideal")
    adversarial = plant_fleet(128, 4, seed=2, fault_model="adversarial")
    assert {f.kind for f in ideal.faults.values()} == {"hard"} and not ideal.bad_paths
    assert len(adversarial.bad_paths) == 1
    assert sum(f.kind == "straggler" for f in adversarial.faults.values()) == 2
    assert (
        simulate(adversarial)[0]
        == simulate(plant_fleet(128, 4, seed=2, fault_model="adversarial"))[0]
    )


def test_gpu_hours_are_told_per_rung_and_add_up() -> None:
    # 32 healthy nodes, 6-minute jobs, 8 GPUs a node: the single rung is 32 one-node jobs, the
    # full job one of 32 nodes (25.6 GPU-hours each); every pair job of the screens is 2 nodes.
    fleet = plant_fleet(32, 0, seed=9, fault_model="ideal", job_minutes=6.0)
    result, gate = simulate(fleet)
    by_rung = result.gpu_hours_by_rung
    assert by_rung["single"] == pytest.approx(25.6)
    assert by_rung["full"] == pytest.approx(25.6)
    assert by_rung["pairs screen"] == pytest.approx(gate.rungs["pairs"]["jobs"] * 2 * 6 * 8 / 60)
    assert sum(by_rung.values()) == pytest.approx(result.gpu_hours)
    assert result.to_json()["gpu_hours_by_rung"] == by_rung
