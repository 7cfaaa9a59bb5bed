"""The limits the spec holds nodes, links and the gate to (`thresholds:`), as pydantic models.

The health checks, the nccl-tests gate, a node's history and the burn-in each read their own
class here; the cluster's shape (nodes, fabric, Slurm, storage) is in `cluster_tool.spec.models`.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from cluster_tool.spec.base import StrictModel


# Every InfiniBand generation from HDR on signals PAM4 behind RS-FEC: on a healthy link the raw
# (pre-FEC) BER is orders of magnitude above the 1e-12 the link is held to after FEC (real
# captures: 5e-10 on a ConnectX-7 at 4 x 100G PAM4, 2e-9 on a healthy 400G link, both losing
# nothing after FEC). So what fails a port is what FEC let through; raw BER is kept for
# each port's trend (history.py), and warns only where the spec sets a limit for its speed.
# Sources per speed are in docs/findings.md (link.fec, link.ber).
class LinkQuality(StrictModel):
    """What mlxlink's counters on a port of one speed are held to."""

    effective_ber_max: float = Field(
        1e-12,
        gt=0,
        description="Effective (post-FEC) BER, or Symbol BER where mlxlink prints it, above "
        "this is a link.fec error (default 1e-12: ibdiagnet's BER threshold, and what an "
        "RS(544,514) link is expected to keep after FEC).",
    )
    effective_errors_max: int = Field(
        0,
        ge=0,
        description="Errors left after FEC (Effective Physical Errors, Symbol Errors, RS-FEC "
        "uncorrectable blocks) tolerated (default 0: any is a link.fec error).",
    )
    raw_ber_warn: float | None = Field(
        None,
        gt=0,
        description="Raw (pre-FEC) BER above this is a link.ber warning; default none: raw "
        "BER is recorded for the port's trend, not judged (FEC corrects it by design).",
    )


class LinkQualityBySpeed(StrictModel):
    """Link-quality limits per InfiniBand generation; `other` holds Ethernet ports and ports
    whose speed mlxlink did not print."""

    edr: LinkQuality = Field(
        default_factory=lambda: LinkQuality.model_validate({}),
        description="EDR: 25G NRZ lanes, RS-FEC (528,514) or no FEC.",
    )
    hdr: LinkQuality = Field(
        default_factory=lambda: LinkQuality.model_validate({}),
        description="HDR: 50G PAM4 lanes, RS-FEC (544,514) + PLR.",
    )
    ndr: LinkQuality = Field(
        default_factory=lambda: LinkQuality.model_validate({}),
        description="NDR: 100G PAM4 lanes, RS-FEC (544,514) or low-latency RS-FEC "
        "(272,257+1) + PLR.",
    )
    xdr: LinkQuality = Field(
        default_factory=lambda: LinkQuality.model_validate({}),
        description="XDR: 200G PAM4 lanes, interleaved octet RS-FEC (546,516) + PLR.",
    )
    other: LinkQuality = Field(
        default_factory=lambda: LinkQuality.model_validate({}),
        description="Ethernet ports and ports of an unknown speed.",
    )

    def for_generation(self, generation: str | None) -> tuple[str, LinkQuality]:
        """The limits for a port of this InfiniBand generation (NDR, HDR, ...) and their name."""
        key = (generation or "").lower()
        if key in ("edr", "hdr", "ndr", "xdr"):
            return key.upper(), getattr(self, key)
        return "other", self.other


class HealthThresholds(StrictModel):
    """Limits the health checks hold nodes to (defaults suit H100/H200)."""

    gpu_temp_warn_c: int = Field(83, description="GPU temperature warning (default 83 C).")
    gpu_temp_error_c: int = Field(
        88, description="GPU temperature error (default 88 C, near H100 slowdown)."
    )
    ecc_uncorrectable_max: int = Field(
        0, ge=0, description="Volatile uncorrectable ECC errors tolerated (default 0)."
    )
    ecc_correctable_warn: int = Field(
        1000, ge=0, description="Volatile correctable ECC errors before a warning (default 1000)."
    )
    remapped_rows_pending_max: int = Field(
        0,
        ge=0,
        description="0 (default): a pending row remap fails the GPU until it is reset; above "
        "0 it is tolerated (nvidia-smi reports pending as yes/no, not a count).",
    )
    fatal_xids: list[int] = Field(
        default_factory=lambda: [48, 61, 62, 64, 74, 79, 92, 94, 95, 119, 120, 140, 154],
        description="XIDs that fail a node (default: ECC, NVLink, fell off the bus, GSP, recovery "
        "action required). 63 (a row remap recorded) is a warning: a remap waiting for its "
        "reset fails gpu.remapped-rows.",
    )
    gpu_pcie_gen: int = Field(5, ge=1, description="Expected GPU PCIe generation (default 5).")
    gpu_pcie_width: int = Field(16, ge=1, description="Expected GPU PCIe width (default 16).")
    ib_symbol_errors_max: int = Field(10, ge=0, description="SymbolErrorCounter (default 10).")
    ib_link_downed_max: int = Field(
        0,
        ge=0,
        description="LinkDownedCounter read as an absolute value (no snapshot before the run) "
        "at or below which nothing is said; above it is link.downed-history, info, never an "
        "error: every reboot or reseat counts one (default 0).",
    )
    ib_rcv_errors_max: int = Field(10, ge=0, description="PortRcvErrors (default 10).")
    ib_link_error_recovery_max: int = Field(
        5, ge=0, description="LinkErrorRecoveryCounter (default 5)."
    )
    ib_symbol_errors_per_hour: float = Field(
        10,
        ge=0,
        description="SymbolErrorCounter increase per port per hour while the run's traffic "
        "ran, when counters are judged as deltas (default 10).",
    )
    ib_link_error_recovery_per_hour: float = Field(
        0, ge=0, description="LinkErrorRecoveryCounter increase per port per hour (default 0)."
    )
    ib_link_downed_per_hour: float = Field(
        0,
        ge=0,
        description="LinkDownedCounter increase per port per hour (default 0: a link that "
        "went down while the traffic ran is a link.flap).",
    )
    ib_rcv_errors_per_hour: float = Field(
        10, ge=0, description="PortRcvErrors increase per port per hour (default 10)."
    )
    ib_xmit_discards_per_hour: float = Field(
        10, ge=0, description="PortXmitDiscards increase per port per hour (default 10)."
    )
    ib_buffer_overrun_per_hour: float = Field(
        0,
        ge=0,
        description="ExcessiveBufferOverrunErrors increase per port per hour (default 0).",
    )
    ib_xmit_wait_warn_per_hour: float | None = Field(
        None,
        ge=0,
        description="PortXmitWait (congestion, never an error) increase per port per hour "
        "above which link.congestion is a warning; default none: reported as info only.",
    )
    ib_link_flaps_max: int = Field(
        1,
        ge=0,
        description="Times one HCA port may go down in the node's kernel log (Link down, or "
        "a Link up after a Link up) before it is a link.flap (default 1: a reboot, a re-seat "
        "or a switch reboot is one).",
    )
    ib_link_quality: LinkQualityBySpeed = Field(
        default_factory=lambda: LinkQualityBySpeed.model_validate({}),
        description="What mlxlink's counters are held to, per link speed (`ndr`, `hdr`, ...): "
        "errors left after FEC fail the port, raw (pre-FEC) BER is recorded for its trend.",
    )
    ib_module_temp_warn_c: float = Field(
        70,
        description="Cable module (transceiver) temperature above this is a "
        "link.module-temp warning (default 70 C, the top of the commercial range).",
    )
    nvlink_crc_replay_warn: int = Field(
        0,
        ge=0,
        description="NVLink CRC or replay errors on one link above this are a "
        "gpu.nvlink-errors warning (default 0).",
    )
    nvlink_crc_replay_max: int = Field(
        1000,
        ge=0,
        description="NVLink CRC or replay errors on one link above this are a "
        "gpu.nvlink-errors error (default 1000).",
    )
    nvlink_recovery_max: int = Field(
        0,
        ge=0,
        description="NVLink recovery errors (the link retrained) on one link tolerated "
        "(default 0: any is a gpu.nvlink-errors error).",
    )
    hca_pcie_gen: int = Field(
        5, ge=1, description="Expected compute HCA PCIe generation (default 5, ConnectX-7)."
    )
    hca_pcie_width: int = Field(
        16, ge=1, description="Expected compute HCA PCIe width (default 16)."
    )
    scratch_free_warn_pct: float = Field(
        20,
        ge=0,
        le=100,
        description="Local scratch (`storage.scratch`) with less free than this share of its "
        "size is a storage.scratch-full warning (default 20 %).",
    )
    scratch_free_min_pct: float = Field(
        10,
        ge=0,
        le=100,
        description="...and with less than this, an error: the next checkpoint may not fit "
        "(default 10 %).",
    )


class NcclGateThresholds(StrictModel):
    """When the nccl-tests gate admits a node (defaults documented per field)."""

    busbw_fraction: float = Field(
        0.85, gt=0, le=1, description="Pass at this fraction of the profile's expected busbw."
    )
    straggler_zscore: float = Field(
        3.5,
        gt=0,
        description="A node whose busbw's modified z-score (0.6745 x distance from the median "
        "/ MAD, robust to the slow nodes themselves) is above this is a straggler (default "
        "3.5, Iglewicz and Hoaglin's cut).",
    )
    watchdog_s: int = Field(900, ge=1, description="Kill a hung nccl-tests job after (s).")
    max_failing_share: float = Field(
        0.25,
        gt=0,
        le=1,
        description="Above this share of failing nodes, stop and suspect the fabric, not "
        "the nodes (default 0.25).",
    )
    screens: int = Field(
        12,
        ge=1,
        le=64,
        description="Pair screens the gate runs, each node with a new partner each time "
        "(default 12: a node failing 30% of its jobs slips through all of them and the full "
        "job about 1% of the time; fewer screens cost fewer GPU-hours and catch fewer "
        "intermittent nodes, see `gate simulate --screens`).",
    )


class HistoryThresholds(StrictModel):
    """When a node is worse than its own history (`history.regression`, a warning)."""

    runs: int = Field(
        20, ge=1, le=200, description="The baseline: the node's last N runs (default 20)."
    )
    min_runs: int = Field(
        5,
        ge=1,
        le=200,
        description="Earlier runs a node needs before it is judged against its own history "
        "(default 5).",
    )
    mad_z: float = Field(
        3.5,
        gt=0,
        description="Worse than the baseline's median by a modified z-score (0.6745 x distance "
        "/ MAD of the baseline runs) above this (default 3.5, the gate's straggler cut), and "
        "by min_drop.",
    )
    min_drop: float = Field(
        0.05,
        gt=0,
        lt=1,
        description="Worse than the baseline's median by at least this fraction of it (default "
        "0.05): a node whose busbw never varied (MAD 0) is not flagged for a 1 % wobble.",
    )


class BurnInThresholds(StrictModel):
    """The burn-in rung (`--burn-in`): DCGM's run level, the soak's defaults, and when a node's
    busbw sags over the soak (`burnin.sag`)."""

    dcgm_level: Literal[3, 4] = Field(
        3,
        description="`dcgmi diag -r LEVEL` after the soak (default 3: adds Targeted Stress, "
        "Targeted Power, Memory Bandwidth; 4 adds the longer EUD/memtest runs).",
    )
    bringup_minutes: float = Field(
        240, gt=0, description="`bringup --burn-in default`: the soak's length (default 4 h)."
    )
    reimage_minutes: float = Field(
        30,
        gt=0,
        description="`reimage/validate --burn-in default`: the soak's length (default 30 min).",
    )
    message_bytes: int = Field(
        8 * 1024**3,
        ge=1024**2,
        description="The soak's all_reduce size (default 8 GiB: busbw's plateau on 2 nodes).",
    )
    cycles_per_step: int = Field(
        5,
        ge=1,
        le=1000,
        description="nccl-tests `-N` cycles per pair step; each cycle is one busbw sample "
        "(default 5).",
    )
    baseline_samples: int = Field(
        3,
        ge=1,
        le=100,
        description="A node's first N samples are its own baseline (default 3).",
    )
    sag_max: float = Field(
        0.10,
        gt=0,
        lt=1,
        description="A node sags when its late samples are this fraction below its own "
        "baseline with most of its partners (default 0.10).",
    )
    fleet_floor: float = Field(
        0.90,
        gt=0,
        le=1,
        description="Or when they are below this fraction of the fleet's median baseline "
        "(default 0.90).",
    )


class Thresholds(StrictModel):
    """Health-check and nccl-gate limits."""

    health: HealthThresholds = Field(default_factory=lambda: HealthThresholds.model_validate({}))
    nccl_gate: NcclGateThresholds = Field(
        default_factory=lambda: NcclGateThresholds.model_validate({})
    )
    history: HistoryThresholds = Field(default_factory=lambda: HistoryThresholds.model_validate({}))
    burn_in: BurnInThresholds = Field(default_factory=lambda: BurnInThresholds.model_validate({}))
