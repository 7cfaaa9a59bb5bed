"""After install: the versions a node reports, read from its own tools' output, held against the
spec's pins (`version.drift`), the compatibility matrix (`version.incompatible`) and the rest of
the fleet where the spec pins nothing (`version.outlier`: HCA firmware, GPU VBIOS).

Pure: text in, findings out. Collecting the text from the nodes is the probe's job.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from cluster_tool.compat.matrix import Matrix, Violation, evaluate, load_matrix
from cluster_tool.findings import Finding
from cluster_tool.parsers.ibstat import parse_ibstat
from cluster_tool.parsers.nvidia_smi import parse_nvidia_smi_q
from cluster_tool.parsers.versions import VersionLines
from cluster_tool.spec.models import Cluster
from cluster_tool.spec.pins import spec_pins

# ibstat's `CA type` is the PCI device id in decimal (MT4129 = 0x1021); the families by
# Mellanox/NVIDIA's PCI ids (vendor 15b3, https://pci-ids.ucw.cz/read/PC/15b3).
HCA_MODELS = {"MT4129": "ConnectX-7", "MT4131": "ConnectX-8", "MT41692": "BlueField-3"}

_HCA_COMPONENTS = {"hca_model", "hca_firmware"}

# What the roles install at exactly the spec's pin, so a node that runs another is drift. Slurm
# is not here: with the default slurm_package_source the OS's own release is installed.
_DRIFT = {"nvidia_driver": "NVIDIA driver", "doca": "DOCA-OFED", "nccl": "NCCL"}


# Read from every node, pinned by no spec field the roles install exactly: the one node on
# another kernel or Slurm is worth a look before a maintenance window.
_FLEET_ONLY = {
    "kernel": "kernel",
    "slurm": "Slurm",
    "sharp_plugin": "the NCCL SHARP plugin",
    "mlx5_core": "mlx5_core",
}


def _same(read: str, pin: str) -> bool:
    """The node runs the pin: `2.9.1` pins 2.9.1 and its packaging revisions, whole otherwise."""
    return read == pin or read.split("-")[0] == pin


@dataclass(frozen=True)
class Hca:
    """One adapter as ibstat or sysfs reports it (PSID: the board's firmware image id)."""

    name: str
    model: str | None
    firmware: str | None
    psid: str | None = None


@dataclass(frozen=True)
class NodeVersions:
    """What one node runs, as far as the text handed in tells."""

    node: str
    nvidia_driver: str | None = None
    hcas: tuple[Hca, ...] = ()
    vbios: tuple[str | None, ...] = ()  # per GPU, in nvidia-smi's index order
    # Matrix component -> what runs (kernel, fabricmanager, doca, nccl, sharp_plugin, slurm, and
    # pyxis_slurm: the Slurm the pyxis plugin was built against), and a few shown but not
    # judged (mlx5_core, pyxis).
    other: Mapping[str, str] = field(default_factory=dict)

    def components(self) -> dict[str, str]:
        """Every single-valued component read from the node, the driver included."""
        read = dict(self.other)
        if self.nvidia_driver is not None:
            read["nvidia_driver"] = self.nvidia_driver
        return read


def read_node_versions(
    node: str, *, nvidia_smi_q: str | None = None, ibstat: str | None = None
) -> NodeVersions:
    """A node's versions from `nvidia-smi -q` and `ibstat` text (either may be absent);
    ParseError when the text is not what those tools print."""
    driver = None
    vbios: tuple[str | None, ...] = ()
    if nvidia_smi_q:
        report = parse_nvidia_smi_q(nvidia_smi_q)
        driver = report.driver_version
        vbios = tuple(gpu.vbios_version for gpu in report.gpus)
    hcas: tuple[Hca, ...] = ()
    if ibstat:
        hcas = tuple(
            Hca(ca.name, HCA_MODELS.get(ca.ca_type or "", ca.ca_type), ca.firmware_version)
            for ca in parse_ibstat(ibstat)
        )
    return NodeVersions(node, driver, hcas, vbios)


def from_version_lines(node: str, lines: VersionLines) -> NodeVersions:
    """A node's versions from what the version probe read (cluster_tool.probes.versions)."""
    hcas = tuple(
        Hca(h.device, HCA_MODELS.get(h.hca_type or "", h.hca_type), h.firmware, h.psid)
        for h in lines.hcas
    )
    return NodeVersions(node, lines.nvidia_driver, hcas, (), dict(lines.facts))


def check_node_versions(
    cluster: Cluster, nodes: Iterable[NodeVersions], matrix: Matrix | None = None
) -> list[Finding]:
    """Drift from the spec's pins and matrix rules broken by what the nodes run (a rule the
    spec's pins break alone is `spec check`'s to report, not repeated here)."""
    matrix = matrix or load_matrix()
    pins = {component: pin.version for component, pin in spec_pins(cluster).items()}
    findings: list[Finding] = []
    for node in nodes:
        read = node.components()
        for component in _DRIFT:
            if component in read and not _same(read[component], pins[component]):
                findings.append(
                    Finding(
                        check="version.drift",
                        node=node.node,
                        component=component,
                        expected=pins[component],
                        observed=read[component],
                        message=f"{node.node} runs {_DRIFT[component]} {read[component]}; the "
                        f"spec pins {pins[component]}",
                    )
                )
        for violation in _node_rules(matrix, {**pins, **read}, set(read)):
            findings.append(_incompatible(node.node, violation, {**pins, **read}, set(read)))
        for hca in node.hcas:
            facts = {"hca_model": hca.model, "hca_firmware": hca.firmware}
            reported = {k: v for k, v in facts.items() if v is not None}
            known = {**pins, **read, **reported}
            for violation in evaluate(matrix, known):
                if violation.rule.components() & _HCA_COMPONENTS:
                    findings.append(
                        _incompatible(node.node, violation, known, {*read, *reported}, hca.name)
                    )
    return findings


def _node_rules(matrix: Matrix, known: dict[str, str], read: set[str]) -> list[Violation]:
    """Violations of rules that read at least one version the node reported."""
    return [
        v
        for v in evaluate(matrix, known)
        if v.rule.components() & read and not v.rule.components() & _HCA_COMPONENTS
    ]


def _incompatible(
    node: str,
    violation: Violation,
    known: dict[str, str],
    read: set[str],
    hca: str | None = None,
) -> Finding:
    """The finding names what the node runs, not the pin: a node on driver 535 under a spec
    pinning branch 550 is the node's driver out of line."""
    component = violation.component
    if component not in read:
        component = sorted(violation.rule.components() & read)[0]
    return Finding(
        check="version.incompatible",
        node=node,
        component=f"{component} {hca}" if hca else component,
        observed=known[component],
        message=f"{node}{' ' + hca if hca else ''}: {violation.message}",
    )


def check_fleet_outliers(nodes: Sequence[NodeVersions]) -> list[Finding]:
    """`version.outlier` (a warning) for each adapter or GPU whose firmware differs from what
    most of its kind run across the fleet (the one adapter left on older firmware), and each node
    whose kernel, Slurm, SHARP plugin or mlx5_core differs from most nodes'. When no version is
    held by more than any other, the split itself is reported, naming no node."""
    groups: dict[str, list[tuple[str, str, str]]] = {}
    for node in nodes:
        for hca in node.hcas:
            if hca.model and hca.firmware:
                key = f"hca_firmware {hca.model}"
                groups.setdefault(key, []).append((node.node, hca.name, hca.firmware))
        for index, vbios in enumerate(node.vbios):
            if vbios:
                groups.setdefault("vbios", []).append((node.node, f"GPU {index}", vbios))
        for component in _FLEET_ONLY:
            if node.other.get(component):
                groups.setdefault(component, []).append((node.node, "", node.other[component]))
    findings: list[Finding] = []
    for key, entries in groups.items():
        counts = Counter(value for _, _, value in entries).most_common()
        if len(counts) == 1:
            continue
        component = key.split()[0]
        what = _FLEET_ONLY.get(component) or (
            key.replace("hca_firmware ", "") + " firmware" if component != "vbios" else "VBIOS"
        )
        (common, held), (_, runner_up) = counts[0], counts[1]
        if held == runner_up:
            spread = ", ".join(f"{value} on {n}" for value, n in counts)
            findings.append(
                Finding(
                    check="version.outlier",
                    severity="warning",
                    component=key,
                    message=f"{what} splits the fleet with no majority: {spread}",
                )
            )
            continue
        for node_name, where, value in entries:
            if value != common:
                findings.append(
                    Finding(
                        check="version.outlier",
                        severity="warning",
                        node=node_name,
                        component=f"{component} {where}".strip(),
                        expected=common,
                        observed=value,
                        message=f"{' '.join(filter(None, (node_name, where)))} runs {what} "
                        f"{value}; {held} of {len(entries)} run {common}",
                    )
                )
    return findings
