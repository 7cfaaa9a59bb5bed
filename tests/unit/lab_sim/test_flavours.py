"""The lab's Ubuntu 22.04 nodes (issue 29): what makes a Debian node Ubuntu to the roles, and the
archive that serves Ubuntu's package names and versions.

The versions are jammy's (packages.ubuntu.com/jammy): the roles' Ubuntu 22.04 branch must name
versions that exist there, and a re-labelled package keeps its exact dependencies on its
re-labelled siblings (munge on libmunge2)."""

from __future__ import annotations

import fnmatch
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from cluster_lab.flavours import UBUNTU_2204, _relabel, flavour_of, node_files
from cluster_lab.host import LabError
from tests.conftest import REPO

ROLES = REPO / "roles"


def _pins(role: str, name: str) -> list[str]:
    data = yaml.safe_load((ROLES / role / "vars" / "Ubuntu_22.yml").read_text())
    return [str(p) for p in data[name]]


def test_the_roles_ubuntu_2204_pins_are_versions_jammy_ships() -> None:
    versions = UBUNTU_2204.relabel
    slurm = yaml.safe_load((ROLES / "slurm/vars/Ubuntu_22.yml").read_text())
    common = yaml.safe_load((ROLES / "common/vars/Ubuntu_22.yml").read_text())
    pinned = [
        *_pins("common", "__common_packages"),
        f"munge={slurm['__slurm_munge_version']}",
        *_pins("slurm", "__slurm_extra_packages"),
        f"chrony={common['__common_timesync_version']}",
    ]
    for spec in pinned:
        name, _, pattern = spec.partition("=")
        assert name in versions, f"the lab's Ubuntu 22.04 has no {name}"
        # apt's own matching of a pin with `*` (fnmatch), else the exact version.
        assert fnmatch.fnmatchcase(versions[name], pattern), (name, versions[name], pattern)


def test_a_node_of_ubuntu_2204_reads_as_ubuntu_jammy_and_its_source_is_the_jammy_suite() -> None:
    files = node_files(UBUNTU_2204)
    release = dict(
        line.split("=", 1) for line in files["etc/os-release"][0].splitlines() if "=" in line
    )
    assert (release["ID"], release["VERSION_ID"].strip('"'), release["VERSION_CODENAME"]) == (
        "ubuntu",
        "22.04",
        "jammy",
    )
    assert "DISTRIB_CODENAME=jammy" in files["etc/lsb-release"][0]
    assert UBUNTU_2204.apt_source("http://10.9.0.1:8077") == (
        "deb [trusted=yes] http://10.9.0.1:8077/ubuntu2204/ jammy main"
    )
    assert flavour_of("debian12") is None and flavour_of(None) is None
    with pytest.raises(LabError, match="the lab's nodes run debian12, ubuntu2204, not ubuntu2404"):
        flavour_of("ubuntu2404")


@pytest.mark.skipif(shutil.which("dpkg-deb") is None, reason="needs dpkg-deb")
def test_a_relabelled_package_is_ubuntus_version_with_its_siblings_pins_moved(
    tmp_path: Path,
) -> None:
    root = tmp_path / "munge"
    (root / "DEBIAN").mkdir(parents=True)
    (root / "DEBIAN" / "control").write_text(
        "Package: munge\nVersion: 0.5.15-2+deb12u1\nArchitecture: amd64\nMaintainer: t <t@t>\n"
        "Depends: libc6 (>= 2.34), libmunge2 (= 0.5.15-2+deb12u1), lsb-base\n"
        "Description: stand-in\n"
    )
    (root / "usr/sbin").mkdir(parents=True)
    (root / "usr/sbin/munged").write_text("munged\n")
    subprocess.run(
        ["dpkg-deb", "--build", str(root), str(tmp_path)], check=True, capture_output=True
    )
    (deb,) = tmp_path.glob("munge_*.deb")
    out = tmp_path / "out"
    out.mkdir()
    built = _relabel(deb, "0.5.14-6", UBUNTU_2204, out, tmp_path / "work")
    fields = subprocess.run(
        ["dpkg-deb", "-f", str(built), "Version", "Depends"], capture_output=True, text=True
    ).stdout
    assert fields.splitlines() == [
        "Version: 0.5.14-6",
        "Depends: libc6 (>= 2.34), libmunge2 (= 0.5.14-6), lsb-base",
    ]
    assert built.name == "munge_0.5.14-6_amd64.deb"


@pytest.mark.skipif(shutil.which("dpkg-deb") is None, reason="needs dpkg-deb")
def test_the_distributions_libslurm_dev_carries_21_08_headers(tmp_path: Path) -> None:
    root = tmp_path / "dev"
    (root / "DEBIAN").mkdir(parents=True)
    (root / "DEBIAN" / "control").write_text(
        "Package: libslurm-dev\nVersion: 22.05.8-4+deb12u3\nArchitecture: amd64\n"
        "Maintainer: t <t@t>\nDepends: libslurm38 (= 22.05.8-4+deb12u3)\nDescription: d\n"
    )
    header = root / "usr/include/slurm/slurm_version.h"
    header.parent.mkdir(parents=True)
    # Debian 22.05.8's slurm_version.h (libslurm-dev 22.05.8-4+deb12u3).
    header.write_text("#ifndef _SLURM_VERSION_H_\n#define SLURM_VERSION_NUMBER 0x160508\n#endif\n")
    subprocess.run(
        ["dpkg-deb", "--build", str(root), str(tmp_path)], check=True, capture_output=True
    )
    (deb,) = tmp_path.glob("libslurm-dev_*.deb")
    out = tmp_path / "out"
    out.mkdir()
    built = _relabel(deb, "21.08.5-2ubuntu1", UBUNTU_2204, out, tmp_path / "work")
    unpacked = tmp_path / "x"
    subprocess.run(["dpkg-deb", "-x", str(built), str(unpacked)], check=True)
    text = (unpacked / "usr/include/slurm/slurm_version.h").read_text()
    # SLURM_VERSION_NUM(21, 8, 5) = (21 << 16) + (8 << 8) + 5.
    assert "#define SLURM_VERSION_NUMBER 0x150805" in text.splitlines()
    depends = subprocess.run(
        ["dpkg-deb", "-f", str(built), "Depends"], capture_output=True, text=True
    ).stdout
    assert depends.strip() == ""
