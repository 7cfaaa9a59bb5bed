"""site.yml's preflight of the nodes' OS: a node OS on which a role would fail (what the
Debian-only lab cannot reproduce) is refused before any phase changes a host, with the reason
and the fix. The nodes' OS comes from the fact cache, as on a second run, so no host is
contacted."""

from __future__ import annotations

from pathlib import Path

import pytest

from cluster_tool.ansible import PlaybookResult, run_playbook
from tests.conftest import REPO
from tests.unit.ansible.test_preflight import _inventory

SITE = REPO / "playbooks" / "site.yml"
SEED = Path(__file__).parent / "playbooks" / "seed_os_facts.yml"

OS_FACTS = {
    "Debian_12": ("Debian", "12", "12", "Debian"),
    "Ubuntu_22": ("Ubuntu", "22", "22.04", "Debian"),
    "Ubuntu_24": ("Ubuntu", "24", "24.04", "Debian"),
    "Rocky_9": ("Rocky", "9", "9.4", "RedHat"),
    "Ubuntu_20": ("Ubuntu", "20", "20.04", "Debian"),
}


# The example inventory's roles on five hosts: every rule is per host, and 34 hosts cost time.
HOSTS = """\
all:
  hosts:
    head01: {ansible_host: 10.10.0.10}
    login01: {ansible_host: 10.10.0.21}
    login02: {ansible_host: 10.10.0.22}
    gpu001: {ansible_host: 10.10.1.1}
    gpu007: {ansible_host: 10.10.1.7}
  children:
    slurm_controller: {hosts: {head01: {}}}
    slurmdbd: {hosts: {head01: {}}}
    login: {hosts: {login01: {}, login02: {}}}
    gpu: {hosts: {gpu001: {}, gpu007: {}}}
    subnet_manager: {hosts: {head01: {}}}
"""


def _preflight(
    tmp_path: Path, os_of: dict[str, str], hosts: str = HOSTS, **changes: object
) -> PlaybookResult:
    # The example inventory runs SchedMD's packages; these cases start from the distribution's.
    changes.setdefault("slurm_package_source", "distribution")
    inventory = _inventory(tmp_path, **changes)
    (inventory / "hosts.yml").write_text(hosts)
    facts = tmp_path / "facts"
    seeded = run_playbook(
        SEED,
        inventory,
        extravars={"seed_os": {host: OS_FACTS[name] for host, name in os_of.items()}},
        private_data_dir=tmp_path / "seed",
        fact_cache=facts,
    )
    assert seeded.rc == 0
    return run_playbook(
        SITE,
        inventory,
        tags="preflight",
        secret_envvars={"CLUSTER_TOOL_SLURMDBD_PASSWORD": "preflight-test-password"},
        private_data_dir=tmp_path / "pdd",
        fact_cache=facts,
    )


def _failures(result: PlaybookResult) -> list[str]:
    return [e.message or "" for e in result.events if e.failed]


def test_ubuntu_2204_with_the_distribution_slurm_is_refused_with_the_reason_and_the_fix(
    tmp_path: Path,
) -> None:
    result = _preflight(tmp_path, {"*": "Ubuntu_22"})
    assert result.rc != 0
    failed = _failures(result)
    assert failed
    message = failed[0]
    assert "Slurm 21.08.5-2ubuntu1" in message
    assert "no cgroup v2 support" in message
    assert "slurm.packages: schedmd" in message
    assert result.changed_total == 0


def test_ubuntu_2204_passes_with_site_slurm_or_without_the_cgroup_plugins(tmp_path: Path) -> None:
    site = _preflight(
        tmp_path / "site",
        {"*": "Ubuntu_22"},
        slurm_package_source="schedmd",
        slurm_site_repo_uri="https://mirror.example.net/slurm/",
    )
    assert site.rc == 0, _failures(site)
    no_cgroup = _preflight(
        tmp_path / "linuxproc",
        {"*": "Ubuntu_22"},
        slurm_proctrack_type="proctrack/linuxproc",
        slurm_task_plugin="task/affinity",
        slurm_conf={"JobAcctGatherType": "jobacct_gather/linux"},
    )
    assert no_cgroup.rc == 0, _failures(no_cgroup)


@pytest.mark.parametrize("os_name", ["Debian_12", "Ubuntu_24"])
def test_an_os_whose_slurm_has_cgroup_v2_passes_the_preflight(tmp_path: Path, os_name: str) -> None:
    result = _preflight(tmp_path, {"*": os_name})
    assert result.rc == 0, _failures(result)


@pytest.mark.parametrize("os_name", ["Rocky_9", "Ubuntu_20"])
def test_a_gpu_node_on_an_os_the_gpu_roles_do_not_install_on_is_refused(
    tmp_path: Path, os_name: str
) -> None:
    # Slurm's head node may run Rocky 9 (the common and slurm roles carry its variables); a GPU
    # node needs DOCA, NCCL and DCGM from their apt repositories.
    result = _preflight(tmp_path, {"*": "Debian_12", "gpu007": os_name})
    assert result.rc != 0
    failed = [e for e in result.events if e.failed]
    assert {e.host for e in failed} == {"gpu007"}
    assert "the GPU and fabric roles install on Debian 12, Ubuntu 22, Ubuntu 24" in (
        failed[0].message or ""
    )


def test_a_node_that_runs_another_os_than_the_spec_says_is_refused_naming_both(
    tmp_path: Path,
) -> None:
    # The render writes each group's `os` as the host's node_os.
    hosts = HOSTS.replace(
        "gpu001: {ansible_host: 10.10.1.1}",
        "gpu001: {ansible_host: 10.10.1.1, node_os: ubuntu2204}",
    )
    hosts = hosts.replace(
        "gpu007: {ansible_host: 10.10.1.7}",
        "gpu007: {ansible_host: 10.10.1.7, node_os: ubuntu2204}",
    )
    result = _preflight(
        tmp_path,
        {"*": "Ubuntu_22", "gpu007": "Debian_12"},
        hosts,
        slurm_package_source="schedmd",
        slurm_site_repo_uri="https://mirror.example.net/slurm/",
    )
    assert result.rc != 0
    failed = [e for e in result.events if e.failed]
    assert {e.host for e in failed} == {"gpu007"}
    assert (failed[0].message or "").startswith(
        "preflight: gpu007 runs Debian 12 (debian12), the spec says ubuntu2204 (its node group's "
        "`os`): re-image the node with ubuntu2204 or correct the spec"
    ), failed[0].message
