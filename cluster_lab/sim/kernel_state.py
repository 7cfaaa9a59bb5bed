"""What the loaded NVIDIA modules show in /proc and /sys inside a lab node, where the roles and
checks look for them: /proc/driver/nvidia/version (the module flavour and version) and
/sys/module/<module>/ (loaded or not).

A lab node shares the host's kernel, and /proc and /sys are the host's. Inside its own mount
namespace the node may mount over them, so the simulated `modprobe` keeps a small tree under
/run/cluster-tool-lab/kernel/ (tmpfs: gone at reboot, as loaded modules are) and bind-mounts
it over /proc/driver and /sys/module. Every simulated tool, and the simulated
nvidia-persistenced every few seconds, rewrites the tree from the lab model, so a
module-missing fault shows there too. Stdlib only.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
from pathlib import Path

from .hw import NodeHardware

RUN_DIR = Path(os.environ.get("LAB_RUN_DIR", "/run/cluster-tool-lab"))
# Sizes the simulated modules report (those of driver 550 on x86_64).
MODULE_SIZES = {
    "nvidia": 8_646_656,
    "nvidia_uvm": 4_943_872,
    "nvidia_modeset": 1_421_312,
    "nvidia_peermem": 16_384,
}
# Which loaded modules hold a reference on which.
MODULE_USERS = {"nvidia": ["nvidia_uvm", "nvidia_peermem", "nvidia_modeset"]}
# Where the tree is shown: mount point -> subdirectory of the kernel tree.
MOUNTS = {"/proc/driver": "proc-driver", "/sys/module": "sys-module"}


def loaded_dir(run_dir: Path | None = None) -> Path:
    return (run_dir or RUN_DIR) / "modules"


def persistence_file(run_dir: Path | None = None) -> Path:
    """Written by the simulated nvidia-persistenced while it runs: "1 <pid>" when it holds the
    GPUs in persistence mode, "0 <pid>" when started with --no-persistence-mode."""
    return (run_dir or RUN_DIR) / "persistence-mode"


def persistence_on(run_dir: Path | None = None) -> bool:
    """Persistence mode as the driver has it: on only while persistenced runs with it on (with
    no daemon, the driver tears the GPU state down when the last client exits)."""
    try:
        return persistence_file(run_dir).read_text().split()[:1] == ["1"]
    except OSError:
        return False


# The kernel's own mlx5_core/ib_core, which udev loads at boot while no DOCA driver is installed;
# it sets no module version (current kernels dropped MODULE_VERSION from mlx5_core).
INBOX_MLX5 = "inbox"


def mlx5_file(run_dir: Path | None = None) -> Path:
    """Which mlx5_core/ib_core stack is loaded: "inbox", DOCA's driver version, or empty while
    openibd has the stack unloaded. Absent (a fresh boot, before anything loaded DOCA's): the
    inbox stack."""
    return (run_dir or RUN_DIR) / "mlx5_core"


def loaded_mlx5(run_dir: Path | None = None) -> str | None:
    """The loaded mlx5_core: INBOX_MLX5, DOCA's driver version, or None when unloaded."""
    try:
        text = mlx5_file(run_dir).read_text().strip()
    except OSError:
        return INBOX_MLX5
    return text or None


def loaded_modules(hw: NodeHardware | None, run_dir: Path | None = None) -> list[str]:
    """Simulated modules loaded in this node: modprobed since boot and still in the model."""
    if hw is None:
        return []
    where = loaded_dir(run_dir)
    marked = {p.name for p in where.iterdir()} if where.is_dir() else set()
    return [m for m in MODULE_SIZES if m in marked and m in hw.modules]


def kernel_files(hw: NodeHardware, loaded: list[str], mlx5: str | None = None) -> dict[str, str]:
    """Relative path -> content of the /proc/driver and /sys/module views of `loaded`, and of the
    mlx5_core/ib_core stack `mlx5` (see loaded_mlx5) on a node with HCAs: DOCA's modules carry
    their version in /sys/module/<module>/version, the inbox ones none."""
    files: dict[str, str] = {}
    if mlx5 is not None and hw.hcas:
        for module in ("ib_core", "mlx5_core"):
            files[f"sys-module/{module}/initstate"] = "live\n"
            if mlx5 != INBOX_MLX5:
                files[f"sys-module/{module}/version"] = f"{mlx5}\n"
    if "nvidia" in loaded:
        files["proc-driver/nvidia/version"] = (
            f"NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  {hw.driver_version}  "
            "Release Build  (dvs-builder@U16-I3-B03-4-3)  Thu Oct 10 22:10:44 UTC 2024\n"
            "GCC version:  gcc version 12.2.0 (Debian 12.2.0-14) \n"
        )
        for gpu in hw.present_gpus():
            files[f"proc-driver/nvidia/gpus/{gpu.bus_id[4:].lower()}/information"] = (
                f"Model: \t\t {gpu.spec.name}\nIRQ:   \t\t 0\nGPU UUID: \t {gpu.uuid}\n"
                f"Video BIOS: \t {gpu.spec.vbios.lower()}\nBus Type: \t PCIe\n"
                f"DMA Size: \t 52 bits\nDMA Mask: \t 0xfffffffffffff\n"
                f"Bus Location: \t {gpu.bus_id[4:].lower()}\nDevice Minor: \t {gpu.minor}\n"
                "GPU Excluded:\t No\n"
            )
    for module in loaded:
        users = [u for u in MODULE_USERS.get(module, []) if u in loaded]
        base = f"sys-module/{module}"
        files[f"{base}/initstate"] = "live\n"
        files[f"{base}/refcnt"] = f"{len(users)}\n"
        files[f"{base}/coresize"] = f"{MODULE_SIZES[module]}\n"
        files[f"{base}/taint"] = "OE\n"
        if module.startswith("nvidia"):
            files[f"{base}/version"] = f"{hw.driver_version}\n"
    return files


def write_tree(hw: NodeHardware, loaded: list[str], root: Path, mlx5: str | None = None) -> None:
    """Bring `root` in line with `kernel_files`, in place: the directories stay the same
    inodes, so bind mounts of them see every change."""
    wanted = kernel_files(hw, loaded, mlx5)
    for sub in MOUNTS.values():
        (root / sub).mkdir(parents=True, exist_ok=True)
    for rel, text in wanted.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        if not path.is_file() or path.read_text() != text:
            # Several writers publish (a tool, openibd, persistenced): each its own temporary.
            tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
            tmp.write_text(text)
            tmp.replace(path)
    keep = {root / rel for rel in wanted}
    keep |= {parent for rel in wanted for parent in (root / rel).parents}
    for sub in MOUNTS.values():
        for dirpath, dirnames, filenames in os.walk(root / sub, topdown=False):
            for name in filenames:
                if Path(dirpath, name) not in keep and not name.startswith("."):
                    # another writer may have removed it first
                    Path(dirpath, name).unlink(missing_ok=True)
            for name in dirnames:
                if Path(dirpath, name) not in keep:
                    with contextlib.suppress(OSError):  # gone already, or a writer's temporary
                        Path(dirpath, name).rmdir()


# Character devices the driver creates: major 195 for the GPUs and nvidiactl; nvidia-uvm
# gets a dynamic major (this one is what it commonly lands on).
NVIDIA_MAJOR = 195
UVM_MAJOR = 510


def device_nodes(hw: NodeHardware, loaded: list[str]) -> dict[str, tuple[int, int]]:
    """/dev entries (name -> (major, minor)) the loaded driver provides: one per present GPU
    (Slurm's gres.conf names them), nvidiactl, and nvidia-uvm when it is loaded."""
    if "nvidia" not in loaded:
        return {}
    nodes = {f"nvidia{g.minor}": (NVIDIA_MAJOR, g.minor) for g in hw.present_gpus()}
    nodes["nvidiactl"] = (NVIDIA_MAJOR, 255)
    if "nvidia_uvm" in loaded:
        nodes["nvidia-uvm"] = (UVM_MAJOR, 0)
        nodes["nvidia-uvm-tools"] = (UVM_MAJOR, 1)
    return nodes


def sync_devices(hw: NodeHardware, loaded: list[str], dev_dir: Path) -> None:
    """Create the driver's device nodes in `dev_dir` and remove those of GPUs that are gone
    (a node's /dev is its own tmpfs). Opening them fails (no such device): what Slurm and the
    checks need is that they exist, with the right numbers."""
    import re
    import stat

    wanted = device_nodes(hw, loaded)
    for name, (major, minor) in wanted.items():
        path = dev_dir / name
        try:
            st = path.stat()
            if stat.S_ISCHR(st.st_mode) and st.st_rdev == os.makedev(major, minor):
                continue
            path.unlink()
        except FileNotFoundError:
            pass
        os.mknod(path, 0o666 | stat.S_IFCHR, os.makedev(major, minor))
        path.chmod(0o666)
    for path in dev_dir.glob("nvidia*"):
        if path.name not in wanted and re.fullmatch(r"nvidia(\d+|ctl|-uvm|-uvm-tools)", path.name):
            path.unlink()


def _mounted(point: str) -> bool:
    try:
        lines = Path("/proc/self/mountinfo").read_text().splitlines()
    except OSError:
        return False
    return any(line.split()[4] == point for line in lines if len(line.split()) > 4)


def in_lab_node() -> bool:
    """Whether this process runs inside a lab node (the lab bind-mounts its model there), the
    only place the kernel view may be mounted. LAB_MOUNT_KERNEL_VIEW=1/0 forces it."""
    forced = os.environ.get("LAB_MOUNT_KERNEL_VIEW")
    if forced in ("0", "1"):
        return forced == "1"
    return _detected_lab_node()


def _detected_lab_node() -> bool:
    return "LAB_MODEL" not in os.environ and Path("/run/lab-model/model.json").is_file()


def publish(
    hw: NodeHardware | None, run_dir: Path | None = None, mount: bool | None = None
) -> None:
    """Rewrite the kernel tree from the model and, once per boot, mount it where the tools
    look (only inside a lab node unless `mount` says otherwise). Best effort: a tool must
    still answer where mounting is not allowed."""
    if hw is None:
        return
    if mount is None:
        mount = in_lab_node()
    root = (run_dir or RUN_DIR) / "kernel"
    try:
        write_tree(hw, loaded_modules(hw, run_dir), root, loaded_mlx5(run_dir))
    except OSError:
        return
    if not mount:
        return
    # /dev only inside a real lab node (its own tmpfs); a forced run names its own dir, since
    # a mount namespace alone still shares the host's /dev.
    dev = os.environ.get("LAB_DEV_DIR") or ("/dev" if _detected_lab_node() else None)
    if dev:
        with contextlib.suppress(OSError):
            sync_devices(hw, loaded_modules(hw, run_dir), Path(dev))
    for point, sub in MOUNTS.items():
        if os.path.isdir(point) and not _mounted(point):
            subprocess.run(
                ["mount", "--bind", str(root / sub), point],
                capture_output=True,
                check=False,
            )
