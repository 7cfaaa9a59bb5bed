"""Files are written safely: a reader of a rendered inventory always finds a whole one, two
renders of one folder do not trip over each other, what a killed render left is swept, no file
is written or shown through a symlink the tool did not make, and site data is private."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest

from cluster_tool.cli import main
from cluster_tool.render import render
from cluster_tool.render.engine import RenderError
from cluster_tool.spec import load_spec
from cluster_tool.workflows.runs import RunRecord
from tests.conftest import REPO

LAB = load_spec(REPO / "examples" / "lab.yml")
H100 = load_spec(REPO / "examples" / "h100-1su.yml")

# Opens hosts.yml as fast as it can until told to stop; prints how often it was missing.
READER = """
import sys, pathlib
path = pathlib.Path(sys.argv[1]) / "hosts.yml"
stop = pathlib.Path(sys.argv[2])
missing = reads = 0
print("ready", flush=True)
while not stop.exists():
    try:
        path.read_bytes()
    except FileNotFoundError:
        missing += 1
    reads += 1
print(missing, reads)
"""


def test_a_reader_never_finds_the_inventory_missing_while_it_is_rendered(tmp_path: Path) -> None:
    out = tmp_path / "inv"
    render(LAB, out)
    stop = tmp_path / "stop"
    reader = subprocess.Popen(
        [sys.executable, "-c", READER, str(out), str(stop)], stdout=subprocess.PIPE, text=True
    )
    assert reader.stdout is not None and reader.stdout.readline().strip() == "ready"
    for i in range(40):
        render(H100 if i % 2 else LAB, out)
    stop.touch()
    missing, reads = (int(x) for x in reader.communicate(timeout=60)[0].split())
    assert reads > 100
    assert missing == 0


# Writes a small rendered folder again and again once told to start (two files, so the swaps
# rather than the writing overlap; each rename a little slow, as on a busy disk, so that two
# writers meet between steps); prints what failed.
RENDERER = """
import os, sys, pathlib, time
from cluster_tool.render import write_atomically
rename = os.rename
def slow_rename(*args, **kwargs):
    time.sleep(0.003)
    return rename(*args, **kwargs)
os.rename = slow_rename
files = {"hosts.yml": sys.argv[1] + "\\n", "spec.json": "{}\\n"}
out, go = pathlib.Path(sys.argv[2]), pathlib.Path(sys.argv[3])
while not go.exists():
    time.sleep(0.001)
for _ in range(40):
    try:
        write_atomically(files, out)
    except Exception as exc:
        print(type(exc).__name__, exc)
"""


def test_two_renders_of_one_folder_both_succeed_and_leave_nothing_behind(tmp_path: Path) -> None:
    out = tmp_path / "inv"
    render(LAB, out)
    go = tmp_path.parent / f"{tmp_path.name}-go"
    workers = [
        subprocess.Popen(
            [sys.executable, "-c", RENDERER, str(REPO / "examples" / spec), str(out), str(go)],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            cwd=REPO,
        )
        for spec in ("lab.yml", "h100-1su.yml")
    ]
    go.touch()
    failures = [w.communicate(timeout=300)[0] for w in workers]
    go.unlink()
    assert failures == ["", ""]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["inv"]
    assert (out / "hosts.yml").is_file() and (out / "spec.json").is_file()


def test_what_a_killed_render_left_beside_the_folder_is_swept(tmp_path: Path) -> None:
    out = tmp_path / "inv"
    render(LAB, out)
    # What a kill -9 between the steps of a render leaves: a half-written folder, and the
    # previous output moved aside.
    (tmp_path / ".inv.render-k1ll3d").mkdir()
    (tmp_path / ".inv.render-k1ll3d" / "hosts.yml").write_text("half")
    (tmp_path / ".inv.old-k1ll3d" / "previous").mkdir(parents=True)
    (tmp_path / ".other.render-keep").mkdir()
    render(H100, out)
    assert sorted(p.name for p in tmp_path.iterdir()) == [".other.render-keep", "inv"]


def test_diff_refuses_a_symlink_in_the_output_folder_and_shows_nothing_it_points_at(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    secret = tmp_path / "secret.key"
    secret.write_text("TOP-SECRET-CONTENT\n")
    secret.chmod(0o600)
    out = tmp_path / "inv"
    render(LAB, out)
    (out / "nccl.conf").unlink()
    (out / "nccl.conf").symlink_to(secret)
    code = main(["render", str(REPO / "examples" / "lab.yml"), "-o", str(out), "--diff"])
    captured = capsys.readouterr()
    assert code == 2
    assert "TOP-SECRET-CONTENT" not in captured.out + captured.err
    assert "symlink" in captured.err


def test_render_never_writes_through_a_symlink_at_the_output_path(tmp_path: Path) -> None:
    victim = tmp_path / "victim"
    render(LAB, victim)
    before = {p: p.read_bytes() for p in victim.rglob("*") if p.is_file()}
    out = tmp_path / "inv"
    out.symlink_to(victim)
    with pytest.raises(RenderError, match="symlink"):
        render(H100, out)
    assert {p: p.read_bytes() for p in victim.rglob("*") if p.is_file()} == before


def test_render_of_the_root_is_refused_before_anything_is_read(
    capsys: pytest.CaptureFixture[str],
) -> None:
    started = time.monotonic()
    assert main(["render", str(REPO / "examples" / "lab.yml"), "-o", "/"]) == 2
    assert time.monotonic() - started < 2.0
    assert "root cannot be an output folder" in capsys.readouterr().err


def test_rendered_files_are_private(tmp_path: Path) -> None:
    out = tmp_path / "inv"
    render(LAB, out)
    for path in [out, *out.rglob("*")]:
        mode = stat.S_IMODE(path.stat().st_mode)
        assert mode == (0o700 if path.is_dir() else 0o600), f"{path}: {oct(mode)}"


def _finished_run(tmp_path: Path) -> RunRecord:
    record = RunRecord.create(tmp_path / "runs", "bringup", {"spec": "lab.yml"})
    record.finish({"command": "bringup", "verdict": "pass"}, [])
    return record


@pytest.mark.parametrize("planted", ["report.html.tmp", "junit.xml.tmp"])
def test_report_never_writes_through_a_planted_temporary_name(
    planted: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    record = _finished_run(tmp_path)
    victim = tmp_path / "victim.txt"
    victim.write_text("precious\n")
    (record.path / planted).symlink_to(victim)
    assert main(["report", str(record.path)]) == 0
    assert victim.read_text() == "precious\n"
    assert "<html" in (record.path / "report.html").read_text()


def test_a_run_record_never_writes_through_a_planted_temporary_name(tmp_path: Path) -> None:
    record = RunRecord.create(tmp_path / "runs", "bringup", {"spec": "lab.yml"})
    victim = tmp_path / "victim.txt"
    victim.write_text("precious\n")
    (record.path / "summary.json.tmp").symlink_to(victim)
    record.finish({"command": "bringup", "verdict": "pass"}, [])
    assert victim.read_text() == "precious\n"
    assert '"verdict": "pass"' in (record.path / "summary.json").read_text()


def test_plan_never_writes_the_hostfile_through_a_planted_temporary_name(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    victim = tmp_path / "victim.txt"
    victim.write_text("precious\n")
    hostfile = tmp_path / "hosts"
    (tmp_path / "hosts.tmp").symlink_to(victim)
    args = ["plan", "--model", "llama3-8b", "--nodes", "4", "--hostfile", str(hostfile), "--json"]
    assert main(args) == 0
    assert victim.read_text() == "precious\n"
    assert len(hostfile.read_text().splitlines()) == 4


def test_scrub_replaces_a_file_rather_than_rewriting_it_in_place(tmp_path: Path) -> None:
    from cluster_tool.redact import Secrets

    record = RunRecord.create(tmp_path / "runs", "bringup", {}, Secrets({"s3cr3t"}))
    artefact = record.path / "ansible" / "stdout"
    artefact.parent.mkdir()
    artefact.write_text("password s3cr3t\n")
    # A reader holding the file open (or a hard link) keeps a whole file: the clean copy is a
    # new file renamed over the old, never the old truncated and rewritten.
    inode = os.stat(artefact).st_ino
    assert record.scrub() == [artefact]
    assert artefact.read_text() == "password [redacted]\n"
    assert os.stat(artefact).st_ino != inode
