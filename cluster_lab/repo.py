"""The lab's package repository: a flat apt repository served on the bridge.

It holds the Debian packages the roles install, fetched once with their dependencies
(`apt-get install --download-only` inside a throw-away overlay of the node base, so exactly
what a bare node lacks) and cached, plus `sim/`, where part 2 drops the device simulator
packages. Nodes use `deb [trusted=yes] http://<bridge>:<port>/ ./`.
"""

from __future__ import annotations

import hashlib
import shutil
import sys
import tempfile
from pathlib import Path

from cluster_lab.base import MIRROR, SUITE
from cluster_lab.config import LabConfig
from cluster_lab.host import LabError, ProcRef, run, spawn

# What the roles install on a lab node. Keep this the union of every role's package list
# (with lab group_vars); a package missing here fails the role on a node with no route out.
LAB_PACKAGES: tuple[str, ...] = (
    # Slurm, its accounting database and authentication
    "slurm-wlm",
    "slurmctld",
    "slurmd",
    "slurmdbd",
    "slurm-client",
    "slurm-wlm-mysql-plugin",
    "libpam-slurm-adopt",
    "munge",
    "mariadb-server",
    "python3-pymysql",
    # MPI with PMIx for `srun --mpi=pmix`
    "openmpi-bin",
    "libpmix2",
    "libpmix-dev",
    # RDMA user space and fabric tools (the real ones, against the simulator)
    "rdma-core",
    "ibverbs-providers",
    "ibverbs-utils",
    "infiniband-diags",
    "perftest",
    "opensm",
    "ibsim-utils",
    # Prometheus' node_exporter (the node_exporter role; cluster-tool watch's textfile)
    "prometheus-node-exporter",
    # time, and what Ansible modules and probes need on a node
    "chrony",
    "python3-apt",
    "python3-debian",
    "gnupg",
    "curl",
    "pciutils",
    "kmod",
    "numactl",
    "hwloc",
    "ethtool",
    "lsof",
    "rsync",
    "jq",
    "less",
    # The enroot_pyxis role builds pyxis against Slurm's headers.
    "build-essential",
    "libslurm-dev",
    # Not for nodes: the lab registry's image is a static busybox (cluster_lab/releases.py).
    "busybox-static",
)

# Simulator packages go in `sim_debs_dir(config)` (per lab); call `reindex(config)` after
# dropping a .deb there.

_SOURCES = (
    f"deb {MIRROR} {SUITE} main\n"
    f"deb {MIRROR} {SUITE}-updates main\n"
    f"deb http://deb.debian.org/debian-security {SUITE}-security main\n"
)


def sim_debs_dir(config: LabConfig) -> Path:
    """Where this lab's simulator .debs go (created on demand)."""
    path = config.repo_dir / "sim"
    path.mkdir(parents=True, exist_ok=True)
    return path


def apt_source_line(config: LabConfig) -> str:
    return f"deb [trusted=yes] {config.repo_url}/ ./"


def _stamp(packages: tuple[str, ...], base: Path) -> str:
    text = " ".join(sorted(packages)) + "|" + base.name
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def ensure_repo(config: LabConfig, base: Path, packages: tuple[str, ...] = LAB_PACKAGES) -> Path:
    """The lab's repository directory: the Debian packages fetched into the cache the first
    time (or when the list grows) and linked in, beside this lab's own `sim/`."""
    cache = config.cache_repo_dir
    debs = cache / "debian"
    debs.mkdir(parents=True, exist_ok=True)
    stamp_file = cache / ".fetched"
    stamp = _stamp(packages, base)
    if not (stamp_file.is_file() and stamp_file.read_text().strip() == stamp):
        _fetch(config, base, debs, packages)
        _index(cache, "debian")
        stamp_file.write_text(stamp + "\n")
    elif not (cache / "Packages").is_file():
        _index(cache, "debian")
    root = config.repo_dir
    root.mkdir(parents=True, exist_ok=True)
    link = root / "debian"
    if not (link.is_symlink() and link.resolve() == debs.resolve()):
        if link.is_symlink() or link.is_file():
            link.unlink()
        elif link.is_dir():
            shutil.rmtree(link)
        link.symlink_to(debs)
    sim_debs_dir(config)
    if not (root / "Packages").is_file():
        reindex(config)
    return root


def _fetch(config: LabConfig, base: Path, debs: Path, packages: tuple[str, ...]) -> None:
    config.cache_dir.mkdir(parents=True, exist_ok=True)
    scratch = Path(tempfile.mkdtemp(prefix="fetch.", dir=config.cache_dir))
    try:
        for sub in ("upper", "work", "root"):
            (scratch / sub).mkdir()
        script = f"""set -e
R={scratch}/root
mount --make-rprivate /
mount -t overlay overlay -o lowerdir={base},upperdir={scratch}/upper,workdir={scratch}/work "$R"
mount -t proc proc "$R/proc"
mount --rbind /dev "$R/dev"
mount --bind {debs} "$R/var/cache/apt/archives"
cp -L /etc/resolv.conf "$R/etc/resolv.conf"
printf '%s' '{_SOURCES}' > "$R/etc/apt/sources.list"
chroot "$R" apt-get -q update
chroot "$R" env DEBIAN_FRONTEND=noninteractive \\
    apt-get -q -y --download-only install {" ".join(packages)}
"""
        result = run(
            ["unshare", "--mount", "--fork", "sh", "-c", script], check=False, timeout=3600
        )
        if result.returncode != 0:
            tail = (result.stderr or result.stdout).strip().splitlines()[-3:]
            raise LabError("fetching the lab packages failed: " + " | ".join(tail))
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    for leftover in ("lock", "partial"):
        path = debs / leftover
        if path.is_dir():
            shutil.rmtree(path, ignore_errors=True)
        elif path.exists():
            path.unlink()


def schedmd_debs_dir(config: LabConfig) -> Path:
    """Where this lab's slurm-smd packages go (cluster_lab/schedmd.py; created on demand)."""
    path = config.repo_dir / "schedmd"
    path.mkdir(parents=True, exist_ok=True)
    return path


def reindex(config: LabConfig) -> None:
    """Rebuild the lab's Packages and Release over debian/, sim/ and schedmd/ (run after adding a
    .deb). What else the server holds (releases/, registry/) is no apt repository: not indexed."""
    _index(config.repo_dir, "debian", "sim", "schedmd")


def _index(root: Path, *subdirs: str) -> None:
    """Packages and Release for the .debs below each of `root/subdirs`, replaced atomically."""
    packages = "".join(
        run(["apt-ftparchive", "packages", subdir], timeout=600, cwd=root).stdout
        for subdir in subdirs
        if (root / subdir).is_dir()
    )
    tmp = root / ".Packages.tmp"
    tmp.write_text(packages)
    tmp.replace(root / "Packages")
    release = run(["apt-ftparchive", "release", "."], timeout=120, cwd=root).stdout
    tmp = root / ".Release.tmp"
    tmp.write_text(release)
    tmp.replace(root / "Release")


def start_server(config: LabConfig) -> ProcRef:
    """Serve the repository on the bridge address (the host side), never on other interfaces."""
    return spawn(
        [
            sys.executable,
            "-m",
            "http.server",
            "--bind",
            config.host_address,
            "--directory",
            str(config.repo_dir),
            str(config.repo_port),
        ],
        log=config.log_dir / "repo.log",
    )
