"""One node's whole health check: its probes' raw output in, every node check's findings out.

What a node is held to (`NodeExpectations`) comes from the spec when `validate` runs on the
head, or from the node file the roles install (`/etc/cluster-tool/node.json`) when
`node-check` runs on the node itself; both give the same findings for the same output.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cluster_tool.checks.affinity import check_affinity
from cluster_tool.checks.gdr import check_gdr
from cluster_tool.checks.health import check_dcgm, check_gpus, check_ibstat, check_xids
from cluster_tool.checks.link import check_mlxlink
from cluster_tool.checks.nccl_env import check_nccl_conf
from cluster_tool.checks.nvlink import check_nvlink_errors
from cluster_tool.checks.pcie import check_pcie_links
from cluster_tool.errors import ParseError, UsageError
from cluster_tool.findings import Finding
from cluster_tool.parsers.dcgmi import parse_dcgmi_diag
from cluster_tool.parsers.ibstat import parse_ibstat
from cluster_tool.parsers.kernel_log import parse_xids
from cluster_tool.parsers.lspci import parse_lspci
from cluster_tool.parsers.mlxlink import parse_mlxlink
from cluster_tool.parsers.nvidia_smi import NvidiaSmiReport, parse_nvidia_smi_q
from cluster_tool.parsers.nvidia_topo import parse_topo_matrix
from cluster_tool.parsers.nvlink_errors import parse_nvlink_errors
from cluster_tool.remote.probes import ProbeOutput
from cluster_tool.spec.models import Cluster, HealthThresholds, NodeProfile

__all__ = [
    "NODE_FILE",
    "NODE_FILE_VERSION",
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
        }


def expectations_for(
    cluster: Cluster,
    node: str,
    *,
    nccl_conf: str | None = None,
    gpudirect_mode: str | None = None,
) -> NodeExpectations:
    """A GPU node's expectations from the spec (UsageError for a host without a profile)."""
    try:
        host = cluster.host(node)
    except KeyError:
        raise UsageError(f"{node} is not a host of cluster {cluster.name}") from None
    if host.profile is None:
        raise UsageError(f"{node} is not a GPU node (no profile): nothing to health-check")
    if nccl_conf is None:
        from cluster_tool.render.engine import render_nccl_conf

        nccl_conf = render_nccl_conf(cluster)
    if gpudirect_mode is None:
        mode = cluster.ansible_vars.get("gpudirect_rdma_mode")
        gpudirect_mode = mode if mode in ("dmabuf", "peermem") else None
    return NodeExpectations(
        node=node,
        profile=host.profile,
        thresholds=cluster.thresholds.health,
        nccl_conf=nccl_conf,
        gpudirect_mode=gpudirect_mode,
        profile_name=host.profile_name,
        cluster=cluster.name,
    )


def read_node_file(path: Path = NODE_FILE) -> NodeExpectations:
    """The node file the roles install; UsageError naming the file when it is absent or bad."""
    from cluster_tool.fileio import read_input_bytes

    if not Path(path).exists():
        raise UsageError(f"{path}: no node file (the roles install it; or pass --node-file)")
    try:
        data = json.loads(read_input_bytes(path))
    except ValueError as exc:  # not JSON, or not UTF-8
        raise UsageError(f"{path}: not a node file: {exc}") from None
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
        )
    except (KeyError, ValueError) as exc:
        raise UsageError(f"{path}: not a valid node file: {exc}") from None


# Which check id answers for a tool that is missing or whose output cannot be read.
_PROBE_CHECK = {
    "nvidia-smi-q": ("gpu.driver", "nvidia-smi -q"),
    "nvidia-smi-topo": ("ib.affinity", "nvidia-smi topo -m"),
    "ibstat": ("ib.driver", "ibstat"),
    "kernel-log": ("os.kernel-log", "the kernel log"),
    "dcgmi-diag": ("gpu.dcgm", "dcgmi diag"),
    "nvlink-errors": ("gpu.nvlink-errors", "nvidia-smi nvlink -e"),
    "mlxlink": ("link.fec", "mlxlink"),
    "lspci": ("ib.pcie", "lspci -vv"),
}


def _probe_problem(
    node: str, probe: str, output: ProbeOutput | None, error: str | None = None
) -> Finding:
    check, what = _PROBE_CHECK.get(probe, (f"os.{probe}", probe))
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
        check=check,
        node=node,
        component=probe,
        expected="runs",
        observed=observed,
        message=f"{node}: {message}",
    )


def _parse(
    node: str,
    outputs: Mapping[str, ProbeOutput],
    probe: str,
    parse: Callable[[str], Any],
    problems: list[Finding],
    *,
    any_rc: bool = False,
) -> Any:
    output = outputs.get(probe)
    if output is None or output.not_installed:
        problems.append(_probe_problem(node, probe, output))
        return None
    if output.rc != 0 and not (any_rc and output.stdout.strip()):
        problems.append(_probe_problem(node, probe, output))
        return None
    try:
        return parse(output.stdout)
    except ParseError as exc:
        problems.append(_probe_problem(node, probe, output, str(exc)))
        return None


def check_node(expect: NodeExpectations, outputs: Mapping[str, ProbeOutput]) -> list[Finding]:
    """Every node check over one node's probe outputs (HEALTH_PROBES); a probe that failed
    or printed something unreadable is itself a finding, never a crash."""
    node, profile, t = expect.node, expect.profile, expect.thresholds
    findings: list[Finding] = []

    smi: NvidiaSmiReport | None = _parse(
        node, outputs, "nvidia-smi-q", parse_nvidia_smi_q, findings
    )
    if smi is not None:
        findings += check_gpus(node, profile, t, smi)

    # With nvidia-smi itself failing, `topo -m` fails for the same reason: say it once.
    topo_problems: list[Finding] = []
    topo = _parse(node, outputs, "nvidia-smi-topo", parse_topo_matrix, topo_problems)
    if smi is not None:
        findings += topo_problems
    if topo is not None:
        present = [g.pci for g in smi.gpus] if smi is not None else None
        findings += check_affinity(node, profile, topo, present)

    cas = _parse(node, outputs, "ibstat", _ibstat_or_none, findings)
    if cas is not None:
        findings += check_ibstat(node, profile, cas)

    log = outputs.get("kernel-log")
    if log is not None and log.rc == 0:
        events = _parse(node, outputs, "kernel-log", parse_xids, findings)
        if events is not None:
            pcis = [g.pci for g in smi.gpus] if smi is not None else []
            findings += check_xids(node, profile, t, events, pcis)
    else:
        # Xids unchecked: not a warning to read past, a check that did not run (the node's
        # verdict is `unknown`, cluster_tool.verdicts).
        findings.append(_probe_problem(node, "kernel-log", log))

    if "dcgmi-diag" in outputs:
        diag = _parse(node, outputs, "dcgmi-diag", parse_dcgmi_diag, findings, any_rc=True)
        if diag is not None:
            findings += check_dcgm(node, diag)

    # Link quality and PCIe links. Judged when collected: a run saved before these probes
    # existed has none of them.
    if "nvlink-errors" in outputs:
        nvlink_problems: list[Finding] = []
        links = _parse(
            node, outputs, "nvlink-errors", _or_none(parse_nvlink_errors), nvlink_problems
        )
        if smi is not None:  # nvidia-smi failing is gpu.driver's, said once
            findings += nvlink_problems
        if links is not None:
            findings += check_nvlink_errors(node, links, t)

    if "mlxlink" in outputs:
        ports = _parse(node, outputs, "mlxlink", _or_none(parse_mlxlink), findings, any_rc=True)
        mlxlink_out = outputs["mlxlink"]
        if ports is not None and mlxlink_out.rc != 0:
            findings.append(_probe_problem(node, "mlxlink", mlxlink_out))  # one device failed
        if ports is not None:
            compute = {hca.device for hca in profile.hcas}
            findings += check_mlxlink(node, [p for p in ports if p.device in compute], t)

    if "lspci" in outputs:
        functions = _parse(node, outputs, "lspci", _or_none(parse_lspci), findings)
        if functions is not None:
            pcie = check_pcie_links(node, profile, functions, t)
            # With nvidia-smi read, its own gpu.pcie judged the same link registers.
            findings += [f for f in pcie if smi is None or f.check != "gpu.pcie"]

    modules_out = outputs.get("modules")
    modules = set(modules_out.stdout.split()) if modules_out and modules_out.rc == 0 else set()
    nvrm = outputs.get("nvidia-version")
    kernel = outputs.get("kernel")
    if smi is not None:  # with no driver answering, gpu.driver says it; GPUDirect is moot
        findings += check_gdr(
            node,
            modules,
            nvrm.stdout if nvrm is not None and nvrm.rc == 0 else None,
            kernel.stdout.strip() if kernel is not None and kernel.rc == 0 else None,
            expect.gpudirect_mode,
        )

    if expect.nccl_conf is not None:
        conf = outputs.get("nccl-conf")
        findings += check_nccl_conf(
            node, expect.nccl_conf, conf.stdout if conf is not None and conf.rc == 0 else None
        )
    return findings


def _or_none(parse: Callable[[str], list[Any]]) -> Callable[[str], list[Any]]:
    # A node without the devices prints nothing: gpu.count and ib.count say what is missing.
    return lambda text: parse(text) if text.strip() else []


def _ibstat_or_none(text: str) -> list[Any]:
    # A node without any RDMA device prints nothing: no HCA, which check_ibstat reports.
    return parse_ibstat(text) if text.strip() else []
