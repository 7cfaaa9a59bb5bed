"""One node's whole health check: its probes' raw output in, every node check's findings out.

What a node is held to (`NodeExpectations`) comes from the spec when `validate` runs on the
head, or from the node file the roles install (`/etc/cluster-tool/node.json`) when
`node-check` runs on the node itself; both give the same findings for the same output.
"""

from __future__ import annotations

from collections.abc import Mapping
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
from cluster_tool.checks.profile import NodeFacts, discover, gpu_mismatches, match_hcas
from cluster_tool.checks.storage import (
    ExpectedMount,
    StorageExpectations,
    check_storage,
    storage_expectations,
)
from cluster_tool.errors import ParseError, UsageError
from cluster_tool.findings import Finding
from cluster_tool.parsers.host import RdmaDevice
from cluster_tool.parsers.kernel_events import KernelEvents
from cluster_tool.parsers.nvidia_smi import NvidiaSmiReport
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
from cluster_tool.spec.models import Cluster, HealthThresholds, NodeProfile

__all__ = [
    "NODE_FILE",
    "NODE_FILE_VERSION",
    "FleetExpectations",
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


def _link_flaps(expect: NodeExpectations, log: ProbeOutput, reading: KernelEvents) -> list[Finding]:
    """link.flap from the mlx5 Link down / Link up lines of the kernel log's reading."""
    try:
        events = reading.checked_links()
    except ParseError as exc:
        return [_probe_problem(expect.node, KernelLog(), log, str(exc))]
    leaf = {hca: (leaf, port) for hca, leaf, port in expect.cables}
    return check_kernel_link_flaps(
        expect.node, events, expect.profile.compute_hcas, expect.thresholds, cables=leaf
    )


# `timeout` (coreutils) exits 124 when it stopped the command, 137 when it had to SIGKILL it
# after the grace period (the fan-out runs every probe under `timeout -k 5`).
_KILLED_BY_TIMEOUT = frozenset({124, 137})


def _dcgm(node: str, output: ProbeOutput, probe: DcgmiDiag) -> list[Finding]:
    """DCGM's verdicts, and `gpu.dcgm-incomplete` for a run that did not finish what it was
    asked: one killed by its timeout is never read as a pass, whatever it printed first."""
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


def check_node(
    expect: NodeExpectations,
    outputs: Mapping[str, ProbeOutput] | Readings,
    *,
    dcgm: DcgmiDiag | None = None,
) -> list[Finding]:
    """Every node check over one node's probe outputs (HEALTH_PROBES); a probe that failed
    or printed something unreadable is itself a finding, never a crash. `dcgm` is the DCGM
    probe that ran (its level and timeout: the burn-in's `-r 3`), `-r 1`'s when not given.
    Given `Readings`, what it parses stays there for the node's other readers (its versions)."""
    node, profile, t = expect.node, expect.profile, expect.thresholds
    readings = outputs if isinstance(outputs, Readings) else Readings(outputs)
    outputs = readings.outputs
    findings: list[Finding] = []

    smi: NvidiaSmiReport | None = _read(node, readings, NvidiaSmiQ(), findings)
    if smi is not None:
        findings += check_gpus(node, profile, t, smi)
        findings += check_gpu_clocks(node, profile, smi)

    # With nvidia-smi itself failing, `topo -m` fails for the same reason: say it once.
    topo_problems: list[Finding] = []
    topo = _read(node, readings, NvidiaSmiTopo(), topo_problems)
    ib_problems: list[Finding] = []
    cas = _read(node, readings, Ibstat(), ib_problems)

    # The node as it is, held to its profile: a GPU at another address, an HCA under another
    # name, an HCA the profile does not name are each a profile.mismatch, and the checks
    # below judge a renamed HCA under the node's name instead of calling it missing.
    facts = NodeFacts(node, smi=smi, topo=topo, cas=cas, rdma=_rdma_devices(readings))
    found = discover(facts)
    findings += gpu_mismatches(node, profile, found)
    names = match_hcas(profile, facts, found)
    findings += names.findings

    if smi is not None:
        findings += topo_problems
    if topo is not None:
        present = [g.pci for g in smi.gpus] if smi is not None else None
        findings += check_affinity(
            node, profile, topo, present, names=names.names, accounted=names.accounted
        )

    findings += ib_problems
    if cas is not None:
        findings += check_ibstat(node, profile, cas, names=names.names, accounted=names.accounted)

    log = outputs.get(KernelLog.name)
    if log is not None and log.rc == 0:
        kernel: KernelEvents | None = _read(node, readings, KernelLog(), findings)
        if kernel is not None:
            pcis = [g.pci for g in smi.gpus] if smi is not None else []
            findings += check_xids(node, profile, t, kernel.xids, pcis)
            findings += _link_flaps(expect, log, kernel)
    else:
        # Xids unchecked: not a warning to read past, a check that did not run (the node's
        # verdict is `unknown`, cluster_tool.verdicts).
        findings.append(_probe_problem(node, KernelLog(), log))

    if DcgmiDiag.name in outputs:
        findings += _dcgm(node, outputs[DcgmiDiag.name], dcgm or DcgmiDiag())

    # Link quality and PCIe links. Judged when collected: a run saved before these probes
    # existed has none of them.
    if NvlinkErrorCounters.name in outputs:
        nvlink_problems: list[Finding] = []
        links = _read(node, readings, NvlinkErrorCounters(), nvlink_problems)
        if smi is not None:  # nvidia-smi failing is gpu.driver's, said once
            findings += nvlink_problems
        if links is not None:
            findings += check_nvlink_errors(node, links, t)

    if Mlxlink.name in outputs:
        ports = _read(node, readings, Mlxlink(), findings)
        mlxlink_out = outputs[Mlxlink.name]
        if ports is not None and mlxlink_out.rc != 0:
            findings.append(_probe_problem(node, Mlxlink(), mlxlink_out))  # one device failed
        if ports is not None:
            # The compute HCAs under the node's own names (mlxlink labels each port so).
            compute = {names.names.get(hca.device, hca.device) for hca in profile.hcas}
            findings += check_mlxlink(node, [p for p in ports if p.device in compute], t)

    if Lspci.name in outputs:
        functions = _read(node, readings, Lspci(), findings)
        if functions is not None:
            pcie = check_pcie_links(node, profile, functions, t)
            # With nvidia-smi read, its own gpu.pcie judged the same link registers.
            findings += [f for f in pcie if smi is None or f.check != "gpu.pcie"]

    if Storage.name in outputs:
        reading = _read(node, readings, Storage(), findings)
        if reading is not None:
            findings += check_storage(node, expect.storage, reading, t)

    if smi is not None:  # with no driver answering, gpu.driver says it; GPUDirect is moot
        findings += check_gdr(
            node,
            _text(outputs, Modules()) or set(),
            _text(outputs, NvidiaVersion()),
            _text(outputs, KernelRelease()),
            expect.gpudirect_mode,
        )

    if expect.nccl_conf is not None:
        findings += check_nccl_conf(node, expect.nccl_conf, _text(outputs, NcclConf()))
    return findings
