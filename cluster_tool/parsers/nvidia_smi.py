"""`nvidia-smi -q`: the per-GPU health a node check needs (identity, ECC, retired pages,
remapped rows, clock event reasons, PCIe link, temperatures, fabric state) as typed records."""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass, field

from cluster_tool.parsers.base import ParseError, parser
from cluster_tool.parsers.pci import normalize_pci_bus_id

__all__ = [
    "ClockEventReasons",
    "Clocks",
    "EccCounts",
    "FabricInfo",
    "GpuInfo",
    "GpuProcess",
    "NvidiaSmiReport",
    "RemappedRows",
    "RetiredPages",
    "Temperatures",
    "parse_gpu_section",
    "parse_nvidia_smi_q",
]

BANNER = "==============NVSMI LOG=============="
NO_DEVICES = "No devices were found"

# What nvidia-smi prints where a value does not apply or cannot be read.
_NOT_AVAILABLE = frozenset(
    {
        "N/A",
        "[N/A]",
        "Not Supported",
        "[Not Supported]",
        "Not Available",
        "Unknown Error",
        "[Unknown Error]",
        "Requested functionality has been deprecated",
    }
)
_TRUE_WORDS = frozenset({"Enabled", "Yes", "Active", "True", "On"})
_FALSE_WORDS = frozenset({"Disabled", "No", "Not Active", "False", "Off"})


# --------------------------------------------------------------------------- records


@dataclass(frozen=True)
class EccCounts:
    """One ECC counter set: volatile (since driver load) or aggregate (lifetime).

    Drivers print one of three layouts: SRAM/DRAM with the SRAM uncorrectable count split
    into parity and SEC-DED (R535+ on Hopper), SRAM/DRAM unsplit (Ampere era), or per-unit
    Single Bit / Double Bit tables (pre-Ampere). `correctable` and `uncorrectable` are the
    totals whichever layout was printed, None when the driver printed no numbers."""

    correctable: int | None = None
    uncorrectable: int | None = None
    sram_correctable: int | None = None
    sram_uncorrectable: int | None = None
    sram_uncorrectable_parity: int | None = None
    sram_uncorrectable_secded: int | None = None
    dram_correctable: int | None = None
    dram_uncorrectable: int | None = None
    single_bit_total: int | None = None
    double_bit_total: int | None = None
    sram_threshold_exceeded: bool | None = None


@dataclass(frozen=True)
class RetiredPages:
    """Page retirement (pre-Ampere mechanism; Hopper prints N/A and uses row remapping)."""

    single_bit_ecc: int | None = None
    double_bit_ecc: int | None = None
    pending: bool | None = None


@dataclass(frozen=True)
class RemappedRows:
    """Row remapping (Ampere+): a pending remap or a remap failure means reset or RMA."""

    correctable: int | None = None
    uncorrectable: int | None = None
    pending: bool | None = None
    failure: bool | None = None
    bank_max: int | None = None
    bank_high: int | None = None
    bank_partial: int | None = None
    bank_low: int | None = None
    bank_none: int | None = None


@dataclass(frozen=True)
class ClockEventReasons:
    """Why clocks are held down ("Clocks Event Reasons" since R535, "Clocks Throttle
    Reasons" before). `active` names every reason printed as Active, known or not."""

    section: str
    active: tuple[str, ...] = ()
    idle: bool | None = None
    applications_clocks_setting: bool | None = None
    sw_power_cap: bool | None = None
    hw_slowdown: bool | None = None
    hw_thermal_slowdown: bool | None = None
    hw_power_brake_slowdown: bool | None = None
    sync_boost: bool | None = None
    sw_thermal_slowdown: bool | None = None
    display_clock_setting: bool | None = None


@dataclass(frozen=True)
class Clocks:
    """MHz. `sm_mhz` is the SM clock now (low on an idle GPU); the application clocks are what
    the GPU boosts to under load, lowered by `nvidia-smi -ac` and restored by `-rac`; the
    default application clocks are the board's own; `max_sm_mhz` is the most it can run."""

    sm_mhz: int | None = None
    graphics_mhz: int | None = None
    applications_graphics_mhz: int | None = None
    default_applications_graphics_mhz: int | None = None
    max_sm_mhz: int | None = None
    max_graphics_mhz: int | None = None


@dataclass(frozen=True)
class Temperatures:
    """Degrees C. `*_tlimit_c` fields (R535+) are margins relative to T.Limit, the others
    absolute thresholds as older drivers print them."""

    gpu_current_c: int | None = None
    memory_current_c: int | None = None
    gpu_tlimit_c: int | None = None
    shutdown_tlimit_c: int | None = None
    slowdown_tlimit_c: int | None = None
    max_operating_tlimit_c: int | None = None
    memory_max_operating_tlimit_c: int | None = None
    shutdown_c: int | None = None
    slowdown_c: int | None = None
    max_operating_c: int | None = None
    memory_max_operating_c: int | None = None
    target_c: int | None = None


@dataclass(frozen=True)
class FabricInfo:
    """NVLink fabric registration on NVSwitch systems (HGX): state Completed + status
    Success once Fabric Manager has trained the GPU into the fabric."""

    state: str | None = None
    status: str | None = None
    clique_id: int | None = None
    cluster_uuid: str | None = None
    health_bandwidth: str | None = None


@dataclass(frozen=True)
class GpuProcess:
    """A process holding a context on the GPU."""

    pid: int | None
    type: str | None
    name: str | None
    used_memory_mib: int | None


@dataclass(frozen=True)
class GpuInfo:
    """One `GPU <bus id>` section of `nvidia-smi -q`."""

    pci_bus_id: str | None
    pci: str | None  # normalised `0000:19:00.0`, for joins with other tools
    product_name: str | None = None
    product_brand: str | None = None
    product_architecture: str | None = None
    serial: str | None = None
    uuid: str | None = None
    minor_number: int | None = None
    module_id: int | None = None
    vbios_version: str | None = None
    board_part_number: str | None = None
    persistence_mode: bool | None = None
    mig_mode_current: bool | None = None
    performance_state: str | None = None
    reset_required: bool | None = None
    drain_and_reset_recommended: bool | None = None
    # Driver >= 565: what the driver says must happen before the GPU is used again (None,
    # Reset, Reboot, Drain P2P, Drain and Reset), e.g. after an Xid 154.
    recovery_action: str | None = None
    pcie_gen_current: int | None = None
    pcie_gen_max: int | None = None
    pcie_gen_device_max: int | None = None
    pcie_gen_host_max: int | None = None
    pcie_width_current: int | None = None
    pcie_width_max: int | None = None
    pcie_replays: int | None = None
    memory_total_mib: int | None = None
    memory_used_mib: int | None = None
    ecc_mode_current: bool | None = None
    ecc_mode_pending: bool | None = None
    ecc_volatile: EccCounts | None = None
    ecc_aggregate: EccCounts | None = None
    sram_uncorrectable_sources: dict[str, int | None] = field(default_factory=dict)
    retired_pages: RetiredPages | None = None
    remapped_rows: RemappedRows | None = None
    clock_event_reasons: ClockEventReasons | None = None
    temperatures: Temperatures | None = None
    power_draw_w: float | None = None
    power_limit_w: float | None = None
    # The limit the GPU enforces (`Current Power Limit` since R535, `Enforced Power Limit`
    # before), the board's default and the most it can be set to.
    enforced_power_limit_w: float | None = None
    default_power_limit_w: float | None = None
    max_power_limit_w: float | None = None
    clocks: Clocks | None = None
    fabric: FabricInfo | None = None
    processes: tuple[GpuProcess, ...] = ()


@dataclass(frozen=True)
class NvidiaSmiReport:
    """The whole `nvidia-smi -q` output: the header and one record per GPU, in the order
    nvidia-smi printed them (GPU index order)."""

    timestamp: str | None
    driver_version: str | None
    cuda_version: str | None
    attached_gpus: int | None
    gpus: tuple[GpuInfo, ...]


# --------------------------------------------------------------------------- the tree


@dataclass
class _Node:
    """One line of the indented `Key : Value` tree; sections have value None."""

    key: str
    value: str | None
    line_no: int
    line: str
    children: list[_Node] = field(default_factory=list)
    child_indent: int | None = None


def _lines_to_tree(lines: list[tuple[int, str]]) -> list[_Node]:
    """Build the section tree from (line number, text) pairs; indentation nests."""
    roots: list[_Node] = []
    root_indent: int | None = None
    stack: list[tuple[int, _Node]] = []
    for line_no, raw in lines:
        line = raw.rstrip()
        if not line:
            continue
        body = line.lstrip(" ")
        indent = len(line) - len(body)
        if body.startswith("\t") or "\t" in line[:indent]:
            raise ParseError("expected space indentation", line_no=line_no, line=raw)
        if " : " in body:
            key, value = body.split(" : ", 1)
            node = _Node(key.rstrip(), value.strip(), line_no, raw)
        elif body.endswith(" :"):
            node = _Node(body[:-2].rstrip(), "", line_no, raw)
        else:
            node = _Node(body, None, line_no, raw)
        while stack and stack[-1][0] >= indent:
            stack.pop()
        if stack:
            parent = stack[-1][1]
            if parent.child_indent is None:
                parent.child_indent = indent
            elif parent.child_indent != indent:
                raise ParseError(
                    f"expected indentation of {parent.child_indent} spaces under "
                    f"{parent.key!r}, found {indent}",
                    line_no=line_no,
                    line=raw,
                )
            parent.children.append(node)
        else:
            if root_indent is None:
                root_indent = indent
            elif indent != root_indent:
                raise ParseError(
                    f"expected indentation of {root_indent} spaces, found {indent}",
                    line_no=line_no,
                    line=raw,
                )
            roots.append(node)
        stack.append((indent, node))
    return roots


class _Section:
    """Typed look-ups in one section; a field printed twice is an error, not a guess."""

    def __init__(self, nodes: list[_Node], path: str = "") -> None:
        self.nodes = nodes
        self.path = path

    def node(self, *names: str) -> _Node | None:
        """The first of `names` present in this section (names across driver versions)."""
        for name in names:
            found = [n for n in self.nodes if n.key == name]
            if len(found) > 1:
                raise ParseError(
                    f"field {self._where(name)!r} printed twice",
                    line_no=found[1].line_no,
                    line=found[1].line,
                )
            if found:
                return found[0]
        return None

    def section(self, *names: str) -> _Section | None:
        node = self.node(*names)
        if node is None:
            return None
        return _Section(node.children, self._where(node.key))

    def text(self, *names: str) -> str | None:
        node = self.node(*names)
        if node is None or node.value is None or node.value in _NOT_AVAILABLE:
            return None
        return node.value

    def integer(self, *names: str, unit: str = "") -> int | None:
        node = self.node(*names)
        value = self._value(node)
        if node is None or value is None:
            return None
        number = _strip_unit(value, unit)
        if not re.fullmatch(r"[+-]?\d{1,20}", number):
            raise ParseError(
                f"expected an integer{' in ' + unit.strip() if unit else ''} for "
                f"{self._where(node.key)!r}",
                line_no=node.line_no,
                line=node.line,
            )
        return int(number)

    def number(self, *names: str, unit: str = "") -> float | None:
        node = self.node(*names)
        value = self._value(node)
        if node is None or value is None:
            return None
        number = _strip_unit(value, unit)
        if not re.fullmatch(r"[+-]?(\d+(\.\d*)?|\.\d+)", number):
            raise ParseError(
                f"expected a number{' in ' + unit.strip() if unit else ''} for "
                f"{self._where(node.key)!r}",
                line_no=node.line_no,
                line=node.line,
            )
        return float(number)

    def flag(self, *names: str) -> bool | None:
        node = self.node(*names)
        value = self._value(node)
        if node is None or value is None:
            return None
        return _flag(value, node, self._where(node.key))

    def _value(self, node: _Node | None) -> str | None:
        if node is None:
            return None
        if node.value is None:
            raise ParseError(
                f"expected '{node.key} : <value>', found a section header",
                line_no=node.line_no,
                line=node.line,
            )
        if node.value in _NOT_AVAILABLE:
            return None
        return node.value

    def _where(self, name: str) -> str:
        return f"{self.path}/{name}" if self.path else name


def _strip_unit(value: str, unit: str) -> str:
    if unit and value.endswith(unit):
        return value[: -len(unit)].strip()
    return value.strip()


def _flag(value: str, node: _Node, where: str) -> bool:
    if value in _TRUE_WORDS:
        return True
    if value in _FALSE_WORDS:
        return False
    raise ParseError(
        f"expected Enabled/Disabled, Yes/No or Active/Not Active for {where!r}",
        line_no=node.line_no,
        line=node.line,
    )


def _walk(nodes: list[_Node]) -> Iterator[_Node]:
    for node in nodes:
        yield node
        yield from _walk(node.children)


# --------------------------------------------------------------------------- sections


def _ecc_counts(sec: _Section | None) -> EccCounts | None:
    if sec is None or not sec.nodes:
        return None
    single = sec.section("Single Bit")
    double = sec.section("Double Bit")
    sram_corr = sec.integer("SRAM Correctable")
    parity = sec.integer("SRAM Uncorrectable Parity")
    secded = sec.integer("SRAM Uncorrectable SEC-DED")
    sram_uncorr = sec.integer("SRAM Uncorrectable")
    if sram_uncorr is None and (parity is not None or secded is not None):
        sram_uncorr = (parity or 0) + (secded or 0)
    dram_corr = sec.integer("DRAM Correctable")
    dram_uncorr = sec.integer("DRAM Uncorrectable")
    single_total = single.integer("Total") if single else None
    double_total = double.integer("Total") if double else None
    if single is not None and dram_corr is None:
        dram_corr = single.integer("Device Memory")
    if double is not None and dram_uncorr is None:
        dram_uncorr = double.integer("Device Memory")
    return EccCounts(
        correctable=single_total if single_total is not None else _sum_known(sram_corr, dram_corr),
        uncorrectable=double_total
        if double_total is not None
        else _sum_known(sram_uncorr, dram_uncorr),
        sram_correctable=sram_corr,
        sram_uncorrectable=sram_uncorr,
        sram_uncorrectable_parity=parity,
        sram_uncorrectable_secded=secded,
        dram_correctable=dram_corr,
        dram_uncorrectable=dram_uncorr,
        single_bit_total=single_total,
        double_bit_total=double_total,
        sram_threshold_exceeded=sec.flag("SRAM Threshold Exceeded"),
    )


def _sum_known(*values: int | None) -> int | None:
    known = [v for v in values if v is not None]
    return sum(known) if known else None


_REASON_FIELDS = {
    "Idle": "idle",
    "Applications Clocks Setting": "applications_clocks_setting",
    "SW Power Cap": "sw_power_cap",
    "HW Slowdown": "hw_slowdown",
    "HW Thermal Slowdown": "hw_thermal_slowdown",
    "HW Power Brake Slowdown": "hw_power_brake_slowdown",
    "Sync Boost": "sync_boost",
    "SW Thermal Slowdown": "sw_thermal_slowdown",
    "Display Clock Setting": "display_clock_setting",
}
_REASON_SECTIONS = ("Clocks Event Reasons", "Clocks Throttle Reasons")


def _clock_event_reasons(gpu: _Section) -> ClockEventReasons | None:
    node = gpu.node(*_REASON_SECTIONS)
    if node is None:
        return None
    flags: dict[str, bool | None] = {}
    active: list[str] = []
    seen: set[str] = set()
    # HW Thermal / Power Brake Slowdown are printed nested under HW Slowdown.
    for reason in _walk(node.children):
        if reason.value is None:
            continue
        where = f"{node.key}/{reason.key}"
        if reason.key in seen:
            raise ParseError(
                f"field {where!r} printed twice", line_no=reason.line_no, line=reason.line
            )
        seen.add(reason.key)
        if reason.key not in _REASON_FIELDS and reason.value not in _TRUE_WORDS | _FALSE_WORDS:
            continue  # a newer driver's entry that is not an Active/Not Active reason
        is_active = None if reason.value in _NOT_AVAILABLE else _flag(reason.value, reason, where)
        if is_active:
            active.append(reason.key)
        if reason.key in _REASON_FIELDS:
            flags[_REASON_FIELDS[reason.key]] = is_active
    return ClockEventReasons(section=node.key, active=tuple(active), **flags)


def _temperatures(sec: _Section | None) -> Temperatures | None:
    if sec is None:
        return None
    c = " C"
    return Temperatures(
        gpu_current_c=sec.integer("GPU Current Temp", unit=c),
        memory_current_c=sec.integer("Memory Current Temp", unit=c),
        gpu_tlimit_c=sec.integer("GPU T.Limit Temp", unit=c),
        shutdown_tlimit_c=sec.integer("GPU Shutdown T.Limit Temp", unit=c),
        slowdown_tlimit_c=sec.integer("GPU Slowdown T.Limit Temp", unit=c),
        max_operating_tlimit_c=sec.integer("GPU Max Operating T.Limit Temp", unit=c),
        memory_max_operating_tlimit_c=sec.integer("Memory Max Operating T.Limit Temp", unit=c),
        shutdown_c=sec.integer("GPU Shutdown Temp", unit=c),
        slowdown_c=sec.integer("GPU Slowdown Temp", unit=c),
        max_operating_c=sec.integer("GPU Max Operating Temp", unit=c),
        memory_max_operating_c=sec.integer("Memory Max Operating Temp", unit=c),
        target_c=sec.integer("GPU Target Temperature", unit=c),
    )


def _clocks(gpu: _Section) -> Clocks | None:
    now = gpu.section("Clocks")
    app = gpu.section("Applications Clocks")
    default = gpu.section("Default Applications Clocks")
    top = gpu.section("Max Clocks")
    if now is None and app is None and top is None:
        return None
    mhz = " MHz"
    return Clocks(
        sm_mhz=now.integer("SM", unit=mhz) if now else None,
        graphics_mhz=now.integer("Graphics", unit=mhz) if now else None,
        applications_graphics_mhz=app.integer("Graphics", unit=mhz) if app else None,
        default_applications_graphics_mhz=default.integer("Graphics", unit=mhz)
        if default
        else None,
        max_sm_mhz=top.integer("SM", unit=mhz) if top else None,
        max_graphics_mhz=top.integer("Graphics", unit=mhz) if top else None,
    )


def _remapped_rows(gpu: _Section) -> RemappedRows | None:
    node = gpu.node("Remapped Rows")
    if node is None or (node.value is not None and not node.children):
        return None  # absent, or `Remapped Rows : N/A` on GPUs without row remapping
    sec = _Section(node.children, node.key)
    hist = sec.section("Bank Remap Availability Histogram")
    bank = " bank(s)"
    return RemappedRows(
        correctable=sec.integer("Correctable Error"),
        uncorrectable=sec.integer("Uncorrectable Error"),
        pending=sec.flag("Pending"),
        failure=sec.flag("Remapping Failure Occurred"),
        bank_max=hist.integer("Max", unit=bank) if hist else None,
        bank_high=hist.integer("High", unit=bank) if hist else None,
        bank_partial=hist.integer("Partial", unit=bank) if hist else None,
        bank_low=hist.integer("Low", unit=bank) if hist else None,
        bank_none=hist.integer("None", unit=bank) if hist else None,
    )


def _retired_pages(gpu: _Section) -> RetiredPages | None:
    sec = gpu.section("Retired Pages")
    if sec is None:
        return None
    return RetiredPages(
        single_bit_ecc=sec.integer("Single Bit ECC"),
        double_bit_ecc=sec.integer("Double Bit ECC"),
        pending=sec.flag("Pending Page Blacklist", "Pending Page Retirement", "Pending"),
    )


def _fabric(gpu: _Section) -> FabricInfo | None:
    sec = gpu.section("Fabric")
    if sec is None:
        return None
    health = sec.section("Health")
    return FabricInfo(
        state=sec.text("State"),
        status=sec.text("Status"),
        clique_id=sec.integer("CliqueId"),
        cluster_uuid=sec.text("ClusterUUID"),
        health_bandwidth=health.text("Bandwidth") if health else None,
    )


def _processes(gpu: _Section) -> tuple[GpuProcess, ...]:
    node = gpu.node("Processes")
    if node is None or not node.children:
        return ()
    # Each process repeats the same keys; a key seen again starts the next process.
    groups: list[dict[str, _Node]] = [{}]
    for child in node.children:
        if child.key in groups[-1]:
            groups.append({})
        groups[-1][child.key] = child
    return tuple(
        GpuProcess(
            pid=sec.integer("Process ID"),
            type=sec.text("Type"),
            name=sec.text("Name", "Process Name"),
            used_memory_mib=sec.integer("Used GPU Memory", unit=" MiB"),
        )
        for sec in (_Section(list(g.values()), "Processes") for g in groups)
    )


def _gpu_info(nodes: list[_Node], pci_bus_id: str | None) -> GpuInfo:
    gpu = _Section(nodes)
    pci = gpu.section("PCI")
    link = pci.section("GPU Link Info") if pci else None
    gen = link.section("PCIe Generation") if link else None
    width = link.section("Link Width") if link else None
    fb = gpu.section("FB Memory Usage")
    ecc_mode = gpu.section("ECC Mode", "Ecc Mode")
    ecc = gpu.section("ECC Errors")
    sram_sources = ecc.section("Aggregate Uncorrectable SRAM Sources") if ecc else None
    power = gpu.section("GPU Power Readings", "Power Readings")
    mig = gpu.section("MIG Mode")
    reset = gpu.section("GPU Reset Status")
    platform = gpu.section("Platform Info")
    bus_in_section = pci.text("Bus Id") if pci else None
    if pci_bus_id is None:
        pci_bus_id = bus_in_section
    elif bus_in_section is not None and bus_in_section != pci_bus_id and pci is not None:
        node = pci.node("Bus Id")
        assert node is not None
        raise ParseError(
            f"expected Bus Id {pci_bus_id} (the section header), found {bus_in_section}",
            line_no=node.line_no,
            line=node.line,
        )
    pci_normal = normalize_pci_bus_id(pci_bus_id) if pci_bus_id else None
    return GpuInfo(
        pci_bus_id=pci_bus_id,
        pci=pci_normal,
        product_name=gpu.text("Product Name"),
        product_brand=gpu.text("Product Brand"),
        product_architecture=gpu.text("Product Architecture"),
        serial=gpu.text("Serial Number"),
        uuid=gpu.text("GPU UUID"),
        minor_number=gpu.integer("Minor Number"),
        # Driver >= 565 moved `Module ID` under `Platform Info` as `Module Id`.
        module_id=gpu.integer("Module ID")
        if platform is None or gpu.node("Module ID") is not None
        else platform.integer("Module Id", "Module ID"),
        vbios_version=gpu.text("VBIOS Version"),
        board_part_number=gpu.text("Board Part Number"),
        persistence_mode=gpu.flag("Persistence Mode"),
        mig_mode_current=mig.flag("Current") if mig else None,
        performance_state=gpu.text("Performance State"),
        reset_required=reset.flag("Reset Required") if reset else None,
        drain_and_reset_recommended=reset.flag("Drain and Reset Recommended") if reset else None,
        recovery_action=gpu.text("GPU Recovery Action"),
        pcie_gen_current=gen.integer("Current") if gen else None,
        pcie_gen_max=gen.integer("Max") if gen else None,
        pcie_gen_device_max=gen.integer("Device Max") if gen else None,
        pcie_gen_host_max=gen.integer("Host Max") if gen else None,
        pcie_width_current=width.integer("Current", unit="x") if width else None,
        pcie_width_max=width.integer("Max", unit="x") if width else None,
        pcie_replays=pci.integer("Replays Since Reset", "Replays since reset") if pci else None,
        memory_total_mib=fb.integer("Total", unit=" MiB") if fb else None,
        memory_used_mib=fb.integer("Used", unit=" MiB") if fb else None,
        ecc_mode_current=ecc_mode.flag("Current") if ecc_mode else None,
        ecc_mode_pending=ecc_mode.flag("Pending") if ecc_mode else None,
        ecc_volatile=_ecc_counts(ecc.section("Volatile")) if ecc else None,
        ecc_aggregate=_ecc_counts(ecc.section("Aggregate")) if ecc else None,
        sram_uncorrectable_sources={n.key: sram_sources.integer(n.key) for n in sram_sources.nodes}
        if sram_sources
        else {},
        retired_pages=_retired_pages(gpu),
        remapped_rows=_remapped_rows(gpu),
        clock_event_reasons=_clock_event_reasons(gpu),
        temperatures=_temperatures(gpu.section("Temperature")),
        power_draw_w=power.number("Power Draw", "Instantaneous Power Draw", unit=" W")
        if power
        else None,
        power_limit_w=power.number("Current Power Limit", "Power Limit", unit=" W")
        if power
        else None,
        enforced_power_limit_w=power.number(
            "Current Power Limit", "Enforced Power Limit", unit=" W"
        )
        if power
        else None,
        default_power_limit_w=power.number("Default Power Limit", unit=" W") if power else None,
        max_power_limit_w=power.number("Max Power Limit", unit=" W") if power else None,
        clocks=_clocks(gpu),
        fabric=_fabric(gpu),
        processes=_processes(gpu),
    )


# --------------------------------------------------------------------------- entry points

_GPU_HEADER = re.compile(r"^GPU (?P<bus>[0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.[0-7])$")


@parser(
    "nvidia-smi-q",
    "nvidia-smi -q: per-GPU identity, ECC, remapped rows, clocks, PCIe, fabric",
    start=r"^\s*(?:=+NVSMI LOG=+|No devices were found)\s*$",
)
def parse_nvidia_smi_q(text: str) -> NvidiaSmiReport:
    """Parse the full `nvidia-smi -q` output (optionally `-d ...` subsets of it)."""
    lines = list(enumerate(text.splitlines(), start=1))
    start = None
    for line_no, line in lines:
        stripped = line.strip()
        if not stripped:
            continue
        if stripped == BANNER:
            start = line_no
            break
        if stripped == NO_DEVICES:
            return NvidiaSmiReport(None, None, None, 0, ())
        raise ParseError(f"expected the {BANNER!r} banner", line_no=line_no, line=line)
    if start is None:
        raise ParseError(f"expected the {BANNER!r} banner; the input has none")
    roots = _lines_to_tree(lines[start:])
    header: list[_Node] = []
    gpus: list[GpuInfo] = []
    for node in roots:
        if node.value is not None:
            if node.children:
                raise ParseError(
                    f"expected a top-level field, found {node.key!r} with nested lines",
                    line_no=node.line_no,
                    line=node.line,
                )
            header.append(node)
            continue
        match = _GPU_HEADER.match(node.key)
        if match is None:
            raise ParseError(
                "expected 'GPU <PCI bus id>' to start a GPU section",
                line_no=node.line_no,
                line=node.line,
            )
        gpus.append(_gpu_info(node.children, match["bus"]))
    head = _Section(header)
    attached = head.integer("Attached GPUs")
    if attached is not None and len(gpus) > attached:
        raise ParseError(f"{len(gpus)} GPU sections but 'Attached GPUs : {attached}'")
    return NvidiaSmiReport(
        timestamp=head.text("Timestamp"),
        driver_version=head.text("Driver Version"),
        cuda_version=head.text("CUDA Version"),
        attached_gpus=attached,
        gpus=tuple(gpus),
    )


def parse_gpu_section(text: str) -> GpuInfo:
    """Parse the body of one GPU section on its own (e.g. an excerpt, or `-q -d ECC`
    pasted without its header); the bus id comes from `PCI/Bus Id` when present."""
    lines = list(enumerate(text.splitlines(), start=1))
    roots = _lines_to_tree(lines)
    if not roots:
        raise ParseError("expected the fields of a GPU section; the input is empty")
    for node in roots:
        if node.value is None and _GPU_HEADER.match(node.key):
            raise ParseError(
                "expected one GPU section's body; use parse_nvidia_smi_q for whole outputs",
                line_no=node.line_no,
                line=node.line,
            )
    if not any(node.key in _KNOWN_GPU_FIELDS for node in roots):
        raise ParseError(
            "expected nvidia-smi -q GPU fields (e.g. 'ECC Mode', 'Product Name')",
            line_no=roots[0].line_no,
            line=roots[0].line,
        )
    return _gpu_info(roots, None)


# Top-level keys of a GPU section that this module reads.
_KNOWN_GPU_FIELDS = frozenset(
    {
        "Product Name",
        "Serial Number",
        "GPU UUID",
        "Minor Number",
        "Persistence Mode",
        "PCI",
        "FB Memory Usage",
        "ECC Mode",
        "Ecc Mode",
        "ECC Errors",
        "Retired Pages",
        "Remapped Rows",
        "Temperature",
        "Fabric",
        "GPU Power Readings",
        "Power Readings",
        "Clocks",
        "Applications Clocks",
        "Max Clocks",
        *_REASON_SECTIONS,
    }
)
