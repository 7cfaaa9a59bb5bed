"""OS base packages are pinned to their release, not to the archive's exact version (issue 18,
finding 9): Debian and Ubuntu publish point, -updates and -security revisions that supersede the
release's, and a mirror serves only the newest of its suites, so an exact pin stops installing.
Evidence: `apt-cache madison` against Debian's archive (tests/fixtures/apt, source on line 1)
lists two MariaDB versions published for Debian 12 at once; the role's pin must accept both.
Matching is the apt module's: fnmatch of the version (ansible/modules/apt.py, package_status)."""

from __future__ import annotations

import fnmatch

import pytest
import yaml

from tests.conftest import FIXTURES, REPO

MADISON = FIXTURES / "apt" / "madison-bookworm.txt"
BASE_OS = ("Debian_12", "Ubuntu_22", "Ubuntu_24")


def _published() -> dict[str, list[str]]:
    versions: dict[str, list[str]] = {}
    for line in MADISON.read_text().splitlines()[1:]:
        package, version, _source = (field.strip() for field in line.split("|"))
        versions.setdefault(package, []).append(version)
    return versions


def _base_pins(os_name: str) -> dict[str, str]:
    """The OS base packages the roles pin on this OS: package -> version pattern."""
    common = yaml.safe_load((REPO / "roles" / "common" / "vars" / f"{os_name}.yml").read_text())
    slurm = yaml.safe_load((REPO / "roles" / "slurm" / "vars" / f"{os_name}.yml").read_text())
    pins = dict(spec.split("=", 1) for spec in common["__common_packages"])
    pins["chrony"] = common["__common_timesync_version"]
    for package in slurm["__slurm_mariadb_packages"]:
        pins[package] = slurm["__slurm_mariadb_version"]
    return pins


def test_every_version_debian_publishes_for_the_release_matches_the_pin() -> None:
    published = _published()
    pins = _base_pins("Debian_12")
    assert set(published) <= set(pins)
    assert len(published["mariadb-server"]) == 2  # the point release and its security update
    for package, versions in published.items():
        for version in versions:
            assert fnmatch.fnmatch(version, pins[package]), (package, version, pins[package])


@pytest.mark.parametrize("os_name", BASE_OS)
def test_os_base_packages_are_pinned_to_a_release_pattern(os_name: str) -> None:
    for package, pattern in _base_pins(os_name).items():
        assert pattern.endswith("*"), f"{os_name}: {package}={pattern} is an exact archive version"


def test_slurm_munge_and_pmix_stay_exact() -> None:
    # Exact pins belong to the GPU/fabric/Slurm stack: a mixed-version Slurm cluster breaks.
    slurm = yaml.safe_load((REPO / "roles" / "slurm" / "vars" / "Ubuntu_22.yml").read_text())
    assert "*" not in slurm["__slurm_distribution_version"] + slurm["__slurm_munge_version"]
    assert all("*" not in spec for spec in slurm["__slurm_extra_packages"])
