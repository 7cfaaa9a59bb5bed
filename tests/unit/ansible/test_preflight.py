"""site.yml's preflight: a missing or wrong variable stops the run on the controller, with a
message naming the variable, before any host is touched (the inventory's hosts do not even
exist: a run that reached one would count it unreachable)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import yaml

from cluster_tool.ansible import run_playbook
from cluster_tool.render.engine import load_rendered_yaml
from tests.conftest import REPO

SITE = REPO / "playbooks" / "site.yml"


def _inventory(tmp_path: Path, **changes: object) -> Path:
    folder = tmp_path / "inventory"
    shutil.copytree(REPO / "inventory" / "example", folder)
    group_vars = folder / "group_vars" / "all.yml"
    data = load_rendered_yaml(group_vars.read_text())
    for key, value in changes.items():
        if value is None:
            data.pop(key, None)
        else:
            data[key] = value
    group_vars.write_text(yaml.safe_dump(data, sort_keys=False))
    return folder


@pytest.mark.parametrize(
    ("changes", "named"),
    [
        ({"nvidia_driver_version": "latest"}, "nvidia_driver_version"),
        ({"cuda_repo_url": "ftp://mirror.example.net/cuda/"}, "cuda_repo_url"),
        ({"nccl_conf_file": "/nonexistent/nccl.conf"}, "nccl_conf_file"),
    ],
)
def test_a_wrong_or_missing_variable_stops_site_yml_before_any_host(
    tmp_path: Path, changes: dict[str, object], named: str
) -> None:
    inventory = _inventory(tmp_path, **changes)
    result = run_playbook(
        SITE, inventory, private_data_dir=tmp_path / "pdd", fact_cache=tmp_path / "facts"
    )
    assert result.rc != 0
    assert set(result.hosts) == {"localhost"}, "no inventory host was contacted"
    failed = [e for e in result.events if e.failed]
    assert failed and all(e.host == "localhost" for e in failed)
    assert any(named in (e.message or "") for e in failed), [e.message for e in failed]
