"""`dcgm-exporter` in a lab node: DCGM's fields of the node's GPUs from the lab's hardware model,
in Prometheus' text format on `--address` (default :9400), for exactly the fields its counters
file (`--collectors`) names, as the real exporter serves them.

The real one reads the counters CSV (`DCGM field, Prometheus metric type, help`; `#` starts a
comment) and refuses to start on a field DCGM does not know; each GPU is one series labelled
`gpu`, `UUID`, `device`, `modelName`, `Hostname` (github.com/NVIDIA/dcgm-exporter, README's
sample output and etc/default-counters.csv). Stdlib only: it runs inside the node.
"""

from __future__ import annotations

import signal
import sys
from collections.abc import Callable
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from .hw import SM_MAX_MHZ, Gpu, NodeHardware, load_model, node_hardware

DEFAULT_ADDRESS = ":9400"
DEFAULT_COUNTERS = "/etc/dcgm-exporter/default-counters.csv"
TYPES = ("gauge", "counter", "label")
# H100/H200 HBM3 memory clock (nvidia-smi -q "Max Clocks: Memory").
MEM_CLOCK_MHZ = 2619


@dataclass(frozen=True)
class Counter:
    field: str
    type: str
    help: str


def parse_counters(text: str, source: str = "counters") -> list[Counter]:
    """The counters CSV; ValueError naming the line on anything else."""
    out = []
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        parts = [p.strip() for p in line.split(",", 2)]
        if len(parts) != 3 or parts[1] not in TYPES or not parts[0].startswith("DCGM_FI_"):
            raise ValueError(f"{source}:{number}: not 'DCGM field, type, help': {line!r}")
        out.append(Counter(*parts))
    return out


def _sm_clock(hw: NodeHardware, gpu: Gpu) -> float:
    # As the simulated nvidia-smi reports it: thermal slowdown, slow-node's factor, -ac's cap.
    if gpu.thermal_slowdown:
        return 345.0
    clock = round(SM_MAX_MHZ * min(hw.slow_factor, 1.0))
    if 0 < gpu.sm_clock_cap_mhz < clock:
        clock = gpu.sm_clock_cap_mhz
    return float(clock)


def _last_xid(gpu: Gpu) -> float:
    return float(max(gpu.xids)[1]) if gpu.xids else 0.0


def _nvlink(key: str) -> Callable[[NodeHardware, Gpu], float]:
    return lambda hw, g: float(sum(int(c.get(key, 0)) for c in g.nvlink_errors.values()))


def _zero(hw: NodeHardware, gpu: Gpu) -> float:
    return 0.0


# DCGM field -> its value for one GPU. Fields the model has no figure for (an idle GPU's
# utilisation, PCIe traffic, energy) read 0, as on an idle GPU; a field not listed here is one
# the simulator does not know, and the exporter refuses to start on it, as the real one does on
# a name DCGM does not know.
FIELDS: dict[str, Callable[[NodeHardware, Gpu], float]] = {
    "DCGM_FI_DEV_SM_CLOCK": _sm_clock,
    "DCGM_FI_DEV_MEM_CLOCK": lambda hw, g: float(MEM_CLOCK_MHZ),
    "DCGM_FI_DEV_GPU_TEMP": lambda hw, g: float(g.temperature_c),
    "DCGM_FI_DEV_MEMORY_TEMP": lambda hw, g: float(g.memory_temperature_c),
    "DCGM_FI_DEV_POWER_USAGE": lambda hw, g: float(g.power_draw_w),
    "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION": _zero,
    "DCGM_FI_DEV_PCIE_TX_THROUGHPUT": _zero,
    "DCGM_FI_DEV_PCIE_RX_THROUGHPUT": _zero,
    "DCGM_FI_DEV_PCIE_REPLAY_COUNTER": _zero,
    "DCGM_FI_DEV_GPU_UTIL": _zero,
    "DCGM_FI_DEV_MEM_COPY_UTIL": _zero,
    "DCGM_FI_DEV_ENC_UTIL": _zero,
    "DCGM_FI_DEV_DEC_UTIL": _zero,
    "DCGM_FI_DEV_XID_ERRORS": lambda hw, g: _last_xid(g),
    "DCGM_FI_DEV_POWER_VIOLATION": _zero,
    "DCGM_FI_DEV_THERMAL_VIOLATION": _zero,
    "DCGM_FI_DEV_FB_FREE": lambda hw, g: float(g.spec.memory_mib - g.spec.reserved_mib),
    "DCGM_FI_DEV_FB_USED": _zero,
    "DCGM_FI_DEV_ECC_SBE_VOL_TOTAL": lambda hw, g: float(g.ecc_volatile.correctable),
    "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL": lambda hw, g: float(g.ecc_volatile.uncorrectable),
    "DCGM_FI_DEV_ECC_SBE_AGG_TOTAL": lambda hw, g: float(g.ecc_aggregate.correctable),
    "DCGM_FI_DEV_ECC_DBE_AGG_TOTAL": lambda hw, g: float(g.ecc_aggregate.uncorrectable),
    # Hopper remaps rows instead of retiring pages.
    "DCGM_FI_DEV_RETIRED_SBE": _zero,
    "DCGM_FI_DEV_RETIRED_DBE": _zero,
    "DCGM_FI_DEV_RETIRED_PENDING": _zero,
    "DCGM_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL": _nvlink("crc"),
    "DCGM_FI_DEV_NVLINK_CRC_DATA_ERROR_COUNT_TOTAL": _zero,
    "DCGM_FI_DEV_NVLINK_REPLAY_ERROR_COUNT_TOTAL": _nvlink("replay"),
    "DCGM_FI_DEV_NVLINK_RECOVERY_ERROR_COUNT_TOTAL": _nvlink("recovery"),
    "DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL": _zero,
    "DCGM_FI_DEV_VGPU_LICENSE_STATUS": _zero,
    "DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS": lambda hw, g: float(g.remapped_uncorrectable),
    "DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS": lambda hw, g: float(g.remapped_correctable),
    "DCGM_FI_DEV_ROW_REMAP_FAILURE": lambda hw, g: float(g.remap_failure),
}


def _value(number: float) -> str:
    return str(int(number)) if number == int(number) else repr(number)


def render_metrics(hw: NodeHardware, counters: list[Counter], host: str) -> str:
    """One scrape: HELP and TYPE per field, then one series per present GPU."""
    lines: list[str] = []
    for c in counters:
        if c.type == "label":
            continue
        lines += [f"# HELP {c.field} {c.help}", f"# TYPE {c.field} {c.type}"]
        for gpu in hw.present_gpus():
            labels = (
                f'gpu="{gpu.minor}",UUID="{gpu.uuid}",device="nvidia{gpu.minor}",'
                f'modelName="{gpu.spec.name}",Hostname="{host}"'
            )
            lines.append(f"{c.field}{{{labels}}} {_value(FIELDS[c.field](hw, gpu))}")
    return "\n".join(lines) + "\n"


def _options(argv: list[str]) -> dict[str, str]:
    names = {
        "-f": "collectors",
        "--collectors": "collectors",
        "-a": "address",
        "--address": "address",
        "-r": "remote",
        "--remote-hostengine-info": "remote",
    }
    out = {"collectors": DEFAULT_COUNTERS, "address": DEFAULT_ADDRESS}
    args = list(argv)
    while args:
        arg = args.pop(0)
        key, _, inline = arg.partition("=")
        if key not in names:
            raise ValueError(f"flag provided but not defined: {key}")
        if not inline and not args:
            raise ValueError(f"flag needs an argument: {key}")
        out[names[key]] = inline or args.pop(0)
    return out


def run(argv: list[str], host: str) -> int:
    """The exporter: serve until SIGTERM. 1 (with a line on stderr) on a bad flag, an unreadable
    counters file or a field it does not know, before it listens."""
    try:
        opts = _options(argv)
        with open(opts["collectors"], encoding="utf-8") as f:
            counters = parse_counters(f.read(), opts["collectors"])
        unknown = [c.field for c in counters if c.field not in FIELDS]
        if unknown:
            raise ValueError(f"{opts['collectors']}: unknown DCGM field(s): {', '.join(unknown)}")
        address, _, port = opts["address"].rpartition(":")
        server = ThreadingHTTPServer((address, int(port)), _handler(counters, host))
    except (OSError, ValueError) as e:
        sys.stderr.write(f"dcgm-exporter: {e}\n")
        return 1
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    server.serve_forever()
    return 0


def _handler(counters: list[Counter], host: str) -> type[BaseHTTPRequestHandler]:
    class Metrics(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            if self.path.split("?")[0] != "/metrics":
                self.send_error(404)
                return
            try:
                body = render_metrics(node_hardware(load_model(), host), counters, host)
                status = 200
            except (OSError, ValueError, KeyError) as e:
                body, status = f"lab model unreadable: {e}\n", 500
            data = body.encode("utf-8")
            self.send_response(status)
            self.send_header("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, format: str, *args: object) -> None:
            pass  # a scrape every few seconds would fill the log

    return Metrics
