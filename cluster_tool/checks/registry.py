"""Every finding id the tool can emit, in one table: who produces it, the severities it comes
with and what it means in one line. docs/findings.md has a row for each (its test reads this
table), and tests/unit/test_finding_ids_documented.py fails on an id the code emits that is
missing here.

Also the JUnit cases a validate run plans (`NODE_CHECKS`, `FABRIC_CHECKS`) and which checks
cannot run when another's probe failed (`NEEDS`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import cast

from cluster_tool.findings import Severity

__all__ = [
    "AREAS",
    "CHECKS",
    "FABRIC_CHECKS",
    "NEEDS",
    "NODE_CHECKS",
    "CheckInfo",
]

# Who emits an id: the node checks, the wiring check, the nccl-tests gate, the workflows'
# own steps, the version read-back against the compatibility matrix, or `cluster-tool watch`.
AREAS = ("health", "fabric", "gate", "workflow", "compat", "watch")


@dataclass(frozen=True)
class CheckInfo:
    """One finding id: its area (`AREAS`), the severities it is emitted with, its meaning."""

    id: str
    area: str
    severities: tuple[Severity, ...]
    meaning: str


def _table(*rows: tuple[str, str, str, str]) -> dict[str, CheckInfo]:
    table: dict[str, CheckInfo] = {}
    for check, area, severities, meaning in rows:
        assert check not in table, f"{check} registered twice"
        assert area in AREAS, f"{check}: unknown area {area}"
        levels = tuple(cast(Severity, s.strip()) for s in severities.split(","))
        assert set(levels) <= {"error", "warning", "info"}, f"{check}: {severities}"
        table[check] = CheckInfo(check, area, levels, meaning)
    return table


# An id written `family.<name>` is a pattern: the code builds it from a step or probe name.
CHECKS: dict[str, CheckInfo] = _table(
    # --- the cabling against the plan (checks/fabric.py, workflows/collect.py) --------------
    ("fabric.swapped", "fabric", "error", "two HCAs of one node sit on each other's leaves"),
    ("fabric.wrong-rail", "fabric", "error", "an HCA is on a leaf of another rail"),
    ("fabric.wrong-port", "fabric", "error", "right leaf, wrong port"),
    ("fabric.wrong-su", "fabric", "error", "an HCA is on a leaf of another SU"),
    ("fabric.link-down", "fabric", "error", "a planned HCA is not in the fabric"),
    ("fabric.missing", "fabric", "error", "a planned switch, or all of a node's HCAs, not found"),
    (
        "fabric.unexpected",
        "fabric",
        "error, warning, info",
        "a device or switch the plan does not have is on the fabric",
    ),
    ("fabric.speed", "fabric", "error", "a link trained at a slower generation than planned"),
    ("fabric.width", "fabric", "error", "a link trained on fewer lanes than planned"),
    ("fabric.errors", "fabric", "error", "port error counters above the spec's thresholds"),
    ("fabric.spine", "fabric", "error, warning", "a leaf-spine link missing or miswired"),
    ("fabric.discover", "fabric", "error", "ibnetdiscover missing, failed or unreadable"),
    ("ib.counters-unread", "fabric", "error", "ibqueryerrors gave nothing to judge counters by"),
    # --- node health (checks/node.py and the checks it runs) -------------------------------
    ("gpu.driver", "health", "error", "nvidia-smi -q missing, failed or unreadable"),
    ("gpu.count", "health", "error", "not the profile's number of GPUs"),
    ("gpu.model", "health", "error", "a GPU is not the profile's product"),
    ("gpu.temperature", "health", "error, warning", "a GPU runs hot"),
    ("gpu.ecc-mode", "health", "error, warning", "ECC disabled, or pending disable"),
    ("gpu.ecc", "health", "error, warning", "ECC error counts above the thresholds"),
    ("gpu.remapped-rows", "health", "error, info", "row remapping failed, pending or used"),
    ("gpu.retired-pages", "health", "error, warning", "page retirement pending or used"),
    ("gpu.xid", "health", "error, warning", "an Xid in the kernel log"),
    ("gpu.sxid", "health", "error, warning", "an NVSwitch SXid in the kernel log"),
    ("gpu.pcie", "health", "error, warning", "a GPU's PCIe link narrower or slower than planned"),
    (
        "gpu.throttle",
        "health",
        "error, warning",
        "a GPU is throttled by a hardware reason or held by a clock setting",
    ),
    ("gpu.power-limit", "health", "error", "a GPU enforces less power than the profile's"),
    ("gpu.clocks", "health", "error", "a GPU's clocks are below its own or the profile's"),
    ("gpu.persistence", "health", "warning", "persistence mode off"),
    ("gpu.fabric", "health", "error", "the GPU's NVLink fabric state is not Completed/Success"),
    ("gpu.nvlink-errors", "health", "error, warning", "NVLink error counters above the limits"),
    ("gpu.reset", "health", "error", "the driver asks for a GPU reset"),
    ("gpu.dcgm", "health", "error, warning", "a dcgmi diag test failed or warned"),
    ("ib.driver", "health", "error", "ibstat missing, failed or unreadable"),
    ("ib.count", "health", "error", "a compute HCA of the profile is absent"),
    ("ib.state", "health", "error", "a compute HCA's port is not Active/LinkUp"),
    ("ib.rate", "health", "error", "a compute HCA's port is slower than the profile's rate"),
    ("ib.link-layer", "health", "error", "a compute rail runs Ethernet"),
    ("ib.pcie", "health", "error", "a compute HCA's PCIe link narrower or slower than planned"),
    ("ib.affinity", "health", "error", "a rail HCA is not PIX/PXB from its GPU"),
    ("gdr.inactive", "health", "error", "neither nvidia_peermem nor dma-buf: no GPUDirect RDMA"),
    ("gdr.mode", "health", "warning", "the other GPUDirect mode than the configured one is active"),
    ("nccl.env", "health", "error, warning", "/etc/nccl.conf differs from the rendered one"),
    ("os.kernel-log", "health", "error", "the kernel log could not be read"),
    ("os.<name>", "health", "error", "a probe without an id of its own failed"),
    ("link.fec", "health", "error", "errors got past FEC on a compute HCA's link"),
    ("link.ber", "health", "warning", "raw BER above a limit the spec sets for the speed"),
    ("link.module-temp", "health", "warning", "the cable module runs hot"),
    # --- port counters as deltas and link flaps (checks/counters.py) --------------------------
    ("link.flap", "fabric", "error", "a link went down while traffic ran, or again and again"),
    ("link.errors", "fabric", "error", "error counters climbed faster than the per-hour limits"),
    ("link.congestion", "fabric", "info, warning", "PortXmitWait climbed: congestion"),
    ("link.counters-unknown", "fabric", "warning", "a counter reset or saturated between reads"),
    ("link.downed-reboot", "fabric", "info", "LinkDowned of a rebooted node, not held against it"),
    (
        "link.downed-history",
        "fabric",
        "info, warning",
        "LinkDowned since the counters were cleared, with no snapshot: history, not a verdict",
    ),
    # --- the nccl-tests gate (gate/) ----------------------------------------------------------
    ("nccl.single", "gate", "error", "a one-node job below its floor"),
    ("nccl.pair", "gate", "error", "the node fails the pairs rung with two partners"),
    ("nccl.rail", "gate", "error", "the node fails one rail with two partners"),
    ("nccl.full", "gate", "error", "the job over all nodes fails though the pairs passed"),
    ("nccl.path", "gate", "error", "two nodes fail only together"),
    ("nccl.straggler", "gate", "warning", "passes the floor but far below the fleet"),
    ("nccl.flaky", "gate", "warning", "a pair failed once and passed when re-run"),
    ("nccl.unresolved", "gate", "error, warning", "a failure neither cleared nor blamed"),
    ("nccl.fleet", "gate", "error", "too many nodes fail: nothing drained"),
    ("nccl.hang", "gate", "error", "the job's output was silent past the watchdog"),
    ("nccl.wrong", "gate", "error", "#wrong or out-of-bounds values: data corruption"),
    ("nccl.output", "gate", "error", "the step's output could not be parsed"),
    ("nccl.launch", "gate", "error, info", "the step never started, or a launch error line"),
    ("nccl.oom", "gate", "error, info", "an out-of-memory line in the job"),
    ("nccl.ib", "gate", "error, info", "an InfiniBand error line in the job"),
    ("nccl.transport", "gate", "error, info", "a socket/transport error line in the job"),
    ("nccl.cuda", "gate", "error, info", "a CUDA error line in the job"),
    ("nccl.abort", "gate", "error, info", "a timeout/abort line, or an unfinished step"),
    ("gdr.not-used", "gate", "error", "NCCL's NET/IB channels ran without GDRDMA"),
    ("gate.unproven", "gate", "error, warning", "the gate did not prove the node"),
    ("slurm.unavailable", "gate", "warning, error", "Slurm will not run jobs on the node"),
    ("slurm.pending", "gate", "warning", "a gate job never left the queue"),
    ("slurm.error", "gate", "error", "Slurm commands failed, so the gate could not run"),
    # --- the burn-in's NCCL soak (gate/soak.py, workflows/burnin.py) ---------------------------
    ("burnin.sag", "gate", "error", "a node's busbw sagged over the soak (own baseline, fleet)"),
    ("burnin.unread", "gate", "error", "the soak gave too few busbw samples to judge the node"),
    ("burnin.wrong", "gate", "error", "all_reduce's data check counted wrong elements in the soak"),
    # --- the workflows' own steps (workflows/) -----------------------------------------------
    ("os.unreachable", "workflow", "error", "a host did not answer over SSH or in the Slurm step"),
    ("ansible.converge", "workflow", "error", "a converge task failed on the host"),
    ("bmc.refused", "workflow", "error", "the BMC refused PXE-once or the power cycle"),
    ("reimage.no-ssh", "workflow", "error", "no SSH after the power cycle"),
    ("reimage.converge", "workflow", "error", "site.yml failed on the re-imaged node"),
    ("reimage.drain-timeout", "workflow", "warning", "jobs still running past the drain timeout"),
    ("reimage.<step>", "workflow", "error", "a journaled re-image step failed in the earlier run"),
    ("slurm.drain", "workflow", "warning", "a failed node's drain reason could not be set"),
    ("history.regression", "workflow", "warning", "a node is worse than its own history"),
    ("history.store", "workflow", "warning", "the history store could not be read or written"),
    # --- versions against the compatibility matrix (checks/versions.py) --------------------
    ("version.drift", "compat", "error", "the node runs another driver than the spec pins"),
    ("version.incompatible", "compat", "error", "what the node runs breaks a matrix rule"),
    ("version.outlier", "compat", "warning", "firmware or VBIOS differs from the fleet's"),
    # --- in service: cluster-tool watch (watch/) ---------------------------------------------
    ("watch.straggler", "watch", "error", "the slow node of a running job, cycles running"),
    ("watch.probe", "watch", "warning", "an idle node's NCCL probe below its own baseline"),
    ("watch.fleet", "watch", "error", "more nodes failing than watch may drain: nothing more"),
    ("watch.unread", "watch", "warning", "a signal watch reads could not be read this cycle"),
    ("watch.slurm", "watch", "error", "watch could not read or act through Slurm"),
    ("watch.state-reset", "watch", "warning", "the state file was unreadable: started afresh"),
)


# Every id a node check can give, and every fabric id: the test cases of a validate run's
# JUnit file (a finding whose id is not listed still gets its own case).
NODE_CHECKS = (
    "os.unreachable",
    "gpu.driver",
    "gpu.count",
    "gpu.model",
    "gpu.temperature",
    "gpu.ecc-mode",
    "gpu.ecc",
    "gpu.remapped-rows",
    "gpu.retired-pages",
    "gpu.xid",
    "gpu.sxid",
    "gpu.pcie",
    "gpu.throttle",
    "gpu.power-limit",
    "gpu.clocks",
    "gpu.persistence",
    "gpu.fabric",
    "gpu.reset",
    "gpu.dcgm",
    "ib.driver",
    "ib.count",
    "ib.state",
    "ib.rate",
    "ib.link-layer",
    "ib.affinity",
    "gdr.inactive",
    "gdr.mode",
    "nccl.env",
    "os.kernel-log",
)
FABRIC_CHECKS = (
    "fabric.discover",
    "fabric.swapped",
    "fabric.wrong-rail",
    "fabric.wrong-port",
    "fabric.wrong-su",
    "fabric.link-down",
    "fabric.missing",
    "fabric.speed",
    "fabric.width",
    "fabric.unexpected",
    "fabric.errors",
    "fabric.spine",
    "ib.counters-unread",
)
# What a check needs: when the probe behind it did not answer, the checks that read it did not
# run (JUnit <skipped>), whatever else the node showed.
NEEDS: dict[str, tuple[str, ...]] = {
    "gpu.driver": tuple(
        c for c in NODE_CHECKS if c.startswith(("gpu.", "gdr.")) and c != "gpu.driver"
    ),
    "ib.driver": ("ib.count", "ib.state", "ib.rate", "ib.link-layer", "ib.affinity"),
    "os.kernel-log": ("gpu.xid", "gpu.sxid"),
    "fabric.discover": tuple(c for c in FABRIC_CHECKS if c != "fabric.discover"),
    "ib.counters-unread": ("fabric.errors",),
}
