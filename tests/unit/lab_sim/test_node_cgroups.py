"""Where a lab node's cgroups go on the two kinds of host: a hybrid host (cgroup v1
controllers, as this project's CI host) and a pure cgroup v2 host (modern systemd distributions),
where a node needs a delegated subtree with its controllers enabled for Slurm's cgroup/v2."""

from __future__ import annotations

from pathlib import Path

from cluster_lab.nodes import delegate_cgroup2, host_cgroup_hierarchies, memory_usage_bytes

# /proc/self/mountinfo and /proc/self/cgroup of this project's build host, read by hand
# (format: proc(5), "/proc/pid/mountinfo"; cgroups(7), "/proc/pid/cgroup").
HYBRID_MOUNTINFO = """\
31 23 0:28 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755
32 31 0:29 / /sys/fs/cgroup/cpu rw,relatime - cgroup cgroup rw,cpu
35 31 0:32 / /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory
36 31 0:33 / /sys/fs/cgroup/devices rw,relatime - cgroup cgroup rw,devices
37 31 0:34 / /sys/fs/cgroup/freezer rw,relatime - cgroup cgroup rw,freezer
40 31 0:37 / /sys/fs/cgroup/systemd rw,relatime - cgroup cgroup rw,name=systemd
41 31 0:38 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw
"""
HYBRID_SELF = """\
9:name=systemd:/
5:devices:/
4:memory:/process_api/f71c
1:cpu:/
0::/
"""
# A systemd host booted with the unified hierarchy only (systemd's default since v247).
UNIFIED_MOUNTINFO = """\
22 27 0:20 / /sys rw,nosuid,nodev,noexec,relatime shared:7 - sysfs sysfs rw
25 22 0:22 / /sys/fs/cgroup rw,nosuid,nodev,noexec,relatime shared:8 - cgroup2 cgroup2 \
rw,nsdelegate,memory_recursiveprot
"""
UNIFIED_SELF = "0::/user.slice/user-0.slice/session-3.scope\n"


def test_a_hybrid_host_mounts_each_v1_controller_and_the_empty_unified_tree_in_the_node() -> None:
    found = host_cgroup_hierarchies(
        "cluster-tool-lab-cta", mountinfo=HYBRID_MOUNTINFO, self_cgroup=HYBRID_SELF
    )
    by_dir = {h.node_dir_name: h for h in found}
    assert sorted(by_dir) == ["cpu", "devices", "freezer", "memory", "systemd", "unified"]
    assert (
        by_dir["memory"].lab_path == "/sys/fs/cgroup/memory/process_api/f71c/cluster-tool-lab-cta"
    )
    assert by_dir["systemd"].options == "none,name=systemd"
    assert not any(h.unified for h in found)


def test_a_pure_v2_host_gives_the_lab_a_root_level_cgroup_mounted_as_the_nodes_own_root() -> None:
    (unified,) = host_cgroup_hierarchies(
        "cluster-tool-lab-cta", mountinfo=UNIFIED_MOUNTINFO, self_cgroup=UNIFIED_SELF
    )
    assert unified.unified
    assert unified.node_dir_name == "."
    # Not below the caller's session scope: that cgroup holds processes and so cannot enable
    # controllers for children.
    assert unified.lab_path == "/sys/fs/cgroup/cluster-tool-lab-cta"


def _fake_cgroup(path: Path, controllers: str, enabled: str) -> None:
    path.mkdir(parents=True, exist_ok=True)
    (path / "cgroup.controllers").write_text(controllers + "\n")
    (path / "cgroup.subtree_control").write_text(enabled + "\n")


def test_a_delegated_node_subtree_enables_slurms_controllers_at_every_level(tmp_path: Path) -> None:
    root = tmp_path / "sys-fs-cgroup"
    _fake_cgroup(root, "cpuset cpu io memory hugetlb pids rdma misc", "cpu memory pids")
    lab = root / "cluster-tool-lab-cta"
    # What the kernel shows in a new child: the parent's enabled set, nothing enabled yet.
    _fake_cgroup(lab, "cpuset cpu io memory pids", "")
    _fake_cgroup(lab / "gpu001", "cpuset cpu io memory pids", "")
    node = delegate_cgroup2(lab, "gpu001")
    assert node == lab / "gpu001"
    # The kernel takes "+a +b" writes; a plain file keeps the last one written.
    assert (root / "cgroup.subtree_control").read_text() == "+cpuset +io"
    assert (lab / "cgroup.subtree_control").read_text() == "+cpuset +cpu +io +memory +pids"
    assert (node / "cgroup.subtree_control").read_text() == "+cpuset +cpu +io +memory +pids"
    assert (node / "init").is_dir()


def test_a_v2_nodes_memory_is_read_from_memory_current(tmp_path: Path) -> None:
    (unified,) = host_cgroup_hierarchies(
        "lab", mountinfo=UNIFIED_MOUNTINFO, self_cgroup=UNIFIED_SELF
    )
    node = tmp_path / "lab" / "gpu001"
    node.mkdir(parents=True)
    (node / "memory.current").write_text("123456\n")
    moved = type(unified)(
        unified.mountpoint, unified.fstype, unified.options, str(tmp_path / "lab")
    )
    assert memory_usage_bytes([moved], "gpu001") == 123456
