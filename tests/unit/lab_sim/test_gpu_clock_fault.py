"""Lab fault `gpu-clock NODE GPU MHZ` (issue 20): one GPU's application clock set below its
default shows the same in `nvidia-smi -q` and `--query-gpu` (the clock and the Applications
Clocks Setting reason), slows the node's collectives by the clock's ratio, and heals."""

from __future__ import annotations

import json
from typing import Any

import pytest

from cluster_lab.faults import FaultError, heal, inject
from cluster_lab.sim.hw import node_hardware
from cluster_lab.sim.render_smi import render_query, render_query_csv
from cluster_tool.parsers.nvidia_query import parse_query_csv
from cluster_tool.parsers.nvidia_smi import parse_nvidia_smi_q
from tests.unit.lab_sim.test_faults import MODEL, busbw


@pytest.fixture
def model() -> dict[str, Any]:
    data: dict[str, Any] = json.loads(MODEL.read_text())
    return data


FIELDS = [
    "index",
    "clocks.sm",
    "clocks.applications.graphics",
    "clocks.default_applications.graphics",
    "clocks_event_reasons.applications_clocks_setting",
]


def test_the_capped_gpu_shows_its_clock_and_reason_in_both_views(model: dict[str, Any]) -> None:
    record = inject(model, "gpu-clock", "gpu002", "3", "1200")
    hw = node_hardware(model, "gpu002")
    gpus = parse_nvidia_smi_q(render_query(hw)).gpus
    capped = gpus[3]
    assert capped.clocks is not None and capped.clock_event_reasons is not None
    assert capped.clocks.applications_graphics_mhz == 1200
    assert capped.clocks.default_applications_graphics_mhz == 1980
    assert capped.clock_event_reasons.applications_clocks_setting is True
    others = [g for i, g in enumerate(gpus) if i != 3]
    assert {g.clocks.applications_graphics_mhz for g in others if g.clocks} == {1980}
    assert not any(
        g.clock_event_reasons.applications_clocks_setting for g in others if g.clock_event_reasons
    )

    rows = parse_query_csv(render_query_csv(hw, FIELDS)).rows
    assert rows[3]["clocks.sm"] == 1200 and rows[3]["clocks.applications.graphics"] == 1200
    assert rows[3]["clocks_event_reasons.applications_clocks_setting"] == "Active"
    assert {r["clocks.sm"] for i, r in enumerate(rows) if i != 3} == {1980}

    heal(model, record["id"])
    healed = parse_nvidia_smi_q(render_query(node_hardware(model, "gpu002"))).gpus[3]
    assert healed.clocks is not None and healed.clocks.applications_graphics_mhz == 1980


def test_a_capped_gpu_slows_the_nodes_collectives_by_the_clock_ratio(
    model: dict[str, Any],
) -> None:
    healthy = busbw(model)
    record = inject(model, "gpu-clock", "gpu002", "5", "990")
    assert busbw(model) == pytest.approx(healthy * 990 / 1980, rel=0.02)
    assert busbw(model, "gpu[003-004]") == pytest.approx(healthy, rel=0.02)  # not in the job
    heal(model, record["id"])
    assert busbw(model) == pytest.approx(healthy, rel=0.001)


@pytest.mark.parametrize("mhz", ["0", "1980", "2500", "fast"])
def test_a_clock_that_caps_nothing_is_refused(model: dict[str, Any], mhz: str) -> None:
    with pytest.raises(FaultError, match="MHZ"):
        inject(model, "gpu-clock", "gpu001", "0", mhz)
