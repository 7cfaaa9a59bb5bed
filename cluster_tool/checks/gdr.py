"""GPUDirect RDMA readiness: dma-buf (open kernel modules on kernel >= 5.12) or the
nvidia_peermem module, as the node's configured mode says."""

from __future__ import annotations

import re
from collections.abc import Collection

from cluster_tool.findings import Finding

__all__ = ["check_gdr", "dmabuf_possible"]

_KERNEL = re.compile(r"^(\d+)\.(\d+)")


def dmabuf_possible(nvrm_version: str | None, kernel_release: str | None) -> bool:
    """dma-buf GPUDirect needs the NVIDIA open kernel module and Linux 5.12 or newer."""
    if not nvrm_version or "Open Kernel Module" not in nvrm_version:
        return False
    m = _KERNEL.match(kernel_release or "")
    return m is not None and (int(m.group(1)), int(m.group(2))) >= (5, 12)


def check_gdr(
    node: str,
    modules: Collection[str],
    nvrm_version: str | None,
    kernel_release: str | None,
    mode: str | None = None,
) -> list[Finding]:
    """`gdr.inactive` when neither way works; `gdr.mode` (warning) when the configured way
    does not work but the other does, so NCCL still gets GPUDirect."""
    # nvidia_peermem cannot work without the driver it hooks into.
    peermem = "nvidia_peermem" in modules and bool(nvrm_version)
    dmabuf = dmabuf_possible(nvrm_version, kernel_release)
    seen = (
        f"nvidia_peermem {'loaded' if peermem else 'not loaded'}, dma-buf "
        f"{'possible' if dmabuf else 'not possible'}"
    )
    if not peermem and not dmabuf:
        why = []
        if not nvrm_version:
            why.append("no NVIDIA driver loaded")
        elif "Open Kernel Module" not in nvrm_version:
            why.append("the proprietary (not open) kernel module is loaded")
        else:
            why.append(f"kernel {kernel_release} is older than 5.12")
        return [
            Finding(
                check="gdr.inactive",
                node=node,
                component=mode or "gpudirect",
                expected="nvidia_peermem loaded or dma-buf (open module, kernel >= 5.12)",
                observed=seen,
                message=f"{node}: GPUDirect RDMA unavailable: nvidia_peermem not loaded and "
                f"dma-buf not possible ({'; '.join(why)}); NCCL will copy through host memory",
            )
        ]
    wanted = {"peermem": peermem, "dmabuf": dmabuf}.get(mode or "")
    if wanted is False:
        return [
            Finding(
                check="gdr.mode",
                severity="warning",
                node=node,
                component=mode,
                expected=f"{mode} active",
                observed=seen,
                message=f"{node}: GPUDirect RDMA is configured as {mode}, which is not active "
                f"({seen}); NCCL falls back to the other way",
            )
        ]
    return []
