"""Command lines of the simulated tools inside a lab node: `nvidia-smi`, `dcgmi`, the nccl-tests
binaries, and the kernel-facing shims `dmesg`, `lsmod` and `modprobe`.

Each reads the lab model (bind-mounted read-only at /run/lab-model/model.json; env LAB_MODEL
overrides) for the node named by the hostname, and prints through the renderers. Stdlib
only: the simulator packages install this package under /usr/lib/cluster-tool-lab/.
"""

from __future__ import annotations

import contextlib
import os
import re
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .hw import DEFAULT_MODEL_PATH, NodeHardware, load_model, node_down, node_hardware
from .kernel_state import (
    MODULE_SIZES,
    MODULE_USERS,
    loaded_dir,
    loaded_mlx5,
    loaded_modules,
    mlx5_file,
    persistence_file,
    persistence_on,
    publish,
)
from .render_dcgmi import diag_failed, render_diag, render_discovery, render_kernel_log
from .render_link import (
    nic_port,
    render_ibdev2netdev,
    render_lspci,
    render_mlxlink,
    render_nvlink_errors,
)
from .render_smi import (
    QueryError,
    render_list,
    render_nvlink_status,
    render_query,
    render_query_csv,
    render_summary,
    render_topo,
)

_NO_DRIVER = (
    "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver. Make sure "
    "that the latest NVIDIA driver is installed and running.\n"
)


@dataclass
class Result:
    stdout: str
    exit_code: int = 0
    stderr: str = ""


def hostname() -> str:
    """The node's name in the model: its hostname (LAB_NODE overrides, to try a tool from the
    host)."""
    return os.environ.get("LAB_NODE") or socket.gethostname().split(".")[0]


# /usr/lib/cluster-tool-lab in a node: the installed packages' versions and build records.
LIB_ROOT = Path(__file__).resolve().parents[2]
# Which ib_core the driver package's nvidia-peermem was built against ("doca" or "inbox"),
# written by its postinst as the DKMS build would decide it.
PEERMEM_BUILD = "nvidia-peermem.ib_core"
_PEERMEM_EINVAL = "modprobe: ERROR: could not insert 'nvidia_peermem': Invalid argument\n"


def peermem_built_without_doca(lib_root: Path | None = None) -> bool:
    """nvidia-peermem was built while DOCA was not installed: without the peer-memory API of
    DOCA's ib_core its init is a bare -EINVAL (nvidia-peermem.c), so it never loads."""
    try:
        return (lib_root or LIB_ROOT).joinpath(PEERMEM_BUILD).read_text().strip() == "inbox"
    except OSError:
        return False


def installed_versions(versions_dir: Path | None = None) -> dict[str, str]:
    """Versions of the simulator packages installed in this node (package -> upstream
    version, epoch and Debian revision dropped)."""
    where = versions_dir or Path(__file__).resolve().parents[2] / "versions"
    out = {}
    if where.is_dir():
        for f in where.iterdir():
            full = f.read_text().strip()
            out[f.name] = full.split(":")[-1].rsplit("-", 1)[0]
            out[f.name + "+"] = full
    return out


def apply_installed(hw: NodeHardware, node: dict[str, Any], versions: dict[str, str]) -> None:
    """Versions the model does not pin come from the installed packages."""
    driver = versions.get("nvidia-driver-cuda") or versions.get("nvidia-open-kernel-dkms")
    if driver and "driver_version" not in node:
        hw.driver_version = driver
    dcgm = versions.get("datacenter-gpu-manager-4-core") or versions.get("datacenter-gpu-manager")
    if dcgm and "dcgm_version" not in node:
        hw.dcgm_version = dcgm
    if "mft" in versions:
        hw.mft_version = versions["mft+"].split(":")[-1]
    nccl = versions.get("libnccl2+", "")
    if nccl and "nccl_version" not in node:
        # "2.21.5-1+cuda12.4": NCCL version, then the CUDA it was built for.
        hw.nccl_version = nccl.split(":")[-1].split("-")[0]
        cuda = re.search(r"\+cuda([\d.]+)", nccl)
        if cuda and "cuda_version" not in node:
            hw.cuda_version = cuda.group(1)


def _node_record(model: dict[str, Any], host: str) -> dict[str, Any]:
    nodes = model.get("nodes", [])
    found = (
        nodes.get(host, {})
        if isinstance(nodes, dict)
        else next((n for n in nodes if n.get("name") == host), {})
    )
    return dict(found.get("hardware", found))


def _hardware(model: dict[str, Any], host: str) -> NodeHardware | None:
    try:
        hw = node_hardware(model, host)
    except KeyError:
        return None
    apply_installed(hw, _node_record(model, host), installed_versions())
    if not persistence_on():
        for gpu in hw.gpus:
            gpu.persistence_mode = False
    return hw


def nvidia_smi(argv: list[str], model: dict[str, Any], host: str) -> Result:
    """`nvidia-smi` for the options the toolkit and an operator use."""
    hw = _hardware(model, host)
    if hw is None or node_down(model, host) or "nvidia" not in hw.modules:
        return Result(_NO_DRIVER, 9)
    if not hw.present_gpus():
        return Result("No devices were found\n", 6)
    ids: list[int] | None = None
    args = list(argv)
    for i, a in enumerate(list(args)):
        if a in ("-i", "--id") and i + 1 < len(args):
            ids = [int(x) for x in args[i + 1].split(",")]
        elif a.startswith("--id="):
            ids = [int(x) for x in a.split("=", 1)[1].split(",")]
    if ids is not None:
        present = hw.present_gpus()
        if any(i >= len(present) for i in ids):
            return Result("No devices were found\n", 6)
        keep = {present[i].minor for i in ids}
        for g in hw.gpus:
            g.present = g.present and g.minor in keep
    if args[:1] == ["topo"]:
        if "-m" in args or "--matrix" in args:
            return Result(render_topo(hw))
        return Result(_invalid(), 2)
    if args[:1] == ["nvlink"]:
        if "-s" in args or "--status" in args:
            return Result(render_nvlink_status(hw))
        if "-e" in args or "--errorcounters" in args:
            return Result(render_nvlink_errors(hw))
        return Result(_invalid(), 2)
    query = next((a for a in args if a.startswith("--query-gpu=")), None)
    if query is not None:
        fmt = next((a.split("=", 1)[1] for a in args if a.startswith("--format=")), None)
        if fmt is None or "csv" not in fmt.split(","):
            return Result('"--format" must be specified with "--query-gpu".\n', 2)
        flags = set(fmt.split(","))
        fields = [f.strip() for f in query.split("=", 1)[1].split(",") if f.strip()]
        try:
            text = render_query_csv(
                hw, fields, header="noheader" not in flags, units="nounits" not in flags
            )
        except QueryError as e:
            return Result(str(e), e.exit_code)
        return Result(text)
    if "-q" in args or "--query" in args:
        return Result(render_query(hw))
    if "-L" in args or "--list-gpus" in args:
        return Result(render_list(hw))
    if not [a for a in args if a not in ("-i", "--id") and not a.isdigit()]:
        return Result(render_summary(hw))
    return Result(_invalid(), 2)


def _invalid() -> str:
    return "Invalid combination of input arguments. Please run 'nvidia-smi -h' for help.\n"


def dcgmi(argv: list[str], model: dict[str, Any], host: str) -> Result:
    """`dcgmi diag -r LEVEL` and `dcgmi discovery -l`."""
    hw = _hardware(model, host)
    if hw is None or node_down(model, host):
        return Result(
            "", 1, "Error: unable to establish a connection to the specified host: localhost\n"
        )
    if argv[:1] == ["discovery"] and ({"-l", "--list"} & set(argv)):
        return Result(render_discovery(hw))
    if argv[:1] != ["diag"]:
        return Result("", 2, f"dcgmi: unsupported command in the lab: {' '.join(argv)}\n")
    level = None
    for i, a in enumerate(argv):
        if a in ("-r", "--run") and i + 1 < len(argv):
            level = argv[i + 1]
        elif a.startswith("--run="):
            level = a.split("=", 1)[1]
    names = {"short": 1, "medium": 2, "long": 3, "xlong": 4}
    if level is None:
        return Result("", 2, "Error: Must specify --run or -r for diag.\n")
    number = names.get(level) or (int(level) if level.isdigit() else 0)
    if number not in (1, 2, 3, 4):
        return Result("", 2, f"Error: Invalid run level {level!r}.\n")
    # dcgmi exits non-zero when any test failed; the table says which.
    return Result(render_diag(hw, number), 226 if diag_failed(hw, number) else 0)


def mlxlink(argv: list[str], model: dict[str, Any], host: str) -> Result:
    """`mlxlink -d DEV [-p 1] [-m] [-c]` on one of the node's HCAs (by its mlx5 name or PCI
    address); errors go to stderr as mlxlink's `-E-` lines."""
    hw = _hardware(model, host)
    device = None
    for i, a in enumerate(argv):
        if a in ("-d", "--device") and i + 1 < len(argv):
            device = argv[i + 1]
        elif a.startswith("--device="):
            device = a.split("=", 1)[1]
    if device is None:
        return Result("", 1, "-E- Please provide a device name using -d option\n")
    hca = None
    if hw is not None and not node_down(model, host):
        ports = [h for h in hw.hcas if h.present] + [nic_port(n) for n in hw.other_nics]
        hca = next((h for h in ports if device in (h.device, h.bus_id, h.bus_id[5:])), None)
    if hw is None or hca is None:
        return Result("", 1, f"-E- Failed to open device: {device}, No such file or directory\n")
    return Result(render_mlxlink(hw, hca))


def lspci(argv: list[str], model: dict[str, Any], host: str) -> Result:
    """`lspci [-v|-vv|-vvv] [-d VENDOR:]` over the node's GPUs and Mellanox functions (the host's
    PCI bus is not the node's)."""
    hw = _hardware(model, host)
    if hw is None or node_down(model, host):
        return Result("")
    vendors = None
    for i, a in enumerate(argv):
        if a == "-d" and i + 1 < len(argv):
            vendors = (vendors or set()) | {argv[i + 1].split(":")[0].lower()}
    return Result(render_lspci(hw, vendors))


def ibdev2netdev(argv: list[str], model: dict[str, Any], host: str) -> Result:
    """`ibdev2netdev [-v]`: each RDMA device of the node with its interface and carrier."""
    hw = _hardware(model, host)
    if hw is None or node_down(model, host):
        return Result("")
    return Result(render_ibdev2netdev(hw, verbose="-v" in argv or "--verbose" in argv))


def dmesg(argv: list[str], model: dict[str, Any], host: str) -> Result:
    """The node's simulated kernel ring buffer (the host's is not the node's)."""
    hw = _hardware(model, host)
    if hw is None:
        return Result("")
    style = "ctime" if {"-T", "--ctime"} & set(argv) else "dmesg"
    return Result(render_kernel_log(hw, style, host))


def lsmod(argv: list[str], model: dict[str, Any], host: str) -> Result:
    """`lsmod`: the kernel's modules (from /proc/modules) plus the simulated NVIDIA ones."""
    loaded = loaded_modules(_hardware(model, host))
    lines = ["Module                  Size  Used by"]
    for m in loaded:
        users = [u for u in MODULE_USERS.get(m, []) if u in loaded]
        tail = f"  {len(users)} {','.join(users)}" if users else "  0"
        lines.append(f"{m:<19} {MODULE_SIZES[m]:>8}{tail}")
    try:
        real = Path("/proc/modules").read_text().splitlines()
    except OSError:
        real = []
    for row in real:
        parts = row.split()
        if len(parts) >= 4:
            used = "" if parts[3] == "-" else parts[3].rstrip(",")
            tail = f"  {parts[2]} {used}".rstrip()
            lines.append(f"{parts[0]:<19} {int(parts[1]):>8}{tail}")
    return Result("\n".join(lines) + "\n")


def modprobe(argv: list[str], model: dict[str, Any], host: str) -> Result:
    """`modprobe NAME` for the simulated modules; anything else goes to the real modprobe."""
    names = [a for a in argv if not a.startswith("-")]
    hw = _hardware(model, host)
    ours = [n.replace("-", "_") for n in names if n.replace("-", "_") in MODULE_SIZES]
    if not ours:
        done = subprocess.run(["/usr/sbin/modprobe", *argv], check=False)
        return Result("", done.returncode)
    remove = "-r" in argv or "--remove" in argv
    if "nvidia_peermem" in ours and not remove and peermem_built_without_doca():
        return Result("", 1, _PEERMEM_EINVAL)
    for name in ours:
        if hw is None or name not in hw.modules:
            release = os.uname().release
            return Result(
                "",
                1,
                f"modprobe: FATAL: Module {name} not found in directory /lib/modules/{release}\n",
            )
        marks = loaded_dir()
        marks.mkdir(parents=True, exist_ok=True)
        if remove:
            (marks / name).unlink(missing_ok=True)
        else:
            # Loading a module loads what it depends on (nvidia under nvidia_peermem).
            for dep in ("nvidia", name):
                (marks / dep).touch()
    publish(hw)
    return Result("")


def _view_inputs() -> tuple[object, ...]:
    """What the node's kernel views are published from, as cheap stats: the model file (replaced
    whole on every change), the installed simulator packages, the modules loaded, the loaded
    mlx5_core and persistence mode."""

    def stat(path: Path) -> tuple[int, int, int] | None:
        try:
            st = path.stat()
        except OSError:
            return None
        return (st.st_ino, st.st_mtime_ns, st.st_size)

    def listing(folder: Path) -> tuple[tuple[str, tuple[int, int, int] | None], ...]:
        try:
            return tuple(sorted((p.name, stat(p)) for p in folder.iterdir()))
        except OSError:
            return ()

    model = Path(os.environ.get("LAB_MODEL") or DEFAULT_MODEL_PATH)
    versions = Path(__file__).resolve().parents[2] / "versions"
    return (
        stat(model),
        listing(versions),
        listing(loaded_dir()),
        stat(mlx5_file()),
        stat(persistence_file()),
    )


def persistenced(argv: list[str], model: dict[str, Any], host: str) -> Result:
    """The simulated nvidia-persistenced: holds the GPUs in persistence mode unless started
    with --no-persistence-mode (as Ubuntu's unit starts it; nvidia-persistenced(1)), and keeps
    the node's /proc/driver and /sys/module views in step with the lab model (a module-missing
    fault unloads the module) until stopped. --user and --verbose are accepted and ignored."""
    import signal

    state = persistence_file()
    state.parent.mkdir(parents=True, exist_ok=True)
    mine = f"{0 if '--no-persistence-mode' in argv else 1} {os.getpid()}\n"
    state.write_text(mine)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    seen: tuple[object, ...] | None = None
    published_at = 0.0
    try:
        while True:
            # What the views are made of, looked at every round; published again when any of it
            # changed (and every half minute whatever): parsing the model for nothing every two
            # seconds was most of an idle lab node's CPU.
            now_seen = _view_inputs()
            if now_seen != seen or time.monotonic() - published_at >= 30:
                # The model is replaced atomically; a read that fails is retried next round.
                with contextlib.suppress(OSError, ValueError):
                    publish(_hardware(load_model(), host))
                    seen, published_at = now_seen, time.monotonic()
            time.sleep(2)
    finally:
        # Stopped, the daemon no longer holds the GPUs: persistence mode is off again (unless a
        # restart's new daemon has already taken over).
        with contextlib.suppress(OSError):
            if state.read_text() == mine:
                state.unlink()


# The mlx5_core/ib_core version of DOCA-Host releases' driver (the MLNX_OFED release each DOCA-Host
# release carries, as `modinfo -F version mlx5_core` prints it); a release not listed shows its
# own version there. 3.1.0 is not listed: no public page found names its mlx5_core version.
DOCA_MLX5_VERSIONS = {"2.9.1": "24.10-1.1.4"}


def doca_mlx5_version(versions: dict[str, str]) -> str | None:
    """The mlx5_core version of the installed DOCA-Host (None: DOCA is not installed)."""
    doca = versions.get("doca-ofed")
    return DOCA_MLX5_VERSIONS.get(doca, doca) if doca else None


_MLX5_MODULES = ("mlx5_core", "mlx5_ib", "ib_core", "ib_uverbs")


def modinfo(argv: list[str], model: dict[str, Any], host: str) -> Result:
    """`modinfo [-F FIELD] MODULE` for DOCA's RDMA modules (its DKMS build in updates/dkms, which
    modprobe prefers to the inbox one): what modprobe would load now, loaded or not. Other
    modules go to the real modinfo."""
    field_name = None
    names = []
    args = iter(argv)
    for a in args:
        if a in ("-F", "--field"):
            field_name = next(args, None)
        elif a.startswith("--field="):
            field_name = a.split("=", 1)[1]
        elif not a.startswith("-"):
            names.append(a)
    doca = doca_mlx5_version(installed_versions())
    if doca is None or not names or any(n.replace("-", "_") not in _MLX5_MODULES for n in names):
        done = subprocess.run(["/sbin/modinfo", *argv], check=False)
        return Result("", done.returncode)
    release = os.uname().release
    out = []
    for name in names:
        fields = {
            "filename": f"/lib/modules/{release}/updates/dkms/{name.replace('-', '_')}.ko",
            "version": doca,
            "license": "Dual BSD/GPL",
        }
        if field_name is not None:
            out.append(fields.get(field_name, ""))
        else:
            out.extend(f"{k + ':':<16}{v}" for k, v in fields.items())
    return Result("\n".join(line for line in out if line) + "\n")


def openibd(argv: list[str], model: dict[str, Any], host: str) -> Result:
    """openibd, the service that loads DOCA's mlx5_core/ib_core. Started, it loads DOCA's stack
    only where none is loaded (at boot, or after its own stop): with the inbox stack loaded since
    DOCA was installed, modprobe of a loaded module does nothing, so only `openibd restart` (stop
    unloads the stack, start loads DOCA's) or a reboot replaces it, as on a real node (DOCA-Host's
    installation steps end with `/etc/init.d/openibd restart`). Stopped, it unloads the stack."""
    import signal

    state = mlx5_file()
    doca = doca_mlx5_version(installed_versions())
    if doca and (not state.exists() or loaded_mlx5() is None):
        state.parent.mkdir(parents=True, exist_ok=True)
        state.write_text(doca + "\n")
    publish(_hardware(model, host))

    def unload(*_: object) -> None:
        with contextlib.suppress(OSError, ValueError):
            state.write_text("")
            publish(_hardware(load_model(), host))
        sys.exit(0)

    signal.signal(signal.SIGTERM, unload)
    while True:
        time.sleep(3600)


def idle_daemon(argv: list[str], model: dict[str, Any], host: str) -> Result:
    """A service the simulated hardware does not need (fabric manager, DCGM host engine): it
    only has to run, answer `status` and stop, the way the roles drive it."""
    import signal

    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    while True:
        time.sleep(3600)


def fabricmanager(argv: list[str], model: dict[str, Any], host: str) -> Result:
    """nv-fabricmanager: `--version`/`-v` prints its version the way the real one does
    (`Fabric Manager version is : 550.127.08`), the driver's unless a version-skew fault set
    another; run otherwise, it is the service and only has to run."""
    if argv[:1] in (["--version"], ["-v"]):
        hw = _hardware(model, host)
        version = (hw.fabricmanager_version or hw.driver_version) if hw else ""
        return Result(f"Fabric Manager version is : {version}\n")
    return idle_daemon(argv, model, host)


def dcgm_exporter(argv: list[str], model: dict[str, Any], host: str) -> Result:
    """dcgm-exporter: the node's DCGM fields on :9400 until stopped (sim/dcgm_exporter.py)."""
    from .dcgm_exporter import run  # only the exporter needs http.server

    return Result("", run(argv, host))


TOOLS: dict[str, Callable[[list[str], dict[str, Any], str], Result]] = {
    "nvidia-smi": nvidia_smi,
    "dcgmi": dcgmi,
    "dmesg": dmesg,
    "mlxlink": mlxlink,
    "lspci": lspci,
    "ibdev2netdev": ibdev2netdev,
    "lsmod": lsmod,
    "modprobe": modprobe,
    "nvidia-persistenced": persistenced,
    "nv-fabricmanager": fabricmanager,
    "nv-hostengine": idle_daemon,
    "dcgm-exporter": dcgm_exporter,
    "openibd": openibd,
    "modinfo": modinfo,
}


def main(tool: str, argv: list[str]) -> int:
    """Entry point of every simulated executable (`tool` is its installed name)."""
    perf = re.fullmatch(r"(all_reduce|all_gather|reduce_scatter|alltoall)_perf(?:_mpi)?", tool)
    if perf:
        from . import nccl_tests  # only the benchmarks need it: keep nvidia-smi's start short

        versions = installed_versions()

        def adjust(hw: NodeHardware) -> None:
            apply_installed(hw, {}, versions)

        return nccl_tests.main(perf.group(1), argv, adjust)
    try:
        model = load_model()
    except (OSError, ValueError) as e:
        sys.stderr.write(f"{tool}: cannot read the lab model: {e}\n")
        return 9 if tool == "nvidia-smi" else 1
    host = hostname()
    if tool != "nvidia-persistenced":
        # Every tool call also brings the node's module view up to date with the model.
        publish(_hardware(model, host))
    result = TOOLS[tool](argv, model, host)
    sys.stdout.write(result.stdout)
    sys.stderr.write(result.stderr)
    return result.exit_code
