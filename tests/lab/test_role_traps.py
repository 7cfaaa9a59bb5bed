"""The roles' known traps on real hardware (issue 18), reproduced by the lab the way they would
fail and proven fixed on the session's one bring-up from bare nodes (`converged`).

Persistence mode: the lab's nvidia-persistenced package ships Ubuntu's unit, which starts the
daemon with --no-persistence-mode; only the nvidia_driver role's drop-in turns it on.

DOCA's driver: the lab's doca-ofed package leaves the inbox mlx5_core loaded until openibd
restarts or the node reboots (as DOCA-Host does); only the doca_ofed role's restart handler loads
DOCA's, and its check stops the bring-up if the loaded one is not DOCA's.

nvidia_peermem: the lab's driver package records which ib_core its DKMS build of nvidia-peermem
met (DOCA's when DOCA was installed first), and the simulated modprobe refuses a build against
the inbox one with EINVAL, as nvidia-peermem.c's init does without the peer-memory API."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from cluster_tool.ansible.runner import run_playbook
from cluster_tool.parsers.ibstat import parse_ibstat
from tests.conftest import REPO
from tests.lab.conftest import Converged

pytestmark = pytest.mark.converged

GPU_NODES = ("gpu001", "gpu002", "gpu003", "gpu004")


def test_persistence_mode_is_on_on_every_gpu_after_the_bringup(converged: Converged) -> None:
    lab = converged.lab
    for node in GPU_NODES:
        unit = lab.ssh(node, "cat /lib/systemd/system/nvidia-persistenced.service").stdout
        assert "--no-persistence-mode" in unit, "the lab ships the unit as Ubuntu does"
        query = lab.ssh(node, "nvidia-smi --query-gpu=persistence_mode --format=csv,noheader")
        assert query.returncode == 0, query.stderr
        assert set(query.stdout.split()) == {"Enabled"}, (node, query.stdout)
        full = lab.ssh(node, "nvidia-smi -q").stdout
        modes = re.findall(r"^\s*Persistence Mode\s*:\s*(\S+)", full, re.MULTILINE)
        assert modes == ["Enabled"] * 8, (node, modes)
    findings = json.loads((Path(converged.bringup["run_dir"]) / "findings.json").read_text())
    assert not [f for f in findings["findings"] if f["check"] == "gpu.persistence"]


def test_docas_driver_is_the_loaded_one_on_every_gpu_node_after_the_bringup(
    converged: Converged,
) -> None:
    lab = converged.lab
    for node in GPU_NODES:
        # The inbox modules carry no version in /sys/module; DOCA's do, the one modinfo names.
        loaded = lab.ssh(node, "cat /sys/module/mlx5_core/version /sys/module/ib_core/version")
        assert loaded.returncode == 0, (node, loaded.stderr)
        on_disk = lab.ssh(node, "modinfo -F version mlx5_core")
        doca = on_disk.stdout.strip()
        assert doca and loaded.stdout.split() == [doca, doca], (node, on_disk.stderr)


def test_peermem_mode_loads_nvidia_peermem_after_the_bringup(
    converged: Converged, tmp_path: Path
) -> None:
    """`gpudirect: peermem` on a converged node: the gpudirect_rdma role loads nvidia_peermem
    and its check finds it. It loads only because the bring-up installed DOCA before the driver
    (finding 4): built against the inbox ib_core, modprobe fails and the role stops."""
    lab = converged.lab
    node = "gpu003"
    unloaded = lab.ssh(node, "modprobe -r nvidia_peermem; test ! -e /sys/module/nvidia_peermem")
    assert unloaded.returncode == 0, unloaded.stderr
    try:
        result = run_playbook(
            REPO / "playbooks" / "phases" / "driver.yml",
            lab.inventory,
            limit=node,
            tags="gpudirect_rdma",
            extravars={"gpudirect_rdma_mode": "peermem"},
            private_data_dir=tmp_path / "ansible",
        )
        failures = [(e.task, e.message) for e in result.events if e.failed]
        assert result.succeeded, failures
        loaded = lab.ssh(node, "test -d /sys/module/nvidia_peermem && lsmod")
        assert loaded.returncode == 0, loaded.stderr
        assert re.search(r"^nvidia_peermem\s", loaded.stdout, re.MULTILINE), loaded.stdout
    finally:
        # As after the bring-up (dmabuf mode; the driver package loaded nvidia_peermem).
        lab.ssh(
            node,
            "rm -f /etc/modules-load.d/cluster-tool-nvidia-peermem.conf; modprobe nvidia_peermem",
        )


# The storage and in-band ports of a DGX H100's two dual-port ConnectX-7s (DGX BasePOD guide).
NON_COMPUTE = {"mlx5_1", "mlx5_2", "mlx5_7", "mlx5_8"}


def test_dgx_layout_nodes_come_up_with_their_storage_and_inband_ports(
    converged: Converged, tmp_path: Path
) -> None:
    """Issue 29's DOCA trap: every lab GPU node shows the twelve RDMA devices of a DGX H100, and
    the bring-up (the doca_ofed role's check included, which counted /sys/class/infiniband and
    failed such a node at f6ed0da) went through with no finding on a non-compute port. The role
    checks each compute HCA at its PCI address: one named otherwise there fails it, both names
    said."""
    lab = converged.lab
    for node in GPU_NODES:
        devices = lab.ssh(node, "ls /sys/class/infiniband").stdout.split()
        assert len(devices) == 12 and set(devices) >= NON_COMPUTE, (node, devices)
    cas = {ca.name: ca for ca in parse_ibstat(lab.ssh("gpu002", "ibstat").stdout)}
    assert (cas["mlx5_2"].ports[0].link_layer, cas["mlx5_2"].ports[0].state) == (
        "Ethernet",
        "Active",
    )
    assert (cas["mlx5_1"].ports[0].link_layer, cas["mlx5_1"].ports[0].state) == (
        "InfiniBand",
        "Down",
    )
    netdevs = lab.ssh("gpu002", "ibdev2netdev").stdout.splitlines()
    assert "mlx5_0 port 1 ==> ibp24s0 (Up)" in netdevs and len(netdevs) == 12
    findings = json.loads((Path(converged.bringup["run_dir"]) / "findings.json").read_text())
    named = [f for f in findings["findings"] if (f.get("component") or "") in NON_COMPUTE]
    assert named == []

    # gpu002's rail-1 HCA (0000:40:00.0) is mlx5_3; a profile calling it mlx5_1 is a mismatch.
    wrong = [{"device": "mlx5_1", "pci": "0000:40:00.0", "rail": 1}]
    result = run_playbook(
        REPO / "playbooks" / "phases" / "fabric.yml",
        lab.inventory,
        limit="gpu002",
        tags="doca_ofed-start",
        extravars={"doca_ofed_compute_hcas": wrong},
        private_data_dir=tmp_path / "ansible",
    )
    assert not result.succeeded
    failed = [e.message for e in result.events if e.failed]
    assert any(
        "0000:40:00.0 is mlx5_3 on this node, mlx5_1 (rail 1) in the profile" in m for m in failed
    ), failed


def test_slurm_runs_its_cgroup_plugins_and_a_job_step_lives_in_its_jobs_cgroup(
    converged: Converged,
) -> None:
    """The lab runs the slurm role's production plugins (no lab override): slurmd starts under
    proctrack/cgroup + task/cgroup on the node's own cgroup hierarchies, a step is tracked in
    the job's cgroup, and ConstrainDevices leaves a one-GPU step only its own /dev/nvidiaN."""
    lab = converged.lab
    config = lab.ssh("head", "scontrol show config")
    assert config.returncode == 0, config.stderr
    settings = dict(
        (key.strip(), value.strip())
        for key, _, value in (line.partition("=") for line in config.stdout.splitlines())
    )
    assert settings["ProctrackType"] == "proctrack/cgroup"
    assert "task/cgroup" in settings["TaskPlugin"].split(","), settings["TaskPlugin"]
    # One cgroup.conf for hybrid and unified hosts: slurmd picks the plugin from the mounts.
    cgroup_conf = lab.ssh("gpu002", "cat /etc/slurm/cgroup.conf").stdout.splitlines()
    assert {"CgroupPlugin=autodetect", "ConstrainDevices=yes"} <= set(cgroup_conf), cgroup_conf
    step = lab.ssh(
        "head", "srun -N1 -w gpu002 -t 1 sh -c 'echo job=$SLURM_JOB_ID; cat /proc/self/cgroup'"
    )
    assert step.returncode == 0, step.stderr
    job = re.search(r"^job=(\d+)$", step.stdout, re.MULTILINE)
    assert job, step.stdout
    # cgroup v1: /slurm/uid_0/job_N/step_0 in the freezer (proctrack) and the task plugin's
    # controllers; cgroup v2: .../job_N/step_0/user/task_0 in the unified line.
    in_job = re.findall(rf"/job_{job.group(1)}/step_0(?:/|$)", step.stdout, re.MULTILINE)
    assert in_job, step.stdout
    # Opening a simulated /dev/nvidiaN the device cgroup allows fails with ENXIO (no driver
    # behind it); one the cgroup denies fails with EPERM before the driver is asked.
    probe = (
        "python3 -c 'import errno, glob, os\n"
        'for d in sorted(glob.glob("/dev/nvidia[0-9]*")):\n'
        '    try: os.close(os.open(d, os.O_RDONLY)); print(d, "open")\n'
        "    except OSError as e: print(d, errno.errorcode[e.errno])'"
    )
    devices = lab.ssh("head", f"srun -N1 -w gpu002 -t 1 --gres=gpu:1 {probe}")
    assert devices.returncode == 0, devices.stderr
    verdicts = dict(line.split() for line in devices.stdout.splitlines())
    assert len(verdicts) == 8, devices.stdout
    assert sorted(verdicts.values()) == ["ENXIO"] + ["EPERM"] * 7, verdicts


# --- issue 29: the path most H100 sites take (Ubuntu 22.04 GPU nodes, SchedMD's Slurm) ------------

SLURM_HOSTS = ("head", *GPU_NODES)


def test_the_gpu_nodes_run_ubuntu_2204_and_every_slurm_host_schedmds_packages(
    converged: Converged,
) -> None:
    """examples/lab.yml: GPU nodes `os: ubuntu2204`, `slurm.packages: schedmd`. The roles took
    their Ubuntu branch there (Ubuntu 22.04's munge, 0.5.14-6 in jammy) and installed SchedMD's
    packages everywhere, not the distribution's."""
    lab = converged.lab
    for node in GPU_NODES:
        release = lab.ssh(node, ". /etc/os-release && echo $ID $VERSION_ID $VERSION_CODENAME")
        assert release.stdout.split() == ["ubuntu", "22.04", "jammy"], (node, release.stdout)
        munge = lab.ssh(node, "dpkg-query -W -f '${Version}' munge")
        assert munge.stdout == "0.5.14-6", (node, munge.stdout)
    wanted = {"head": "slurm-smd-slurmctld"} | {node: "slurm-smd-slurmd" for node in GPU_NODES}
    for host, package in wanted.items():
        installed = lab.ssh(
            host,
            "dpkg-query -W -f '${db:Status-Abbrev}${Package} ${Version}\\n' "
            f"{package} slurmd slurmctld 2>/dev/null",
        )
        lines = [line.split() for line in installed.stdout.splitlines()]
        # Held (h) and installed (i); the distribution's daemons are not there.
        assert [[package, "22.05.8-1"]] == [
            line[1:] for line in lines if line[0].startswith("hi")
        ], (host, installed.stdout)


def test_the_slurm_user_has_the_specs_ids_everywhere_and_runs_slurmctld(
    converged: Converged,
) -> None:
    """SchedMD's packages create no user, while their slurmctld and slurmdbd units run
    User=slurm: the role creates it with the spec's ids (slurm.uid/gid, 64030) before any
    package, on every Slurm host alike."""
    lab = converged.lab
    for host in SLURM_HOSTS:
        ids = lab.ssh(host, "id -u slurm; id -g slurm")
        assert ids.stdout.split() == ["64030", "64030"], (host, ids.stdout, ids.stderr)
    daemons = lab.ssh("head", "ps -o user= -C slurmctld,slurmdbd; stat -c %U /run/slurmctld")
    assert daemons.stdout.split() == ["slurm", "slurm", "slurm"], daemons.stdout


def test_the_running_kernels_headers_are_installed_and_the_hwe_kernel_is_held(
    converged: Converged,
) -> None:
    """DKMS builds the driver's open modules and DOCA's against the running kernel's headers;
    the lab's Ubuntu nodes are an HWE install (linux-image-generic-hwe-22.04), whose kernel line
    the hold on linux-generic alone does not stop."""
    lab = converged.lab
    for host in SLURM_HOSTS:
        headers = lab.ssh(host, "dpkg-query -W -f '${db:Status-Abbrev}' linux-headers-$(uname -r)")
        assert headers.stdout.strip() == "hi", (host, headers.stdout, headers.stderr)
    for node in GPU_NODES:
        held = lab.ssh(node, "apt-mark showhold").stdout.split()
        assert "linux-image-generic-hwe-22.04" in held, (node, held)
