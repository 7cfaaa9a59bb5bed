"""Link flaps and port counters judged as deltas, in the converged lab (issue 20).

`lab inject link-flap` takes a cable down and back every few seconds: the node's kernel log and
ibsim's LinkDownedCounter at both ends count the flaps. Node health names the port with its
cable; `validate --after-maintenance` judges the counters as what changed over its gate, so a
node whose leaf port counted a power cycle before the run is not failed for it.

And the trap of issue 18 (finding 2), before any bring-up: a node rebooted through its BMC
counts a LinkDowned at both ends of each of its cables, as real hardware does, and a plain
`validate --fabric` afterwards still passes, reporting the count as history.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import REPO
from tests.lab.conftest import Converged, LabHandle


def _leaf(converged: Converged, node: str, hca: str) -> tuple[str, int]:
    from cluster_lab import model as hw

    model = hw.load(converged.lab.config.model_dir)  # type: ignore[attr-defined]
    cable = next(h for h in model.node(node).hcas if h.device == hca)
    return cable.leaf, cable.leaf_port


def _set_link_downed(converged: Converged, end: str, port: int, value: int) -> None:
    converged.lab.ibsim(f'PerformanceSet "{end}"[{port}] PortCounters.LinkDownedCounter={value}')


def _reboot_through_the_bmc(lab: LabHandle, node: str) -> None:
    """Redfish ForceRestart, as an operator's reboot of a hung node; back when the lab runs a
    new instance of the node (its supervisor in the lab state) and sshd answers."""
    import sushy

    from cluster_lab.state import load_state

    def instance() -> object:
        state = load_state(lab.config.state_file)  # type: ignore[attr-defined]
        return state.nodes.get(node) if state is not None else None

    url = lab.status.redfish[node]  # type: ignore[attr-defined]
    root, _, path = url.partition("/redfish/v1")
    system = sushy.Sushy(f"{root}/redfish/v1", username="lab", password="lab").get_system(
        "/redfish/v1" + path
    )
    before = instance()
    assert before is not None
    system.reset_system(sushy.RESET_FORCE_RESTART)
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline:
        time.sleep(1)
        now = instance()
        if now not in (None, before) and lab.ssh(node, "true", timeout=10).returncode == 0:
            return
    raise AssertionError(f"{node} did not come back from its BMC restart in 90 s")


def test_a_node_rebooted_through_its_bmc_passes_a_plain_fabric_check(lab: LabHandle) -> None:
    """Issue 18 finding 2: gpu002 rebooted; both ends of each of its 8 cables counted the link
    going down (ibsim, as a switch and an HCA do); `validate --fabric`, with no snapshot from
    before, is right to pass it and names each cable's count as history, not as an error."""
    node = "gpu002"
    started = time.monotonic()
    _reboot_through_the_bmc(lab, node)
    proc = subprocess.run(
        [str(REPO / ".venv" / "bin" / "cluster-tool"), "validate", "--spec", str(lab.spec),
         "--ssh-config", str(lab.ssh_config), "--fabric", "--json"],
        capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    report = json.loads(proc.stdout)
    errors = [(f["check"], f["node"], f["message"][:160]) for f in report["findings"]
              if f["severity"] == "error"]  # fmt: skip
    assert (proc.returncode, errors) == (0, []), proc.stderr[-2000:]
    history = {
        f["component"]: f
        for f in report["findings"]
        if (f["check"], f["node"]) == ("link.downed-history", node)
    }
    from cluster_lab import model as hw

    cables = hw.load(lab.config.model_dir).node(node).hcas  # type: ignore[attr-defined]
    assert sorted(history) == sorted(h.device for h in cables), report["findings"]
    for hca in cables:
        f = history[hca.device]
        assert f["severity"] == "info", f
        assert f["message"].startswith(f"{node} {hca.device} ↔ {hca.leaf} port {hca.leaf_port}: ")
        # Both ends counted the reboot, the same number of times (ibsim, read by ibqueryerrors).
        ends = dict(re.findall(r"(.+?): LinkDownedCounter (\d+)(?:; |$)", f["observed"]))
        assert set(ends) == {f"{hca.leaf} port {hca.leaf_port}", f"{node} {hca.device}"}, f
        assert len(set(ends.values())) == 1 and int(next(iter(ends.values()))) >= 1, f
    print(f"BMC reboot of {node} + validate --fabric: {time.monotonic() - started:.1f} s")


def _findings(report: dict[str, Any], node: str) -> dict[str, dict[str, Any]]:
    return {f["check"]: f for f in report.get("findings", []) if f["node"] == node}


@pytest.mark.converged
def test_a_flapping_link_is_named_with_its_cable_while_it_is_up(converged: Converged) -> None:
    node, hca = "gpu002", "mlx5_0"
    leaf, port = _leaf(converged, node, hca)
    fault = converged.inject("link-flap", node, hca, "3")
    try:
        time.sleep(4)  # the second flap
        rc, report, err = converged.run_json(
            "validate", str(converged.lab.spec), "--health", "--no-dcgm", "--nodes", node
        )
        flap = _findings(report, node).get("link.flap")
        assert flap is not None, (rc, err[-2000:], report.get("findings"))
        assert (flap["severity"], flap["component"]) == ("error", hca)
        assert flap["message"].startswith(f"{node} {hca} ↔ {leaf} port {port}: ")
        # Flapping on: up or down this second, the message says which.
        assert re.search(r"; it is (up|down) now: ", flap["message"]), flap["message"]
        # ibsim counts the same flaps at both ends of the cable.
        out = converged.lab.ssh("head", "ibqueryerrors", timeout=120)
        assert f'"{node} {hca}"' in out.stdout and "LinkDownedCounter" in out.stdout, out
    finally:
        converged.heal(fault)
        time.sleep(1.5)  # the agent's last tick
        _set_link_downed(converged, f"{node} {hca}", 1, 0)
        _set_link_downed(converged, leaf, port, 0)


@pytest.mark.converged
def test_a_power_cycled_nodes_link_downs_are_judged_as_deltas_over_the_gate(
    converged: Converged,
) -> None:
    # gpu004 came back from a power cycle in the maintenance: its leaf port counted the link
    # going down twice (a switch keeps that across the node's reboot).
    node, hca = "gpu004", "mlx5_0"
    leaf, port = _leaf(converged, node, hca)
    _set_link_downed(converged, leaf, port, 2)
    try:
        rc, report, err = converged.run_json(
            "validate", str(converged.lab.spec), "--after-maintenance", "--nodes", node,
            "--no-dcgm",
        )  # fmt: skip
        assert report.get("run_dir"), (rc, err[-2000:])
        run = Path(report["run_dir"])
        found = json.loads((run / "findings.json").read_text())
        mine = _findings(found, node)
        shown = [(f["check"], f["node"], f["message"][:200]) for f in found["findings"]]
        assert (run / "counters-before.json").is_file(), (sorted(os.listdir(run)), shown)
        assert "fabric.errors" not in mine and "link.flap" not in mine, shown
        assert mine.get("link.downed-reboot", {}).get("severity") == "info", shown
        phases = {p["name"]: p["status"] for p in report.get("phases", [])}
        assert phases.get("counters") == "passed", (phases, err[-2000:])
        assert rc == 0, (report.get("headline"), err[-2000:])
    finally:
        _set_link_downed(converged, leaf, port, 0)
