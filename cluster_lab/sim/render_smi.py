"""`nvidia-smi` as the driver prints it (-q, --query-gpu CSV, topo -m, nvlink -s), from a node's
simulated hardware. Layouts follow real captures from driver 535 on 8x H100. Stdlib only."""

from __future__ import annotations

import time
from collections.abc import Callable

from .hw import SM_MAX_MHZ, Gpu, Hca, Nic, NodeHardware

# `nvidia-smi -q` puts every ":" in column 42 whatever the nesting.
_COLON_COLUMN = 42

# The board's PCIe sub-system id and the constants every HGX H100 capture shows.
_SUBSYSTEM_ID = "0x16C110DE"


def _kv(level: int, key: str, value: object | None = None) -> str:
    indent = "    " * level
    if value is None:
        return f"{indent}{key}"
    return f"{indent}{key:<{_COLON_COLUMN - len(indent)}}: {value}"


def _active(flag: bool) -> str:
    return "Active" if flag else "Not Active"


def _enabled(flag: bool) -> str:
    return "Enabled" if flag else "Disabled"


def _ecc_lines(gpu: Gpu) -> list[str]:
    v, a = gpu.ecc_volatile, gpu.ecc_aggregate
    return [
        _kv(1, "ECC Mode"),
        _kv(2, "Current", _enabled(gpu.ecc_enabled)),
        _kv(2, "Pending", _enabled(gpu.ecc_enabled)),
        _kv(1, "ECC Errors"),
        _kv(2, "Volatile"),
        _kv(3, "SRAM Correctable", v.sram_correctable),
        _kv(3, "SRAM Uncorrectable Parity", v.sram_uncorrectable_parity),
        _kv(3, "SRAM Uncorrectable SEC-DED", v.sram_uncorrectable_secded),
        _kv(3, "DRAM Correctable", v.dram_correctable),
        _kv(3, "DRAM Uncorrectable", v.dram_uncorrectable),
        _kv(2, "Aggregate"),
        _kv(3, "SRAM Correctable", a.sram_correctable),
        _kv(3, "SRAM Uncorrectable Parity", a.sram_uncorrectable_parity),
        _kv(3, "SRAM Uncorrectable SEC-DED", a.sram_uncorrectable_secded),
        _kv(3, "DRAM Correctable", a.dram_correctable),
        _kv(3, "DRAM Uncorrectable", a.dram_uncorrectable),
        _kv(3, "SRAM Threshold Exceeded", "No"),
        _kv(2, "Aggregate Uncorrectable SRAM Sources"),
        _kv(3, "SRAM L2", 0),
        _kv(3, "SRAM SM", a.sram_uncorrectable_parity + a.sram_uncorrectable_secded),
        _kv(3, "SRAM Microcontroller", 0),
        _kv(3, "SRAM PCIE", 0),
        _kv(3, "SRAM Other", 0),
        # Hopper retires rows, not pages: the driver reports page retirement as N/A.
        _kv(1, "Retired Pages"),
        _kv(2, "Single Bit ECC", "N/A"),
        _kv(2, "Double Bit ECC", "N/A"),
        _kv(2, "Pending Page Blacklist", "N/A"),
        _kv(1, "Remapped Rows"),
        _kv(2, "Correctable Error", gpu.remapped_correctable),
        _kv(2, "Uncorrectable Error", gpu.remapped_uncorrectable),
        _kv(2, "Pending", "Yes" if gpu.remap_pending else "No"),
        _kv(2, "Remapping Failure Occurred", "Yes" if gpu.remap_failure else "No"),
        _kv(2, "Bank Remap Availability Histogram"),
        _kv(3, "Max", f"{2560 - gpu.remapped_correctable - gpu.remapped_uncorrectable} bank(s)"),
        _kv(3, "High", "0 bank(s)"),
        _kv(3, "Partial", "0 bank(s)"),
        _kv(3, "Low", "0 bank(s)"),
        _kv(3, "None", "0 bank(s)"),
    ]


def _gpu_block(hw: NodeHardware, gpu: Gpu) -> list[str]:
    spec = gpu.spec
    bus = gpu.bus_id.split(":")[1]
    hot = gpu.thermal_slowdown
    # A GPU under thermal slowdown clocks down and draws less; the clocks show it.
    graphics_clock = 345 if hot else 86
    # An application clock set below the default (lab fault gpu-clock, as `nvidia-smi -ac`
    # leaves it): the GPU is held there under load and says why, as the real tool does.
    capped = gpu.clock_capped
    application_clock = _application_clock(gpu)
    lines = [
        f"GPU {gpu.bus_id}",
        _kv(1, "Product Name", spec.name),
        _kv(1, "Product Brand", "NVIDIA"),
        _kv(1, "Product Architecture", "Hopper"),
        _kv(1, "Display Mode", "Enabled"),
        _kv(1, "Display Active", "Disabled"),
        _kv(1, "Persistence Mode", _enabled(gpu.persistence_mode)),
        _kv(1, "Addressing Mode", "None"),
        _kv(1, "MIG Mode"),
        _kv(2, "Current", "Disabled"),
        _kv(2, "Pending", "Disabled"),
        _kv(1, "Accounting Mode", "Disabled"),
        _kv(1, "Accounting Mode Buffer Size", 4000),
        _kv(1, "Driver Model"),
        _kv(2, "Current", "N/A"),
        _kv(2, "Pending", "N/A"),
        _kv(1, "Serial Number", gpu.serial),
        _kv(1, "GPU UUID", gpu.uuid),
        _kv(1, "Minor Number", gpu.minor),
        _kv(1, "VBIOS Version", spec.vbios),
        _kv(1, "MultiGPU Board", "No"),
        _kv(1, "Board ID", f"0x{bus.lower()}00"),
        _kv(1, "Board Part Number", spec.board_part),
        _kv(1, "GPU Part Number", spec.gpu_part),
        _kv(1, "FRU Part Number", "N/A"),
        _kv(1, "Module ID", gpu.module_id),
        _kv(1, "Inforom Version"),
        _kv(2, "Image Version", "G520.0200.00.05"),
        _kv(2, "OEM Object", "2.1"),
        _kv(2, "ECC Object", "7.16"),
        _kv(2, "Power Management Object", "N/A"),
        _kv(1, "Inforom BBX Object Flush"),
        _kv(2, "Latest Timestamp", "N/A"),
        _kv(2, "Latest Duration", "N/A"),
        _kv(1, "GPU Operation Mode"),
        _kv(2, "Current", "N/A"),
        _kv(2, "Pending", "N/A"),
        _kv(1, "GSP Firmware Version", hw.driver_version),
        _kv(1, "GPU Virtualization Mode"),
        _kv(2, "Virtualization Mode", "None"),
        _kv(2, "Host VGPU Mode", "N/A"),
        _kv(1, "GPU Reset Status"),
        _kv(2, "Reset Required", "Yes" if gpu.ecc_volatile.uncorrectable else "No"),
        _kv(2, "Drain and Reset Recommended", "No"),
        _kv(1, "IBMNPU"),
        _kv(2, "Relaxed Ordering Mode", "N/A"),
        _kv(1, "PCI"),
        _kv(2, "Bus", f"0x{bus}"),
        _kv(2, "Device", "0x00"),
        _kv(2, "Domain", "0x0000"),
        _kv(2, "Device Id", spec.device_id),
        _kv(2, "Bus Id", gpu.bus_id),
        _kv(2, "Sub System Id", _SUBSYSTEM_ID),
        _kv(2, "GPU Link Info"),
        _kv(3, "PCIe Generation"),
        _kv(4, "Max", gpu.pcie_gen_max),
        _kv(4, "Current", gpu.pcie_gen_current),
        _kv(4, "Device Current", gpu.pcie_gen_current),
        _kv(4, "Device Max", gpu.pcie_gen_max),
        _kv(4, "Host Max", gpu.pcie_gen_max),
        _kv(3, "Link Width"),
        _kv(4, "Max", f"{gpu.pcie_width_max}x"),
        _kv(4, "Current", f"{gpu.pcie_width_current}x"),
        _kv(2, "Bridge Chip"),
        _kv(3, "Type", "N/A"),
        _kv(3, "Firmware", "N/A"),
        _kv(2, "Replays Since Reset", 0),
        _kv(2, "Replay Number Rollovers", 0),
        _kv(2, "Tx Throughput", "0 KB/s"),
        _kv(2, "Rx Throughput", "0 KB/s"),
        _kv(2, "Atomic Caps Inbound", "N/A"),
        _kv(2, "Atomic Caps Outbound", "FETCHADD_32 FETCHADD_64 SWAP_32 SWAP_64 CAS_32 CAS_64"),
        _kv(1, "Fan Speed", "N/A"),
        _kv(1, "Performance State", "P0"),
        _kv(1, "Clocks Event Reasons"),
        _kv(2, "Idle", _active(not hot)),
        _kv(2, "Applications Clocks Setting", _active(capped)),
        _kv(2, "SW Power Cap", "Not Active"),
        _kv(2, "HW Slowdown", _active(hot)),
        _kv(3, "HW Thermal Slowdown", _active(hot)),
        _kv(3, "HW Power Brake Slowdown", "Not Active"),
        _kv(2, "Sync Boost", "Not Active"),
        _kv(2, "SW Thermal Slowdown", _active(hot)),
        _kv(2, "Display Clock Setting", "Not Active"),
        _kv(1, "Sparse Operation Mode", "Disabled"),
        _kv(1, "FB Memory Usage"),
        _kv(2, "Total", f"{spec.memory_mib} MiB"),
        _kv(2, "Reserved", f"{spec.reserved_mib} MiB"),
        _kv(2, "Used", "0 MiB"),
        _kv(2, "Free", f"{spec.memory_mib - spec.reserved_mib} MiB"),
        _kv(1, "BAR1 Memory Usage"),
        _kv(2, "Total", "131072 MiB"),
        _kv(2, "Used", "1 MiB"),
        _kv(2, "Free", "131071 MiB"),
        _kv(1, "Conf Compute Protected Memory Usage"),
        _kv(2, "Total", "0 MiB"),
        _kv(2, "Used", "0 MiB"),
        _kv(2, "Free", "0 MiB"),
        _kv(1, "Compute Mode", "Default"),
        _kv(1, "Utilization"),
        _kv(2, "Gpu", "0 %"),
        _kv(2, "Memory", "0 %"),
        _kv(2, "Encoder", "0 %"),
        _kv(2, "Decoder", "0 %"),
        _kv(2, "JPEG", "0 %"),
        _kv(2, "OFA", "0 %"),
        _kv(1, "Encoder Stats"),
        _kv(2, "Active Sessions", 0),
        _kv(2, "Average FPS", 0),
        _kv(2, "Average Latency", 0),
        _kv(1, "FBC Stats"),
        _kv(2, "Active Sessions", 0),
        _kv(2, "Average FPS", 0),
        _kv(2, "Average Latency", 0),
        *_ecc_lines(gpu),
        _kv(1, "Temperature"),
        _kv(2, "GPU Current Temp", f"{gpu.temperature_c} C"),
        # H100 reports limits relative to the current temperature ("T.Limit").
        _kv(2, "GPU T.Limit Temp", f"{gpu.slowdown_temp_c - gpu.temperature_c} C"),
        _kv(2, "GPU Shutdown T.Limit Temp", "-8 C"),
        _kv(2, "GPU Slowdown T.Limit Temp", "-2 C"),
        _kv(2, "GPU Max Operating T.Limit Temp", "0 C"),
        _kv(2, "GPU Target Temperature", "N/A"),
        _kv(2, "Memory Current Temp", f"{gpu.memory_temperature_c} C"),
        _kv(2, "Memory Max Operating T.Limit Temp", "0 C"),
        _kv(1, "GPU Power Readings"),
        _kv(2, "Power Draw", f"{gpu.power_draw_w:.2f} W"),
        _kv(2, "Current Power Limit", f"{spec.power_limit_w:.2f} W"),
        _kv(2, "Requested Power Limit", f"{spec.power_limit_w:.2f} W"),
        _kv(2, "Default Power Limit", f"{spec.power_limit_w:.2f} W"),
        _kv(2, "Min Power Limit", "200.00 W"),
        _kv(2, "Max Power Limit", f"{spec.power_limit_w:.2f} W"),
        _kv(1, "Module Power Readings"),
        _kv(2, "Power Draw", "N/A"),
        _kv(2, "Current Power Limit", "N/A"),
        _kv(2, "Requested Power Limit", "N/A"),
        _kv(2, "Default Power Limit", "N/A"),
        _kv(2, "Min Power Limit", "N/A"),
        _kv(2, "Max Power Limit", "N/A"),
        _kv(1, "Clocks"),
        _kv(2, "Graphics", f"{graphics_clock} MHz"),
        _kv(2, "SM", f"{graphics_clock} MHz"),
        _kv(2, "Memory", "2619 MHz"),
        _kv(2, "Video", "765 MHz"),
        _kv(1, "Applications Clocks"),
        _kv(2, "Graphics", f"{application_clock} MHz"),
        _kv(2, "Memory", "2619 MHz"),
        _kv(1, "Default Applications Clocks"),
        _kv(2, "Graphics", "1980 MHz"),
        _kv(2, "Memory", "2619 MHz"),
        _kv(1, "Deferred Clocks"),
        _kv(2, "Memory", "N/A"),
        _kv(1, "Max Clocks"),
        _kv(2, "Graphics", "1980 MHz"),
        _kv(2, "SM", "1980 MHz"),
        _kv(2, "Memory", "2619 MHz"),
        _kv(2, "Video", "1545 MHz"),
        _kv(1, "Max Customer Boost Clocks"),
        _kv(2, "Graphics", "1980 MHz"),
        _kv(1, "Clock Policy"),
        _kv(2, "Auto Boost", "N/A"),
        _kv(2, "Auto Boost Default", "N/A"),
        _kv(1, "Voltage"),
        _kv(2, "Graphics", "670.000 mV"),
        _kv(1, "Fabric"),
        _kv(2, "State", gpu.fabric_state),
        _kv(2, "Status", gpu.fabric_status),
        _kv(1, "Processes", "None"),
    ]
    return lines


def render_query(hw: NodeHardware, now: float | None = None) -> str:
    """`nvidia-smi -q`: the full per-GPU report."""
    stamp = time.strftime("%a %b %d %H:%M:%S %Y", time.localtime(now))
    gpus = hw.present_gpus()
    lines = [
        "",
        "==============NVSMI LOG==============",
        "",
        _kv(0, "Timestamp", stamp),
        _kv(0, "Driver Version", hw.driver_version),
        _kv(0, "CUDA Version", hw.cuda_version),
        "",
        _kv(0, "Attached GPUs", len(gpus)),
    ]
    for n, gpu in enumerate(gpus):
        if n:
            lines.append("")
        lines.extend(_gpu_block(hw, gpu))
    return "\n".join(lines) + "\n"


# --query-gpu fields: name -> (unit shown in the header and after the value, value getter).
# Aliases nvidia-smi accepts map to the same entry.
_Getter = Callable[[NodeHardware, Gpu, int], str]


def _sm_clock(hw: NodeHardware, gpu: Gpu) -> str:
    """A GPU in thermal slowdown sits at 345 MHz. A straggler node (lab fault slow-node) runs
    its GPUs at FACTOR of the boost clock, as a node in HW slowdown (power brake, a failing
    PSU) does: the clock is what makes its collectives slow, and nvidia-smi shows it without
    the job's help."""
    if gpu.thermal_slowdown:
        return "345"
    return str(min(round(SM_MAX_MHZ * min(hw.slow_factor, 1.0)), _application_clock(gpu)))


def _application_clock(gpu: Gpu) -> int:
    """The application graphics clock: the default (the maximum) unless `nvidia-smi -ac` (lab
    fault gpu-clock) set it lower."""
    return gpu.sm_clock_cap_mhz if gpu.clock_capped else SM_MAX_MHZ


def _ecc(kind: str, scope: str) -> _Getter:
    def get(hw: NodeHardware, g: Gpu, i: int) -> str:
        if not g.ecc_enabled:
            return "[N/A]"
        counts = g.ecc_volatile if scope == "volatile" else g.ecc_aggregate
        return str(counts.uncorrectable if kind == "uncorrected" else counts.correctable)

    return get


QUERY_FIELDS: dict[str, tuple[str, _Getter]] = {
    "index": ("", lambda hw, g, i: str(i)),
    "name": ("", lambda hw, g, i: g.spec.name),
    "serial": ("", lambda hw, g, i: g.serial),
    "uuid": ("", lambda hw, g, i: g.uuid),
    "pci.bus_id": ("", lambda hw, g, i: g.bus_id),
    "pci.device_id": ("", lambda hw, g, i: g.spec.device_id),
    "driver_version": ("", lambda hw, g, i: hw.driver_version),
    "count": ("", lambda hw, g, i: str(len(hw.present_gpus()))),
    "persistence_mode": ("", lambda hw, g, i: _enabled(g.persistence_mode)),
    "temperature.gpu": ("", lambda hw, g, i: str(g.temperature_c)),
    "temperature.memory": ("", lambda hw, g, i: str(g.memory_temperature_c)),
    "memory.total": ("MiB", lambda hw, g, i: str(g.spec.memory_mib)),
    "memory.used": ("MiB", lambda hw, g, i: "0"),
    "memory.free": ("MiB", lambda hw, g, i: str(g.spec.memory_mib - g.spec.reserved_mib)),
    "power.draw": ("W", lambda hw, g, i: f"{g.power_draw_w:.2f}"),
    "power.limit": ("W", lambda hw, g, i: f"{g.spec.power_limit_w:.2f}"),
    "utilization.gpu": ("%", lambda hw, g, i: "0"),
    "pcie.link.gen.current": ("", lambda hw, g, i: str(g.pcie_gen_current)),
    "pcie.link.gen.max": ("", lambda hw, g, i: str(g.pcie_gen_max)),
    "pcie.link.width.current": ("", lambda hw, g, i: str(g.pcie_width_current)),
    "pcie.link.width.max": ("", lambda hw, g, i: str(g.pcie_width_max)),
    "ecc.mode.current": ("", lambda hw, g, i: _enabled(g.ecc_enabled)),
    "ecc.mode.pending": ("", lambda hw, g, i: _enabled(g.ecc_enabled)),
    "ecc.errors.uncorrected.volatile.total": ("", _ecc("uncorrected", "volatile")),
    "ecc.errors.uncorrected.aggregate.total": ("", _ecc("uncorrected", "aggregate")),
    "ecc.errors.corrected.volatile.total": ("", _ecc("corrected", "volatile")),
    "ecc.errors.corrected.aggregate.total": ("", _ecc("corrected", "aggregate")),
    "retired_pages.single_bit_ecc.count": ("", lambda hw, g, i: "[N/A]"),
    "retired_pages.double_bit.count": ("", lambda hw, g, i: "[N/A]"),
    "retired_pages.pending": ("", lambda hw, g, i: "[N/A]"),
    "remapped_rows.correctable": ("", lambda hw, g, i: str(g.remapped_correctable)),
    "remapped_rows.uncorrectable": ("", lambda hw, g, i: str(g.remapped_uncorrectable)),
    "remapped_rows.pending": ("", lambda hw, g, i: "Yes" if g.remap_pending else "No"),
    "remapped_rows.failure": ("", lambda hw, g, i: "Yes" if g.remap_failure else "No"),
    "clocks_event_reasons.hw_thermal_slowdown": (
        "",
        lambda hw, g, i: _active(g.thermal_slowdown),
    ),
    "clocks_event_reasons.sw_thermal_slowdown": (
        "",
        lambda hw, g, i: _active(g.thermal_slowdown),
    ),
    "clocks_event_reasons.hw_slowdown": (
        "",
        lambda hw, g, i: _active(g.thermal_slowdown or hw.slow_factor < 1),
    ),
    "clocks.sm": ("MHz", lambda hw, g, i: _sm_clock(hw, g)),
    "clocks.max.sm": ("MHz", lambda hw, g, i: str(SM_MAX_MHZ)),
    "clocks.applications.graphics": ("MHz", lambda hw, g, i: str(_application_clock(g))),
    "clocks.default_applications.graphics": ("MHz", lambda hw, g, i: str(SM_MAX_MHZ)),
    "clocks_event_reasons.applications_clocks_setting": (
        "",
        lambda hw, g, i: _active(g.clock_capped),
    ),
    "fabric.state": ("", lambda hw, g, i: g.fabric_state),
    "fabric.status": ("", lambda hw, g, i: g.fabric_status),
}
_ALIASES = {
    "gpu_name": "name",
    "gpu_serial": "serial",
    "gpu_uuid": "uuid",
    "gpu_bus_id": "pci.bus_id",
    "clocks_throttle_reasons.hw_thermal_slowdown": "clocks_event_reasons.hw_thermal_slowdown",
    "clocks_throttle_reasons.sw_thermal_slowdown": "clocks_event_reasons.sw_thermal_slowdown",
    "clocks_throttle_reasons.hw_slowdown": "clocks_event_reasons.hw_slowdown",
    "clocks_throttle_reasons.applications_clocks_setting": (
        "clocks_event_reasons.applications_clocks_setting"
    ),
    "clocks.applications.gr": "clocks.applications.graphics",
    "clocks.default_applications.gr": "clocks.default_applications.graphics",
    "clocks.current.sm": "clocks.sm",
}


class QueryError(Exception):
    """A --query-gpu request nvidia-smi would refuse; `str()` is its message, `exit_code` its
    status."""

    def __init__(self, message: str, exit_code: int = 2) -> None:
        super().__init__(message)
        self.exit_code = exit_code


def render_query_csv(
    hw: NodeHardware, fields: list[str], *, header: bool = True, units: bool = True
) -> str:
    """`nvidia-smi --query-gpu=FIELDS --format=csv[,noheader][,nounits]`."""
    resolved = []
    for f in fields:
        key = _ALIASES.get(f, f)
        if key not in QUERY_FIELDS:
            raise QueryError(f'Field "{f}" is not a valid field to query.\n\n')
        resolved.append((f, *QUERY_FIELDS[key]))
    out = []
    if header:
        out.append(", ".join(f"{f} [{unit}]" if unit and units else f for f, unit, _ in resolved))
    for i, gpu in enumerate(hw.present_gpus()):
        values = []
        for _, unit, get in resolved:
            value = get(hw, gpu, i)
            values.append(f"{value} {unit}" if unit and units and value[:1] != "[" else value)
        out.append(", ".join(values))
    return "\n".join(out) + "\n"


_TOPO_LEGEND = """
Legend:

  X    = Self
  SYS  = Connection traversing PCIe as well as the SMP interconnect between NUMA nodes (e.g., QPI/UPI)
  NODE = Connection traversing PCIe as well as the interconnect between PCIe Host Bridges within a NUMA node
  PHB  = Connection traversing PCIe as well as a PCIe Host Bridge (typically the CPU)
  PXB  = Connection traversing multiple PCIe bridges (without traversing the PCIe Host Bridge)
  PIX  = Connection traversing at most a single PCIe bridge
  NV#  = Connection traversing a bonded set of # NVLinks
"""  # noqa: E501 - the legend is nvidia-smi's text, line for line


def _paired(nic: Hca | Nic, gpu: Gpu) -> bool:
    return isinstance(nic, Hca) and nic.gpu_minor == gpu.minor


def render_topo(hw: NodeHardware) -> str:
    """`nvidia-smi topo -m`: tab-separated matrix, NIC legend. GPUs reach each other over the
    NVSwitches (NV<active links>); a NIC is PIX from the GPU behind its PCIe switch."""
    gpus = hw.present_gpus()
    nics: list[Hca | Nic] = [*hw.hcas, *hw.other_nics]
    nics.sort(key=lambda n: int(n.device.split("_")[1]))

    def nv(a: Gpu, b: Gpu) -> str:
        links = min(a.spec.nvlinks - len(a.nvlinks_down), b.spec.nvlinks - len(b.nvlinks_down))
        return f"NV{links}" if links > 0 else ("NODE" if a.numa_node == b.numa_node else "SYS")

    def pcie(numa_a: int, numa_b: int, paired: bool) -> str:
        if paired:
            return "PIX"
        return "NODE" if numa_a == numa_b else "SYS"

    head = ["", *(f"GPU{i}" for i in range(len(gpus))), *(f"NIC{i}" for i in range(len(nics)))]
    head += ["CPU Affinity", "NUMA Affinity", "GPU NUMA ID"]
    rows = ["\t".join(head)]
    for i, g in enumerate(gpus):
        cells = [f"GPU{i}"]
        cells += [" X " if h is g else nv(g, h) for h in gpus]
        cells += [pcie(g.numa_node, n.numa_node, _paired(n, g)) for n in nics]
        cells += [hw.cpu_affinity[g.numa_node], str(g.numa_node), "", "N/A"]
        rows.append("\t".join(cells))
    for j, n in enumerate(nics):
        cells = [f"NIC{j}"]
        cells += [pcie(n.numa_node, g.numa_node, _paired(n, g)) for g in gpus]
        cells += [" X " if m is n else pcie(n.numa_node, m.numa_node, False) for m in nics]
        cells += ["", "", "", ""]
        rows.append("\t".join(cells))
    legend = [f"  NIC{j}: {n.device}" for j, n in enumerate(nics)]
    text = "\n".join(rows) + "\n" + _TOPO_LEGEND
    if nics:
        text += "\nNIC Legend:\n\n" + "\n".join(legend) + "\n"
    return text


def render_nvlink_status(hw: NodeHardware) -> str:
    """`nvidia-smi nvlink -s`: one block per GPU, each link's rate or `<inactive>`."""
    lines = []
    for i, g in enumerate(hw.present_gpus()):
        lines.append(f"GPU {i}: {g.spec.name} (UUID: {g.uuid})")
        for link in range(g.spec.nvlinks):
            rate = "<inactive>" if link in g.nvlinks_down else f"{g.spec.nvlink_gbps:.3f} GB/s"
            lines.append(f"\t Link {link}: {rate}")
    return "\n".join(lines) + "\n"


def render_summary(hw: NodeHardware, now: float | None = None) -> str:
    """Bare `nvidia-smi`: the summary table as driver 550 draws it."""
    stamp = time.strftime("%a %b %d %H:%M:%S %Y", time.localtime(now))
    rule = "+" + "-" * 89 + "+"
    cells = "+" + "-" * 41 + "+" + "-" * 24 + "+" + "-" * 22 + "+"
    lines = [
        f"{stamp}       ",
        rule,
        f"| NVIDIA-SMI {hw.driver_version:<23}Driver Version: {hw.driver_version:<15}"
        f"CUDA Version: {hw.cuda_version:<9}|",
        "|" + "-" * 41 + "+" + "-" * 24 + "+" + "-" * 22 + "+",
        "| GPU  Name                 Persistence-M | Bus-Id          Disp.A "
        "| Volatile Uncorr. ECC |",
        "| Fan  Temp   Perf          Pwr:Usage/Cap |           Memory-Usage "
        "| GPU-Util  Compute M. |",
        f"|{'':41}|{'':24}|{'MIG M.':>21} |",
        "|" + "=" * 41 + "+" + "=" * 24 + "+" + "=" * 22 + "|",
    ]
    for i, g in enumerate(hw.present_gpus()):
        spec = g.spec
        persistence = "On  " if g.persistence_mode else "Off "
        ecc = str(g.ecc_volatile.uncorrectable) if g.ecc_enabled else "N/A"
        power = f"{round(g.power_draw_w)}W / {round(spec.power_limit_w):>4}W"
        lines += [
            f"|{i:>4}  {spec.name:<31}{persistence}|   {g.bus_id} Off |{ecc:>21} |",
            f"| N/A  {g.temperature_c:>3}C    P0{power:>24} |"
            f"{0:>8}MiB / {spec.memory_mib:>6}MiB |{0:>7}%{'Default':>13} |",
            f"|{'':41}|{'':24}|{'Disabled':>21} |",
            cells,
        ]
    lines += [
        " " * 91,
        rule,
        f"| {'Processes:':<88}|",
        f"|  GPU   GI   CI        PID   Type   Process name{'GPU Memory':>40} |",
        f"|        ID   ID{'Usage':>68}{'':6}|",
        "|" + "=" * 89 + "|",
        f"|  {'No running processes found':<87}|",
        rule,
    ]
    return "\n".join(lines) + "\n"


def render_list(hw: NodeHardware) -> str:
    """`nvidia-smi -L`."""
    return "".join(
        f"GPU {i}: {g.spec.name} (UUID: {g.uuid})\n" for i, g in enumerate(hw.present_gpus())
    )
