"""Lab nodes: a network namespace on the bridge plus PID/mount/UTS/IPC/cgroup namespaces
around an overlay root over the cached base, booted by a tiny SysV-style init.

Host-side objects of one node (all named from the lab prefix, all removed by `remove_node`):
network namespace `<prefix>-<node>`, veth `<prefix><node>` on the bridge, a cgroup
`<lab cgroup>/<node>` in every hierarchy, and `<labdir>/nodes/<node>/` (overlay upper,
work, mount point, fake sysfs). Mounts live in the node's own mount namespace only, the
bind mount of `<labdir>/shared` (same path in every node) included.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path

from cluster_lab.config import LabConfig
from cluster_lab.host import LabError, ProcRef, run, stop_process

_BOOT_SCRIPT = Path(__file__).with_name("data") / "node-boot.sh"


# --- cgroups ------------------------------------------------------------------------------


@dataclass(frozen=True)
class CgroupHierarchy:
    """One mounted cgroup hierarchy of the host: where it is, how to mount it in a node."""

    mountpoint: str  # /sys/fs/cgroup/memory
    fstype: str  # cgroup or cgroup2
    options: str  # "memory", "none,name=systemd", "" for cgroup2
    lab_path: str  # absolute directory of the lab's cgroup in this hierarchy

    @property
    def unified(self) -> bool:
        """The host's only hierarchy: a pure cgroup v2 host (cgroup2 at /sys/fs/cgroup)."""
        return self.fstype == "cgroup2" and self.mountpoint == CGROUP_ROOT

    @property
    def node_dir_name(self) -> str:
        # A unified hierarchy is the node's /sys/fs/cgroup itself, as on a v2 host.
        return "." if self.unified else os.path.basename(self.mountpoint)


CGROUP_ROOT = "/sys/fs/cgroup"
# What Slurm's cgroup/v2 plugin asks of the cgroup it is given (cpuset and cpu for
# ConstrainCores, memory for ConstrainRAMSpace, pids); devices are an eBPF program in v2 and
# need no controller (https://slurm.schedmd.com/cgroup_v2.html, "Requirements").
CGROUP2_CONTROLLERS = ("cpuset", "cpu", "io", "memory", "pids")


def host_cgroup_hierarchies(
    cgroup_name: str, *, mountinfo: str | None = None, self_cgroup: str | None = None
) -> list[CgroupHierarchy]:
    """The host's cgroup hierarchies, each with the lab's cgroup below the caller's own.

    On a pure cgroup v2 host the lab's cgroup sits at the root instead: v2 enables a
    controller for a cgroup's children only while the cgroup itself holds no process (the
    "no internal process" rule), and the caller's own cgroup holds the caller.
    `mountinfo` and `self_cgroup` stand for /proc/self/mountinfo and /proc/self/cgroup."""
    # Read our own cgroup once: it changes as soon as we move a process.
    own: dict[str, str] = {}
    if self_cgroup is None:
        self_cgroup = Path("/proc/self/cgroup").read_text()
    for line in self_cgroup.splitlines():
        _hid, controllers, path = line.split(":", 2)
        own[controllers] = path
    if mountinfo is None:
        mountinfo = Path("/proc/self/mountinfo").read_text()
    result: list[CgroupHierarchy] = []
    for line in mountinfo.splitlines():
        left, _, right = line.partition(" - ")
        fstype, _source, super_opts = ([*right.split(), "", "", ""])[:3]
        if fstype not in ("cgroup", "cgroup2"):
            continue
        mountpoint = left.split()[4]
        if fstype == "cgroup2":
            key, options = "", ""
        else:
            opts = [o for o in super_opts.split(",") if o not in ("rw", "ro")]
            wanted = [o for o in opts if "=" not in o and o not in ("xattr", "noprefix")]
            named = [o for o in opts if o.startswith("name=")]
            key = ",".join(wanted + named)
            options = ",".join(wanted) if wanted else "none," + ",".join(named)
        base = "/" if (fstype, mountpoint) == ("cgroup2", CGROUP_ROOT) else own.get(key, "/")
        if mountpoint.startswith(CGROUP_ROOT):
            result.append(
                CgroupHierarchy(
                    mountpoint=mountpoint,
                    fstype=fstype,
                    options=options,
                    lab_path=os.path.join(mountpoint, base.lstrip("/"), cgroup_name),
                )
            )
    return result


def _make_cgroup(path: Path) -> None:
    path.mkdir(parents=True, exist_ok=True)
    # A cpuset cgroup takes no task until it has CPUs and memory nodes.
    for knob in ("cpuset.cpus", "cpuset.mems"):
        mine, parent = path / knob, path.parent / knob
        if mine.exists() and not mine.read_text().strip() and parent.exists():
            mine.write_text(parent.read_text())


def delegate_cgroup2(lab_cgroup: Path, node: str) -> Path:
    """Make `<lab cgroup>/<node>` a delegated cgroup v2 subtree, as systemd's Delegate=yes
    gives slurmd one: Slurm's controllers enabled for its children, the node's processes in
    its leaf `init` (the boot script moves them there), so a job's cgroup can take them."""
    node_cgroup = lab_cgroup / node
    for cg in (lab_cgroup, node_cgroup):
        cg.mkdir(exist_ok=True)
    for cg in (lab_cgroup.parent, lab_cgroup, node_cgroup):
        available = set((cg / "cgroup.controllers").read_text().split())
        enabled = set((cg / "cgroup.subtree_control").read_text().split())
        wanted = [c for c in CGROUP2_CONTROLLERS if c in available and c not in enabled]
        if wanted:
            (cg / "cgroup.subtree_control").write_text(" ".join(f"+{c}" for c in wanted))
    (node_cgroup / "init").mkdir(exist_ok=True)
    return node_cgroup


def remove_cgroup_tree(path: Path) -> None:
    """Remove a cgroup directory and its children, deepest first (rmdir only: never rm -r)."""
    if not path.is_dir():
        return
    for child in sorted(
        (p for p in path.rglob("*") if p.is_dir()), key=lambda p: len(p.parts), reverse=True
    ):
        with contextlib.suppress(OSError):
            child.rmdir()
    with contextlib.suppress(OSError):
        path.rmdir()


def cgroup_processes(path: Path) -> list[int]:
    """Pids in a cgroup and all its descendants."""
    pids: list[int] = []
    if not path.is_dir():
        return pids
    for procs in path.rglob("cgroup.procs"):
        try:
            pids.extend(int(p) for p in procs.read_text().split())
        except OSError:
            continue
    return pids


def memory_usage_bytes(hierarchies: list[CgroupHierarchy], node: str) -> int | None:
    """Memory charged to a node's cgroup (v1 memory controller or v2), or None if unavailable."""
    for h in hierarchies:
        if h.options == "memory" or h.unified:
            node_cgroup = Path(h.lab_path) / node
            for usage in (node_cgroup / "memory.usage_in_bytes", node_cgroup / "memory.current"):
                if usage.exists():
                    return int(usage.read_text())
    return None


# --- network -----------------------------------------------------------------------------


BRIDGE_ALIAS_PREFIX = "cluster-tool-lab:"


def ensure_bridge(config: LabConfig) -> None:
    """Create the lab bridge with the host's address on the lab subnet."""
    prefixlen = config.subnet.prefixlen
    run(["ip", "link", "add", config.bridge, "type", "bridge"])
    # The alias marks the bridge as this lab's, so crash cleanup never takes another's.
    run(["ip", "link", "set", config.bridge, "alias", bridge_alias(config)])
    # Nodes need no route off the machine; IPv6 link-local chatter only adds noise.
    _sysctl(f"net/ipv6/conf/{config.bridge}/disable_ipv6", "1")
    run(["ip", "addr", "add", f"{config.host_address}/{prefixlen}", "dev", config.bridge])
    run(["ip", "link", "set", config.bridge, "up"])


def bridge_alias(config: LabConfig) -> str:
    return f"{BRIDGE_ALIAS_PREFIX}{config.prefix}:{config.lab_dir}"


def is_our_bridge(config: LabConfig) -> bool:
    try:
        alias = Path("/sys/class/net", config.bridge, "ifalias").read_text().strip()
    except OSError:
        return False
    return alias == bridge_alias(config)


def _sysctl(key: str, value: str) -> None:
    path = Path("/proc/sys") / key
    if path.exists():
        with contextlib.suppress(OSError):
            path.write_text(value)


def add_netns(config: LabConfig, name: str, address: str, extra: tuple[str, ...] = ()) -> None:
    """A network namespace `<prefix>-<name>` with eth0 on the bridge at `address`."""
    ns, veth = config.netns(name), config.veth(name)
    prefixlen = config.subnet.prefixlen
    run(["ip", "netns", "add", ns])
    run(["ip", "link", "add", veth, "type", "veth", "peer", "name", "eth0", "netns", ns])
    _sysctl(f"net/ipv6/conf/{veth}/disable_ipv6", "1")
    run(["ip", "link", "set", veth, "master", config.bridge, "up"])
    batch = [
        "link set lo up",
        f"addr add {address}/{prefixlen} dev eth0",
        *(f"addr add {a}/{prefixlen} dev eth0" for a in extra),
        "link set eth0 up",
    ]
    run(["ip", "-n", ns, "-batch", "-"], input="\n".join(batch) + "\n")


def remove_netns(config: LabConfig, name: str) -> None:
    ns, veth = config.netns(name), config.veth(name)
    if Path("/sys/class/net", veth).exists():
        run(["ip", "link", "del", veth], check=False)
    if Path("/run/netns", ns).exists():
        run(["ip", "netns", "del", ns], check=False)


# --- the node ------------------------------------------------------------------------------


@dataclass(frozen=True)
class NodeSpec:
    """What a node is booted with."""

    name: str
    address: str
    hosts_file: str  # /etc/hosts content (every lab node by name)
    authorized_key: str
    apt_source: str  # the one line of /etc/apt/sources.list.d/lab.list
    # Extra files for the upper layer: relative path -> (content, mode).
    extra_files: dict[str, tuple[str, int]] = field(default_factory=dict)


def node_dir(config: LabConfig, name: str) -> Path:
    return config.nodes_dir / name


def prepare_upper(config: LabConfig, spec: NodeSpec) -> None:
    """Write the node's identity into its overlay upper layer (only while it is not mounted)."""
    upper = node_dir(config, spec.name) / "upper"
    for sub in ("upper", "work", "root"):
        (node_dir(config, spec.name) / sub).mkdir(parents=True, exist_ok=True)
    etc = upper / "etc"
    (etc / "apt" / "sources.list.d").mkdir(parents=True, exist_ok=True)
    (etc / "hostname").write_text(spec.name + "\n")
    (etc / "hosts").write_text(spec.hosts_file)
    machine_id = etc / "machine-id"
    if not machine_id.exists() or not machine_id.read_text().strip():
        machine_id.write_text(uuid.uuid4().hex + "\n")
    (etc / "apt" / "sources.list.d" / "lab.list").write_text(spec.apt_source + "\n")
    ssh = upper / "root" / ".ssh"
    ssh.mkdir(parents=True, exist_ok=True)
    (upper / "root").chmod(0o700)
    ssh.chmod(0o700)
    keys = ssh / "authorized_keys"
    keys.write_text(spec.authorized_key.strip() + "\n")
    keys.chmod(0o600)
    for rel, (content, mode) in spec.extra_files.items():
        path = upper / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(content)
        path.chmod(mode)


def wipe_upper(config: LabConfig, name: str) -> None:
    """Forget everything a node wrote: the re-image of a lab node."""
    for sub in ("upper", "work"):
        path = node_dir(config, name) / sub
        if path.exists():
            shutil.rmtree(path)


def start_node(
    config: LabConfig,
    spec: NodeSpec,
    lower: str,
    hierarchies: list[CgroupHierarchy],
) -> ProcRef:
    """Boot a node whose network namespace exists; returns the host-side supervisor process.

    `lower` is the overlay's lowerdir: the base, or `layer:base` for a node with extra tools.
    """
    directory = node_dir(config, spec.name)
    prepare_upper(config, spec)
    procs_files: list[Path] = []
    lines: list[str] = []
    delegated = ""
    for h in hierarchies:
        lines.append(f"{h.node_dir_name}:{h.fstype}:{h.options}")
        if h.unified:
            # The boot script enters this subtree itself: the supervisor must stay out of it.
            delegated = str(delegate_cgroup2(Path(h.lab_path), spec.name))
            continue
        cg = Path(h.lab_path) / spec.name
        _make_cgroup(Path(h.lab_path))
        _make_cgroup(cg)
        procs_files.append(cg / "cgroup.procs")
    env = {
        "PATH": "/usr/sbin:/usr/bin:/sbin:/bin",
        "LAB_NODE": spec.name,
        "LAB_BASE": lower,
        "LAB_NODE_DIR": str(directory),
        "LAB_MODEL_DIR": str(config.model_dir),
        "LAB_SHARED_DIR": str(config.shared_dir),
        "LAB_STEPS_DIR": str(config.steps_dir),
        "LAB_CGROUPS": "\n".join(lines),
        "LAB_CGROUP2_NODE": delegated,
    }
    argv = [
        "ip",
        "netns",
        "exec",
        config.netns(spec.name),
        "unshare",
        "--uts",
        "--ipc",
        "--mount",
        "--pid",
        # On a v2 host the boot script makes the cgroup namespace once it is in its subtree.
        *([] if delegated else ["--cgroup"]),
        "--fork",
        "--kill-child",
        "sh",
        str(_BOOT_SCRIPT),
    ]
    log = config.log_dir / f"node-{spec.name}.log"
    log.parent.mkdir(parents=True, exist_ok=True)

    def enter_cgroups() -> None:
        # In the child before exec: the node's processes (and its cgroup namespace root)
        # are this cgroup in every hierarchy.
        pid = str(os.getpid())
        for procs in procs_files:
            with open(procs, "w") as f:
                f.write(pid)

    with open(log, "ab") as out:
        proc = subprocess.Popen(
            argv,
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            env=env,
            start_new_session=True,
            preexec_fn=enter_cgroups,
        )
    return ProcRef.of(proc.pid)


def wait_ssh(
    address: str, timeout: float, supervisor: ProcRef | None = None, log: Path | None = None
) -> None:
    """Wait until sshd answers on the node (its banner, not only an open port)."""
    see = f" (see {log})" if log else ""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if supervisor is not None and not supervisor.alive():
            raise LabError(f"node at {address} stopped while booting{see}")
        try:
            with socket.create_connection((address, 22), timeout=1) as conn:
                conn.settimeout(2)
                if conn.recv(8).startswith(b"SSH-"):
                    return
        except OSError:
            pass
        time.sleep(0.1)
    raise LabError(f"node at {address}: sshd not reachable after {timeout:.0f} s{see}")


def init_process(supervisor: ProcRef) -> ProcRef | None:
    """The node's PID 1 (lab-init) as seen from the host: the supervisor's only child."""
    try:
        children = Path(f"/proc/{supervisor.pid}/task/{supervisor.pid}/children").read_text()
    except OSError:
        return None
    pids = [int(p) for p in children.split()]
    return ProcRef.of(pids[0]) if pids else None


def stop_node(supervisor: ProcRef, *, grace: float = 8.0) -> None:
    """Stop a node as a host stops: services first (init's SIGTERM), then what is left."""
    if not supervisor.alive():
        return
    init = init_process(supervisor)
    if init is not None:
        stop_process(init, grace=grace, sig=signal.SIGTERM)
    # Killing the supervisor makes unshare kill its child; the PID namespace then takes
    # every process of the node with it.
    stop_process(supervisor, grace=2.0)


def kill_cgroup(path: Path) -> None:
    """SIGKILL every process still in a cgroup tree (crash leftovers) until it is empty."""
    for _ in range(50):
        pids = cgroup_processes(path)
        if not pids:
            return
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        time.sleep(0.1)
