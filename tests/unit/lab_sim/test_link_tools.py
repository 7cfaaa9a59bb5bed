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
    for device in ("mlx5_0", "mlx5_1", "mlx5_2", "mlx5_8", "mlx5_11"):
        done = sim.mlxlink(["-d", device, "-m", "-c"], model, "gpu101")
        assert done.exit_code == 0, done.stderr
        (port,) = parse_mlxlink(f"mlxlink -d {device} -m -c\n{done.stdout}")
        speeds[device] = (port.speed, port.raw_ber == 1.5e-254, port.effective_errors)
    assert speeds == {
        "mlx5_0": ("IB-HDR", True, 0),
        "mlx5_1": (None, True, 0),  # InfiniBand storage, uncabled in the lab: polling
        "mlx5_2": ("100G", True, 0),  # the in-band Ethernet port, as the BlueField-3 prints it
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


def test_ibdev2netdev_names_every_rdma_device_with_its_interface_and_carrier() -> None:
    """DOCA's `ibdev2netdev` line format (`mlx5_0 port 1 ==> ibp24s0 (Up)`), the DGX H100's
    interface names by its User Guide (the OSFP ports' ibp24s0 ... ibp220s0)."""
    lines = sim.ibdev2netdev([], _model(), "gpu101").stdout.splitlines()
    assert len(lines) == 12
    assert lines[0] == "mlx5_0 port 1 ==> ibp24s0 (Up)"
    assert "mlx5_11 port 1 ==> ibp220s0 (Up)" in lines
    assert "mlx5_1 port 1 ==> ibp41s0f0 (Down)" in lines  # uncabled InfiniBand storage port
    assert "mlx5_2 port 1 ==> enp41s0f1np1 (Up)" in lines  # slot 1 port 2, in-band Ethernet
    verbose = sim.ibdev2netdev(["-v"], _model(), "gpu101").stdout.splitlines()
    assert verbose[0].startswith("0000:18:00.0 mlx5_0 (MT4129 - NA) fw ")
    assert verbose[0].endswith(" port 1 (ACTIVE) ==> ibp24s0 (Up)")
