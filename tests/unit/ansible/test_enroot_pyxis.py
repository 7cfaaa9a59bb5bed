"""enroot and pyxis where jobs start and where they are submitted (issue 18, finding 7, part): the
rendered NCCL settings reach every container through enroot's mounts.d (its configuration
documentation: each *.fstab there is mounted into the containers it starts), nvidia-container-cli
is installed for enroot's GPU hook, and pyxis goes on login nodes too (its README: login and
compute nodes), where a change restarts no slurmd. The lab does not run enroot: these check the
rendered file and the plays."""

from __future__ import annotations

from pathlib import Path

import yaml

from cluster_tool.ansible import run_playbook
from tests.conftest import REPO

RENDER = Path(__file__).parent / "playbooks" / "role_template.yml"


def test_every_container_gets_the_hosts_nccl_conf_read_only(tmp_path: Path) -> None:
    inventory = tmp_path / "hosts.yml"
    inventory.write_text(
        "all:\n  hosts:\n    localhost:\n      ansible_connection: local\n"
        "      ansible_python_interpreter: '{{ ansible_playbook_python }}'\n"
    )
    out = tmp_path / "out"
    out.mkdir()
    fstab = "etc/enroot/mounts.d/50-cluster-tool-nccl.fstab"
    result = run_playbook(
        RENDER,
        inventory,
        extravars={"role_name": "enroot_pyxis", "templates": [fstab], "out": str(out)},
        private_data_dir=tmp_path / "pdd",
        fact_cache=tmp_path / "facts",
    )
    assert result.rc == 0, [e.message for e in result.events if e.failed]
    entries = [
        line.split()
        for line in (out / Path(fstab).name).read_text().splitlines()
        if line and not line.startswith("#")
    ]
    assert len(entries) == 1
    source, target, fstype, options = entries[0]
    assert (source, target, fstype) == ("/etc/nccl.conf", "/etc/nccl.conf", "none")
    assert {"bind", "ro", "x-create=file", "nofail"} <= set(options.split(","))


def test_pyxis_is_on_the_login_nodes_as_well_as_the_gpu_nodes() -> None:
    plays = yaml.safe_load((REPO / "playbooks" / "phases" / "tools.yml").read_text())
    hosts = {play["hosts"] for play in plays if {"role": "enroot_pyxis"} in play.get("roles", [])}
    assert hosts == {"gpu", "login"}


def test_the_gpu_hook_has_nvidia_container_cli() -> None:
    defaults = yaml.safe_load(
        (REPO / "roles" / "enroot_pyxis" / "defaults" / "main.yml").read_text()
    )
    assert "libnvidia-container-tools" in defaults["enroot_pyxis_container_packages"]
