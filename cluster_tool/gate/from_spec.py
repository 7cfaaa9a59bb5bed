"""What the gate takes from the spec: nodes, profile, fabric, nccl-tests settings, limits."""

from __future__ import annotations

from dataclasses import dataclass

from cluster_tool.errors import UsageError
from cluster_tool.fabric.plan import plan_for
from cluster_tool.fabric.topology import Topology
from cluster_tool.gate.ladder import GateOptions
from cluster_tool.gate.plan import NcclTestParams
from cluster_tool.gate.thresholds import COLLECTIVES, Thresholds, profile_from_node_profile
from cluster_tool.spec import Cluster


@dataclass(frozen=True)
class GateInputs:
    """Everything the ladder needs, derived once from the spec."""

    nodes: list[str]
    thresholds: Thresholds
    params: NcclTestParams
    topology: Topology
    watchdog_s: float
    # The spec's limits; the operator's choices (rungs, drain, --screens) go on top.
    options: GateOptions


def gate_inputs(cluster: Cluster) -> GateInputs:
    """The gate's view of a spec; one node profile per gate run (thresholds are per profile)."""
    nodes = cluster.gpu_nodes()
    if not nodes:
        raise UsageError("the spec has no GPU nodes to gate")
    profiles = {n.profile_name for n in nodes}
    if len(profiles) > 1:
        raise UsageError(
            f"GPU nodes use several profiles ({', '.join(sorted(p or '?' for p in profiles))}); "
            "gate each group separately with --nodes"
        )
    profile = nodes[0].profile
    assert profile is not None  # gpu_nodes() only returns nodes with a profile
    try:
        gate_profile = profile_from_node_profile(profile)
    except ValueError as exc:
        raise UsageError(f"profile {nodes[0].profile_name}: {exc}") from exc
    limits = cluster.thresholds.nccl_gate
    tests = cluster.nccl.tests
    partition = next((p.name for p in cluster.slurm.partitions if p.default), None)
    params = NcclTestParams(
        collectives=tuple(c for c in tests.collectives if c in COLLECTIVES),
        min_bytes=tests.min_bytes,
        max_bytes=tests.max_bytes,
        step_factor=tests.step_factor,
        iters=tests.iters,
        warmup_iters=tests.warmup_iters,
        bin_dir=tests.binary_dir,
        partition=partition,
        collnet=cluster.fabric.sharp,
    )
    topology = Topology.from_plan(plan_for(cluster))
    return GateInputs(
        nodes=[n.name for n in nodes],
        thresholds=Thresholds(gate_profile, min_fraction=limits.busbw_fraction),
        params=params,
        topology=topology,
        watchdog_s=float(limits.watchdog_s),
        options=GateOptions.from_spec(limits),
    )
