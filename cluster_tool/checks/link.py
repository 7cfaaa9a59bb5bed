"""Link quality of a node's HCA ports from `mlxlink`: errors FEC could not correct, a raw
(pre-FEC) BER that says the cable or optic is wearing, and a hot cable module."""

from __future__ import annotations

from collections.abc import Sequence

from cluster_tool.findings import Finding
from cluster_tool.parsers.mlxlink import MlxlinkPort
from cluster_tool.spec.models import HealthThresholds

__all__ = ["check_mlxlink"]


def _cable(port: MlxlinkPort) -> str:
    """The cable as an operator finds it in the rack: vendor, part and serial."""
    module = port.module
    if module is None:
        return ""
    parts = [p for p in (module.vendor, module.part_number) if p]
    if module.serial:
        parts.append(f"S/N {module.serial}")
    return f" (cable {' '.join(parts)})" if parts else ""


def _since(port: MlxlinkPort) -> str:
    # mlxlink counts since its own clear or the last link up, not since this run.
    minutes = port.time_since_clear_min
    return f" in the {minutes:g} min since the counters were cleared" if minutes else ""


def check_mlxlink(
    node: str, ports: Sequence[MlxlinkPort], thresholds: HealthThresholds
) -> list[Finding]:
    """`link.fec` (error) when errors got past FEC, `link.ber` (warning) when the raw BER is
    above `ib_raw_ber_warn`, `link.module-temp` (warning) when the cable module runs hot.
    A port mlxlink printed no counters or module for (no `-c`, no `-m`) is not judged there."""
    t = thresholds
    findings: list[Finding] = []
    for port in ports:
        component = port.device or f"mlxlink port at line {port.line_no}"
        cable = _cable(port)

        uncorrected = []
        if port.effective_errors is not None and port.effective_errors > t.ib_effective_errors_max:
            uncorrected.append(f"{port.effective_errors} effective physical errors")
        blocks = port.fec_uncorrectable_blocks
        if blocks is not None and blocks > t.ib_effective_errors_max:
            uncorrected.append(f"{blocks} uncorrectable FEC blocks")
        if port.effective_ber is not None and port.effective_ber > t.ib_effective_ber_max:
            uncorrected.append(f"effective BER {port.effective_ber:.0e}")
        if uncorrected:
            findings.append(
                Finding(
                    check="link.fec",
                    node=node,
                    component=component,
                    expected=f"<= {t.ib_effective_errors_max} errors past FEC, "
                    f"effective BER <= {t.ib_effective_ber_max:.0e}",
                    observed=", ".join(uncorrected),
                    message=f"{node} {component}: {', '.join(uncorrected)}{_since(port)}: "
                    f"FEC ({port.fec or 'mode unknown'}) no longer hides the link's errors, "
                    f"the link layer retransmits{cable}",
                )
            )

        if port.raw_ber is not None and port.raw_ber > t.ib_raw_ber_warn:
            findings.append(
                Finding(
                    check="link.ber",
                    severity="warning",
                    node=node,
                    component=component,
                    expected=f"raw BER <= {t.ib_raw_ber_warn:.0e}",
                    observed=f"raw BER {port.raw_ber:.0e}",
                    message=f"{node} {component}: raw physical BER {port.raw_ber:.0e} above "
                    f"{t.ib_raw_ber_warn:.0e} at {port.speed or 'unknown speed'}{_since(port)}; "
                    f"FEC still corrects it, but the cable or optic is marginal{cable}",
                )
            )

        module = port.module
        temperature = module.temperature_c if module is not None else None
        if temperature is not None and temperature > t.ib_module_temp_warn_c:
            alarm = module.temperature_range_c if module is not None else None
            limit = (
                f"; the module's own alarm range is {alarm[0]:g}..{alarm[1]:g} C" if alarm else ""
            )
            findings.append(
                Finding(
                    check="link.module-temp",
                    severity="warning",
                    node=node,
                    component=component,
                    expected=f"<= {t.ib_module_temp_warn_c:g} C",
                    observed=f"{temperature:g} C",
                    message=f"{node} {component}: cable module at {temperature:g} C, above "
                    f"{t.ib_module_temp_warn_c:g} C{limit}{cable}",
                )
            )
    return findings
