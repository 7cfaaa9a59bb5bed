"""The lab's Ansible variables come from its rendered inventory: the production phase plays load
only playbooks/vars/site.yml, and a play on the lab's inventory sees every lab variable with the
lab's value (play vars_files beat inventory group_vars, so site.yml must set none of them)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import yaml

from cluster_lab.config import LabConfig
from cluster_lab.lifecycle import LAB_GROUP_VARS, _render_lab_inventory
from cluster_lab.topology import load_plan

REPO = Path(__file__).resolve().parents[3]
PHASES = sorted((REPO / "playbooks" / "phases").glob("*.yml"))

# A phase play's variables as Ansible resolves them on a lab GPU node: the phase's vars_files,
# the inventory's group_vars; written out as JSON on the controller (no node is contacted).
PLAY = """
- name: What a phase play sees on a lab node
  hosts: gpu001
  gather_facts: false
  vars_files:
    - {site}
  tasks:
    - name: Write the lab's variables as the play resolves them
      ansible.builtin.copy:
        content: >-
          {{{{ dict(lab_keys | zip(query('ansible.builtin.vars', *lab_keys))) | to_json }}}}
        dest: {out}
        mode: "0600"
      delegate_to: localhost
      run_once: true
"""


def _phase_vars_files() -> set[str]:
    files = set()
    for phase in PHASES:
        for play in yaml.safe_load(phase.read_text()):
            files.update(play.get("vars_files", []))
    return files


def _seen_by_a_phase_play(inventory: Path, keys: list[str], tmp_path: Path) -> dict[str, Any]:
    (site,) = _phase_vars_files()
    out = tmp_path / "seen.json"
    playbook = tmp_path / "play.yml"
    playbook.write_text(PLAY.format(site=(REPO / "playbooks" / "phases" / site).resolve(), out=out))
    ansible_playbook = Path(sys.executable).with_name("ansible-playbook")
    env = {**os.environ, "ANSIBLE_LOCALHOST_WARNING": "false", "ANSIBLE_NOCOLOR": "1"}
    proc = subprocess.run(
        [
            str(ansible_playbook),
            "-i",
            str(inventory / "hosts.yml"),
            str(playbook),
            "-e",
            json.dumps({"lab_keys": keys}),
        ],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env=env,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return json.loads(out.read_text())


def test_the_phase_plays_load_only_the_site_vars_whatever_the_inventory() -> None:
    assert len(PHASES) >= 8
    assert _phase_vars_files() == {"../vars/site.yml"}
    assert not (REPO / "playbooks" / "vars" / "lab.yml").exists()


def test_a_phase_play_on_the_lab_inventory_sees_the_labs_variables(tmp_path: Path) -> None:
    config = LabConfig.from_env(lab_dir=tmp_path / "lab")
    plan = load_plan(REPO / "examples" / "lab.yml", tmp_path / "spec-inventory")
    _render_lab_inventory(config, plan)
    lab_vars = yaml.safe_load(LAB_GROUP_VARS.read_text())
    # What the lab's nodes cannot do as a real node does (hand-read from the file):
    assert lab_vars["common_manage_boot"] is False
    # ...and what they can: Slurm's cgroup plugins run as the slurm role's defaults set them.
    assert not {"slurm_proctrack_type", "slurm_task_plugin", "slurm_cgroup_conf"} & set(lab_vars)
    assert lab_vars["nccl_tests_install_from"] == "package"
    keys = [*sorted(lab_vars), "lab_repo_url", "cuda_repo_url"]
    seen = _seen_by_a_phase_play(config.inventory_dir, keys, tmp_path)
    repo_url = f"{config.repo_url}/"
    # gpu001 runs Ubuntu 22.04 (examples/lab.yml): its repositories are that OS's archive in the
    # lab's repository (the os_ubuntu2204 group's variables), the rest the lab's.
    assert seen == {
        **lab_vars,
        "lab_repo_url": repo_url,
        "cuda_repo_url": f"{repo_url}ubuntu2204/",
    }
