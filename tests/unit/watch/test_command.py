"""`cluster-tool watch` on the command line: a bad policy is one line and exit 2; `--once --json`
prints the cycle's findings and actions and writes the state dir and textfile; the loop ends
on SIGTERM with exit 130. SSH and Slurm are replaced at their doors (FanoutSources, connect)."""

from __future__ import annotations

import json
import os
import signal
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from cluster_tool.cli import main
from cluster_tool.spec.models import Watch
from cluster_tool.watch.service import TEXTFILE, watch_forever
from tests.conftest import REPO
from tests.unit.watch.fakes import (
    BOOT_LOG,
    CapturedSources,
    NodeReading,
    WatchSlurm,
    admin,
    flapping,
)

LAB = str(REPO / "examples" / "lab.yml")
NODES = ["gpu001", "gpu002", "gpu003", "gpu004"]


@pytest.fixture
def doors(monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[CapturedSources, WatchSlurm]]:
    sources = CapturedSources({n: NodeReading() for n in NODES})
    fake = WatchSlurm(NODES)
    fake.running = {"101": ("gpu[001-004]", "", "watch-requeue")}
    monkeypatch.setattr("cluster_tool.watch.signals.FanoutSources", lambda *a, **k: sources)
    monkeypatch.setattr("cluster_tool.slurm.connect", lambda *a, **k: admin(fake))
    before = signal.getsignal(signal.SIGTERM)
    yield sources, fake
    signal.signal(signal.SIGTERM, before)


def test_a_bad_policy_is_one_line_and_exit_2(
    doors: object, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    rc = main(
        ["watch", "--spec", LAB, "--once", "--policy", "cordon", "--state-dir", str(tmp_path)]
    )
    err = capsys.readouterr().err
    assert rc == 2 and err.count("\n") == 1 and "--policy" in err
    assert list(tmp_path.iterdir()) == []


def test_once_json_prints_findings_and_actions_and_writes_the_state_dir(
    doors: tuple[CapturedSources, WatchSlurm], capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    sources, fake = doors
    argv = ["watch", "--spec", LAB, "--once", "--json", "--policy", "requeue"]
    argv += ["--state-dir", str(tmp_path)]
    assert main(argv) == 0
    capsys.readouterr()
    sources.readings["gpu002"].kernel_log = BOOT_LOG + flapping(3)
    assert main(argv) == 1
    out = json.loads(capsys.readouterr().out)
    assert out["policy"] == "requeue" and out["status"] == "fail"
    assert [(a["action"], a["node"], a["job_id"]) for a in out["actions"]] == [
        ("drain", "gpu002", None),
        # The spec's default checkpoint grace: the job is told first, requeued later.
        ("signal", "gpu002", "101"),
    ]
    assert fake.signalled == [("101", "USR1")] and fake.requeued == []
    flap = [f for f in out["findings"] if f["check"] == "link.flap"]
    assert flap[0]["node"] == "gpu002" and flap[0]["first_seen"] is not None
    assert fake.drained["gpu002"].startswith("cluster-tool watch: link.flap mlx5_0")
    assert {p.name for p in tmp_path.iterdir()} >= {"state.json", "events.jsonl", TEXTFILE}


def test_the_loop_stops_on_sigterm_with_130(
    doors: tuple[CapturedSources, WatchSlurm], tmp_path: Path
) -> None:
    sources, _ = doors
    asked = sources.asked

    class Stopping(list[list[str]]):
        def append(self, nodes: list[str]) -> None:
            super().append(nodes)
            os.kill(os.getpid(), signal.SIGTERM)  # systemd stops the service mid-cycle

    sources.asked = Stopping(asked)
    assert main(["watch", "--spec", LAB, "--state-dir", str(tmp_path)]) == 130
    assert len(sources.asked) == 1  # stopped in its first cycle, not run on


def test_the_loop_runs_a_cycle_each_interval_until_stopped() -> None:
    stop, seen = threading.Event(), []

    def cycle() -> object:
        seen.append(1)
        if len(seen) == 3:
            stop.set()
        return object()

    assert watch_forever(cycle, 0, stop) == 3  # type: ignore[arg-type]
    assert Watch().interval_s == 60
