"""Every finding id the tool can emit, in one table, with what the rest of the tool needs to know
of it: who produces it and with which severities; what it means, what its finding shows and the
first action (docs/findings.md is generated from these, `scripts/findings-doc`); and how it
behaves: whether its error says a check could not run (the node is `unknown`, not `fail`), which
probe it reads and which failure means it did not run, whether node-check may re-prove it to lift
a drain, and which run suite plans it as a test case.

Derived here, for the rest of the tool: `NOT_RUN` (verdicts), `NEEDS` (the checks a failed probe
leaves unrun), the planned cases of each suite (`NODE_CHECKS`, `FABRIC_CHECKS`, `COUNTER_CHECKS`,
`VERSION_CHECKS`, `GATE_CHECKS`) and `relift()` (node-check's lift rule).
tests/unit/test_finding_ids_documented.py fails on an id the code emits that is missing here.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable
from dataclasses import dataclass
from typing import Literal, cast

from cluster_tool.findings import Finding, Severity

__all__ = [
    "AREAS",
    "CHECKS",
    "COUNTER_CHECKS",
    "FABRIC_CHECKS",
    "GATE_CHECKS",
    "NEEDS",
    "NODE_CHECKS",
    "NOT_RUN",
    "SECTIONS",
    "VERSION_CHECKS",
    "CheckInfo",
    "node_checks_not_run",
    "planned",
    "relift",
]

# Who emits an id: the node checks, the wiring check, the nccl-tests gate, the workflows'
# own steps, the version read-back against the compatibility matrix, or `cluster-tool watch`.
AREAS = ("health", "fabric", "gate", "workflow", "compat", "watch")

# The tables of docs/findings.md, in order: one per family (two for nccl, and the counter
# deltas apart from mlxlink's link quality).
SECTIONS = (
    "fabric",
    "gpu",
    "ib",
    "profile",
    "gdr",
    "nccl-env",
    "gate",
    "slurm",
    "os",
    "storage",
    "version",
    "link",
    "counters",
    "burnin",
    "history",
    "watch",
    "workflow",
)

# The suites a run plans test cases in (summary.json `checks`, JUnit): a node's health, the
# fabric, the port counters as deltas after traffic, the version read-back, the gate.
Plan = Literal["node", "fabric", "counters", "versions", "gate"]

# How a check's evidence lives: `state` is read afresh each time (ECC counters, a port's state:
# a clean re-read re-proves it); `event` is a log line or a counter's climb, which can rotate
# away or be cleared: its absence later proves nothing.
Evidence = Literal["state", "event"]


@dataclass(frozen=True)
class CheckInfo:
    """One finding id and everything the tool and its docs say of it."""

    id: str
    area: str
    severities: tuple[Severity, ...]
    meaning: str
    section: str
    what: str
    shows: str
    action: str
    # Its error says a check could not run (nothing was judged): the node is `unknown`.
    not_run: bool = False
    # The ids whose failure means this check did not run (its probe or tool failed).
    needs: tuple[str, ...] = ()
    # The probe whose output it judges (cluster_tool.probes), when a node probe.
    probe: str | None = None
    evidence: Evidence = "state"
    plan: Plan | None = None
    # Its not running does not keep a node out: the operator may leave it out of a run (DCGM's
    # diagnostic, minutes of GPU load, is `--no-dcgm` and not in the periodic node-check).
    optional: bool = False

    @property
    def relifts(self) -> bool:
        """node-check may lift a drain naming this id when it re-ran it clean: a node check
        whose evidence is a fresh reading, not a log line that may have rotated away."""
        return self.plan == "node" and self.probe is not None and self.evidence == "state"


def _table(*rows: CheckInfo) -> dict[str, CheckInfo]:
    table: dict[str, CheckInfo] = {}
    for row in rows:
        assert row.id not in table, f"{row.id} registered twice"
        assert row.area in AREAS, f"{row.id}: unknown area {row.area}"
        assert row.section in SECTIONS, f"{row.id}: unknown section {row.section}"
        assert set(row.severities) <= {"error", "warning", "info"}, f"{row.id}: {row.severities}"
        table[row.id] = row
    for row in rows:
        assert set(row.needs) <= set(table), f"{row.id} needs unknown ids {row.needs}"
    return table


def _check(
    id: str,  # the field's name in the findings contract
    area: str,
    severities: str,
    meaning: str,
    **details: object,
) -> CheckInfo:
    levels = tuple(cast(Severity, s.strip()) for s in severities.split(","))
    return CheckInfo(id, area, levels, meaning, **details)  # type: ignore[arg-type]


# An id written `family.<name>` is a pattern: the code builds it from a step or probe name.
# Rows are in docs/findings.md's order.
CHECKS: dict[str, CheckInfo] = _table(
    _check(
        "fabric.swapped",
        "fabric",
        "error",
        "two HCAs of one node sit on each other's leaves",
        section="fabric",
        what="two HCAs of one node sit on each other's leaves (one finding, not two wrong rails)",
        shows=(
            "both planned ends / both seen ends; component `mlx5_a,mlx5_b`, and "
            '`swapped: ["mlx5_a", "mlx5_b"]` (the only finding with that key)'
        ),
        action="swap the two cables at the node",
        needs=("fabric.discover",),
        probe="ibnetdiscover",
        plan="fabric",
    ),
    _check(
        "fabric.wrong-rail",
        "fabric",
        "error",
        "an HCA is on a leaf of another rail",
        section="fabric",
        what="HCA on a leaf of another rail of its SU, or on a switch that is not a planned leaf",
        shows="planned `leaf port` / seen `switch port`; component the HCA",
        action="move the cable to the planned leaf port",
        needs=("fabric.discover",),
        probe="ibnetdiscover",
        plan="fabric",
    ),
    _check(
        "fabric.wrong-port",
        "fabric",
        "error",
        "right leaf, wrong port",
        section="fabric",
        what="right leaf, wrong port",
        shows="planned / seen leaf port",
        action="move the cable to the planned port",
        needs=("fabric.discover",),
        probe="ibnetdiscover",
        plan="fabric",
    ),
    _check(
        "fabric.wrong-su",
        "fabric",
        "error",
        "an HCA is on a leaf of another SU",
        section="fabric",
        what="HCA on a leaf of another SU",
        shows="planned / seen leaf port",
        action="move the cable; check the SU patch panel",
        needs=("fabric.discover",),
        probe="ibnetdiscover",
        plan="fabric",
    ),
    _check(
        "fabric.link-down",
        "fabric",
        "error",
        "a planned HCA is not in the fabric",
        section="fabric",
        what="a planned HCA is not in the fabric while the node's other HCAs are",
        shows="planned cable / `no link`",
        action="`ibstat` on the node; reseat cable or optic",
        needs=("fabric.discover",),
        probe="ibnetdiscover",
        plan="fabric",
    ),
    _check(
        "fabric.missing",
        "fabric",
        "error",
        "a planned switch, or all of a node's HCAs, not found",
        section="fabric",
        what=(
            "a planned switch is not discovered (every cable on it unjudged), or none of a node's "
            "HCAs is"
        ),
        shows="`<switch> in the fabric` / `not discovered`; or `N HCAs` / `none discovered`",
        action=(
            "switch powered and managed? `fabric.switch_name_pattern` right? Node: up, rdma-ndd "
            "running?"
        ),
        needs=("fabric.discover",),
        probe="ibnetdiscover",
        plan="fabric",
    ),
    _check(
        "fabric.departure",
        "fabric",
        "warning",
        "the plan itself departs from the rail-optimized rule (an adopted fabric, kept as cabled)",
        section="fabric",
        what=(
            "the cabling plan (an adopted spec's, as the cluster is cabled) departs from the "
            "rail-optimized rule: a rail split across leaves, an HCA on another SU's or another "
            "rail's leaf, a node's HCAs on different ports or two on one leaf, a rail uncabled, "
            "a leaf with fewer uplinks than the others or none to a spine"
        ),
        shows="the departure, with the switches and ports as cabled",
        action="recable to the rule when a window allows (then adopt again), or accept it",
        needs=("fabric.discover",),
        probe="ibnetdiscover",
        plan="fabric",
    ),
    _check(
        "fabric.unexpected",
        "fabric",
        "error, warning, info",
        "a device or switch the plan does not have is on the fabric",
        section="fabric",
        what=(
            "a device the plan does not have: a GPU node's non-compute device on the fabric "
            "(error), a host not in the spec or a switch not in the plan (warning), a head/SM "
            "host's HCA (info)"
        ),
        shows="`not on the compute fabric` / where it is cabled",
        action="unplug it, or add it to the spec",
        needs=("fabric.discover",),
        probe="ibnetdiscover",
        plan="fabric",
    ),
    _check(
        "fabric.speed",
        "fabric",
        "error",
        "a link trained at a slower generation than planned",
        section="fabric",
        what=(
            "a correctly cabled link trained slower than planned (hosts: profile `expected_speed`; "
            "leaf–spine: `fabric.expected_speed`)"
        ),
        shows="planned / seen generation, e.g. `NDR` / `HDR`",
        action="reseat; replace cable or optic; check the port's speed settings",
        needs=("fabric.discover",),
        probe="ibnetdiscover",
        plan="fabric",
    ),
    _check(
        "fabric.width",
        "fabric",
        "error",
        "a link trained on fewer lanes than planned",
        section="fabric",
        what="a correctly cabled link trained on fewer lanes (profile / `fabric.expected_width`)",
        shows="`4X` / `2X`",
        action="replace cable or optic (a lane is dead)",
        needs=("fabric.discover",),
        probe="ibnetdiscover",
        plan="fabric",
    ),
    _check(
        "fabric.errors",
        "fabric",
        "error",
        "port error counters above the spec's thresholds",
        section="fabric",
        what=(
            "port counters above `thresholds.health.ib_symbol_errors_max`, `ib_rcv_errors_max`, "
            "`ib_link_error_recovery_max`; both ends of one cable are one finding. Not "
            "LinkDownedCounter: an absolute count of link downs is `link.downed-history` (below)"
        ),
        shows=(
            "`Counter <= max` / `Counter value`; component the HCA, or the switch for "
            "switch–switch cables"
        ),
        action=(
            "clean/replace the cable or optic, then clear counters (`perfquery -x -R`) and re-check"
        ),
        needs=("fabric.discover", "ib.counters-unread"),
        probe="ibqueryerrors",
        plan="fabric",
    ),
    _check(
        "fabric.spine",
        "fabric",
        "error, warning",
        "a leaf-spine link missing or miswired",
        section="fabric",
        what=(
            "a planned leaf–spine link is missing or lands elsewhere (error); a switch link the "
            "plan does not have (warning)"
        ),
        shows="planned / seen `leaf port ↔ spine port`; component the leaf",
        action="recable the uplink per `switch-links.csv`",
        needs=("fabric.discover",),
        probe="ibnetdiscover",
        plan="fabric",
    ),
    _check(
        "fabric.discover",
        "fabric",
        "error",
        "ibnetdiscover missing, failed or unreadable",
        section="fabric",
        what=(
            "`validate` only: ibnetdiscover missing, failed or unreadable on the SM host: no cable "
            "was judged (every node of the run `unknown`)"
        ),
        shows="component `ibnetdiscover`",
        action="infiniband-diags on the SM host; `ibnetdiscover` by hand",
        not_run=True,
        probe="ibnetdiscover",
        plan="fabric",
    ),
    _check(
        "ib.counters-unread",
        "fabric",
        "error",
        "ibqueryerrors gave nothing to judge counters by",
        section="fabric",
        what=(
            "`validate` and the workflows: `ibqueryerrors` on the SM host printed nothing, failed "
            "or was unreadable: no port error counter was judged (`fabric.errors` skipped), so "
            "every node of the run is `unknown`, not `pass`"
        ),
        shows=(
            "`port error counters read` / `printed nothing (exit N)`, `unreadable`; component "
            "`ibqueryerrors`"
        ),
        action="is the SM running? `ibqueryerrors` by hand on the SM host",
        not_run=True,
        needs=("fabric.discover",),
        probe="ibqueryerrors",
        plan="fabric",
    ),
    _check(
        "gpu.driver",
        "health",
        "error",
        "nvidia-smi -q missing, failed or unreadable",
        section="gpu",
        what=(
            "`nvidia-smi -q` not installed, failed or unreadable (the other GPU checks and "
            "GPUDirect are skipped). `watch`: only when nvidia-smi says it cannot reach the driver "
            "or a GPU (`couldn't communicate with the NVIDIA driver`, exit 9; `Driver/library "
            "version mismatch`; `GPU is lost`, exit 15), acted on by the watch policy like any "
            "node error; any other nvidia-smi failure there is `watch.unread`"
        ),
        shows="`runs` / `not installed`, `exit N`, `unreadable`; component `nvidia-smi-q`",
        action="driver loaded? `bringup --limit NODE --phase driver`",
        probe="nvidia-smi-q",
        plan="node",
    ),
    _check(
        "gpu.count",
        "health",
        "error",
        "not the profile's number of GPUs",
        section="gpu",
        what=(
            "fewer (or more) GPUs than the profile's `gpu_count`; the message names missing GPUs "
            "by PCI address"
        ),
        shows="count / count; component null",
        action="`dmesg` for Xid 79; reseat or RMA the GPU",
        needs=("gpu.driver",),
        probe="nvidia-smi-q",
        plan="node",
    ),
    _check(
        "gpu.model",
        "health",
        "error",
        "a GPU is not the profile's product",
        section="gpu",
        what="product name differs from the profile's `gpu_product`",
        shows="profile / seen product",
        action="wrong profile for the node, or wrong hardware",
        needs=("gpu.driver",),
        probe="nvidia-smi-q",
        plan="node",
    ),
    _check(
        "gpu.temperature",
        "health",
        "error, warning",
        "a GPU runs hot",
        section="gpu",
        what="at or above `thresholds.health.gpu_temp_error_c` (88 C) / `gpu_temp_warn_c` (83 C)",
        shows="`< limit` / `N C`",
        action="airflow, fans, inlet temperature",
        needs=("gpu.driver",),
        probe="nvidia-smi-q",
        plan="node",
    ),
    _check(
        "gpu.ecc-mode",
        "health",
        "error, warning",
        "ECC disabled, or pending disable",
        section="gpu",
        what="ECC disabled (error), or set to turn off at the next reset (warning)",
        shows="`Enabled` / `Disabled`",
        action="`nvidia-smi -e 1`, then reset the GPU",
        needs=("gpu.driver",),
        probe="nvidia-smi-q",
        plan="node",
    ),
    _check(
        "gpu.ecc",
        "health",
        "error, warning",
        "ECC error counts above the thresholds",
        section="gpu",
        what=(
            "volatile uncorrectable ECC above `ecc_uncorrectable_max` (0), or SRAM threshold "
            "exceeded (error); volatile correctable above `ecc_correctable_warn` (1000) (warning)"
        ),
        shows="`<= max` / count",
        action="drain; reset the GPU; recurring uncorrectable: RMA",
        needs=("gpu.driver",),
        probe="nvidia-smi-q",
        plan="node",
    ),
    _check(
        "gpu.remapped-rows",
        "health",
        "error, info",
        "row remapping failed, pending or used",
        section="gpu",
        what=(
            "row remapping failed (error: replace the GPU); remap pending (error, only while "
            "`remapped_rows_pending_max` is 0); rows already remapped for uncorrectable errors "
            "(info)"
        ),
        shows="`no failure` / `failure`, `none pending` / `pending`, count",
        action="pending: reset the GPU; failure: RMA",
        needs=("gpu.driver",),
        probe="nvidia-smi-q",
        plan="node",
    ),
    _check(
        "gpu.retired-pages",
        "health",
        "error, warning",
        "page retirement pending or used",
        section="gpu",
        what="page retirement pending (error); pages retired for double-bit ECC (warning)",
        shows="`none pending` / `pending`, count",
        action="reset the GPU",
        needs=("gpu.driver",),
        probe="nvidia-smi-q",
        plan="node",
    ),
    _check(
        "gpu.xid",
        "health",
        "error, warning",
        "an Xid in the kernel log",
        section="gpu",
        what=(
            "an Xid in the kernel log, one finding per GPU and code; codes in "
            "`thresholds.health.fatal_xids` (default 48, 61, 62, 64, 74, 79, 92, 94, 95, 119, 120, "
            "140, 154) are errors, others (13, 31, 43 are usually the application) warnings; the "
            "message says the class"
        ),
        shows="`no Xid` / `Xid N`; component `GPU<n>`, or `GPU <bus id>` for an unknown address",
        action=(
            "read the Xid in NVIDIA's catalogue; 79/95/140: drain, reset or reboot, RMA if it "
            "recurs"
        ),
        needs=("gpu.driver", "os.kernel-log"),
        probe="kernel-log",
        evidence="event",
        plan="node",
    ),
    _check(
        "gpu.sxid",
        "health",
        "error, warning",
        "an NVSwitch SXid in the kernel log",
        section="gpu",
        what="an NVSwitch SXid in the kernel log: `Fatal` (error), non-fatal (warning)",
        shows="`SXid N`; component the NVSwitch",
        action="fatal: reboot the node; check Fabric Manager log",
        needs=("gpu.driver", "os.kernel-log"),
        probe="kernel-log",
        evidence="event",
        plan="node",
    ),
    _check(
        "gpu.pcie",
        "health",
        "error, warning",
        "a GPU's PCIe link narrower or slower than planned",
        section="gpu",
        what=(
            "GPU link narrower than min(`gpu_pcie_width`, device max) (error); slower generation "
            "than min(`gpu_pcie_gen`, device max) (warning: idle GPUs downtrain)"
        ),
        shows="`x16` / `x8`, `gen 5` / `gen 4`",
        action="width: reseat the GPU/riser; gen: re-check under load",
        needs=("gpu.driver",),
        probe="nvidia-smi-q",
        plan="node",
    ),
    _check(
        "gpu.throttle",
        "health",
        "error, warning",
        "a GPU is throttled by a hardware reason or held by a clock setting",
        section="gpu",
        what=(
            "HW thermal slowdown (error); HW slowdown, HW power brake or SW thermal slowdown "
            "(warning); `Applications Clocks Setting` active with no clock below its default or "
            "the profile's to show for it (warning: a setting holds the clocks, at full speed as "
            "far as `nvidia-smi -q` shows; when a clock is below, `gpu.clocks` says it instead). "
            "SW Power Cap and Idle are not findings (AzNHC's practice: the power cap is how a "
            "loaded GPU keeps its limit; a lowered limit is `gpu.power-limit`)"
        ),
        shows="`not active` / the active reasons",
        action="cooling; PSU / power brake signal; `nvidia-smi -rgc` / `-rac`",
        needs=("gpu.driver",),
        probe="nvidia-smi-q",
        plan="node",
    ),
    _check(
        "gpu.power-limit",
        "health",
        "error",
        "a GPU enforces less power than the profile's",
        section="gpu",
        what=(
            "the GPU enforces a power limit (`Current Power Limit`, `Enforced Power Limit` on old "
            "drivers) below the profile's `gpu_power_limit_w` (700 W on H100/H200 SXM, NVIDIA's "
            "datasheets), or its board allows no more (`Max Power Limit`). Error: a GPU capped at "
            "500 W holds its clocks down under load and is the slow rank of every collective (a "
            "few hundred MHz on a 700 W part), though every counter reads clean; nothing is "
            "checked when the profile leaves the limit unset"
        ),
        shows="`700 W` / `500 W` or `max 500 W`; component `GPU<n>`",
        action=(
            "`nvidia-smi -i N -pl 700` (and find what set it: a site script, a DCGM policy); max "
            "below: wrong SKU or baseboard"
        ),
        needs=("gpu.driver",),
        probe="nvidia-smi-q",
        plan="node",
    ),
    _check(
        "gpu.clocks",
        "health",
        "error",
        "a GPU's clocks are below its own or the profile's",
        section="gpu",
        what=(
            "the maximum SM clock (`Max Clocks`) below the profile's `gpu_max_sm_clock_mhz` (1980 "
            "MHz on H100 SXM5; unset on H200: no source gives it); the application graphics clock "
            "below the GPU's own default (`nvidia-smi -ac`); or `Applications Clocks Setting` "
            "active, not idle, with the SM clock below the maximum (`nvidia-smi -lgc`). Error for "
            "the same reason as the power limit: the GPU runs no faster than that clock under "
            "load, so every collective waits for it"
        ),
        shows=(
            "`max SM 1980 MHz` / `max SM 1755 MHz`, `application 1980 MHz` / `application 1200 "
            "MHz`, `SM up to 1980 MHz` / `SM 1200 MHz (Applications Clocks Setting)`; component "
            "`GPU<n>`"
        ),
        action=(
            "`nvidia-smi -rac` / `-rgc` (as root), then rerun validate; max below: wrong SKU or "
            "VBIOS"
        ),
        needs=("gpu.driver",),
        probe="nvidia-smi-q",
        plan="node",
    ),
    _check(
        "gpu.persistence",
        "health",
        "warning",
        "persistence mode off",
        section="gpu",
        what="persistence mode off",
        shows="`Enabled` / `Disabled`",
        action="`systemctl start nvidia-persistenced`",
        needs=("gpu.driver",),
        probe="nvidia-smi-q",
        plan="node",
    ),
    _check(
        "gpu.fabric",
        "health",
        "error",
        "the GPU's NVLink fabric state is not Completed/Success",
        section="gpu",
        what=(
            "NVSwitch boards (`nvlink_domain_size` > 1): the GPU's NVLink fabric state is not "
            "`Completed/Success`"
        ),
        shows="`Completed/Success` / `state/status`",
        action="`systemctl status nvidia-fabricmanager`; its version must match the driver",
        needs=("gpu.driver",),
        probe="nvidia-smi-q",
        plan="node",
    ),
    _check(
        "gpu.nvlink-errors",
        "health",
        "error, warning",
        "NVLink error counters above the limits",
        needs=("gpu.driver",),
        section="gpu",
        what=(
            "an NVLink's counters from `nvidia-smi nvlink -e` (health probe `nvlink-errors`; also "
            "error when that command failed or printed something unreadable while `nvidia-smi -q` "
            "worked, component `nvlink-errors`): recovery errors above "
            "`thresholds.health.nvlink_recovery_max` (0) or CRC/replay errors above "
            "`nvlink_crc_replay_max` (1000) (error); CRC/replay above `nvlink_crc_replay_warn` (0) "
            "(warning). They count since the driver loaded or `nvidia-smi nvlink -re`"
        ),
        shows="the limits / `45068 CRC, 2 replay`; component `GPU<n> link <l>`",
        action=(
            "reset the counters, rerun the NCCL single-node rung, read them again; climbing: "
            "reseat or RMA (baseboard for a fixed link position)"
        ),
        probe="nvlink-errors",
        plan="node",
    ),
    _check(
        "gpu.reset",
        "health",
        "error",
        "the driver asks for a GPU reset",
        section="gpu",
        what="the driver asks for a GPU reset",
        shows="`no` / `yes`",
        action="drain, `nvidia-smi -r -i N` or reboot",
        needs=("gpu.driver",),
        probe="nvidia-smi-q",
        plan="node",
    ),
    _check(
        "gpu.dcgm",
        "health",
        "error, warning",
        "a dcgmi diag test failed or warned",
        section="gpu",
        what=(
            "a `dcgmi diag -r 1` test failed (error) or warned (warning), per GPU when DCGM names "
            "it; also error when `dcgmi` is missing, failed or unreadable (component `dcgmi-diag`)"
        ),
        shows="`Pass` / the verdict",
        action="read the test's message; missing: `bringup --limit NODE --phase tools`",
        needs=("gpu.driver", "gpu.dcgm-incomplete"),
        probe="dcgmi-diag",
        plan="node",
        optional=True,
    ),
    _check(
        "gpu.dcgm-incomplete",
        "health",
        "error",
        "a dcgmi diag run that did not diagnose the node",
        section="gpu",
        what=(
            "`dcgmi diag -r N` (the node checks' `-r 1`, the burn-in's `-r 3`) did not diagnose "
            "the node: killed by its timeout (exit 124/137, whatever it printed first), its table "
            "cut off before the closing border, no test listed, every test `Skip`, every GPU test "
            "`Skip` (only the deployment checks ran), only the deployment checks at `-r 2` and "
            "above, or a GPU that every GPU test skipped. The DCGM check did not run, so the node "
            "is `unknown`, never `pass`; a `Fail` row it did print is still `gpu.dcgm`"
        ),
        shows=(
            "`a complete dcgmi diag -r N table with its tests run` / `cut off`, `every test Skip`, "
            "`exit 124`; component `dcgmi-diag`, or the skipped GPUs"
        ),
        action=(
            "run `dcgmi diag -r N` by hand and read why DCGM skipped (its Info rows, "
            "`nv-hostengine` running, GPUs busy); raise the probe timeout if the run is just long"
        ),
        not_run=True,
        needs=("gpu.driver",),
        probe="dcgmi-diag",
        plan="node",
        optional=True,
    ),
    _check(
        "ib.driver",
        "health",
        "error",
        "ibstat missing, failed or unreadable",
        section="ib",
        what="`ibstat` not installed, failed or unreadable",
        shows="`runs` / `not installed`, `exit N`, `unreadable`; component `ibstat`",
        action="DOCA-OFED installed, `mlx5_ib` loaded? `bringup --limit NODE --phase fabric`",
        probe="ibstat",
        plan="node",
    ),
    _check(
        "ib.count",
        "health",
        "error",
        "a compute HCA of the profile is absent",
        section="ib",
        what="a compute HCA of the profile is absent from `ibstat`, or has no port",
        shows="`present` / `absent`; component the mlx5 device",
        action="`lspci` for the HCA; firmware (`mlxfwmanager`); reseat",
        needs=("ib.driver",),
        probe="ibstat",
        plan="node",
    ),
    _check(
        "profile.mismatch",
        "health",
        "error,warning",
        "the node differs from its profile: the discovered and the expected value",
        section="profile",
        what=(
            "a compute HCA at the profile's PCI address (or on its GPU's PCIe switch) under "
            "another name, an active InfiniBand HCA outside the profile's layout, a GPU at an "
            "address the profile does not list; with `profile discover --diff` also GPU count "
            "and model, link rate, fewer CPUs (error; more: warning) or less memory than the "
            "profile declares"
        ),
        shows="expected / observed: the profile's value and the node's; component the "
        "profile's device (`mlx5_9`), `GPUn`, `CPUs`, `memory`",
        action="a profile of the node: `cluster-tool profile discover --from CAPTURE --node "
        "NODE`, then fix the spec's profile (or the node, if the profile is right)",
        needs=("gpu.driver", "ib.driver"),
        probe="ibstat",
        plan="node",
    ),
    _check(
        "ib.state",
        "health",
        "error",
        "a compute HCA's port is not Active/LinkUp",
        section="ib",
        what="port 1 not `Active/LinkUp`",
        shows="`Active/LinkUp` / `state/physical state`",
        action="`Initializing`: no subnet manager; `Polling`/`Down`: cable or optic",
        needs=("ib.driver",),
        probe="ibstat",
        plan="node",
    ),
    _check(
        "ib.rate",
        "health",
        "error",
        "a compute HCA's port is slower than the profile's rate",
        section="ib",
        what="active but slower than the profile's `expected_rate_gbps`",
        shows="`400 Gb/s` / seen rate",
        action="reseat or replace cable/optic; see `fabric.speed`/`fabric.width`",
        needs=("ib.driver",),
        probe="ibstat",
        plan="node",
    ),
    _check(
        "ib.link-layer",
        "health",
        "error",
        "a compute rail runs Ethernet",
        section="ib",
        what="a compute rail runs Ethernet",
        shows="`InfiniBand` / `Ethernet`",
        action="`mlxconfig ... LINK_TYPE_P1=1`, then reboot",
        needs=("ib.driver",),
        probe="ibstat",
        plan="node",
    ),
    _check(
        "ib.pcie",
        "health",
        "error",
        "a compute HCA's PCIe link narrower or slower than planned",
        section="ib",
        what=(
            "a compute HCA's PCIe link (`lspci -vv` `LnkSta`) narrower or slower than "
            "min(`thresholds.health.hca_pcie_gen` (5) / `hca_pcie_width` (16), what the HCA can do "
            "(`LnkCap`)); health probe `lspci` (`lspci -vv -d 10de:` and `-d 15b3:`); also error "
            "when `lspci` is missing, failed or unreadable (component `lspci`). The same check "
            "reports GPUs as `gpu.pcie` (narrower: error; only slower: warning), by the profile's "
            "`gpu_pci`, or as `GPU <address>` when the profile lists none, only when `nvidia-smi "
            "-q` could not be read (otherwise its own `gpu.pcie` judges the same link)"
        ),
        shows="`gen 5 x16` / `gen 5 x8`; component the mlx5 device",
        action="reseat the HCA or its riser; check the slot's bifurcation in the BIOS",
        probe="lspci",
        plan="node",
    ),
    _check(
        "ib.affinity",
        "health",
        "error",
        "a rail HCA is not PIX/PXB from its GPU",
        section="ib",
        what=(
            "a rail HCA is not PIX/PXB from the GPU the profile pairs it with (GPUDirect would "
            "cross the CPU), or is absent from the matrix; also used when `nvidia-smi topo -m` "
            "itself failed (component `nvidia-smi-topo`)"
        ),
        shows="`PIX/PXB from GPU<n>` / `NODE`, `SYS`, …",
        action="check the profile's HCA order and PCI addresses against `nvidia-smi topo -m`",
        needs=("ib.driver",),
        probe="nvidia-smi-topo",
        plan="node",
    ),
    _check(
        "gdr.inactive",
        "health",
        "error",
        "neither nvidia_peermem nor dma-buf: no GPUDirect RDMA",
        section="gdr",
        what=(
            "health: neither `nvidia_peermem` loaded nor dma-buf possible (needs the open kernel "
            "module and Linux >= 5.12): NCCL copies through host memory. Only checked when "
            "`nvidia-smi -q` answers"
        ),
        shows="component the configured mode or `gpudirect`",
        action="`modprobe nvidia_peermem`; `bringup --limit NODE --phase fabric`",
        needs=("gpu.driver",),
        probe="modules",
        plan="node",
    ),
    _check(
        "gdr.mode",
        "health",
        "warning",
        "the other GPUDirect mode than the configured one is active",
        section="gdr",
        what=(
            "health: the mode the roles configured (`ansible_vars.gpudirect_rdma_mode`: "
            "`dmabuf`/`peermem`) is not active, the other one is"
        ),
        shows="`<mode> active` / what is loaded",
        action="fix the mode or the spec; NCCL still gets GPUDirect",
        needs=("gpu.driver",),
        probe="modules",
        plan="node",
    ),
    _check(
        "gdr.not-used",
        "gate",
        "error",
        "NCCL's NET/IB channels ran without GDRDMA",
        section="gdr",
        what=(
            "gate: in every multi-node job this host ran in, NCCL built NET/IB channels without "
            "`/GDRDMA` (or over sockets). Needs `NCCL_DEBUG=INFO` lines in the job output"
        ),
        shows="`every NET/IB channel via GDRDMA` / channel counts; component `nvidia_peermem`",
        action="`lsmod \\| grep peermem` on the host; `validate --health --nodes HOST`",
    ),
    _check(
        "nccl.env",
        "health",
        "error, warning",
        "/etc/nccl.conf differs from the rendered one",
        section="nccl-env",
        what=(
            "health: `/etc/nccl.conf` is missing, or a variable of the rendered `nccl.conf` is "
            "unset or different (error); it sets an `NCCL_*` variable the render does not "
            "(warning: hand-tuned)"
        ),
        shows="`KEY=value` / `KEY=seen` or `unset`; component the variable or `/etc/nccl.conf`",
        action=(
            "`bringup --limit NODE --phase comms`; move hand tuning into the spec's `nccl` section"
        ),
        probe="nccl-conf",
        plan="node",
    ),
    _check(
        "nccl.single",
        "gate",
        "error",
        "a one-node job below its floor",
        section="gate",
        what="one-node job below its floor, or no result rows",
        shows=(
            "`>= floor (basis)` / the measured busbw; component the step (`nvls-all_reduce`, "
            "`ring-all_reduce`, …)"
        ),
        action="`validate --health --nodes NODE` (NVLink, `gpu.fabric`, clocks)",
        plan="gate",
    ),
    _check(
        "nccl.pair",
        "gate",
        "error",
        "the node fails the pairs rung with two partners",
        section="gate",
        what=(
            "pairs rung: the node fails with two partners (below floor) once the failures a bad "
            "partner explains are set aside, or fails once and far below the fleet (a marginal "
            "node, not a straggler)"
        ),
        shows="`>= floor (basis, expected)` / each job with its partner",
        action="`validate --health --fabric --nodes NODE`; its cables and HCAs",
        plan="gate",
    ),
    _check(
        "nccl.rail",
        "gate",
        "error",
        "the node fails one rail with two partners",
        section="gate",
        what="`--rails` rung: the node fails one rail with two partners",
        shows="as `nccl.pair`; component `rail r (mlx5_r)`",
        action="that rail's HCA, cable and leaf port",
    ),
    _check(
        "nccl.full",
        "gate",
        "error",
        "the job over all nodes fails though the pairs passed",
        section="gate",
        what=(
            "the job over all admitted nodes (without those the pairs rung kept out) fails "
            "although the pairs passed, and splitting it found no failing pair: the smallest "
            "failing set is named, holding its nodes"
        ),
        shows="component `job <hostlist>`",
        action="spines, routing (OpenSM), SHARP",
    ),
    _check(
        "nccl.path",
        "gate",
        "error",
        "two nodes fail only together",
        section="gate",
        what=(
            "two nodes fail only together, twice, or every job holding both failed when the full "
            "job was split down (a path the screens never crossed); each passes with others"
        ),
        shows="component `path a <-> b`; the message lists the switch hops",
        action="the cables and switches on that path; `fabric.errors`",
    ),
    _check(
        "nccl.straggler",
        "gate",
        "warning",
        "passes the floor but far below the fleet",
        section="gate",
        what=(
            "passes the floor but far below the fleet: robust z-score under "
            "-`thresholds.nccl_gate.straggler_zscore` and 5 % below the median (needs 5 samples); "
            "single rung (component `single-nvls`) or pairs"
        ),
        shows="`fleet median` / busbw (z)",
        action="clocks, `gpu.throttle`, PCIe, CPU governor",
    ),
    _check(
        "nccl.flaky",
        "gate",
        "warning",
        "a pair failed once and passed when re-run",
        section="gate",
        what="a pair failed once and passed when re-run",
        shows="component `job a + b`",
        action="watch it; re-run the gate with another `--rotation`",
    ),
    _check(
        "nccl.unresolved",
        "gate",
        "error, warning",
        "a failure neither cleared nor blamed",
        section="gate",
        what=(
            "error: the node failed a job no bad partner explains and did not pass 8 re-tests in a "
            "row with proven partners (an intermittent node), never admitted on that; warning: "
            "could not be cleared or blamed (single node, or no proven-good partner left)"
        ),
        shows="the failed jobs",
        action=(
            "error: drain and `dcgmi diag -r 3`, its cables' counters; warning: gate it with more "
            "nodes"
        ),
    ),
    _check(
        "gate.unproven",
        "gate",
        "error, warning",
        "the gate did not prove the node",
        section="gate",
        what=(
            "workflows: nothing faults the node, but the gate did not prove it: no single-node job "
            "passed, or no multi-node job passed with a partner that is itself proven (no partner, "
            "`--no-gate`, the gate left it out). It stays drained (`unknown`); with "
            "`--admit-unproven` the operator admits it anyway and the finding is a warning that "
            "the record and report show"
        ),
        shows=(
            "`single-node job and a multi-node job with a proven partner passed` / what is "
            "missing; component `gate`"
        ),
        action=(
            "gate it with a known-good partner: `validate-after --nodes NODE --admit`, or "
            "`reimage` with nodes in service"
        ),
        not_run=True,
    ),
    _check(
        "nccl.fleet",
        "gate",
        "error",
        "too many nodes fail: nothing drained",
        section="gate",
        what=(
            "more than `thresholds.nccl_gate.max_failing_share` of the nodes (or screen pairs) "
            "fail: nothing drained"
        ),
        shows="observed says how many failed",
        action="suspect the fabric or the software stack, not the nodes",
    ),
    _check(
        "nccl.hang",
        "gate",
        "error",
        "the job's output was silent past the watchdog",
        section="gate",
        what=(
            "the job's output was silent for `thresholds.nccl_gate.watchdog_s` (or `gate "
            "--watchdog`), cancelled"
        ),
        shows="the step or job",
        action="`dmesg` (Xid), `ib.state`; run the job by hand with `NCCL_DEBUG=INFO`",
    ),
    _check(
        "nccl.wrong",
        "gate",
        "error",
        "#wrong or out-of-bounds values: data corruption",
        section="gate",
        what="`#wrong` or out-of-bounds values: silent data corruption, fails even at line rate",
        shows="the counts",
        action="drain; `gpu.ecc`, `dcgmi diag -r 3`",
    ),
    _check(
        "nccl.output",
        "gate",
        "error",
        "the step's output could not be parsed",
        section="gate",
        what="the step's output could not be parsed",
        shows="the parse error",
        action="read the step's `.out` in the workdir / run record",
    ),
    _check(
        "nccl.launch",
        "gate",
        "error, info",
        "the step never started, or a launch error line",
        section="gate",
        what="the step never printed (did not start), or a PMIx/MPI/srun launch error line",
        shows="the first error line",
        action="`srun --mpi=pmix` works? nccl-tests installed (`--phase tools`)?",
    ),
    _check(
        "nccl.oom",
        "gate",
        "error, info",
        "an out-of-memory line in the job",
        section="gate",
        what="an out-of-memory line in the job",
        shows="first line",
        action="other processes on the GPUs? `nvidia-smi`",
    ),
    _check(
        "nccl.ib",
        "gate",
        "error, info",
        "an InfiniBand error line in the job",
        section="gate",
        what="an InfiniBand error line (`NET/IB`, `ibv_*`, completion error)",
        shows="first line",
        action="the named host's HCAs: `ib.state`, `fabric.errors`",
    ),
    _check(
        "nccl.transport",
        "gate",
        "error, info",
        "a socket/transport error line in the job",
        section="gate",
        what="a socket/transport error line (connection refused/reset, `ncclSystemError`)",
        shows="first line",
        action="bootstrap interface (`NCCL_SOCKET_IFNAME`), firewalls",
    ),
    _check(
        "nccl.cuda",
        "gate",
        "error, info",
        "a CUDA error line in the job",
        section="gate",
        what="a CUDA error line (or an Xid in the output)",
        shows="first line",
        action="`gpu.xid`, `gpu.driver` on that host",
    ),
    _check(
        "nccl.abort",
        "gate",
        "error, info",
        "a timeout/abort line, or an unfinished step",
        section="gate",
        what="a timeout/abort line, or a step that did not finish with no classified line",
        shows="first line",
        action="read the step output; re-run",
    ),
    _check(
        "slurm.unavailable",
        "gate",
        "warning, error",
        "Slurm will not run jobs on the node",
        section="slurm",
        what=(
            "gate preflight: Slurm will not run jobs on the node (down, drained, not responding "
            "after 120 s, unknown), so it is left out of the gate; in the workflows' gate phase "
            "also a judged node a job still runs on, which the gate's maintenance reservation "
            "never takes. Warning in `gate`; error in `bringup`, `validate-after` and the re-image "
            "ladder (not admitted without the gate)"
        ),
        shows="`IDLE, MIXED or ALLOCATED` / state+flags (reason)",
        action="`sinfo -R -n NODE`; slurmd running, munge key",
        not_run=True,
    ),
    _check(
        "slurm.pending",
        "gate",
        "warning",
        "a gate job never left the queue",
        section="slurm",
        what=(
            "a gate job never left the queue within `gate --pending-timeout` (default 1800 s; 900 "
            "s in workflows) and was cancelled; says nothing about the nodes"
        ),
        shows="component `job a + b`; the Slurm pending reason",
        action="`squeue`/`scontrol show job`; partition, reservations",
        not_run=True,
    ),
    _check(
        "slurm.error",
        "gate",
        "error",
        "Slurm commands failed, so the gate could not run",
        section="slurm",
        what="workflows: Slurm commands failed, so the gate could not run; one per node",
        shows="`gate jobs run` / the error; component `gate`",
        action="slurmctld reachable? `--slurm-via`",
        not_run=True,
    ),
    _check(
        "admission.unproven",
        "workflow",
        "error",
        "the admission door found a gap in the node's proof",
        section="workflow",
        what=(
            "the one door (`cluster_tool/admission.py`) would not resume the node: a check its "
            "admission needs (from this registry) did not run in this run or was not planned, "
            "though no finding said so (the version probe timed out, a probe's output was not "
            "collected): the node is `unknown` and stays drained with this reason"
        ),
        shows="`a complete proof from this run` / the check and why it did not run",
        action="read why the check did not run (the run record's `skipped`), then run it again",
        not_run=True,
    ),
    _check(
        "admission.refused",
        "workflow",
        "warning",
        "a drain the run may not lift holds a proven node",
        section="workflow",
        what=(
            "the node was proven, but the door would not resume it: a drain holds it that this "
            "run may not lift: an operator's (without `--admit`), or one set after the run's "
            "proof began (by anyone, even during a `--resume`); it stays drained with that reason"
        ),
        shows="`a drain this run may lift` / the drain and whose it is",
        action="the drain's owner lifts it (`validate-after --admit`, `reimage --admit`, scontrol)",
    ),
    _check(
        "slurm.drain",
        "workflow",
        "warning",
        "a failed node's drain reason could not be set",
        section="slurm",
        what="`reimage`: a failed node's drain reason could not be set (the node stays drained)",
        shows="—",
        action="`scontrol update nodename=NODE state=drain reason=…`",
    ),
    _check(
        "os.unreachable",
        "workflow",
        "error",
        "a host did not answer over SSH or in the Slurm step",
        section="os",
        what=(
            "`validate`: a GPU node or the subnet-manager host did not answer over SSH (exit 3), "
            "or, with `--via slurm`, the node's record from the Slurm step is missing, empty, not "
            "node-check's JSON or names another node (exit 3, with why); `bringup`: Ansible found "
            "the host unreachable (exit 3 too)"
        ),
        shows="`reachable over SSH` / the SSH error",
        action="ping, `ssh NODE`, BMC console",
        not_run=True,
        plan="node",
    ),
    _check(
        "os.kernel-log",
        "health",
        "error",
        "the kernel log could not be read",
        section="os",
        what=(
            "`dmesg`/`journalctl -k` failed, was not collected, or could not be read: Xids and "
            "SXids unchecked (`gpu.xid`, `gpu.sxid` skipped), so the node is `unknown`, not `pass`"
        ),
        shows="`runs` / `exit N`; component `kernel-log`",
        action="`kernel.dmesg_restrict`; run as root",
        not_run=True,
        probe="kernel-log",
        plan="node",
    ),
    _check(
        "os.<name>",
        "health",
        "error",
        "a probe without an id of its own failed",
        section="os",
        what=(
            "fallback for a probe (named `<name>`) without an id of its own; every current probe "
            "has one, so it is not emitted today"
        ),
        shows="component the probe",
        action="—",
    ),
    _check(
        "storage.mount",
        "health",
        "error",
        "the shared filesystem or the scratch is not mounted as the spec says",
        section="storage",
        what=(
            "a GPU node lacks a mount of the spec's `storage` section (the shared filesystem at "
            "`storage.shared.mount`, the local scratch at `storage.scratch.mount`), or has another "
            "filesystem there (type or source; both named); health probe `storage` "
            "(`/proc/self/mounts`, `df -P -k -l`); also error when it is missing, failed or "
            "unreadable (component `storage`)"
        ),
        shows=(
            "`/shared mounted (nfs4/nfs from head:/srv/shared)` / `not mounted`; component the path"
        ),
        action="`mount PATH`; `bringup --limit NODE --tags storage`; the NFS server's exports",
        probe="storage",
        plan="node",
    ),
    _check(
        "storage.scratch-full",
        "health",
        "error, warning",
        "the local scratch is nearly full",
        section="storage",
        what=(
            "the local scratch has less free (of used + available, as df counts) than "
            "`thresholds.health.scratch_free_min_pct` (10 %, error) or `scratch_free_warn_pct` "
            "(20 %, warning): the next checkpoint may not fit"
        ),
        shows="`at least 10 % free` / `4.2 % free (12.0 GiB)`; component the scratch path",
        action="delete checkpoints already synced to the shared filesystem (their marker is there)",
        probe="storage",
        plan="node",
    ),
    _check(
        "version.drift",
        "compat",
        "error",
        "the node runs another driver than the spec pins",
        section="version",
        what="the node runs another NVIDIA driver, DOCA-OFED or NCCL than the spec pins",
        shows="the pin / what runs; component `nvidia_driver`, `doca` or `nccl`",
        action="re-run that phase on the node, or change the pin",
        plan="versions",
    ),
    _check(
        "version.incompatible",
        "compat",
        "error",
        "what the node runs breaks a matrix rule",
        section="version",
        what=(
            "what the node runs breaks a compatibility-matrix rule (with the spec's pins for what "
            "was not read): the fabric manager is not the loaded driver, an adapter off the "
            "firmware line its DOCA bundles, a kernel too old for dma-buf, pyxis built against "
            "another Slurm major.minor than the one installed; from `versions` and `validate` "
            "alike; the message names the rule and its source"
        ),
        shows=(
            "— / what runs; component the version read (`fabricmanager`, `kernel`, `pyxis_slurm`), "
            "with the HCA (`hca_firmware mlx5_0`)"
        ),
        action="docs/compat.md, the rule's row",
        plan="versions",
    ),
    _check(
        "version.outlier",
        "compat",
        "warning",
        "firmware or VBIOS differs from the fleet's",
        section="version",
        what=(
            "an adapter's firmware or a GPU's VBIOS differs from what most of its kind run across "
            "the fleet, or a node's kernel, Slurm, SHARP plugin or mlx5_core differs from most "
            "nodes' (the spec pins none of them exactly); with no majority the split is reported "
            "once, naming no node"
        ),
        shows=(
            "the fleet's common version / this one; component `hca_firmware mlx5_4`, `vbios GPU "
            "3`, `kernel`"
        ),
        action="update the one left behind (`flint`, the vendor's VBIOS tool, the OS image)",
        plan="versions",
    ),
    _check(
        "link.fec",
        "health",
        "error",
        "errors got past FEC on a compute HCA's link",
        section="link",
        what=(
            "errors got past FEC on the port, held to the limits for its speed "
            "(`thresholds.health.ib_link_quality.<edr\\|hdr\\|ndr\\|xdr\\|other>`, table below): "
            "Effective Physical Errors, Symbol Errors or RS-FEC uncorrectable blocks above "
            "`effective_errors_max` (0), or effective / symbol BER above `effective_ber_max` "
            "(1e-12); the message names the speed and the cable (vendor, part, serial)"
        ),
        shows=(
            "the limits and the speed / what was counted; component the device as given to "
            "`mlxlink -d`"
        ),
        action="reseat, then replace the cable or optic; check the switch side of the same cable",
        probe="mlxlink",
        plan="node",
    ),
    _check(
        "link.ber",
        "health",
        "warning",
        "raw BER above a limit the spec sets for the speed",
        section="link",
        what=(
            "raw (pre-FEC) BER above the `raw_ber_warn` the spec sets for the port's speed; none "
            "is set by default, so raw BER is recorded for the trend (`cluster-tool history`, "
            "`history.regression`) and never judged against a fixed figure"
        ),
        shows="`raw BER <= 1e-06 (NDR)` / `raw BER 3e-06`; component the device",
        action="clean or reseat the connector; watch the trend, replace the cable if it climbs",
        probe="mlxlink",
        plan="node",
    ),
    _check(
        "link.module-temp",
        "health",
        "warning",
        "the cable module runs hot",
        section="link",
        what=(
            "the cable module (transceiver) reads above `ib_module_temp_warn_c` (70 C); the "
            "message gives the module's own alarm range"
        ),
        shows="`<= 70 C` / `74 C`; component the device",
        action="airflow at the port; a module running hot fails first",
        probe="mlxlink",
        plan="node",
    ),
    _check(
        "link.flap",
        "fabric",
        "error",
        "a link went down while traffic ran, or again and again",
        section="counters",
        what=(
            "the link went down while the run's traffic ran (LinkDownedCounter climbed above "
            "`ib_link_downed_per_hour`), or went down more than `ib_link_flaps_max` times in the "
            "node's kernel log; the message names the cable (`gpu003 mlx5_0 ↔ su1-leaf-r0 port 3`) "
            "and whether it is up now. `watch`: not on the cables of a node rebooted between its "
            "cycles (`link.downed-reboot`)"
        ),
        shows=(
            "`the link stays up while traffic runs` / `at su1-leaf-r0 port 3: LinkDownedCounter "
            "+3; ...` or `down 2 times`; node and HCA"
        ),
        action=(
            "reseat, then replace the cable or optic; check the switch port with the same cable; "
            "`mlxlink` on both ends"
        ),
        evidence="event",
        plan="counters",
    ),
    _check(
        "link.errors",
        "fabric",
        "error",
        "error counters climbed faster than the per-hour limits",
        section="counters",
        what=(
            "an error counter (SymbolError, LinkErrorRecovery, PortRcvErrors, PortXmitDiscards, "
            "ExcessiveBufferOverrun) climbed faster than its per-hour limit while the traffic ran"
        ),
        shows=(
            "`error counters within the per-hour limits` / `at gpu002 mlx5_3: PortRcvErrors +11 "
            "(limit 10/h)`; node and HCA, or the switch for switch–switch cables"
        ),
        action=(
            "clean or replace the cable or optic; `link.ber` / `link.fec` of the same port say "
            "which"
        ),
        evidence="event",
        plan="counters",
    ),
    _check(
        "link.congestion",
        "fabric",
        "info, warning",
        "PortXmitWait climbed: congestion",
        section="counters",
        what=(
            "PortXmitWait climbed: the port had data and no credits from the far end of its cable, "
            "so the wait points past the port that counted it (at a node's HCA: its receivers or "
            "the fabric; at the leaf port toward a node: that node's HCA). Congestion, never an "
            "error; a warning above `ib_xmit_wait_warn_per_hour` (default none: info only)"
        ),
        shows="`no transmit wait` / `at ...: PortXmitWait +5000000`",
        action=(
            "look at the traffic pattern and the adaptive-routing / SHARP settings, not at the "
            "cable"
        ),
        evidence="event",
    ),
    _check(
        "link.counters-unknown",
        "fabric",
        "warning",
        "a counter reset or saturated between reads",
        section="counters",
        what=(
            "a counter read below its earlier value (cleared or reset between the reads) or sat at "
            "its maximum: no delta could be judged for it"
        ),
        shows=(
            "`counters readable as deltas` / `SymbolErrorCounter read 20 after 500: cleared or "
            "reset between the reads`"
        ),
        action="find who clears counters during runs; re-run to judge the port",
        evidence="event",
    ),
    _check(
        "link.downed-history",
        "fabric",
        "info, warning",
        "LinkDowned since the counters were cleared, with no snapshot: history, not a verdict",
        section="counters",
        what=(
            "absolute counters only (no snapshot before): LinkDownedCounter above "
            "`ib_link_downed_max` (0) at either end of a cable whose node was not rebooted in this "
            "run: the link went down at some time since the counters were cleared. Info; a warning "
            "when the counter is at its maximum 255 (no delta can be read from it). Never an error"
        ),
        shows=(
            "`LinkDownedCounter <= 0, or judged as a delta` / `su1-leaf-r0 port 1: "
            "LinkDownedCounter 1; gpu001 mlx5_0: LinkDownedCounter 1`; node and HCA"
        ),
        action=(
            "none by itself: `validate --after-maintenance` (or `watch`) judges the cable over a "
            "window; at 255, clear the port's counters (`perfquery -R`) so deltas can be read"
        ),
        evidence="event",
    ),
    _check(
        "link.downed-reboot",
        "fabric",
        "info",
        "LinkDowned of a rebooted node, not held against it",
        section="counters",
        what=(
            "LinkDownedCounter on the cable of a rebooted node, set aside: absolute counters of a "
            "node rebooted during the maintenance; in `watch`, the climb between two cycles on the "
            "cables of a node Slurm showed rebooting (`REBOOT_REQUESTED`, `REBOOT_ISSUED`, this "
            "cycle or the last) or whose `BootTime` moved (the message says which: a reboot Slurm "
            "did not order says `no Slurm reboot`); the node's own HCA counters restarting from "
            "zero there are no `link.counters-unknown`"
        ),
        shows=(
            "`LinkDownedCounter judged as a delta` / `su1-leaf-r0 port 3: LinkDownedCounter 2` or "
            "`at su1-leaf-r0 port 3: LinkDownedCounter +1; at gpu003 mlx5_0: LinkDownedCounter +1`"
        ),
        action=(
            "none; a run that takes a counter snapshot before its traffic judges the cable "
            "properly, and the watcher judges it again from its next cycle"
        ),
        evidence="event",
    ),
    _check(
        "burnin.sag",
        "gate",
        "error",
        "a node's busbw sagged over the soak (own baseline, fleet)",
        section="burnin",
        what="the node's busbw sagged during the soak, as above",
        shows=(
            "`>= 0.90x its first 3 samples' and >= the fleet floor` / `GB/s (ratio) late in the "
            "soak with N of M partner(s)`; component `soak all_reduce`"
        ),
        action=(
            "the node's clocks and throttling (`gpu.throttle`), temperatures under load, then its "
            "HCA links (`mlxlink`) and the port counters of its cables"
        ),
    ),
    _check(
        "burnin.unread",
        "gate",
        "error",
        "the soak gave too few busbw samples to judge the node",
        section="burnin",
        what=(
            "the soak gave too few samples for the node (`baseline_samples` or fewer): the job "
            "failed, hung (the gate's watchdog), never started, or its output could not be read"
        ),
        shows="`more than 3 busbw samples` / `N sample(s)`",
        action=(
            "the soak's files under the run record (`gate-work`), the batch output, Slurm's reason"
        ),
    ),
    _check(
        "burnin.step-failed",
        "gate",
        "error",
        "a soak step of a pair failed or left no output",
        section="burnin",
        what=(
            "a step of the soak failed for the pair (no result row: an error such as "
            "`NET/IB : Got completion ... error 12`, a hang the watchdog ended) or left no output "
            "although the batch script finished it: a pair that did not run through its soak "
            "proves nothing. Judged as the gate's pairs: a node whose steps failed with more "
            "than half of its partners (two at least) is named, one finding per failing pair; "
            "a failure no such node explains, or one of a node soaked with one partner, names "
            "both nodes of the pair"
        ),
        shows="`every soak step with a result` / `N of M step(s) with <partner> failed`",
        action=(
            "the pair's file in the run's gate workdir (`soak.<a>+<b>.out`); NET/IB errors: the "
            "two nodes' HCAs, `ib.state`, `link.errors`"
        ),
    ),
    _check(
        "burnin.wrong",
        "gate",
        "error",
        "all_reduce's data check counted wrong elements in the soak",
        section="burnin",
        what=(
            "all_reduce's data check (`-c 1`) counted wrong elements during the soak; both nodes "
            "of the pair are named"
        ),
        shows="`#wrong 0` / the pair",
        action=(
            "the gate's `nccl.wrong` action: GPU memory (`dcgmi diag -r 3`), ECC, then the pair's "
            "HCAs"
        ),
    ),
    _check(
        "history.regression",
        "workflow",
        "warning",
        "a node is worse than its own history",
        section="history",
        what=(
            "a single-node or pair busbw of the node is below the median of its own last "
            "`thresholds.history.runs` (20) runs by a modified z-score above `mad_z` (3.5; 0.6745 "
            "x drop / MAD) and by at least `min_drop` (0.05) of it, after `min_runs` (5) earlier "
            "runs, even when it is above the fleet floor. A pair's drop is the node's own only "
            "when its partner held up in jobs without it; a partner with no history leaves it "
            "unnamed"
        ),
        shows=(
            "`busbw near its baseline 469.2 GB/s (median of its last 5 runs, MAD 2.35)` / `436.4 "
            "GB/s (0.93x)`; component the gate step (`single-nvls nvls-all_reduce`, `pairs "
            "all_reduce`)"
        ),
        action=(
            "`cluster-tool history NODE`: since when, and did its hardware change; then the node's "
            "clocks, throttling, PCIe and HCA links"
        ),
    ),
    _check(
        "history.store",
        "workflow",
        "warning",
        "the history store could not be read or written",
        section="history",
        what=(
            "the history store could not be opened, read or written (corrupt, not SQLite, from a "
            "newer cluster-tool); the run's own verdict stands, it was neither judged against "
            "history nor recorded"
        ),
        shows="`the history store read and written` / the error; component the store's path",
        action="move the file aside; a new store starts empty",
    ),
    _check(
        "watch.straggler",
        "watch",
        "error",
        "the slow node of a running job, cycles running",
        section="watch",
        what=(
            "a node of a running job was the slow one `watch.straggler_cycles` (3) cycles running: "
            "a rate it sends (PortXmitData per rail, low), the credit waits of the leaf ports "
            "sending to it (PortXmitWait at the leaf's end of its cables, from the subnet-manager "
            "host's counters, high on at least two of its rails: one waiting link is "
            "`link.congestion`), or its slowest GPU's SM clock (low), is further from the job's "
            "other nodes' median than `watch.straggler_z` (3.5, modified z-score: 0.6745 x "
            "distance / MAD of the others) and by `straggler_min_drop` (0.2) of it; a job needs "
            "three nodes with the rate read. The node's own HCAs waiting never counts against it: "
            "a port waits on the far end of its cable"
        ),
        shows=(
            "`rates within the job's other nodes' (z <= 3.5)` / `slow 3 cycles running: "
            "PortXmitData mlx5_0 rail 0 2.00 GB/s against the job's other nodes' median 24.00 GB/s "
            "(z -inf)`; component `job ID`"
        ),
        action=(
            "the node's clocks, throttling, HCA links (`mlxlink`) on that rail; waits toward it: "
            "its PCIe links (`ib.pcie`), NUMA placement and host memory, its HCAs' receive side"
        ),
    ),
    _check(
        "watch.probe",
        "watch",
        "warning",
        "an idle node's NCCL probe below its own baseline",
        section="watch",
        what=(
            "with `watch.probes` on, an idle node's short NCCL probe (a per-rail all_reduce of "
            "`probe_bytes` with each of its two ring neighbours, as a low-priority Slurm job) fell "
            "on one rail, in every job it ran, `probe_min_drop` (0.2) below its own baseline there "
            "(the median of its last `thresholds.history.runs` probe runs, kept in "
            "`STATE_DIR/probe-history.sqlite` by GPU serials) and past `thresholds.history.mad_z`, "
            "while each partner held up in its job without it; after `thresholds.history.min_runs` "
            "earlier probe runs"
        ),
        shows=(
            "`probe busbw near its baseline 401.0 GB/s (median of its last 3 probe runs, MAD "
            "1.00)` / `200.0 GB/s (0.50x) with gpu002, gpu004`; component the rail's HCA"
        ),
        action="that rail's HCA, cable and GPU (`mlxlink`, `validate --node`); the node's clocks",
    ),
    _check(
        "watch.fleet",
        "watch",
        "error",
        "more nodes failing than watch may drain: nothing more",
        section="watch",
        what=(
            "more GPU nodes failing at once than watch may hold drained (`watch.max_drained_share` "
            "of the GPU nodes, at least one), counting its own drains: it drains nothing more"
        ),
        shows=(
            "`at most 1 of 4 GPU nodes drained by watch` / `1 drained, 2 more failing: gpu002, "
            "gpu003`; no node"
        ),
        action=(
            "suspect the fabric or a shared cause (a switch, the subnet manager, a bad rollout), "
            "not the nodes"
        ),
    ),
    _check(
        "watch.unread",
        "watch",
        "warning",
        "a signal watch reads could not be read this cycle",
        section="watch",
        what=(
            "a signal watch reads (nvidia-smi -q, the kernel log, the HCA port counters, "
            "ibnetdiscover/ibqueryerrors on the subnet-manager host) failed, timed out, was "
            "unreachable or unreadable this cycle; never a reason to drain. An nvidia-smi that "
            "says it cannot reach the driver is not unread but `gpu.driver`"
        ),
        shows="`the kernel log readable` / `exit 1: ...`; component the probe",
        action="the host's SSH, the tool on it",
    ),
    _check(
        "watch.slurm",
        "watch",
        "error",
        "watch could not read or act through Slurm",
        section="watch",
        what=(
            "watch could not read the running jobs and node states, drain a node or requeue a job "
            "through Slurm; it acts on nothing this cycle it could not read"
        ),
        shows="`Slurm answers (...)` / the error; no node",
        action="`--slurm-via`, the controller",
    ),
    _check(
        "watch.state-reset",
        "watch",
        "warning",
        "the state file was unreadable: started afresh",
        section="watch",
        what=(
            "the state file in the state directory could not be read (truncated, edited, another "
            "version): it was moved aside as `state.json.corrupt-<time>` and the watcher started "
            "afresh (counters and kernel logs read a new baseline; its drains are in Slurm, named "
            "as its own)"
        ),
        shows="`the watcher's state file readable` / the error",
        action="read the file kept aside if the reset repeats",
    ),
    _check(
        "ansible.converge",
        "workflow",
        "error",
        "a converge task failed on the host",
        section="workflow",
        what="`bringup`: a task failed on the host; it stays drained and is not validated",
        shows="`converged` / the task's message; component the task",
        action="the run record's `ansible/` events; `bringup --retry-failed`",
    ),
    _check(
        "bmc.refused",
        "workflow",
        "error",
        "the BMC refused PXE-once or the power cycle",
        section="workflow",
        what=(
            "`reimage`: Redfish refused PXE-once or power off/on, or the power state did not "
            "change within the power timeout"
        ),
        shows="observed the BMC error; component the step",
        action="BMC reachable, credentials, TLS (`--ca-bundle`)",
    ),
    _check(
        "reimage.no-ssh",
        "workflow",
        "error",
        "no SSH after the power cycle",
        section="workflow",
        what="`reimage`: no SSH after the power cycle within `--ssh-timeout` (1800 s)",
        shows="component `wait-ssh`",
        action="BMC console: PXE or installer stuck?",
    ),
    _check(
        "reimage.converge",
        "workflow",
        "error",
        "site.yml failed on the re-imaged node",
        section="workflow",
        what="`reimage`: `site.yml` failed on the re-imaged node",
        shows="observed the first failing task; component `converge`",
        action="the run record's `ansible/` events",
    ),
    _check(
        "reimage.drain-timeout",
        "workflow",
        "warning",
        "jobs still running past the drain timeout",
        section="workflow",
        what=(
            "`reimage`: jobs still running after `--drain-timeout` (3600 s) without `--force`; the "
            "node is resumed and not re-imaged"
        ),
        shows="observed Slurm's state",
        action="wait, or `--force`",
    ),
    _check(
        "reimage.<step>",
        "workflow",
        "error",
        "a journaled re-image step failed in the earlier run",
        section="workflow",
        what=(
            "`reimage --resume`: a node whose ladder (or another step without an id of its own) "
            "failed in the earlier run, named by the journaled step, e.g. `reimage.ladder`; BMC, "
            "SSH and converge failures keep `bmc.refused`, `reimage.no-ssh` and `reimage.converge` "
            "on resume"
        ),
        shows="observed the journaled reason",
        action="as for the step's original finding in that run's record",
    ),
)


def planned(suite: Plan) -> tuple[str, ...]:
    """The ids a run plans as test cases of `suite`, in the registry's order."""
    return tuple(c.id for c in CHECKS.values() if c.plan == suite)


# Errors that say a check could not run, not that something was found bad.
NOT_RUN = frozenset(c.id for c in CHECKS.values() if c.not_run)

# Every check a node's health run plans, every fabric check, the counters judged as deltas after
# traffic, the version read-back, the gate's rungs: the test cases of a run's JUnit file (a
# finding whose id is not listed still gets its own case).
NODE_CHECKS = planned("node")
FABRIC_CHECKS = planned("fabric")
COUNTER_CHECKS = planned("counters")
VERSION_CHECKS = planned("versions")
GATE_CHECKS = planned("gate")


def _needs() -> dict[str, tuple[str, ...]]:
    blocked: dict[str, list[str]] = {}
    for c in CHECKS.values():
        for need in c.needs:
            blocked.setdefault(need, []).append(c.id)
    return {k: tuple(v) for k, v in blocked.items()}


# What a failed probe leaves unrun: when the probe behind a check did not answer, the checks
# that read it did not run (JUnit <skipped>), whatever else the node showed.
NEEDS: dict[str, tuple[str, ...]] = _needs()


def relift(reason_checks: Iterable[str], reran: Iterable[str]) -> tuple[bool, str]:
    """Whether node-check may lift its own drain whose reason names `reason_checks`, having
    re-run `reran` clean this time: each named check must be one a fresh reading re-proves
    (`CheckInfo.relifts`) and must have run now. Returns the answer and, when no, why."""
    ran = set(reran)
    for check in reason_checks:
        info = CHECKS.get(check)
        if info is None or not info.relifts:
            return False, f"{check} is not re-proven by node-check (its evidence can vanish)"
        if check not in ran:
            return False, f"{check} did not run in this check"
    return True, ""


def node_checks_not_run(
    node: str, findings: Iterable[Finding], collected: Collection[str] | None
) -> dict[str, str]:
    """The node checks (`NODE_CHECKS`) that did not run on `node`, and why: those whose probe's
    output was not collected (`collected`: the probe names that came back; None when the caller
    cannot say, as for a node judged by its own node-check in a Slurm step), and those a failed
    probe or tool left unrun (`NEEDS`: `gpu.driver` failing leaves every GPU check unrun)."""
    out: dict[str, str] = {}
    if collected is not None:
        for check in NODE_CHECKS:
            probe = CHECKS[check].probe
            if probe is not None and probe not in collected:
                out[check] = f"{probe} not collected"
    for f in findings:
        if f.node == node and f.fails and f.check in NEEDS:
            out.update({c: f"{f.check}: {f.message}" for c in NEEDS[f.check]})
    return out
