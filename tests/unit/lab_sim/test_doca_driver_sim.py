"""The lab's DOCA package behaves as DOCA-Host does where the doca_ofed role depends on it
(issue 18, finding 4): the install leaves the inbox mlx5_core loaded (its /sys/module entry has
no version), `openibd start` on top of it changes nothing, and only `openibd restart` or a
reboot loads DOCA's driver, whose version /sys/module/mlx5_core/version then shows and
`modinfo -F version mlx5_core` names (DOCA-Host 2.9.1 carries MLNX_OFED 24.10-1.1.4)."""

from __future__ import annotations

import shutil
import signal
import subprocess
import time
from pathlib import Path

import pytest

from cluster_lab.sim import cli, kernel_state
from cluster_lab.sim.hw import default_hardware
from cluster_lab.sim.packages import build_sim_packages
from tests.conftest import FIXTURES

pytestmark = pytest.mark.skipif(shutil.which("dpkg-deb") is None, reason="needs dpkg-deb")

DOCA_MLX5 = "24.10-1.1.4"


@pytest.fixture(scope="module")
def node(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The DOCA package unpacked as a node has it, with its maintainer scripts beside it."""
    debs = tmp_path_factory.mktemp("debs")
    # DOCA-Host 2.9.1, whose mlx5_core version its release notes name.
    built = build_sim_packages(debs, {"doca-ofed": "2.9.1-1"})
    deb = next(p for p in built if p.name.startswith("doca-ofed_"))
    tree = tmp_path_factory.mktemp("node")
    subprocess.run(["dpkg-deb", "-x", str(deb), str(tree)], check=True)
    subprocess.run(["dpkg-deb", "-e", str(deb), str(tree / "DEBIAN")], check=True)
    return tree


def _env(run: Path) -> dict[str, str]:
    return {
        "PATH": "/usr/bin:/bin",
        "LAB_MODEL": str(FIXTURES / "sim" / "lab-model.json"),
        "LAB_NODE": "gpu001",
        "LAB_RUN_DIR": str(run),
        "LAB_MOUNT_KERNEL_VIEW": "0",
    }


def _loaded(run: Path) -> str | None:
    """/sys/module/mlx5_core/version as the node shows it (None: the module sets none)."""
    module = run / "kernel" / "sys-module" / "mlx5_core"
    assert (module / "initstate").read_text() == "live\n", "an mlx5_core is loaded"
    version = module / "version"
    return version.read_text().strip() if version.is_file() else None


def _start_openibd(node: Path, run: Path) -> subprocess.Popen[bytes]:
    daemon = subprocess.Popen(
        ["/usr/bin/python3", "-S", "-I", str(node / "usr/sbin/openibd-lab")], env=_env(run)
    )
    deadline = time.monotonic() + 30
    while not (run / "kernel" / "sys-module" / "mlx5_core" / "initstate").is_file():
        assert daemon.poll() is None and time.monotonic() < deadline, "openibd did not start"
        time.sleep(0.1)
    time.sleep(0.5)
    return daemon


def _stop(daemon: subprocess.Popen[bytes]) -> None:
    daemon.send_signal(signal.SIGTERM)
    assert daemon.wait(timeout=30) == 0


def test_docas_driver_is_loaded_only_after_openibd_restart_or_a_reboot(
    node: Path, tmp_path: Path
) -> None:
    run = tmp_path / "run"
    # dpkg runs the postinst while the inbox driver udev loaded at boot is running.
    postinst = node / "DEBIAN" / "postinst"
    subprocess.run(["sh", str(postinst), "configure"], env=_env(run), check=True)
    modinfo = subprocess.run(
        ["/usr/bin/python3", "-S", "-I", str(node / "usr/local/sbin/modinfo"),
         "-F", "version", "mlx5_core"],
        env=_env(run), capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert (modinfo.returncode, modinfo.stdout) == (0, f"{DOCA_MLX5}\n"), modinfo.stderr

    daemon = _start_openibd(node, run)  # `service openibd start`: what the role used to do
    try:
        assert _loaded(run) is None, "a start on top of the inbox driver replaces nothing"
    finally:
        _stop(daemon)
    daemon = _start_openibd(node, run)  # ... the restart's start
    try:
        assert _loaded(run) == DOCA_MLX5
    finally:
        _stop(daemon)

    # A reboot: /run is a fresh tmpfs and openibd (enabled) starts at boot.
    shutil.rmtree(run)
    daemon = _start_openibd(node, run)
    try:
        assert _loaded(run) == DOCA_MLX5
    finally:
        _stop(daemon)


def test_nvidia_peermem_built_before_doca_does_not_load(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The driver package installed before DOCA built nvidia-peermem against the inbox ib_core,
    which has no peer-memory API: modprobe refuses it as the real one does ("Invalid argument");
    installed after DOCA, it loads."""
    monkeypatch.setenv("LAB_MOUNT_KERNEL_VIEW", "0")
    monkeypatch.setattr(kernel_state, "RUN_DIR", tmp_path / "run")
    monkeypatch.setattr(cli, "LIB_ROOT", tmp_path)
    model = {"nodes": {"gpu001": {"hardware": default_hardware("gpu001").to_dict()}}}
    (tmp_path / cli.PEERMEM_BUILD).write_text("inbox\n")
    refused = cli.modprobe(["nvidia_peermem"], model, "gpu001")
    assert (refused.exit_code, refused.stderr) == (
        1,
        "modprobe: ERROR: could not insert 'nvidia_peermem': Invalid argument\n",
    )
    assert "nvidia_peermem" not in cli.lsmod([], model, "gpu001").stdout
    (tmp_path / cli.PEERMEM_BUILD).write_text("doca\n")
    assert cli.modprobe(["nvidia_peermem"], model, "gpu001").exit_code == 0
    assert "nvidia_peermem" in cli.lsmod([], model, "gpu001").stdout


def test_the_driver_package_records_the_ib_core_its_peermem_was_built_against(
    tmp_path: Path,
) -> None:
    debs = build_sim_packages(tmp_path / "debs")
    deb = next(p for p in debs if p.name.startswith("nvidia-open-kernel-dkms_"))
    subprocess.run(["dpkg-deb", "-e", str(deb), str(tmp_path / "ctl")], check=True)
    postinst = (tmp_path / "ctl" / "postinst").read_text()
    build = postinst.index("nvidia-peermem.ib_core")
    assert build < postinst.index("modprobe nvidia_peermem"), "recorded before it is loaded"
    assert 'if [ -e "$lib/versions/doca-ofed" ]; then ib_core=doca; else ib_core=inbox; fi' in (
        postinst
    )
