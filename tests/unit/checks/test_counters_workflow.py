"""validate --after-maintenance judges the port counters as deltas over its gate: the fabric
read before the gate is the run's snapshot (kept in the run record), the read after it is
judged against it. A node power-cycled in the maintenance (its leaf port counted the link
going down) is not failed for it; a link that goes down during the gate is a link.flap."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path

from cluster_tool.fabric.plan import cabling_plan, switch_links
from cluster_tool.remote.fanout import Target
from cluster_tool.spec import load_spec
from cluster_tool.workflows.bringup import Validation
from cluster_tool.workflows.live import Live
from cluster_tool.workflows.runs import RunRecord
from cluster_tool.workflows.validate import AfterMaintenanceDeps, run_after_maintenance
from tests.conftest import REPO
from tests.unit.checks.fabric_text import FabricText
from tests.unit.workflows.fakes import SlurmCluster, admin_slurm
from tests.unit.workflows.test_bringup import Gate

NODES = ["gpu001", "gpu002", "gpu003", "gpu004"]
LEAF = "MF0;su1-leaf-r0:MQM8700/U1"


def ibqueryerrors(link_downed: int) -> str:
    # gpu003 mlx5_0's leaf end: su1-leaf-r0 port 3 in the lab plan.
    return (
        f'Errors for 0x9c05910300000000 "{LEAF}"\n'
        f"   GUID 0x9c05910300000000 port 3: [LinkDownedCounter == {link_downed}]\n"
        "\n## Summary: 10 nodes checked, 1 bad nodes found\n"
        "##          127 ports checked, 1 ports have errors beyond threshold\n"
    )


class SubnetManager:
    """The SM host over SSH: answers the fabric probes' script, each read with the next
    ibqueryerrors text."""

    def __init__(self, fabric: str, reads: list[str]) -> None:
        self.fabric = fabric
        self.reads: Iterator[str] = iter(reads)

    def run(self, target: Target, script: str, timeout: float) -> tuple[int, bytes, bytes]:
        token = re.search(r"@@cluster-tool (\w+) ", script)
        assert token is not None
        errors = next(self.reads)
        # ibqueryerrors exits 1 when it lists a port over threshold (infiniband-diags:
        # `rc = print_summary(); if (rc) rc = 1;`).
        rc = 1 if "Errors for" in errors else 0
        out = b""
        for name, text, code in (("ibnetdiscover", self.fabric, 0), ("ibqueryerrors", errors, rc)):
            data = text.encode()
            out += f"@@cluster-tool {token[1]} {name} {code} {len(data)} 0@@\n".encode() + data
        return 0, out, b""


def after_maintenance(tmp_path: Path, reads: list[str]) -> tuple[dict[str, str], RunRecord]:
    cluster = load_spec(REPO / "examples" / "lab.yml")
    text = FabricText.from_plan(cabling_plan(cluster), switch_links(cluster), speed="HDR")
    text.model = "MQM8700"
    slurm = SlurmCluster(NODES)
    record = RunRecord.create(tmp_path, "validate-after", {})
    live = Live(
        cluster,
        tmp_path,
        record,
        admin_slurm(slurm),
        transport=SubnetManager(text.text(), reads),
        judge_deltas=True,
        rebooted=("gpu003",),
    )
    deps = AfterMaintenanceDeps(
        fabric=live.fabric,
        health=lambda nodes: Validation.of(nodes),
        gate=Gate(slurm),
        slurm=admin_slurm(slurm),
        counters=live.counters,
    )
    result = run_after_maintenance(["gpu003"], deps, others=["gpu004"])
    checks = {f.check: f.severity for f in result.findings if f.node == "gpu003"}
    checks["verdict"] = result.nodes["gpu003"]["verdict"]
    return checks, record


def test_a_node_power_cycled_in_the_maintenance_passes_with_its_link_downs(
    tmp_path: Path,
) -> None:
    checks, record = after_maintenance(tmp_path, [ibqueryerrors(2), ibqueryerrors(2)])
    assert checks == {"link.downed-reboot": "info", "verdict": "pass"}
    kept = json.loads((record.path / "counters-before.json").read_text())
    assert kept["ports"] == [{"node": LEAF, "port": 3, "counters": {"LinkDownedCounter": 2}}]


def test_a_link_that_goes_down_during_the_gate_fails_the_node_as_a_flap(tmp_path: Path) -> None:
    checks, _ = after_maintenance(tmp_path, [ibqueryerrors(2), ibqueryerrors(3)])
    assert checks == {"link.downed-reboot": "info", "link.flap": "error", "verdict": "fail"}
