"""GPU-NIC affinity from `nvidia-smi topo -m`: each rail HCA must sit on the PCIe switch of
the GPU the profile pairs it with (PIX or PXB), or GPUDirect traffic crosses the CPU."""

from __future__ import annotations

from cluster_tool.findings import Finding
from cluster_tool.parsers.nvidia_topo import TopoMatrix
from cluster_tool.spec.models import NodeProfile

__all__ = ["CLOSE", "check_affinity"]

CLOSE = ("PIX", "PXB")


def check_affinity(node: str, profile: NodeProfile, topo: TopoMatrix) -> list[Finding]:
    """`ib.affinity` for each rail HCA that is not PIX/PXB from its GPU (or is absent)."""
    out: list[Finding] = []
    for hca in profile.compute_hcas:
        try:
            code = topo.distance(hca.gpu, hca.device)
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
        near = topo.nics_at(hca.gpu) if any(g.index == hca.gpu for g in topo.gpus) else []
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
