"""What the roles leave running for Prometheus on the converged lab (issue 22): the watcher as a
service on the Slurm controller (head), its gauges served by node_exporter's textfile collector
on head:9100, and dcgm-exporter on every GPU node with the counters file's XID field on :9400.
Read as Prometheus would, with prometheus_client's parser."""

from __future__ import annotations

import time

import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.lab.conftest import Converged

GPU_NODES = ("gpu001", "gpu002", "gpu003", "gpu004")


def _scrape(converged: Converged, node: str, port: int) -> dict[str, list[dict[str, str]]]:
    """metric name -> the label sets of its samples, from the node's own exporter."""
    # No curl on a lab node: its python3 fetches, as a scraper would.
    url = f"http://localhost:{port}/metrics"
    fetch = f"import sys, urllib.request as u; sys.stdout.write(u.urlopen('{url}').read().decode())"
    done = converged.lab.ssh(node, f'python3 -c "{fetch}"')
    assert done.returncode == 0, (node, port, done.stderr)
    out: dict[str, list[dict[str, str]]] = {}
    for family in text_string_to_metric_families(done.stdout):
        for sample in family.samples:
            out.setdefault(sample.name, []).append(sample.labels)
    return out


@pytest.mark.converged
def test_watch_runs_on_the_controller_and_the_exporters_answer(converged: Converged) -> None:
    lab = converged.lab
    # The lab's nodes run sysvinit: the role's init script for the unit.
    status = lab.ssh("head", "/etc/init.d/cluster-tool-watch status")
    assert status.returncode == 0 and "is running" in status.stdout, status.stdout + status.stderr
    argv = lab.ssh("head", "cat /proc/$(cat /run/cluster-tool-watch.pid)/cmdline | tr '\\0' ' '")
    assert " watch --spec /etc/cluster-tool/cluster.json " in argv.stdout, argv.stdout
    assert "--state-dir /var/lib/cluster-tool/watch" in argv.stdout
    state = lab.ssh("head", "stat -c %a /var/lib/cluster-tool/watch")
    assert state.stdout.strip() == "700"

    # The watcher's first cycle starts with the service; node_exporter on head serves its
    # textfile. Wait for that cycle's end (it reads four nodes and the fabric).
    deadline = time.monotonic() + 120
    while True:
        metrics = _scrape(converged, "head", 9100)
        if "cluster_tool_watch_last_cycle_timestamp_seconds" in metrics:
            break
        assert time.monotonic() < deadline, sorted(m for m in metrics if "textfile" in m)
        time.sleep(2)
    assert {s["node"] for s in metrics["cluster_tool_watch_node_drained"]} == set(GPU_NODES)
    # node_exporter's own gauges are there too: it is the host's exporter, not a stand-in.
    assert "node_load1" in metrics

    for node in GPU_NODES:
        gpu = _scrape(converged, node, 9400)
        xid = gpu["DCGM_FI_DEV_XID_ERRORS"]
        assert sorted(int(s["gpu"]) for s in xid) == list(range(8)), node
        assert {s["Hostname"] for s in xid} == {node}
        assert "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL" in {n.removesuffix("_total") for n in gpu}
