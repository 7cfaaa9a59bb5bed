"""The history store: what a run record yields (identity and figures, from real captures), the
file it keeps (0600, WAL, schema version), bounded, and refusing what it cannot read."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

import cluster_tool.history as history
from cluster_tool.history import (
    SCHEMA_VERSION,
    STORE_NAME,
    HistoryError,
    HistoryStore,
    Identity,
    Measurement,
    measurements_from_run,
)
from cluster_tool.probes import ProbeOutput
from cluster_tool.remote.fanout import HostResult, save_capture
from tests.conftest import read_real_output
from tests.unit.history.runs import IBSTAT, SMI, gate_rows


def test_a_run_record_yields_the_node_identity_and_figures_of_the_real_captures(
    tmp_path: Path,
) -> None:
    run_dir = tmp_path / "runs" / "run0"
    probes = {
        "nvidia-smi-q": ProbeOutput(0, read_real_output(SMI)),
        "ibstat": ProbeOutput(0, read_real_output(IBSTAT)),
    }
    save_capture(run_dir / "raw" / "02-health", {"gpu001": HostResult("gpu001", probes)})
    rows = gate_rows({"gpu001": 1.0, "gpu002": 1.0}, tmp_path / "work")
    identities, found = measurements_from_run(run_dir, {"busbw": rows}, ["gpu001"])
    identity = identities["gpu001"]
    # Hand-read: 8 GPU serials, the first 1650124031592; 9 CAs, mlx5_0's GUID 0x58a2e10300a7820e.
    assert len(identity.gpus) == 8 and identity.gpus[0] == "1650124031592"
    assert len(identity.hcas) == 9 and "0x58a2e10300a7820e" in identity.hcas
    figures = {(m.metric, m.key): m.value for m in found}
    assert figures[("gpu_temp_c", "GPU0")] == 29
    assert figures[("gpu_temp_c", "GPU5")] == 32
    assert figures[("ecc_correctable", "GPU7")] == 0
    assert figures[("remapped_rows_uncorrectable", "GPU3")] == 0
    # The gate's figure: the best busbw over the top quarter of message sizes, as the gate
    # judges it: 480.16 (single node, 8 GiB out-of-place) and 469.21 (two nodes, 16 GiB).
    assert figures[("busbw_gbs", "single-nvls nvls-all_reduce")] == 480.16
    pair = next(m for m in found if m.key == "pairs all_reduce")
    assert (pair.value, pair.partners) == (469.21, ("gpu002",))


def test_a_node_whose_hardware_could_not_be_read_is_not_recorded(tmp_path: Path) -> None:
    run_dir = tmp_path / "runs" / "run0"
    broken = {
        "nvidia-smi-q": ProbeOutput(9, "", "NVIDIA-SMI has failed"),
        "ibstat": ProbeOutput(127, ""),
    }
    save_capture(run_dir / "raw" / "02-health", {"gpu001": HostResult("gpu001", broken)})
    rows = gate_rows({"gpu001": 1.0}, tmp_path / "work")
    identities, found = measurements_from_run(run_dir, {"busbw": rows}, ["gpu001"])
    assert identities == {}
    with HistoryStore.open(tmp_path / STORE_NAME) as store:
        store.add_run("run0", "validate-after", identities.values(), found)
        assert store.runs_of("gpu001") == 0


def ident(node: str) -> Identity:
    return Identity(node, (f"S-{node}",), (f"G-{node}",))


def test_the_store_is_private_in_wal_mode_at_its_schema_version(tmp_path: Path) -> None:
    path = tmp_path / STORE_NAME
    with HistoryStore.open(path) as store:
        store.add_run("run0", "validate-after", [ident("gpu001")], [])
        assert store.conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    assert path.stat().st_mode & 0o777 == 0o600
    conn = sqlite3.connect(path)
    assert conn.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION
    conn.close()
    # Opened again: migrated once, the run still there.
    with HistoryStore.open(path) as store:
        assert store.runs_of("gpu001") == 1


def test_the_store_keeps_the_last_runs_only(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(history, "MAX_RUNS", 3)
    with HistoryStore.open(tmp_path / STORE_NAME) as store:
        for i in range(5):
            store.add_run(
                f"run{i}",
                "validate-after",
                [ident("gpu001")],
                [Measurement("gpu001", "busbw_gbs", "pairs all_reduce", 400.0 + i, ("gpu002",))],
            )
        (series,) = store.trend("gpu001")
        assert [p.run_id for p in series.points] == ["run2", "run3", "run4"]
        for table in ("measurements", "series", "node_runs"):
            assert store.conn.execute(f"SELECT count(*) FROM {table}").fetchone()[0] == 3


def test_a_run_recorded_again_replaces_itself(tmp_path: Path) -> None:
    with HistoryStore.open(tmp_path / STORE_NAME) as store:
        for value in (400.0, 410.0):
            store.add_run(
                "run0",
                "validate-after",
                [ident("gpu001")],
                [Measurement("gpu001", "busbw_gbs", "pairs all_reduce", value)],
            )
        (series,) = store.trend("gpu001")
        assert [p.value for p in series.points] == [410.0]


def test_a_store_from_a_newer_cluster_tool_is_refused_in_one_line(tmp_path: Path) -> None:
    path = tmp_path / STORE_NAME
    HistoryStore.open(path).close()
    conn = sqlite3.connect(path)
    conn.execute(f"PRAGMA user_version={SCHEMA_VERSION + 1}")
    conn.commit()
    conn.close()
    for read_only in (False, True):
        with pytest.raises(HistoryError) as caught:
            HistoryStore.open(path, read_only=read_only)
        assert "\n" not in str(caught.value) and f"schema {SCHEMA_VERSION + 1}" in str(caught.value)
