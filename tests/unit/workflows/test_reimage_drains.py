"""Re-image and the drains it did not write (issue 30, items 1 and 2): a drain timeout leaves a
node held by someone else, and their reason, alone; a resumed run re-reads each node's drain and
does not reuse a proof from before the crash over a drain set after it; the operator's
`--admit` lifts the drain a node had when the run began, and only that one.

Against 6a54dd4, the first two tests fail: the re-image wrote `cluster-tool reimage: in
progress` over the watcher's and the operator's reasons and then resumed the nodes; the third
fails: `--resume` resumed the node over the operator's drain on the journaled `ladder done`.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from cluster_tool.drains import REIMAGE_REASON
from cluster_tool.workflows.reimage import ReimageOptions, run_reimage
from cluster_tool.workflows.runs import RunRecord
from tests.unit.workflows.fakes import EmulatedBmcs, SlurmCluster
from tests.unit.workflows.test_reimage import NODES, OPTS, Killed, _deps, _record

WATCH_XID = "cluster-tool watch: gpu.xid GPU0: gpu001 GPU0: Xid 79: GPU has fallen off the bus"
RMA = "RMA: bad PSU (ticket 4411)"


@pytest.mark.parametrize("reason", [WATCH_XID, RMA])
def test_a_drain_timeout_leaves_anothers_drain_and_reason_alone(
    tmp_path: Path, reason: str
) -> None:
    # gpu001 is draining (a job still runs on it) for someone else's reason when the re-image
    # reaches it; the job outlives the drain timeout.
    cluster = SlurmCluster(NODES, jobs={"7003": ("gpu001", 10_000)}, drained={"gpu001": reason})
    bmcs = EmulatedBmcs(NODES)
    result = run_reimage(_record(tmp_path), [["gpu001"]], _deps(cluster, bmcs), OPTS)
    assert result.nodes["gpu001"].status == "skipped"
    assert cluster.drained.get("gpu001") == reason, "the reason that held it is still there"
    assert not [c for c in cluster.calls if "state=resume" in c]
    assert bmcs.reimaged == []


def test_a_drain_timeout_gives_a_node_it_took_from_service_back_to_its_job(
    tmp_path: Path,
) -> None:
    cluster = SlurmCluster(NODES, jobs={"7003": ("gpu001", 10_000)})
    result = run_reimage(_record(tmp_path), [["gpu001"]], _deps(cluster, EmulatedBmcs(NODES)), OPTS)
    assert result.nodes["gpu001"].status == "skipped"
    assert "gpu001" not in cluster.drained, "its own hold is taken back: it was in service"


def _killed_before_admission(tmp_path: Path, cluster: SlurmCluster) -> RunRecord:
    """A re-image of gpu001 killed after its ladder passed (journaled) and before it was
    resumed."""
    record = _record(tmp_path)
    log = record.log

    def log_then_die(step: str, status: str, **kw: object) -> None:
        if step == "admit" and status == "start":
            raise Killed()
        log(step, status, **kw)  # type: ignore[arg-type]

    record.log = log_then_die  # type: ignore[method-assign]
    with pytest.raises(Killed):
        run_reimage(record, [["gpu001"]], _deps(cluster, EmulatedBmcs(NODES)), OPTS)
    assert cluster.drained["gpu001"] == REIMAGE_REASON
    return record


def test_resume_does_not_lift_an_operators_drain_set_after_the_crash(tmp_path: Path) -> None:
    cluster = SlurmCluster(NODES)
    record = _killed_before_admission(tmp_path, cluster)
    cluster.drained["gpu001"] = RMA  # the operator, while the run was dead
    log: list[str] = []
    again = run_reimage(
        RunRecord.open(record.path),
        [["gpu001"]],
        _deps(cluster, EmulatedBmcs(NODES), log=log),
        OPTS,
    )
    assert cluster.drained.get("gpu001") == RMA
    assert not [c for c in cluster.calls if "state=resume" in c]
    assert again.nodes["gpu001"].status == "skipped"
    refused = [f for f in again.findings if f.check == "admission.refused"]
    assert refused and RMA in (refused[0].observed or "")


def test_resume_proves_again_a_node_the_watcher_drained_after_the_crash(tmp_path: Path) -> None:
    cluster = SlurmCluster(NODES)
    record = _killed_before_admission(tmp_path, cluster)
    cluster.drained["gpu001"] = WATCH_XID  # the watcher, while the run was dead
    log: list[str] = []
    again = run_reimage(
        RunRecord.open(record.path),
        [["gpu001"]],
        _deps(cluster, EmulatedBmcs(NODES), log=log),
        OPTS,
    )
    assert "ladder gpu001 with None" in log, "the journaled proof predates the drain"
    assert again.nodes["gpu001"].status == "passed"
    assert "gpu001" not in cluster.drained


def test_resume_with_the_same_drain_admits_on_the_journaled_proof(tmp_path: Path) -> None:
    cluster = SlurmCluster(NODES)
    record = _killed_before_admission(tmp_path, cluster)
    log: list[str] = []
    again = run_reimage(
        RunRecord.open(record.path),
        [["gpu001"]],
        _deps(cluster, EmulatedBmcs(NODES), log=log),
        OPTS,
    )
    assert not [e for e in log if e.startswith("ladder")], "proven before the crash"
    assert again.nodes["gpu001"].status == "passed" and "gpu001" not in cluster.drained


def test_the_operators_admit_lifts_the_drain_the_node_had_when_the_run_began(
    tmp_path: Path,
) -> None:
    for admit, kept in ((False, True), (True, False)):
        cluster = SlurmCluster(NODES, drained={"gpu001": RMA})
        opts = ReimageOptions(batch=1, per_su=1, poll_s=1, drain_timeout_s=60, admit=admit)
        result = run_reimage(
            _record(tmp_path / str(admit)), [["gpu001"]], _deps(cluster, EmulatedBmcs(NODES)), opts
        )
        assert ("gpu001" in cluster.drained) is kept
        assert result.nodes["gpu001"].status == ("skipped" if kept else "passed")
        if kept:
            assert cluster.drained["gpu001"] == RMA, "re-imaged, proven, still theirs"
