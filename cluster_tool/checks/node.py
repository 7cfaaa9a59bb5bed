"""One node's whole health check: its probes' raw output in, every node check's findings out.

What a node is held to (`NodeExpectations`) comes from the spec when `validate` runs on the
head, or from the node file the roles install (`/etc/cluster-tool/node.json`) when
`node-check` runs on the node itself; both give the same findings for the same output.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from cluster_tool.checks.affinity import check_affinity
from cluster_tool.checks.counters import check_kernel_link_flaps
from cluster_tool.checks.gdr import check_gdr
from cluster_tool.checks.gpu_clocks import check_gpu_clocks
from cluster_tool.checks.health import (
    check_dcgm,
    check_gpus,
    check_ibstat,
    check_xids,
    dcgm_incomplete,
)
from cluster_tool.checks.link import check_mlxlink
from cluster_tool.checks.nccl_env import check_nccl_conf
from cluster_tool.checks.nvlink import check_nvlink_errors
from cluster_tool.checks.pcie import check_pcie_links
from cluster_tool.checks.profile import (
    Discovery,
    HcaNames,
    NodeFacts,
    discover,
    gpu_mismatches,
    match_hcas,
)
from cluster_tool.checks.storage import (
    ExpectedMount,
    StorageExpectations,
    check_storage,
    storage_expectations,
)
from cluster_tool.errors import ParseError, UsageError
from cluster_tool.findings import Finding
from cluster_tool.parsers.host import RdmaDevice
from cluster_tool.parsers.ibstat import IbstatCa
from cluster_tool.parsers.kernel_events import KernelEvents
from cluster_tool.parsers.lspci import PciFunction
from cluster_tool.parsers.mlxlink import MlxlinkPort
from cluster_tool.parsers.mounts import StorageReading
from cluster_tool.parsers.nvidia_smi import NvidiaSmiReport
from cluster_tool.parsers.nvidia_topo import TopoMatrix
from cluster_tool.parsers.nvlink_errors import NvlinkErrorGpu
from cluster_tool.probes import Probe, ProbeOutput, Readings, lines
from cluster_tool.probes.host import Ibdev2netdev, RdmaDevices
from cluster_tool.probes.node import (
    DcgmiDiag,
    Ibstat,
    KernelLog,
    KernelRelease,
    Lspci,
    Mlxlink,
    Modules,
    NcclConf,
    NvidiaSmiQ,
    NvidiaSmiTopo,
    NvidiaVersion,
    NvlinkErrorCounters,
    Storage,
)
from cluster_tool.spec.models import Cluster, NodeProfile
from cluster_tool.spec.thresholds import HealthThresholds

__all__ = [
    "NODE_CHECKS_BY_PROBE",
    "NODE_FILE",
    "NODE_FILE_VERSION",
    "FleetExpectations",
    "Judged",
    "NodeExpectations",
    "check_node",
    "expectations_for",
    "read_node_file",
]

NODE_FILE = Path("/etc/cluster-tool/node.json")
NODE_FILE_VERSION = 1


@dataclass(frozen=True)
class NodeExpectations:
    """What one node is held to: its profile, the thresholds, the rendered nccl.conf and
    the GPUDirect mode the roles configured."""

    node: str
    profile: NodeProfile
    thresholds: HealthThresholds
    nccl_conf: str | None = None  # None: do not check the NCCL environment
    gpudirect_mode: str | None = None  # "dmabuf", "peermem", or None (either will do)
    profile_name: str | None = None
    cluster: str | None = None
    # (HCA, leaf, leaf port) of the node's cables from the plan, to name a flapping port's
    # cable; empty in a node file written before it carried them.
    cables: tuple[tuple[str, str, int], ...] = ()
    # The shared filesystem and scratch it must have mounted (none in an older node file).
    storage: StorageExpectations = field(default_factory=StorageExpectations)

    def to_node_file(self) -> dict[str, Any]:
        """The JSON the roles install as /etc/cluster-tool/node.json."""
        return {
            "version": NODE_FILE_VERSION,
            "cluster": self.cluster,
            "node": self.node,
            "profile_name": self.profile_name,
            "profile": self.profile.model_dump(mode="json", exclude={"extends"}),
            "thresholds": self.thresholds.model_dump(mode="json"),
            "nccl_conf": self.nccl_conf,
            "gpudirect_mode": self.gpudirect_mode,
            "cables": [list(c) for c in self.cables],
            "storage": [m.to_json() for m in self.storage.mounts],
        }


class FleetExpectations:
    """What each GPU node of one cluster is held to, worked out once per run: the rendered
    nccl.conf, the GPUDirect mode and the cabling plan by node. A node's expectations then cost
    what the node has, not what the fleet has (the plan of 4,096 nodes is 32,768 rows)."""

    def __init__(
        self,
        cluster: Cluster,
        *,
        nccl_conf: str | None = None,
        gpudirect_mode: str | None = None,
    ) -> None:
        self.cluster = cluster
        if nccl_conf is None:
            from cluster_tool.render.engine import render_nccl_conf

            nccl_conf = render_nccl_conf(cluster)
        self.nccl_conf = nccl_conf
        if gpudirect_mode is None:
            mode = cluster.ansible_vars.get("gpudirect_rdma_mode")
            gpudirect_mode = mode if mode in ("dmabuf", "peermem") else None
        self.gpudirect_mode = gpudirect_mode
        self.storage = storage_expectations(cluster)
        self._cables: dict[str, list[tuple[str, str, int]]] | None = None

    def cables(self, node: str) -> tuple[tuple[str, str, int], ...]:
        """(HCA, leaf, leaf port) of each of the node's cables, in the plan's order."""
        if self._cables is None:
            from cluster_tool.fabric.plan import cabling_plan

            self._cables = {}
            for r in cabling_plan(self.cluster):
                self._cables.setdefault(r.node, []).append((r.hca, r.leaf, r.leaf_port))
        return tuple(self._cables.get(node, ()))

    def __call__(self, node: str) -> NodeExpectations:
        """A GPU node's expectations (UsageError for a host without a profile)."""
        cluster = self.cluster
        try:
            host = cluster.host(node)
        except KeyError:
            raise UsageError(f"{node} is not a host of cluster {cluster.name}") from None
        if host.profile is None:
            raise UsageError(f"{node} is not a GPU node (no profile): nothing to health-check")
        return NodeExpectations(
            node=node,
            profile=host.profile,
            thresholds=cluster.thresholds.health,
            nccl_conf=self.nccl_conf,
            gpudirect_mode=self.gpudirect_mode,
            profile_name=host.profile_name,
            cluster=cluster.name,
            cables=self.cables(node),
            storage=self.storage,
        )


def expectations_for(
    cluster: Cluster,
    node: str,
    *,
    nccl_conf: str | None = None,
    gpudirect_mode: str | None = None,
) -> NodeExpectations:
    """A GPU node's expectations from the spec (UsageError for a host without a profile). For
    many nodes of one run, build one `FleetExpectations` and ask it for each."""
    return FleetExpectations(cluster, nccl_conf=nccl_conf, gpudirect_mode=gpudirect_mode)(node)


def read_node_file(path: Path = NODE_FILE) -> NodeExpectations:
    """The node file the roles install; UsageError naming the file when it is absent or bad."""
    from cluster_tool.fileio import load_json, read_input_bytes

    if not Path(path).exists():
        raise UsageError(f"{path}: no node file (the roles install it; or pass --node-file)")
    data = load_json(read_input_bytes(path), f"{path}: not a node file")
    if not isinstance(data, dict) or data.get("version") != NODE_FILE_VERSION:
        raise UsageError(f"{path}: expected a cluster-tool node file, version {NODE_FILE_VERSION}")
    try:
        return NodeExpectations(
            node=str(data["node"]),
            profile=NodeProfile.model_validate(data["profile"]),
            thresholds=HealthThresholds.model_validate(data.get("thresholds") or {}),
            nccl_conf=data.get("nccl_conf"),
            gpudirect_mode=data.get("gpudirect_mode"),
            profile_name=data.get("profile_name"),
            cluster=data.get("cluster"),
            cables=tuple((str(h), str(leaf), int(p)) for h, leaf, p in data.get("cables") or ()),
            storage=StorageExpectations(
                tuple(ExpectedMount.from_json(m) for m in data.get("storage") or ())
            ),
        )
    except (KeyError, ValueError, TypeError) as exc:
        # pydantic's message runs over several lines: the first problem, on one.
        errors = getattr(exc, "errors", None)
        if callable(errors) and errors():
            first = errors()[0]
            where = ".".join(str(p) for p in first.get("loc", ()))
            raise UsageError(f"{path}: not a valid node file: {where}: {first['msg']}") from None
        raise UsageError(f"{path}: not a valid node file: {exc}") from None


def _probe_problem(
    node: str, probe: Probe, output: ProbeOutput | None, error: str | None = None
) -> Finding:
    what = probe.described
    if output is None:
        observed, message = "not collected", f"{what} was not collected"
    elif output.not_installed:
        observed, message = "not installed", f"{what}: command not found"
    elif error is not None:
        observed, message = "unreadable", f"{what} output not understood: {error}"
    else:
        last = (output.stderr or output.stdout).strip().splitlines()
        observed = f"exit {output.rc}"
        message = f"{what} failed (exit {output.rc})" + (f": {last[-1][:200]}" if last else "")
    return Finding(
        check=probe.check_id,
        node=node,
        component=probe.name,
        expected="runs",
        observed=observed,
        message=f"{node}: {message}",
    )


def _read(node: str, readings: Readings, probe: Probe, problems: list[Finding]) -> Any:
    """The probe's parsed output, or None with the finding that says why it has none."""
    output = readings.outputs.get(probe.name)
    if output is None or output.not_installed:
        problems.append(_probe_problem(node, probe, output))
        return None
    if not probe.read_anyway(output):
        problems.append(_probe_problem(node, probe, output))
        return None
    try:
        return readings.read(probe)
    except ParseError as exc:
        problems.append(_probe_problem(node, probe, output, str(exc)))
        return None


def _text(outputs: Mapping[str, ProbeOutput], probe: Probe) -> Any:
    """A probe that ran cleanly, read; None when it did not (its check says what that means)."""
    output = outputs.get(probe.name)
    return probe.process(lines(output.stdout)) if output is not None and output.rc == 0 else None


# `timeout` (coreutils) exits 124 when it stopped the command, 137 when it had to SIGKILL it
# after the grace period (the fan-out runs every probe under `timeout -k 5`).
_KILLED_BY_TIMEOUT = frozenset({124, 137})


def _rdma_devices(readings: Readings) -> list[RdmaDevice] | None:
    """Each RDMA device's PCI address, where the capture holds `ibdev2netdev -v` or the sysfs
    listing; None otherwise (the HCAs are then matched by name and GPU). Unreadable output
    is not judged here: `profile discover` reads it and says where."""
    for probe in (Ibdev2netdev(), RdmaDevices()):
        output = readings.outputs.get(probe.name)
        if output is None or output.rc != 0 or not output.stdout.strip():
            continue
        try:
            devices: list[RdmaDevice] = readings.read(probe)
        except ParseError:
            continue
        return devices
    return None


class _Node:
    """One node's check in progress: its expectations, its probes' readings (each read once,
    with the findings that say why a probe has none), and the node as it is, matched to its
    profile once for every check that names an HCA."""

    def __init__(self, expect: NodeExpectations, readings: Readings, dcgm: DcgmiDiag) -> None:
        self.expect, self.readings, self.dcgm = expect, readings, dcgm
        self.node, self.profile, self.t = expect.node, expect.profile, expect.thresholds
        self._outcomes: dict[str, tuple[Any, list[Finding]]] = {}

    def _outcome(self, probe: Probe) -> tuple[Any, list[Finding]]:
        if probe.name not in self._outcomes:
            problems: list[Finding] = []
            self._outcomes[probe.name] = (
                _read(self.node, self.readings, probe, problems),
                problems,
            )
        return self._outcomes[probe.name]

    def reading(self, probe: Probe) -> Any:
        """The probe's reading; None when it failed, was not collected or is unreadable."""
        return self._outcome(probe)[0]

    def problems(self, probe: Probe) -> list[Finding]:
        """The findings that say why the probe has no reading (none when it has one)."""
        return self._outcome(probe)[1]

    @functools.cached_property
    def smi(self) -> NvidiaSmiReport | None:
        smi: NvidiaSmiReport | None = self.reading(NvidiaSmiQ())
        return smi

    @functools.cached_property
    def facts(self) -> NodeFacts:
        return NodeFacts(
            self.node,
            smi=self.smi,
            topo=self.reading(NvidiaSmiTopo()),
            cas=self.reading(Ibstat()),
            rdma=_rdma_devices(self.readings),
        )

    @functools.cached_property
    def found(self) -> Discovery:
        return discover(self.facts)

    @functools.cached_property
    def names(self) -> HcaNames:
        """The profile's HCAs under the node's own names (a renamed HCA judged, not missing)."""
        return match_hcas(self.profile, self.facts, self.found)


# A check in the table: the node and its probe's reading (None for a row without a probe).
Check = Callable[[_Node, Any], list[Finding]]


@dataclass(frozen=True)
class Judged:
    """One probe and the checks that judge its reading, in the order they report.

    `probe` None: checks over the node as a whole (its profile), reading what they need.
    `when_collected`: judged only where the run collected the probe (a capture saved before
    it existed has none); otherwise its absence is itself a finding. `driver_says_it`: the
    probe is nvidia-smi too, so with `nvidia-smi -q` unreadable its failure is gpu.driver's,
    said once. `raw`: the checks read the probe's output themselves, None when not collected
    (DCGM: a run killed by its timeout is never read as a pass)."""

    probe: Probe | None
    checks: tuple[Check, ...]
    when_collected: bool = False
    driver_says_it: bool = False
    raw: bool = False


def _gpus(n: _Node, smi: NvidiaSmiReport) -> list[Finding]:
    return check_gpus(n.node, n.profile, n.t, smi) + check_gpu_clocks(n.node, n.profile, smi)


def _profile(n: _Node, _: None) -> list[Finding]:
    # The node as it is, held to its profile: a GPU at another address, an HCA under another
    # name, an HCA the profile does not name are each a profile.mismatch, and the checks
    # after it judge a renamed HCA under the node's name instead of calling it missing.
    return [*gpu_mismatches(n.node, n.profile, n.found), *n.names.findings]


def _affinity(n: _Node, topo: TopoMatrix) -> list[Finding]:
    present = [g.pci for g in n.smi.gpus] if n.smi is not None else None
    names = n.names
    return check_affinity(
        n.node, n.profile, topo, present, names=names.names, accounted=names.accounted
    )


def _ibstat(n: _Node, cas: list[IbstatCa]) -> list[Finding]:
    names = n.names
    return check_ibstat(n.node, n.profile, cas, names=names.names, accounted=names.accounted)


def _xids(n: _Node, kernel: KernelEvents) -> list[Finding]:
    pcis = [g.pci for g in n.smi.gpus] if n.smi is not None else []
    return check_xids(n.node, n.profile, n.t, kernel.xids, pcis)


def _link_flaps(n: _Node, kernel: KernelEvents) -> list[Finding]:
    """link.flap from the mlx5 Link down / Link up lines of the kernel log's reading."""
    try:
        events = kernel.checked_links()
    except ParseError as exc:
        log = n.readings.outputs[KernelLog.name]
        return [_probe_problem(n.node, KernelLog(), log, str(exc))]
    leaf = {hca: (leaf, port) for hca, leaf, port in n.expect.cables}
    return check_kernel_link_flaps(n.node, events, n.profile.compute_hcas, n.t, cables=leaf)


def _dcgm(n: _Node, output: ProbeOutput | None) -> list[Finding]:
    """DCGM's verdicts, and `gpu.dcgm-incomplete` for a run that did not finish what it was
    asked: one killed by its timeout is never read as a pass, whatever it printed first."""
    node, probe = n.node, n.dcgm
    assert output is not None  # judged when collected
    if output.rc not in _KILLED_BY_TIMEOUT:
        problems: list[Finding] = []
        diag = _read(node, Readings({probe.name: output}), probe, problems)
        if diag is None:
            return problems
        return check_dcgm(node, diag, level=probe.level)
    killed = f"killed by its {probe.timeout_s} s timeout (exit {output.rc})"
    if not output.stdout.strip():
        return [dcgm_incomplete(node, probe.level, f"exit {output.rc}", f"{killed}, no table")]
    try:
        diag = probe.process(lines(output.stdout))
    except ParseError as exc:
        why = f"{killed}; what it printed is not its table: {exc}"
        return [dcgm_incomplete(node, probe.level, f"exit {output.rc}", why)]
    # Its Fail rows are real; whatever it said of the rest, the run did not end.
    found = [f for f in check_dcgm(node, diag, level=probe.level) if f.check == "gpu.dcgm"]
    return [*found, dcgm_incomplete(node, probe.level, f"exit {output.rc}", killed)]


def _nvlink(n: _Node, links: list[NvlinkErrorGpu]) -> list[Finding]:
    return check_nvlink_errors(n.node, links, n.t)


def _mlxlink_device_failed(n: _Node, _: list[MlxlinkPort]) -> list[Finding]:
    # The devices that answered are read; one that did not is still a finding.
    output = n.readings.outputs[Mlxlink.name]
    return [_probe_problem(n.node, Mlxlink(), output)] if output.rc != 0 else []


def _mlxlink(n: _Node, ports: list[MlxlinkPort]) -> list[Finding]:
    # The compute HCAs under the node's own names (mlxlink labels each port so).
    compute = {n.names.names.get(hca.device, hca.device) for hca in n.profile.hcas}
    return check_mlxlink(n.node, [p for p in ports if p.device in compute], n.t)


def _pcie(n: _Node, functions: list[PciFunction]) -> list[Finding]:
    pcie = check_pcie_links(n.node, n.profile, functions, n.t)
    # With nvidia-smi read, its own gpu.pcie judged the same link registers.
    return [f for f in pcie if n.smi is None or f.check != "gpu.pcie"]


def _storage(n: _Node, reading: StorageReading) -> list[Finding]:
    return check_storage(n.node, n.expect.storage, reading, n.t)


def _gdr(n: _Node, _: ProbeOutput | None) -> list[Finding]:
    if n.smi is None:  # with no driver answering, gpu.driver says it; GPUDirect is moot
        return []
    outputs = n.readings.outputs
    return check_gdr(
        n.node,
        _text(outputs, Modules()) or set(),
        _text(outputs, NvidiaVersion()),
        _text(outputs, KernelRelease()),
        n.expect.gpudirect_mode,
    )


def _nccl_env(n: _Node, _: ProbeOutput | None) -> list[Finding]:
    if n.expect.nccl_conf is None:
        return []
    return check_nccl_conf(n.node, n.expect.nccl_conf, _text(n.readings.outputs, NcclConf()))


# Every node check, by the probe whose reading it judges, in the order findings are reported
# (the first error names the node's drain). Link quality, PCIe and storage are judged when
# collected: a run saved before those probes existed has none of them. Xids unchecked are
# not a warning to read past: a kernel log that was not read is a check that did not run
# (the node's verdict is `unknown`, cluster_tool.verdicts).
NODE_CHECKS_BY_PROBE: tuple[Judged, ...] = (
    Judged(NvidiaSmiQ(), (_gpus,)),
    Judged(None, (_profile,)),
    Judged(NvidiaSmiTopo(), (_affinity,), driver_says_it=True),
    Judged(Ibstat(), (_ibstat,)),
    Judged(KernelLog(), (_xids, _link_flaps)),
    Judged(DcgmiDiag(), (_dcgm,), when_collected=True, raw=True),
    Judged(NvlinkErrorCounters(), (_nvlink,), when_collected=True, driver_says_it=True),
    Judged(Mlxlink(), (_mlxlink_device_failed, _mlxlink), when_collected=True),
    Judged(Lspci(), (_pcie,), when_collected=True),
    Judged(Storage(), (_storage,), when_collected=True),
    # The loaded modules, with the driver's version and the kernel's, the GPUDirect mode.
    Judged(Modules(), (_gdr,), raw=True),
    Judged(NcclConf(), (_nccl_env,), raw=True),
)


def check_node(
    expect: NodeExpectations,
    outputs: Mapping[str, ProbeOutput] | Readings,
    *,
    dcgm: DcgmiDiag | None = None,
) -> list[Finding]:
    """Every node check over one node's probe outputs (HEALTH_PROBES), row by row of
    `NODE_CHECKS_BY_PROBE`; a probe that failed or printed something unreadable is itself a
    finding, never a crash. `dcgm` is the DCGM probe that ran (its level and timeout: the
    burn-in's `-r 3`), `-r 1`'s when not given. Given `Readings`, what it parses stays there
    for the node's other readers (its versions)."""
    readings = outputs if isinstance(outputs, Readings) else Readings(outputs)
    n = _Node(expect, readings, dcgm or DcgmiDiag())
    findings: list[Finding] = []
    for row in NODE_CHECKS_BY_PROBE:
        probe, reading = row.probe, None
        if probe is not None:
            if row.when_collected and probe.name not in readings.outputs:
                continue
            if row.raw:
                reading = readings.outputs.get(probe.name)
            else:
                reading = n.reading(probe)
                if not (row.driver_says_it and n.smi is None):
                    findings += n.problems(probe)
                if reading is None:
                    continue
        for check in row.checks:
            findings += check(n, reading)
    return findings
