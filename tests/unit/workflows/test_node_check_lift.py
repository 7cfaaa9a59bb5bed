"""node-check lifts its own drain only on what it re-proved this time (issue 30, item 4): a drain
written by `node-check --slurm --dcgm` for a DCGM failure is not lifted by the periodic health
check, which runs without DCGM; a `gpu.xid` drain is not lifted once the Xid line has rotated out
of the kernel log or the node rebooted (an absent line proves nothing); a drain for a state the
node reads afresh (ECC counters) is lifted once that check ran clean.

Against 6a54dd4 the first two fail: node-check resumed the node as soon as a run found no error.
"""

from __future__ import annotations

from cluster_tool.drains import health_reason
from cluster_tool.findings import Finding
from cluster_tool.registry import NODE_CHECKS
from cluster_tool.workflows.node_check import slurm_health_action
from tests.unit.workflows.fakes import SlurmCluster, admin_slurm

NODE = "gpu003"


def _drained_by_node_check(finding: Finding) -> tuple[SlurmCluster, object]:
    cluster = SlurmCluster([NODE])
    slurm = admin_slurm(cluster)
    reason = health_reason(NODE, [finding])
    assert reason is not None
    assert slurm_health_action(NODE, [finding], slurm).action == "drain"
    assert cluster.drained[NODE] == reason
    return cluster, slurm


DCGM = Finding(
    check="gpu.dcgm",
    node=NODE,
    component="GPU2",
    expected="Pass",
    observed="Fail",
    message=f"{NODE} GPU2: dcgmi diag memory: Fail",
)
XID = Finding(
    check="gpu.xid",
    node=NODE,
    component="GPU0",
    expected="no Xid",
    observed="Xid 79",
    message=f"{NODE} GPU0: Xid 79: GPU has fallen off the bus",
)
ECC = Finding(
    check="gpu.ecc",
    node=NODE,
    component="GPU3",
    expected="<= 0",
    observed="2",
    message=f"{NODE} GPU3: volatile uncorrectable 2",
)


def test_a_dcgm_drain_survives_the_periodic_check_without_dcgm() -> None:
    cluster, slurm = _drained_by_node_check(DCGM)
    # Without a word on what ran, nothing is re-proven (6a54dd4 resumed the node here).
    assert slurm_health_action(NODE, [], slurm).action == "kept"  # type: ignore[arg-type]
    assert NODE in cluster.drained
    # The periodic HealthCheckProgram: every probe but DCGM's diag ran, all clean.
    periodic = {"gpu.dcgm": "dcgmi-diag not collected"}
    action = slurm_health_action(NODE, [], slurm, not_run=periodic)  # type: ignore[arg-type]
    assert action.action == "kept"
    assert "gpu.dcgm did not run" in (action.why or "")
    assert cluster.drained[NODE].startswith("cluster-tool: gpu.dcgm GPU2")
    # DCGM run again, clean: node-check's own drain comes off.
    again = slurm_health_action(NODE, [], slurm, not_run={})  # type: ignore[arg-type]
    assert again.action == "resume"
    assert NODE not in cluster.drained


def test_an_xid_drain_is_not_lifted_by_a_clean_kernel_log() -> None:
    cluster, slurm = _drained_by_node_check(XID)
    assert slurm_health_action(NODE, [], slurm).action == "kept"  # type: ignore[arg-type]
    for not_run in (None, {}):
        action = slurm_health_action(NODE, [], slurm, not_run=not_run)  # type: ignore[arg-type]
        assert action.action == "kept", action
        assert cluster.drained[NODE].startswith("cluster-tool: gpu.xid GPU0 Xid 79")
    assert not [c for c in cluster.calls if "state=resume" in c]


def test_every_check_a_drain_names_must_be_re_proven() -> None:
    # Two errors: the reason names both ids, so a lift must re-prove the DCGM one too.
    cluster = SlurmCluster([NODE])
    slurm = admin_slurm(cluster)
    assert slurm_health_action(NODE, [ECC, DCGM], slurm).action == "drain"
    assert cluster.drained[NODE].endswith("(+1 more: gpu.dcgm)"), cluster.drained[NODE]
    periodic = {"gpu.dcgm": "dcgmi-diag not collected"}
    assert slurm_health_action(NODE, [], slurm, not_run=periodic).action == "kept"  # type: ignore[arg-type]
    assert slurm_health_action(NODE, [], slurm, not_run={}).action == "resume"  # type: ignore[arg-type]


def test_a_state_the_node_reads_afresh_is_lifted_once_that_check_ran_clean() -> None:
    cluster, slurm = _drained_by_node_check(ECC)
    unrun = {c: "nvidia-smi-q not collected" for c in NODE_CHECKS if c.startswith("gpu.")}
    assert slurm_health_action(NODE, [], slurm, not_run=unrun).action == "kept"  # type: ignore[arg-type]
    assert slurm_health_action(NODE, [], slurm, not_run={}).action == "resume"  # type: ignore[arg-type]
    assert NODE not in cluster.drained


def test_an_older_node_check_drain_that_hides_its_other_ids_is_left() -> None:
    cluster = SlurmCluster(
        [NODE], drained={NODE: "cluster-tool: gpu.ecc GPU3 volatile 2 (+2 more)"}
    )
    slurm = admin_slurm(cluster)
    action = slurm_health_action(NODE, [], slurm, not_run={})  # type: ignore[arg-type]
    assert action.action == "kept" and "cannot tell" in (action.why or "")


def test_the_periodic_check_lifts_its_own_ecc_drain_with_the_probes_it_runs() -> None:
    """Liveness beside the safety rules: the HealthCheckProgram's own run (every health probe
    but DCGM's diag, as node-check sends them (`health_probes`), read back clean) re-proves an ECC
    drain and lifts it. The not-run list is the one the real run computes from what it
    collected, so a check the periodic run can never run (a DCGM id not marked optional) would
    keep every such drain forever; the lab's HealthCheckProgram test caught exactly that."""
    from cluster_tool.probes.node import health_probes
    from cluster_tool.registry import node_checks_not_run

    cluster, slurm = _drained_by_node_check(ECC)
    collected = {p.name for p in health_probes(dcgm=False)}
    not_run = node_checks_not_run(NODE, [], collected)
    assert set(not_run) == {"gpu.dcgm", "gpu.dcgm-incomplete"}
    action = slurm_health_action(NODE, [], slurm, not_run=not_run)  # type: ignore[arg-type]
    assert action.action == "resume", action
    assert NODE not in cluster.drained
