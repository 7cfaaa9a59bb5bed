"""Link-quality views of a lab node: `nvidia-smi nvlink -e`, `mlxlink -d DEV -m -c` and
`lspci -vv`, laid out as the real captures in tests/fixtures/parsers/real/ print them.

Stdlib only (copied into the simulator packages).
"""

from __future__ import annotations

import hashlib
import math
import time

from .hw import CONNECTX7_FIRMWARE, Gpu, Hca, Nic, NodeHardware, netdev_name
from .perf import LANE_GBS, WIDTH_LANES

# What mlxlink prints for a BER it counted no error for (the BlueField-3 capture).
ZERO_BER = "15E-255"
# RS-FEC (544,514) ("KP4", the FEC of HDR and NDR links): 10-bit symbols, a codeword of 544
# corrects up to 15 symbol errors (IEEE 802.3 clause 91 / 134).
FEC_SYMBOLS, FEC_CORRECTS, SYMBOL_BITS = 544, 15, 10
_FEC_NAME = {"HDR": "Standard_RS-FEC - (544,514)", "NDR": "Standard_RS-FEC - (544,514)"}


def _fec(speed: str) -> str:
    if speed.endswith("G"):  # Ethernet, as the BlueField-3 capture prints it
        return "Standard RS-FEC - RS(528,514)"
    return _FEC_NAME.get(speed, "No FEC")


# PCIe generation -> transfer rate per lane as lspci prints it.
_GT_S = {1: "2.5", 2: "5", 3: "8", 4: "16", 5: "32", 6: "64"}


def render_nvlink_errors(hw: NodeHardware) -> str:
    """`nvidia-smi nvlink -e`: per GPU and link its replay, recovery and CRC counters."""
    lines: list[str] = []
    for i, gpu in enumerate(hw.present_gpus()):
        lines.append(f"GPU {i}: {gpu.spec.name} (UUID: {gpu.uuid})")
        for link in range(gpu.spec.nvlinks):
            counts = gpu.nvlink_errors.get(link, {})
            if link:
                lines.append("")
            for label, key in (("Replay", "replay"), ("Recovery", "recovery"), ("CRC", "crc")):
                lines.append(f"\t Link {link}: {label} Errors: {int(counts.get(key, 0))}")
    return "\n".join(lines) + "\n"


def format_ber(ber: float) -> str:
    """A BER as mlxlink prints it: a whole mantissa, then the exponent (`2E-9`)."""
    if ber <= 0:
        return ZERO_BER
    exponent = math.floor(math.log10(ber))
    mantissa = round(ber / 10**exponent)
    if mantissa == 10:
        mantissa, exponent = 1, exponent + 1
    return f"{mantissa}E{exponent}"


def uncorrectable_fraction(raw_ber: float) -> float:
    """The share of RS-FEC codewords with more symbol errors than FEC corrects, for bit errors
    that fall independently at `raw_ber` (a binomial tail)."""
    if raw_ber <= 0:
        return 0.0
    p = 1.0 - (1.0 - min(raw_ber, 0.5)) ** SYMBOL_BITS
    total = 0.0
    for k in range(FEC_CORRECTS + 1, FEC_SYMBOLS + 1):
        log_term = (
            math.lgamma(FEC_SYMBOLS + 1)
            - math.lgamma(k + 1)
            - math.lgamma(FEC_SYMBOLS - k + 1)
            + k * math.log(p)
            + (FEC_SYMBOLS - k) * math.log1p(-p)
        )
        total += math.exp(log_term)
    return min(total, 1.0)


def _field(key: str, value: object) -> str:
    return f"{key:<35}: {value}"


def _section(title: str, rows: list[tuple[str, object]]) -> list[str]:
    return [title, "-" * len(title), *(_field(k, v) for k, v in rows), ""]


def _cable_serial(hw: NodeHardware, hca: Hca) -> str:
    digest = hashlib.sha256(f"{hw.name}/cable/{hca.device}".encode()).hexdigest()
    return f"MT{int(digest[:8], 16) % 10**10:010d}"


def nic_port(nic: Nic) -> Hca:
    """A storage or management port as mlxlink sees it, clean: an Ethernet port at its rate, an
    InfiniBand one at the generation of its rate; an uncabled one polling."""
    ib_speed = {400: "NDR", 200: "HDR", 100: "EDR"}.get(nic.rate_gbps, "NDR")
    return Hca(
        device=nic.device,
        bus_id=nic.bus_id,
        gpu_minor=-1,
        rail=-1,
        numa_node=nic.numa_node,
        node_guid="0" * 16,
        speed=ib_speed if nic.link_layer == "InfiniBand" else f"{nic.rate_gbps}G",
        state=nic.state,
        hca_type=nic.hca_type,
    )


def render_mlxlink(hw: NodeHardware, hca: Hca, now: float | None = None) -> str:
    """`mlxlink -d DEV -m -c` on port 1 of one HCA: state, FEC, the cable module and the
    counters since the link came up (the node's boot). Raw errors follow the cable's raw BER;
    errors past FEC are the codewords RS-FEC could not correct. An Ethernet NIC (`nic_port`)
    prints its rate as the BlueField-3 capture does (`100G`) with Clause 91 RS-FEC."""
    now = time.time() if now is None else now
    ethernet = hca.speed.endswith("G")
    up = hca.state == "Active"
    lanes = WIDTH_LANES.get(hca.width, 4)
    seconds = max(now - hw.boot_time, 60.0) if up else 0.0
    lane_gbps = int(hca.speed[:-1]) / lanes if ethernet else LANE_GBS.get(hca.speed, 6.25) * 8
    bits = lane_gbps * 1e9 * lanes * seconds
    raw_errors = round(hca.raw_ber * bits)
    per_lane = [raw_errors // lanes + (1 if n < raw_errors % lanes else 0) for n in range(lanes)]
    codewords = bits / (FEC_SYMBOLS * SYMBOL_BITS)
    effective = round(uncorrectable_fraction(hca.raw_ber) * codewords)
    fw = hca.fw_ver
    lines: list[str] = []
    lines += _section(
        "Operational Info",
        [
            ("State", "Active" if up else "Polling"),
            ("Physical state", "LinkUp" if up else "Polling"),
            ("Speed", (hca.speed if ethernet else f"IB-{hca.speed}") if up else "N/A"),
            ("Width", f"{lanes}x" if up else "N/A"),
            ("FEC", _fec(hca.speed) if up else "N/A"),
            ("Loopback Mode", "No Loopback"),
            ("Auto Negotiation", "ON"),
        ],
    )
    lines += _section(
        "Supported Info",
        [
            ("Enabled Link Speed", "0x000000f1 (NDR,HDR,EDR,FDR,SDR)"),
            ("Supported Cable Speed", "0x00000071 (HDR,EDR,FDR,SDR)"),
        ],
    )
    lines += _section(
        "Troubleshooting Info",
        [
            ("Status Opcode", 0 if up else 1024),
            ("Group Opcode", "N/A"),
            ("Recommendation", "No issue was observed" if up else "Check the cable"),
        ],
    )
    lines += _section(
        "Tool Information",
        [("Firmware Version", fw), ("amBER Version", "3.6"), ("MFT Version", hw.mft_version)],
    )
    lines += _section(
        "Module Info",
        [
            ("Temperature [C]", "N/A"),
            ("Voltage [mV]", "N/A"),
            ("Identifier", "QSFP56"),
            ("Compliance", "IB HDR"),
            ("Cable Technology", "Copper cable, passive, unequalized"),
            ("Cable Type", "Passive copper cable"),
            ("OUI", "Mellanox"),
            ("Vendor Name", "Mellanox"),
            ("Vendor Part Number", "MCP1650-H001E30"),
            ("Vendor Serial Number", _cable_serial(hw, hca)),
            ("Rev", "A2"),
            ("Wavelength [nm]", "N/A"),
            ("Transfer Distance [m]", 1),
            ("FW Version", "N/A"),
            ("Digital Diagnostic Monitoring", "No"),
        ],
    )
    lines += _section(
        "Physical Counters and BER Info",
        [
            ("Time Since Last Clear [Min]", f"{seconds / 60:.1f}"),
            ("Effective Physical Errors", effective),
            ("Effective Physical BER", format_ber(effective / bits) if bits else ZERO_BER),
            ("Raw Physical Errors Per Lane", ",".join(str(n) for n in per_lane)),
            ("Link Down Counter", 0),
            ("Link Error Recovery Counter", 0),
            ("Raw Physical BER", format_ber(raw_errors / bits) if bits else ZERO_BER),
        ],
    )
    return "\n".join(lines)


def _gpu_description(gpu: Gpu) -> str:
    product = "H200 SXM 141GB" if gpu.model == "H200" else "H100 SXM5 80GB"
    return f"3D controller: NVIDIA Corporation GH100 [{product}] (rev a1)"


_HCA_DESCRIPTION = "Infiniband controller: Mellanox Technologies MT2910 Family [ConnectX-7]"
# The class follows the port's type (a ConnectX-7 set to Ethernet is an Ethernet controller); the
# device name is pci.ids' for the chip.
_NIC_CHIP = {
    "MT4129": "Mellanox Technologies MT2910 Family [ConnectX-7]",
    "MT41692": "Mellanox Technologies MT43244 BlueField-3 integrated ConnectX-7 network controller",
}


def _nic_description(nic: Nic) -> str:
    kind = "Infiniband controller" if nic.link_layer == "InfiniBand" else "Ethernet controller"
    return f"{kind}: {_NIC_CHIP.get(nic.hca_type, _NIC_CHIP['MT4129'])}"


def _function(
    address: str,
    description: str,
    numa: int,
    cap: tuple[int, int],
    sta: tuple[int, int],
    driver: str | None,
) -> list[str]:
    """One function as `lspci -vv` prints it, trimmed to the Express capability."""
    speed_note = "downgraded" if sta[0] < cap[0] else "ok"
    width_note = "downgraded" if sta[1] < cap[1] else "ok"
    lines = [
        f"{address} {description}",
        "\tControl: I/O- Mem+ BusMaster+ SpecCycle- MemWINV- VGASnoop- ParErr- Stepping- "
        "SERR- FastB2B- DisINTx+",
        "\tStatus: Cap+ 66MHz- UDF- FastB2B- ParErr- DEVSEL=fast >TAbort- <TAbort- <MAbort- "
        ">SERR- <PERR- INTx-",
        "\tLatency: 0, Cache Line Size: 64 bytes",
        f"\tNUMA node: {numa}",
        "\tCapabilities: [60] Express (v2) Endpoint, MSI 00",
        "\t\tDevCap:\tMaxPayload 512 bytes, PhantFunc 0, Latency L0s unlimited, L1 unlimited",
        "\t\tDevSta:\tCorrErr- NonFatalErr- FatalErr- UnsupReq- AuxPwr- TransPend-",
        f"\t\tLnkCap:\tPort #0, Speed {_GT_S[cap[0]]}GT/s, Width x{cap[1]}, ASPM not supported",
        "\t\t\tClockPM- Surprise- LLActRep- BwNot- ASPMOptComp+",
        "\t\tLnkCtl:\tASPM Disabled; RCB 64 bytes, Disabled- CommClk+",
        "\t\t\tExtSynch- ClockPM- AutWidDis- BWInt- AutBWInt-",
        f"\t\tLnkSta:\tSpeed {_GT_S[sta[0]]}GT/s ({speed_note}), Width x{sta[1]} ({width_note})",
        "\t\t\tTrErr- Train- SlotClk+ DLActive- BWMgmt- ABWMgmt-",
    ]
    if driver:
        lines.append(f"\tKernel driver in use: {driver}")
    return lines


def render_lspci(hw: NodeHardware, vendors: set[str] | None = None) -> str:
    """`lspci -vv` over the node's GPUs and Mellanox functions in bus order (`vendors`: the
    `-d VENDOR:` filters, "10de" NVIDIA, "15b3" Mellanox; None: all)."""
    entries: list[tuple[str, list[str]]] = []
    if vendors is None or "10de" in vendors:
        driver = "nvidia" if "nvidia" in hw.modules else None
        for gpu in hw.present_gpus():
            address = gpu.bus_id[-7:].lower()
            cap = (gpu.pcie_gen_max, gpu.pcie_width_max)
            sta = (gpu.pcie_gen_current, gpu.pcie_width_current)
            entries.append(
                (
                    address,
                    _function(address, _gpu_description(gpu), gpu.numa_node, cap, sta, driver),
                )
            )
    if vendors is None or "15b3" in vendors:
        for hca in hw.hcas:
            if not hca.present:
                continue
            address = hca.bus_id[-7:].lower()
            cap = (hca.pcie_gen_max, hca.pcie_width_max)
            sta = (hca.pcie_gen_current, hca.pcie_width_current)
            entries.append(
                (
                    address,
                    _function(address, _HCA_DESCRIPTION, hca.numa_node, cap, sta, "mlx5_core"),
                )
            )
        for nic in hw.other_nics:
            address = nic.bus_id[-7:].lower()
            entries.append(
                (
                    address,
                    _function(
                        address,
                        _nic_description(nic),
                        nic.numa_node,
                        (5, 16),
                        (5, 16),
                        "mlx5_core",
                    ),
                )
            )
    blocks = ["\n".join(lines) + "\n" for _, lines in sorted(entries)]
    return "\n".join(blocks)


def render_ibdev2netdev(hw: NodeHardware, *, verbose: bool = False) -> str:
    """`ibdev2netdev [-v]` as DOCA's ofed-scripts print it: `mlx5_0 port 1 ==> ibp24s0 (Up)`, one
    line per RDMA device with a netdev, Up when the interface has carrier (`-v`: PCI address,
    chip, firmware and port state first). Compute HCAs and the other ports alike, in name order."""
    rows: list[tuple[str, str, str, str, str, str]] = []
    for hca in hw.hcas:
        if hca.present:
            netdev = hca.netdev or netdev_name(hca.bus_id, "InfiniBand")
            rows.append((hca.device, hca.bus_id, hca.hca_type, hca.fw_ver, hca.state, netdev))
    for nic in hw.other_nics:
        netdev = nic.netdev or netdev_name(nic.bus_id, nic.link_layer, multi_function=True)
        rows.append((nic.device, nic.bus_id, nic.hca_type, CONNECTX7_FIRMWARE, nic.state, netdev))
    rows.sort(key=lambda r: (len(r[0]), r[0]))
    lines = []
    for device, pci, chip, fw, state, netdev in rows:
        carrier = "Up" if state == "Active" else "Down"
        if verbose:
            port_state = {"Active": "ACTIVE", "Down": "DOWN"}.get(state, state.upper())
            lines.append(
                f"{pci} {device} ({chip} - NA) fw {fw} port 1 ({port_state:<6}) ==> "
                f"{netdev} ({carrier})"
            )
        else:
            lines.append(f"{device} port 1 ==> {netdev} ({carrier})")
    return "".join(line + "\n" for line in lines)
