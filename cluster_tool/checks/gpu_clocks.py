"""GPU power limit and clocks against the node profile, read from `nvidia-smi -q`.

A GPU whose power limit was lowered, whose application clocks were changed or whose clocks are
held by a user setting is the slow rank of every collective it joins, though every health
counter reads clean (AzNHC fails a node on any clock-event reason but idle and SW power cap).
Finding ids: gpu.power-limit, gpu.clocks, and gpu.throttle for the application-clocks reason.
"""

from __future__ import annotations

from cluster_tool.checks.health import gpu_index
from cluster_tool.findings import Finding, Severity
from cluster_tool.parsers.nvidia_smi import GpuInfo, NvidiaSmiReport
from cluster_tool.spec.models import NodeProfile

__all__ = ["check_gpu_clocks"]

# nvidia-smi prints watts with two decimals; a limit this close to the profile's is the same.
_WATTS_SLACK = 0.5


def check_gpu_clocks(node: str, profile: NodeProfile, smi: NvidiaSmiReport) -> list[Finding]:
    """gpu.power-limit, gpu.clocks and gpu.throttle (application clocks setting) per GPU."""
    out: list[Finding] = []
    for position, gpu in enumerate(smi.gpus):
        name = f"GPU{gpu_index(profile, gpu, position)}"
        out += _power_limit(node, name, profile, gpu)
        clocks = _clocks(node, name, profile, gpu)
        out += clocks
        out += _held_by_setting(node, name, gpu, already_said=bool(clocks))
    return out


def _finding(
    check: str,
    node: str,
    gpu: str,
    message: str,
    expected: str,
    observed: str,
    severity: Severity = "error",
) -> Finding:
    return Finding(
        check=check,
        severity=severity,
        node=node,
        component=gpu,
        expected=expected,
        observed=observed,
        message=f"{node} {gpu}: {message}",
    )


def _power_limit(node: str, name: str, profile: NodeProfile, gpu: GpuInfo) -> list[Finding]:
    want = profile.gpu_power_limit_w
    if want is None:
        return []
    top = gpu.max_power_limit_w
    if top is not None and top < want - _WATTS_SLACK:
        return [
            _finding(
                "gpu.power-limit",
                node,
                name,
                f"the board allows at most {top:g} W; the profile's GPUs run at {want:g} W "
                "(another SKU or a power-capped baseboard)",
                f"{want:g} W",
                f"max {top:g} W",
            )
        ]
    now = gpu.enforced_power_limit_w
    if now is not None and now < want - _WATTS_SLACK:
        return [
            _finding(
                "gpu.power-limit",
                node,
                name,
                f"enforces a power limit of {now:g} W, below the profile's {want:g} W "
                f"(lowered with nvidia-smi -pl; restore with nvidia-smi -i N -pl {want:g})",
                f"{want:g} W",
                f"{now:g} W",
            )
        ]
    return []


def _clocks(node: str, name: str, profile: NodeProfile, gpu: GpuInfo) -> list[Finding]:
    clocks = gpu.clocks
    if clocks is None:
        return []
    want = profile.gpu_max_sm_clock_mhz
    if want is not None and clocks.max_sm_mhz is not None and clocks.max_sm_mhz < want:
        return [
            _finding(
                "gpu.clocks",
                node,
                name,
                f"maximum SM clock {clocks.max_sm_mhz} MHz, below the profile's {want} MHz "
                "(another SKU or VBIOS)",
                f"max SM {want} MHz",
                f"max SM {clocks.max_sm_mhz} MHz",
            )
        ]
    app, default = clocks.applications_graphics_mhz, clocks.default_applications_graphics_mhz
    if app is not None and default is not None and app < default:
        return [
            _finding(
                "gpu.clocks",
                node,
                name,
                f"application clock {app} MHz, below its default {default} MHz: under load "
                "it runs no faster (set with nvidia-smi -ac; restore with nvidia-smi -rac)",
                f"application {default} MHz",
                f"application {app} MHz",
            )
        ]
    reasons = gpu.clock_event_reasons
    top = want or clocks.max_sm_mhz
    if (
        reasons is not None
        and reasons.applications_clocks_setting
        and not reasons.idle
        and clocks.sm_mhz is not None
        and top is not None
        and clocks.sm_mhz < top
    ):
        return [
            _finding(
                "gpu.clocks",
                node,
                name,
                f"SM clock held at {clocks.sm_mhz} MHz of {top} MHz by a clock setting "
                "(locked with nvidia-smi -lgc; restore with nvidia-smi -rgc)",
                f"SM up to {top} MHz",
                f"SM {clocks.sm_mhz} MHz (Applications Clocks Setting)",
            )
        ]
    return []


def _held_by_setting(node: str, name: str, gpu: GpuInfo, *, already_said: bool) -> list[Finding]:
    """The application-clocks reason with no clock below the profile to show for it: a clock
    setting holds the GPU, at its top clock as far as nvidia-smi shows."""
    reasons = gpu.clock_event_reasons
    if already_said or reasons is None or not reasons.applications_clocks_setting:
        return []
    return [
        _finding(
            "gpu.throttle",
            node,
            name,
            "Applications Clocks Setting active: a clock setting (nvidia-smi -ac or -lgc) holds "
            "the clocks; check nvidia-smi -q -d CLOCK under load",
            "not active",
            "Applications Clocks Setting",
            severity="warning",
        )
    ]
