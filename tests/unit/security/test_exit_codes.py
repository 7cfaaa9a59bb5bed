"""Bad input is a one-line error and exit 2 (the contract in docs/architecture.md), never
"internal error" with exit 1, never a silent zero taken as "not given", never a run that does
not end."""

from __future__ import annotations

import errno
import json
import os
import time
from pathlib import Path

import pytest

from cluster_tool.cli import main
from cluster_tool.workflows.runs import RunRecord
from tests.conftest import REPO

IBNETDISCOVER = REPO / "tests" / "fixtures" / "parsers" / "ib" / "ibnetdiscover_ibsim_hdr.txt"
LAB = str(REPO / "examples" / "lab.yml")
BINARY = bytes(range(0x80, 0x100)) * 4


def _exit_2_one_line(
    args: list[str], capsys: pytest.CaptureFixture[str], *expect: str, seconds: float = 2.0
) -> str:
    started = time.monotonic()
    code = main(args)
    took = time.monotonic() - started
    err = capsys.readouterr().err
    assert code == 2, err
    assert len(err.strip().splitlines()) == 1, err
    assert "internal error" not in err
    for text in expect:
        assert text in err, err
    assert took < seconds, took
    return err


@pytest.mark.parametrize(
    ("args", "flag"),
    [
        (["--model", "llama3-8b", "--nodes", "64", "--seq", "0"], "--seq 0"),
        (["--model", "llama3-8b", "--nodes", "64", "--global-batch", "0"], "--global-batch 0"),
        (["--model", "llama3-8b", "--nodes", "64", "--nodes-per-su", "0"], "--nodes-per-su 0"),
        (["--model", "llama3-8b", "--nodes", "64", "--nodes-per-su", "-4"], "--nodes-per-su -4"),
        (["--layers", "8", "--hidden", "512", "--heads", "0", "--nodes", "4"], "--heads 0"),
        (["--model", "llama3-8b", "--nodes", "1000000000"], "--nodes 1000000000"),
        (
            ["--layers", "8", "--hidden", "512", "--heads", "8", "--nodes", "8", "--experts", "0"],
            "--experts 0",
        ),
    ],
)
def test_plan_refuses_zero_negative_and_unbounded_arguments(
    args: list[str], flag: str, capsys: pytest.CaptureFixture[str]
) -> None:
    _exit_2_one_line(["plan", *args], capsys, flag)


def test_gate_simulate_refuses_a_fleet_it_could_never_finish(
    capsys: pytest.CaptureFixture[str],
) -> None:
    _exit_2_one_line(["gate", "simulate", "--nodes", "1000000000", "--bad", "1"], capsys, "4096")


def test_binary_gate_results_are_a_usage_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    results = tmp_path / "gate.json"
    results.write_bytes(BINARY)
    _exit_2_one_line(
        ["plan", "--model", "llama3-8b", "--nodes", "4", "--gate-results", str(results)],
        capsys,
        "not UTF-8 text",
    )


def test_a_fifo_as_gate_results_is_refused_instead_of_blocking(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    fifo = tmp_path / "gate.json"
    os.mkfifo(fifo)
    _exit_2_one_line(
        ["plan", "--model", "llama3-8b", "--nodes", "4", "--gate-results", str(fifo)],
        capsys,
        "not a regular file",
    )


def test_a_binary_node_file_is_a_usage_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    node_file = tmp_path / "node.json"
    node_file.write_bytes(BINARY)
    _exit_2_one_line(["node-check", "--node-file", str(node_file)], capsys, "not a node file")


@pytest.mark.parametrize("option", ["--cabling", "--switch-links"])
def test_a_binary_cabling_plan_is_a_usage_error(
    option: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    plan = tmp_path / "plan.csv"
    plan.write_bytes(b"node,hca\n" + BINARY)
    args = ["fabric", "check", "--spec", LAB, "--ibnetdiscover", str(IBNETDISCOVER)]
    _exit_2_one_line([*args, option, str(plan)], capsys, "not UTF-8 text")


def test_a_capture_naming_a_host_outside_its_folder_is_a_usage_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    capture = tmp_path / "capture"
    capture.mkdir()
    manifest = {"version": 1, "hosts": {"../../etc": {"probes": ["passwd"]}}}
    (capture / "manifest.json").write_text(json.dumps(manifest))
    from cluster_tool.errors import UsageError
    from cluster_tool.remote.fanout import load_capture

    with pytest.raises(UsageError, match="cannot name a file of the capture"):
        load_capture(capture)


def _finished_run(tmp_path: Path) -> RunRecord:
    record = RunRecord.create(tmp_path / "runs", "bringup", {"spec": "lab.yml"})
    record.finish({"command": "bringup", "verdict": "pass"}, [])
    return record


@pytest.mark.parametrize(
    ("name", "content"),
    [
        ("summary.json", "[]"),
        ("summary.json", '{"verdict": "pass", "nodes": 5, "checks": "x"}'),
        ("findings.json", '{"findings": [1, 2]}'),
        ("findings.json", "{not json"),
        ("findings.json", "\x80\x81"),
    ],
)
def test_a_malformed_run_record_given_to_report_is_a_usage_error(
    name: str, content: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    record = _finished_run(tmp_path)
    (record.path / name).write_bytes(content.encode("latin-1"))
    _exit_2_one_line(["report", str(record.path)], capsys, str(record.path))


def test_a_full_disk_under_report_is_a_usage_error_and_keeps_the_old_report(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    record = _finished_run(tmp_path)
    before = (record.path / "report.html").read_bytes()

    def full(fd: int, data: bytes) -> int:
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(os, "write", full)
    _exit_2_one_line(["report", str(record.path)], capsys, "No space left on device")
    monkeypatch.undo()
    assert (record.path / "report.html").read_bytes() == before
    assert not [p for p in record.path.iterdir() if p.name.endswith(".tmp")]
