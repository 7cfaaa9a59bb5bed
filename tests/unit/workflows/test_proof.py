"""A node enters service only on proof (issue 21, findings 1-7): each test reproduces one way an
unproven node got through, through the workflows' own entry points and fakes."""

from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from cluster_tool.admission import Door
from cluster_tool.ansible.runner import PlaybookResult
from cluster_tool.checks.node import check_node, expectations_for
from cluster_tool.cli import main
from cluster_tool.drains import Owner
from cluster_tool.findings import Finding
from cluster_tool.remote.fanout import ProbeOutput, Target, TransportError
from cluster_tool.report import render_html
from cluster_tool.spec import load_spec
from cluster_tool.verdicts import NOT_RUN, VERDICTS, GateProof, NodeVerdict, judge_run
from cluster_tool.workflows.bringup import BringupOptions, GateOutcome, run_bringup
from cluster_tool.workflows.collect import junit_xml, run_validate
from cluster_tool.workflows.live import run_summary
from cluster_tool.workflows.runs import RunRecord
from cluster_tool.workflows.validate import AfterMaintenanceDeps, run_after_maintenance
from tests.conftest import REPO
from tests.unit.workflows.fakes import SlurmCluster, admin_slurm, gate_proof
from tests.unit.workflows.test_bringup import NODES, Gate, Validation, _deps
from tests.unit.workflows.test_live_ladder import ladder

LAB = REPO / "examples" / "lab.yml"
FLEET = Finding(
    check="nccl.fleet",
    expected="failures on a few nodes, not a large share of the fleet",
    observed="3 of 4 screen pairs failed",
    message="3 of 4 screen pairs failed: suspect the fabric; nothing drained",
)


class FleetGate(Gate):
    """The gate's safety stop: too many pairs failed, no node named (a degraded spine)."""

    def __call__(self, nodes: Sequence[str]) -> GateOutcome:
        super().__call__(nodes)
        # Every single-node job passed; the pair screen failed everywhere.
        return GateOutcome([FLEET], [], GateProof(list(nodes)))


# --- 1: a gate failure that names no node admits nobody ----------------------------------------


def test_a_fleet_stop_that_names_no_node_holds_every_gated_node_drained_with_its_id() -> None:
    slurm = SlurmCluster(NODES, down=set(NODES))
    deps, _ = _deps(slurm, gate=FleetGate(slurm))
    result = run_bringup(NODES, deps, BringupOptions())
    assert result.exit_code == 1
    assert {n: v["verdict"] for n, v in result.nodes.items()} == dict.fromkeys(NODES, "held")
    assert set(slurm.drained) == set(NODES)
    assert all(r.startswith("cluster-tool: nccl.fleet: ") for r in slurm.drained.values())
    admit = next(p for p in result.phases if p.name == "admit")
    assert admit.status == "failed" and admit.detail is not None
    assert admit.detail.startswith("0 resumed")


def test_validate_after_admit_holds_the_nodes_a_fleet_stop_covers() -> None:
    slurm = SlurmCluster(NODES, drained=dict.fromkeys(NODES[:3], "maintenance"))
    deps = AfterMaintenanceDeps(
        fabric=lambda: Validation.of([], health=False),
        health=lambda nodes: Validation.of(nodes),
        gate=FleetGate(slurm),
        slurm=admin_slurm(slurm),
    )
    result = run_after_maintenance(NODES[:3], deps, admit=True)
    assert result.exit_code == 1
    assert {v["verdict"] for v in result.nodes.values()} == {"held"}
    assert all("nccl.fleet" in slurm.drained[n] for n in NODES[:3])


def test_retry_failed_finds_the_held_nodes(tmp_path: Path) -> None:
    from cluster_tool.workflows.runs import last_failed

    slurm = SlurmCluster(NODES, down=set(NODES))
    deps, _ = _deps(slurm, gate=FleetGate(slurm))
    result = run_bringup(NODES, deps, BringupOptions())
    record = RunRecord.create(tmp_path, "bringup", {"spec": str(LAB.resolve())})
    summary = run_summary(
        command="bringup", record=record, inputs={}, phases=result.phases,
        findings=result.findings, verdicts=result.nodes, run=result.run, cluster=None,
        health_nodes=NODES, fabric_checked=True,
    )  # fmt: skip
    record.finish(summary, result.findings)
    assert last_failed(tmp_path, LAB) == NODES


def test_a_lone_node_is_proven_with_a_partner_from_service_and_admitted() -> None:
    slurm = SlurmCluster(NODES, drained={"gpu002": "cluster-tool: fabric.swapped: healed since"})
    deps, gate = _deps(slurm)
    result = run_bringup(NODES, deps, BringupOptions(limit="gpu002"))
    assert gate.ran_on == ["gpu002", "gpu001"], "gpu001 is in service: the pair's partner"
    assert result.nodes["gpu002"]["verdict"] == "pass" and "gpu002" not in slurm.drained
    assert "gpu001" not in result.nodes, "the partner is not judged, only trusted"


def test_a_lone_node_failing_with_its_partner_from_service_is_the_one_blamed() -> None:
    slurm = SlurmCluster(NODES, drained={"gpu002": "cluster-tool: fabric.swapped: healed since"})

    class PairFails(Gate):
        def __call__(self, nodes: Sequence[str]) -> GateOutcome:
            super().__call__(nodes)
            pair = Finding(check="nccl.pair", node=None, component="job gpu002 + gpu001",
                           message="gpu002 + gpu001: 90 GB/s < 150 GB/s")  # fmt: skip
            return GateOutcome([pair], [], GateProof(list(nodes)))

    deps, _ = _deps(slurm, gate=PairFails(slurm))
    result = run_bringup(NODES, deps, BringupOptions(limit="gpu002"))
    assert result.nodes["gpu002"]["verdict"] == "fail"
    assert slurm.drained["gpu002"].startswith("cluster-tool: nccl.pair")
    assert "gpu001" not in slurm.drained


# --- 2: the run verdict counts failed phases ---------------------------------------------------


def test_a_converge_that_reached_no_host_is_no_pass_anywhere(tmp_path: Path) -> None:
    slurm = SlurmCluster(NODES, down=set(NODES))
    deps, _ = _deps(slurm)

    def converge(**_: object) -> PlaybookResult:
        return PlaybookResult("site.yml", "failed", 4, {}, [])  # preflight stopped the play

    deps.converge = converge  # type: ignore[assignment]
    result = run_bringup(NODES, deps, BringupOptions())
    record = RunRecord.create(tmp_path, "bringup", {})
    summary = run_summary(
        command="bringup", record=record, inputs={}, phases=result.phases,
        findings=result.findings, verdicts=result.nodes, run=result.run, cluster=None,
        health_nodes=[], fabric_checked=False,
    )  # fmt: skip
    assert result.exit_code == summary.exit_code == 1
    assert summary.verdict != "pass"
    assert not any(v["verdict"] == "pass" for v in summary.nodes.values())
    assert summary.headline.startswith(summary.verdict.upper())
    page = render_html(summary.to_json(), [])
    shown = re.search(r'id="verdict">([^<]*)<', page)
    assert shown is not None and shown.group(1).startswith(summary.verdict.upper())


def test_a_check_mode_run_that_changes_nothing_passes_and_admits_nothing() -> None:
    slurm = SlurmCluster(NODES)
    deps, gate = _deps(slurm)
    result = run_bringup(NODES, deps, BringupOptions(check=True))
    assert result.exit_code == 0, result.run.headline
    assert gate.ran_on == [] and not any("state=resume" in c for c in slurm.calls)


# --- 3: JUnit tells a check that did not run from one that passed -----------------------------


class Unreachable:
    def run(self, target: Target, script: str, timeout: float) -> tuple[int, bytes, bytes]:
        raise TransportError("ssh: connect to host 10.77.0.12 port 22: No route to host")


def test_an_unreachable_nodes_checks_are_skipped_in_junit_never_passed() -> None:
    cluster = load_spec(LAB)
    result = run_validate(
        cluster, health=True, fabric=False, nodes=["gpu002"], transport=Unreachable(), dcgm=False
    )
    xml = junit_xml(result)
    cases = re.findall(r'<testcase classname="gpu002" name="([^"]+)">\s*<(\w+)', xml)
    kinds = dict(cases)
    assert kinds["os.unreachable"] == "failure"
    assert kinds["gpu.ecc"] == kinds["gpu.dcgm"] == kinds["gpu.xid"] == "skipped"
    passed = re.findall(r'<testcase classname="gpu002" name="([^"]+)">\s*</testcase>', xml)
    assert passed == [], f"reported as passed though they never ran: {passed}"


# --- 4: validate --after-maintenance honours or refuses its options ---------------------------


@pytest.mark.parametrize(
    ("extra", "words"),
    [
        (["--from", "CAPTURE"], "--no-gate"),
        (["--from", "CAPTURE", "--no-gate", "--admit"], "--admit"),
        (["--health"], "--health/--fabric"),
        (["--fabric"], "--health/--fabric"),
        (["--from", "CAPTURE", "--save", "OUT", "--no-gate"], "exclude"),
    ],
)
def test_validate_after_maintenance_refuses_what_it_cannot_honour(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    extra: list[str],
    words: str,
) -> None:
    args = [a.replace("CAPTURE", str(tmp_path)).replace("OUT", str(tmp_path / "o")) for a in extra]
    runs = tmp_path / "runs"
    monkeypatch.setenv("CLUSTER_TOOL_RUNS_DIR", str(runs))
    code = main(["validate", str(LAB), "--after-maintenance", "--nodes", "gpu001", *args])
    assert code == 2
    err = capsys.readouterr().err.strip()
    assert words in err and len(err.splitlines()) == 1
    assert not runs.exists(), "nothing is recorded for refused input"


def test_validate_after_maintenance_from_a_capture_goes_nowhere_and_writes_junit(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from cluster_tool.remote import fanout

    cluster = load_spec(LAB)
    # A capture in which nothing answered: replaying it must not dial anybody.
    down = run_validate(cluster, health=True, fabric=True, transport=Unreachable(), dcgm=False)
    fanout.save_capture(tmp_path / "cap", down.results)

    def no_ssh(*_a: object, **_k: object) -> None:
        raise AssertionError("--from went over SSH")

    monkeypatch.setattr(fanout, "collect", no_ssh)
    monkeypatch.setenv("CLUSTER_TOOL_RUNS_DIR", str(tmp_path / "runs"))
    code = main(
        ["validate", str(LAB), "--after-maintenance", "--nodes", "gpu001", "--no-gate",
         "--from", str(tmp_path / "cap"), "--junit", str(tmp_path / "j.xml"), "--no-dcgm"]
    )  # fmt: skip
    assert code == 3  # the capture says the hosts were unreachable
    xml = (tmp_path / "j.xml").read_text()
    assert 'name="os.unreachable"' in xml and "<skipped" in xml


# --- 5 and 6: the re-image ladder -------------------------------------------------------------


def test_a_reimaged_node_with_no_partner_stays_out_as_gate_unproven(tmp_path: Path) -> None:
    from tests.unit.workflows.test_live_ladder import LadderOnly

    slurm = SlurmCluster(["gpu001", "gpu002"], drained={"gpu002": "cluster-tool reimage: x"})
    live = LadderOnly(
        cluster=load_spec(LAB),
        inventory=tmp_path,
        record=RunRecord.create(tmp_path, "reimage", {}),
        slurm=admin_slurm(slurm),
    )
    live.gate_answer = []
    found = live.node_ladder("gpu002", None, Door(live.slurm, Owner.REIMAGE)).findings
    errors = [f for f in found if f.fails]
    assert [f.check for f in errors] == ["gate.unproven"]
    assert errors[0].node == "gpu002" and "gpu002" in slurm.drained


def test_the_ladder_leaves_the_node_drained_so_admission_resumes_it_exactly_once(
    tmp_path: Path,
) -> None:
    findings, slurm = ladder(tmp_path, [])
    assert not any(f.fails for f in findings)
    assert slurm.drained.get("gpu002", "").startswith("cluster-tool reimage")
    admin_slurm(slurm).resume(["gpu002"])  # what admission does; Slurm refused a second resume
    assert "gpu002" not in slurm.drained


# --- 7: a check that could not run is a finding, and the node is unknown ---------------------


def test_an_unreadable_kernel_log_is_an_error_and_the_node_is_not_passed() -> None:
    cluster = load_spec(LAB)
    expect = expectations_for(cluster, "gpu001")
    found = check_node(expect, {"kernel-log": ProbeOutput(1, "", "dmesg: read kernel buffer")})
    log = [f for f in found if f.check == "os.kernel-log"]
    assert log and log[0].severity == "error"


def test_empty_port_counters_are_an_error_that_leaves_every_node_unknown() -> None:
    from cluster_tool.checks.fabric import fabric_findings
    from cluster_tool.fabric.plan import cabling_plan, switch_links
    from cluster_tool.remote.fanout import HostResult
    from tests.unit.checks.fabric_text import FabricText

    cluster = load_spec(LAB)
    fabric = FabricText.from_plan(cabling_plan(cluster), switch_links(cluster), speed="HDR")
    result = HostResult(
        "head",
        outputs={
            "ibnetdiscover": ProbeOutput(0, fabric.text(), ""),
            "ibqueryerrors": ProbeOutput(0, "", ""),
        },
    )
    outputs = result.outputs
    found = fabric_findings(
        cluster, outputs["ibnetdiscover"], outputs["ibqueryerrors"], host=result.host
    )
    unread = [f for f in found if f.check == "ib.counters-unread"]
    assert unread and unread[0].severity == "error"
    from cluster_tool.verdicts import FABRIC, GATE_SINGLE, HEALTH, Proof, judge_nodes

    proof = Proof(passed={n: {HEALTH, FABRIC, GATE_SINGLE} for n in NODES})
    proof.add_job(NODES)
    verdicts = judge_nodes(NODES, found, proof)
    assert {v.verdict for v in verdicts.values()} == {"unknown"}


# --- one verdict for the run -------------------------------------------------------------------

CHECKS = ["gpu.ecc", "nccl.fleet", "fabric.swapped", *sorted(NOT_RUN)]


@given(
    phases=st.lists(st.sampled_from(["passed", "failed", "skipped"]), max_size=4),
    found=st.lists(
        st.tuples(
            st.sampled_from(CHECKS),
            st.sampled_from(["error", "warning"]),
            st.sampled_from([None, "gpu001", "gpu002", "head"]),
        ),
        max_size=5,
    ),
    nodes=st.dictionaries(st.sampled_from(["gpu001", "gpu002"]), st.sampled_from(VERDICTS)),
)
def test_exit_code_summary_and_headline_never_disagree(
    phases: list[str], found: list[tuple[str, str, str | None]], nodes: dict[str, str]
) -> None:
    findings = [Finding(check=c, severity=s, node=n, message="m") for c, s, n in found]  # type: ignore[arg-type]
    verdicts = {n: NodeVerdict(v) for n, v in nodes.items()}  # type: ignore[arg-type]
    run = judge_run(
        [{"name": f"p{i}", "status": s} for i, s in enumerate(phases)], findings, verdicts
    )
    assert (run.exit_code == 0) == (run.verdict == "pass")
    assert run.headline.split(" ")[0] == run.verdict.upper()
    if run.verdict == "pass":
        assert "failed" not in phases
        assert not any(f.fails for f in findings)
        assert all(v == "pass" for v in nodes.values())
    if any(f.fails and f.check == "os.unreachable" for f in findings):
        assert run.exit_code == 3
    elif run.verdict != "pass":
        assert run.exit_code == 1


def test_gate_proof_fake_matches_the_real_gates_shape() -> None:
    # The fakes above report proof as the real ladder does (GateResult.proof).
    proof = gate_proof(["a", "b", "c"], [Finding(check="nccl.single", node="b", message="m")])
    assert proof.to_json() == {"single": ["a", "c"], "jobs": [["a", "c"]]}
