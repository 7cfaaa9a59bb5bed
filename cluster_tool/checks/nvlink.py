"""NVLink error counters (`nvidia-smi nvlink -e`): a link that retrains or keeps replaying
slows every collective over it long before it goes down."""

from __future__ import annotations

from collections.abc import Sequence

from cluster_tool.findings import Finding, Severity
from cluster_tool.parsers.nvlink_errors import NvlinkErrorGpu
from cluster_tool.spec.thresholds import HealthThresholds

__all__ = ["check_nvlink_errors"]


def check_nvlink_errors(
    node: str, gpus: Sequence[NvlinkErrorGpu], thresholds: HealthThresholds
) -> list[Finding]:
    """One `gpu.nvlink-errors` per link over its limits: recovery errors above
    `nvlink_recovery_max` or CRC/replay errors above `nvlink_crc_replay_max` are errors,
    CRC/replay errors above `nvlink_crc_replay_warn` a warning. The counters count since the
    driver loaded or `nvidia-smi nvlink -re`."""
    t = thresholds
    findings: list[Finding] = []
    for gpu in gpus:
        for link in gpu.links:
            seen = {"recovery": link.recovery, "CRC": link.crc, "replay": link.replay}
            severity: Severity | None = None
            if link.recovery > t.nvlink_recovery_max:
                severity = "error"
            worst = max(link.crc, link.replay)
            if worst > t.nvlink_crc_replay_max:
                severity = "error"
            elif worst > t.nvlink_crc_replay_warn and severity is None:
                severity = "warning"
            if severity is None:
                continue
            counted = ", ".join(f"{count} {name}" for name, count in seen.items() if count)
            component = f"GPU{gpu.index} link {link.link}"
            limit = t.nvlink_crc_replay_warn if severity == "warning" else t.nvlink_crc_replay_max
            findings.append(
                Finding(
                    check="gpu.nvlink-errors",
                    severity=severity,
                    node=node,
                    component=component,
                    expected=f"recovery <= {t.nvlink_recovery_max}, CRC and replay <= {limit}",
                    observed=counted,
                    message=f"{node} {component}: NVLink errors since the counters were reset: "
                    f"{counted}"
                    + (
                        "; the link retrains or retransmits under load"
                        if severity == "error"
                        else "; watch whether they climb"
                    ),
                )
            )
    return findings
