"""What the watcher shows Prometheus: a node_exporter textfile (the textfile collector's
`*.prom` format) with per-node, per-rail gauges, written with prometheus_client and replaced
atomically so node_exporter never reads half of it. `METRICS` names every metric it can write;
the Grafana dashboard (docs/grafana/cluster-tool-watch.json) queries only these and
dcgm-exporter's fields.
"""

from __future__ import annotations

from pathlib import Path

from prometheus_client import CollectorRegistry, Gauge, generate_latest

from cluster_tool.fileio import atomic_write
from cluster_tool.spec.models import Cluster

__all__ = ["DCGM_EXPORTER_FIELDS", "METRICS", "render_textfile", "write_textfile"]

PORT_COUNTER_RATE = "cluster_tool_watch_port_counter_rate"
LINK_BER = "cluster_tool_watch_link_ber"
FINDINGS = "cluster_tool_watch_findings"
NODE_DRAINED = "cluster_tool_watch_node_drained"
BUSBW = "cluster_tool_watch_busbw_gbps"
BUSBW_BASELINE = "cluster_tool_watch_busbw_baseline_gbps"
LAST_CYCLE = "cluster_tool_watch_last_cycle_timestamp_seconds"
CHECKPOINT_GRACE = "cluster_tool_watch_checkpoint_grace_seconds"

METRICS: tuple[str, ...] = (
    PORT_COUNTER_RATE,
    LINK_BER,
    FINDINGS,
    NODE_DRAINED,
    BUSBW,
    BUSBW_BASELINE,
    CHECKPOINT_GRACE,
    LAST_CYCLE,
)

# dcgm-exporter's fields the dashboard reads beside the watcher's own, as its default counters
# file names them (github.com/NVIDIA/dcgm-exporter, etc/default-counters.csv: "SM clock
# frequency (in MHz)", "GPU utilization (in %)", "Value of the last XID error encountered").
DCGM_EXPORTER_FIELDS: tuple[str, ...] = (
    "DCGM_FI_DEV_SM_CLOCK",
    "DCGM_FI_DEV_GPU_UTIL",
    "DCGM_FI_DEV_XID_ERRORS",
)


def render_textfile(
    cluster: Cluster,
    *,
    at: float,
    rates: dict[str, dict[str, dict[str, float]]],
    findings: list[tuple[str | None, str, str]],
    drained: list[str],
    ber: dict[tuple[str, str], float] | None = None,
    busbw: dict[tuple[str, int], tuple[float, float | None]] | None = None,
    graces: dict[str, float] | None = None,
) -> str:
    """The textfile of one cycle. `rates`: node -> HCA -> counter -> per second (data in
    bytes); `findings`: (node, check, severity) per finding; `ber`: (node, HCA) -> raw BER
    where read; `busbw`: (node, rail) -> (latest, baseline) GB/s where probes ran."""
    registry = CollectorRegistry()
    rail_of = {
        (h.name, hca.device): str(hca.rail)
        for h in cluster.gpu_nodes()
        if h.profile is not None
        for hca in h.profile.hcas
    }
    rate = Gauge(
        PORT_COUNTER_RATE,
        "Increase per second of an HCA port counter since the last cycle (data in bytes)",
        ["node", "hca", "rail", "counter"],
        registry=registry,
    )
    for node, per_hca in sorted(rates.items()):
        for hca, counters in sorted(per_hca.items()):
            for counter, value in sorted(counters.items()):
                rate.labels(node, hca, rail_of.get((node, hca), ""), counter).set(value)
    ber_gauge = Gauge(
        LINK_BER, "Raw (pre-FEC) bit error rate of a compute link, where read",
        ["node", "hca", "rail"], registry=registry,
    )  # fmt: skip
    for (node, hca), value in sorted((ber or {}).items()):
        ber_gauge.labels(node, hca, rail_of.get((node, hca), "")).set(value)
    count = Gauge(
        FINDINGS, "Findings open this cycle, by node, check id and severity",
        ["node", "check", "severity"], registry=registry,
    )  # fmt: skip
    tally: dict[tuple[str, str, str], int] = {}
    for where, check, severity in findings:
        key = (where or "", check, severity)
        tally[key] = tally.get(key, 0) + 1
    for (where, check, severity), n in sorted(tally.items()):
        count.labels(where, check, severity).set(n)
    held = Gauge(
        NODE_DRAINED, "1 when the node is drained by cluster-tool watch", ["node"],
        registry=registry,
    )  # fmt: skip
    for node in (h.name for h in cluster.gpu_nodes()):
        held.labels(node).set(1 if node in drained else 0)
    latest = Gauge(BUSBW, "Latest busbw of a short NCCL probe, GB/s", ["node", "rail"],
                   registry=registry)  # fmt: skip
    base = Gauge(BUSBW_BASELINE, "The node's busbw baseline on the rail, GB/s",
                 ["node", "rail"], registry=registry)  # fmt: skip
    for (node, rail), (now_gbps, baseline) in sorted((busbw or {}).items()):
        latest.labels(node, str(rail)).set(now_gbps)
        if baseline is not None:
            base.labels(node, str(rail)).set(baseline)
    grace = Gauge(
        CHECKPOINT_GRACE,
        "Seconds a job had between the checkpoint signal and its requeue (or its own end), "
        "for the jobs requeued this cycle",
        ["job"], registry=registry,
    )  # fmt: skip
    for job, seconds in sorted((graces or {}).items()):
        grace.labels(job).set(seconds)
    Gauge(LAST_CYCLE, "When the last watch cycle ended (Unix time)", registry=registry).set(at)
    return generate_latest(registry).decode("utf-8")


def write_textfile(path: Path, text: str) -> Path:
    """Replace the textfile atomically; node_exporter reads it as another user (0644)."""
    return atomic_write(path, text, mode=0o644)
