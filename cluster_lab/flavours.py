"""Lab nodes of another OS than the base's: a node whose spec group says `os: ubuntu2204` runs
the Debian 12 base dressed as Ubuntu 22.04, so the roles take their Ubuntu branches there.

What is Ubuntu's on such a node (the "flavour"):
- what Ansible and the roles read: /etc/os-release, /etc/lsb-release and /etc/debian_version as
  Ubuntu 22.04 writes them (facts: Ubuntu, 22, jammy);
- its apt source: the lab repository's `ubuntu2204/` as an Ubuntu archive, suite `jammy`,
  component `main` (the roles' own repositories point at the same folder, flat, as NVIDIA's are);
- the package names and versions the roles install there: Debian's packages re-labelled with the
  versions Ubuntu 22.04 ships where a role pins one per OS (munge, PMIx, python3-apt,
  python3-debian, chrony), the distribution's 21.08 libslurm-dev (Debian's headers re-stamped
  21.08.5, so a plugin built against it is one Slurm 22.05 refuses), the driver under Ubuntu's
  package names (nvidia-headless-<branch>-open, nvidia-utils-<branch>,
  nvidia-compute-utils-<branch>), and the kernel packages of an Ubuntu HWE install (the image
  and its linux-image-generic-hwe-22.04 preinstalled; the headers and linux-generic-hwe-22.04 in
  the archive);
- Debian's packages that Ubuntu 22.04 does not ship at that version are left out of its index
  (Debian's 22.05 Slurm daemons, the Debian-named driver packages).

What stays Debian's: every binary (the node is Debian 12 underneath: its libc, Python 3.11, the
other packages of the index, which keep Debian's versions), and the kernel (the host's).
"""

from __future__ import annotations

import hashlib
import shutil
import subprocess
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from cluster_lab.config import LabConfig
from cluster_lab.host import LabError, run
from cluster_lab.sim import packages as sim

# Debian's slurm_version.h of the lab's Slurm, and what the re-stamped headers say instead.
_SLURM_NUMBER = "#define SLURM_VERSION_NUMBER "


@dataclass(frozen=True)
class Flavour:
    """An OS a lab node can be dressed as."""

    name: str  # the spec's `os`
    codename: str
    os_release: str
    lsb_release: str
    debian_version: str
    # Debian package -> the version this OS ships (same name; re-labelled from Debian's .deb).
    relabel: dict[str, str] = field(default_factory=dict)
    # Slurm headers re-stamped to this release (libslurm-dev's slurm_version.h).
    slurm_headers: str = ""
    # Debian's packages this OS's archive does not carry (left out of its index).
    absent: tuple[str, ...] = ()
    # The HWE kernel metapackages: name -> what it depends on ({kernel}: the running release).
    kernel_meta: dict[str, tuple[str, ...]] = field(default_factory=dict)
    # Installed in the node's image (a layer): what a minimal install of this OS has.
    preinstalled: tuple[str, ...] = ()

    @property
    def path(self) -> str:
        """Its folder in the lab repository (also its URL path)."""
        return self.name

    def apt_source(self, repo_url: str) -> str:
        return f"deb [trusted=yes] {repo_url}/{self.path}/ {self.codename} main"


UBUNTU_2204 = Flavour(
    name="ubuntu2204",
    codename="jammy",
    os_release=(
        'PRETTY_NAME="Ubuntu 22.04.5 LTS"\nNAME="Ubuntu"\nVERSION_ID="22.04"\n'
        'VERSION="22.04.5 LTS (Jammy Jellyfish)"\nVERSION_CODENAME=jammy\nID=ubuntu\n'
        'ID_LIKE=debian\nHOME_URL="https://www.ubuntu.com/"\nUBUNTU_CODENAME=jammy\n'
    ),
    lsb_release=(
        "DISTRIB_ID=Ubuntu\nDISTRIB_RELEASE=22.04\nDISTRIB_CODENAME=jammy\n"
        'DISTRIB_DESCRIPTION="Ubuntu 22.04.5 LTS"\n'
    ),
    debian_version="bookworm/sid\n",
    # The jammy archive's versions (packages.ubuntu.com/jammy/<name>; python3-apt from
    # jammy-updates, launchpad.net/ubuntu/+source/python-apt/2.4.0ubuntu2).
    relabel={
        "munge": "0.5.14-6",
        "libmunge2": "0.5.14-6",
        "libpmix2": "4.1.2-2ubuntu1",
        "libpmix-dev": "4.1.2-2ubuntu1",
        "python3-apt": "2.4.0ubuntu2",
        "python3-debian": "0.1.43ubuntu1",
        "chrony": "4.2-2ubuntu2",
        "libslurm-dev": "21.08.5-2ubuntu1",
    },
    slurm_headers="21.08.5",
    absent=(
        "slurm-wlm",
        "slurmd",
        "slurmctld",
        "slurmdbd",
        "slurm-client",
        "slurm-wlm-basic-plugins",
        "slurm-wlm-mysql-plugin",
        "libslurm38",
        "libpam-slurm-adopt",
        "nvidia-open-kernel-dkms",
        "nvidia-driver-cuda",
        "nvidia-persistenced",
    ),
    kernel_meta={
        "linux-image-generic-hwe-22.04": ("linux-image-{kernel}",),
        "linux-headers-generic-hwe-22.04": ("linux-headers-{kernel}",),
        "linux-generic-hwe-22.04": (
            "linux-image-generic-hwe-22.04",
            "linux-headers-generic-hwe-22.04",
        ),
    },
    preinstalled=("linux-image-{kernel}", "linux-image-generic-hwe-22.04"),
)

FLAVOURS = {UBUNTU_2204.name: UBUNTU_2204}
# The base's own OS: nodes of this `os` (or none) need no flavour.
BASE_OS = "debian12"


def flavour_of(os_name: str | None) -> Flavour | None:
    """The flavour a node of spec `os` runs, None for the base's; a LabError for an OS the lab
    cannot dress a node as."""
    if os_name in (None, BASE_OS):
        return None
    if os_name not in FLAVOURS:
        lab_oses = ", ".join([BASE_OS, *FLAVOURS])
        raise LabError(f"the lab's nodes run {lab_oses}, not {os_name}")
    return FLAVOURS[os_name]


# --- its packages ---------------------------------------------------------------------------


def _control_field(control: str, name: str) -> str:
    for line in control.splitlines():
        if line.startswith(f"{name}:"):
            return line.split(":", 1)[1].strip()
    return ""


def _set_field(control: str, name: str, value: str) -> str:
    out = []
    for line in control.splitlines():
        out.append(f"{name}: {value}" if line.startswith(f"{name}:") else line)
    return "\n".join(out) + "\n"


def _repin(depends: str, versions: dict[str, str], drop: tuple[str, ...]) -> str:
    """Depends with exact pins on re-labelled packages moved to their new versions, and those
    on `drop` left out."""
    items = []
    for item in (part.strip() for part in depends.split(",")):
        name = item.split()[0] if item else ""
        if not name or name in drop:
            continue
        if name in versions and "(=" in item:
            item = f"{name} (= {versions[name]})"
        items.append(item)
    return ", ".join(items)


def _relabel(deb: Path, version: str, flavour: Flavour, out_dir: Path, work: Path) -> Path:
    """Debian's `deb` as this OS's package of the same name at `version`."""
    root = work / deb.name
    root.parent.mkdir(parents=True, exist_ok=True)
    subprocess.run(["dpkg-deb", "-R", str(deb), str(root)], check=True)
    control_path = root / "DEBIAN" / "control"
    control = control_path.read_text()
    name = _control_field(control, "Package")
    control = _set_field(control, "Version", version)
    drop: tuple[str, ...] = ()
    if name == "libslurm-dev":
        # Its library package is Debian's 22.05 one; only the headers matter here (the lab keeps
        # the file that really collides with slurm-smd's: /usr/lib/*/libslurm.so).
        drop = ("libslurm38",)
        header = root / "usr" / "include" / "slurm" / "slurm_version.h"
        major, minor, micro = (int(n) for n in flavour.slurm_headers.split("."))
        lines = [
            f"{_SLURM_NUMBER}0x{major:02x}{minor:02x}{micro:02x}"
            if line.startswith(_SLURM_NUMBER)
            else line
            for line in header.read_text().splitlines()
        ]
        header.write_text("\n".join(lines) + "\n")
    for field_name in ("Depends", "Pre-Depends", "Breaks", "Replaces"):
        value = _control_field(control, field_name)
        if value:
            control = _set_field(control, field_name, _repin(value, flavour.relabel, drop))
    control_path.write_text(control)
    # The md5sums of a re-stamped file would lie: let dpkg go without them.
    (root / "DEBIAN" / "md5sums").unlink(missing_ok=True)
    arch = _control_field(control, "Architecture")
    return sim.pack_tree(root, out_dir / f"{name}_{version.split(':')[-1]}_{arch}.deb", work)


def _ubuntu_driver_packages(branch: str) -> dict[str, sim.SimPackage]:
    """The driver's simulators under Ubuntu's CUDA-repository names for `branch`."""
    debian = {p.name: p for p in sim.packages_for(branch)}
    names = {
        "nvidia-open-kernel-dkms": f"nvidia-headless-{branch}-open",
        "nvidia-driver-cuda": f"nvidia-utils-{branch}",
        "nvidia-persistenced": f"nvidia-compute-utils-{branch}",
    }
    out: dict[str, sim.SimPackage] = {}
    for debian_name, ubuntu_name in names.items():
        package = debian[debian_name]
        out[debian_name] = sim.SimPackage(
            ubuntu_name,
            package.summary,
            tools=package.tools,
            services=package.services,
            files=package.files,
            executables=package.executables,
            carries_simulator=package.carries_simulator,
            boot_scripts=package.boot_scripts,
            postinst=package.postinst,
            depends=package.depends,
            stands_for=debian_name,
        )
    return out


def _kernel_packages(flavour: Flavour, kernel: str) -> list[tuple[sim.SimPackage, str]]:
    version = sim.kernel_package_version(kernel)
    image = sim.SimPackage(
        f"linux-image-{kernel}",
        f"Linux kernel image {kernel} (simulated: the lab's kernel is the host's)",
    )
    metas = [
        (
            sim.SimPackage(
                name,
                f"{name} (simulated kernel metapackage)",
                depends=tuple(d.format(kernel=kernel) for d in depends),
            ),
            f"{version.split('-')[0]}.1~22.04.1",
        )
        for name, depends in flavour.kernel_meta.items()
    ]
    return [(image, version), *metas]


def flavour_dir(config: LabConfig, flavour: Flavour) -> Path:
    return config.repo_dir / flavour.path


def publish_flavour(config: LabConfig, flavour: Flavour) -> list[Path]:
    """The flavour's archive in the lab repository's `<name>/`: its own packages in `pool/`,
    the lab's others through links, a flat `Packages` and `dists/<codename>/main`, both over
    the same packages. Run after the lab's own index is built (it is filtered from it)."""
    root = flavour_dir(config, flavour)
    pool = root / "pool"
    pool.mkdir(parents=True, exist_ok=True)
    for sub in ("debian", "sim", "schedmd"):
        link = root / sub
        if not link.is_symlink():
            link.symlink_to(Path("..") / sub)
    cache_debs = config.cache_repo_dir / "debian"
    built: list[Path] = []
    branch = _driver_branch(config)
    kernel = sim.kernel_release()
    with tempfile.TemporaryDirectory(prefix=f"lab-{flavour.name}-") as tmp:
        work = Path(tmp)
        for name, version in sorted(flavour.relabel.items()):
            found = sorted(cache_debs.glob(f"{name}_*_amd64.deb")) or sorted(
                cache_debs.glob(f"{name}_*_all.deb")
            )
            if not found:
                raise LabError(f"{name} is not in the lab's package cache: run `lab up` again")
            built.append(_relabel(found[-1], version, flavour, pool, work))
        versions = _versions(config)
        for debian_name, package in _ubuntu_driver_packages(branch).items():
            version = versions[debian_name].split("-")[0] + "-0ubuntu1"
            built.append(sim.build_package(package, version, pool, work))
        for package, version in _kernel_packages(flavour, kernel):
            built.append(sim.build_package(package, version, pool, work))
    _index(config, flavour, {p.name for p in built})
    return built


def _driver_branch(config: LabConfig) -> str:
    for deb in (config.repo_dir / "sim").glob("nvidia-fabricmanager-*_*.deb"):
        return deb.name.split("_")[0].rsplit("-", 1)[1]
    return sim.DRIVER_BRANCH


def _versions(config: LabConfig) -> dict[str, str]:
    """The version of each of the lab's simulator packages, from their file names."""
    out = {}
    for deb in (config.repo_dir / "sim").glob("*.deb"):
        name, version = deb.name.split("_")[:2]
        out[name] = version
    return out


def _index(config: LabConfig, flavour: Flavour, own_files: set[str]) -> None:
    """`Packages` (flat) and `dists/<codename>/main/binary-amd64/Packages` + `Release`: the
    lab's index less what this OS does not ship under those names, and the flavour's own."""
    root = flavour_dir(config, flavour)
    own = run(["apt-ftparchive", "packages", "pool"], timeout=600, cwd=root).stdout
    replaced = {
        _control_field(stanza, "Package") for stanza in own.split("\n\n") if stanza.strip()
    } | set(flavour.absent)
    lab_index = (config.repo_dir / "Packages").read_text()
    kept = [
        stanza
        for stanza in lab_index.split("\n\n")
        if stanza.strip() and _control_field(stanza, "Package") not in replaced
    ]
    text = "\n\n".join([*kept, *(s for s in own.split("\n\n") if s.strip())]) + "\n\n"
    _replace(root / "Packages", text)
    suite = root / "dists" / flavour.codename
    binary = suite / "main" / "binary-amd64"
    binary.mkdir(parents=True, exist_ok=True)
    _replace(binary / "Packages", text)
    options = {
        "Suite": flavour.codename,
        "Codename": flavour.codename,
        "Components": "main",
        "Architectures": "amd64",
    }
    argv = ["apt-ftparchive"]
    for key, value in options.items():
        argv += ["-o", f"APT::FTPArchive::Release::{key}={value}"]
    release = run([*argv, "release", "."], timeout=120, cwd=suite).stdout
    _replace(suite / "Release", release)
    flat = run(["apt-ftparchive", "release", "."], timeout=120, cwd=root).stdout
    # The flat Release names only the flat index (apt-ftparchive also lists dists/).
    _replace(root / "Release", flat)


def _replace(path: Path, text: str) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(text)
    tmp.replace(path)


# --- its nodes ------------------------------------------------------------------------------


def node_files(flavour: Flavour) -> dict[str, tuple[str, int]]:
    """What makes a node this OS to Ansible and the roles: relative path -> (content, mode)."""
    return {
        "etc/os-release": (flavour.os_release, 0o644),
        "usr/lib/os-release": (flavour.os_release, 0o644),
        "etc/lsb-release": (flavour.lsb_release, 0o644),
        "etc/debian_version": (flavour.debian_version, 0o644),
    }


def ensure_layer(config: LabConfig, base: Path, flavour: Flavour) -> Path:
    """A cached overlay layer over `base`: the flavour's identity files and what its image has
    installed (the kernel packages of an HWE install), so a re-imaged node is this OS again."""
    pool = flavour_dir(config, flavour) / "pool"
    kernel = sim.kernel_release()
    wanted = [name.format(kernel=kernel) for name in flavour.preinstalled]
    debs = []
    for name in wanted:
        found = sorted(pool.glob(f"{name}_*.deb"))
        if not found:
            raise LabError(f"{name} is not in the {flavour.name} archive: publish it first")
        debs.append(found[-1])
    digest = hashlib.sha256(base.name.encode())
    for rel, (content, _) in sorted(node_files(flavour).items()):
        digest.update(f"{rel}\0{content}".encode())
    for deb in debs:
        digest.update(deb.read_bytes())
    final = config.cache_dir / "layers" / f"{flavour.name}-{digest.hexdigest()[:12]}"
    if (final / ".lab-layer").is_file():
        return final
    final.parent.mkdir(parents=True, exist_ok=True)
    scratch = final.with_name(final.name + ".tmp")
    if scratch.exists():
        shutil.rmtree(scratch)
    for sub in ("upper", "work", "root", "debs"):
        (scratch / sub).mkdir(parents=True)
    for deb in debs:
        shutil.copy2(deb, scratch / "debs" / deb.name)
    script = f"""set -e
R={scratch}/root
mount --make-rprivate /
mount -t overlay overlay -o lowerdir={base},upperdir={scratch}/upper,workdir={scratch}/work "$R"
mount -t proc proc "$R/proc"
mkdir -p "$R/tmp/lab-debs"
mount --bind {scratch}/debs "$R/tmp/lab-debs"
chroot "$R" dpkg --install {" ".join(f"/tmp/lab-debs/{d.name}" for d in debs)}
umount "$R/tmp/lab-debs"
rmdir "$R/tmp/lab-debs"
"""
    result = run(["unshare", "--mount", "--fork", "sh", "-c", script], check=False, timeout=300)
    if result.returncode != 0:
        tail = (result.stderr or result.stdout).strip().splitlines()[-3:]
        shutil.rmtree(scratch, ignore_errors=True)
        raise LabError(f"building the {flavour.name} layer failed: " + " | ".join(tail))
    upper = scratch / "upper"
    for rel, (content, mode) in node_files(flavour).items():
        path = upper / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        if path.is_symlink() or path.exists():
            path.unlink()
        path.write_text(content)
        path.chmod(mode)
    (upper / ".lab-layer").write_text(f"{flavour.name}\n")
    upper.rename(final)
    shutil.rmtree(scratch, ignore_errors=True)
    return final
