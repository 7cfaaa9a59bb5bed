"""`cluster-tool versions`: collect (or replay) the version probe on every GPU node, hold what
runs against the spec and the matrix, and tabulate the fleet: component x version x node count.

The edge (SSH through a Transport, or a saved capture) is handed in; the rest is pure.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from cluster_tool.compat.probe import PROBE_NAME, Versions, parse_versions
from cluster_tool.compat.readback import (
    NodeVersions,
    check_fleet_outliers,
    check_node_versions,
    read_node_versions,
)
from cluster_tool.errors import EXIT_UNREACHABLE, ParseError, UsageError
from cluster_tool.findings import Finding, Report
from cluster_tool.remote.fanout import (
    HostResult,
    Target,
    Transport,
    collect,
    load_capture,
    save_capture,
)
from cluster_tool.spec.models import Cluster


@dataclass(frozen=True)
class TableRow:
    """One version of one component and the nodes that run it."""

    component: str
    version: str
    nodes: tuple[str, ...]

    def to_json(self) -> dict[str, object]:
        return {
            "component": self.component,
            "version": self.version,
            "count": len(self.nodes),
            "nodes": list(self.nodes),
        }


@dataclass
class FleetVersions:
    """What every node runs, the findings, and who could not be read."""

    nodes: list[NodeVersions]
    report: Report
    table: list[TableRow]
    unreachable: list[str] = field(default_factory=list)

    @property
    def exit_code(self) -> int:
        """3 when a node could not be reached or read (the contract), else the report's 0/1."""
        return EXIT_UNREACHABLE if self.unreachable else self.report.exit_code


def node_versions(name: str, result: HostResult) -> NodeVersions:
    """A node's versions from its probe outputs: the version probe, or for a capture made
    before it existed, `nvidia-smi -q` and `ibstat` (driver, VBIOS, adapters only)."""
    outputs = result.outputs
    if PROBE_NAME in outputs:
        read = parse_versions(name, outputs[PROBE_NAME].stdout)
        smi = outputs.get("nvidia-smi-q")
        if smi is not None and smi.rc == 0 and smi.stdout.strip():
            # The VBIOS per GPU is nvidia-smi's to tell.
            vbios = read_node_versions(name, nvidia_smi_q=smi.stdout).vbios
            read = NodeVersions(read.node, read.nvidia_driver, read.hcas, vbios, read.other)
        return read
    texts = {
        key: outputs[probe].stdout
        for key, probe in (("nvidia_smi_q", "nvidia-smi-q"), ("ibstat", "ibstat"))
        if probe in outputs and outputs[probe].rc == 0
    }
    return read_node_versions(name, **texts)


def table(nodes: Sequence[NodeVersions]) -> list[TableRow]:
    """Component x version x nodes, components in a fixed order, the most common version first."""
    seen: dict[str, dict[str, list[str]]] = {}

    def add(component: str, version: str | None, node: str) -> None:
        if version:
            names = seen.setdefault(component, {}).setdefault(version, [])
            if node not in names:
                names.append(node)

    for node in nodes:
        for component, version in sorted(node.components().items(), key=lambda kv: _order(kv[0])):
            add(component, version, node.node)
        for hca in node.hcas:
            add(f"hca_firmware {hca.model or '?'}", hca.firmware, node.node)
        for vbios in node.vbios:
            add("vbios", vbios, node.node)
    rows = []
    for component in sorted(seen, key=_order):
        for version, names in sorted(seen[component].items(), key=lambda kv: -len(kv[1])):
            rows.append(TableRow(component, version, tuple(names)))
    return rows


_ORDER = (
    "kernel",
    "nvidia_driver",
    "fabricmanager",
    "doca",
    "mlx5_core",
    "hca_firmware",
    "vbios",
    "nccl",
    "sharp_plugin",
    "slurm",
    "pyxis",
)


def _order(component: str) -> int:
    head = component.split()[0]
    return _ORDER.index(head) if head in _ORDER else len(_ORDER)


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
    findings: list[Finding] = []
    unreachable: list[str] = []
    read: list[NodeVersions] = []
    for name in selected:
        result = results.get(name)
        if result is None or not result.reachable:
            why = result.error if result is not None else f"not in the capture {replay}"
            unreachable.append(name)
            findings.append(
                Finding(
                    check="os.unreachable",
                    node=name,
                    expected="reachable over SSH",
                    observed=why,
                    message=f"{name}: unreachable: {why}",
                )
            )
            continue
        try:
            read.append(node_versions(name, result))
        except ParseError as exc:
            raise UsageError(f"{name}: {exc}") from None
    findings += check_node_versions(cluster, read)
    findings += check_fleet_outliers(read)
    report = Report.from_findings(
        findings, {"nodes": len(selected), "read": len(read), "unreachable": len(unreachable)}
    )
    return FleetVersions(read, report, table(read), unreachable)
