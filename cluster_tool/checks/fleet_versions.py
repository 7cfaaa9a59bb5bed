"""`cluster-tool versions`, the pure part: each node's probe outputs read into what it runs,
held against the spec and the matrix, and the fleet tabulated: component x version x node
count. Collecting the outputs is cluster_tool.workflows.versions'."""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from cluster_tool.checks.versions import (
    NodeVersions,
    check_fleet_outliers,
    check_node_versions,
    from_version_lines,
    read_node_versions,
)
from cluster_tool.errors import EXIT_UNREACHABLE
from cluster_tool.findings import Finding, Report
from cluster_tool.probes import ProbeOutput, Readings
from cluster_tool.probes.node import NvidiaSmiQ
from cluster_tool.probes.versions import PROBE_NAME, Versions
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


def node_versions(name: str, outputs: Mapping[str, ProbeOutput] | Readings) -> NodeVersions:
    """A node's versions from its probe outputs: the version probe, or for a capture made
    before it existed, `nvidia-smi -q` and `ibstat` (driver, VBIOS, adapters only); ParseError
    when the text is not what the tools print. Given the node's `Readings`, an `nvidia-smi -q`
    the health checks parsed is not parsed again."""
    readings = outputs if isinstance(outputs, Readings) else Readings(outputs)
    outputs = readings.outputs
    if PROBE_NAME in outputs:
        read = from_version_lines(name, readings.read(Versions()))
        smi = outputs.get(NvidiaSmiQ.name)
        if smi is not None and smi.rc == 0 and smi.stdout.strip():
            # The VBIOS per GPU is nvidia-smi's to tell.
            vbios = tuple(gpu.vbios_version for gpu in readings.read(NvidiaSmiQ()).gpus)
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


def per_node(nodes: Sequence[NodeVersions]) -> dict[str, list[tuple[str, str]]]:
    """Component -> (node, what the node runs) in the table's component order: for the
    components a node has several of (adapters' firmware, GPUs' VBIOS), its most common version
    and each one off it named (`28.46.1006, mlx5_1 28.46.3048`), so that nodes alike read alike
    and a node with one adapter off reads differently."""
    seen: dict[str, list[tuple[str, str]]] = {}
    for node in nodes:
        for component, version in node.components().items():
            seen.setdefault(component, []).append((node.node, version))
        models: dict[str, list[tuple[str, str]]] = {}
        for hca in node.hcas:
            if hca.firmware:
                models.setdefault(f"hca_firmware {hca.model or '?'}", []).append(
                    (hca.name, hca.firmware)
                )
        for component, items in models.items():
            seen.setdefault(component, []).append((node.node, _several(items)))
        gpus = [(f"GPU{i}", v) for i, v in enumerate(node.vbios) if v]
        if gpus:
            seen.setdefault("vbios", []).append((node.node, _several(gpus)))
    return {c: seen[c] for c in sorted(seen, key=_order)}


def _several(items: Sequence[tuple[str, str]]) -> str:
    counts = Counter(version for _, version in items)
    common = counts.most_common(1)[0][0]
    return ", ".join([common, *(f"{name} {v}" for name, v in items if v != common)])


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
    "pyxis_slurm",
)


def _order(component: str) -> int:
    head = component.split()[0]
    return _ORDER.index(head) if head in _ORDER else len(_ORDER)


def judge_fleet(
    cluster: Cluster,
    nodes: Sequence[str],
    read: Sequence[NodeVersions],
    unreachable: Mapping[str, str],
) -> FleetVersions:
    """The findings and the table for the nodes read; `unreachable` (node -> why) are
    os.unreachable, in the order of `nodes`."""
    findings = [
        Finding(
            check="os.unreachable",
            node=name,
            expected="reachable over SSH",
            observed=unreachable[name],
            message=f"{name}: unreachable: {unreachable[name]}",
        )
        for name in nodes
        if name in unreachable
    ]
    findings += check_node_versions(cluster, read)
    findings += check_fleet_outliers(read)
    report = Report.from_findings(
        findings, {"nodes": len(nodes), "read": len(read), "unreachable": len(unreachable)}
    )
    gone = [name for name in nodes if name in unreachable]
    return FleetVersions(list(read), report, table(read), gone)
