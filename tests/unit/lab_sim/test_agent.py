"""The lab agent's reads of the BMC emulators: every second while a power action may be pending
(within BUSY_S of an emulator's notification, the request included), every IDLE_POLL_S
otherwise; the lab model is parsed again only when its file was replaced."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from cluster_lab import agent
from cluster_lab import model as hw
from cluster_lab.config import LabConfig
from tests.conftest import FIXTURES


@pytest.fixture
def config(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> LabConfig:
    monkeypatch.setenv("CLUSTER_TOOL_LAB_DIR", str(tmp_path / "lab"))
    config = LabConfig.from_env()
    data = json.loads((FIXTURES / "sim" / "lab-model.json").read_text())
    hw.save(config.model_dir, hw.HardwareModel.model_validate(data))
    return config


def test_reads_every_second_after_a_notification_and_seldom_when_idle(
    config: LabConfig, monkeypatch: pytest.MonkeyPatch
) -> None:
    clock = [1000.0]
    monkeypatch.setattr(agent.time, "monotonic", lambda: clock[0])
    a = agent.Agent(config)
    clock[0] += agent.BUSY_S + 1  # the start-up's busy spell is over
    last = clock[0] - 1
    assert not a.due(clock[0], last), "idle: one read a second is what cost the CPU"
    assert a.due(clock[0], clock[0] - agent.IDLE_POLL_S)
    a.notify("gpu001", {"power_state": "On", "pending_power": {"power_state": "Off"}})
    for _ in range(int(agent.BUSY_S) - 1):
        clock[0] += 1
        assert a.due(clock[0], clock[0] - 1), "a pending power action is read for every second"
    clock[0] += 2
    assert not a.due(clock[0], clock[0] - 1)


def test_the_model_is_parsed_again_only_when_its_file_was_replaced(
    config: LabConfig, monkeypatch: pytest.MonkeyPatch
) -> None:
    loads: list[Path] = []
    real = hw.load

    def counting(model_dir: Path) -> hw.HardwareModel:
        loads.append(model_dir)
        return real(model_dir)

    monkeypatch.setattr(agent.hw, "load", counting)
    a = agent.Agent(config)
    first = a.model()
    assert a.model() is first and len(loads) == 1
    hw.update(config.model_dir, lambda m: setattr(m.node("gpu002"), "power_state", "Off"))
    before = len(loads)  # update() read it too
    assert a.model().node("gpu002").power_state == "Off" and len(loads) == before + 1
    assert a.model() is a.model() and len(loads) == before + 1
