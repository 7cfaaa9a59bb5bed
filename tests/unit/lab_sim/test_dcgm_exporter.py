"""The lab's dcgm-exporter package (issue 22): its binary, run as the dcgm_exporter role starts
it (`--collectors FILE --address :PORT`), serves the fields of that file for the node's eight
GPUs from the lab's hardware model, so a fault injected in the lab shows in Prometheus: an Xid
as DCGM_FI_DEV_XID_ERRORS (the last Xid's number), an ECC fault in the DBE total, slow-node in
the SM clock. Read back with prometheus_client's own parser."""

from __future__ import annotations

import json
import shutil
import socket
import subprocess
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families

from cluster_lab.faults import inject
from cluster_lab.sim.packages import DEFAULT_VERSIONS, build_package, packages_for
from tests.conftest import FIXTURES, REPO

pytestmark = pytest.mark.skipif(shutil.which("dpkg-deb") is None, reason="needs dpkg-deb")


@pytest.fixture(scope="module")
def root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The dcgm-exporter package, built and unpacked as a node would have it."""
    pkg = next(p for p in packages_for() if p.name == "dcgm-exporter")
    work = tmp_path_factory.mktemp("work")
    deb = build_package(pkg, DEFAULT_VERSIONS["dcgm-exporter"], work, work)
    tree = tmp_path_factory.mktemp("node")
    subprocess.run(["dpkg-deb", "-x", str(deb), str(tree)], check=True)
    return tree


def role_counters(path: Path) -> Path:
    """The counters file the dcgm_exporter role writes (its default lists), as CSV lines."""
    internal = yaml.safe_load((REPO / "roles" / "dcgm_exporter" / "vars" / "main.yml").read_text())
    rows = internal["__dcgm_exporter_default_counters"] + internal["__dcgm_exporter_error_counters"]
    path.write_text("".join(f"{r['field']}, {r['type']}, {r['help']}\n" for r in rows))
    return path


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def start(root: Path, model: Path, counters: Path, port: int) -> subprocess.Popen[str]:
    env = {"PATH": "/usr/bin:/bin", "LAB_MODEL": str(model), "LAB_NODE": "gpu003",
           "LAB_RUN_DIR": str(model.parent / "run"), "LAB_MOUNT_KERNEL_VIEW": "0"}  # fmt: skip
    argv = ["/usr/bin/python3", "-S", "-I", str(root / "usr/bin/dcgm-exporter"),
            "--collectors", str(counters), "--address", f"127.0.0.1:{port}"]  # fmt: skip
    return subprocess.Popen(argv, env=env, stderr=subprocess.PIPE, text=True)


def scrape(port: int, proc: subprocess.Popen[str]) -> dict[str, dict[str, float]]:
    """metric -> gpu -> value, polling until the exporter answers."""
    for _ in range(100):
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as r:
                text = r.read().decode()
            break
        except OSError:
            assert proc.poll() is None, proc.stderr.read() if proc.stderr else ""
            time.sleep(0.1)
    else:
        raise AssertionError("dcgm-exporter never answered")
    out: dict[str, dict[str, float]] = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            assert s.labels["Hostname"] == "gpu003" and s.labels["modelName"].startswith("NVIDIA")
            out.setdefault(s.name, {})[s.labels["gpu"]] = s.value
    return out


@pytest.fixture
def model(tmp_path: Path) -> Iterator[Path]:
    data: dict[str, Any] = json.loads((FIXTURES / "sim" / "lab-model.json").read_text())
    inject(data, "gpu-xid", "gpu003", 5, 79, now=1.9e9)
    inject(data, "gpu-ecc", "gpu003", 2, now=1.9e9)
    inject(data, "slow-node", "gpu003", 0.5)
    path = tmp_path / "model.json"
    path.write_text(json.dumps(data))
    yield path


def test_the_role_s_counters_are_served_with_the_lab_s_faults(
    root: Path, model: Path, tmp_path: Path
) -> None:
    port = free_port()
    proc = start(root, model, role_counters(tmp_path / "counters.csv"), port)
    try:
        metrics = scrape(port, proc)
    finally:
        proc.terminate()
        proc.wait(timeout=10)
    xid = metrics["DCGM_FI_DEV_XID_ERRORS"]
    # Xid 79 injected on GPU5; the ECC fault on GPU2 logs the driver's Xid 48 with it.
    assert xid == {**dict.fromkeys("01234567", 0), "5": 79, "2": 48}
    # Counters come out with prometheus_client's _total suffix in the parsed samples.
    dbe = (
        metrics.get("DCGM_FI_DEV_ECC_DBE_VOL_TOTAL")
        or metrics["DCGM_FI_DEV_ECC_DBE_VOL_TOTAL_total"]
    )
    assert dbe["2"] >= 1 and dbe["0"] == 0
    assert set(metrics["DCGM_FI_DEV_SM_CLOCK"].values()) == {990}
    assert "DCGM_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL" in {
        m.removesuffix("_total") for m in metrics
    }


def test_a_field_it_does_not_know_stops_it_before_it_listens(
    root: Path, model: Path, tmp_path: Path
) -> None:
    counters = tmp_path / "counters.csv"
    counters.write_text("DCGM_FI_DEV_SM_CLOCK, gauge, SM clock\nDCGM_FI_DEV_NO_SUCH, gauge, x\n")
    proc = start(root, model, counters, free_port())
    assert proc.wait(timeout=30) == 1
    assert "unknown DCGM field(s): DCGM_FI_DEV_NO_SUCH" in (
        proc.stderr.read() if proc.stderr else ""
    )
