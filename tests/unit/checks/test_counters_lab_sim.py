"""The lab's link-flap fault drives the simulated kernel log and the LinkDowned counters at
both ends of the cable consistently, and node health names the flapping port with its cable."""

from __future__ import annotations

import json

import pytest

from cluster_lab import fabric
from cluster_lab import model as hw
from cluster_lab.faults import FaultError, inject
from cluster_lab.sim import render_dcgmi
from cluster_lab.sim.hw import node_hardware
from cluster_tool.checks.node import check_node, expectations_for
from cluster_tool.probes import ProbeOutput
from cluster_tool.spec import load_spec
from tests.conftest import FIXTURES, REPO

T0 = 1_700_003_600.0  # an hour after the simulated boot


def flapping(period: float) -> dict:
    model = json.loads((FIXTURES / "sim" / "lab-model.json").read_text())
    inject(model, "link-flap", "gpu002", "mlx5_0", period, now=T0)
    return model


def test_the_kernel_log_and_both_counters_count_the_same_flaps(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    model = flapping(10)
    monkeypatch.setattr(render_dcgmi.time, "time", lambda: T0 + 25)
    log = render_dcgmi.render_kernel_log(node_hardware(model, "gpu002"))
    lines = [line for line in log.splitlines() if "mlx5_core" in line]
    # Down at T0, T0+10, T0+20 (an hour and so on after boot), each back a second later.
    assert lines == [
        "[ 3600.000000] mlx5_core 0000:18:00.0 ibp24s0: Link down",
        "[ 3601.000000] mlx5_core 0000:18:00.0 ibp24s0: Link up",
        "[ 3610.000000] mlx5_core 0000:18:00.0 ibp24s0: Link down",
        "[ 3611.000000] mlx5_core 0000:18:00.0 ibp24s0: Link up",
        "[ 3620.000000] mlx5_core 0000:18:00.0 ibp24s0: Link down",
        "[ 3621.000000] mlx5_core 0000:18:00.0 ibp24s0: Link up",
    ]
    hca = hw.HardwareModel.model_validate(model).node("gpu002").hcas[0]
    assert fabric.link_downed(hca, T0 + 25) == (3, 3)  # HCA end, leaf end
    # A power cycle of the node counts at the leaf end only, and stays there.
    setattr(hca, fabric.LEAF_LINK_DOWNED, 1)
    assert fabric.link_downed(hca, T0 + 25) == (3, 4)

    # Node health over that kernel log: the port is named with its cable, up again now.
    lab = load_spec(REPO / "examples" / "lab.yml")
    expect = expectations_for(lab, "gpu002", nccl_conf="")
    found = check_node(expect, {"kernel-log": ProbeOutput(0, log)})
    (flap,) = [f for f in found if f.check == "link.flap"]
    assert (flap.node, flap.component, flap.observed) == ("gpu002", "mlx5_0", "down 3 times")
    assert flap.message.startswith("gpu002 mlx5_0 ↔ su1-leaf-r0 port 2: ")
    assert "it is up now" in flap.message


def test_a_bad_period_is_refused_in_one_line() -> None:
    with pytest.raises(FaultError, match="PERIOD must be"):
        flapping(0.5)
    with pytest.raises(FaultError, match="PERIOD must be"):
        inject(json.loads((FIXTURES / "sim" / "lab-model.json").read_text()), "link-flap",
               "gpu002", "mlx5_0", "often")  # fmt: skip


def test_a_power_cycle_counts_a_link_down_at_both_ends_of_each_cable() -> None:
    # What real hardware shows after a node's reboot and what the lab's BMC power-off now
    # does to its model (and ibsim): one LinkDowned more at the HCA and at the leaf port.
    model = json.loads((FIXTURES / "sim" / "lab-model.json").read_text())
    node = hw.HardwareModel.model_validate(model).node("gpu003")
    assert fabric.link_downed(node.hcas[0], T0) == (0, 0)
    fabric.count_power_cycle(node)
    fabric.count_power_cycle(node)
    assert {fabric.link_downed(h, T0) for h in node.hcas} == {(2, 2)}
    # 8-bit counters stop at 255 instead of wrapping to 0.
    setattr(node.hcas[0], fabric.LEAF_LINK_DOWNED, 255)
    fabric.count_power_cycle(node)
    assert fabric.link_downed(node.hcas[0], T0) == (3, 255)
