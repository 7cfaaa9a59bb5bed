"""The lab's SchedMD Slurm packages (issue 29): laid out as SchedMD's debian/ packaging lays out a
build of the release tarball (SchedMD/slurm debian/control and debian/rules; the units of
etc/slurmctld.service.in since 23.11), made from Debian's packages of the release.

Built here from small stand-ins of Debian's .debs (the files and fields that matter), so the test
needs no package cache. The lab's init script, which runs a unit as systemd would, is run for
real in a mount namespace of its own."""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from pathlib import Path

import pytest

from cluster_lab.schedmd import build_schedmd_packages, release_of
from cluster_lab.sim.packages import init_script

pytestmark = pytest.mark.skipif(shutil.which("dpkg-deb") is None, reason="needs dpkg-deb")

DEBIAN = "22.05.8-4+deb12u3"
# A few files of each Debian package, where Debian puts them.
PAYLOAD = {
    "slurm-wlm-basic-plugins": [
        "usr/lib/x86_64-linux-gnu/slurm-wlm/select_cons_tres.so",
        "usr/lib/x86_64-linux-gnu/slurm-wlm/libslurmfull.so",
        "etc/slurm/plugstack.conf",
    ],
    "slurm-wlm-mysql-plugin": ["usr/lib/x86_64-linux-gnu/slurm-wlm/accounting_storage_mysql.so"],
    "libslurm38": ["usr/lib/x86_64-linux-gnu/libslurm.so.38.0.0"],
    "libslurm-dev": [
        "usr/include/slurm/spank.h",
        "usr/include/slurm/slurm_version.h",
        "usr/lib/x86_64-linux-gnu/libslurm.a",
    ],
    "slurm-client": ["usr/bin/srun", "usr/bin/sinfo"],
    "slurmd": ["usr/sbin/slurmd-wlm", "usr/sbin/slurmstepd-wlm"],
    "slurmctld": ["usr/sbin/slurmctld-wlm"],
    "slurmdbd": ["usr/sbin/slurmdbd"],
}
DEPENDS = {
    "slurm-wlm-basic-plugins": "libc6 (>= 2.34), libmunge2 (>= 0.5.8), adduser",
    "slurm-wlm-mysql-plugin": f"libmariadb3 (>= 3.0.0), slurm-wlm-basic-plugins (= {DEBIAN})",
    "libslurm38": "libc6 (>= 2.34)",
    "libslurm-dev": f"libslurm38 (= {DEBIAN})",
    "slurm-client": f"liblz4-1, slurm-wlm-basic-plugins (= {DEBIAN}), munge, ucf",
    "slurmd": f"libhwloc15 (>= 2.9.0), slurm-wlm-basic-plugins (= {DEBIAN}), ucf, munge",
    "slurmctld": f"slurm-client (= {DEBIAN}), slurm-wlm-basic-plugins (= {DEBIAN}), munge",
    "slurmdbd": f"slurm-wlm-mysql-plugin (= {DEBIAN}), munge, ucf",
}


def _debian_debs(folder: Path, work: Path) -> None:
    folder.mkdir()
    for name, files in PAYLOAD.items():
        root = work / name
        (root / "DEBIAN").mkdir(parents=True)
        (root / "DEBIAN" / "control").write_text(
            f"Package: {name}\nVersion: {DEBIAN}\nArchitecture: amd64\nMaintainer: t <t@t>\n"
            f"Depends: {DEPENDS[name]}\nDescription: stand-in\n"
        )
        # Debian's packages create the slurm user in a maintainer script.
        (root / "DEBIAN" / "preinst").write_text("#!/bin/sh\nadduser --system slurm\n")
        (root / "DEBIAN" / "preinst").chmod(0o755)
        for rel in files:
            path = root / rel
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(f"{rel}\n")
        if name == "libslurm38":
            (root / "usr/lib/x86_64-linux-gnu/libslurm.so.38").symlink_to("libslurm.so.38.0.0")
        if name == "libslurm-dev":
            (root / "usr/lib/x86_64-linux-gnu/libslurm.so").symlink_to("libslurm.so.38")
        subprocess.run(
            ["dpkg-deb", "--root-owner-group", "--build", str(root), str(folder)],
            check=True,
            capture_output=True,
        )


def _contents(deb: Path) -> set[str]:
    listing = subprocess.run(["dpkg-deb", "-c", str(deb)], capture_output=True, text=True)
    return {line.split()[5].removeprefix("./") for line in listing.stdout.splitlines()}


def _field(deb: Path, name: str) -> str:
    return subprocess.run(
        ["dpkg-deb", "-f", str(deb), name], capture_output=True, text=True, check=True
    ).stdout.strip()


def _file(deb: Path, path: str, tmp: Path) -> str:
    out = tmp / deb.name
    subprocess.run(["dpkg-deb", "-x", str(deb), str(out)], check=True)
    return (out / path).read_text()


@pytest.fixture(scope="module")
def smd(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    tmp = tmp_path_factory.mktemp("smd")
    _debian_debs(tmp / "debian", tmp / "work")
    built = build_schedmd_packages(tmp / "debian", tmp / "out")
    return {_field(deb, "Package"): deb for deb in built}


def test_the_packages_are_schedmds_split_at_the_release_with_a_first_build_number(
    smd: dict[str, Path],
) -> None:
    assert sorted(smd) == [
        "slurm-smd",
        "slurm-smd-client",
        "slurm-smd-dev",
        "slurm-smd-slurmctld",
        "slurm-smd-slurmd",
        "slurm-smd-slurmdbd",
    ]
    assert {_field(deb, "Version") for deb in smd.values()} == {"22.05.8-1"}
    assert release_of("1:24.05.5-2ubuntu1") == "24.05.5-1"
    lib = "usr/lib/x86_64-linux-gnu"
    assert {
        f"{lib}/slurm-wlm/select_cons_tres.so",
        f"{lib}/slurm-wlm/accounting_storage_mysql.so",
        f"{lib}/libslurm.so.38",
        f"{lib}/libslurm.so",
    } <= _contents(smd["slurm-smd"])
    assert {"usr/include/slurm/spank.h", f"{lib}/libslurm.a"} <= _contents(smd["slurm-smd-dev"])
    # The daemons under their own names (Debian's come through update-alternatives).
    assert {"usr/sbin/slurmd", "usr/sbin/slurmstepd"} <= _contents(smd["slurm-smd-slurmd"])
    assert "usr/sbin/slurmctld" in _contents(smd["slurm-smd-slurmctld"])
    assert {"usr/bin/srun", "usr/bin/sinfo"} <= _contents(smd["slurm-smd-client"])


def test_no_maintainer_scripts_so_no_slurm_user_and_the_distributions_packages_conflict(
    smd: dict[str, Path], tmp_path: Path
) -> None:
    for deb in smd.values():
        control = subprocess.run(
            ["dpkg-deb", "-I", str(deb)], capture_output=True, text=True
        ).stdout
        for script in ("preinst", "postinst", "prerm", "postrm"):
            assert f" {script} " not in control, (deb.name, script)
    assert _field(smd["slurm-smd-dev"], "Conflicts") == "libslurm-dev"
    assert "slurm-wlm-basic-plugins" in _field(smd["slurm-smd"], "Conflicts")
    assert _field(smd["slurm-smd-slurmd"], "Depends").startswith("slurm-smd (= 22.05.8-1), ")
    # The libraries' own needs are kept; Debian's Slurm packages and adduser are not.
    depends = _field(smd["slurm-smd"], "Depends")
    assert "libmunge2 (>= 0.5.8)" in depends and "libmariadb3 (>= 3.0.0)" in depends
    assert "adduser" not in depends and "slurm-wlm" not in depends


def test_the_controller_and_dbd_units_run_as_slurm_and_slurmd_as_root(
    smd: dict[str, Path], tmp_path: Path
) -> None:
    ctld = _file(smd["slurm-smd-slurmctld"], "lib/systemd/system/slurmctld.service", tmp_path)
    assert {"User=slurm", "Group=slurm", "RuntimeDirectory=slurmctld"} <= set(ctld.splitlines())
    assert "ExecStart=/usr/sbin/slurmctld -D -s $SLURMCTLD_OPTIONS" in ctld.splitlines()
    dbd = _file(smd["slurm-smd-slurmdbd"], "lib/systemd/system/slurmdbd.service", tmp_path)
    assert "User=slurm" in dbd.splitlines()
    slurmd = _file(smd["slurm-smd-slurmd"], "lib/systemd/system/slurmd.service", tmp_path)
    assert "RuntimeDirectory=slurm" in slurmd.splitlines()
    assert not [line for line in slurmd.splitlines() if line.startswith("User=")]


def test_a_rebuild_gives_the_same_bytes(smd: dict[str, Path], tmp_path: Path) -> None:
    debian = smd["slurm-smd"].parent.parent / "debian"
    again = build_schedmd_packages(debian, tmp_path / "again")
    assert {p.name: p.read_bytes() for p in again} == {p.name: p.read_bytes() for p in smd.values()}


needs_root = pytest.mark.skipif(
    os.geteuid() != 0 or shutil.which("unshare") is None, reason="needs root and unshare"
)

UNIT = """\
[Service]
User={user}
Group={group}
RuntimeDirectory=labtest
EnvironmentFile=-/etc/default/labtest
EnvironmentFile=-/etc/default/missing
ExecStart=/bin/sh -c ${{SCRIPT}} $ARGS
"""


def _run_init(
    tmp_path: Path, user: str, group: str, actions: str
) -> subprocess.CompletedProcess[str]:
    """The lab's init script of a unit `labtest`, in a mount namespace whose /lib/systemd/system,
    /etc/default, /etc/init.d and /run are its own."""
    units, default, initd, run = (tmp_path / d for d in ("units", "default", "initd", "run"))
    for folder in (units, default, initd, run):
        folder.mkdir()
    (units / "labtest.service").write_text(UNIT.format(user=user, group=group))
    # As systemd does: ${SCRIPT} stays one word, $ARGS splits into two (sh's $0 and $1).
    (default / "labtest").write_text(
        'SCRIPT="echo $1 $(id -un) >/run/labtest/who; sleep 30"\nARGS="zero one"\n'
    )
    (initd / "labtest").write_text(init_script("labtest", "/bin/false"))
    (initd / "labtest").chmod(0o755)
    script = f"""set -e
mount --make-rprivate /
mount --bind {units} /lib/systemd/system
mount --bind {default} /etc/default
mount --bind {run} /run
{actions}
"""
    return subprocess.run(
        [
            "unshare",
            "--mount",
            "--fork",
            "sh",
            "-c",
            script.replace("INIT", str(initd / "labtest")),
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )


@needs_root
def test_the_init_script_runs_the_unit_as_its_user_in_its_runtime_directory(
    tmp_path: Path,
) -> None:
    done = _run_init(
        tmp_path,
        "nobody",
        "nogroup",
        "INIT start\n"
        "for i in $(seq 50); do [ -s /run/labtest/who ] && break; sleep 0.1; done\n"
        "cat /run/labtest/who; stat -c %U /run/labtest\n"
        "INIT stop\n"
        "test -e /run/labtest && echo left || echo removed",
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["one", "nobody", "nobody", "removed"]


@needs_root
def test_a_unit_whose_user_does_not_exist_does_not_start(tmp_path: Path) -> None:
    started = time.monotonic()
    done = _run_init(tmp_path, "slurm-lab-nobody", "nogroup", "INIT start")
    assert done.returncode != 0
    assert "labtest: User=slurm-lab-nobody: no such user (systemd: status=217/USER)" in (
        done.stderr
    )
    assert time.monotonic() - started < 30
