"""The simulated nvidia-persistenced behaves as the real one where the roles depend on it:
persistence mode is on only while the daemon runs without --no-persistence-mode
(nvidia-persistenced(1)), and the package ships the unit as Ubuntu's nvidia-compute-utils does,
with --no-persistence-mode, so a role that only starts the service leaves it off."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from cluster_lab.sim import cli, kernel_state
from cluster_lab.sim.hw import default_hardware
from cluster_lab.sim.packages import PERSISTENCED_UNIT, packages_for
from cluster_lab.sim.render_smi import render_query_csv
from tests.conftest import REPO

UBUNTU_EXEC = (
    "/usr/bin/nvidia-persistenced --user nvidia-persistenced --no-persistence-mode --verbose"
)


def _persistence(run_dir: Path, monkeypatch: pytest.MonkeyPatch) -> set[str]:
    """What `nvidia-smi --query-gpu=persistence_mode` shows on gpu001 with this node state."""
    monkeypatch.setattr(kernel_state, "RUN_DIR", run_dir)
    model = {"nodes": {"gpu001": {"hardware": default_hardware("gpu001").to_dict()}}}
    hw = cli._hardware(model, "gpu001")
    assert hw is not None
    return set(render_query_csv(hw, ["persistence_mode"], header=False).split())


def _start(run_dir: Path, args: list[str]) -> subprocess.Popen[bytes]:
    env = {
        **os.environ,
        "LAB_RUN_DIR": str(run_dir),
        "LAB_MODEL": str(run_dir / "absent.json"),
        "PYTHONPATH": str(REPO),
    }
    code = (
        "import sys; from cluster_lab.sim import cli; cli.persistenced(sys.argv[1:], {}, 'gpu001')"
    )
    daemon = subprocess.Popen([sys.executable, "-c", code, *args], env=env)
    deadline = time.monotonic() + 20
    while not kernel_state.persistence_file(run_dir).exists():
        assert daemon.poll() is None and time.monotonic() < deadline, "persistenced did not start"
        time.sleep(0.05)
    return daemon


def _stop(daemon: subprocess.Popen[bytes]) -> None:
    daemon.send_signal(signal.SIGTERM)
    assert daemon.wait(timeout=20) == 0


def test_the_package_ships_ubuntus_unit_with_persistence_mode_off() -> None:
    (pkg,) = [p for p in packages_for() if p.name == "nvidia-persistenced"]
    assert pkg.files["/lib/systemd/system/nvidia-persistenced.service"] == PERSISTENCED_UNIT
    assert f"ExecStart={UBUNTU_EXEC}\n" in PERSISTENCED_UNIT


def test_started_as_ubuntus_unit_says_persistence_mode_stays_off(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    daemon = _start(tmp_path, UBUNTU_EXEC.split()[1:])
    try:
        assert _persistence(tmp_path, monkeypatch) == {"Disabled"}
    finally:
        _stop(daemon)


def test_without_the_flag_persistence_mode_is_on_until_the_daemon_stops(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert _persistence(tmp_path, monkeypatch) == {"Disabled"}  # no daemon, no persistence
    daemon = _start(tmp_path, ["--user", "nvidia-persistenced", "--verbose"])
    try:
        assert _persistence(tmp_path, monkeypatch) == {"Enabled"}
    finally:
        _stop(daemon)
    assert _persistence(tmp_path, monkeypatch) == {"Disabled"}


def test_the_daemon_publishes_again_when_what_the_views_are_made_of_changes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The daemon's round looks at stats only; each input the views come from shows."""
    model = tmp_path / "model.json"
    model.write_text("{}")
    monkeypatch.setenv("LAB_MODEL", str(model))
    monkeypatch.setattr(kernel_state, "RUN_DIR", tmp_path / "run")
    before = cli._view_inputs()
    assert cli._view_inputs() == before, "nothing changed: nothing to publish"
    replaced = tmp_path / "new.json"
    replaced.write_text("{}")
    replaced.replace(model)  # as the lab saves it: a new file
    after_model = cli._view_inputs()
    assert after_model != before
    kernel_state.loaded_dir().mkdir(parents=True)
    (kernel_state.loaded_dir() / "nvidia").touch()  # modprobe nvidia
    assert cli._view_inputs() != after_model
    marked = cli._view_inputs()
    kernel_state.persistence_file().write_text("1 4242\n")
    assert cli._view_inputs() != marked
