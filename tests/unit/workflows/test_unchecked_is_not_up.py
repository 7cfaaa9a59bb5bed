"""What was not checked is not shown as passed (issue 30, items 7 and 9a).

Item 7: with the subnet manager's host unreachable, the run asked for the fabric but judged no
cable: the validation says so (`fabric_checked` false), so the report's rail x node grid shows
`unknown`, not a green `up`, and the fabric stage of the proof is not given. Against 6a54dd4 the
validation reported the fabric as checked because it had been asked for.

Item 9a: one unreachable host that is not a GPU node (a login node) says nothing about the GPU
nodes. Against 6a54dd4 it made every GPU node `unknown`.
"""

from __future__ import annotations

from pathlib import Path

from cluster_tool.fabric.links import link_matrix
from cluster_tool.fabric.plan import plan_for
from cluster_tool.findings import Finding
from cluster_tool.remote.fanout import HostResult, save_capture
from cluster_tool.spec import load_spec
from cluster_tool.verdicts import FABRIC, GATE_SINGLE, HEALTH, Proof, judge_nodes
from cluster_tool.workflows.live import Live
from cluster_tool.workflows.runs import RunRecord
from tests.conftest import REPO
from tests.unit.workflows.fakes import SlurmCluster, admin_slurm

LAB = REPO / "examples" / "lab.yml"


def test_a_fabric_asked_for_but_not_reached_is_not_checked(tmp_path: Path) -> None:
    cluster = load_spec(LAB)
    # A capture of gpu001 alone: the subnet manager's host (head) did not answer.
    save_capture(tmp_path / "cap", {"gpu001": HostResult("gpu001", {}, probes=())})
    live = Live(
        cluster,
        tmp_path,
        RunRecord.create(tmp_path / "runs", "validate-after", {}),
        admin_slurm(SlurmCluster(["gpu001"])),
        replay=tmp_path / "cap",
    )
    validation = live.validate(["gpu001"])
    assert cluster.fabric.subnet_manager in validation.unreachable
    assert validation.fabric_checked is False
    grid = link_matrix(
        plan_for(cluster), ["gpu001"], validation.findings, validation.fabric_checked
    )
    assert grid and {cell["state"] for cell in grid} == {"unknown"}


def test_an_unreachable_login_node_leaves_the_gpu_nodes_verdicts_alone() -> None:
    nodes = ["gpu001", "gpu002"]
    proof = Proof(passed={n: {HEALTH, FABRIC, GATE_SINGLE} for n in nodes})
    proof.add_job(nodes)
    login = Finding(
        check="os.unreachable",
        node="login01",
        expected="reachable over SSH",
        observed="Connection timed out",
        message="login01: unreachable over SSH",
    )
    verdicts = judge_nodes(nodes, [login], proof)
    assert {n: v.verdict for n, v in verdicts.items()} == dict.fromkeys(nodes, "pass")
    # The subnet manager's tools failing there still leaves every cable unjudged.
    unread = Finding(
        check="fabric.discover",
        node="head",
        component="ibnetdiscover",
        message="head: ibnetdiscover failed (exit 1)",
    )
    assert {v.verdict for v in judge_nodes(nodes, [unread], proof).values()} == {"unknown"}
