"""The lab's InfiniBand fabric: ibsim built from the hardware model; OpenSM on the head.

ibsim runs in its own network namespace on the bridge (its remote mode listens on every
address it has) and reads console commands from a FIFO opened read-write, so it never sees
end-of-file and faults can be sent at run time (`send_command`, `unlink_hca`, ...). The real
infiniband-diags reach it from the head node through the umad2sim preload (`diag_wrapper`).

The subnet manager is the spec's: the opensm role installs the distribution's OpenSM on the
head (the lab spec's `fabric.subnet_manager`) with the lab's package `opensm-ibsim`, whose
service runs that OpenSM through the same preload, attached where the head's diags attach
(`sm_environment`, written into the head at boot). `lab up` installs and starts that service
before any converge (`start_subnet_manager`), so the unconverged lab has a swept fabric.
"""

from __future__ import annotations

import os
import re
import shlex
import stat
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

from cluster_lab import model as hw
from cluster_lab.config import LabConfig
from cluster_lab.host import LabError, ProcRef, spawn, stop_process

UMAD2SIM = "/usr/lib/x86_64-linux-gnu/umad2sim/libumad2sim.so"
# The diags the head node gets wrappers for; ibstat/ibstatus read sysfs, not MADs.
DIAGS = (
    "ibnetdiscover",
    "iblinkinfo",
    "perfquery",
    "ibqueryerrors",
    "ibswitches",
    "ibhosts",
    "ibnodes",
    "ibroute",
    "ibtracert",
    "ibaddr",
    "ibportstate",
    "smpquery",
    "saquery",
    "sminfo",
    "ibping",
)
# ibsim's link width codes, the InfiniBand LinkWidth bit values: 2 = 4X.
_WIDTH_CODE = {"1X": 1, "4X": 2, "8X": 4, "12X": 8, "2X": 16}
FABRIC_NS = "fabric"


def net_file(model: hw.HardwareModel) -> str:
    """The model as an ibsim topology (ibnetdiscover format), cabled as the model says.

    Node ids are the node descriptions, so console commands read like the field's words:
    `Unlink "gpu002 mlx5_3"[1]`. GUIDs and LIDs come from the model. Every port line ends
    the way ibnetdiscover prints it (`lid 8 4xHDR`): ibsim reads each port's enabled width
    and speed from there, which is how a degraded link (`1xHDR`, `4xEDR`) is modelled.
    """
    width = _WIDTH_CODE.get(model.fabric_width, 2)
    lines = [
        f"# lab {model.lab}: generated from the hardware model (generation {model.generation})",
        f"width={width}",
        "speed=7",
        "extspeed=7",
        "",
    ]
    switches = {s.name: s for s in model.switches}
    # switch -> port -> (peer id, peer port, peer description, peer lid, connection type)
    wiring: dict[str, dict[int, tuple[str, int, str, int, str]]] = {n: {} for n in switches}
    ca_ports: dict[str, tuple[str, int, str]] = {}
    for node in model.nodes:
        for hca in node.hcas:
            # A cable that is cut (port Down or Disabled) is simply not in the net file.
            if not hca.present or hca.port.phys_state != "LinkUp" or hca.leaf not in switches:
                continue
            kind = _connection(hca.port.width, hca.port.speed)
            wiring[hca.leaf][hca.leaf_port] = (
                hca.node_description,
                1,
                hca.node_description,
                hca.port.lid,
                kind,
            )
            ca_ports[hca.node_description] = (hca.leaf, hca.leaf_port, kind)
    for link in model.spine_links:
        if not link.up or link.leaf not in switches or link.spine not in switches:
            continue
        kind = _connection(link.width or model.fabric_width, link.speed or model.fabric_speed)
        leaf, spine = switches[link.leaf], switches[link.spine]
        wiring[link.leaf][link.leaf_port] = (
            spine.name,
            link.spine_port,
            spine.description,
            spine.lid,
            kind,
        )
        wiring[link.spine][link.spine_port] = (
            leaf.name,
            link.leaf_port,
            leaf.description,
            leaf.lid,
            kind,
        )
    # Device ids as real HDR parts report them: Quantum switch, ConnectX-6 HCA (ibsim 0.10
    # has no vendor id setting).
    lines += ["devid=0xcf08", ""]
    for switch in model.switches:
        lines.append(f"switchguid={switch.guid}")
        lines.append(
            f'Switch\t{switch.ports} "{switch.name}"\t\t# "{switch.description}"'
            f" enhanced port 0 lid {switch.lid} lmc 0"
        )
        for port in sorted(wiring[switch.name]):
            peer, peer_port, peer_desc, peer_lid, kind = wiring[switch.name][port]
            lines.append(
                f'[{port}]\t"{peer}"[{peer_port}]\t\t# "{peer_desc}" lid {peer_lid} {kind}'
            )
        lines.append("")
    lines += ["devid=0x101b", ""]
    for node in model.nodes:
        for hca in node.hcas:
            if hca.node_description not in ca_ports:
                continue
            leaf_name, leaf_port, kind = ca_ports[hca.node_description]
            leaf = switches[leaf_name]
            lines.append(f"caguid={hca.node_guid}")
            lines.append(f'Ca\t1 "{hca.node_description}"\t\t# "{hca.node_description}"')
            lines.append(
                f'[1]\t"{leaf.name}"[{leaf_port}]\t\t# lid {hca.port.lid} lmc 0 '
                f'"{leaf.description}" lid {leaf.lid} {kind}'
            )
            lines.append("")
    return "\n".join(lines) + "\n"


def _connection(width: str, speed: str) -> str:
    """ibnetdiscover's connection type, e.g. `4xHDR`."""
    return f"{width.lower()}{speed}"


def attach_point(model: hw.HardwareModel) -> str:
    """The ibsim node the SM and the head's diags attach to: the first leaf's port 0.

    The lab's head has no compute HCA in the plan; a managed switch port keeps the
    discovered fabric exactly the planned one (no extra CA for the fabric check to flag).
    """
    for switch in model.switches:
        if switch.tier == "leaf":
            return switch.name
    if model.switches:
        return model.switches[0].name
    raise LabError("the lab model has no switches: nothing for the subnet manager to manage")


def fifo_path(config: LabConfig) -> Path:
    return config.fabric_dir / "ibsim.ctl"


def start(config: LabConfig, model: hw.HardwareModel) -> ProcRef:
    """Write the net file and start ibsim in the fabric namespace (no subnet manager: that is
    the head's, `start_subnet_manager`)."""
    fabric = config.fabric_dir
    fabric.mkdir(parents=True, exist_ok=True)
    (fabric / "net").write_text(net_file(model))
    fifo = fifo_path(config)
    if fifo.exists() and not stat.S_ISFIFO(fifo.stat().st_mode):
        fifo.unlink()
    if not fifo.exists():
        os.mkfifo(fifo, 0o600)
    ns = config.netns(FABRIC_NS)
    log = config.log_dir / "ibsim.log"
    # A fresh log: readiness and command answers are read from it.
    if log.exists():
        log.replace(log.with_suffix(".log.old"))
    # Read-write, so ibsim never sees end-of-file when a writer closes.
    console = os.open(fifo, os.O_RDWR)
    try:
        ibsim = spawn(
            ["ip", "netns", "exec", ns, "ibsim", "-s", "-r", str(fabric / "net")],
            log=config.log_dir / "ibsim.log",
            stdin=console,
            cwd=fabric,
        )
    finally:
        os.close(console)
    try:
        _wait_for_text(log, "sim>", 10, "ibsim", ibsim)
        _replay_counters(config, model)
    except BaseException:
        stop_process(ibsim)  # leave nothing half-started behind
        raise
    return ibsim


def _replay_counters(config: LabConfig, model: hw.HardwareModel) -> None:
    """Port counters live in the model; a fresh ibsim starts at zero, so set them again."""
    for node in model.nodes:
        for hca in node.hcas:
            for counter, value in sorted(hca.port.counters.items()):
                if value and re.fullmatch(r"[A-Za-z]+", counter):
                    set_port_counter(config, hca.node_description, 1, counter, value)
            # The leaf end of the cable: the power cycles (and flaps) its switch port counted.
            leaf_downs = link_downed(hca, time.time())[1]
            if leaf_downs:
                set_port_counter(config, hca.leaf, hca.leaf_port, LINK_DOWNED, leaf_downs)


# The lab's OpenSM service (cluster_lab/sim/packages.py): the distribution's opensm, run by the
# unit of package opensm-ibsim through the umad2sim preload; the opensm role manages it in the lab
# (cluster_lab/data/group_vars.yml: opensm_extra_packages, opensm_service).
SM_SERVICE = "opensm-ibsim"
SM_ENV_FILE = "etc/cluster-tool-lab/ibsim.env"
SM_LOG = "/var/log/opensm.log"
SM_TIMEOUT = 60.0

Runner = Callable[[str], "subprocess.CompletedProcess[str]"]


def sm_environment(config: LabConfig, model: hw.HardwareModel) -> str:
    """The head's /etc/cluster-tool-lab/ibsim.env: where the lab's OpenSM service reaches ibsim
    and the switch port it attaches to (the head's diags attach there too)."""
    return (
        "# cluster-tool lab: the fabric simulator the head's subnet manager runs against.\n"
        f"IBSIM_SERVER_NAME={config.ibsim_address}\n"
        f"SIM_HOST={shlex.quote(attach_point(model))}\n"
    )


def _master(run: Runner) -> bool:
    """Whether an SM answers the head's sminfo as master (none answers while none runs)."""
    out = run("LAB_IB_TIMEOUT=5 sminfo 2>/dev/null")
    return out.returncode == 0 and "SMINFO_MASTER" in out.stdout


def stop_subnet_manager(run: Runner) -> bool:
    """Stop the head's OpenSM service before its ibsim goes: OpenSM clears its IsSM bit through
    umad2sim as it exits, and a new ibsim handed that for a client it never had crashes (ibsim
    0.10, SIGSEGV; seen in the lab). False when the head has no such service."""
    result = run(f"[ -x /etc/init.d/{SM_SERVICE} ] || exit 3; service {SM_SERVICE} stop >/dev/null")
    if result.returncode == 3:
        return False
    if result.returncode != 0:
        raise LabError(f"the head's {SM_SERVICE} did not stop: {result.stderr.strip()[-300:]}")
    return True


def start_subnet_manager(run: Runner, *, install: bool, timeout: float = SM_TIMEOUT) -> bool:
    """(Re)start the head's OpenSM service and wait until it answers sminfo as master; `run`
    runs a shell command on the head. With `install`, installs its package first (from the lab
    repository), as `lab up` does before any converge; without, a head that has none is left
    alone (False).
    """
    apt = "DEBIAN_FRONTEND=noninteractive apt-get -q"
    steps = [f"{apt} update >/dev/null", f"{apt} -y install {SM_SERVICE} >/dev/null"]
    if not install:
        steps = [f"[ -x /etc/init.d/{SM_SERVICE} ] || exit 3"]
    result = run(" && ".join([*steps, f"service {SM_SERVICE} restart >/dev/null"]))
    if not install and result.returncode == 3:
        return False
    if result.returncode != 0:
        raise LabError(f"the head's {SM_SERVICE} did not start: {result.stderr.strip()[-300:]}")
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if _master(run):
            return True
        time.sleep(0.5)
    seen = run(f"service {SM_SERVICE} status; tail -n 5 {SM_LOG}")
    raise LabError(
        f"the head's OpenSM answered no sminfo as master after {timeout:.0f} s: "
        + " | ".join((seen.stdout + seen.stderr).strip().splitlines()[-6:])
    )


def _wait_for_text(path: Path, text: str, timeout: float, what: str, proc: ProcRef) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if text in path.read_text(errors="replace"):
                return
        except FileNotFoundError:
            pass
        if not proc.alive():
            raise LabError(f"{what} exited while starting (see {path})")
        time.sleep(0.1)
    raise LabError(f"{what}: no {text!r} after {timeout:.0f} s (see {path})")


def send_command(config: LabConfig, command: str, *, timeout: float = 5.0) -> str:
    """Send one ibsim console command (e.g. `Unlink "gpu002 mlx5_3"[1]`); returns its output.

    Waits until ibsim has printed its next prompt, so the change is in effect on return.
    """
    if "\n" in command:
        raise LabError("one ibsim command at a time (no newlines)")
    fifo = fifo_path(config)
    if not fifo.exists():
        raise LabError(f"{fifo}: the lab fabric is not running")
    log = config.log_dir / "ibsim.log"
    before = log.read_text(errors="replace") if log.exists() else ""
    prompts = before.count("sim>")
    # Non-blocking: with no ibsim reading the FIFO, a plain open would wait forever.
    try:
        fd = os.open(fifo, os.O_WRONLY | os.O_NONBLOCK)
    except OSError as exc:  # ENXIO: nobody reads the console
        raise LabError(f"ibsim is not running (its console {fifo}: {exc.strerror})") from exc
    try:
        os.write(fd, (command + "\n").encode())
    finally:
        os.close(fd)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        now = log.read_text(errors="replace")
        if now.count("sim>") > prompts:
            return now[len(before) :].replace("sim>", "").strip()
        time.sleep(0.05)
    raise LabError(f"ibsim did not answer {command!r} within {timeout:.0f} s")


def _port(node_id: str, port: int) -> str:
    if '"' in node_id:
        raise LabError(f"bad ibsim node id {node_id!r}")
    return f'"{node_id}"[{port}]'


def unlink_hca(config: LabConfig, node: str, device: str) -> str:
    """Cut the cable of one HCA (the port goes Down); `relink_hca` restores it."""
    return send_command(config, f"Unlink {_port(f'{node} {device}', 1)}")


def relink_hca(config: LabConfig, node: str, device: str) -> str:
    return send_command(config, f"ReLink {_port(f'{node} {device}', 1)}")


def unlink_port(config: LabConfig, node_id: str, port: int) -> str:
    """Cut the cable on any port: a switch name or an HCA's `"node mlx5_N"`."""
    return send_command(config, f"Unlink {_port(node_id, port)}")


def relink_port(config: LabConfig, node_id: str, port: int) -> str:
    return send_command(config, f"ReLink {_port(node_id, port)}")


def link_ports(config: LabConfig, a: str, a_port: int, b: str, b_port: int) -> str:
    """Cable two free ports together (re-cabling: unlink both ends first)."""
    return send_command(config, f"Link {_port(a, a_port)} {_port(b, b_port)}")


def set_port_counter(config: LabConfig, node_id: str, port: int, counter: str, value: int) -> str:
    """Set a PortCounters field, e.g. `SymbolErrorCounter`, as perfquery/ibqueryerrors read it."""
    if not re.fullmatch(r"[A-Za-z]+", counter):
        raise LabError(f"bad counter name {counter!r}")
    return send_command(
        config, f"PerformanceSet {_port(node_id, port)} PortCounters.{counter}={int(value)}"
    )


# The leaf end's LinkDownedCounter (every power cycle of the node, kept as a switch keeps it),
# held in the model beside the HCA.
LEAF_LINK_DOWNED = "leaf_link_downed"
LINK_DOWNED = "LinkDownedCounter"


def link_downed(hca: hw.Hca, now: float) -> tuple[int, int]:
    """(HCA end, leaf end) LinkDownedCounter of one cable as the model counts it: the leaf end
    keeps every power cycle of the node, both ends count the flaps of lab fault link-flap.
    8-bit counters: they stop at 255."""
    flaps = 0
    period = float(getattr(hca, "flap_period", 0) or 0)
    since = float(getattr(hca, "flap_since", 0) or 0)
    if period > 0 and now >= since:
        flaps = int((now - since) // period) + 1
    here = int(hca.port.counters.get(LINK_DOWNED, 0)) + flaps
    there = int(getattr(hca, LEAF_LINK_DOWNED, 0) or 0) + flaps
    return min(here, 255), min(there, 255)


def count_power_cycle(node: hw.Node) -> None:
    """A node's power cycle (BMC off/on, reboot, re-image) takes each of its links down: both
    ends of every cable count one more LinkDowned (the HCA's PortCounters, then the leaf port's,
    kept in the model across the power cycle as the switch keeps it). 8-bit: they stop at 255.
    A real node's counters are rarely cleared, so this is what `validate --fabric` reads after
    every maintenance."""
    for hca in node.hcas:
        here = int(hca.port.counters.get(LINK_DOWNED, 0))
        hca.port.counters = {**hca.port.counters, LINK_DOWNED: min(here + 1, 255)}
        there = int(getattr(hca, LEAF_LINK_DOWNED, 0) or 0)
        setattr(hca, LEAF_LINK_DOWNED, min(there + 1, 255))


def set_link_downed(config: LabConfig, node: str, hca: hw.Hca, now: float) -> tuple[int, int]:
    """Put `link_downed` into ibsim at both ends of the node's cable; returns what it set."""
    here, there = link_downed(hca, now)
    set_port_counter(config, f"{node} {hca.device}", 1, "LinkDownedCounter", here)
    set_port_counter(config, hca.leaf, hca.leaf_port, "LinkDownedCounter", there)
    return here, there


def diag_wrapper(config: LabConfig, model: hw.HardwareModel, tool: str) -> str:
    """A /usr/local/sbin/<tool> for the head: the real diag, aimed at the lab's ibsim."""
    return f"""#!/bin/sh
# lab: the real {tool} against the lab's fabric simulator (ibsim at {config.ibsim_address}),
# attached where the subnet manager is. Every diag runs under `timeout`: some hang forever.
export IBSIM_SERVER_NAME={config.ibsim_address}
export SIM_HOST='{attach_point(model)}'
export LD_PRELOAD={UMAD2SIM}
timeout --kill-after=5 "${{LAB_IB_TIMEOUT:-60}}" /usr/sbin/{tool} "$@"
rc=$?
# umad2sim leaves ./sys-<pid> folders behind; remove those of finished clients.
for d in ./sys-[0-9]*; do
    [ -d "$d" ] && ! kill -0 "${{d#./sys-}}" 2>/dev/null && rm -rf "$d"
done
exit $rc
"""
