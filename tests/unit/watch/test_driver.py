"""A node whose nvidia-smi cannot reach the driver is the worst state a GPU node can be in, and
the watcher acts on it (issue 30, item 8a): `gpu.driver` (error), drained and its opted-in job
requeued under the requeue policy, as any other node error; a node that does not answer, or an
nvidia-smi that fails for a reason that says nothing of the driver, stays `watch.unread`.

The messages are nvidia-smi's own, as operators posted them: "NVIDIA-SMI has failed because it
couldn't communicate with the NVIDIA driver. Make sure that the latest NVIDIA driver is installed
and running." with exit 9 (github.com/ci-for-research/self-hosted-runners#40; exit 9 is NVML's
NVML_ERROR_DRIVER_NOT_LOADED), "Failed to initialize NVML: Driver/library version mismatch",
and "Unable to determine the device handle for GPU 0000:05:00.0: GPU is lost.  Reboot the
system to recover this GPU"."""

from __future__ import annotations

import pytest

from cluster_tool.drains import Owner, owner
from cluster_tool.spec import load_spec
from cluster_tool.spec.models import Cluster, Watch
from cluster_tool.watch.cycle import CycleResult, run_cycle
from cluster_tool.watch.state import WatchState
from tests.conftest import REPO
from tests.unit.watch.fakes import CapturedSources, NodeReading, WatchSlurm, admin

NODES = ["gpu001", "gpu002", "gpu003", "gpu004"]
NO_DRIVER = (
    "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver. "
    "Make sure that the latest NVIDIA driver is installed and running.\n"
)
MISMATCH = "Failed to initialize NVML: Driver/library version mismatch\n"
LOST = (
    "Unable to determine the device handle for GPU 0000:05:00.0: GPU is lost.  "
    "Reboot the system to recover this GPU\n"
)


@pytest.fixture(scope="module")
def lab() -> Cluster:
    return load_spec(REPO / "examples" / "lab.yml")


def one_cycle(
    lab: Cluster, gpu002: NodeReading, policy: str = "requeue"
) -> tuple[WatchSlurm, CycleResult]:
    fake = WatchSlurm(NODES)
    fake.running = {
        "101": ("gpu[001-004]", "", "ckpt watch-requeue"),  # opted in by its comment
        "102": ("gpu[003-004]", "", ""),
    }
    readings = {n: NodeReading() for n in NODES}
    readings["gpu002"] = gpu002
    watch = Watch.model_validate({"policy": policy, "checkpoint_grace_s": 0})
    result = run_cycle(lab, WatchState(), CapturedSources(readings), admin(fake), watch, 1000.0)
    return fake, result


def mine(result: CycleResult) -> list[tuple[str, str, str | None]]:
    return [(f.check, f.severity, f.component) for f in result.findings if f.node == "gpu002"]


def test_a_driver_nvidia_smi_cannot_reach_drains_the_node_and_requeues_its_job(
    lab: Cluster,
) -> None:
    fake, result = one_cycle(lab, NodeReading(smi=NO_DRIVER, smi_rc=9))
    # Said once: the clocks probe runs the same nvidia-smi and fails the same way.
    assert mine(result) == [("gpu.driver", "error", "nvidia-smi-q")]
    (finding,) = [f for f in result.findings if f.node == "gpu002"]
    assert "cannot communicate with the NVIDIA driver" in finding.message
    assert finding.observed is not None and finding.observed.startswith("exit 9: ")
    assert list(fake.drained) == ["gpu002"]
    reason = fake.drained["gpu002"]
    assert reason.startswith("cluster-tool watch: gpu.driver nvidia-smi-q: ")
    assert owner(reason) is Owner.WATCH
    assert fake.requeued == ["101"]
    assert result.exit_code == 1


def test_observe_names_it_and_drains_nothing(lab: Cluster) -> None:
    fake, result = one_cycle(lab, NodeReading(smi=NO_DRIVER, smi_rc=9), policy="observe")
    assert mine(result) == [("gpu.driver", "error", "nvidia-smi-q")]
    assert fake.drains() == [] and fake.requeued == []


@pytest.mark.parametrize(
    ("printed", "rc", "says"),
    [
        (MISMATCH, 18, "another version than the installed driver library"),
        (LOST, 15, "GPU 0000:05:00.0 is lost"),
        ("", 9, "the NVIDIA driver is not loaded (exit 9)"),
    ],
)
def test_a_version_mismatch_a_lost_gpu_or_exit_9_alone_are_driver_errors(
    lab: Cluster, printed: str, rc: int, says: str
) -> None:
    fake, result = one_cycle(lab, NodeReading(smi="", smi_stderr=printed, smi_rc=rc), "drain")
    assert mine(result) == [("gpu.driver", "error", "nvidia-smi-q")]
    (finding,) = [f for f in result.findings if f.node == "gpu002"]
    assert says in finding.message
    assert list(fake.drained) == ["gpu002"]


@pytest.mark.parametrize(
    ("reading", "component"),
    [
        (NodeReading(reachable=False), "port-counters"),  # the host did not answer
        (NodeReading(smi="", smi_rc=124), "nvidia-smi-q"),  # nvidia-smi hung: unknown why
        (NodeReading(smi="", smi_rc=127, smi_stderr="sh: nvidia-smi: not found"), None),
        (NodeReading(smi="", smi_rc=4, smi_stderr="Insufficient Permissions"), "nvidia-smi-q"),
    ],
)
def test_what_says_nothing_of_the_driver_stays_unread_and_is_never_drained(
    lab: Cluster, reading: NodeReading, component: str | None
) -> None:
    fake, result = one_cycle(lab, reading)
    found = mine(result)
    assert found and {c for c, _, _ in found} == {"watch.unread"}
    assert component is None or ("watch.unread", "warning", component) in found
    assert fake.drains() == [] and fake.requeued == []
