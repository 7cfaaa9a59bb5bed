"""The spec's storage and training sections: what a shared filesystem and a scratch need, that a
training job's folders lie on the filesystem each is for, and what reaches the two roles."""

from __future__ import annotations

from pathlib import Path

import pytest

from cluster_tool.errors import SpecError
from cluster_tool.render.engine import load_rendered_yaml, render_files
from cluster_tool.spec import load_spec_text

LAB = (Path(__file__).resolve().parents[3] / "examples" / "lab.yml").read_text(encoding="utf-8")


def with_storage(body: str) -> str:
    return LAB + body


def problems_of(text: str) -> list[str]:
    with pytest.raises(SpecError) as info:
        load_spec_text(text, "c.yml")
    return [str(p) for p in info.value.problems]


NFS = "storage:\n  shared: {kind: nfs, server: head, mount: /shared}\n"
TMPFS = "  scratch: {filesystem: tmpfs, size: 2G, mount: /scratch}\n"


def test_nfs_from_a_host_of_the_spec_and_a_tmpfs_scratch_reach_the_roles() -> None:
    gv = load_rendered_yaml(
        render_files(load_spec_text(with_storage(NFS + TMPFS), "c.yml"))["group_vars/all.yml"]
    )
    assert (gv["shared_fs_kind"], gv["shared_fs_server"], gv["shared_fs_mount"]) == (
        "nfs",
        "head",
        "/shared",
    )
    assert gv["shared_fs_folders"] == [
        {"path": "checkpoints", "mode": "1777"},
        {"path": "cluster-tool/jobs", "mode": "1777"},
    ]
    assert (gv["local_scratch_filesystem"], gv["local_scratch_size"]) == ("tmpfs", "2G")


def test_without_a_storage_section_both_roles_stay_off() -> None:
    gv = load_rendered_yaml(render_files(load_spec_text(LAB, "c.yml"))["group_vars/all.yml"])
    assert "shared_fs_enabled" not in gv and "local_scratch_enabled" not in gv


@pytest.mark.parametrize(
    ("body", "says"),
    [
        ("storage:\n  shared: {kind: nfs, mount: /shared}\n", "needs `server`"),
        ("storage:\n  shared: {kind: lustre, mount: /lustre}\n", "needs `source`"),
        ("storage:\n  scratch: {filesystem: tmpfs}\n", "needs `size`"),
        ("storage:\n  scratch: {filesystem: xfs}\n", "needs `devices`"),
        ("storage:\n  scratch: {devices: [/dev/../etc/passwd]}\n", "`..`"),
        ("storage:\n  shared: {kind: nfs, server: head, options: ['rw;reboot']}\n", "mount option"),
        (NFS + "training: {checkpoint_dir: /home/ckpt}\n", "not on the shared filesystem"),
        (NFS + TMPFS + "training: {local_checkpoint_dir: /tmp/ckpt}\n", "not on the local scratch"),
        (NFS + "  scratch: {filesystem: tmpfs, size: 1G, mount: /shared/scratch}\n", "overlap"),
        ("training: {container_image: 'nvcr.io#x;rm -rf /'}\n", "container image"),
    ],
)
def test_a_storage_or_training_mistake_is_a_located_spec_error(body: str, says: str) -> None:
    problems = problems_of(with_storage(body))
    assert any(says in p for p in problems), problems
