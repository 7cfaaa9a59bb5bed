"""A few bytes of input cannot take the controller down: every bound is a one-line error and
exit 2 within a second and a few MB (measured here, not assumed)."""

from __future__ import annotations

import os
import time
import tracemalloc
from collections.abc import Callable
from pathlib import Path

import pytest

from cluster_tool.cli import main
from tests.conftest import REPO

LAB = (REPO / "examples" / "lab.yml").read_text(encoding="utf-8")

# The classic "billion laughs": 9 levels of 9 aliases, 9^9 strings from 370 bytes.
ALIAS_BOMB = "a: &a [lol]\n" + "".join(
    f"{chr(ord('b') + i)}: &{chr(ord('b') + i)} [{', '.join(['*' + chr(ord('a') + i)] * 9)}]\n"
    for i in range(8)
)


@pytest.fixture(autouse=True, scope="module")
def _imported() -> None:
    # Time the refusal, not the first import of pydantic and the models (tracemalloc slows it).
    main(["spec", "check", str(REPO / "examples" / "lab.yml"), "--json"])


def _bounded(call: Callable[[], int]) -> tuple[int, float, int]:
    """Exit code, CPU seconds and peak MB of one CLI call: timed on its own, then run again
    under tracemalloc (which slows Python several times) for the memory. CPU time, not wall
    time: the bound is about work an input can ask for (an alias bomb's minutes), and a shared
    machine's load stretches wall time without adding work."""
    started = time.process_time()
    code = call()
    seconds = time.process_time() - started
    tracemalloc.start()
    try:
        call()
    finally:
        _, peak = tracemalloc.get_traced_memory()
        tracemalloc.stop()
    return code, seconds, peak // (1024 * 1024)


def _one_line_exit_2(args: list[str], capsys: pytest.CaptureFixture[str], expect: str) -> None:
    code, seconds, peak_mb = _bounded(lambda: main(args))
    err = capsys.readouterr().err.split("\n", 1)[1]  # the same line twice: keep the second
    assert code == 2, err
    assert len(err.strip().splitlines()) == 1, err
    assert expect in err
    assert "internal error" not in err
    assert seconds < 1.0 and peak_mb < 20, (seconds, peak_mb)


def test_a_yaml_alias_bomb_is_refused_at_once(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert len(ALIAS_BOMB) < 400
    spec = tmp_path / "bomb.yml"
    spec.write_text(ALIAS_BOMB)
    _one_line_exit_2(["spec", "check", str(spec)], capsys, "aliases expand to more than")


def test_a_hostlist_of_two_million_nodes_is_refused_at_once(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert "hosts: gpu[001-004]" in LAB
    spec = tmp_path / "huge.yml"
    spec.write_text(LAB.replace("hosts: gpu[001-004]", "hosts: gpu[1-2000000]"))
    _one_line_exit_2(["spec", "check", str(spec)], capsys, "expands to 2000000 hosts")


def test_a_format_width_of_forty_million_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert "{number:03d}" in LAB
    spec = tmp_path / "wide.yml"
    spec.write_text(LAB.replace("{number:03d}", "{number:040000000d}"))
    _one_line_exit_2(["spec", "check", str(spec)], capsys, "width 40000000 is over the limit")


def test_deep_nesting_is_a_spec_error_not_a_recursion_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    spec = tmp_path / "deep.yml"
    spec.write_text(LAB + "ansible_vars:\n  x: " + "[" * 5000 + "]" * 5000 + "\n")
    _one_line_exit_2(["spec", "check", str(spec)], capsys, "nested too deeply")


def test_an_input_over_the_size_cap_is_refused_before_it_is_read(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    spec = tmp_path / "big.yml"
    spec.write_text(LAB + "#" * 200_000 + "\n")
    monkeypatch.setenv("CLUSTER_TOOL_MAX_INPUT_BYTES", "100000")
    _one_line_exit_2(["spec", "check", str(spec)], capsys, "over the input limit of 100000")


def test_a_fifo_as_the_spec_is_refused_instead_of_blocking(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    fifo = tmp_path / "spec.fifo"
    os.mkfifo(fifo)
    _one_line_exit_2(["spec", "check", str(fifo)], capsys, "not a regular file")


def test_a_device_as_the_spec_is_refused(capsys: pytest.CaptureFixture[str]) -> None:
    _one_line_exit_2(["spec", "check", "/dev/zero"], capsys, "not a regular file")


def test_a_capture_over_the_size_cap_is_refused_before_it_is_read(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    # A 200 MB Xid log ended in MemoryError; the cap is checked on the file's size first.
    log = tmp_path / "dmesg.log"
    with log.open("wb") as handle:
        handle.truncate(3_000_000)
    monkeypatch.setenv("CLUSTER_TOOL_MAX_INPUT_BYTES", "1000000")
    _one_line_exit_2(["parse", "xid", str(log)], capsys, "3000000 bytes, over the input limit")


def test_a_fifo_as_a_capture_is_refused_instead_of_blocking(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    fifo = tmp_path / "dmesg.fifo"
    os.mkfifo(fifo)
    _one_line_exit_2(["parse", "xid", str(fifo)], capsys, "not a regular file")
