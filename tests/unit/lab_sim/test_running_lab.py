"""A command that names only a running lab's folder acts on that lab: its prefix, bridge and
subnet come from the folder's state.json, never from the defaults (which name another lab)."""

from __future__ import annotations

import ipaddress
from pathlib import Path

from cluster_lab.config import LabConfig
from cluster_lab.state import LabState, running_lab, save_state


def test_the_folders_state_names_the_lab(tmp_path: Path) -> None:
    config = LabConfig(lab_dir=tmp_path)
    save_state(
        config.state_file,
        LabState(prefix="ctt", bridge="cttlab0", subnet="10.79.0.0/24", lab_dir=str(tmp_path)),
    )
    running = running_lab(config)
    assert (running.prefix, running.bridge) == ("ctt", "cttlab0")
    assert running.subnet == ipaddress.IPv4Network("10.79.0.0/24")
    assert running.netns_prefix != config.netns_prefix
    assert running.cgroup_name != config.cgroup_name
    assert running.lab_dir == config.lab_dir


def test_a_folder_without_a_lab_keeps_the_config(tmp_path: Path) -> None:
    config = LabConfig(lab_dir=tmp_path, prefix="abc")
    assert running_lab(config) == config
