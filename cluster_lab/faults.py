"""Faults the lab can inject into its hardware model, and how to heal them.

Each fault is a pure change of the model's JSON form (`HardwareModel.model_dump(mode="json")`):
it records what it replaced, so `heal` restores exactly that, even when faults are healed
out of order. The simulators, the sysfs trees and ibsim all derive from the model, so one
change shows in every tool.
"""

from __future__ import annotations

import copy
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from cluster_lab.sim.perf import LANE_GBS, WIDTH_LANES
from cluster_tool.errors import UsageError

if TYPE_CHECKING:
    pass

# Kernel modules the simulated driver stack loads (a node without the key has all of them).
DEFAULT_MODULES = ["nvidia", "nvidia_uvm", "nvidia_modeset", "nvidia_peermem"]
_MISSING = {"__missing__": True}  # the key was absent before the fault set it


class FaultError(UsageError):
    """A fault that names something the lab does not have, or a bad value."""


Path_ = tuple[str | int, ...]


@dataclass(frozen=True)
class FaultKind:
    """One `lab inject` sub-command: its arguments and what it changes."""

    name: str
    args: tuple[str, ...]
    help: str
    apply: Callable[..., list[tuple[Path_, Any]]]


def _node_index(data: dict[str, Any], name: str) -> int:
    for i, node in enumerate(data["nodes"]):
        if node["name"] == name:
            return i
    names = ", ".join(n["name"] for n in data["nodes"])
    raise FaultError(f"no lab node {name!r}; nodes: {names}")


def hca_index(data: dict[str, Any], node: str, device: str) -> tuple[int, int]:
    """(node index, HCA index) of `device` on `node` in the model's JSON form."""
    n = _node_index(data, node)
    for i, hca in enumerate(data["nodes"][n].get("hcas", [])):
        if hca["device"] == device:
            return n, i
    devices = ", ".join(h["device"] for h in data["nodes"][n].get("hcas", [])) or "none"
    raise FaultError(f"{node} has no compute HCA {device!r}; it has: {devices}")


def _gpu_index(data: dict[str, Any], node: str, gpu: str | int) -> tuple[int, int]:
    n = _node_index(data, node)
    try:
        index = int(gpu)
    except ValueError as exc:
        raise FaultError(f"GPU must be an index (0-7), not {gpu!r}") from exc
    for i, g in enumerate(data["nodes"][n].get("gpus", [])):
        if g["index"] == index:
            return n, i
    raise FaultError(f"{node} has no GPU {index}")


def _hca(node: str, device: str) -> Callable[[dict[str, Any]], Path_]:
    def where(data: dict[str, Any]) -> Path_:
        n, i = hca_index(data, node, device)
        return ("nodes", n, "hcas", i)

    return where


def cable_swap(data: dict[str, Any], node: str, hca_a: str, hca_b: str) -> list[tuple[Path_, Any]]:
    """Swap the cables of two HCAs of a node: each lands on the other's leaf port."""
    a, b = _hca(node, hca_a)(data), _hca(node, hca_b)(data)
    if a == b:
        raise FaultError("cable-swap needs two different HCAs")
    ha, hb = _get(data, a), _get(data, b)
    return [
        ((*a, "leaf"), hb["leaf"]),
        ((*a, "leaf_port"), hb["leaf_port"]),
        ((*b, "leaf"), ha["leaf"]),
        ((*b, "leaf_port"), ha["leaf_port"]),
    ]


def cable_move(
    data: dict[str, Any], node: str, hca: str, leaf: str, port: str | int
) -> list[tuple[Path_, Any]]:
    """Move one HCA's cable to another leaf port (the wrong rail, say)."""
    where = _hca(node, hca)(data)
    leaves = {s["name"]: s for s in data.get("switches", []) if s.get("tier") == "leaf"}
    if leaf not in leaves:
        raise FaultError(f"no leaf switch {leaf!r}; leaves: {', '.join(sorted(leaves))}")
    number = _positive(port, "port")
    if number > int(leaves[leaf].get("ports", 64)):
        raise FaultError(f"{leaf} has {leaves[leaf]['ports']} ports, not {number}")
    for other in data["nodes"]:
        for h in other.get("hcas", []):
            if h["leaf"] == leaf and h["leaf_port"] == number:
                raise FaultError(f"{leaf} port {number} is taken by {other['name']} {h['device']}")
    return [((*where, "leaf"), leaf), ((*where, "leaf_port"), number)]


def link_down(
    data: dict[str, Any], node: str, hca: str, hang: bool = False
) -> list[tuple[Path_, Any]]:
    """Cut an HCA's cable: the port goes Down (polling for a peer that is gone)."""
    where = _hca(node, hca)(data)
    changes: list[tuple[Path_, Any]] = [
        ((*where, "port", "state"), "Down"),
        ((*where, "port", "phys_state"), "Polling"),
    ]
    if hang:
        changes.append(((*where, "nccl_on_down"), "hang"))
    return changes


def link_degrade(data: dict[str, Any], node: str, hca: str, width: str) -> list[tuple[Path_, Any]]:
    """A link that trained at fewer lanes (1X or 2X): its rate drops, it stays Active."""
    if width not in ("1X", "2X"):
        raise FaultError(f"--width must be 1X or 2X, not {width!r}")
    where = _hca(node, hca)(data)
    speed = _get(data, (*where, "port")).get("speed", "HDR")
    rate = int(LANE_GBS.get(speed, 6.25) * WIDTH_LANES[width] * 8)
    return [((*where, "port", "width"), width), ((*where, "port", "rate_gbps"), rate)]


def port_errors(
    data: dict[str, Any], node: str, hca: str, symbol: str | int
) -> list[tuple[Path_, Any]]:
    """Raise a port's SymbolErrorCounter (a dirty or failing cable)."""
    where = _hca(node, hca)(data)
    return [((*where, "port", "counters", "SymbolErrorCounter"), _positive(symbol, "--symbol"))]


def link_ber(
    data: dict[str, Any], node: str, hca: str, rate: str | float
) -> list[tuple[Path_, Any]]:
    """A marginal cable: bit errors at raw BER RATE before FEC (`mlxlink`'s Raw Physical BER).
    RS-FEC hides them until RATE nears its limit (about 1e-4); past it errors reach the link
    layer (Effective Physical Errors)."""
    where = _hca(node, hca)(data)
    try:
        value = float(rate)
    except ValueError as exc:
        raise FaultError(f"RATE must be a bit error rate such as 1e-9, not {rate!r}") from exc
    if not 0 < value < 0.5:
        raise FaultError(f"RATE must be between 0 and 0.5 (a bit error rate), not {value}")
    return [((*where, "raw_ber"), value)]


def link_flap(
    data: dict[str, Any], node: str, hca: str, period: str | float, now: float | None = None
) -> list[tuple[Path_, Any]]:
    """A link that goes down and comes back every PERIOD seconds, from now: the kernel log's
    mlx5 `Link down` / `Link up` lines and the LinkDownedCounter at both ends of the cable
    (the lab agent keeps ibsim's in step) count the same flaps. ibstat shows it up."""
    where = _hca(node, hca)(data)
    try:
        seconds = float(period)
    except ValueError as exc:
        raise FaultError(f"PERIOD must be seconds between flaps, not {period!r}") from exc
    if not 1 <= seconds <= 86400:
        raise FaultError(f"PERIOD must be 1 to 86400 seconds, not {seconds:g}")
    now = time.time() if now is None else now
    return [((*where, "flap_period"), seconds), ((*where, "flap_since"), round(now, 3))]


def spine_link_down(data: dict[str, Any], leaf: str, port: str | int) -> list[tuple[Path_, Any]]:
    """Cut one leaf-to-spine uplink."""
    number = _positive(port, "port")
    for i, link in enumerate(data.get("spine_links", [])):
        if link["leaf"] == leaf and link["leaf_port"] == number:
            return [(("spine_links", i, "up"), False)]
    raise FaultError(f"no spine link on {leaf} port {number}")


def _since_boot(data: dict[str, Any], n: int, now: float) -> float:
    boot = float(data["nodes"][n].get("boot_time", now - 3600.0))
    return round(max(now - boot, 1.0), 6)


def gpu_ecc(
    data: dict[str, Any], node: str, gpu: str | int, count: int = 1, now: float | None = None
) -> list[tuple[Path_, Any]]:
    """Uncorrectable (double-bit) ECC errors in a GPU's memory: volatile and aggregate counts,
    a row remapping pending a reset, and the Xid 48 the driver logs."""
    n, g = _gpu_index(data, node, gpu)
    now = time.time() if now is None else now
    record = data["nodes"][n]["gpus"][g]
    ecc = record.get("ecc", {})
    base: Path_ = ("nodes", n, "gpus", g)
    return [
        ((*base, "ecc", "volatile_dbe"), int(ecc.get("volatile_dbe", 0)) + count),
        ((*base, "ecc", "aggregate_dbe"), int(ecc.get("aggregate_dbe", 0)) + count),
        ((*base, "ecc", "retired_pages_dbe"), int(ecc.get("retired_pages_dbe", 0)) + count),
        ((*base, "remap_pending"), True),
        *_xid_changes(base, record, _since_boot(data, n, now), 48),
    ]


def _xid_changes(
    base: Path_, record: dict[str, Any], since_boot: float, code: int
) -> list[tuple[Path_, Any]]:
    # The model keeps the codes (`xids`); the simulated kernel log also needs when each came.
    return [
        ((*base, "xids"), [*record.get("xids", []), code]),
        ((*base, "xid_events"), [*record.get("xid_events", []), [since_boot, code]]),
    ]


def gpu_xid(
    data: dict[str, Any], node: str, gpu: str | int, code: str | int, now: float | None = None
) -> list[tuple[Path_, Any]]:
    """An Xid event in the node's kernel log for one GPU."""
    n, g = _gpu_index(data, node, gpu)
    now = time.time() if now is None else now
    record = data["nodes"][n]["gpus"][g]
    code_ = _positive(code, "Xid code")
    return _xid_changes(("nodes", n, "gpus", g), record, _since_boot(data, n, now), code_)


def nvlink_errors(
    data: dict[str, Any], node: str, gpu: str | int, link: int = 0
) -> list[tuple[Path_, Any]]:
    """A failing NVLink: one link of a GPU keeps retransmitting (CRC and replay counters
    climb; 45068 CRC errors as a failing V100 link counted in a public write-up)."""
    n, g = _gpu_index(data, node, gpu)
    counts = dict(data["nodes"][n]["gpus"][g].get("nvlink_errors", {}))
    counts[str(link)] = {"replay": 310, "recovery": 0, "crc": 45068}
    return [(("nodes", n, "gpus", g, "nvlink_errors"), counts)]


def pcie_width(
    data: dict[str, Any], node: str, device: str, width: str | int
) -> list[tuple[Path_, Any]]:
    """A GPU (by index) or HCA (by mlx5 name) whose PCIe link trained at fewer lanes (a
    badly seated card or riser): `lspci` LnkSta, and nvidia-smi for a GPU."""
    lanes = _positive(width, "WIDTH")
    if lanes not in (1, 2, 4, 8):
        raise FaultError(f"WIDTH must be 1, 2, 4 or 8 lanes (of 16), not {lanes}")
    if device.isdigit():
        n, g = _gpu_index(data, node, device)
        return [(("nodes", n, "gpus", g, "pcie_width_current"), lanes)]
    return [((*_hca(node, device)(data), "pcie_width_current"), lanes)]


def gpu_hot(
    data: dict[str, Any], node: str, gpu: str | int, celsius: str | int
) -> list[tuple[Path_, Any]]:
    """A GPU running hot (past 87 C it throttles: HW thermal slowdown)."""
    n, g = _gpu_index(data, node, gpu)
    value = _positive(celsius, "CELSIUS")
    if value > 125:
        raise FaultError(f"{value} C is past any GPU's shutdown temperature")
    return [(("nodes", n, "gpus", g, "temperature_c"), value)]


def gpu_clock(
    data: dict[str, Any], node: str, gpu: str | int, mhz: str | int
) -> list[tuple[Path_, Any]]:
    """A GPU whose application clock was set to MHZ (`nvidia-smi -ac 2619,MHZ`), below its
    default 1980 MHz: nvidia-smi shows the clock and the Applications Clocks Setting reason,
    and the node's collectives run that much slower."""
    from cluster_lab.sim.hw import SM_MAX_MHZ

    n, g = _gpu_index(data, node, gpu)
    value = _positive(mhz, "MHZ")
    if not 0 < value < SM_MAX_MHZ:
        raise FaultError(f"MHZ must be between 1 and {SM_MAX_MHZ - 1} (the default), not {value}")
    return [(("nodes", n, "gpus", g, "sm_clock_cap_mhz"), value)]


def gpu_missing(data: dict[str, Any], node: str, gpu: str | int) -> list[tuple[Path_, Any]]:
    """A GPU that fell off the bus: the driver no longer lists it."""
    n, g = _gpu_index(data, node, gpu)
    return [(("nodes", n, "gpus", g, "present"), False)]


def slow_node(data: dict[str, Any], node: str, factor: str | float) -> list[tuple[Path_, Any]]:
    """A straggler: every collective it is in runs at FACTOR of its speed (0 < FACTOR < 1)."""
    n = _node_index(data, node)
    try:
        value = float(factor)
    except ValueError as exc:
        raise FaultError(f"FACTOR must be a number, not {factor!r}") from exc
    if not 0 < value < 1:
        raise FaultError(f"FACTOR must be between 0 and 1 (0.5 = half speed), not {value}")
    return [(("nodes", n, "slow_factor"), value)]


def module_missing(data: dict[str, Any], node: str, module: str) -> list[tuple[Path_, Any]]:
    """A kernel module the driver stack should load is missing (nvidia_peermem: GPUDirect
    RDMA the peermem way). `dmabuf` names the other way, the kernel's dma-buf support for
    GPU memory (a kernel feature, not a module): NCCL uses GPUDirect while either works."""
    n = _node_index(data, node)
    if module == "dmabuf":
        if data["nodes"][n].get("dmabuf", True) is False:
            raise FaultError(f"{node} has no dma-buf support already")
        return [(("nodes", n, "dmabuf"), False)]
    modules = list(data["nodes"][n].get("modules", DEFAULT_MODULES))
    if module not in modules:
        raise FaultError(f"{node} has no module {module!r} loaded; loaded: {', '.join(modules)}")
    return [(("nodes", n, "modules"), [m for m in modules if m != module])]


def nccl_corrupt(data: dict[str, Any], node: str) -> list[tuple[Path_, Any]]:
    """Silent data corruption: the node's ranks hand every collective wrong values that no
    ECC counter shows; nccl-tests' data check counts them (`#wrong`, out-of-bounds FAILED)."""
    n = _node_index(data, node)
    return [(("nodes", n, "nccl_corrupt"), True)]


def node_down(data: dict[str, Any], node: str) -> list[tuple[Path_, Any]]:
    """A node that died: it answers nothing (the lab also stops its processes)."""
    n = _node_index(data, node)
    return [(("nodes", n, "down"), True)]


# A ConnectX-7 build off the lab's (28.46.1006, DOCA 3.1.0's) but on the same DOCA 3.1 line:
# 28.46.3048, what a real ConnectX-7 at NDR runs in the mlxlink capture of
# tests/fixtures/parsers/real/mlxlink_show_module_cx7_ndr_osfp_dac_prompt_line.txt. An adapter
# flashed apart from the rest: its peers differ from it, no matrix rule does.
SKEWED_CONNECTX7_FIRMWARE = "28.46.3048"


def version_skew(
    data: dict[str, Any], node: str, component: str, device: str | None = None
) -> list[tuple[Path_, Any]]:
    """A node whose fabric manager is one patch behind its driver (`fabricmanager`: the
    versions must be equal, so it is incompatible), or one of its HCAs on other firmware than
    its peers (`hca-fw [mlx5_N]`, the first compute HCA by default)."""
    n = _node_index(data, node)
    if component == "fabricmanager":
        if device is not None:
            raise FaultError("version-skew NODE fabricmanager takes no device")
        from cluster_lab.sim.packages import DRIVER_VERSION

        driver = str(data["nodes"][n].get("driver_version", DRIVER_VERSION.rsplit("-", 1)[0]))
        *head, patch = driver.split(".")
        if not patch.isdigit() or int(patch) == 0:
            raise FaultError(f"cannot put the fabric manager one patch behind driver {driver}")
        behind = ".".join([*head, f"{int(patch) - 1:0{len(patch)}d}"])
        return [(("nodes", n, "fabricmanager_version"), behind)]
    if component == "hca-fw":
        hcas = data["nodes"][n].get("hcas", [])
        if not hcas:
            raise FaultError(f"{node} has no compute HCA")
        where = _hca(node, device or hcas[0]["device"])(data)
        return [((*where, "fw_ver"), SKEWED_CONNECTX7_FIRMWARE)]
    raise FaultError(f"COMPONENT must be fabricmanager or hca-fw, not {component!r}")


def _positive(value: str | int, what: str) -> int:
    try:
        number = int(value)
    except ValueError as exc:
        raise FaultError(f"{what} must be a whole number, not {value!r}") from exc
    if number < 0:
        raise FaultError(f"{what} must not be negative")
    return number


FAULTS: dict[str, FaultKind] = {
    k.name: k
    for k in (
        FaultKind("cable-swap", ("NODE", "HCA", "HCA"), "swap two HCAs' cables", cable_swap),
        FaultKind("cable-move", ("NODE", "HCA", "LEAF", "PORT"), "move a cable", cable_move),
        FaultKind("link-down", ("NODE", "HCA"), "cut an HCA's link", link_down),
        FaultKind("link-degrade", ("NODE", "HCA"), "train a link at 1X/2X", link_degrade),
        FaultKind("port-errors", ("NODE", "HCA"), "raise symbol errors", port_errors),
        FaultKind("link-ber", ("NODE", "HCA", "RATE"), "a raw bit error rate", link_ber),
        FaultKind("link-flap", ("NODE", "HCA", "PERIOD"), "a link down every PERIOD s", link_flap),
        FaultKind("spine-link-down", ("LEAF", "PORT"), "cut a leaf uplink", spine_link_down),
        FaultKind("gpu-ecc", ("NODE", "GPU"), "uncorrectable ECC errors", gpu_ecc),
        FaultKind("gpu-xid", ("NODE", "GPU", "CODE"), "an Xid in the kernel log", gpu_xid),
        FaultKind("gpu-hot", ("NODE", "GPU", "CELSIUS"), "a GPU running hot", gpu_hot),
        FaultKind("nvlink-errors", ("NODE", "GPU"), "NVLink CRC/replay errors", nvlink_errors),
        FaultKind("pcie-width", ("NODE", "DEVICE", "WIDTH"), "a PCIe link at x1-x8", pcie_width),
        FaultKind("gpu-clock", ("NODE", "GPU", "MHZ"), "a GPU's clock capped", gpu_clock),
        FaultKind("gpu-missing", ("NODE", "GPU"), "a GPU off the bus", gpu_missing),
        FaultKind("slow-node", ("NODE", "FACTOR"), "a straggler node", slow_node),
        FaultKind("module-missing", ("NODE", "MODULE"), "a kernel module gone", module_missing),
        FaultKind("nccl-corrupt", ("NODE",), "wrong values in collectives", nccl_corrupt),
        FaultKind("node-down", ("NODE",), "a dead node", node_down),
        FaultKind(
            "version-skew",
            ("NODE", "COMPONENT", "[DEVICE]"),
            "fabric manager behind the driver, or one HCA's firmware behind its peers",
            version_skew,
        ),
    )
}


def _get(data: Any, path: Path_) -> Any:
    for key in path:
        data = data[key]
    return data


def _lookup(data: Any, path: Path_) -> Any:
    """The value at `path`, or _MISSING when the last key is absent."""
    parent = _get(data, path[:-1])
    key = path[-1]
    if isinstance(parent, dict) and key not in parent:
        return _MISSING
    return copy.deepcopy(parent[key])


def _put(data: Any, path: Path_, value: Any) -> None:
    parent = data
    for key in path[:-1]:
        if isinstance(parent, dict) and key not in parent:
            parent[key] = {}
        parent = parent[key]
    if value == _MISSING:
        if isinstance(parent, dict):
            parent.pop(path[-1], None)
    else:
        parent[path[-1]] = value


def inject(data: dict[str, Any], kind: str, *args: Any, **options: Any) -> dict[str, Any]:
    """Apply fault `kind` to the model (in place); returns the fault record added to
    `data["faults"]`: {id, kind, target, args, params, injected_at, undo}."""
    if kind not in FAULTS:
        raise FaultError(f"unknown fault {kind!r}; faults: {', '.join(FAULTS)}")
    changes = FAULTS[kind].apply(data, *args, **options)
    undo = [[list(path), _lookup(data, path)] for path, _ in changes]
    for path, value in changes:
        _put(data, path, value)
    faults = data.setdefault("faults", [])
    taken = {f["id"] for f in faults}
    n = 1
    while f"{kind}-{n}" in taken:
        n += 1
    record = {
        "id": f"{kind}-{n}",
        "kind": kind,
        "target": " ".join(str(a) for a in args),
        "args": [str(a) for a in args],
        "params": {k: v for k, v in options.items() if k != "now"},
        "injected_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(options.get("now"))),
        "undo": undo,
    }
    faults.append(record)
    return record


def operator_view(record: dict[str, Any]) -> dict[str, Any]:
    """A fault as `lab status --json` and `lab inject --json` show it: id, kind, target, the
    arguments as typed after `lab inject KIND` (options as their flags), and when it was
    injected. The model paths and old values `heal` needs stay in the record on disk."""
    arguments = [str(a) for a in record.get("args", str(record.get("target", "")).split())]
    for name, value in (record.get("params") or {}).items():
        flag = "--" + name.replace("_", "-")
        if value is True:
            arguments.append(flag)
        elif value is not None and value is not False:
            arguments += [flag, str(value)]
    view = {
        "id": record["id"],
        "kind": record["kind"],
        "target": record.get("target", ""),
        "arguments": arguments,
    }
    # Faults injected before the time was recorded have none to show.
    if record.get("injected_at"):
        view["injected_at"] = record["injected_at"]
    return view


def heal(data: dict[str, Any], fault_id: str) -> dict[str, Any]:
    """Undo one fault (in place); returns its record. A value a later active fault changed
    again stays as that fault set it, and healing that one later restores the original."""
    faults = data.get("faults", [])
    position = next((i for i, f in enumerate(faults) if f["id"] == fault_id), None)
    if position is None:
        active = ", ".join(f["id"] for f in faults) or "none"
        raise FaultError(f"no active fault {fault_id!r}; active: {active}")
    record = faults.pop(position)
    later = faults[position:]
    for path, old in reversed(record.get("undo", [])):
        shadow = next(
            (u for f in later for u in f.get("undo", []) if list(u[0]) == list(path)), None
        )
        if shadow is not None:
            shadow[1] = old
        else:
            _put(data, tuple(path), old)
    return record


def heal_all(data: dict[str, Any]) -> list[dict[str, Any]]:
    """Undo every active fault, newest first; returns their records."""
    return [heal(data, f["id"]) for f in reversed(list(data.get("faults", [])))]
