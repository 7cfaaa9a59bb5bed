"""What the watcher remembers between cycles, in its state directory: the last port counters
of every node and of the fabric, the kernel-log lines already seen, the findings open and when
each was first seen, the jobs it requeued and the straggler streaks; and its event log.

One JSON file, written whole and atomically (0600) at the end of each cycle, so a watcher
killed mid-cycle starts again from the last complete one. Everything in it is bounded: a node's
seen lines, the requeued jobs and the open findings keep only the newest.
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from cluster_tool.errors import UsageError
from cluster_tool.fileio import atomic_write, private_dir

__all__ = [
    "EVENTS_FILE",
    "STATE_FILE",
    "EventLog",
    "NodeMemory",
    "WatchState",
    "load_state",
    "save_state",
]

STATE_FILE = "state.json"
EVENTS_FILE = "events.jsonl"
STATE_VERSION = 1

SEEN_LINES_MAX = 5000  # kernel-log fingerprints kept per node
REQUEUED_MAX = 2000  # (job, check) pairs kept
OPEN_MAX = 20000  # open findings kept
EVENTS_MAX_BYTES = 8 * 1024 * 1024  # the event log rotates past this (one old file kept)


@dataclass
class NodeMemory:
    """One node as the last cycle left it: its HCA port counters (per device, per counter) and
    when they were read, the fingerprints of the kernel-log lines already judged, and its boot
    as Slurm saw it."""

    counters_at: float | None = None
    counters: dict[str, dict[str, int]] = field(default_factory=dict)
    seen_lines: list[str] = field(default_factory=list)
    log_read: bool = False  # the first read of a node's log is its baseline, not judged
    # Slurm's view at the last cycle: the node's BootTime, and whether a reboot of Slurm's
    # (`scontrol reboot`) was requested or under way.
    boot_time: str | None = None
    slurm_reboot: bool = False

    def to_json(self) -> dict[str, Any]:
        return {
            "counters_at": self.counters_at,
            "counters": self.counters,
            "seen_lines": self.seen_lines[-SEEN_LINES_MAX:],
            "log_read": self.log_read,
            "boot_time": self.boot_time,
            "slurm_reboot": self.slurm_reboot,
        }

    @classmethod
    def from_json(cls, data: Any) -> NodeMemory:
        at = data.get("counters_at")
        return cls(
            counters_at=None if at is None else float(at),
            counters={
                str(hca): {str(k): int(v) for k, v in values.items()}
                for hca, values in data.get("counters", {}).items()
            },
            seen_lines=[str(s) for s in data.get("seen_lines", [])][-SEEN_LINES_MAX:],
            log_read=bool(data.get("log_read", False)),
            boot_time=None if data.get("boot_time") is None else str(data["boot_time"]),
            slurm_reboot=bool(data.get("slurm_reboot", False)),
        )


@dataclass
class WatchState:
    """Everything the watcher carries from one cycle to the next."""

    nodes: dict[str, NodeMemory] = field(default_factory=dict)
    fabric_counters: dict[str, Any] | None = None  # checks.counters.CounterSnapshot.to_json()
    # "check|node|component" -> the finding as JSON plus first_seen / last_seen.
    open: dict[str, dict[str, Any]] = field(default_factory=dict)
    requeued: list[tuple[str, str]] = field(default_factory=list)  # (job id, check)
    # Jobs requeued and not yet released from Slurm's begin-time hold: job id -> when.
    held: dict[str, float] = field(default_factory=dict)
    # The last NCCL probe of each node per rail: node -> rail -> [busbw GB/s, baseline or None].
    probe_busbw: dict[str, dict[str, list[float | None]]] = field(default_factory=dict)
    stragglers: dict[str, dict[str, int]] = field(default_factory=dict)  # job -> node -> streak
    # Jobs sent the checkpoint signal and not yet requeued: job id -> {at, check, node, before}
    # (`before`: the iteration of its newest complete checkpoint when signalled, or None).
    signalled: dict[str, dict[str, Any]] = field(default_factory=dict)
    cycles: int = 0
    last_cycle_at: float | None = None

    def node(self, name: str) -> NodeMemory:
        return self.nodes.setdefault(name, NodeMemory())

    def to_json(self) -> dict[str, Any]:
        newest_open = sorted(self.open.items(), key=lambda kv: kv[1].get("last_seen", 0))
        return {
            "version": STATE_VERSION,
            "cycles": self.cycles,
            "last_cycle_at": self.last_cycle_at,
            "nodes": {n: m.to_json() for n, m in sorted(self.nodes.items())},
            "fabric_counters": self.fabric_counters,
            "open": dict(newest_open[-OPEN_MAX:]),
            "requeued": [list(p) for p in self.requeued[-REQUEUED_MAX:]],
            "probe_busbw": self.probe_busbw,
            "held": dict(sorted(self.held.items(), key=lambda kv: kv[1])[-REQUEUED_MAX:]),
            "stragglers": self.stragglers,
            "signalled": self.signalled,
        }

    @classmethod
    def from_json(cls, data: Any) -> WatchState:
        """The state a cycle wrote; ValueError naming what is wrong with it."""
        try:
            if data.get("version") != STATE_VERSION:
                raise ValueError(f"version {data.get('version')!r}, expected {STATE_VERSION}")
            at = data.get("last_cycle_at")
            return cls(
                nodes={str(n): NodeMemory.from_json(m) for n, m in data["nodes"].items()},
                fabric_counters=data.get("fabric_counters"),
                open={str(k): dict(v) for k, v in data.get("open", {}).items()},
                requeued=[(str(j), str(c)) for j, c in data.get("requeued", [])],
                held={str(j): float(t) for j, t in data.get("held", {}).items()},
                probe_busbw={
                    str(node): {
                        str(rail): [None if v is None else float(v) for v in pair][:2]
                        for rail, pair in rails.items()
                    }
                    for node, rails in data.get("probe_busbw", {}).items()
                },
                stragglers={
                    str(job): {str(n): int(s) for n, s in nodes.items()}
                    for job, nodes in data.get("stragglers", {}).items()
                },
                signalled={
                    str(job): {
                        "at": float(v["at"]),
                        "check": str(v["check"]),
                        "node": str(v["node"]),
                        "before": None if v.get("before") is None else int(v["before"]),
                    }
                    for job, v in data.get("signalled", {}).items()
                },
                cycles=int(data.get("cycles", 0)),
                last_cycle_at=None if at is None else float(at),
            )
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            raise ValueError(f"not a watch state: {exc}") from None


@dataclass(frozen=True)
class Loaded:
    """The state read from the state directory, and why it was started afresh (if it was)."""

    state: WatchState
    reset_because: str | None = None
    kept_as: Path | None = None


def load_state(state_dir: Path) -> Loaded:
    """The state the last cycle wrote; a fresh one when there is none. A state file that cannot
    be read (truncated, edited, another version) is moved aside as `state.json.corrupt-<time>`
    and the watcher starts afresh: what it loses is the last counters (the next cycle reads a
    new baseline) and its memory of requeued jobs; its drains are in Slurm, named as its own."""
    path = state_dir / STATE_FILE
    if not path.exists():
        return Loaded(WatchState())
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        return Loaded(WatchState.from_json(data))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError, ValueError) as exc:
        aside = path.with_name(f"{STATE_FILE}.corrupt-{int(time.time())}")
        try:
            os.replace(path, aside)
        except OSError:
            aside = path
        why = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        return Loaded(WatchState(), reset_because=why, kept_as=aside)


def save_state(state_dir: Path, state: WatchState) -> Path:
    """Write the state whole, atomically, readable by its owner only."""
    private_dir(state_dir)
    return atomic_write(state_dir / STATE_FILE, json.dumps(state.to_json(), sort_keys=True))


@dataclass
class EventLog:
    """The watcher's event log: one JSON object per line, appended, in the state directory;
    past `max_bytes` the file becomes `events.jsonl.1` (replacing the one before) and a new
    one starts."""

    state_dir: Path
    max_bytes: int = EVENTS_MAX_BYTES

    @property
    def path(self) -> Path:
        return self.state_dir / EVENTS_FILE

    def append(self, events: list[dict[str, Any]]) -> None:
        if not events:
            return
        private_dir(self.state_dir)
        text = "".join(json.dumps(e, sort_keys=True) + "\n" for e in events)
        try:
            if self.path.exists() and self.path.stat().st_size + len(text) > self.max_bytes:
                os.replace(self.path, self.path.with_name(EVENTS_FILE + ".1"))
            fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_NOFOLLOW, 0o600)
            with os.fdopen(fd, "a", encoding="utf-8") as out:
                out.write(text)
        except OSError as exc:
            raise UsageError(f"{self.path}: cannot write: {exc.strerror or exc}") from None
