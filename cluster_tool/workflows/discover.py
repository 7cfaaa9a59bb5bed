"""`cluster-tool profile discover`: one node's probe outputs, from a saved capture, read into a
`Discovery` (checks/profile.py) and, with `--diff`, held to an existing profile."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from cluster_tool.checks.profile import (
    DEFAULT_MEMORY_RESERVE_PCT,
    Discovery,
    NodeFacts,
    diff_profile,
    discover,
)
from cluster_tool.errors import ParseError, UnreachableError, UsageError
from cluster_tool.findings import Finding
from cluster_tool.probes import Probe, ProbeOutput, lines
from cluster_tool.probes.host import (
    HOST_PROBES,
    DmiProduct,
    Ibdev2netdev,
    Lscpu,
    Meminfo,
    RdmaDevices,
)
from cluster_tool.probes.node import Hostname, Ibstat, Lspci, NvidiaSmiQ, NvidiaSmiTopo
from cluster_tool.remote.fanout import Target, Transport, collect, load_capture
from cluster_tool.spec.models import NodeProfile

__all__ = [
    "DISCOVER_PROBES",
    "diff_node",
    "discover_from_capture",
    "discover_live",
    "facts_from_outputs",
    "parse_pairs",
]

# What discovery reads from a node: the GPU and HCA probes, and what the node is made of.
DISCOVER_PROBES: tuple[Probe, ...] = (
    Hostname(),
    NvidiaSmiQ(),
    NvidiaSmiTopo(),
    Ibstat(),
    Lspci(),
    *HOST_PROBES,
)


def _read(
    node: str,
    outputs: Mapping[str, ProbeOutput],
    probe: Probe,
    unreadable: dict[str, str] | None = None,
) -> Any:
    """The probe's reading; None when the capture has no clean output of it (the discovery
    then says what it could not read). Output that is there but unreadable is an error: a
    profile is never made from half a reading. With `unreadable`, the error is filed there
    under the probe's name instead (the preflight reports what it could not read)."""
    output = outputs.get(probe.name)
    if output is None or output.rc != 0 or not output.stdout.strip():
        return None
    try:
        return probe.process(lines(output.stdout))
    except ParseError as exc:
        located = exc.with_source(f"{node}/{probe.name}.out")
        if unreadable is None:
            raise located from exc
        unreadable[probe.name] = str(located)
        return None


def facts_from_outputs(
    node: str, outputs: Mapping[str, ProbeOutput], unreadable: dict[str, str] | None = None
) -> NodeFacts:
    """One node's probe outputs, parsed (`unreadable`: see `_read`)."""
    rdma = _read(node, outputs, Ibdev2netdev(), unreadable)
    if rdma is None:
        rdma = _read(node, outputs, RdmaDevices(), unreadable)
    return NodeFacts(
        node=node,
        smi=_read(node, outputs, NvidiaSmiQ(), unreadable),
        topo=_read(node, outputs, NvidiaSmiTopo(), unreadable),
        cas=_read(node, outputs, Ibstat(), unreadable),
        rdma=rdma,
        lspci=_read(node, outputs, Lspci(), unreadable),
        cpu=_read(node, outputs, Lscpu(), unreadable),
        mem_total_mib=_read(node, outputs, Meminfo(), unreadable),
        system=_read(node, outputs, DmiProduct(), unreadable),
    )


def parse_pairs(values: list[str]) -> dict[int, str | None]:
    """`--pair GPU0=mlx5_1` (or `GPU0=none`) into {0: "mlx5_1"}."""
    pairs: dict[int, str | None] = {}
    for value in values:
        gpu, sep, device = value.partition("=")
        index = gpu.strip().upper().removeprefix("GPU")
        if not sep or not index.isdigit() or len(index) > 2 or not device.strip():
            raise UsageError(f"--pair {value!r}: expected GPUn=DEVICE or GPUn=none")
        name = device.strip()
        pairs[int(index)] = None if name.lower() == "none" else name
    return pairs


def discover_from_capture(
    capture: Path,
    node: str | None = None,
    *,
    pairs: Mapping[int, str | None] | None = None,
    memory_reserve_pct: float = DEFAULT_MEMORY_RESERVE_PCT,
) -> tuple[Discovery, NodeFacts]:
    """Discover the node `node` of a saved capture (the only host that has GPU probes when not
    named): what it found, and the readings it found it in."""
    hosts = load_capture(capture)
    if node is None:
        # The only host, or the only one a GPU probe ran on (a capture holds the fabric's
        # subnet-manager host too).
        gpu_probes = (NvidiaSmiQ.name, NvidiaSmiTopo.name)
        candidates = (
            sorted(hosts)
            if len(hosts) == 1
            else sorted(n for n, r in hosts.items() if any(p in r.outputs for p in gpu_probes))
        )
        if len(candidates) != 1:
            named = ", ".join(candidates) or "none"
            raise UsageError(f"{capture}: say which node with --node (GPU nodes: {named})")
        node = candidates[0]
    if node not in hosts:
        raise UsageError(f"{capture}: no host {node!r} in the capture")
    result = hosts[node]
    if not result.reachable:
        raise UsageError(f"{capture}: {node} was not reached when captured: {result.error}")
    facts = facts_from_outputs(node, result.outputs)
    return discover(facts, pairs=pairs, memory_reserve_pct=memory_reserve_pct), facts


def discover_live(
    node: str,
    address: str | None,
    transport: Transport,
    *,
    pairs: Mapping[int, str | None] | None = None,
    memory_reserve_pct: float = DEFAULT_MEMORY_RESERVE_PCT,
) -> tuple[Discovery, NodeFacts]:
    """Discover a node over the read-only fan-out (one session, the probes above)."""
    results = collect([(Target(node, address), list(DISCOVER_PROBES))], transport)
    result = results[node]
    if not result.reachable:
        raise UnreachableError(f"{node}: unreachable: {result.error}")
    facts = facts_from_outputs(node, result.outputs)
    return discover(facts, pairs=pairs, memory_reserve_pct=memory_reserve_pct), facts


def diff_node(profile: NodeProfile, facts: NodeFacts, found: Discovery) -> list[Finding]:
    """Every `profile.mismatch` between the node and `profile`."""
    return diff_profile(profile, facts, found)
