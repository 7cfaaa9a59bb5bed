"""The preflight (issue 33): a bring-up fails in seconds, before a run record or Ansible, with
every missing item in one list: exit 3 naming the hosts that did not answer as a hostlist, exit
2 naming a missing secret. The hosts are a fake SSH that behaves as toward hosts that are off:
it answers nothing until its connect timeout, then says what ssh says. The bounds on wall time
are generous bounds on that fake (each host takes 2 s: one after another, 35 hosts would take
70 s); real timings belong in benchmarks/."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest

from cluster_tool.cli import main
from cluster_tool.remote.fanout import TransportError
from cluster_tool.workflows import burnin, preflight
from tests.conftest import REPO
from tests.unit.workflows.fakes import AnsweringTransport

PASSWORD = "CLUSTER_TOOL_SLURMDBD_PASSWORD"
DOWN_FOR_S = 2.0


class HostsOff:
    """SSH toward hosts that are powered off: nothing answers until the connect timeout."""

    def __init__(self) -> None:
        self.asked: list[str] = []

    def run(self, target: Any, script: str, timeout: float) -> tuple[int, bytes, bytes]:
        self.asked.append(target.name)
        time.sleep(DOWN_FOR_S)
        raise TransportError(f"ssh: connect to host {target.address} port 22: Connection timed out")


class NoConverge(burnin.BurnInLive):
    def converge(self, **_: Any) -> Any:  # type: ignore[override]
        raise AssertionError("Ansible started after a failed preflight")


@pytest.fixture
def spec_32(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The 1-SU example with 32 GPU nodes (plus its head and two login nodes)."""
    text = (REPO / "examples" / "h100-1su.yml").read_text()
    spec = tmp_path / "h100-32.yml"
    spec.write_text(text.replace("gpu[001-031]", "gpu[001-032]"))
    monkeypatch.setattr(burnin, "BurnInLive", NoConverge)
    monkeypatch.setenv("CLUSTER_BMC_USERNAME", "admin")
    monkeypatch.setenv("CLUSTER_BMC_PASSWORD", "a-bmc-password")
    return spec


def _bringup(spec: Path, tmp_path: Path, *extra: str) -> tuple[int, float]:
    runs = tmp_path / "runs"
    started = time.monotonic()
    code = main(
        ["bringup", str(spec), "--inventory", str(tmp_path), "--runs-dir", str(runs), *extra]
    )
    took = time.monotonic() - started
    assert not runs.exists() or not any(runs.iterdir()), "a refused run records nothing"
    return code, took


def test_every_host_down_is_exit_3_in_seconds_naming_them_as_a_hostlist(
    spec_32: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.setenv(PASSWORD, "a-long-enough-password")
    off = HostsOff()
    monkeypatch.setattr(preflight, "ssh_transport", lambda *_: off)
    code, took = _bringup(spec_32, tmp_path)
    err = capsys.readouterr().err
    assert code == 3, err
    assert took < 15, took
    assert len(off.asked) == 35
    assert err.strip().splitlines() == [
        "cluster-tool: preflight: unreachable over SSH: gpu[001-032],head01,login[01-02]"
    ]


def test_a_missing_secret_is_exit_2_in_seconds_naming_the_variable(
    spec_32: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.delenv(PASSWORD, raising=False)
    monkeypatch.setattr(preflight, "ssh_transport", lambda *_: AnsweringTransport())
    code, took = _bringup(spec_32, tmp_path, "--json")
    out, err = capsys.readouterr()
    assert code == 2, err
    assert took < 5, took
    assert f"{PASSWORD} is unset: slurmdbd on head01 needs a password of 12+ characters" in err
    summary = json.loads(out)
    assert summary["exit_code"] == 2 and PASSWORD in summary["error"]


def test_a_short_secret_is_named_by_its_length_never_its_value(
    spec_32: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.setenv(PASSWORD, "tooshort")
    monkeypatch.setattr(preflight, "ssh_transport", lambda *_: AnsweringTransport())
    code, _ = _bringup(spec_32, tmp_path)
    err = capsys.readouterr().err
    assert code == 2
    assert f"{PASSWORD} is 8 characters" in err and "tooshort" not in err


def test_every_problem_in_one_list_the_input_first_decides_exit_2(
    spec_32: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.delenv(PASSWORD, raising=False)
    monkeypatch.setattr(preflight, "ssh_transport", lambda *_: AnsweringTransport({"gpu007"}))
    code, _ = _bringup(spec_32, tmp_path)
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert code == 2
    assert f"{PASSWORD} is unset" in line
    assert "unreachable over SSH: gpu007 (ssh: connect to host 10.10.1.7 port 22" in line


def test_the_preflight_command_alone(
    spec_32: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.setenv(PASSWORD, "a-long-enough-password")
    up = AnsweringTransport()
    monkeypatch.setattr(preflight, "ssh_transport", lambda *_: up)
    assert main(["preflight", str(spec_32), "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["status"] == "pass" and data["checked"]["ssh"] == "35 of 35 hosts answered"
    assert main(["preflight", str(spec_32), "--nodes", "gpu[001-004]"]) == 0
    # All at once: in any order.
    assert sorted(up.asked[-4:]) == ["gpu001", "gpu002", "gpu003", "gpu004"]
    capsys.readouterr()
    assert main(["preflight", str(spec_32), "--nodes", "gpu999"]) == 2
    assert "not hosts of the spec: gpu999" in capsys.readouterr().err


# --- re-image: Slurm and the BMCs, before the first drain ------------------------------------


def test_a_reimage_whose_bmcs_do_not_answer_drains_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from cluster_tool.workflows import jobs
    from tests.unit.workflows.fakes import SlurmCluster, admin_slurm

    slurm = SlurmCluster(["gpu001", "gpu002", "gpu003", "gpu004"])
    monkeypatch.setattr(jobs, "connect", lambda *_: admin_slurm(slurm))
    asked: list[dict[str, str]] = []

    def bmcs_off(urls: dict[str, str]) -> dict[str, str]:
        asked.append(dict(urls))
        return {n: f"{url.split('//')[1]}: Connection timed out" for n, url in urls.items()}

    monkeypatch.setattr(preflight, "bmc_unanswered", bmcs_off)
    monkeypatch.setenv("LAB_BMC_USERNAME", "admin")
    monkeypatch.setenv("LAB_BMC_PASSWORD", "a-lab-only-bmc-password")
    lab = str(REPO / "examples" / "lab.yml")
    args = ["reimage", lab, "--nodes", "gpu[002-003]", "--insecure-bmc", "--bmc-scheme", "http"]
    code = main([*args, "--runs-dir", str(tmp_path / "runs")])
    err = capsys.readouterr().err
    assert code == 3, err
    assert err.startswith("cluster-tool: preflight: BMC unreachable: gpu[002-003]"), err
    assert set(asked[0]) == {"gpu002", "gpu003"}
    assert not [c for c in slurm.calls if c[:2] == ["scontrol", "update"]], "nothing drained"
    assert not (tmp_path / "runs").exists()


def test_a_new_reimage_plans_its_batches_once_for_the_preflight_and_the_record(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from cluster_tool.errors import UsageError
    from cluster_tool.workflows import jobs, reimage, runs
    from tests.unit.workflows.fakes import SlurmCluster, admin_slurm

    slurm = SlurmCluster(["gpu001", "gpu002", "gpu003", "gpu004"])
    monkeypatch.setattr(jobs, "connect", lambda *_: admin_slurm(slurm))
    monkeypatch.setattr(preflight, "bmc_unanswered", lambda urls: {})
    planned: list[list[list[str]]] = []
    plan = reimage.plan_batches

    def counted(*args: object, **kwargs: object) -> list[list[str]]:
        planned.append(plan(*args, **kwargs))  # type: ignore[arg-type]
        return planned[-1]

    recorded: list[dict[str, object]] = []

    def created(*args: object, **kwargs: object) -> None:
        recorded.append(args[2])  # type: ignore[arg-type]  # the inputs the record would keep
        raise UsageError("stopped before the first drain")

    monkeypatch.setattr(reimage, "plan_batches", counted)
    monkeypatch.setattr(runs.RunRecord, "create", created)
    monkeypatch.setenv("LAB_BMC_USERNAME", "admin")
    monkeypatch.setenv("LAB_BMC_PASSWORD", "a-lab-only-bmc-password")
    lab = str(REPO / "examples" / "lab.yml")
    args = ["reimage", lab, "--nodes", "gpu[002-004]", "--batch", "2", "--per-su", "2"]
    code = main([*args, "--insecure-bmc", "--bmc-scheme", "http", "--runs-dir", str(tmp_path)])
    assert code == 2 and "stopped before the first drain" in capsys.readouterr().err
    assert planned == [[["gpu002", "gpu003"], ["gpu004"]]]
    assert recorded[0]["batches"] == planned[0]


def test_a_bmc_port_nobody_listens_on_is_unanswered_and_one_that_listens_is_not() -> None:
    import socket

    from cluster_tool.bmc.redfish import unanswered

    with socket.socket() as listening:
        listening.bind(("127.0.0.1", 0))
        listening.listen()
        port = listening.getsockname()[1]
        down = unanswered(
            {"gpu001": f"http://127.0.0.1:{port}", "gpu002": "http://127.0.0.1:1"}, timeout_s=2
        )
    assert list(down) == ["gpu002"] and "127.0.0.1:1" in down["gpu002"]


# --- the gate's folder: written here, read back on a GPU node ---------------------------------


class SeesFiles(AnsweringTransport):
    """Nodes that run `cat -- PATH` against this machine's files (a shared folder) or, with
    `shared=False`, against a disk of their own where the file is not."""

    def __init__(self, shared: bool) -> None:
        super().__init__()
        self.shared = shared

    def run(self, target: Any, script: str, timeout: float) -> tuple[int, bytes, bytes]:
        import shlex

        if not script.startswith("cat -- "):
            return super().run(target, script, timeout)
        path = Path(shlex.split(script)[2])
        if self.shared and path.is_file():
            return 0, path.read_bytes(), b""
        return 1, b"", f"cat: {path}: No such file or directory\n".encode()


@pytest.mark.parametrize("shared", [True, False])
def test_the_gate_folder_is_written_here_and_read_back_on_a_node(
    shared: bool,
    spec_32: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.setenv(PASSWORD, "a-long-enough-password")
    monkeypatch.setattr(preflight, "ssh_transport", lambda *_: SeesFiles(shared))
    folder = tmp_path / "gate"
    folder.mkdir()
    code = main(["preflight", str(spec_32), "--workdir", str(folder), "--json"])
    data = json.loads(capsys.readouterr().out)
    assert list(folder.iterdir()) == [], "the probe file is removed"
    if shared:
        assert code == 0 and data["checked"]["gate folder"] == f"{folder} shared with gpu001"
    else:
        assert code == 2
        assert data["problems"] == [
            {
                "kind": "input",
                "text": f"the gate's folder {folder} is not shared with gpu001: a file written "
                "here is not there (mount it on the nodes at the same path, or give --workdir)",
            }
        ]


def test_a_gate_folder_that_is_not_there_is_named(
    spec_32: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.setenv(PASSWORD, "a-long-enough-password")
    monkeypatch.setattr(preflight, "ssh_transport", lambda *_: SeesFiles(True))
    assert main(["preflight", str(spec_32), "--workdir", str(tmp_path / "nope")]) == 2
    assert "is not a folder on this controller" in capsys.readouterr().err


# --- the OS the spec pins --------------------------------------------------------------------


def test_hosts_running_another_os_are_named_with_both(
    spec_32: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.setenv(PASSWORD, "a-long-enough-password")
    runs = {
        "gpu007": "ubuntu-20.04.6.txt",
        "gpu008": "ubuntu-20.04.6.txt",
        "head01": "debian-12.txt",
    }
    monkeypatch.setattr(preflight, "ssh_transport", lambda *_: AnsweringTransport(runs=runs))
    code, _ = _bringup(spec_32, tmp_path)
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert code == 2
    assert "gpu[007-008] runs Ubuntu 20.04.6 LTS; the spec says ubuntu2204" in line
    assert "head01 runs Debian GNU/Linux 12 (bookworm); the spec says ubuntu2204" in line


def test_the_preflight_asks_the_slurmdbd_password_length_the_slurm_role_asserts() -> None:
    # Two layers hold the rule: the role refuses a short password on the host, the preflight
    # before anything runs. They must agree, or one of them turns away what the other allows.
    import re

    import yaml

    tasks = yaml.safe_load((REPO / "roles" / "slurm" / "tasks" / "validate.yml").read_text())
    that = [t for task in tasks for t in task.get("ansible.builtin.assert", {}).get("that", [])]
    lengths = [re.search(r"slurm_dbd_storage_pass \| length >= (\d+)", t) for t in that]
    found = [int(m.group(1)) for m in lengths if m]
    assert found == [preflight.SLURMDBD_PASSWORD_MIN]
