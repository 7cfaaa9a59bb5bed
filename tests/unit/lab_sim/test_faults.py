"""Faults on the lab model: each one shows in the tool an operator would use (rendered by the
simulators, read back by the project's parsers), and heal puts the model back exactly."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cluster_lab.faults import FAULTS, FaultError, heal, heal_all, inject
from cluster_lab.sim.hw import node_hardware
from cluster_lab.sim.nccl_tests import run
from cluster_lab.sim.render_dcgmi import render_kernel_log
from cluster_lab.sim.render_smi import render_query, render_query_csv
from cluster_lab.sim.sysfs import write_sysfs_tree
from cluster_tool.gate.classify import gdr_use
from cluster_tool.parsers.kernel_log import parse_xids
from cluster_tool.parsers.nccl_tests import parse_nccl_tests
from cluster_tool.parsers.nvidia_query import parse_query_csv
from cluster_tool.parsers.nvidia_smi import parse_nvidia_smi_q
from tests.conftest import FIXTURES

# A model exactly as the lab (part 1) builds it from examples/lab.yml.
MODEL = FIXTURES / "sim" / "lab-model.json"
NOW = 1_800_000_000.0


@pytest.fixture
def model() -> dict[str, Any]:
    data: dict[str, Any] = json.loads(MODEL.read_text())
    return data


def busbw(model: dict[str, Any], nodes: str = "gpu[001-002]") -> float:
    env = {
        "SLURM_PROCID": "0",
        "PMIX_RANK": "0",
        "SLURM_NTASKS": "16",
        "SLURM_STEP_NODELIST": nodes,
        "SLURM_STEP_TASKS_PER_NODE": "8(x2)",
        "SLURM_MPI_TYPE": "pmix",
    }
    out = run("all_reduce", ["-b", "1G", "-e", "8G", "-f", "2"], env, model, "gpu001", 100)
    parsed = parse_nccl_tests(out.stdout)
    assert parsed.complete, out.stdout
    assert parsed.avg_busbw is not None
    return parsed.avg_busbw


def test_every_fault_kind_heals_back_to_the_original(model: dict[str, Any]) -> None:
    original = copy.deepcopy(model)
    plan = {
        "cable-swap": ("gpu001", "mlx5_0", "mlx5_3"),
        "cable-move": ("gpu002", "mlx5_4", "su1-leaf-r0", 30),
        "link-down": ("gpu003", "mlx5_5"),
        "link-degrade": ("gpu001", "mlx5_6"),
        "port-errors": ("gpu002", "mlx5_9"),
        "spine-link-down": (model["spine_links"][0]["leaf"], model["spine_links"][0]["leaf_port"]),
        "gpu-ecc": ("gpu001", 3),
        "gpu-xid": ("gpu002", 5, 79),
        "gpu-hot": ("gpu003", 1, 96),
        "gpu-clock": ("gpu001", 2, 1200),
        "gpu-missing": ("gpu004", 2),
        "slow-node": ("gpu004", 0.5),
        "module-missing": ("gpu002", "nvidia_peermem"),
        "nccl-corrupt": ("gpu003",),
        "node-down": ("gpu004",),
        "link-ber": ("gpu001", "mlx5_10", "1e-9"),
        "link-flap": ("gpu002", "mlx5_10", 5),
        "nvlink-errors": ("gpu002", 6),
        "pcie-width": ("gpu003", "mlx5_11", 8),
        "version-skew": ("gpu004", "hca-fw", "mlx5_0"),
    }
    options: dict[str, dict[str, Any]] = {
        "link-degrade": {"width": "1X"},
        "port-errors": {"symbol": 1234},
        "gpu-ecc": {"now": NOW},
        "gpu-xid": {"now": NOW},
    }
    assert set(plan) == set(FAULTS)
    ids = [inject(model, kind, *args, **options.get(kind, {}))["id"] for kind, args in plan.items()]
    assert [f["id"] for f in model["faults"]] == ids
    assert model != original
    # Round-trips through JSON, as the lab stores it.
    model = json.loads(json.dumps(model))
    healed = heal_all(model)
    assert [f["id"] for f in healed] == list(reversed(ids))
    model.pop("faults")
    original.pop("faults")
    assert model == original


def test_healing_out_of_order_restores_the_original_value(model: dict[str, Any]) -> None:
    first = inject(model, "gpu-hot", "gpu001", 0, 90)
    inject(model, "gpu-hot", "gpu001", 0, 99)
    heal(model, first["id"])
    assert node_hardware(model, "gpu001").gpus[0].temperature_c == 99  # the later fault holds
    heal_all(model)
    assert node_hardware(model, "gpu001").gpus[0].temperature_c == 35


def test_gpu_ecc_shows_volatile_uncorrectable_in_nvidia_smi(model: dict[str, Any]) -> None:
    inject(model, "gpu-ecc", "gpu002", 3, now=NOW)
    hw = node_hardware(model, "gpu002")
    report = parse_nvidia_smi_q(render_query(hw))
    assert [g.ecc_volatile.uncorrectable for g in report.gpus if g.ecc_volatile] == [
        0, 0, 0, 1, 0, 0, 0, 0
    ]  # fmt: skip
    fields = ["index", "ecc.errors.uncorrected.volatile.total"]
    rows = parse_query_csv(render_query_csv(hw, fields, header=False), fields).rows
    assert rows[3]["ecc.errors.uncorrected.volatile.total"] == 1
    assert [e.code for e in parse_xids(render_kernel_log(hw))] == [48]
    # Other nodes are untouched.
    assert parse_nvidia_smi_q(render_query(node_hardware(model, "gpu001"))).gpus[3].ecc_volatile


def test_gpu_xid_lands_in_the_kernel_log_and_heals(model: dict[str, Any]) -> None:
    fault = inject(model, "gpu-xid", "gpu003", 6, 79, now=NOW)
    hw = node_hardware(model, "gpu003")
    events = parse_xids(render_kernel_log(hw, "dmesg"))
    assert [(e.code, e.pci) for e in events] == [(79, hw.gpus[6].bus_id[4:].lower())]
    heal(model, fault["id"])
    assert parse_xids(render_kernel_log(node_hardware(model, "gpu003"))) == []


def test_gpu_missing_leaves_seven_gpus(model: dict[str, Any]) -> None:
    inject(model, "gpu-missing", "gpu001", 4)
    assert len(parse_nvidia_smi_q(render_query(node_hardware(model, "gpu001"))).gpus) == 7


def test_slow_node_lowers_two_node_busbw_and_heals(model: dict[str, Any]) -> None:
    before = busbw(model)
    fault = inject(model, "slow-node", "gpu002", 0.5)
    assert busbw(model) < before * 0.55
    heal(model, fault["id"])
    assert busbw(model) == before


def test_degraded_link_lowers_busbw(model: dict[str, Any]) -> None:
    before = busbw(model)
    inject(model, "link-degrade", "gpu001", "mlx5_4", width="2X")
    assert busbw(model) == pytest.approx(before / 2, rel=0.05)


def test_cable_swap_sends_two_rails_over_the_spines(model: dict[str, Any]) -> None:
    before = busbw(model)
    inject(model, "cable-swap", "gpu001", "mlx5_0", "mlx5_3")
    hw = node_hardware(model, "gpu001")
    leaves = {h.device: h.leaf for h in hw.hcas}
    assert (leaves["mlx5_0"], leaves["mlx5_3"]) == ("su1-leaf-r1", "su1-leaf-r0")
    assert busbw(model) < before


def test_link_down_shows_in_ibstat_sysfs_and_fails_nccl(
    model: dict[str, Any], tmp_path: Path
) -> None:
    inject(model, "link-down", "gpu002", "mlx5_3")
    hw = node_hardware(model, "gpu002")
    tree = write_sysfs_tree(hw, tmp_path)
    port = tree / "infiniband" / "mlx5_3" / "ports" / "1"
    assert (port / "state").read_text() == "1: DOWN\n"
    assert (port / "phys_state").read_text() == "2: Polling\n"
    env = {
        "SLURM_PROCID": "0",
        "PMIX_RANK": "0",
        "SLURM_NTASKS": "16",
        "SLURM_STEP_NODELIST": "gpu[001-002]",
        "SLURM_STEP_TASKS_PER_NODE": "8(x2)",
    }
    out = run("all_reduce", ["-b", "8", "-e", "1M"], env, model, "gpu001", 100)
    assert out.exit_code == 1
    assert any("gpu002" in e for e in parse_nccl_tests(out.stdout).errors)


def test_module_missing_turns_gdr_off(model: dict[str, Any]) -> None:
    env = {
        "SLURM_PROCID": "0",
        "PMIX_RANK": "0",
        "SLURM_NTASKS": "16",
        "SLURM_STEP_NODELIST": "gpu[001-002]",
        "SLURM_STEP_TASKS_PER_NODE": "8(x2)",
        "NCCL_DEBUG": "INFO",
    }
    args = ["-b", "8M", "-e", "8M"]
    assert "/GDRDMA" in run("all_reduce", args, env, model, "gpu001", 1).stdout
    inject(model, "module-missing", "gpu002", "nvidia_peermem")
    # dma-buf still carries GPUDirect RDMA (the roles' default mode)...
    assert "/GDRDMA" in run("all_reduce", args, env, model, "gpu001", 1).stdout
    # ...until it goes too.
    inject(model, "module-missing", "gpu002", "dmabuf")
    out = run("all_reduce", args, env, model, "gpu001", 1).stdout
    # Each host's channels say its own transport: gpu002 sends through host memory, gpu001
    # (still GPUDirect) does not.
    use = gdr_use(out)
    assert use["gpu002"].gdr_missing and use["gpu002"].ib_channels >= 1
    assert not use["gpu001"].gdr_missing
    assert "gpu002:" in out and "[send] via NET/IB/7\n" in out


def test_node_down_hangs_a_job_that_includes_it(model: dict[str, Any]) -> None:
    inject(model, "node-down", "gpu002")
    env = {
        "SLURM_PROCID": "0",
        "PMIX_RANK": "0",
        "SLURM_NTASKS": "16",
        "SLURM_STEP_NODELIST": "gpu[001-002]",
        "SLURM_STEP_TASKS_PER_NODE": "8(x2)",
    }
    assert run("all_reduce", ["-b", "8", "-e", "8"], env, model, "gpu001", 1).hang


@pytest.mark.parametrize(
    ("kind", "args", "message"),
    [
        ("link-down", ("gpu009", "mlx5_0"), "no lab node 'gpu009'"),
        ("link-down", ("gpu001", "mlx5_1"), "no compute HCA 'mlx5_1'"),
        ("gpu-hot", ("gpu001", 9, 90), "no GPU 9"),
        ("slow-node", ("gpu001", "2"), "between 0 and 1"),
        ("cable-move", ("gpu001", "mlx5_0", "su1-leaf-r1", 2), "taken by gpu002 mlx5_3"),
        ("module-missing", ("gpu001", "nvidia_fs"), "no module 'nvidia_fs'"),
        ("melt", ("gpu001",), "unknown fault 'melt'"),
    ],
)
def test_bad_faults_are_refused_and_change_nothing(
    model: dict[str, Any], kind: str, args: tuple[Any, ...], message: str
) -> None:
    original = copy.deepcopy(model)
    with pytest.raises(FaultError, match=message):
        inject(model, kind, *args)
    assert model == original
    with pytest.raises(FaultError, match="no active fault"):
        heal(model, "link-down-1")


# Faults that can pile up on the same fields in any order (all valid on the lab model).
_STACKABLE = [
    ("cable-swap", ("gpu001", "mlx5_0", "mlx5_3"), {}),
    ("cable-swap", ("gpu001", "mlx5_3", "mlx5_4"), {}),
    ("link-down", ("gpu001", "mlx5_0"), {}),
    ("link-degrade", ("gpu001", "mlx5_0"), {"width": "2X"}),
    ("link-degrade", ("gpu001", "mlx5_0"), {"width": "1X"}),
    ("port-errors", ("gpu001", "mlx5_3"), {"symbol": 7}),
    ("gpu-ecc", ("gpu002", 1), {"now": NOW}),
    ("gpu-xid", ("gpu002", 1, 79), {"now": NOW + 5}),
    ("gpu-hot", ("gpu002", 1, 91), {}),
    ("gpu-hot", ("gpu002", 1, 99), {}),
    ("gpu-missing", ("gpu002", 1), {}),
    ("slow-node", ("gpu002", 0.3), {}),
    ("slow-node", ("gpu002", 0.7), {}),
    ("nccl-corrupt", ("gpu002",), {}),
    ("node-down", ("gpu003",), {}),
]


@settings(max_examples=60, deadline=None)
@given(
    picks=st.lists(st.integers(0, len(_STACKABLE) - 1), min_size=1, max_size=8),
    order=st.randoms(use_true_random=False),
)
def test_any_faults_healed_in_any_order_restore_the_model(picks: list[int], order: Any) -> None:
    original: dict[str, Any] = json.loads(MODEL.read_text())
    data = copy.deepcopy(original)
    ids = []
    for i in picks:
        kind, args, options = _STACKABLE[i]
        ids.append(inject(data, kind, *args, **options)["id"])
    order.shuffle(ids)
    for fault_id in ids:
        heal(data, fault_id)
    assert data.pop("faults") == []
    original.pop("faults")
    assert data == original
