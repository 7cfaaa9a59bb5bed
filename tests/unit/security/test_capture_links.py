"""Issue 32: a capture (`--from`) is read as it is, never through a link: a symlinked probe
output, probes.json, manifest or host folder, and a FIFO or device in its place, are refused
with one line and exit 2, and nothing they point at is shown."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from cluster_tool.cli import main
from cluster_tool.remote.fanout import HostResult, ProbeOutput, save_capture
from cluster_tool.spec import load_spec
from tests.conftest import REPO

LAB = REPO / "examples" / "lab.yml"
VERSIONS = "kernel 6.1.0-27-amd64\nmodule nvidia 550.127.08\n"
SECRET = "root-only: the site's BMC password list"


def _capture(tmp_path: Path) -> Path:
    folder = tmp_path / "capture"
    names = [n.name for n in load_spec(LAB).gpu_nodes()]
    save_capture(folder, {n: HostResult(n, {"versions": ProbeOutput(0, VERSIONS)}) for n in names})
    return folder


@pytest.fixture
def private(tmp_path: Path) -> Path:
    target = tmp_path / "shadow"
    target.write_text(f"kernel {SECRET}\n")
    os.chmod(target, 0o600)
    return target


def _refused(folder: Path, capsys: pytest.CaptureFixture[str], *expect: str) -> None:
    code = main(["versions", "--spec", str(LAB), "--from", str(folder)])
    shown = capsys.readouterr()
    assert code == 2, shown.err
    assert len(shown.err.strip().splitlines()) == 1 and "internal error" not in shown.err
    assert SECRET not in shown.out + shown.err
    for text in expect:
        assert text in shown.err


@pytest.mark.parametrize("entry", ["gpu001/versions.out", "gpu001/probes.json", "manifest.json"])
def test_a_symlinked_file_of_a_capture_is_refused(
    entry: str, private: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    folder = _capture(tmp_path)
    (folder / entry).unlink()
    (folder / entry).symlink_to(private)
    _refused(folder, capsys, entry.split("/")[-1], "symlink")


def test_a_symlinked_host_folder_is_refused(
    private: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    folder = _capture(tmp_path)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "versions.out").symlink_to(private)
    for name in os.listdir(folder / "gpu002"):
        (folder / "gpu002" / name).unlink()
    (folder / "gpu002").rmdir()
    (folder / "gpu002").symlink_to(elsewhere)
    _refused(folder, capsys, "gpu002", "symlink")


@pytest.mark.parametrize("kind", ["fifo", "device"])
def test_a_special_file_in_a_capture_is_refused(
    kind: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    folder = _capture(tmp_path)
    out = folder / "gpu001" / "versions.out"
    out.unlink()
    if kind == "fifo":
        os.mkfifo(out)
    else:
        if os.geteuid() != 0:
            pytest.skip("making a device node needs root")
        os.mknod(out, stat.S_IFCHR | 0o600, os.makedev(1, 5))  # /dev/zero's numbers
    _refused(folder, capsys, "versions.out")


def test_a_plain_capture_still_reads(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["versions", "--spec", str(LAB), "--from", str(_capture(tmp_path))]) in (0, 1)
    assert "internal error" not in capsys.readouterr().err
