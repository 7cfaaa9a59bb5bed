"""The watcher as a service: one cycle with its state read and written back (`watch_once`,
what `cluster-tool watch --once` and cron run), and the loop a systemd unit runs until it is
stopped (`watch_forever`)."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from pathlib import Path

from cluster_tool.findings import Finding
from cluster_tool.slurm import SlurmAdmin
from cluster_tool.spec.models import Cluster, Watch
from cluster_tool.watch.cycle import CycleResult, run_cycle
from cluster_tool.watch.metrics import render_textfile, write_textfile
from cluster_tool.watch.probes import PROBE_STORE, Prober, Probing
from cluster_tool.watch.reports import FileJobReports, JobReports
from cluster_tool.watch.signals import Sources
from cluster_tool.watch.state import EventLog, load_state, save_state

__all__ = ["TEXTFILE", "watch_forever", "watch_once"]

TEXTFILE = "cluster_tool_watch.prom"


def watch_once(
    cluster: Cluster,
    sources: Sources,
    slurm: SlurmAdmin,
    policy: Watch,
    state_dir: Path,
    *,
    textfile: Path | None = None,
    now: float | None = None,
    prober: Prober | None = None,
    reports: JobReports | None = None,
) -> CycleResult:
    """Read the state, run one cycle, write the state, the event log and the textfile. Jobs'
    checkpoint reports are read from `reports`, by default the spec's `training.reports_dir`
    (through the shared filesystem). With a `prober`, the cycle runs the NCCL probes when the
    spec allows it, their baselines kept in the state directory (`probe-history.sqlite`)."""
    at = time.time() if now is None else now
    loaded = load_state(state_dir)
    probing = None if prober is None else Probing(prober, state_dir / PROBE_STORE)
    if reports is None:
        folder = cluster.training.reports(cluster.storage)
        reports = None if folder is None else FileJobReports(Path(folder))
    result = run_cycle(cluster, loaded.state, sources, slurm, policy, at, probing, reports)
    if loaded.reset_because is not None:
        reset = Finding(
            check="watch.state-reset",
            severity="warning",
            expected="the watcher's state file readable",
            observed=loaded.reset_because,
            message=f"watch state unreadable ({loaded.reset_because}); kept as "
            f"{loaded.kept_as} and started afresh: port counters and kernel logs read a new "
            "baseline this cycle",
        )
        result.findings.append(reset)
        result.events.insert(0, {"at": at, "event": "state-reset", **reset.model_dump()})
    save_state(state_dir, loaded.state)
    EventLog(state_dir).append(result.events)
    text = render_textfile(
        cluster,
        at=at,
        rates=result.rates,
        findings=[(f.node, f.check, f.severity) for f in result.findings],
        drained=result.drained,
        busbw=result.busbw,
        graces={a.job_id: a.grace_s for a in result.actions if a.job_id and a.grace_s is not None},
    )
    write_textfile(textfile or state_dir / TEXTFILE, text)
    return result


def watch_forever(
    cycle: Callable[[], CycleResult],
    interval_s: float,
    stop: threading.Event,
    on_cycle: Callable[[CycleResult], None] | None = None,
) -> int:
    """Run `cycle` every `interval_s` seconds (from the start of one to the start of the
    next) until `stop` is set; returns the number of cycles run."""
    runs = 0
    while not stop.is_set():
        started = time.monotonic()
        result = cycle()
        runs += 1
        if on_cycle is not None:
            on_cycle(result)
        stop.wait(max(0.0, interval_s - (time.monotonic() - started)))
    return runs
