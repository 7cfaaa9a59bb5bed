"""SHARP under UFM (issue 29): with `fabric.subnet_manager_mode: ufm` UFM runs the subnet manager
and SHARP's aggregation manager, so no host of the cluster may run a second one; the opensm and
sharp roles only ask UFM (its REST API, the lab's stand-in on the bridge: cluster_lab/ufm.py).

The lab spec with UFM mode and SHARP on is rendered as an operator's would be; its fabric
settings (opensm_mode, opensm_hosts, sharp_enabled) converge the head, the spec's subnet manager,
through the fabric and comms phases' opensm and sharp roles. Before, the render put the SM host
in opensm_hosts in UFM mode too, and the sharp role installed and started sharp_am there: a
second aggregation manager beside UFM's."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from cluster_lab import ufm
from cluster_tool.ansible.runner import PlaybookResult, run_playbook
from cluster_tool.render.engine import load_rendered_yaml, render_files
from cluster_tool.spec import load_spec_text
from tests.conftest import REPO
from tests.lab.conftest import Converged

pytestmark = pytest.mark.converged

SM_HOST = "head"


def _ufm_fabric_vars(converged: Converged) -> dict[str, Any]:
    data = yaml.safe_load(converged.lab.spec.read_text())
    data["fabric"].update(
        {"subnet_manager_mode": "ufm", "sharp": True, "ufm_url": "https://ufm.example.net"}
    )
    rendered = render_files(load_spec_text(yaml.safe_dump(data), "ufm.yml"))
    group_vars = load_rendered_yaml(rendered["group_vars/all.yml"])
    wanted = ("opensm_mode", "opensm_hosts", "opensm_adaptive_routing", "sharp_enabled")
    fabric = {key: group_vars[key] for key in wanted}
    # The lab points the spec's UFM at its stand-in, as it points repositories at its own.
    fabric["cluster_ufm_url"] = converged.lab.config.ufm_url  # type: ignore[attr-defined]
    return fabric


def _converge(converged: Converged, phase: str, tags: str, folder: Path) -> PlaybookResult:
    secrets = converged.secrets()
    return run_playbook(
        REPO / "playbooks" / "phases" / phase,
        converged.lab.inventory,
        limit=SM_HOST,
        tags=tags,
        extravars=_ufm_fabric_vars(converged),
        secret_envvars={name: secrets[name] for name in (ufm.USER_ENV, ufm.PASSWORD_ENV)},
        private_data_dir=folder,
    )


def test_with_ufm_no_host_runs_opensm_or_sharp_am_and_the_roles_ask_ufm(
    converged: Converged, tmp_path: Path
) -> None:
    lab = converged.lab
    state = ufm.state_file(lab.config)  # type: ignore[arg-type]
    assert _ufm_fabric_vars(converged)["opensm_hosts"] == []
    try:
        # UFM without SHARP while the spec wants it: the sharp role says so, naming the fix.
        ufm.set_sharp(state, False)
        off = _converge(converged, "comms.yml", "sharp", tmp_path / "off")
        assert not off.succeeded
        messages = [e.message or "" for e in off.events if e.failed]
        assert any(
            "reports no SHARP aggregation manager" in m and "sharp_enabled = true" in m
            for m in messages
        ), messages

        ufm.set_sharp(state, True)
        fabric = _converge(converged, "fabric.yml", "opensm", tmp_path / "fabric")
        assert fabric.succeeded, [(e.task, e.message) for e in fabric.events if e.failed]
        comms = _converge(converged, "comms.yml", "sharp", tmp_path / "comms")
        assert comms.succeeded, [(e.task, e.message) for e in comms.events if e.failed]
        for node in lab.node_names:
            running = lab.ssh(node, "pgrep -x sharp_am")
            assert running.returncode == 1, (node, running.stdout)
            installed = lab.ssh(node, "dpkg-query -W -f '${Status}' sharp 2>/dev/null")
            assert "install ok installed" not in installed.stdout, node
    finally:
        ufm.set_sharp(state, False)
        # What the roles before the fix left on the SM host.
        lab.ssh(
            SM_HOST,
            "service sharp_am stop >/dev/null 2>&1; rm -f /etc/init.d/sharp_am "
            "/etc/systemd/system/sharp_am.service; "
            "DEBIAN_FRONTEND=noninteractive apt-get -qy purge sharp >/dev/null 2>&1; true",
        )
