"""GPU-NIC affinity from `nvidia-smi topo -m`: each rail HCA must sit on the PCIe switch of
the GPU the profile pairs it with (PIX or PXB), or GPUDirect traffic crosses the CPU."""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence

from cluster_tool.findings import Finding
from cluster_tool.parsers.nvidia_topo import TopoMatrix
from cluster_tool.spec.models import NodeProfile

__all__ = ["CLOSE", "check_affinity"]

CLOSE = ("PIX", "PXB")


def check_affinity(
    node: str,
    profile: NodeProfile,
    topo: TopoMatrix,
    present_pci: Sequence[str | None] | None = None,
    *,
    names: Mapping[str, str] | None = None,
    accounted: Collection[str] = (),
) -> list[Finding]:
    """`ib.affinity` for each rail HCA that is not PIX/PXB from its GPU (or is absent).

    `present_pci` is nvidia-smi's GPU list: with a GPU off the bus the matrix numbers the
    others anew, so the profile's GPU is found by PCI address; an HCA whose GPU is missing
    is left to `gpu.count`. A profile HCA the node names otherwise is looked up under the
    node's name (`names`); one absent that a `profile.mismatch` names (`accounted`) is left to
    it."""
    topo_index = {i: i for i in range(profile.gpu_count)}
    if present_pci is not None and profile.gpu_pci:
        seen = list(present_pci)
        topo_index = {i: seen.index(pci) for i, pci in enumerate(profile.gpu_pci) if pci in seen}
    out: list[Finding] = []
    names = names or {}
    for hca in profile.compute_hcas:
        if hca.gpu not in topo_index or hca.device in accounted:
            continue
        device = names.get(hca.device, hca.device)
        try:
            code = topo.distance(topo_index[hca.gpu], device)
        except KeyError as exc:
            out.append(
                Finding(
                    check="ib.affinity",
                    node=node,
                    component=hca.device,
                    expected=f"PIX/PXB from GPU{hca.gpu}",
                    observed="not in the topology",
                    message=f"{node} {hca.device}: not in nvidia-smi topo -m ({exc.args[0]})",
                )
            )
            continue
        if code in CLOSE:
            continue
        at = topo_index[hca.gpu]
        near = topo.nics_at(at) if any(g.index == at for g in topo.gpus) else []
        hint = f"; GPU{hca.gpu}'s PCIe switch has {', '.join(near)}" if near else ""
        out.append(
            Finding(
                check="ib.affinity",
                node=node,
                component=hca.device,
                expected=f"PIX/PXB from GPU{hca.gpu}",
                observed=code,
                message=f"{node} {hca.device} (rail {hca.rail}) is {code} from GPU{hca.gpu}, "
                f"not on its PCIe switch{hint}: is the profile's HCA order right?",
            )
        )
    return out
