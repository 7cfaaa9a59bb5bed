"""`cluster-tool versions`, the job: the version probe on every GPU node (over SSH, or from a
saved capture), judged by cluster_tool.checks.fleet_versions."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path

from cluster_tool.checks.fleet_versions import FleetVersions, judge_fleet, node_versions
from cluster_tool.checks.versions import NodeVersions
from cluster_tool.errors import ParseError, UsageError
from cluster_tool.probes.versions import Versions
from cluster_tool.remote.fanout import (
    HostResult,
    Target,
    Transport,
    collect,
    load_capture,
    save_capture,
)
from cluster_tool.spec.models import Cluster


def collect_versions(
    cluster: Cluster,
    *,
    nodes: Sequence[str] | None = None,
    transport: Transport | None = None,
    concurrency: int = 32,
    save: Path | None = None,
    replay: Path | None = None,
    on_done: Callable[[HostResult], None] | None = None,
) -> FleetVersions:
    """Read the versions on the GPU nodes (over SSH, or from a capture) and judge them."""
    selected = list(nodes) if nodes is not None else [n.name for n in cluster.gpu_nodes()]
    if replay is not None:
        results = load_capture(replay, selected)
    else:
        if transport is None:
            raise UsageError("no transport to reach the hosts")
        address = {h.name: h.address for h in cluster.hosts()}
        results = collect(
            [(Target(name, address.get(name)), [Versions()]) for name in selected],
            transport,
            concurrency=concurrency,
            on_done=on_done,
        )
        if save is not None:
            save_capture(save, results)
    unreachable: dict[str, str] = {}
    read: list[NodeVersions] = []
    for name in selected:
        result = results.get(name)
        if result is None or not result.reachable:
            unreachable[name] = (
                result.error or "unreachable"
                if result is not None
                else f"not in the capture {replay}"
            )
            continue
        try:
            read.append(node_versions(name, result.outputs))
        except ParseError as exc:
            raise UsageError(f"{name}: {exc}") from None
    return judge_fleet(cluster, selected, read, unreachable)
