"""Time on the nodes (issue 18, finding 11, an air-gap leak): no node follows a public pool by
default. Every node follows the cluster's time server (the head, the Slurm controller by
default), which follows the site's upstream servers, answers the management network and, with no
upstream at all (air-gapped), serves its own clock with a warning. Directives as chrony.conf(5)
names them (https://chrony-project.org/doc/4.3/chrony.conf.html: server, allow, local)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from cluster_tool.ansible import run_playbook
from cluster_tool.errors import SpecError
from cluster_tool.render.engine import load_rendered_yaml, render_files
from cluster_tool.spec import load_spec_text

PLAYBOOKS = Path(__file__).parent / "playbooks"
CONF = "etc/chrony/chrony.conf"
MANAGEMENT = "10.10.0.0/16"


def _inventory(tmp_path: Path) -> Path:
    inventory = tmp_path / "hosts.yml"
    # The play runs on localhost; `head` is the cluster's head (its address is what nodes dial).
    inventory.write_text(
        "all:\n  hosts:\n    localhost:\n      ansible_connection: local\n"
        "      ansible_python_interpreter: '{{ ansible_playbook_python }}'\n"
        "    head:\n      ansible_host: 10.10.0.10\n"
        "  vars:\n    cluster_slurm_controller: head\n"
        f"    cluster_management_network: {MANAGEMENT}\n"
    )
    return inventory


def chrony_conf(tmp_path: Path, **extravars: Any) -> list[str]:
    """chrony.conf as the common role writes it on `localhost`, without comments."""
    out = tmp_path / "out"
    out.mkdir()
    result = run_playbook(
        PLAYBOOKS / "role_template.yml",
        _inventory(tmp_path),
        extravars={"role_name": "common", "templates": [CONF], "out": str(out), **extravars},
        private_data_dir=tmp_path / "pdd",
        fact_cache=tmp_path / "facts",
    )
    assert result.rc == 0, [e.message for e in result.events if e.failed]
    text = (out / "chrony.conf").read_text()
    return [line for line in text.splitlines() if line.strip() and not line.startswith("#")]


def test_a_node_follows_the_heads_clock_and_no_public_pool(tmp_path: Path) -> None:
    conf = chrony_conf(tmp_path, common_timesync_upstream_servers=["ntp1.site.example"])
    assert [line for line in conf if line.startswith(("server", "pool"))] == [
        "server 10.10.0.10 iburst"
    ]
    assert not [line for line in conf if line.startswith(("allow", "local"))]


def test_the_head_follows_the_sites_servers_and_serves_the_management_network(
    tmp_path: Path,
) -> None:
    conf = chrony_conf(
        tmp_path,
        common_timesync_server_host="localhost",
        common_timesync_upstream_servers=["ntp1.site.example", "ntp2.site.example"],
    )
    assert conf[:2] == ["server ntp1.site.example iburst", "server ntp2.site.example iburst"]
    assert f"allow {MANAGEMENT}" in conf
    assert "local stratum 10" in conf


def test_an_air_gapped_head_serves_its_own_clock(tmp_path: Path) -> None:
    conf = chrony_conf(tmp_path, common_timesync_server_host="localhost")
    assert not [line for line in conf if line.startswith(("server", "pool"))]
    assert conf[:2] == [f"allow {MANAGEMENT}", "local stratum 10"]


# The spec's management.time_servers reach the time server's chrony.conf; without them no server
# line at all (the lab's spec names none).
LAB = (Path(__file__).resolve().parents[3] / "examples" / "lab.yml").read_text(encoding="utf-8")
DOMAIN = "  domain: lab.internal\n"


def _spec_with(line: str) -> str:
    assert DOMAIN in LAB
    return LAB.replace(DOMAIN, DOMAIN + f"  {line}\n", 1)


def test_the_specs_time_servers_are_what_the_time_server_follows(tmp_path: Path) -> None:
    spec = _spec_with("time_servers: [ntp1.site.example, 10.0.0.123, 'fd00::7b']")
    rendered = load_rendered_yaml(render_files(load_spec_text(spec, "c.yml"))["group_vars/all.yml"])
    servers = rendered["common_timesync_upstream_servers"]
    assert servers == ["ntp1.site.example", "10.0.0.123", "fd00::7b"]
    conf = chrony_conf(
        tmp_path, common_timesync_server_host="localhost", common_timesync_upstream_servers=servers
    )
    assert conf[:3] == [
        "server ntp1.site.example iburst",
        "server 10.0.0.123 iburst",
        "server fd00::7b iburst",
    ]
    unset = load_rendered_yaml(render_files(load_spec_text(LAB, "c.yml"))["group_vars/all.yml"])
    assert "common_timesync_upstream_servers" not in unset


@pytest.mark.parametrize(
    "value",
    [
        '["ntp1.site.example\\nallow 0.0.0.0/0"]',
        '["pool.ntp.org iburst"]',
        '["-o x"]',
        "ntp1",
        # issue 32: Python's IPv6Address took anything after `%` as the zone
        '["fe80::1%eth0\\nserver 203.0.113.66 iburst\\ncmdallow all"]',
        '["fe80::1%eth 0"]',
    ],
)
def test_a_time_server_that_is_no_host_name_or_address_is_refused(value: str) -> None:
    with pytest.raises(SpecError) as info:
        load_spec_text(_spec_with(f"time_servers: {value}"), "c.yml")
    assert any("time_servers" in str(p) for p in info.value.problems), info.value.problems
