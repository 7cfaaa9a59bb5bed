"""PCIe links of a node's GPUs and compute HCAs from `lspci -vv`: a link that trained narrower
or slower than the profile expects halves what GPUDirect and the host can move."""

from __future__ import annotations

from collections.abc import Sequence

from cluster_tool.findings import Finding, Severity
from cluster_tool.parsers.lspci import PciFunction
from cluster_tool.parsers.pci import normalize_pci_bus_id
from cluster_tool.spec.models import NodeProfile
from cluster_tool.spec.thresholds import HealthThresholds

__all__ = ["check_pcie_links"]


def _is_nvidia_gpu(function: PciFunction) -> bool:
    desc = function.description
    return "NVIDIA Corporation" in desc and desc.startswith(("3D controller", "VGA compatible"))


def _judge(
    node: str,
    function: PciFunction,
    component: str,
    check: str,
    want_gen: int,
    want_width: int,
    slow_gen_severity: Severity,
) -> list[Finding]:
    if function.gen is None or function.width is None:
        return []  # no Express capability printed (lspci without root shows none)
    # A device is held to what it can do: a gen 4 part in a gen 5 profile is not a fault.
    gen = min(want_gen, function.cap_gen or want_gen)
    width = min(want_width, function.cap_width or want_width)
    narrow = function.width < width
    slow = function.gen < gen
    if not narrow and not slow:
        return []
    severity: Severity = "error" if narrow or slow_gen_severity == "error" else "warning"
    why = "reseat the card or riser" if narrow else "re-check under load"
    if slow and not narrow and slow_gen_severity == "warning":
        why = "idle GPUs train down to save power: re-check under load"
    return [
        Finding(
            check=check,
            severity=severity,
            node=node,
            component=component,
            expected=f"gen {gen} x{width}",
            observed=f"gen {function.gen} x{function.width}",
            message=f"{node} {component}: PCIe link at gen {function.gen} x{function.width}, "
            f"expected gen {gen} x{width} (device capable of gen {function.cap_gen} "
            f"x{function.cap_width}, {function.address}); {why}",
        )
    ]


def check_pcie_links(
    node: str,
    profile: NodeProfile,
    functions: Sequence[PciFunction],
    thresholds: HealthThresholds,
) -> list[Finding]:
    """`ib.pcie` (error) for a compute HCA whose link is narrower or slower than
    min(`hca_pcie_gen`/`hca_pcie_width`, what the HCA can do); `gpu.pcie` for a GPU, an error
    when narrower and a warning when only slower (idle GPUs train down). GPUs are the
    profile's `gpu_pci` addresses, or every NVIDIA 3D/VGA controller when it lists none.
    A device absent from the capture is left to `ib.count` and `gpu.count`."""
    t = thresholds
    by_address = {f.address: f for f in functions}
    findings: list[Finding] = []
    for hca in profile.hcas:
        function = by_address.get(normalize_pci_bus_id(hca.pci) or hca.pci)
        if function is not None:
            findings += _judge(
                node, function, hca.device, "ib.pcie", t.hca_pcie_gen, t.hca_pcie_width, "error"
            )
    if profile.gpu_pci:
        gpus = [
            (f"GPU{i}", by_address.get(normalize_pci_bus_id(pci) or pci))
            for i, pci in enumerate(profile.gpu_pci)
        ]
    else:  # no index without the profile's order: name the GPU by its address
        gpus = [(f"GPU {f.address}", f) for f in functions if _is_nvidia_gpu(f)]
    for component, function in gpus:
        if function is not None:
            findings += _judge(
                node,
                function,
                component,
                "gpu.pcie",
                t.gpu_pcie_gen,
                t.gpu_pcie_width,
                "warning",
            )
    return findings
