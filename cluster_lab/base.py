"""The node base image: a Debian minbase built once with debootstrap and cached.

Every node's root is an overlay over this directory, so it is never written after it is
built; a new recipe gets a new directory (`base-vN`), and old ones stay valid for labs
still running on them.
"""

from __future__ import annotations

import shutil
from pathlib import Path

from cluster_lab.config import LabConfig
from cluster_lab.host import LabError, run

SUITE = "bookworm"
MIRROR = "http://deb.debian.org/debian"
# Nodes start bare: base OS, sshd, python3 (Ansible needs it), sudo.
INCLUDE = "openssh-server,python3,sudo,iproute2,procps,ca-certificates"
# Bump when the customisation below changes; the cache then builds a fresh base.
BASE_VERSION = 1

_INIT_SOURCE = Path(__file__).with_name("data") / "lab-init.c"

# Debian's invoke-rc.d asks `runlevel` whether services may start; on a host without
# an init that answers, package installs would leave their daemons stopped.
_RUNLEVEL_STUB = """#!/bin/sh
# lab node: a SysV host in runlevel 2, so invoke-rc.d starts services as packages install
echo "N 2"
"""

_SSHD_CONFIG = """# lab node: key-only root login, no DNS lookups (there is no resolver)
PermitRootLogin prohibit-password
PasswordAuthentication no
KbdInteractiveAuthentication no
UseDNS no
"""

_APT_CONFIG = """// lab node: what the roles ask for, nothing recommended on top
APT::Install-Recommends "false";
Acquire::Languages "none";
Acquire::Retries "2";
"""


def base_path(config: LabConfig) -> Path:
    return config.cache_dir / f"base-v{BASE_VERSION}"


def ensure_base(config: LabConfig) -> Path:
    """The cached base root filesystem; built (debootstrap, ~70 s) the first time only."""
    final = base_path(config)
    if (final / ".lab-base").is_file():
        return final
    config.cache_dir.mkdir(parents=True, exist_ok=True)
    work = config.cache_dir / "base.tmp"
    marker = work / ".lab-debootstrap-done"
    if not (marker.is_file() and marker.read_text().strip() == INCLUDE):
        if work.exists():
            shutil.rmtree(work)
        run(
            [
                "debootstrap",
                "--variant=minbase",
                f"--include={INCLUDE}",
                SUITE,
                str(work),
                MIRROR,
            ],
            timeout=1800,
        )
        marker.write_text(INCLUDE + "\n")
    _customise(work)
    (work / ".lab-base").write_text(f"{BASE_VERSION}\n")
    if final.exists():
        shutil.rmtree(final)
    work.rename(final)
    return final


def _customise(root: Path) -> None:
    _build_init(root / "sbin" / "lab-init")
    runlevel = root / "sbin" / "runlevel"
    runlevel.write_text(_RUNLEVEL_STUB)
    runlevel.chmod(0o755)
    # hwclock.sh would set the host's hardware clock on every node stop.
    for link in root.glob("etc/rc?.d/*hwclock.sh"):
        link.unlink()
    (root / "etc/ssh/sshd_config.d").mkdir(parents=True, exist_ok=True)
    (root / "etc/ssh/sshd_config.d/lab.conf").write_text(_SSHD_CONFIG)
    (root / "etc/apt/apt.conf.d/90lab").write_text(_APT_CONFIG)
    # Nodes have no route off the machine: their only source is the lab repository,
    # written per node at boot.
    (root / "etc/apt/sources.list").write_text("# lab node: see sources.list.d/lab.list\n")
    (root / "etc/fstab").write_text("# lab node: mounts are made by the lab before init\n")
    for leftover in ("var/cache/apt/archives", "var/lib/apt/lists"):
        for item in (root / leftover).glob("*"):
            if item.is_file() and item.name not in ("lock",):
                item.unlink()
    machine_id = root / "etc/machine-id"
    if machine_id.exists():
        machine_id.write_text("")


def _build_init(target: Path) -> None:
    gcc = shutil.which("gcc")
    if gcc is None:
        raise LabError("gcc is needed once to build the lab node init (run ./scripts/bootstrap)")
    # Static, so it does not depend on which libc the base carries.
    result = run(
        [gcc, "-O2", "-static", "-o", str(target), str(_INIT_SOURCE)], check=False, timeout=120
    )
    if result.returncode != 0:
        run([gcc, "-O2", "-o", str(target), str(_INIT_SOURCE)], timeout=120)
    target.chmod(0o755)


def ensure_layer(config: LabConfig, base: Path, name: str, packages: tuple[str, ...]) -> Path:
    """A cached overlay layer over `base` with `packages` installed from the lab repository.

    Built once (apt-get inside a throw-away overlay, the upper directory kept) and used as
    an extra lower layer, so a node that needs a few tools from the start (the head's
    fabric diags) boots with them instead of installing them on every `lab up`.
    """
    import hashlib

    key = hashlib.sha256(f"{base.name}|{' '.join(sorted(packages))}".encode()).hexdigest()[:12]
    final = config.cache_dir / "layers" / f"{name}-{key}"
    if (final / ".lab-layer").is_file():
        return final
    final.parent.mkdir(parents=True, exist_ok=True)
    scratch = final.with_name(final.name + ".tmp")
    if scratch.exists():
        shutil.rmtree(scratch)
    for sub in ("upper", "work", "root"):
        (scratch / sub).mkdir(parents=True)
    # Layers hold Debian packages only: they come from the cache's own index (no simulator,
    # and a symlink into the cache would not resolve inside the chroot).
    repo = config.cache_repo_dir
    script = f"""set -e
R={scratch}/root
mount --make-rprivate /
mount -t overlay overlay -o lowerdir={base},upperdir={scratch}/upper,workdir={scratch}/work "$R"
mount -t proc proc "$R/proc"
mount --rbind /dev "$R/dev"
mkdir -p "$R/mnt/lab-repo"
mount --bind {repo} "$R/mnt/lab-repo"
echo 'deb [trusted=yes] file:/mnt/lab-repo ./' > "$R/etc/apt/sources.list.d/lab-build.list"
chroot "$R" apt-get -qq update
chroot "$R" env DEBIAN_FRONTEND=noninteractive apt-get -qq -y install {" ".join(packages)}
rm -f "$R/etc/apt/sources.list.d/lab-build.list"
chroot "$R" apt-get -qq clean
umount "$R/mnt/lab-repo"
rmdir "$R/mnt/lab-repo"
rm -rf "$R"/var/lib/apt/lists/*
"""
    result = run(["unshare", "--mount", "--fork", "sh", "-c", script], check=False, timeout=900)
    if result.returncode != 0:
        tail = (result.stderr or result.stdout).strip().splitlines()[-3:]
        shutil.rmtree(scratch, ignore_errors=True)
        raise LabError(f"building the {name} layer failed: " + " | ".join(tail))
    upper = scratch / "upper"
    (upper / ".lab-layer").write_text(" ".join(packages) + "\n")
    upper.rename(final)
    shutil.rmtree(scratch, ignore_errors=True)
    return final
