"""The watcher as a service: its state survives a restart (each cycle reads the state
directory anew), a corrupt state file starts it afresh with the file kept aside, the event log
is JSON lines bounded by rotation, and the node_exporter textfile parses with
prometheus_client's own parser and carries the per-node, per-rail gauges."""

from __future__ import annotations

import json
import stat
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from cluster_tool.slurm import parse_squeue_running
from cluster_tool.spec import load_spec
from cluster_tool.spec.models import Cluster, Watch
from cluster_tool.watch.metrics import METRICS
from cluster_tool.watch.service import TEXTFILE, watch_once
from cluster_tool.watch.state import EVENTS_FILE, STATE_FILE, EventLog
from tests.conftest import REPO
from tests.unit.watch.fakes import (
    BOOT_LOG,
    CapturedSources,
    NodeReading,
    WatchSlurm,
    admin,
    flapping,
    port_counters,
)

NODES = ["gpu001", "gpu002", "gpu003", "gpu004"]


@pytest.fixture(scope="module")
def lab() -> Cluster:
    return load_spec(REPO / "examples" / "lab.yml")


def sources(logs: dict[str, str] | None = None, words: int = 0) -> CapturedSources:
    return CapturedSources(
        {
            n: NodeReading(
                kernel_log=(logs or {}).get(n, BOOT_LOG),
                counters=port_counters({"mlx5_0": words, "mlx5_3": 2 * words}),
            )
            for n in NODES
        }
    )


def fake_slurm() -> WatchSlurm:
    fake = WatchSlurm(NODES)
    fake.running = {"101": ("gpu[001-004]", "", "watch-requeue")}
    return fake


def test_state_survives_a_restart(lab: Cluster, tmp_path: Path) -> None:
    """Each call reads the state directory as a new process would: the baseline of the first
    call makes the flap of the second visible, and the requeue of the second is not repeated
    by the third."""
    fake, watch = fake_slurm(), Watch(policy="requeue", checkpoint_grace_s=0)
    flap = {"gpu002": BOOT_LOG + flapping(3)}
    first = watch_once(lab, sources(), admin(fake), watch, tmp_path, now=1000.0)
    assert first.actions == []
    second = watch_once(lab, sources(flap), admin(fake), watch, tmp_path, now=1060.0)
    assert [(a.kind, a.node, a.job_id) for a in second.actions] == [
        ("drain", "gpu002", None),
        ("requeue", "gpu002", "101"),
    ]
    # A restart forgets nothing: the link flaps on, the finding is the one first seen in the
    # second cycle, the node is not drained again, the job is not requeued again.
    more = {"gpu002": flap["gpu002"] + flapping(3, start=2000.0)}
    third = watch_once(lab, sources(more), admin(fake), watch, tmp_path, now=1120.0)
    assert third.actions == [] and fake.requeued == ["101"]
    assert third.first_seen["link.flap|gpu002|mlx5_0"] == 1060.0
    state = tmp_path / STATE_FILE
    assert stat.S_IMODE(state.stat().st_mode) == 0o600
    assert json.loads(state.read_text())["requeued"] == [["101", "link.flap"]]


def test_without_the_state_the_second_cycle_is_a_new_baseline(lab: Cluster, tmp_path: Path) -> None:
    """What the restart test relies on: with the state gone, the same flap is not seen."""
    fake, watch = fake_slurm(), Watch(policy="requeue", checkpoint_grace_s=0)
    watch_once(lab, sources(), admin(fake), watch, tmp_path / "a", now=1000.0)
    flap = {"gpu002": BOOT_LOG + flapping(3)}
    second = watch_once(lab, sources(flap), admin(fake), watch, tmp_path / "b", now=1060.0)
    assert second.actions == []


def test_a_corrupt_state_file_starts_afresh_and_is_kept_aside(lab: Cluster, tmp_path: Path) -> None:
    (tmp_path / STATE_FILE).write_text('{"version": 1, "nodes": {"gpu001": ', encoding="utf-8")
    fake = fake_slurm()
    result = watch_once(lab, sources(), admin(fake), Watch(), tmp_path, now=1000.0)
    reset = [f for f in result.findings if f.check == "watch.state-reset"]
    assert len(reset) == 1 and reset[0].severity == "warning"
    kept = list(tmp_path.glob(f"{STATE_FILE}.corrupt-*"))
    assert len(kept) == 1 and kept[0].read_text().startswith('{"version": 1')
    assert json.loads((tmp_path / STATE_FILE).read_text())["cycles"] == 1
    events = [json.loads(line) for line in (tmp_path / EVENTS_FILE).read_text().splitlines()]
    assert events[0]["event"] == "state-reset"
    assert result.exit_code == 0  # a warning: the cycle itself ran


def test_the_event_log_is_json_lines_and_rotates(tmp_path: Path) -> None:
    log = EventLog(tmp_path, max_bytes=400)
    for i in range(20):
        log.append([{"at": float(i), "event": "finding", "check": "link.flap"}])
    lines = log.path.read_text().splitlines()
    older = (tmp_path / f"{EVENTS_FILE}.1").read_text().splitlines()
    assert log.path.stat().st_size <= 400 and len(lines) + len(older) < 20
    assert [json.loads(x)["at"] for x in lines][-1] == 19.0
    assert stat.S_IMODE(log.path.stat().st_mode) == 0o600


def test_the_textfile_parses_and_carries_per_node_per_rail_gauges(
    lab: Cluster, tmp_path: Path
) -> None:
    fake, watch = fake_slurm(), Watch(policy="drain")
    textfile = tmp_path / "textfile" / TEXTFILE
    textfile.parent.mkdir()
    watch_once(lab, sources(words=0), admin(fake), watch, tmp_path, now=1000.0, textfile=textfile)
    flap = {"gpu002": BOOT_LOG + flapping(3)}
    # 60 s later mlx5_0 sent 1.5e9 words (6 GB: 100 MB/s), mlx5_3 twice that.
    watch_once(
        lab, sources(flap, 1_500_000_000), admin(fake), watch, tmp_path, now=1060.0,
        textfile=textfile,
    )  # fmt: skip
    families = {f.name: f for f in text_string_to_metric_families(textfile.read_text())}
    assert set(families) <= set(METRICS)
    rates = {
        (s.labels["node"], s.labels["hca"], s.labels["rail"], s.labels["counter"]): s.value
        for s in families["cluster_tool_watch_port_counter_rate"].samples
    }
    assert rates[("gpu003", "mlx5_0", "0", "PortXmitData")] == pytest.approx(1e8)
    assert rates[("gpu003", "mlx5_3", "1", "PortXmitData")] == pytest.approx(2e8)
    assert {n for n, *_ in rates} == set(NODES)
    findings = {
        (s.labels["node"], s.labels["check"], s.labels["severity"]): s.value
        for s in families["cluster_tool_watch_findings"].samples
    }
    assert findings[("gpu002", "link.flap", "error")] == 1
    drained = {
        s.labels["node"]: s.value for s in families["cluster_tool_watch_node_drained"].samples
    }
    assert drained == {"gpu001": 0, "gpu002": 1, "gpu003": 0, "gpu004": 0}
    last = families["cluster_tool_watch_last_cycle_timestamp_seconds"].samples
    assert [s.value for s in last] == [1060.0]
    assert stat.S_IMODE(textfile.stat().st_mode) == 0o644


def test_squeue_running_lines_keep_a_bar_in_the_comment() -> None:
    text = "101|gpu[001-002]|(null)|ckpt|watch-requeue\n102|gpu004|h100&ib|(null)\n"
    jobs = parse_squeue_running(text)
    assert [(j.job_id, j.nodes, j.features, j.comment) for j in jobs] == [
        ("101", ("gpu001", "gpu002"), "", "ckpt|watch-requeue"),
        ("102", ("gpu004",), "h100&ib", ""),
    ]


def test_requeue_runs_scontrol_requeue() -> None:
    fake = fake_slurm()
    admin(fake).requeue("101")
    assert fake.calls[-1] == ["scontrol", "requeue", "101"]


def test_the_port_counter_probe_command_runs_with_or_without_rdma_devices() -> None:
    # Its readings are cases in tests/fixtures/probes/port-counters/.
    import subprocess

    from cluster_tool.probes.signals import PortCounters

    # The probe's own command runs in sh, succeeds with or without RDMA devices, and what it
    # prints is what the parser reads.
    done = subprocess.run(["sh", "-c", PortCounters().command()], capture_output=True, text=True)
    assert done.returncode == 0
    PortCounters().process(done.stdout.split("\n"))


def test_a_kernel_log_longer_than_the_state_keeps_shows_no_old_line_as_new(
    lab: Cluster, tmp_path: Path
) -> None:
    """5,100 Xid 13 lines (the line format of the real HGX capture dmesg_xid79_sxid20034_hgx.txt)
    read twice across a restart: nothing new the second time; one Xid 79 after them is."""
    xid = "[{t:14.6f}] NVRM: Xid (PCI:0000:1b:00): {code}, pid=4242, name=python, Graphics\n"
    long_log = BOOT_LOG + "".join(xid.format(t=100.0 + i, code=13) for i in range(5100))
    fake, watch = fake_slurm(), Watch()
    for at in (1000.0, 1060.0):
        result = watch_once(
            lab, sources({"gpu001": long_log}), admin(fake), watch, tmp_path, now=at
        )
        assert [f for f in result.findings if f.check == "gpu.xid"] == []
    later = long_log + xid.format(t=9000.0, code=79)
    result = watch_once(lab, sources({"gpu001": later}), admin(fake), watch, tmp_path, now=1120.0)
    found = [(f.node, f.component, f.severity) for f in result.findings if f.check == "gpu.xid"]
    assert found == [("gpu001", "GPU0", "error")]


def test_a_comment_spanning_lines_cannot_forge_another_running_job() -> None:
    # Any user sets a job's comment; a newline in it must not read as a line of its own.
    fake = fake_slurm()
    fake.running = {"101": ("gpu001", "", "mine\n999|gpu002|(null)|watch-requeue")}
    jobs = admin(fake).running_jobs()
    assert [(j.job_id, j.nodes) for j in jobs] == [("101", ("gpu001",))]
    assert jobs[0].comment == "mine\n999|gpu002|(null)|watch-requeue"
