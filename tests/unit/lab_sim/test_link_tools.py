"""The simulated mlxlink and lspci on a node with storage NICs beside its compute HCAs: the
health probe runs mlxlink on every RDMA device, so none may fail."""

from __future__ import annotations

from typing import Any

from cluster_lab.sim import cli as sim
from cluster_lab.sim.hw import default_hardware
from cluster_tool.parsers.lspci import parse_lspci
from cluster_tool.parsers.mlxlink import parse_mlxlink


def _model() -> dict[str, Any]:
    hw = default_hardware("gpu101")
    return {"nodes": {"gpu101": {"hardware": hw.to_dict()}}}


def test_every_rdma_device_answers_mlxlink() -> None:
    model = _model()
    speeds = {}
    for device in ("mlx5_0", "mlx5_1", "mlx5_8", "mlx5_11"):
        done = sim.mlxlink(["-d", device, "-m", "-c"], model, "gpu101")
        assert done.exit_code == 0, done.stderr
        (port,) = parse_mlxlink(f"mlxlink -d {device} -m -c\n{done.stdout}")
        speeds[device] = (port.speed, port.raw_ber == 1.5e-254, port.effective_errors)
    assert speeds == {
        "mlx5_0": ("IB-HDR", True, 0),
        "mlx5_1": ("100G", True, 0),  # an Ethernet storage NIC, as the BlueField-3 prints it
        "mlx5_8": ("100G", True, 0),
        "mlx5_11": ("IB-HDR", True, 0),
    }
    unknown = sim.mlxlink(["-d", "mlx5_12"], model, "gpu101")
    assert unknown.exit_code == 1 and "mlx5_12" in unknown.stderr


def test_lspci_lists_gpus_and_every_mellanox_function_in_bus_order() -> None:
    out = sim.lspci(["-vv"], _model(), "gpu101").stdout
    functions = parse_lspci(out)
    addresses = [f.address for f in functions]
    assert addresses == sorted(addresses)
    assert len(functions) == 8 + 8 + 4  # GPUs, compute HCAs, storage/management NICs
    assert {(f.gen, f.width) for f in functions} == {(5, 16)}
