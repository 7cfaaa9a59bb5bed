"""Lab part 2 end to end: the simulator packages installed from the lab repository on real lab
nodes, and each injected fault seen in the tool an operator would use there."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest

from cluster_tool.parsers.ibnetdiscover import parse_ibnetdiscover
from cluster_tool.parsers.ibstat import parse_ibstat
from cluster_tool.parsers.kernel_log import parse_xids
from cluster_tool.parsers.nccl_tests import parse_nccl_tests
from cluster_tool.parsers.nvidia_smi import parse_nvidia_smi_q
from tests.lab.conftest import LabHandle

SIM_NODES = ("gpu001", "gpu002")
SIM_PACKAGES = (
    "nvidia-open-kernel-dkms",
    "nvidia-driver-cuda",
    "nvidia-persistenced",
    "datacenter-gpu-manager-4-core",
    "doca-ofed",
    "nccl-tests",
)
# The lab's GPU nodes run Ubuntu 22.04 (examples/lab.yml), whose CUDA repository names the driver's
# packages after its branch (roles/nvidia_driver/vars/Ubuntu_22.yml).
UBUNTU_NAMES = {
    "nvidia-open-kernel-dkms": "nvidia-headless-{branch}-open",
    "nvidia-driver-cuda": "nvidia-utils-{branch}",
    "nvidia-persistenced": "nvidia-compute-utils-{branch}",
}


def _packages_on(lab: LabHandle, node: str) -> list[str]:
    """SIM_PACKAGES under the names of the node's OS."""
    os_id = lab.ssh(node, ". /etc/os-release && echo $ID").stdout.strip()
    if os_id != "ubuntu":
        return list(SIM_PACKAGES)
    from cluster_lab.sim.packages import role_pins
    from tests.conftest import REPO

    branch = next(
        name.rsplit("-", 1)[1]
        for name in role_pins(REPO / "roles")
        if name.startswith("nvidia-fabricmanager-")
    )
    return [UBUNTU_NAMES.get(name, name).format(branch=branch) for name in SIM_PACKAGES]


def prepare(lab: LabHandle) -> None:
    """What part 2 needs from the lab: the simulator packages in the lab repository, the
    sysfs trees mounted at node boot (`lab up` writes them; a node booted without one is
    power-cycled), then the packages installed as the roles would."""
    from cluster_lab import lifecycle
    from cluster_lab import model as hw
    from cluster_lab.sim.packages import publish_to_lab_repo
    from cluster_lab.sim.sysfs import write_all_sysfs_trees

    config = lab.config
    publish_to_lab_repo(config)  # type: ignore[arg-type]
    data = hw.load(config.model_dir).model_dump(mode="json")  # type: ignore[attr-defined]
    write_all_sysfs_trees(data, config.nodes_dir)  # type: ignore[attr-defined]
    for node in SIM_NODES:
        if lab.ssh(node, "test -e /sys/class/infiniband/mlx5_0/node_desc").returncode != 0:
            lifecycle.power_off_node(config, node)  # type: ignore[arg-type]
            lifecycle.power_on_node(config, node)  # type: ignore[arg-type]
        done = lab.ssh(
            node,
            "apt-get -qq update && DEBIAN_FRONTEND=noninteractive apt-get -qq -y install "
            + " ".join(_packages_on(lab, node))
            + " >/dev/null",
            timeout=600,
        )
        assert done.returncode == 0, done.stderr


@pytest.fixture(scope="module")
def sim(lab: LabHandle) -> Iterator[LabHandle]:
    prepare(lab)
    yield lab
    from cluster_lab.live_faults import heal_faults

    heal_faults(lab.config)  # type: ignore[arg-type]


def _ssh_ok(lab: LabHandle, node: str, command: str, timeout: float = 120) -> str:
    done = lab.ssh(node, command, timeout=timeout)
    assert done.returncode == 0, f"{node}: {command}: {done.stderr}"
    return done.stdout


def _inject(lab: LabHandle, kind: str, *args: object, **options: object) -> str:
    from cluster_lab.live_faults import inject_fault

    record = inject_fault(lab.config, kind, *args, **options)  # type: ignore[arg-type]
    return str(record["id"])


def _heal(lab: LabHandle, fault_id: str) -> None:
    from cluster_lab.live_faults import heal_faults

    heal_faults(lab.config, fault_id)  # type: ignore[arg-type]


def test_nvidia_smi_on_the_node_shows_eight_h100_at_the_pinned_driver(sim: LabHandle) -> None:
    report = parse_nvidia_smi_q(_ssh_ok(sim, "gpu001", "nvidia-smi -q"))
    assert len(report.gpus) == 8
    assert report.driver_version == "570.172.08"
    assert {g.product_name for g in report.gpus} == {"NVIDIA H100 80GB HBM3"}
    version = _ssh_ok(sim, "gpu001", "cat /proc/driver/nvidia/version")
    assert "Open Kernel Module" in version
    assert _ssh_ok(sim, "gpu001", "test -d /sys/module/nvidia_peermem && echo yes") == "yes\n"
    # The device files Slurm's gres.conf names (File=/dev/nvidia[0-7]).
    devices = _ssh_ok(sim, "gpu001", "stat -c '%n %t:%T' /dev/nvidia0 /dev/nvidia7 /dev/nvidiactl")
    assert devices.split() == [
        "/dev/nvidia0",
        "c3:0",
        "/dev/nvidia7",
        "c3:7",
        "/dev/nvidiactl",
        "c3:ff",
    ]


def test_gpu_ecc_shows_a_volatile_uncorrectable_error_and_heals(sim: LabHandle) -> None:
    fault = _inject(sim, "gpu-ecc", "gpu001", 3)
    try:
        gpu = parse_nvidia_smi_q(_ssh_ok(sim, "gpu001", "nvidia-smi -q")).gpus[3]
        assert gpu.ecc_volatile is not None and gpu.ecc_volatile.uncorrectable == 1
    finally:
        _heal(sim, fault)
    gpu = parse_nvidia_smi_q(_ssh_ok(sim, "gpu001", "nvidia-smi -q")).gpus[3]
    assert gpu.ecc_volatile is not None and gpu.ecc_volatile.uncorrectable == 0


def test_gpu_xid_is_in_the_node_kernel_log(sim: LabHandle) -> None:
    fault = _inject(sim, "gpu-xid", "gpu002", 5, 79)
    try:
        events = parse_xids(_ssh_ok(sim, "gpu002", "dmesg"))
        assert [e.code for e in events] == [79]
    finally:
        _heal(sim, fault)
    assert parse_xids(_ssh_ok(sim, "gpu002", "dmesg")) == []


def _ports(lab: LabHandle, node: str) -> dict[str, tuple[str, float]]:
    cas = parse_ibstat(_ssh_ok(lab, node, "ibstat"))
    return {ca.name: (ca.ports[0].state, ca.ports[0].rate_gbps) for ca in cas}


def _uplinks(lab: LabHandle) -> dict[str, tuple[str, int]]:
    fabric = parse_ibnetdiscover(_ssh_ok(lab, "head", "ibnetdiscover", timeout=90))
    return {u.ca_description: (u.switch_description, u.switch_port) for u in fabric.ca_uplinks()}


def _wait(check: object, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while not check() and time.monotonic() < deadline:  # type: ignore[operator]
        time.sleep(1)


def test_link_down_shows_in_ibstat_and_ibnetdiscover_and_heals(sim: LabHandle) -> None:
    assert _ports(sim, "gpu002")["mlx5_3"] == ("Active", 200)
    fault = _inject(sim, "link-down", "gpu002", "mlx5_3")
    try:
        assert _ports(sim, "gpu002")["mlx5_3"][0] == "Down"
        assert "gpu002 mlx5_3" not in _uplinks(sim)
    finally:
        _heal(sim, fault)
    assert _ports(sim, "gpu002")["mlx5_3"] == ("Active", 200)
    _wait(lambda: "gpu002 mlx5_3" in _uplinks(sim))
    assert "gpu002 mlx5_3" in _uplinks(sim)


def test_cable_swap_puts_the_two_hcas_on_each_others_leaves(sim: LabHandle) -> None:
    before = _uplinks(sim)
    fault = _inject(sim, "cable-swap", "gpu001", "mlx5_0", "mlx5_3")
    try:
        _wait(lambda: _uplinks(sim).get("gpu001 mlx5_0") == before["gpu001 mlx5_3"])
        swapped = _uplinks(sim)
        assert swapped["gpu001 mlx5_0"] == before["gpu001 mlx5_3"]
        assert swapped["gpu001 mlx5_3"] == before["gpu001 mlx5_0"]
    finally:
        _heal(sim, fault)
    _wait(lambda: _uplinks(sim).get("gpu001 mlx5_0") == before["gpu001 mlx5_0"])
    assert _uplinks(sim)["gpu001 mlx5_0"] == before["gpu001 mlx5_0"]


def _busbw(lab: LabHandle) -> float:
    """A 2-node all_reduce_perf as 16 ranks would run it: each rank gets the environment
    srun --mpi=pmix gives it; rank 0 prints. (The Slurm role's own test runs it under srun.)"""
    env = (
        "PMIX_RANK=0 SLURM_PROCID=0 SLURM_NTASKS=16 SLURM_STEP_NODELIST=gpu[001-002] "
        "SLURM_STEP_TASKS_PER_NODE='8(x2)' SLURM_LOCALID=0"
    )
    out = _ssh_ok(lab, "gpu001", f"{env} /usr/bin/all_reduce_perf -b 64M -e 1G")
    parsed = parse_nccl_tests(out)
    assert parsed.complete and parsed.avg_busbw is not None, out
    return parsed.avg_busbw


def test_slow_node_lowers_two_node_busbw_and_heals(sim: LabHandle) -> None:
    healthy = _busbw(sim)
    fault = _inject(sim, "slow-node", "gpu002", 0.5)
    try:
        assert _busbw(sim) < healthy * 0.6
    finally:
        _heal(sim, fault)
    assert _busbw(sim) == healthy


def test_faults_are_listed_in_lab_status_json(sim: LabHandle) -> None:
    from cluster_lab import lifecycle

    fault = _inject(sim, "gpu-hot", "gpu001", 2, 95)
    try:
        listed = lifecycle.status(sim.config).to_json()["faults"]  # type: ignore[arg-type]
        assert [(f["id"], f["kind"], f["target"]) for f in listed] == [
            (fault, "gpu-hot", "gpu001 2 95")
        ]
        gpu = parse_nvidia_smi_q(_ssh_ok(sim, "gpu001", "nvidia-smi -q")).gpus[2]
        assert gpu.clock_event_reasons is not None
        assert gpu.clock_event_reasons.hw_thermal_slowdown is True
    finally:
        _heal(sim, fault)
    assert lifecycle.status(sim.config).to_json()["faults"] == []  # type: ignore[arg-type]
