"""The spec says what the site runs (issue 29): each node group's `os` and `slurm.packages`
(`distribution` or `schedmd` with its repository), and `spec check` refuses, located and with the
fix, what cannot work: Ubuntu 22.04's own Slurm under the cgroup plugins, a version pin the chosen
source will not install, SchedMD's packages without their repository or release.

The distributions' Slurm releases are read from their archives: slurm-wlm 21.08.5-2ubuntu1 in
jammy and 23.11.4-1.2ubuntu5 in noble (https://packages.ubuntu.com/jammy/slurm-wlm,
https://packages.ubuntu.com/noble/slurm-wlm), 22.05.8-4+deb12u3 in bookworm
(https://packages.debian.org/bookworm/slurm-wlm)."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from cluster_tool.cli import main
from cluster_tool.errors import SpecError
from cluster_tool.render.engine import load_rendered_yaml, render_files
from cluster_tool.spec import load_spec_text

ROOT = Path(__file__).resolve().parents[3]

SPEC = """\
apiVersion: cluster-tool/v1
kind: Cluster
name: site
management:
  network: 10.10.0.0/16
bmc:
  address_pattern: "{name}-bmc"
  credentials:
    username: {env: BMC_USER}
    password: {env: BMC_PASS}
nodes:
  - hosts: head01
    address: 10.10.0.10
    os: debian12
  - hosts: gpu[001-004]
    profile: hgx-h100-8x-ndr
    address: 10.10.1.1
    os: OS
fabric:
  su_size: 4
  subnet_manager: head01
slurm:
  controller: head01
"""

REPOSITORY = """\
  repository:
    url: https://repo.example.net/slurm-smd/
    suites: [jammy]
    components: [main]
"""


def spec(os_name: str, tail: str = "", slurm: str = "") -> str:
    return SPEC.replace("os: OS", f"os: {os_name}") + slurm + tail


def problems_of(text: str) -> list[str]:
    with pytest.raises(SpecError) as info:
        load_spec_text(text, "c.yml")
    return [str(p) for p in info.value.problems]


def line_of(text: str, needle: str, nth: int = 0) -> int:
    lines = [i for i, line in enumerate(text.splitlines(), start=1) if needle in line]
    return lines[nth]


def test_ubuntu_2204_with_its_own_slurm_is_refused_at_the_groups_os_with_the_fix() -> None:
    text = spec("ubuntu2204")
    (problem,) = problems_of(text)
    assert problem == (
        f"c.yml:{line_of(text, 'os: ubuntu2204')}:9: nodes[1].os: Ubuntu 22.04 ships Slurm "
        "21.08.5, which has no cgroup v2 support, and boots the unified cgroup v2 hierarchy: "
        "slurmd cannot start under Slurm's cgroup plugins on gpu[001-004]; set "
        "`slurm.packages: schedmd` with `slurm.repository` and `software.slurm_version` "
        "(SchedMD's slurm-smd packages built for Ubuntu 22.04)"
    )


def test_ubuntu_2204_passes_with_schedmds_packages_or_without_the_cgroup_plugins() -> None:
    load_spec_text(
        spec(
            "ubuntu2204",
            'software:\n  slurm_version: "24.05.5"\n',
            "  packages: schedmd\n" + REPOSITORY,
        ),
        "c.yml",
    )
    linuxproc = (
        "ansible_vars:\n  slurm_proctrack_type: proctrack/linuxproc\n"
        "  slurm_task_plugin: task/affinity\n"
        "  slurm_conf: {JobAcctGatherType: jobacct_gather/linux}\n"
    )
    load_spec_text(spec("ubuntu2204", linuxproc), "c.yml")


def test_a_pin_the_distributions_slurm_will_not_install_is_refused_at_the_pin() -> None:
    text = spec("ubuntu2404", 'software:\n  slurm_version: "24.11"\n').replace(
        "os: debian12", "os: ubuntu2404"
    )
    (problem,) = problems_of(text)
    assert problem == (
        f"c.yml:{line_of(text, 'slurm_version')}:18: software.slurm_version: slurm.packages: "
        "distribution installs Ubuntu 24.04's own Slurm 23.11.4 on nodes[0] (head01), "
        "nodes[1] (gpu[001-004]), "
        "not 24.11; set `slurm.packages: schedmd` with `slurm.repository` to run 24.11, "
        "or pin 23.11.4"
    )
    # The head's Debian 12 installs 22.05.8: a 23.11 pin is refused there.
    (head,) = problems_of(spec("ubuntu2404", 'software:\n  slurm_version: "23.11"\n'))
    assert "Debian 12's own Slurm 22.05.8 on nodes[0] (head01), not 23.11" in head
    both_debian = spec("debian12", 'software:\n  slurm_version: "22.05"\n')
    load_spec_text(both_debian, "c.yml")
    load_spec_text(both_debian.replace('"22.05"', "22.05.8"), "c.yml")


def test_a_pin_with_the_distributions_slurm_needs_the_groups_os() -> None:
    text = spec("ubuntu2404", 'software:\n  slurm_version: "23.11.4"\n').replace(
        "    os: debian12\n", ""
    )
    (problem,) = problems_of(text)
    assert problem.endswith(
        "software.slurm_version: slurm.packages: distribution installs each OS's own Slurm, "
        "and nodes[0] (head01) states no `os` to hold 23.11.4 to; state it, or leave "
        "software.slurm_version out"
    )


def test_schedmd_needs_its_repository_and_release_and_a_repository_needs_schedmd() -> None:
    text = spec("ubuntu2204", "", "  packages: schedmd\n")
    problems = problems_of(text)
    where = f"c.yml:{line_of(text, 'packages: schedmd')}:13: slurm.packages: schedmd needs "
    assert problems == [
        where + "`slurm.repository`: the site's apt repository of slurm-smd packages (SchedMD "
        "publishes Slurm as source only; build them from the release tarball with its debian/ "
        "folder)",
        where + "`software.slurm_version`: the release slurm.repository serves",
    ]
    text = spec("debian12", "", REPOSITORY)
    (problem,) = problems_of(text)
    assert problem.startswith(f"c.yml:{line_of(text, 'url:')}:5: slurm.repository: ")
    assert "only `slurm.packages: schedmd` installs from it" in problem


def test_the_old_slurm_download_url_is_refused_with_where_it_went() -> None:
    text = spec(
        "debian12", "software:\n  repositories:\n    slurm: https://download.schedmd.com/slurm/\n"
    )
    (problem,) = problems_of(text)
    assert "software.repositories: " in problem
    assert "`slurm.repository` with `slurm.packages: schedmd`" in problem


def test_spec_check_exits_2_with_one_located_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "c.yml"
    path.write_text(spec("ubuntu2204"))
    assert main(["spec", "check", str(path)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    line = line_of(spec("ubuntu2204"), "os: ubuntu2204")
    assert len(err) == 1 and err[0].startswith(f"{path}:{line}:9: nodes[1].os: Ubuntu 22.04"), err


def test_render_hands_the_roles_the_source_the_ids_and_each_hosts_os() -> None:
    cluster = load_spec_text(
        spec(
            "ubuntu2204",
            'software:\n  slurm_version: "24.05.5"\n',
            "  packages: schedmd\n  uid: 990\n  gid: 991\n" + REPOSITORY,
        ),
        "c.yml",
    )
    files = render_files(cluster)
    group_vars = load_rendered_yaml(files["group_vars/all.yml"])
    assert group_vars["slurm_package_source"] == "schedmd"
    assert group_vars["slurm_version"] == "24.05.5"
    assert (group_vars["slurm_uid"], group_vars["slurm_gid"]) == (990, 991)
    assert group_vars["slurm_site_repo_uri"] == "https://repo.example.net/slurm-smd/"
    assert group_vars["slurm_site_repo_suites"] == ["jammy"]
    assert group_vars["slurm_site_repo_components"] == ["main"]
    assert "slurm_download_url" not in group_vars
    hosts = load_rendered_yaml(files["hosts.yml"])["all"]["hosts"]
    assert hosts["head01"]["node_os"] == "debian12"
    assert hosts["gpu003"]["node_os"] == "ubuntu2204"
    # The distribution's path pins no version: the role installs the OS's own.
    plain = load_rendered_yaml(
        render_files(load_spec_text(spec("debian12"), "c.yml"))["group_vars/all.yml"]
    )
    assert plain["slurm_package_source"] == "distribution"
    assert "slurm_version" not in plain and "slurm_site_repo_uri" not in plain


def test_the_distributions_releases_are_what_the_slurm_role_installs() -> None:
    from cluster_tool.spec.checks import SLURM_CGROUP_DEFAULTS
    from cluster_tool.spec.models import DISTRIBUTION_SLURM

    vars_dir = ROOT / "roles" / "slurm" / "vars"
    for os_name, file in (
        ("debian12", "Debian_12.yml"),
        ("ubuntu2204", "Ubuntu_22.yml"),
        ("ubuntu2404", "Ubuntu_24.yml"),
    ):
        pinned = yaml.safe_load((vars_dir / file).read_text())["__slurm_distribution_version"]
        assert str(pinned).startswith(DISTRIBUTION_SLURM[os_name] + "-"), (os_name, pinned)
    defaults = yaml.safe_load((ROOT / "roles" / "slurm" / "defaults" / "main.yml").read_text())
    role_vars = yaml.safe_load((vars_dir / "main.yml").read_text())
    assert defaults["slurm_proctrack_type"] == SLURM_CGROUP_DEFAULTS["slurm_proctrack_type"]
    assert defaults["slurm_task_plugin"] == SLURM_CGROUP_DEFAULTS["slurm_task_plugin"]
    assert (
        role_vars["__slurm_conf_defaults"]["JobAcctGatherType"]
        == SLURM_CGROUP_DEFAULTS["JobAcctGatherType"]
    )
