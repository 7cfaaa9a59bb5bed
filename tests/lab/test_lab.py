"""The lab itself, end to end: nodes by name, the package repository, the real fabric tools
against ibsim (with a cut cable), a Redfish re-image, idempotent `up`, and clean errors."""

from __future__ import annotations

import contextlib
import ipaddress
import json
import os
import shutil
import subprocess
import time
from pathlib import Path

import pytest

from cluster_lab import fabric, lifecycle
from cluster_lab.config import LabConfig
from cluster_tool.fabric.plan import read_cabling_csv, read_switch_links_csv
from cluster_tool.parsers.ibnetdiscover import parse_ibnetdiscover
from tests.conftest import REPO
from tests.lab.conftest import TEST_PREFIX, TEST_SUBNET, LabHandle, leftovers, require_root

CLI = [str(REPO / ".venv" / "bin" / "cluster-tool")]


def test_every_node_is_reachable_over_ssh_by_name(lab: LabHandle) -> None:
    assert lab.node_names == ["head", "gpu001", "gpu002", "gpu003", "gpu004"]
    for name in lab.node_names:
        result = lab.ssh(name, "hostname; test -x /usr/sbin/sshd && python3 -c 'print(42)'")
        assert result.returncode == 0, result.stderr
        assert result.stdout.split() == [name, "42"]


def test_nodes_start_bare(lab: LabHandle) -> None:
    # Nothing the roles install is there before they run.
    result = lab.ssh("gpu003", "dpkg-query -W -f='${Status}' slurmd munge 2>&1; true")
    assert "install ok installed" not in result.stdout


def test_ansible_reaches_every_node_through_the_lab_inventory(lab: LabHandle) -> None:
    ansible = REPO / ".venv" / "bin" / "ansible"
    env = {
        **os.environ,
        "ANSIBLE_HOST_KEY_CHECKING": "False",
        "PATH": f"{ansible.parent}:/usr/bin:/bin",
    }
    result = subprocess.run(
        [str(ansible), "all", "-i", str(lab.inventory / "hosts.yml"), "-m", "ansible.builtin.ping"],
        capture_output=True,
        text=True,
        timeout=180,
        env=env,
        cwd=REPO,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    for name in lab.node_names:
        assert f"{name} | SUCCESS" in result.stdout


def test_apt_get_install_from_the_lab_repository(lab: LabHandle) -> None:
    result = lab.ssh(
        "gpu004",
        "apt-get -qq update && DEBIAN_FRONTEND=noninteractive apt-get -qq -y install jq >/dev/null "
        "&& echo '{\"rail\": 3}' | jq .rail && apt-cache policy jq | grep -c "
        + lab.status.repo_url.removeprefix("http://").rstrip("/"),
        timeout=300,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.split()[:2] == ["3", "1"]


def _head_fabric(lab: LabHandle):  # type: ignore[no-untyped-def]
    result = lab.ssh("head", "ibnetdiscover", timeout=90)
    assert result.returncode == 0, result.stderr
    return parse_ibnetdiscover(result.stdout)


def test_ibnetdiscover_on_the_head_shows_every_hca_on_its_planned_leaf_port(lab: LabHandle) -> None:
    plan = read_cabling_csv(lab.inventory / "cabling.csv")
    assert len(plan) == 32
    found = {u.ca_description: u for u in _head_fabric(lab).ca_uplinks()}
    assert len(found) == len(plan)
    for row in plan:
        uplink = found[f"{row.node} {row.hca}"]
        assert uplink.switch_description == f"MF0;{row.leaf}:MQM8700/U1"
        assert uplink.switch_port == row.leaf_port
        assert (uplink.width, uplink.speed) == (4, "HDR")


def test_ibnetdiscover_shows_the_planned_spine_links(lab: LabHandle) -> None:
    links = read_switch_links_csv(lab.inventory / "switch-links.csv")
    ports = {
        (p.switch_description, p.port): (p.peer_description, p.peer_port)
        for p in _head_fabric(lab).switch_ports()
    }
    for link in links:
        peer = ports[(f"MF0;{link.leaf}:MQM8700/U1", link.leaf_port)]
        assert peer == (f"MF0;{link.spine}:MQM8700/U1", link.spine_port)


def test_adopt_the_running_lab(lab: LabHandle, tmp_path: Path) -> None:
    """`cluster-tool adopt` of the lab's fabric as the head's ibnetdiscover reads it (real tool,
    ibsim): the draft's cabling and uplinks are the ones the lab was cabled from (its rendered
    cabling.csv and switch-links.csv), spec check takes it, and fabric check of it passes."""
    import yaml

    from cluster_tool.spec import load_spec

    result = lab.ssh("head", "ibnetdiscover", timeout=90)
    assert result.returncode == 0, result.stderr
    captured = tmp_path / "fabric.txt"
    captured.write_text(result.stdout)
    profile = load_spec(Path(lab.spec)).profile("lab-h100-8x-hdr")
    profile_file = tmp_path / "profile.yml"
    profile_file.write_text(yaml.safe_dump({"lab-h100-8x-hdr": profile.model_dump()}))
    draft = tmp_path / "adopted.yml"
    adopt = [*CLI, "adopt", str(captured), "--profile", str(profile_file), "-o", str(draft)]
    ran = subprocess.run([*adopt, "--json"], capture_output=True, text=True, timeout=120)
    assert ran.returncode == 0, ran.stderr
    assert json.loads(ran.stdout)["departures"] == []
    out = tmp_path / "inventory"
    for args in (["spec", "check", str(draft)], ["render", str(draft), "-o", str(out)]):
        ran = subprocess.run([*CLI, *args], capture_output=True, text=True, timeout=120)
        assert ran.returncode == 0, ran.stdout + ran.stderr

    def hosts(path: Path) -> set[tuple[str, str, str, int]]:
        return {(r.node, r.hca, r.leaf, r.leaf_port) for r in read_cabling_csv(path)}

    def uplinks(path: Path) -> set[tuple[str, int, str, int]]:
        return {(x.leaf, x.leaf_port, x.spine, x.spine_port) for x in read_switch_links_csv(path)}

    assert hosts(out / "cabling.csv") == hosts(lab.inventory / "cabling.csv")
    assert uplinks(out / "switch-links.csv") == uplinks(lab.inventory / "switch-links.csv")
    check = [*CLI, "fabric", "check", "--spec", str(draft), "--ibnetdiscover", str(captured)]
    ran = subprocess.run([*check, "--json"], capture_output=True, text=True, timeout=120)
    assert ran.returncode == 0, ran.stdout + ran.stderr
    assert json.loads(ran.stdout)["findings"] == []


def test_an_unlinked_cable_disappears_from_ibnetdiscover_and_relink_restores_it(
    lab: LabHandle,
) -> None:
    config = lab.config
    fabric.unlink_hca(config, "gpu002", "mlx5_3")  # type: ignore[arg-type]
    try:
        cut = {u.ca_description for u in _head_fabric(lab).ca_uplinks()}
        assert "gpu002 mlx5_3" not in cut
        assert "gpu002 mlx5_4" in cut and len(cut) == 31
    finally:
        fabric.relink_hca(config, "gpu002", "mlx5_3")  # type: ignore[arg-type]
    deadline = time.monotonic() + 30
    while True:
        back = {u.ca_description: u for u in _head_fabric(lab).ca_uplinks()}
        if "gpu002 mlx5_3" in back or time.monotonic() > deadline:
            break
        time.sleep(1)
    assert back["gpu002 mlx5_3"].switch_port == 2


def test_restart_fabric_rebuilds_ibsim_from_the_model(lab: LabHandle) -> None:
    from cluster_lab import model as hw

    config = lab.config
    model_dir = config.model_dir  # type: ignore[attr-defined]

    def degrade(m: hw.HardwareModel) -> None:
        m.hca("gpu004", "mlx5_9").port.width = "1X"
        m.hca("gpu004", "mlx5_9").port.counters["SymbolErrorCounter"] = 777

    def restore(m: hw.HardwareModel) -> None:
        m.hca("gpu004", "mlx5_9").port.width = "4X"
        m.hca("gpu004", "mlx5_9").port.counters.clear()

    hw.update(model_dir, degrade)
    try:
        lifecycle.restart_fabric(config)  # type: ignore[arg-type]
        uplink = {u.ca_description: u for u in _head_fabric(lab).ca_uplinks()}["gpu004 mlx5_9"]
        assert (uplink.width, uplink.speed) == (1, "HDR")
        errors = lab.ssh("head", "ibqueryerrors", timeout=60).stdout
        assert "[SymbolErrorCounter == 777]" in errors
    finally:
        hw.update(model_dir, restore)
        lifecycle.restart_fabric(config)  # type: ignore[arg-type]
    uplink = {u.ca_description: u for u in _head_fabric(lab).ca_uplinks()}["gpu004 mlx5_9"]
    assert uplink.width == 4


def test_fabric_diags_run_on_the_head(lab: LabHandle) -> None:
    result = lab.ssh("head", "iblinkinfo >/dev/null && perfquery && ibqueryerrors", timeout=120)
    assert result.returncode == 0, result.stderr
    assert "SymbolErrorCounter" in result.stdout
    assert "ports checked" in result.stdout


def test_redfish_pxe_boot_and_power_cycle_reimage_the_node(lab: LabHandle) -> None:
    import sushy

    node = "gpu003"
    assert lab.ssh(node, "echo left-behind > /root/marker").returncode == 0
    url = lab.status.redfish[node]  # type: ignore[attr-defined]
    root, _, path = url.partition("/redfish/v1")
    conn = sushy.Sushy(f"{root}/redfish/v1", username="lab", password="lab")
    system = conn.get_system("/redfish/v1" + path)
    system.set_system_boot_options(
        target=sushy.BOOT_SOURCE_TARGET_PXE, enabled=sushy.BOOT_SOURCE_ENABLED_ONCE
    )
    system.reset_system(sushy.RESET_FORCE_RESTART)
    deadline = time.monotonic() + 90
    result = None
    while time.monotonic() < deadline:
        time.sleep(1)
        result = lab.ssh(node, "hostname; ls /root/marker 2>/dev/null || echo bare", timeout=15)
        if result.returncode == 0 and result.stdout.split() == [node, "bare"]:
            break
    assert result is not None and result.stdout.split() == [node, "bare"], result
    system.refresh()
    assert system.power_state == sushy.POWER_STATE_ON
    assert system.boot.target == sushy.BOOT_SOURCE_TARGET_HDD  # the override was one-time


def test_redfish_power_off_and_on_keeps_the_disk(lab: LabHandle) -> None:
    import sushy

    node = "gpu001"
    assert lab.ssh(node, "echo kept > /root/disk-marker").returncode == 0
    url = lab.status.redfish[node]  # type: ignore[attr-defined]
    root, _, path = url.partition("/redfish/v1")
    system = sushy.Sushy(f"{root}/redfish/v1", username="lab", password="lab").get_system(
        "/redfish/v1" + path
    )
    system.reset_system(sushy.RESET_FORCE_OFF)
    deadline = time.monotonic() + 60
    try:
        while lab.ssh(node, "true", timeout=10).returncode == 0:
            assert time.monotonic() < deadline, "node still reachable after ForceOff"
            time.sleep(1)
        system.refresh()
        assert system.power_state == sushy.POWER_STATE_OFF
        # The lab's agent records the power state just after it stops the node: poll for it.
        while _power_state(lab, node) != "Off":
            assert time.monotonic() < deadline, "the lab never recorded the node as Off"
            time.sleep(0.5)
    finally:
        # Power the node back on whatever happened, so later tests find the whole lab.
        system.reset_system(sushy.RESET_ON)
    result = None
    while time.monotonic() < deadline + 30:
        time.sleep(1)
        result = lab.ssh(node, "cat /root/disk-marker", timeout=10)
        if result.returncode == 0:
            break
    assert result is not None and result.stdout.strip() == "kept"
    while _power_state(lab, node) != "On":
        assert time.monotonic() < deadline + 60, "the lab never recorded the node as On"
        time.sleep(0.5)


def _power_state(lab: LabHandle, node: str) -> str:
    by_name = {n.name: n for n in lifecycle.status(lab.config).nodes}  # type: ignore[arg-type]
    return str(by_name[node].power_state)


def test_a_second_up_reports_and_changes_nothing(lab: LabHandle) -> None:
    from cluster_lab.state import load_state

    before = load_state(lab.config.state_file)  # type: ignore[attr-defined]
    again = lifecycle.up(lab.config, lab.spec)  # type: ignore[arg-type]
    after = load_state(lab.config.state_file)  # type: ignore[attr-defined]
    assert again.already_running
    assert before is not None and after is not None
    assert (before.nodes, before.services) == (after.nodes, after.services)


def test_status_json_lists_nodes_services_and_faults(lab: LabHandle) -> None:
    import json

    env = {**os.environ, "CLUSTER_TOOL_LAB_DIR": str(lab.config.lab_dir)}  # type: ignore[attr-defined]
    result = subprocess.run(
        [*CLI, "lab", "status", "--json"], capture_output=True, text=True, env=env, check=False
    )
    assert result.returncode == 0, result.stderr
    data = json.loads(result.stdout)
    assert [(n["name"], n["role"]) for n in data["nodes"]][:2] == [
        ("head", "head"),
        ("gpu001", "gpu"),
    ]
    assert data["nodes"][1]["address"] == f"{TEST_SUBNET}.11"
    assert all(data["services"].values()) and {"ibsim", "repo"} <= set(data["services"])
    assert data["faults"] == []


def test_lab_ssh_runs_a_command_on_a_node(lab: LabHandle) -> None:
    env = {**os.environ, "CLUSTER_TOOL_LAB_DIR": str(lab.config.lab_dir)}  # type: ignore[attr-defined]
    result = subprocess.run(
        [*CLI, "lab", "ssh", "gpu001", "cat", "/etc/hostname"],
        capture_output=True,
        text=True,
        env=env,
        check=False,
    )
    assert (result.returncode, result.stdout.strip()) == (0, "gpu001")


def test_up_after_a_crash_cleans_up_the_leftovers_and_rebuilds(lab: LabHandle) -> None:
    import signal

    from cluster_lab.state import load_state

    state_file = lab.config.state_file  # type: ignore[attr-defined]
    before = load_state(state_file)
    assert before is not None
    # A crash: the fabric simulator and a node die without `lab down`.
    victims = [before.service_ref("ibsim"), before.node_ref("gpu001")]
    for ref in victims:
        assert ref is not None
        os.kill(ref.pid, signal.SIGKILL)
    # SIGKILL lands asynchronously; a crash is over once the processes are gone.
    deadline = time.monotonic() + 10
    while any(ref.alive() for ref in victims if ref) and time.monotonic() < deadline:
        for ref in victims:
            if ref:
                with contextlib.suppress(ChildProcessError):
                    os.waitpid(ref.pid, os.WNOHANG)
        time.sleep(0.05)
    status = lifecycle.up(lab.config, lab.spec)  # type: ignore[arg-type]
    after = load_state(state_file)
    assert not status.already_running and status.running, (
        [k for k, v in status.services.items() if not v],
        [n.name for n in status.nodes if not n.running],
    )
    assert after is not None and after.nodes["gpu001"] != before.nodes["gpu001"]
    mine = f"{TEST_PREFIX}-"
    netns = sorted(p.name for p in Path("/run/netns").iterdir() if p.name.startswith(mine))
    assert netns == sorted(f"{mine}{n}" for n in [*lab.node_names, "fabric"])
    for name in lab.node_names:
        assert lab.ssh(name, "hostname").stdout.strip() == name


# --- errors: one line, exit 2, nothing built ----------------------------------------------------


def _other_config(tmp_path: Path, subnet: str) -> LabConfig:
    return LabConfig(
        lab_dir=tmp_path / "lab",
        prefix="cte",
        bridge="ctelab0",
        subnet=ipaddress.IPv4Network(subnet),
    )


def test_up_as_non_root_is_a_one_line_usage_error(tmp_path: Path) -> None:
    require_root()  # to switch to `nobody` we must be root
    if shutil.which("setpriv") is None:
        pytest.skip("setpriv (util-linux) is missing")
    tmp_path.chmod(0o777)
    env = {"PATH": "/usr/bin:/bin", "CLUSTER_TOOL_LAB_DIR": str(tmp_path / "lab"), "HOME": "/tmp"}
    result = subprocess.run(
        ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", *CLI, "lab", "up"],
        capture_output=True,
        text=True,
        env=env,
        check=False,
    )
    assert result.returncode == 2
    assert result.stderr.strip().splitlines() == [
        "cluster-tool: the lab needs root (namespaces, mounts, a bridge); run with sudo"
    ]


def test_up_on_an_address_range_in_use_fails_cleanly(lab: LabHandle, tmp_path: Path) -> None:
    config = _other_config(tmp_path, f"{TEST_SUBNET}.0/24")  # the session lab holds this range
    spec = tmp_path / "lab.yml"
    spec.write_text(
        (REPO / "examples" / "lab.yml").read_text().replace("10.77.0.", f"{TEST_SUBNET}.")
    )
    from cluster_tool.errors import UsageError

    taken = f"{TEST_SUBNET}.0/24 is already in use on {TEST_PREFIX}lab0".replace(".", r"\.")
    try:
        with pytest.raises(UsageError, match=taken):
            lifecycle.up(config, spec)
    finally:
        lifecycle.down(config)  # should there be anything to take down, never leak a lab
    assert leftovers(config) == []
    assert not config.state_file.exists()
