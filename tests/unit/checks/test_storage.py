"""The storage section end to end on the node's side: the probe's output read (a real capture),
and node-check naming a missing or wrong mount and a full scratch, from the node file."""

from __future__ import annotations

from pathlib import Path

import pytest

from cluster_tool.checks.node import check_node, expectations_for, read_node_file
from cluster_tool.errors import ParseError
from cluster_tool.fileio import atomic_write
from cluster_tool.parsers.mounts import DF_MARKER, parse_storage
from cluster_tool.probes import ProbeOutput
from cluster_tool.spec import load_spec

REPO = Path(__file__).resolve().parents[3]
CAPTURE = REPO / "tests" / "fixtures" / "storage" / "build-host-mounts-df.txt"


def _capture() -> str:
    return CAPTURE.read_text(encoding="utf-8").split("\n", 1)[1]


def test_the_probe_output_of_a_real_host_is_read() -> None:
    reading = parse_storage(_capture())
    root = reading.mounted_at("/")
    assert root is not None and (root.source, root.fstype) == ("/dev/vda", "ext4")
    row = reading.space_at("/")
    # Read by hand from the capture's df line: 264212084 KiB, 29629144 used, 76761768 available,
    # Capacity 28 % (df rounds used / (used + available) up).
    assert row is not None
    assert (row.size_kib, row.used_kib, row.available_kib) == (264212084, 29629144, 76761768)
    assert round(100 - row.free_pct) == 28


def test_an_octal_escaped_path_and_the_last_of_two_mounts_win() -> None:
    text = (
        "/dev/sda1 /mnt/my\\040disk ext4 rw 0 0\n"
        "/dev/md127 /scratch xfs rw,noatime 0 0\n"
        "tmpfs /scratch tmpfs rw 0 0\n"
        f"{DF_MARKER}\n"
        "Filesystem 1024-blocks Used Available Capacity Mounted on\n"
    )
    reading = parse_storage(text)
    assert reading.mounted_at("/mnt/my disk") is not None
    scratch = reading.mounted_at("/scratch")
    assert scratch is not None and scratch.fstype == "tmpfs"


def test_a_line_that_is_not_a_mount_names_its_line() -> None:
    with pytest.raises(ParseError, match=r":2: .*six|:2: expected SOURCE"):
        parse_storage(f"proc /proc proc rw 0 0\nnot a mount\n{DF_MARKER}\n")
    with pytest.raises(ParseError, match="did not run"):
        parse_storage("proc /proc proc rw 0 0\n")


def _outputs(mounts: str, df: str) -> dict[str, ProbeOutput]:
    return {"storage": ProbeOutput(0, f"{mounts}{DF_MARKER}\n{df}")}


DF_HEADER = "Filesystem     1024-blocks      Used Available Capacity Mounted on\n"
NFS = (
    "head01:/srv/shared /shared nfs4 rw,relatime,vers=4.2,rsize=1048576,wsize=1048576,namlen=255,"
    "hard,proto=tcp,timeo=600,retrans=2,sec=sys,clientaddr=10.10.1.1,local_lock=none,"
    "addr=10.10.0.10 0 0\n"
)
SCRATCH = "/dev/md127 /scratch xfs rw,noatime,attr2,inode64,logbufs=8,noquota 0 0\n"


def _storage_findings(tmp_path: Path, mounts: str, df: str) -> list:
    """The findings node-check makes from the node file the roles would install for gpu001."""
    cluster = load_spec(REPO / "examples" / "h100-1su.yml")
    node_file = tmp_path / "node.json"
    import json

    atomic_write(node_file, json.dumps(expectations_for(cluster, "gpu001").to_node_file()))
    expect = read_node_file(node_file)
    return [f for f in check_node(expect, _outputs(mounts, df)) if f.check.startswith("storage.")]


def test_both_mounts_present_with_room_is_clean(tmp_path: Path) -> None:
    df = DF_HEADER + "/dev/md127  30000000000 3000000000 27000000000 10% /scratch\n"
    assert _storage_findings(tmp_path, NFS + SCRATCH, df) == []


def test_a_missing_shared_mount_is_named_with_what_was_expected(tmp_path: Path) -> None:
    df = DF_HEADER + "/dev/md127  30000000000 3000000000 27000000000 10% /scratch\n"
    found = _storage_findings(tmp_path, SCRATCH, df)
    assert [(f.check, f.severity, f.component, f.observed) for f in found] == [
        ("storage.mount", "error", "/shared", "not mounted")
    ]
    assert "head01:/srv/shared" in found[0].expected


def test_another_filesystem_at_the_scratch_names_both(tmp_path: Path) -> None:
    wrong = "/dev/nvme2n1 /scratch ext4 rw,relatime 0 0\n"
    df = DF_HEADER + "/dev/nvme2n1  3000000000 300000000 2700000000 10% /scratch\n"
    (found,) = _storage_findings(tmp_path, NFS + wrong, df)
    assert found.check == "storage.mount"
    assert "xfs" in found.expected and "ext4 from /dev/nvme2n1" in found.observed


def test_the_shared_filesystem_from_another_server_is_a_mismatch(tmp_path: Path) -> None:
    other = NFS.replace("head01:/srv/shared", "10.9.9.9:/export")
    df = DF_HEADER + "/dev/md127  30000000000 3000000000 27000000000 10% /scratch\n"
    (found,) = _storage_findings(tmp_path, other + SCRATCH, df)
    assert "10.9.9.9:/export" in found.observed and "head01:/srv/shared" in found.expected


@pytest.mark.parametrize(
    ("used", "available", "severity"),
    [(95, 5, "error"), (85, 15, "warning"), (79, 21, None)],
)
def test_a_full_scratch_against_the_spec_thresholds(
    tmp_path: Path, used: int, available: int, severity: str | None
) -> None:
    scale = 10**8
    df = (
        DF_HEADER
        + f"/dev/md127 {100 * scale} {used * scale} {available * scale} {used}% /scratch\n"
    )
    found = _storage_findings(tmp_path, NFS + SCRATCH, df)
    assert [f.severity for f in found if f.check == "storage.scratch-full"] == (
        [severity] if severity else []
    )


def test_a_node_file_without_storage_expects_no_mount(tmp_path: Path) -> None:
    cluster = load_spec(REPO / "examples" / "lab.yml")
    expect = expectations_for(cluster, "gpu001")
    found = check_node(expect, _outputs("", DF_HEADER))
    assert [f for f in found if f.check.startswith("storage.")] == []
