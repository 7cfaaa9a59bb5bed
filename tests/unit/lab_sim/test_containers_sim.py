"""The lab's enroot, its GPU hook and nvidia-container-cli behave where the enroot_pyxis role
depends on them (issue 18, finding 7): enroot mounts what the role's mounts.d file lists into the
container, read-only; its GPU hook stops a container whose image asks for GPUs
(NVIDIA_VISIBLE_DEVICES, as NGC images set it) when nvidia-container-cli is missing, as enroot's
98-nvidia.sh does, and passes with libnvidia-container-tools installed; an image reference is
data, never shell. The release files sit where the role's URLs point."""

from __future__ import annotations

import io
import os
import shutil
import subprocess
import tarfile
from pathlib import Path
from typing import Any

import jinja2
import pytest
import yaml

from cluster_lab import releases
from cluster_lab.sim.packages import build_package, build_sim_packages, enroot_packages
from tests.conftest import REPO

pytestmark = pytest.mark.skipif(shutil.which("dpkg-deb") is None, reason="needs dpkg-deb")

ROLE = REPO / "roles" / "enroot_pyxis"
needs_root = pytest.mark.skipif(
    os.geteuid() != 0 or shutil.which("unshare") is None, reason="mounts need root and unshare"
)


def _role_defaults() -> dict[str, Any]:
    defaults: dict[str, Any] = yaml.safe_load((ROLE / "defaults" / "main.yml").read_text())
    return defaults


@pytest.fixture(scope="module")
def node(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """enroot and the container toolkit unpacked as a node has them."""
    debs = tmp_path_factory.mktemp("debs")
    tree = tmp_path_factory.mktemp("node")
    packages = [build_package(p, "3.5.0-1", debs, debs / "work") for p in enroot_packages()]
    packages += [p for p in build_sim_packages(debs / "sim") if "libnvidia-container" in p.name]
    for deb in packages:
        subprocess.run(["dpkg-deb", "-x", str(deb), str(tree)], check=True)
    return tree


def _container(tmp_path: Path, node: Path, environment: str, files: list[str]) -> Path:
    """A container root, and the node's /etc/enroot with the role's mounts.d file for `files`."""
    sysconf = tmp_path / "sysconf"
    shutil.copytree(node / "etc" / "enroot", sysconf)
    env = jinja2.Environment(undefined=jinja2.StrictUndefined)
    env.filters["comment"] = lambda text: f"# {text}"
    for path in (ROLE / "templates" / "etc" / "enroot" / "mounts.d").glob("*.fstab.j2"):
        rendered = env.from_string(path.read_text()).render(
            ansible_managed="managed", enroot_pyxis_container_files=files
        )
        (sysconf / "mounts.d" / path.name.removesuffix(".j2")).write_text(rendered)
    root = tmp_path / "root"
    (root / "etc").mkdir(parents=True)
    (root / "etc" / "environment").write_text(environment)
    return root


def _mount(
    tmp_path: Path, node: Path, root: Path, script: str, *, cli: bool
) -> subprocess.CompletedProcess[str]:
    """`enroot mount ROOT` in a mount namespace of its own, then `script` there ($1: ROOT)."""
    path = "/usr/bin:/bin:/usr/sbin:/sbin"
    if cli:
        tools = tmp_path / "tools"
        tools.mkdir(exist_ok=True)
        shutil.copy2(node / "usr" / "bin" / "nvidia-container-cli", tools)
        path = f"{tools}:{path}"
    enroot = node / "usr" / "bin" / "enroot"
    return subprocess.run(
        ["unshare", "--mount", "--propagation", "private", "bash", "-c",
         f'"{enroot}" mount "$1" && {script}', "-", str(root)],
        capture_output=True, text=True, timeout=60, check=False,
        env={"PATH": path, "ENROOT_SYSCONF_PATH": str(tmp_path / "sysconf"), "HOME": str(tmp_path)},
    )  # fmt: skip


@needs_root
def test_the_roles_mount_puts_the_nccl_settings_in_the_container_read_only(
    node: Path, tmp_path: Path
) -> None:
    settings = tmp_path / "nccl.conf"
    settings.write_text("NCCL_IB_HCA=mlx5_0,mlx5_1\n")
    root = _container(tmp_path, node, "PATH=/bin\n", [str(settings), "/nonexistent/nccl.conf"])
    inside = f"$1{settings}"
    done = _mount(
        tmp_path, node, root,
        f'cat "{inside}"; (echo x > "{inside}") 2>/dev/null || echo read-only; '
        'test -e "$1/nonexistent/nccl.conf" || echo skipped',
        cli=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == ["NCCL_IB_HCA=mlx5_0,mlx5_1", "read-only", "skipped"]
    assert settings.read_text() == "NCCL_IB_HCA=mlx5_0,mlx5_1\n"


@needs_root
def test_an_image_that_asks_for_gpus_does_not_start_without_nvidia_container_cli(
    node: Path, tmp_path: Path
) -> None:
    root = _container(tmp_path, node, "NVIDIA_VISIBLE_DEVICES=all\n", [])
    refused = _mount(tmp_path, node, root, "echo started", cli=False)
    assert refused.returncode == 1, (refused.stdout, refused.stderr)
    assert "started" not in refused.stdout
    assert "Command not found: nvidia-container-cli" in refused.stderr
    assert "98-nvidia.sh exited with return code 1" in refused.stderr
    started = _mount(tmp_path, node, root, "echo started", cli=True)
    assert started.returncode == 0, started.stderr
    assert started.stdout.splitlines() == ["started"]


@needs_root
def test_an_image_without_gpu_settings_needs_no_cli(node: Path, tmp_path: Path) -> None:
    root = _container(tmp_path, node, "PATH=/bin\nNVIDIA_VISIBLE_DEVICES=void\n", [])
    done = _mount(tmp_path, node, root, "echo started", cli=False)
    assert done.returncode == 0, done.stderr


def test_an_image_reference_is_data(node: Path, tmp_path: Path) -> None:
    marker = tmp_path / "ran"
    enroot = node / "usr" / "bin" / "enroot"
    for ref in (f"docker://x#a$(touch {marker})", f"docker://reg;touch {marker}#a:1"):
        done = subprocess.run(
            [str(enroot), "import", "--output", str(tmp_path / "image.sqsh"), ref],
            capture_output=True, text=True, timeout=30, check=False,
            env={"PATH": "/usr/bin:/bin", "HOME": str(tmp_path)},
        )  # fmt: skip
        assert done.returncode == 1 and "Invalid image reference" in done.stderr, done.stderr
    assert not marker.exists()
    assert not (tmp_path / "image.sqsh").exists()


def test_the_release_files_are_where_the_roles_urls_point(tmp_path: Path) -> None:
    defaults = _role_defaults()
    version = str(defaults["enroot_pyxis_enroot_version"])
    names = [
        jinja2.Template(str(url))
        .render(enroot_pyxis_enroot_base_url="BASE/", enroot_pyxis_enroot_version=version)
        .rsplit("/", 1)[-1]
        for url in defaults["enroot_pyxis_enroot_debs"]
    ]
    built = [
        build_package(p, f"{version}-1", tmp_path, tmp_path / "work").name
        for p in enroot_packages()
    ]
    assert sorted(built) == sorted(names)
    assert releases.role_versions() == {
        "enroot": version,
        "pyxis": str(defaults["enroot_pyxis_pyxis_version"]),
    }
    tarball = releases.pyxis_tarball("0.20.0")
    with tarfile.open(fileobj=io.BytesIO(tarball)) as tar:
        assert sorted(tar.getnames()) == ["pyxis-0.20.0/Makefile", "pyxis-0.20.0/pyxis.c"]
    # Reproducible: a rebuild under a running lab changes no byte.
    assert releases.pyxis_tarball("0.20.0") == tarball
