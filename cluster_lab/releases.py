"""What the lab's repository server holds besides its apt repository: the downloads a real
cluster takes from GitHub releases and a container registry, for the enroot_pyxis role.

- `releases/enroot/v<V>/enroot[+caps]_<V>-1_amd64.deb`: the simulated enroot, laid out as enroot's
  GitHub release is (the role's `enroot_download_url` points at `releases/enroot/`);
- `releases/pyxis/archive/refs/tags/v<V>.tar.gz`: the lab's pyxis sources as GitHub serves a tag's
  tarball (`pyxis_repo_url` = `releases/pyxis.git`), which the role builds against the node's
  Slurm headers with `make install`;
- `registry/lab/busybox/1.tar.gz`: an image for `srun --container-image=<server>#lab/busybox:1`
  (the lab's enroot fetches `http://REGISTRY/registry/IMAGE/TAG.tar.gz`), a static busybox from
  Debian's busybox-static with the environment NGC images set (`NVIDIA_VISIBLE_DEVICES=all`).

Versions are the role's pins. Every file is built reproducibly (fixed times and owners), so a
rebuild under a running lab changes no byte.
"""

from __future__ import annotations

import gzip
import io
import os
import subprocess
import tarfile
import tempfile
from pathlib import Path
from typing import Any

import yaml

from cluster_lab.config import LabConfig
from cluster_lab.host import LabError
from cluster_lab.sim.packages import (
    BUILD_EPOCH,
    CONTAINERS_DATA,
    REPO_ROOT,
    build_package,
    enroot_packages,
)

IMAGE = ("lab/busybox", "1")
# What the image's busybox answers to (links in /bin; /usr/bin/env for `enroot start`).
_APPLETS = (
    "sh", "cat", "ls", "env", "test", "echo", "id", "head", "tail", "grep", "true", "false",
    "mkdir", "stat", "wc", "sed", "tr", "uname", "hostname", "sleep", "readlink",
)  # fmt: skip
_OS_RELEASE = 'NAME="cluster-tool lab busybox"\nID=lab-busybox\nVERSION_ID="1"\n'
# The image config's environment, as enroot import writes it into the root's /etc/environment.
_ENVIRONMENT = (
    "PATH=/usr/local/bin:/usr/bin:/bin\n"
    "NVIDIA_VISIBLE_DEVICES=all\n"
    "NVIDIA_DRIVER_CAPABILITIES=compute,utility\n"
)


def role_versions() -> dict[str, str]:
    """enroot's and pyxis' versions as the enroot_pyxis role pins them."""
    path = REPO_ROOT / "roles" / "enroot_pyxis" / "defaults" / "main.yml"
    defaults: dict[str, Any] = yaml.safe_load(path.read_text()) or {}
    return {
        "enroot": str(defaults["enroot_pyxis_enroot_version"]),
        "pyxis": str(defaults["enroot_pyxis_pyxis_version"]),
    }


def image_ref(config: LabConfig) -> str:
    """The lab image's reference for pyxis/enroot: `<server>#lab/busybox:1`."""
    server = config.repo_url.split("://", 1)[-1].rstrip("/")
    return f"{server}#{IMAGE[0]}:{IMAGE[1]}"


def publish_releases(config: LabConfig) -> list[Path]:
    """Build the enroot release, the pyxis tarball and the image into the lab's server."""
    root = config.repo_dir
    versions = role_versions()
    built: list[Path] = []
    enroot_dir = root / "releases" / "enroot" / f"v{versions['enroot']}"
    enroot_dir.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="lab-enroot-") as work:
        for pkg in enroot_packages():
            built.append(build_package(pkg, f"{versions['enroot']}-1", enroot_dir, Path(work)))
    tags = root / "releases" / "pyxis" / "archive" / "refs" / "tags"
    built.append(_replace(tags / f"v{versions['pyxis']}.tar.gz", pyxis_tarball(versions["pyxis"])))
    image = root / "registry" / IMAGE[0] / f"{IMAGE[1]}.tar.gz"
    built.append(_replace(image, busybox_image(_busybox_deb(config))))
    return built


def pyxis_tarball(version: str) -> bytes:
    """The lab's pyxis as a tag's source tarball: one top folder, `pyxis-<version>/`."""
    members = {name: (CONTAINERS_DATA / name).read_bytes() for name in ("pyxis.c", "Makefile")}
    return _targz({f"pyxis-{version}/{name}": (data, 0o644) for name, data in members.items()})


def busybox_image(busybox_deb: Path) -> bytes:
    """The image's root tree: busybox, its links, the folders enroot mounts over, os-release and
    the image environment."""
    with tempfile.TemporaryDirectory(prefix="lab-busybox-") as tmp:
        done = subprocess.run(
            ["dpkg-deb", "-x", str(busybox_deb), tmp], capture_output=True, text=True, check=False
        )
        binary = Path(tmp) / "bin" / "busybox"
        if done.returncode != 0 or not binary.is_file():
            raise LabError(f"{busybox_deb.name}: no bin/busybox in it ({done.stderr.strip()})")
        busybox = binary.read_bytes()
    files: dict[str, tuple[bytes, int]] = {
        "bin/busybox": (busybox, 0o755),
        "etc/os-release": (_OS_RELEASE.encode(), 0o644),
        "etc/environment": (_ENVIRONMENT.encode(), 0o644),
    }
    links = {f"bin/{applet}": "busybox" for applet in _APPLETS}
    links["usr/bin/env"] = "../../bin/busybox"
    dirs = ("bin", "etc", "usr", "usr/bin", "dev", "proc", "sys", "root", "tmp")
    return _targz(files, links, dirs)


def _busybox_deb(config: LabConfig) -> Path:
    found = sorted((config.cache_repo_dir / "debian").glob("busybox-static_*_amd64.deb"))
    if not found:
        raise LabError("busybox-static is not in the lab's package cache: run `lab up` again")
    return found[-1]


def _targz(
    files: dict[str, tuple[bytes, int]],
    links: dict[str, str] | None = None,
    dirs: tuple[str, ...] = (),
) -> bytes:
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w", format=tarfile.GNU_FORMAT) as tar:

        def add(info: tarfile.TarInfo, data: bytes | None = None) -> None:
            info.mtime, info.uid, info.gid, info.uname, info.gname = BUILD_EPOCH, 0, 0, "", ""
            tar.addfile(info, io.BytesIO(data) if data is not None else None)

        for name in dirs:
            info = tarfile.TarInfo(name)
            info.type, info.mode = tarfile.DIRTYPE, 0o1777 if name == "tmp" else 0o755
            add(info)
        for name, (data, mode) in sorted(files.items()):
            info = tarfile.TarInfo(name)
            info.size, info.mode = len(data), mode
            add(info, data)
        for name, target in sorted((links or {}).items()):
            info = tarfile.TarInfo(name)
            info.type, info.linkname, info.mode = tarfile.SYMTYPE, target, 0o777
            add(info)
    return gzip.compress(raw.getvalue(), mtime=0)


def _replace(path: Path, data: bytes) -> Path:
    """Write `path` atomically, and only when its bytes change."""
    path.parent.mkdir(parents=True, exist_ok=True)
    if path.is_file() and path.read_bytes() == data:
        return path
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_bytes(data)
    os.replace(tmp, path)
    return path
