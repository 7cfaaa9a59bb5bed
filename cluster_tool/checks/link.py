"""Link quality of a node's HCA ports from `mlxlink`, held to the limits for each port's speed:
errors FEC could not correct, a raw (pre-FEC) BER over a limit the spec sets, and a hot cable
module."""

from __future__ import annotations

from collections.abc import Sequence

from cluster_tool.findings import Finding
from cluster_tool.parsers.mlxlink import MlxlinkPort
from cluster_tool.spec.thresholds import HealthThresholds, LinkQuality

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


def _post_fec(port: MlxlinkPort, limits: LinkQuality) -> list[str]:
    """What FEC let through on the port, over the limits for its speed."""
    found = []
    counts = (
        (port.effective_errors, "effective physical errors"),
        (port.symbol_errors, "symbol errors"),
        (port.fec_uncorrectable_blocks, "uncorrectable FEC blocks"),
    )
    for value, what in counts:
        if value is not None and value > limits.effective_errors_max:
            found.append(f"{value} {what}")
    for ber, what in ((port.effective_ber, "effective BER"), (port.symbol_ber, "symbol BER")):
        if ber is not None and ber > limits.effective_ber_max:
            found.append(f"{what} {ber:.0e}")
    return found


def check_mlxlink(
    node: str, ports: Sequence[MlxlinkPort], thresholds: HealthThresholds
) -> list[Finding]:
    """`link.fec` (error) when errors got past FEC, `link.ber` (warning) when the raw BER is
    above the `raw_ber_warn` the spec sets for the port's speed (none by default: on PAM4 links
    a healthy raw BER is far above the post-FEC limit, and history.py keeps its trend),
    `link.module-temp` (warning) when the cable module runs hot. A port mlxlink printed no
    counters or module for (no `-c`, no `-m`) is not judged there."""
    t = thresholds
    findings: list[Finding] = []
    for port in ports:
        component = port.device or f"mlxlink port at line {port.line_no}"
        cable = _cable(port)
        speed, limits = t.ib_link_quality.for_generation(port.generation)
        at_speed = port.speed or "unknown speed"

        uncorrected = _post_fec(port, limits)
        if uncorrected:
            findings.append(
                Finding(
                    check="link.fec",
                    node=node,
                    component=component,
                    expected=f"<= {limits.effective_errors_max} errors past FEC, "
                    f"effective BER <= {limits.effective_ber_max:.0e} ({speed})",
                    observed=", ".join(uncorrected),
                    message=f"{node} {component}: {', '.join(uncorrected)} at {at_speed}"
                    f"{_since(port)}: FEC ({port.fec or 'mode unknown'}) no longer hides the "
                    f"link's errors, the link layer retransmits{cable}",
                )
            )

        warn = limits.raw_ber_warn
        if warn is not None and port.raw_ber is not None and port.raw_ber > warn:
            findings.append(
                Finding(
                    check="link.ber",
                    severity="warning",
                    node=node,
                    component=component,
                    expected=f"raw BER <= {warn:.0e} ({speed})",
                    observed=f"raw BER {port.raw_ber:.0e}",
                    message=f"{node} {component}: raw physical BER {port.raw_ber:.0e} above "
                    f"{warn:.0e} at {at_speed}{_since(port)}; FEC still corrects it, but the "
                    f"cable or optic is marginal{cable}",
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
