"""`dcgmi diag -r 1|2|3` as DCGM 3.x prints its result table, and the kernel log's NVRM Xid lines,
from a node's simulated hardware. Stdlib only."""

from __future__ import annotations

import time

from .hw import Gpu, NodeHardware

_LEFT = 25
_RIGHT = 46


def _row(left: str, right: str) -> list[str]:
    # DCGM wraps long results onto continuation rows with an empty left cell.
    out = []
    words = right.split(" ")
    line = ""
    for w in words:
        if line and len(line) + 1 + len(w) > _RIGHT:
            out.append(line)
            line = w
        else:
            line = f"{line} {w}" if line else w
    out.append(line)
    return [
        f"| {(left if i == 0 else ''):<{_LEFT}} | {text:<{_RIGHT}} |" for i, text in enumerate(out)
    ]


def _section(name: str, closed: bool) -> str:
    label = f"-----  {name}  ".ljust(_LEFT + 2, "-")
    if closed:
        return f"+{label}+{'-' * (_RIGHT + 2)}+"
    return f"|{label}+{'-' * (_RIGHT + 2)}|"


def _gpu_result(
    gpus: list[Gpu], failing: dict[int, str], skip: bool = False
) -> tuple[list[str], list[str]]:
    """Result cells for a per-GPU test: "Pass - All", or Pass/Fail lists, plus warnings."""
    if skip:
        return ["Skip - All"], []
    if not failing:
        return ["Pass - All"], []
    indices = {g.minor: i for i, g in enumerate(gpus)}
    passed = [str(indices[g.minor]) for g in gpus if g.minor not in failing]
    cells = []
    if passed:
        cells.append(f"Pass - GPU{'s' if len(passed) > 1 else ''}: {', '.join(passed)}")
    failed = sorted(indices[m] for m in failing)
    cells.append(f"Fail - GPU{'s' if len(failed) > 1 else ''}: {', '.join(map(str, failed))}")
    warnings = [f"GPU {indices[m]} {why}" for m, why in sorted(failing.items())]
    return cells, warnings


def render_diag(hw: NodeHardware, level: int) -> str:
    """The table `dcgmi diag -r LEVEL` prints; failing GPUs come from the hardware state."""
    if level not in (1, 2, 3, 4):
        raise ValueError(f"dcgmi diag run level must be 1-4, not {level}")
    gpus = hw.present_gpus()
    ecc_bad = {
        g.minor: (
            f"A DBE has occurred since the last time the GPU was reset. "
            f"{g.ecc_volatile.uncorrectable} volatile uncorrectable ECC errors."
        )
        for g in gpus
        if g.ecc_volatile.uncorrectable
    }
    remap_bad = {
        g.minor: "has pending row remappings; reset the GPU to activate them."
        for g in gpus
        if g.remap_pending or g.remap_failure
    }
    hot = {
        g.minor: (
            f"Thermal violations totaling {g.temperature_c - g.slowdown_temp_c + 1}.0 seconds "
            f"(temperature {g.temperature_c} C)."
        )
        for g in gpus
        if g.thermal_slowdown
    }
    pcie_bad = {
        g.minor: (
            f"PCIe link is Gen{g.pcie_gen_current} x{g.pcie_width_current}, "
            f"expected Gen{g.pcie_gen_max} x{g.pcie_width_max}."
        )
        for g in gpus
        if g.pcie_gen_current < g.pcie_gen_max or g.pcie_width_current < g.pcie_width_max
    }
    nvlink_bad = {
        g.minor: f"NvLink {', '.join(map(str, g.nvlinks_down))} inactive."
        for g in gpus
        if g.nvlinks_down
    }
    out = [
        "Successfully ran diagnostic for group.",
        f"+{'-' * (_LEFT + 2)}+{'-' * (_RIGHT + 2)}+",
        *_row("Diagnostic", "Result"),
        f"+{'=' * (_LEFT + 2)}+{'=' * (_RIGHT + 2)}+",
        _section("Metadata", closed=False),
        *_row("DCGM Version", hw.dcgm_version),
        *_row("Driver Version Detected", hw.driver_version),
        *_row("GPU Device IDs Detected", ",".join(g.spec.dcgm_device_id for g in gpus)),
        _section("Deployment", closed=False),
    ]
    deployment = [
        ("Denylist", "Pass"),
        ("NVML Library", "Pass"),
        ("CUDA Main Library", "Pass"),
        ("Permissions and OS Blocks", "Pass"),
        (
            "Persistence Mode",
            "Pass" if all(g.persistence_mode for g in gpus) else "Fail",
        ),
        ("Environment Variables", "Pass"),
        ("Page Retirement/Row Remap", "Fail" if ecc_bad or remap_bad else "Pass"),
        ("Graphics Processes", "Pass"),
        ("Inforom", "Pass"),
    ]
    for name, result in deployment:
        out += _row(name, result)
        if name == "Page Retirement/Row Remap":
            for minor, why in sorted({**remap_bad, **ecc_bad}.items()):
                index = [g.minor for g in gpus].index(minor)
                out += _row("Warning", f"GPU {index} {why}")
    tests: list[tuple[str, list[tuple[str, dict[int, str], bool]]]] = []
    if level >= 2:
        tests.append(("Integration", [("PCIe", {**pcie_bad, **nvlink_bad}, False)]))
        tests.append(("Hardware", [("GPU Memory", ecc_bad, False)]))
    if level >= 3:
        tests[-1][1].append(("Diagnostic", {**ecc_bad, **hot}, False))
        tests.append(
            (
                "Stress",
                [
                    ("Targeted Stress", hot, False),
                    ("Targeted Power", hot, False),
                    ("Memory Bandwidth", ecc_bad, False),
                    ("EUD Test", {}, True),
                ],
            )
        )
    for category, rows in tests:
        out.append(_section(category, closed=True))
        for name, failing, skip in rows:
            cells, warnings = _gpu_result(gpus, failing, skip)
            for i, cell in enumerate(cells):
                out += _row(name if i == 0 else "", cell)
            for w in warnings:
                out += _row("Warning", w)
    out.append(f"+{'-' * (_LEFT + 2)}+{'-' * (_RIGHT + 2)}+")
    return "\n".join(out) + "\n"


def render_discovery(hw: NodeHardware, nvswitches: int = 4) -> str:
    """`dcgmi discovery -l`: the GPUs the host engine sees, then the HGX board's NVSwitches."""
    gpus = hw.present_gpus()
    rule = f"+{'-' * 8}+{'-' * 70}+"
    lines = [
        f"{len(gpus)} GPU{'s' if len(gpus) != 1 else ''} found.",
        rule,
        f"| {'GPU ID':<6} | {'Device Information':<68} |",
        rule,
    ]
    for i, g in enumerate(gpus):
        lines.append(f"| {i:<6} | {'Name: ' + g.spec.name:<68} |")
        lines.append(f"| {'':<6} | {'PCI Bus ID: ' + g.bus_id:<68} |")
        lines.append(f"| {'':<6} | {'Device UUID: ' + g.uuid:<68} |")
        lines.append(rule)
    switch_rule = "+-----------+"
    lines.append(f"{nvswitches} NvSwitch{'es' if nvswitches != 1 else ''} found.")
    lines += [switch_rule, "| Switch ID |", switch_rule]
    lines += [f"| {n:<9} |" for n in range(nvswitches)]
    lines.append(switch_rule)
    return "\n".join(lines) + "\n"


def diag_failed(hw: NodeHardware, level: int) -> bool:
    """Whether `dcgmi diag` exits non-zero: any Fail in the table."""
    rows = [line for line in render_diag(hw, level).splitlines() if line.startswith("| ")]
    return any(row.split("|")[2].strip().startswith("Fail") for row in rows)


# What the driver writes after "NVRM: Xid (PCI:...): CODE, " for the Xids the lab injects.
XID_MESSAGES = {
    13: "pid=2417, name=python3, Graphics SM Warp Exception on (GPC 1, TPC 0, SM 1): "
    "Out Of Range Address",
    31: "pid=2417, name=python3, Ch 00000010, intr 10000000. MMU Fault: ENGINE GRAPHICS "
    "GPCCLIENT_T1_0 faulted @ 0x7f2e_a0000000. Fault is of type FAULT_PDE ACCESS_TYPE_VIRT_READ",
    43: "pid=2417, name=python3, Ch 00000008",
    45: "pid=2417, name=python3, Ch 00000010",
    48: "An uncorrectable double bit error (DBE) has been detected on GPU in the framebuffer "
    "at partition 5, subpartition 0.",
    63: "Row Remapper: New row marked for remapping, reset gpu to activate.",
    64: "Row Remapper Error: Row remapping failed, the GPU needs to be reset.",
    74: "NVLink: fatal error detected on link 3(0x0, 0x0, 0x10000, 0x0, 0x0, 0x0, 0x0)",
    79: "pid='<unknown>', name=<unknown>, GPU has fallen off the bus.",
    92: "High single-bit ECC error rate",
    94: "pid=2417, name=python3, Contained: SM (0x1). RST: No, D-RST: No",
    95: "pid=2417, name=python3, Uncontained: FBHUB. RST: Yes, D-RST: No",
    119: "Timeout after 6s of waiting for RPC response from GPU0 GSP! Expected function 76 "
    "(GSP_RM_CONTROL) (0x2080014b 0x5).",
    123: "SPI PMU RPC write fail",
}


def xid_message(code: int) -> str:
    return XID_MESSAGES.get(code, f"pid='<unknown>', name=<unknown>, Xid {code} event.")


def kernel_log_events(hw: NodeHardware) -> list[tuple[float, str]]:
    """The simulated kernel ring buffer: driver load lines, then every Xid, by time since boot."""
    events: list[tuple[float, str]] = [
        (
            4.512087,
            "nvidia: loading out-of-tree module taints kernel.",
        ),
        (
            4.603344,
            f"NVRM: loading NVIDIA UNIX Open Kernel Module for x86_64  {hw.driver_version}  "
            "Release Build  (dvs-builder@U16-I3-B03-4-3)  Thu Feb 22 01:20:03 UTC 2024",
        ),
    ]
    if "nvidia_peermem" in hw.modules:
        events.append((9.871022, "nvidia-peermem nv_mem_init: module loaded"))
    for gpu in hw.gpus:
        for since_boot, code in gpu.xids:
            events.append(
                (since_boot, f"NVRM: Xid (PCI:{gpu.short_bus_id}): {code}, {xid_message(code)}")
            )
    # lab fault link-flap: mlx5e_update_carrier's lines for the HCA's IPoIB netdev, down and
    # back a second later (or half a period, for a fast flap).
    now = time.time()
    for hca in hw.hcas:
        netdev = f"ibp{int(hca.bus_id.split(':')[1], 16)}s0"
        for down in hca.flaps(now):
            since_boot = down - hw.boot_time
            if since_boot < 0:
                continue
            back = since_boot + min(1.0, hca.flap_period / 2)
            events.append((since_boot, f"mlx5_core {hca.bus_id} {netdev}: Link down"))
            if back <= now - hw.boot_time:
                events.append((back, f"mlx5_core {hca.bus_id} {netdev}: Link up"))
    return sorted(events)


def render_kernel_log(hw: NodeHardware, style: str = "dmesg", hostname: str | None = None) -> str:
    """The kernel log as `dmesg` (style "dmesg"), `dmesg -T` ("ctime") or `journalctl -k`
    ("journal") shows it."""
    host = hostname or hw.name
    out = []
    for since_boot, message in kernel_log_events(hw):
        stamp = hw.boot_time + since_boot
        if style == "dmesg":
            out.append(f"[{since_boot:12.6f}] {message}")
        elif style == "ctime":
            out.append(
                f"[{time.strftime('%a %b %d %H:%M:%S %Y', time.localtime(stamp))}] {message}"
            )
        elif style == "journal":
            out.append(
                f"{time.strftime('%b %d %H:%M:%S', time.localtime(stamp))} {host} kernel: {message}"
            )
        else:
            raise ValueError(f"unknown kernel log style {style!r}")
    return "\n".join(out) + ("\n" if out else "")
