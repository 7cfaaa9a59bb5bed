"""Nodes judged against their own history: a SQLite store beside the run records
(`<runs>/history.sqlite`) of every validation's per-node measurements, keyed by hardware identity
(the GPU serials and HCA GUIDs: a swapped board is a new identity, the node name is a label), and
`history.regression` when a node is significantly worse than its own baseline.

What is recorded, when the run collected it: busbw per gate job step (rung, collective, partner),
per HCA port the raw and effective BER and mlxlink's counters as rates per hour, per GPU the
volatile ECC counts, the remapped rows and the temperature at the health probe (before the
gate's load: the probes run first). What is judged: the busbw of single-node and pair jobs (a job
of more nodes says nothing about one of them); the rest is the node's trend.
"""

from __future__ import annotations

import contextlib
import hashlib
import math
import os
import re
import sqlite3
import statistics
from collections import defaultdict
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from cluster_tool.errors import ParseError, UsageError
from cluster_tool.findings import Finding
from cluster_tool.spec.thresholds import HistoryThresholds

__all__ = [
    "SCHEMA_VERSION",
    "STORE_NAME",
    "Baseline",
    "HistoryStore",
    "Identity",
    "Measurement",
    "judge",
    "judge_and_record",
    "measurements_from_run",
]

STORE_NAME = "history.sqlite"
SCHEMA_VERSION = 1
# Bounded: the oldest runs (and their measurements) go once the store holds this many. A run of
# 1,024 whole nodes takes about 8 MB (benchmarks/history.py), one switch's nodes a fraction.
MAX_RUNS = 500
# A trend shows at most this many runs of a node.
MAX_TREND_RUNS = 1000
_NODE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,62}$")

# Each entry takes the schema from the version before it to its own number (PRAGMA user_version).
MIGRATIONS: tuple[tuple[str, ...], ...] = (
    (
        """CREATE TABLE runs (
            id INTEGER PRIMARY KEY,
            run_id TEXT NOT NULL UNIQUE,
            command TEXT NOT NULL,
            at TEXT NOT NULL
        )""",
        """CREATE TABLE identities (
            id INTEGER PRIMARY KEY,
            fingerprint TEXT NOT NULL UNIQUE,
            gpus TEXT NOT NULL,
            hcas TEXT NOT NULL
        )""",
        # Which identity each node was in each run: the node name is a label on it.
        """CREATE TABLE node_runs (
            run INTEGER NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
            identity INTEGER NOT NULL REFERENCES identities(id),
            node TEXT NOT NULL,
            PRIMARY KEY (identity, run)
        ) WITHOUT ROWID""",
        "CREATE INDEX node_runs_by_node ON node_runs (node, run)",
        # Figures of jobs with partners (pair busbw), one row per job: who it ran with.
        """CREATE TABLE measurements (
            run INTEGER NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
            identity INTEGER NOT NULL REFERENCES identities(id),
            metric TEXT NOT NULL,
            key TEXT NOT NULL,
            partners TEXT NOT NULL,
            value REAL NOT NULL
        )""",
        "CREATE INDEX measurements_by_run ON measurements (run)",
        # Each figure's median in each run (a node's pair screens are one point per run): what
        # baselines and trends read, a few rows per node per run instead of every job.
        """CREATE TABLE series (
            identity INTEGER NOT NULL REFERENCES identities(id),
            metric TEXT NOT NULL,
            run INTEGER NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
            key TEXT NOT NULL,
            value REAL NOT NULL,
            PRIMARY KEY (identity, metric, run, key)
        ) WITHOUT ROWID""",
        "CREATE INDEX series_by_run ON series (run)",
    ),
)

# metric -> (unit, which way is worse). Only BUSBW is judged (see the module docstring).
METRICS: dict[str, tuple[str, str]] = {
    "busbw_gbs": ("GB/s", "lower"),
    "raw_ber": ("", "higher"),
    "effective_ber": ("", "higher"),
    "effective_errors_per_h": ("/h", "higher"),
    "link_down_per_h": ("/h", "higher"),
    "link_error_recovery_per_h": ("/h", "higher"),
    "ecc_correctable": ("", "higher"),
    "ecc_uncorrectable": ("", "higher"),
    "remapped_rows_correctable": ("", "higher"),
    "remapped_rows_uncorrectable": ("", "higher"),
    "gpu_temp_c": ("C", "higher"),
}
JUDGED = ("busbw_gbs",)


class HistoryError(UsageError):
    """The store cannot be read or written (corrupt, from a newer cluster-tool, not SQLite)."""


@dataclass(frozen=True)
class Identity:
    """A node's hardware as the run saw it: its GPU serials and HCA node GUIDs."""

    node: str
    gpus: tuple[str, ...]
    hcas: tuple[str, ...]

    @property
    def fingerprint(self) -> str:
        text = "gpus:" + ",".join(sorted(self.gpus)) + ";hcas:" + ",".join(sorted(self.hcas))
        return hashlib.sha256(text.encode()).hexdigest()[:16]


@dataclass(frozen=True)
class Measurement:
    """One figure of one node in one run. `partners` are the other nodes of the job it came
    from (busbw); `key` says which figure (`pairs all_reduce`, `GPU0`, `mlx5_0`)."""

    node: str
    metric: str
    key: str
    value: float
    partners: tuple[str, ...] = ()


@dataclass(frozen=True)
class Baseline:
    """A series' baseline: the median and MAD of its per-run medians over the last runs."""

    median: float
    mad: float
    runs: int


@dataclass
class TrendPoint:
    run_id: str
    at: str
    identity: str
    value: float


@dataclass
class TrendSeries:
    metric: str
    key: str
    points: list[TrendPoint] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        unit, worse = METRICS.get(self.metric, ("", "higher"))
        return {
            "metric": self.metric,
            "key": self.key,
            "unit": unit,
            "worse": worse,
            "points": [p.__dict__ for p in self.points],
        }


# --- the store ----------------------------------------------------------------------------


class HistoryStore:
    """The SQLite store. `HistoryStore.open(path)` creates and migrates it (WAL, 0600);
    `read_only=True` opens an existing store as it is and never writes."""

    def __init__(self, conn: sqlite3.Connection, path: Path) -> None:
        self.conn = conn
        self.path = path

    @classmethod
    def open(cls, path: Path, *, read_only: bool = False) -> HistoryStore:
        if read_only:
            if not path.is_file():
                raise HistoryError(f"{path}: no history store there (no validation recorded)")
            conn = _connect(f"file:{path}?mode=ro", uri=True, path=path)
            store = cls(conn, path)
            version = store._version()
            if version != SCHEMA_VERSION:
                conn.close()
                raise HistoryError(
                    f"{path}: history schema {version}, this cluster-tool reads {SCHEMA_VERSION}"
                )
            return store
        path.parent.mkdir(parents=True, exist_ok=True)
        if not path.exists():
            # Site data (serials, GUIDs, node names): only the owner reads it.
            os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW, 0o600))
        conn = _connect(str(path), uri=False, path=path)
        store = cls(conn, path)
        try:
            conn.execute("PRAGMA journal_mode=WAL")
            conn.execute("PRAGMA synchronous=NORMAL")
            store._migrate()
        except sqlite3.Error as exc:
            conn.close()
            raise HistoryError(f"{path}: not a history store: {exc}") from None
        except HistoryError:
            conn.close()
            raise
        return store

    def close(self) -> None:
        self.conn.close()

    def __enter__(self) -> HistoryStore:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()

    def _version(self) -> int:
        try:
            return int(self.conn.execute("PRAGMA user_version").fetchone()[0])
        except sqlite3.Error as exc:
            raise HistoryError(f"{self.path}: not a history store: {exc}") from None

    def _migrate(self) -> None:
        version = self._version()
        if version > SCHEMA_VERSION:
            raise HistoryError(
                f"{self.path}: history schema {version} is newer than this cluster-tool's "
                f"({SCHEMA_VERSION})"
            )
        for target in range(version + 1, SCHEMA_VERSION + 1):
            with self.conn:
                for statement in MIGRATIONS[target - 1]:
                    self.conn.execute(statement)
                self.conn.execute(f"PRAGMA user_version={target}")

    # --- writing --------------------------------------------------------------------------

    def add_run(
        self,
        run_id: str,
        command: str,
        identities: Iterable[Identity],
        measurements: Iterable[Measurement],
        at: str | None = None,
    ) -> int:
        """Record one run: which identity each node had and its measurements (those of a node
        with no identity are dropped: they could not be told apart from a swapped board)."""
        stamp = at or datetime.now(UTC).isoformat(timespec="seconds")
        with self.conn:
            # The same run recorded again (a re-run of its closing step) replaces itself.
            self.conn.execute("DELETE FROM runs WHERE run_id = ?", (run_id,))
            cur = self.conn.execute(
                "INSERT INTO runs (run_id, command, at) VALUES (?, ?, ?)", (run_id, command, stamp)
            )
            run = int(cur.lastrowid or 0)
            ids: dict[str, int] = {}
            for identity in identities:
                ids[identity.node] = self._identity_id(identity)
                self.conn.execute(
                    "INSERT OR REPLACE INTO node_runs (run, identity, node) VALUES (?, ?, ?)",
                    (run, ids[identity.node], identity.node),
                )
            kept = [m for m in measurements if m.node in ids and math.isfinite(m.value)]
            self.conn.executemany(
                "INSERT INTO measurements (run, identity, metric, key, partners, value) "
                "VALUES (?, ?, ?, ?, ?, ?)",
                (
                    (run, ids[m.node], m.metric, m.key, ",".join(m.partners), m.value)
                    for m in kept
                    if m.partners
                ),
            )
            per_run: dict[tuple[int, str, str], list[float]] = defaultdict(list)
            for m in kept:
                per_run[(ids[m.node], m.metric, m.key)].append(m.value)
            self.conn.executemany(
                "INSERT INTO series (identity, metric, run, key, value) VALUES (?, ?, ?, ?, ?)",
                (
                    (identity, metric, run, key, statistics.median(values))
                    for (identity, metric, key), values in per_run.items()
                ),
            )
            self._prune()
        return run

    def _identity_id(self, identity: Identity) -> int:
        row = self.conn.execute(
            "SELECT id FROM identities WHERE fingerprint = ?", (identity.fingerprint,)
        ).fetchone()
        if row:
            return int(row[0])
        cur = self.conn.execute(
            "INSERT INTO identities (fingerprint, gpus, hcas) VALUES (?, ?, ?)",
            (
                identity.fingerprint,
                ",".join(sorted(identity.gpus)),
                ",".join(sorted(identity.hcas)),
            ),
        )
        return int(cur.lastrowid or 0)

    def _prune(self) -> None:
        count = int(self.conn.execute("SELECT count(*) FROM runs").fetchone()[0])
        if count <= MAX_RUNS:
            return
        cutoff = self.conn.execute(
            "SELECT id FROM runs ORDER BY id DESC LIMIT 1 OFFSET ?", (MAX_RUNS - 1,)
        ).fetchone()[0]
        self.conn.execute("DELETE FROM measurements WHERE run < ?", (cutoff,))
        self.conn.execute("DELETE FROM series WHERE run < ?", (cutoff,))
        self.conn.execute("DELETE FROM node_runs WHERE run < ?", (cutoff,))
        self.conn.execute("DELETE FROM runs WHERE id < ?", (cutoff,))

    # --- reading --------------------------------------------------------------------------

    def baselines(
        self, fingerprints: Iterable[str], *, window: int, metrics: Sequence[str] = JUDGED
    ) -> dict[tuple[str, str, str], Baseline]:
        """(fingerprint, metric, key) -> the baseline over each identity's last `window` runs."""
        wanted = list(dict.fromkeys(fingerprints))
        found: dict[tuple[str, str, str], Baseline] = {}
        marks = ",".join("?" * len(metrics))
        for chunk in _chunks(wanted, 500):
            # Each identity's oldest run in its window, then its series from there on (the
            # primary key's range): a few rows per node per run, whatever the fleet's size.
            rows = self.conn.execute(
                f"""
                WITH ids AS (
                    SELECT id, fingerprint FROM identities
                    WHERE fingerprint IN ({",".join("?" * len(chunk))})
                ),
                since AS (
                    SELECT identity, min(run) AS first FROM (
                        SELECT nr.identity, nr.run, row_number() OVER (
                            PARTITION BY nr.identity ORDER BY nr.run DESC) AS k
                        FROM node_runs nr JOIN ids ON ids.id = nr.identity
                    ) WHERE k <= ? GROUP BY identity
                )
                SELECT ids.fingerprint, s.metric, s.key, s.value
                FROM since
                JOIN ids ON ids.id = since.identity
                JOIN series s ON s.identity = since.identity AND s.metric IN ({marks})
                    AND s.run >= since.first
                """,
                (*chunk, window, *metrics),
            )
            per_series: dict[tuple[str, str, str], list[float]] = defaultdict(list)
            for fingerprint, metric, key, value in rows:
                per_series[(fingerprint, metric, key)].append(value)
            for series, medians in per_series.items():
                middle = statistics.median(medians)
                mad = statistics.median([abs(v - middle) for v in medians])
                found[series] = Baseline(middle, mad, len(medians))
        return found

    def trend(self, node: str, limit: int = 50) -> list[TrendSeries]:
        """The node's series over its last `limit` runs, oldest first, whatever its identity."""
        rows = self.conn.execute(
            """
            WITH last AS (
                SELECT run, identity FROM node_runs WHERE node = ? ORDER BY run DESC LIMIT ?
            )
            SELECT s.metric, s.key, r.run_id, r.at, i.fingerprint, s.value
            FROM last
            JOIN series s ON s.identity = last.identity AND s.run = last.run
            JOIN runs r ON r.id = last.run
            JOIN identities i ON i.id = last.identity
            ORDER BY s.metric, s.key, last.run
            """,
            (node, limit),
        )
        grouped: dict[tuple[str, str], list[TrendPoint]] = defaultdict(list)
        for metric, key, run_id, at, fingerprint, value in rows:
            grouped[(metric, key)].append(TrendPoint(run_id, at, fingerprint, round(value, 6)))
        series = [TrendSeries(metric, key, points) for (metric, key), points in grouped.items()]
        return series

    def runs_of(self, node: str) -> int:
        return int(
            self.conn.execute("SELECT count(*) FROM node_runs WHERE node = ?", (node,)).fetchone()[
                0
            ]
        )


def _connect(target: str, *, uri: bool, path: Path) -> sqlite3.Connection:
    try:
        conn = sqlite3.connect(target, uri=uri, timeout=30.0)
        conn.execute("PRAGMA foreign_keys=ON")
    except sqlite3.Error as exc:
        raise HistoryError(f"{path}: cannot open the history store: {exc}") from None
    return conn


def _chunks(items: Sequence[str], size: int) -> Iterator[Sequence[str]]:
    for start in range(0, len(items), size):
        yield items[start : start + size]


def check_node_name(node: str) -> str:
    """A node name as the history command takes it; UsageError for anything else."""
    if not _NODE.match(node):
        shown = node if len(node) <= 40 else node[:40] + "…"
        raise UsageError(f"{shown!r}: not a node name")
    return node


# --- judging ------------------------------------------------------------------------------


def judge(
    current: Sequence[Measurement],
    identities: Mapping[str, Identity],
    baselines: Mapping[tuple[str, str, str], Baseline],
    thresholds: HistoryThresholds,
) -> list[Finding]:
    """`history.regression` for each node whose busbw this run is significantly below its own
    baseline (modified z-score past `mad_z` and at least `min_drop` below the median, after at
    least `min_runs` earlier runs). A drop in a job with partners is the node's own only when
    every partner was judged in a job without it and held up there: a slow node does not make
    its partners look slow, and a partner that cannot be judged (new hardware, no history)
    leaves the drop unexplained, so nobody is named for it."""
    values: dict[tuple[str, str, str], list[Measurement]] = defaultdict(list)
    for m in current:
        if m.metric in JUDGED and m.node in identities and len(m.partners) <= 1:
            values[(m.node, m.metric, m.key)].append(m)
    # node -> every series judged: (key, baseline, observed median, partners, dropped)
    judged: dict[str, list[tuple[str, Baseline, float, set[str], bool]]] = defaultdict(list)
    for (node, metric, key), items in values.items():
        base = baselines.get((identities[node].fingerprint, metric, key))
        if base is None or base.runs < thresholds.min_runs or base.median <= 0:
            continue
        observed = statistics.median(m.value for m in items)
        if _worse(observed, base, thresholds):
            partners = {p for m in items if _worse(m.value, base, thresholds) for p in m.partners}
            judged[node].append((key, base, observed, partners, True))
        else:
            partners = {p for m in items for p in m.partners}
            judged[node].append((key, base, observed, partners, False))

    def held_up_without(partner: str, node: str) -> bool:
        alone = [drop for *_, partners, drop in judged.get(partner, []) if node not in partners]
        return bool(alone) and not any(alone)

    dropped = {node: [item[:4] for item in items if item[4]] for node, items in judged.items()}
    findings: list[Finding] = []
    for node in sorted(dropped):
        own = [item for item in dropped[node] if all(held_up_without(p, node) for p in item[3])]
        if not own:
            continue
        key, base, observed, partners = max(own, key=lambda i: 1 - i[2] / i[1].median)
        share = observed / base.median
        more = f" (and {len(own) - 1} more)" if len(own) > 1 else ""
        with_whom = f" with {', '.join(sorted(partners))}" if partners else ""
        findings.append(
            Finding(
                check="history.regression",
                severity="warning",
                node=node,
                component=key,
                expected=f"busbw near its baseline {base.median:.1f} GB/s "
                f"(median of its last {base.runs} runs, MAD {base.mad:.2f})",
                observed=f"{observed:.1f} GB/s ({share:.2f}x)",
                message=f"{node}: {key}{with_whom} busbw {observed:.1f} GB/s is {share:.2f}x its "
                f"own baseline {base.median:.1f} GB/s over its last {base.runs} runs{more}",
            )
        )
    return findings


def _worse(value: float, base: Baseline, t: HistoryThresholds) -> bool:
    drop = base.median - value
    if drop < t.min_drop * base.median:
        return False
    if base.mad == 0:
        return True
    return 0.6745 * drop / base.mad > t.mad_z


# --- from a run record --------------------------------------------------------------------


def measurements_from_run(
    run_dir: Path, summary: Mapping[str, Any], nodes: Iterable[str]
) -> tuple[dict[str, Identity], list[Measurement]]:
    """Identities and measurements of `nodes` in a run record: busbw from the summary's gate
    rows, the rest from the last health capture under raw/ that answered for the node."""
    wanted = set(nodes)
    outputs = _last_outputs(run_dir / "raw", wanted)
    identities: dict[str, Identity] = {}
    found: list[Measurement] = []
    for node, probes in outputs.items():
        identity, measured = _node_measurements(node, probes)
        if identity is not None:
            identities[node] = identity
            found += measured
    for row in summary.get("busbw") or []:
        found += _busbw_rows(row, wanted)
    return identities, found


def _last_outputs(raw: Path, wanted: set[str]) -> dict[str, dict[str, str]]:
    from cluster_tool.remote.fanout import load_capture

    outputs: dict[str, dict[str, str]] = {}
    if not raw.is_dir():
        return outputs
    for folder in sorted(p for p in raw.iterdir() if (p / "manifest.json").is_file()):
        try:
            results = load_capture(folder, wanted)
        except UsageError:
            continue
        for name, result in results.items():
            texts = {p: o.stdout for p, o in result.outputs.items() if o.rc == 0}
            if "nvidia-smi-q" in texts or "ibstat" in texts:
                outputs[name] = texts
    return outputs


def _node_measurements(
    node: str, probes: Mapping[str, str]
) -> tuple[Identity | None, list[Measurement]]:
    from cluster_tool.parsers.ibstat import parse_ibstat
    from cluster_tool.parsers.mlxlink import parse_mlxlink
    from cluster_tool.parsers.nvidia_smi import parse_nvidia_smi_q

    found: list[Measurement] = []
    serials: list[str] = []
    guids: list[str] = []
    with contextlib.suppress(ParseError):
        report = parse_nvidia_smi_q(probes.get("nvidia-smi-q", ""))
        for index, gpu in enumerate(report.gpus):
            if gpu.serial:
                serials.append(gpu.serial)
            key = f"GPU{gpu.minor_number if gpu.minor_number is not None else index}"
            figures: dict[str, float | None] = {}
            if gpu.ecc_volatile is not None:
                figures["ecc_correctable"] = gpu.ecc_volatile.correctable
                figures["ecc_uncorrectable"] = gpu.ecc_volatile.uncorrectable
            if gpu.remapped_rows is not None:
                figures["remapped_rows_correctable"] = gpu.remapped_rows.correctable
                figures["remapped_rows_uncorrectable"] = gpu.remapped_rows.uncorrectable
            if gpu.temperatures is not None:
                figures["gpu_temp_c"] = gpu.temperatures.gpu_current_c
            found += [
                Measurement(node, m, key, float(v)) for m, v in figures.items() if v is not None
            ]
    with contextlib.suppress(ParseError):
        for ca in parse_ibstat(probes.get("ibstat", "")):
            if ca.node_guid:
                guids.append(ca.node_guid)
    with contextlib.suppress(ParseError):
        for port in parse_mlxlink(probes.get("mlxlink", "")) if "mlxlink" in probes else []:
            if not port.device:
                continue
            key = port.device if port.port in (None, 1) else f"{port.device} port {port.port}"
            figures = {"raw_ber": port.raw_ber, "effective_ber": port.effective_ber}
            hours = (port.time_since_clear_min or 0) / 60
            if hours > 0:
                for metric, count in (
                    ("effective_errors_per_h", port.effective_errors),
                    ("link_down_per_h", port.link_down),
                    ("link_error_recovery_per_h", port.link_error_recovery),
                ):
                    figures[metric] = None if count is None else count / hours
            found += [
                Measurement(node, m, key, float(v)) for m, v in figures.items() if v is not None
            ]
    if not serials and not guids:
        return None, []
    return Identity(node, tuple(serials), tuple(guids)), found


def _figures(node: str, key: str, figures: Mapping[str, float | None]) -> list[Measurement]:
    return [Measurement(node, m, key, float(v)) for m, v in figures.items() if v is not None]


def _busbw_rows(row: Mapping[str, Any], wanted: set[str]) -> list[Measurement]:
    """A gate row (`RecordingRunner.busbw`): the best busbw over the largest message sizes (the
    top quarter, as the gate judges it), for each of the job's nodes."""
    nodes = [str(n) for n in row.get("nodes") or []]
    points = [p for p in row.get("points") or [] if isinstance(p, list | tuple) and len(p) == 2]
    if not nodes or not points:
        return []
    biggest = max(float(size) for size, _ in points)
    peak = max(float(bw) for size, bw in points if float(size) * 4 >= biggest)
    label = str(row.get("label") or "")
    step = label.split(" ", 1)[1] if " " in label else label
    rung = str(row.get("rung") or "")
    key = step if step.startswith(rung) else f"{rung} {step}"
    return [
        Measurement(node, "busbw_gbs", key, peak, tuple(n for n in nodes if n != node))
        for node in nodes
        if node in wanted
    ]


def judge_and_record(
    run_dir: Path, summary: Mapping[str, Any], thresholds: HistoryThresholds
) -> list[Finding]:
    """The one call a validation makes once its summary is written and before its findings
    are: judge the run's nodes against their own history (`history.regression`), then add the
    run to the store beside the run records. A replayed run (`--from`) is neither. A store that
    cannot be used is a `history.store` warning: the validation's own verdict stands."""
    inputs = summary.get("inputs") or {}
    if inputs.get("replayed_from"):
        return []
    nodes = list(summary.get("nodes") or {})
    identities, current = measurements_from_run(run_dir, summary, nodes)
    path = run_dir.parent / STORE_NAME
    try:
        with HistoryStore.open(path) as store:
            baselines = store.baselines(
                (i.fingerprint for i in identities.values()), window=thresholds.runs
            )
            findings = judge(current, identities, baselines, thresholds)
            store.add_run(
                str(summary.get("run_id") or run_dir.name),
                str(summary.get("command") or "validate"),
                identities.values(),
                current,
            )
    except (HistoryError, sqlite3.Error) as exc:
        return [
            Finding(
                check="history.store",
                severity="warning",
                component=str(path),
                expected="the history store read and written",
                observed=str(exc),
                message=f"history store {path}: {exc}; this run was not judged against the "
                "nodes' own history nor recorded",
            )
        ]
    return findings
