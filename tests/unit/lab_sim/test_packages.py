"""The simulator .debs: vendor names and versions, and executables that run on a bare python3
(no venv, no cluster_tool) and answer from the lab model."""

from __future__ import annotations

import fnmatch
import json
import os
import shutil
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest

from cluster_lab.faults import inject
from cluster_lab.sim.packages import (
    DEFAULT_VERSIONS,
    PackageBuildError,
    build_sim_packages,
    role_pins,
)
from cluster_tool.parsers.dcgmi import parse_dcgmi_diag
from cluster_tool.parsers.kernel_log import parse_xids
from cluster_tool.parsers.lspci import parse_lspci
from cluster_tool.parsers.mlxlink import parse_mlxlink
from cluster_tool.parsers.nccl_tests import parse_nccl_tests
from cluster_tool.parsers.nvidia_query import parse_query_csv
from cluster_tool.parsers.nvidia_smi import parse_nvidia_smi_q
from cluster_tool.parsers.nvlink_errors import parse_nvlink_errors
from tests.conftest import FIXTURES, REPO

pytestmark = pytest.mark.skipif(shutil.which("dpkg-deb") is None, reason="needs dpkg-deb")


@pytest.fixture(scope="module")
def debs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    out = tmp_path_factory.mktemp("debs")
    built = build_sim_packages(out)
    return {p.name.split("_")[0]: p for p in built}


@pytest.fixture(scope="module")
def root(debs: dict[str, Path], tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Every package unpacked into one tree, as a node would have them."""
    tree = tmp_path_factory.mktemp("node")
    for deb in debs.values():
        subprocess.run(["dpkg-deb", "-x", str(deb), str(tree)], check=True)
    return tree


def _field(deb: Path, name: str) -> str:
    done = subprocess.run(["dpkg-deb", "-f", str(deb), name], capture_output=True, text=True)
    return done.stdout.strip()


def test_names_and_versions_are_the_vendors(debs: dict[str, Path]) -> None:
    # And the headers of the running kernel (the host's, which every lab node shares).
    assert set(debs) == set(DEFAULT_VERSIONS) | {f"linux-headers-{os.uname().release}"}
    assert _field(debs["nvidia-fabricmanager-570"], "Version") == "570.172.08-1"
    assert _field(debs["nvidia-driver-cuda"], "Version") == "570.172.08-1"
    assert _field(debs["datacenter-gpu-manager"], "Version") == "1:3.3.9"
    assert _field(debs["datacenter-gpu-manager-4-core"], "Version") == "1:4.2.3-1"
    assert _field(debs["nccl-tests"], "Depends") == "python3"
    assert _field(debs["doca-ofed"], "Depends") == (
        "python3, infiniband-diags, rdma-core, ibverbs-utils, mft"
    )
    assert _field(debs["mft"], "Version") == "4.33.0-169"


def test_every_package_the_roles_pin_is_built_at_a_matching_version(
    debs: dict[str, Path],
) -> None:
    pins = role_pins(REPO / "roles")
    # The roles that install vendor packages on Debian 12 (lab nodes).
    assert {"nvidia-driver-cuda", "nvidia-fabricmanager-570", "libnccl2", "doca-ofed"} <= set(pins)
    for name, pattern in pins.items():
        assert name in debs, f"the roles install {name}; no simulator package is built for it"
        version = _field(debs[name], "Version")
        assert fnmatch.fnmatchcase(version, pattern), (name, version, pattern)


def test_builds_are_reproducible_and_a_rebuild_leaves_the_repo_alone(
    debs: dict[str, Path], tmp_path: Path
) -> None:
    again = {p.name.split("_")[0]: p for p in build_sim_packages(tmp_path)}
    assert {n: p.read_bytes() for n, p in again.items()} == {
        n: p.read_bytes() for n, p in debs.items()
    }
    stamps = {p: p.stat().st_mtime_ns for p in again.values()}
    build_sim_packages(tmp_path)
    assert {p: p.stat().st_mtime_ns for p in again.values()} == stamps


def test_a_version_can_be_overridden(tmp_path: Path) -> None:
    built = build_sim_packages(tmp_path, {"nccl-tests": "2.13.11-2"})
    deb = next(p for p in built if p.name.startswith("nccl-tests_"))
    assert _field(deb, "Version") == "2.13.11-2"


def test_unknown_package_is_refused(tmp_path: Path) -> None:
    with pytest.raises(PackageBuildError, match="cuda-toolkit"):
        build_sim_packages(tmp_path, {"cuda-toolkit": "12.4"})


def test_init_scripts_are_valid_shell(root: Path) -> None:
    scripts = sorted((root / "etc" / "init.d").iterdir())
    assert [s.name for s in scripts] == [
        "dcgm-exporter",
        "nvidia-dcgm",
        "nvidia-fabricmanager",
        "nvidia-kernel-modules",
        "nvidia-persistenced",
        "openibd",
        "opensm-ibsim",
    ]
    for script in scripts:
        assert os.access(script, os.X_OK)
        subprocess.run(["sh", "-n", str(script)], check=True)


def test_the_labs_opensm_service_runs_the_distributions_opensm_against_ibsim(
    debs: dict[str, Path], root: Path
) -> None:
    """The opensm role installs opensm-ibsim beside Debian's opensm on the lab's subnet manager;
    its init script runs the unit's ExecStart, which execs the real OpenSM (so the pid file is
    OpenSM's; it reads the role's opensm.conf from its default path) through the umad2sim
    preload."""
    assert {"opensm", "ibsim-utils"} <= set(_field(debs["opensm-ibsim"], "Depends").split(", "))
    init = (root / "etc" / "init.d" / "opensm-ibsim").read_text()
    assert "UNIT=/lib/systemd/system/opensm-ibsim.service" in init
    unit = (root / "lib" / "systemd" / "system" / "opensm-ibsim.service").read_text()
    (exec_start,) = [line for line in unit.splitlines() if line.startswith("ExecStart=")]
    script = (root / exec_start.split()[-1].lstrip("/")).read_text()
    assert "LD_PRELOAD=/usr/lib/x86_64-linux-gnu/umad2sim/libumad2sim.so" in script
    assert ". /etc/cluster-tool-lab/ibsim.env" in script
    assert script.rstrip().splitlines()[-1] == (
        "exec /usr/sbin/opensm --sweep 5 --debug 2 --log_file /var/log/opensm.log"
    )


def _model(tmp_path: Path, change: Any = None) -> Path:
    data = json.loads((FIXTURES / "sim" / "lab-model.json").read_text())
    if change:
        change(data)
    path = tmp_path / "model.json"
    path.write_text(json.dumps(data))
    return path


def _tool(
    root: Path, path: str, args: list[str], model: Path, node: str = "gpu001", **env: str
) -> subprocess.CompletedProcess[str]:
    # The system python3 with no site packages: what a bare lab node has.
    clean = {
        "PATH": "/usr/bin:/bin",
        "LAB_MODEL": str(model),
        "LAB_NODE": node,
        "LAB_RUN_DIR": str(model.parent / "run"),
        "LAB_MOUNT_KERNEL_VIEW": "0",
        **env,
    }
    tool = root / path
    # The nccl-tests wrappers are shell (the fast path of ranks past 0); the rest Python.
    shell = tool.read_bytes().startswith(b"#!/bin/sh")
    return subprocess.run(
        [
            "/bin/sh" if shell else "/usr/bin/python3",
            *([] if shell else ["-S", "-I"]),
            str(tool),
            *args,
        ],
        capture_output=True,
        text=True,
        env=clean,
        timeout=60,
    )


def test_nvidia_smi_runs_on_a_bare_python(root: Path, tmp_path: Path) -> None:
    model = _model(tmp_path, lambda d: inject(d, "gpu-ecc", "gpu001", 2, now=1.9e9))
    done = _tool(root, "usr/bin/nvidia-smi", ["-q"], model)
    assert done.returncode == 0, done.stderr
    report = parse_nvidia_smi_q(done.stdout)
    assert len(report.gpus) == 8
    assert report.gpus[2].ecc_volatile and report.gpus[2].ecc_volatile.uncorrectable == 1
    query = _tool(root, "usr/bin/nvidia-smi", ["--query-gpu=index,driver_version",
                                               "--format=csv,noheader"], model)  # fmt: skip
    # The driver version is the installed package's, as the role's version check expects.
    assert query.stdout.splitlines()[0] == "0, 570.172.08"
    rows = parse_query_csv(query.stdout, ["index", "driver_version"]).rows
    assert len(rows) == 8
    bad = _tool(root, "usr/bin/nvidia-smi", ["--query-gpu=bogus", "--format=csv"], model)
    assert (bad.returncode, bad.stdout) == (2, 'Field "bogus" is not a valid field to query.\n\n')
    head = _tool(root, "usr/bin/nvidia-smi", ["-L"], model, node="head")
    assert (head.returncode, head.stdout) == (6, "No devices were found\n")


def test_dcgmi_and_dmesg_show_the_fault(root: Path, tmp_path: Path) -> None:
    model = _model(tmp_path, lambda d: inject(d, "gpu-ecc", "gpu003", 6, now=1.9e9))
    diag = _tool(root, "usr/bin/dcgmi", ["diag", "-r", "3"], model, node="gpu003")
    assert diag.returncode != 0
    assert parse_dcgmi_diag(diag.stdout).failed_gpus == (6,)
    found = _tool(root, "usr/bin/dcgmi", ["discovery", "-l"], model, node="gpu003")
    # What the dcgm role checks after starting the host engine.
    assert found.returncode == 0 and found.stdout.startswith("8 GPUs found.\n")
    log = _tool(root, "usr/local/bin/dmesg", [], model, node="gpu003")
    assert [e.code for e in parse_xids(log.stdout)] == [48]


def test_module_missing_shows_in_modprobe(root: Path, tmp_path: Path) -> None:
    model = _model(tmp_path, lambda d: inject(d, "module-missing", "gpu001", "nvidia_peermem"))
    done = _tool(root, "usr/local/sbin/modprobe", ["nvidia_peermem"], model)
    assert done.returncode == 1
    assert done.stderr.startswith("modprobe: FATAL: Module nvidia_peermem not found")


def test_all_reduce_perf_under_srun_env(root: Path, tmp_path: Path) -> None:
    model = _model(tmp_path)
    env = {
        "SLURM_PROCID": "0",
        "PMIX_RANK": "0",
        "SLURM_NTASKS": "16",
        "SLURM_JOB_NODELIST": "gpu[001-002]",
        "SLURM_STEP_TASKS_PER_NODE": "8(x2)",
        "SLURM_LOCALID": "0",
    }
    done = _tool(
        root,
        "usr/bin/all_reduce_perf",
        ["-b", "8", "-e", "128M", "-f", "2"],
        model,
        **env,
    )
    assert done.returncode == 0, done.stderr
    parsed = parse_nccl_tests(done.stdout)
    assert parsed.complete and len(parsed.ranks) == 16
    rank9 = {**env, "SLURM_PROCID": "9", "PMIX_RANK": "9"}
    binary = "usr/bin/all_reduce_perf"
    other = _tool(root, binary, ["-b", "8", "-e", "128M"], model, node="gpu002", **rank9)
    assert (other.returncode, other.stdout) == (0, "")


def test_dpkg_unpacks_every_package_into_one_root(debs: dict[str, Path], tmp_path: Path) -> None:
    # Two packages owning one file would make apt refuse the second: unpack them all together,
    # but for the one a package declares it replaces (DCGM 3 under DCGM 4).
    replaced = {"datacenter-gpu-manager"}
    assert (
        "Conflicts: datacenter-gpu-manager"
        in subprocess.run(
            ["dpkg-deb", "-f", str(debs["datacenter-gpu-manager-4-core"])],
            capture_output=True,
            text=True,
        ).stdout
    )
    admin = tmp_path / "var" / "lib" / "dpkg"
    (admin / "info").mkdir(parents=True)
    (admin / "updates").mkdir()
    (admin / "status").touch()
    done = subprocess.run(
        ["dpkg", f"--root={tmp_path}", "--force-depends", "--force-not-root", "--unpack",
         *(str(d) for n, d in debs.items() if n not in replaced)],
        capture_output=True,
        text=True,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "usr" / "bin" / "nvidia-smi").is_file()


@pytest.mark.skipif(os.geteuid() != 0, reason="mounting over /proc/driver needs root")
def test_modprobe_shows_modules_where_the_roles_look(root: Path, tmp_path: Path) -> None:
    """In a private mount namespace (as in a lab node): after the simulated modprobe,
    /proc/driver/nvidia/version and /sys/module/nvidia_peermem exist; a module-missing fault
    in the model makes nvidia_peermem vanish at the next tool call."""
    model = _model(tmp_path)
    faulted = json.loads(model.read_text())
    inject(faulted, "module-missing", "gpu001", "nvidia_peermem")
    (tmp_path / "faulted.json").write_text(json.dumps(faulted))
    py = "/usr/bin/python3 -S -I"
    script = f"""
set -e
{py} {root}/usr/local/sbin/modprobe nvidia_peermem
cat /proc/driver/nvidia/version
test -e /sys/module/nvidia_peermem/initstate && echo PEERMEM-LOADED
cat /sys/module/nvidia/version
{py} {root}/usr/local/sbin/lsmod | head -3
cp {tmp_path}/faulted.json {model}
{py} {root}/usr/local/sbin/lsmod >/dev/null
test -e /sys/module/nvidia_peermem || echo PEERMEM-GONE
"""
    env = {
        "PATH": "/usr/sbin:/usr/bin:/sbin:/bin",
        "LAB_MODEL": str(model),
        "LAB_NODE": "gpu001",
        "LAB_RUN_DIR": str(tmp_path / "run"),
        "LAB_MOUNT_KERNEL_VIEW": "1",
    }
    done = subprocess.run(
        ["unshare", "-m", "sh", "-c", script], capture_output=True, text=True, env=env, timeout=60
    )
    assert done.returncode == 0, done.stderr
    out = done.stdout.splitlines()
    assert out[0].startswith("NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  570.172.08")
    assert "PEERMEM-LOADED" in out and "570.172.08" in out
    assert out[out.index("570.172.08") + 1] == "Module                  Size  Used by"
    assert out[out.index("570.172.08") + 2] == "nvidia               8646656  1 nvidia_peermem"
    assert out[-1] == "PEERMEM-GONE"
    # The host's own /sys/module was never touched.
    assert not Path("/proc/driver/nvidia").exists()


@pytest.mark.skipif(os.geteuid() != 0, reason="mknod needs root")
def test_loaded_driver_creates_the_gres_device_files(root: Path, tmp_path: Path) -> None:
    """slurmd's gres.conf names /dev/nvidia[0-7]: the loaded driver provides them; a GPU that
    is gone loses its file."""
    model = _model(tmp_path)
    dev = tmp_path / "dev"
    dev.mkdir()
    env = {"LAB_MOUNT_KERNEL_VIEW": "1", "LAB_DEV_DIR": str(dev)}
    # Mounting over /proc/driver is tried too: keep it inside a private mount namespace.
    script = f"/usr/bin/python3 -S -I {root}/usr/local/sbin/modprobe nvidia_uvm"
    full = {
        "PATH": "/usr/sbin:/usr/bin:/sbin:/bin",
        "LAB_MODEL": str(model),
        "LAB_NODE": "gpu001",
        "LAB_RUN_DIR": str(tmp_path / "run"),
        **env,
    }
    done = subprocess.run(["unshare", "-m", "sh", "-c", script], env=full, capture_output=True)
    assert done.returncode == 0, done.stderr
    names = sorted(p.name for p in dev.iterdir())
    assert names == sorted([f"nvidia{i}" for i in range(8)] + ["nvidiactl", "nvidia-uvm",
                                                               "nvidia-uvm-tools"])  # fmt: skip
    st = (dev / "nvidia3").stat()
    assert (os.major(st.st_rdev), os.minor(st.st_rdev)) == (195, 3)
    faulted = json.loads(model.read_text())
    inject(faulted, "gpu-missing", "gpu001", 3)
    model.write_text(json.dumps(faulted))
    lsmod = f"/usr/bin/python3 -S -I {root}/usr/local/sbin/lsmod"
    subprocess.run(["unshare", "-m", "sh", "-c", lsmod], env=full, capture_output=True, check=True)
    assert not (dev / "nvidia3").exists() and (dev / "nvidia4").exists()


def test_all_reduce_perf_runs_through_the_roles_link_in_opt(root: Path, tmp_path: Path) -> None:
    # The nccl_tests role links /opt/nccl-tests/build/<tool> -> /usr/bin/<tool>; the wrapper
    # must find its simulator from the link's target, not from the link's folder.
    build = root / "opt" / "nccl-tests" / "build"
    build.mkdir(parents=True, exist_ok=True)
    link = build / "all_reduce_perf"
    if not link.is_symlink():
        link.symlink_to(root / "usr" / "bin" / "all_reduce_perf")
    env = {"SLURM_PROCID": "0", "SLURM_NTASKS": "8", "SLURM_JOB_NODELIST": "gpu001"}
    done = _tool(root, "opt/nccl-tests/build/all_reduce_perf", ["-b", "8", "-e", "1M"],
                 _model(tmp_path), **env)  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert parse_nccl_tests(done.stdout).complete


def test_the_driver_package_loads_its_modules_again_at_every_boot(tmp_path: Path) -> None:
    """udev coldplug + systemd-modules-load, as the lab's SysV nodes get them: after a
    reboot the driver's modules and what /etc/modules-load.d names are loaded again."""
    from cluster_lab.sim.packages import build_package, packages_for

    pkg = next(p for p in packages_for() if p.name == "nvidia-open-kernel-dkms")
    deb = build_package(pkg, "570.124.06-1", tmp_path, tmp_path / "work")
    root = tmp_path / "root"
    subprocess.run(["dpkg-deb", "-x", str(deb), str(root)], check=True)
    script = root / "etc" / "init.d" / "nvidia-kernel-modules"
    assert os.access(script, os.X_OK)
    postinst = subprocess.run(
        ["dpkg-deb", "-I", str(deb), "postinst"], capture_output=True, text=True, check=True
    ).stdout
    assert "update-rc.d nvidia-kernel-modules defaults" in postinst
    # Run `start` against a recording modprobe and a modules-load.d of this test's own.
    loaded = tmp_path / "loaded"
    fake = tmp_path / "modprobe"
    fake.write_text(f'#!/bin/sh\necho "$1" >> {loaded}\n')
    fake.chmod(0o755)
    conf = tmp_path / "etc"
    (conf / "modules-load.d").mkdir(parents=True)
    (conf / "modules-load.d" / "nvidia-peermem.conf").write_text("# peermem mode\nnvidia_peermem\n")
    text = script.read_text().replace("/usr/local/sbin/modprobe", str(fake))
    text = text.replace("/etc/", f"{conf}/")
    run = subprocess.run(["sh", "-c", text, "nvidia-kernel-modules", "start"], check=False)
    assert run.returncode == 0
    assert loaded.read_text().split() == [
        "nvidia",
        "nvidia_uvm",
        "nvidia_modeset",
        "nvidia_peermem",
    ]


def test_link_tools_run_on_a_bare_python_and_show_the_faults(root: Path, tmp_path: Path) -> None:
    """What the health probes run: MFT's mlxlink, the driver's nvidia-smi nvlink -e and lspci,
    read by the real parsers, each showing its fault."""

    def faults(data: dict[str, Any]) -> None:
        inject(data, "link-ber", "gpu002", "mlx5_4", "1e-9")
        inject(data, "nvlink-errors", "gpu002", "3")
        inject(data, "pcie-width", "gpu002", "mlx5_4", "8")

    model = _model(tmp_path, faults)
    link = _tool(root, "usr/bin/mlxlink", ["-d", "mlx5_4", "-m", "-c"], model, node="gpu002")
    assert link.returncode == 0, link.stderr
    (port,) = parse_mlxlink(link.stdout)
    assert (port.speed, port.raw_ber, port.effective_errors) == ("IB-HDR", 1e-9, 0)
    assert port.mft_version == "4.33.0-169"  # the installed mft package's version
    missing = _tool(root, "usr/bin/mlxlink", ["-d", "mlx5_99"], model, node="gpu002")
    assert missing.returncode != 0 and missing.stderr.startswith("-E- ")

    errors = _tool(root, "usr/bin/nvidia-smi", ["nvlink", "-e"], model, node="gpu002")
    gpus = parse_nvlink_errors(errors.stdout)
    assert [(g.index, link.link, link.crc) for g in gpus for link in g.links if link.crc] == [
        (3, 0, 45068)
    ]

    pci = _tool(root, "usr/local/bin/lspci", ["-vv", "-d", "15b3:"], model, node="gpu002")
    widths = {f.address: (f.width, f.width_downgraded) for f in parse_lspci(pci.stdout)}
    assert widths["0000:4f:00.0"] == (8, True)
    assert widths["0000:18:00.0"] == (16, False)


def _rank(root: Path, rank: int, steps: Path, model: Path) -> subprocess.Popen[str]:
    """One rank of job 7's step 0 over gpu[001-002] (8 tasks each), as srun --mpi=pmix starts it."""
    env = {
        "PMIX_RANK": str(rank), "SLURM_PROCID": str(rank), "SLURM_JOB_ID": "7",
        "SLURM_STEP_ID": "0", "SLURM_STEP_NUM_TASKS": "16",
        "SLURM_STEP_NODELIST": "gpu[001-002]", "SLURM_STEP_TASKS_PER_NODE": "8(x2)",
        "SLURM_LOCALID": str(rank % 8), "LAB_STEPS_DIR": str(steps), "PATH": "/usr/bin:/bin",
        "LAB_MODEL": str(model), "LAB_NODE": "gpu001" if rank < 8 else "gpu002",
        "LAB_RUN_DIR": str(model.parent / "run"), "LAB_MOUNT_KERNEL_VIEW": "0",
    }  # fmt: skip
    tool = root / "usr" / "bin" / "all_reduce_perf"
    return subprocess.Popen(
        ["/bin/sh", str(tool), "-b", "8", "-e", "1M"], env=env, text=True,
        stdout=subprocess.PIPE, stderr=subprocess.PIPE,
    )  # fmt: skip


@pytest.mark.parametrize(
    ("fault", "word", "rc"),
    [(None, "0", 0), ("gpu002", "hang", None)],
)
def test_ranks_past_0_end_as_rank_0_says_without_a_python_of_their_own(
    root: Path, tmp_path: Path, fault: str | None, word: str, rc: int | None
) -> None:
    """Rank 0 leaves its word in the steps folder; rank 9 (on gpu002) waits for it and ends as
    it says: exit 0, or never (a node down hangs the whole step). Rank 9's model is a file that
    does not exist: had it started the simulator, it would have failed on it."""
    steps = tmp_path / "steps"
    steps.mkdir()

    def down(data: dict[str, Any]) -> None:
        for n in data["nodes"]:
            if n["name"] == fault:
                n["down"] = True

    model = _model(tmp_path, down if fault else None)
    other = _rank(root, 9, steps, tmp_path / "no-such-model.json")
    time.sleep(0.3)
    assert other.poll() is None, "rank 9 ended before rank 0 said how"
    lead = _rank(root, 0, steps, model)
    try:
        if rc is None:
            deadline = time.monotonic() + 30
            while not (steps / "7.0").exists() and time.monotonic() < deadline:
                time.sleep(0.1)
            assert (steps / "7.0").read_text() == word + "\n"
            time.sleep(0.5)
            assert other.poll() is None and lead.poll() is None, "a hung step ends no rank"
        else:
            assert lead.wait(timeout=60) == rc, lead.stderr.read() if lead.stderr else ""
            assert (steps / "7.0").read_text() == word + "\n"
            assert other.wait(timeout=10) == rc
            assert other.stdout is not None and other.stdout.read() == ""
    finally:
        for proc in (lead, other):
            if proc.poll() is None:
                proc.kill()
            proc.wait()


def test_a_rank_past_0_that_rank_0_told_1_exits_1(root: Path, tmp_path: Path) -> None:
    steps = tmp_path / "steps"
    steps.mkdir()
    (steps / "7.0").write_text("1\n")
    other = _rank(root, 5, steps, tmp_path / "no-such-model.json")
    assert other.wait(timeout=10) == 1
