"""The local_scratch role's claim on its devices, run by Ansible with blkid and mdadm stood in:
a device holding another filesystem, or a member of an array that is not this scratch's RAID 0,
stops the role with its name (`mdadm --create --run` writes over another array's member without
asking). The stand-ins answer as the real tools do: `blkid -o value -s TYPE` prints the type
and exits 2 on a blank device; `mdadm --examine --export` prints MD_LEVEL, MD_DEVICES, MD_NAME
and MD_UUID lines (mdadm's super1.c, export_examine_super1). One Ansible run holds every case
(one inventory host each)."""

from __future__ import annotations

import json
import stat
from pathlib import Path

import pytest
import yaml

from cluster_tool.ansible import run_playbook

CLAIM = Path(__file__).parent / "playbooks" / "scratch_claim.yml"
A, B = "/dev/nvme2n1", "/dev/nvme3n1"
# What a member of the RAID 0 `mdadm --create /dev/md/scratch` made on gpu001 reads as.
OURS = (
    "MD_LEVEL=raid0\nMD_DEVICES=2\nMD_NAME=gpu001:scratch\n"
    "MD_UUID=3aaa0122:29827cfa:5331ad66:ca767371\n"
)
# A member of the OS's mirror (DGX OS puts / on md0 over the two M.2 drives).
OS_MIRROR = (
    "MD_LEVEL=raid1\nMD_DEVICES=2\nMD_NAME=dgx:0\nMD_UUID=aa2e7c91:0b8d55a4:91c1e0f2:7d3b6a10\n"
)
# case: (devices, blkid's TYPE per device, mdadm's export per device)
CASES: dict[str, tuple[list[str], dict[str, str], dict[str, str]]] = {
    "blank": ([A, B], {}, {}),
    "ours": ([A, B], {A: "linux_raid_member", B: "linux_raid_member"}, {A: OURS, B: OURS}),
    "os_mirror": (
        [A, B],
        {A: "linux_raid_member", B: "linux_raid_member"},
        {A: OURS, B: OS_MIRROR},
    ),
    "ext4": ([A, B], {B: "ext4"}, {}),
    "half": ([A, B], {A: "linux_raid_member"}, {A: OURS}),
    "one_xfs": ([A], {A: "xfs"}, {}),
}


def _stand_in(path: Path, table: dict[str, str], blank_rc: int) -> Path:
    """Prints table["<CLAIM_CASE>:<its last argument>"] (exit 0), or nothing (exit blank_rc)."""
    cases = "".join(f"  '{key}') printf '%s' '{out}' ;;\n" for key, out in table.items())
    path.write_text(
        "#!/bin/sh\nfor last; do :; done\n"
        f'case "$CLAIM_CASE:$last" in\n{cases}  *) exit {blank_rc} ;;\nesac\n'
    )
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return path


@pytest.fixture(scope="module")
def claims(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[str, object]]:
    """case -> (its failure messages, joined; the array UUIDs it found, or None after a failure)."""
    tmp = tmp_path_factory.mktemp("claim")
    hosts = {
        case: {
            "ansible_connection": "local",
            "ansible_python_interpreter": "{{ ansible_playbook_python }}",
            "local_scratch_devices": devices,
        }
        for case, (devices, _, _) in CASES.items()
    }
    (tmp / "hosts.yml").write_text(yaml.safe_dump({"all": {"hosts": hosts}}))
    types = {f"{c}:{d}": t + "\n" for c, (_, ts, _) in CASES.items() for d, t in ts.items()}
    arrays = {f"{c}:{d}": out for c, (_, _, md) in CASES.items() for d, out in md.items()}
    result = run_playbook(
        CLAIM,
        tmp / "hosts.yml",
        extravars={
            "local_scratch_enabled": True,
            "__local_scratch_blkid_argv": [str(_stand_in(tmp / "blkid", types, 2))],
            "__local_scratch_mdadm_argv": [str(_stand_in(tmp / "mdadm", arrays, 1))],
            "claim_out": str(tmp),
        },
        private_data_dir=tmp / "pdd",
        fact_cache=tmp / "facts",
    )
    out: dict[str, tuple[str, object]] = {}
    for case in CASES:
        failed = "\n".join(e.message or "" for e in result.events if e.failed and e.host == case)
        found = tmp / f"{case}.json"
        out[case] = (failed, json.loads(found.read_text()) if found.exists() else None)
    return out


def test_blank_devices_are_claimed_for_a_new_array(claims: dict[str, tuple[str, object]]) -> None:
    assert claims["blank"] == ("", [])


def test_the_scratch_arrays_own_members_are_claimed_to_start_it_again(
    claims: dict[str, tuple[str, object]],
) -> None:
    assert claims["ours"] == ("", ["3aaa0122:29827cfa:5331ad66:ca767371"])


def test_a_member_of_the_os_mirror_is_refused_with_its_array(
    claims: dict[str, tuple[str, object]],
) -> None:
    message, found = claims["os_mirror"]
    assert "/dev/nvme3n1 holds linux_raid_member of array dgx:0 (raid1, 2 devices" in message
    assert "not made into scratch" in message and "nvme2n1 holds" not in message
    assert found is None


def test_a_device_with_a_filesystem_is_refused(claims: dict[str, tuple[str, object]]) -> None:
    message, found = claims["ext4"]
    assert "/dev/nvme3n1 holds ext4: not made into scratch" in message
    assert "nvme2n1 holds" not in message and found is None


def test_an_array_part_there_and_part_blank_is_not_made_again(
    claims: dict[str, tuple[str, object]],
) -> None:
    message, found = claims["half"]
    assert "/dev/nvme2n1 belong to 3aaa0122:29827cfa:5331ad66:ca767371" in message
    assert "/dev/nvme3n1 to none" in message and found is None


def test_one_device_keeps_its_own_filesystem(claims: dict[str, tuple[str, object]]) -> None:
    assert claims["one_xfs"] == ("", [])
