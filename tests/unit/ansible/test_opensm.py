"""The opensm role (issue 18, finding 6): one place installs and configures OpenSM on the spec's
subnet-manager hosts. Its opensm.conf names the routing engines (fat tree with Up/Down as the
fallback, NVIDIA OpenSM's adaptive-routing engines when SHARP or the spec asks), the primary's
and the standby's sm_priority, and SHARP's `sharp_enabled 2`; with an external UFM nothing is
installed and the role only asks whether an SM answers. The lab runs the role's OpenSM against
its fabric simulator (tests/lab/test_role_traps.py)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from cluster_tool.ansible import run_playbook

PLAYBOOKS = Path(__file__).parent / "playbooks"
CONF = "etc/opensm/opensm.conf"


def _inventory(tmp_path: Path) -> Path:
    tmp_path.mkdir(parents=True, exist_ok=True)
    inventory = tmp_path / "hosts.yml"
    inventory.write_text(
        "all:\n  hosts:\n    localhost:\n      ansible_connection: local\n"
        "      ansible_python_interpreter: '{{ ansible_playbook_python }}'\n"
    )
    return inventory


def rendered(tmp_path: Path, **extravars: Any) -> dict[str, str]:
    """opensm.conf as the role writes it on `localhost`: setting -> value."""
    out = tmp_path / "out"
    out.mkdir(parents=True)
    result = run_playbook(
        PLAYBOOKS / "role_template.yml",
        _inventory(tmp_path),
        extravars={"role_name": "opensm", "templates": [CONF], "out": str(out), **extravars},
        private_data_dir=tmp_path / "pdd",
        fact_cache=tmp_path / "facts",
    )
    assert result.rc == 0, [e.message for e in result.events if e.failed]
    settings = {}
    for line in (out / "opensm.conf").read_text().splitlines():
        if line.strip() and not line.startswith("#"):
            name, value = line.split(None, 1)
            settings[name] = value
    return settings


def test_a_single_sm_routes_the_fat_tree_with_up_down_as_fallback(tmp_path: Path) -> None:
    conf = rendered(tmp_path, opensm_hosts=["localhost"])
    assert conf == {"routing_engine": "ftree,updn", "sm_priority": "13"}


def test_the_standby_of_a_pair_gets_the_lower_priority(tmp_path: Path) -> None:
    assert rendered(tmp_path / "a", opensm_hosts=["localhost", "sm02"])["sm_priority"] == "13"
    assert rendered(tmp_path / "b", opensm_hosts=["sm01", "localhost"])["sm_priority"] == "12"


def test_sharp_enables_the_aggregation_nodes_and_adaptive_routing(tmp_path: Path) -> None:
    conf = rendered(
        tmp_path, opensm_hosts=["localhost"], sharp_enabled=True, opensm_adaptive_routing=True
    )
    assert conf["sharp_enabled"] == "2"
    assert conf["routing_engine"] == "ar_ftree,ar_updn"


def test_the_spec_asks_for_adaptive_routing_without_sharp(tmp_path: Path) -> None:
    conf = rendered(tmp_path, opensm_hosts=["localhost"], opensm_adaptive_routing=True)
    assert conf["routing_engine"] == "ar_ftree,ar_updn" and "sharp_enabled" not in conf


def test_site_settings_are_written_and_may_override(tmp_path: Path) -> None:
    conf = rendered(
        tmp_path,
        opensm_hosts=["localhost"],
        opensm_settings={"routing_engine": "updn", "qos": True, "sweep_interval": 15},
    )
    assert conf == {
        "routing_engine": "updn",
        "qos": "TRUE",
        "sweep_interval": "15",
        "sm_priority": "13",
    }


def _run_role(tmp_path: Path, **extravars: Any) -> tuple[list[str], list[str]]:
    """(names of the tasks that ran or failed, failure messages) of the role on localhost."""
    tmp_path.mkdir(parents=True, exist_ok=True)
    result = run_playbook(
        PLAYBOOKS / "opensm.yml",
        _inventory(tmp_path),
        extravars=extravars,
        private_data_dir=tmp_path / "pdd",
        fact_cache=tmp_path / "facts",
    )
    ran = [
        e.task or ""
        for e in result.events
        if e.event in {"runner_on_ok", "runner_on_changed", "runner_on_failed"}
    ]
    return ran, [e.message or "" for e in result.events if e.failed]


def test_ufm_mode_installs_nothing_and_asks_whether_an_sm_answers(tmp_path: Path) -> None:
    # This controller has no SM (nor, perhaps, sminfo): the check is what fails.
    ran, failed = _run_role(
        tmp_path, opensm_mode="ufm", opensm_hosts=["localhost"], opensm_answer_timeout=0
    )
    assert any("sminfo" in task for task in ran), ran
    assert not any("Install" in task or "opensm.conf" in task for task in ran), ran
    assert len(failed) == 1, failed


@pytest.mark.parametrize(
    ("extravars", "says"),
    [
        ({"opensm_mode": "ufm-enterprise"}, "opensm_mode must be one of: opensm, ufm"),
        ({"opensm_adaptive_routing": True, "opensm_source": "distribution"}, "opensm: mode"),
        ({"opensm_hosts": ["a", "b", "c"]}, "opensm: mode"),
        ({"opensm_priority_standby": 13}, "opensm: mode"),
    ],
    ids=["mode", "ar-needs-nvidia-opensm", "three-hosts", "standby-not-lower"],
)
def test_a_wrong_input_stops_the_role_before_any_change(
    tmp_path: Path, extravars: dict[str, Any], says: str
) -> None:
    ran, failed = _run_role(tmp_path, **{"opensm_hosts": ["localhost"], **extravars})
    assert len(failed) == 1 and says in failed[0], failed
    assert not any("Install" in task for task in ran), ran
