"""What the planner needs to know about a cluster: nodes by SU, drained nodes, NVLink domain,
HBM, peak compute, and the bus bandwidth the gate measured (or the profile expects)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from functools import cached_property
from pathlib import Path
from typing import Any

from ClusterShell.NodeSet import NodeSet

from cluster_tool.errors import UsageError
from cluster_tool.gate.thresholds import (
    Efficiencies,
    GateProfile,
    Rung,
    Thresholds,
    profile_from_node_profile,
)
from cluster_tool.plan.comm import NETWORK_CAPTURE, NVLINK_CAPTURE, BusbwCurve, Fabric


@dataclass(frozen=True)
class GpuSpec:
    """Peak dense tensor-core TFLOP/s by precision and HBM size of one GPU model.

    Peaks are NVIDIA's datasheet figures without sparsity: H100 SXM 989 (bf16) and 1,979
    (fp8); H200 has the same compute as H100 with 141 GB HBM3e; A100 SXM 312 (bf16), kept
    so the model can be checked against the A100 results of the Megatron-LM paper. HBM
    bandwidth, also the datasheets': H100 SXM 3.35 TB/s, H200 4.8 TB/s, A100 80GB 2.04 TB/s;
    it paces the element-wise kernels and the optimizer step.
    """

    name: str
    hbm_gib: float
    peak_tflops: Mapping[str, float]
    # all_reduce_perf busbw within one NVLink domain at large messages (GB/s).
    nvlink_busbw_gbs: float
    hbm_tbs: float = 3.35

    def peak(self, precision: str) -> float:
        try:
            return self.peak_tflops[precision]
        except KeyError:
            raise UsageError(
                f"{self.name} has no {precision} peak; one of: "
                f"{', '.join(sorted(self.peak_tflops))}"
            ) from None


GPUS: dict[str, GpuSpec] = {
    "h100": GpuSpec("H100 SXM 80GB", 80.0, {"bf16": 989.0, "fp8": 1979.0}, 480.0, 3.35),
    "h200": GpuSpec("H200 SXM 141GB", 141.0, {"bf16": 989.0, "fp8": 1979.0}, 480.0, 4.8),
    # A100 SXM 80GB (DGX A100, NVLink 3): NCCL all-reduce reaches ~230 GB/s busbw in one node.
    "a100": GpuSpec("A100 SXM 80GB", 80.0, {"bf16": 312.0}, 230.0, 2.04),
}


def gpu_spec(model: str) -> GpuSpec:
    key = model.lower().split()[0].replace("nvidia", "").strip() or model.lower()
    for name, spec in GPUS.items():
        if name in model.lower() or name == key:
            return spec
    raise UsageError(f"no compute figures for GPU {model!r}; known: {', '.join(sorted(GPUS))}")


@dataclass(frozen=True)
class PlanNode:
    """One GPU node as the planner sees it: its name, its scalable unit, whether it is drained."""

    name: str
    su: int
    drained: bool = False


@dataclass(frozen=True)
class ClusterShape:
    """The shape of a validated cluster, reduced to what decides a parallel layout.

    `fabric_busbw_gbs` is all_reduce_perf busbw across nodes with every GPU of every node in
    the collective (what the gate measures); a rail-aligned group with one GPU per node gets
    one rail, i.e. `fabric_busbw_gbs / rails` (see `rail_busbw_gbs`).
    """

    nodes: tuple[PlanNode, ...]
    gpus_per_node: int
    nvlink_domain: int
    gpu: GpuSpec
    fabric_busbw_gbs: float
    nvlink_busbw_gbs: float
    rails: int
    busbw_source: str = "profile"
    hbm_gib: float = field(default=0.0)
    # busbw curves the gate measured, (bytes, GB/s): all_reduce across nodes with every GPU
    # of each node, and in one node. Empty: a real capture's shape at the peaks above.
    fabric_curve: tuple[tuple[float, float], ...] = ()
    nvlink_curve: tuple[tuple[float, float], ...] = ()
    fabric_curve_nodes: int = 2  # the nodes the fabric curve was measured on

    def __post_init__(self) -> None:
        if not self.hbm_gib:
            object.__setattr__(self, "hbm_gib", self.gpu.hbm_gib)
        if self.gpus_per_node <= 0 or self.nvlink_domain <= 0 or self.rails <= 0:
            raise UsageError("cluster shape: GPUs per node, NVLink domain and rails must be > 0")

    @property
    def usable_nodes(self) -> list[PlanNode]:
        return [n for n in self.nodes if not n.drained]

    @property
    def usable_gpus(self) -> int:
        return len(self.usable_nodes) * self.gpus_per_node

    @property
    def rail_busbw_gbs(self) -> float:
        return self.fabric_busbw_gbs / self.rails

    @cached_property
    def _fabric(self) -> Fabric:
        return self._build_fabric()

    def fabric(self) -> Fabric:
        """What each parallel group's collectives get (`cluster_tool.plan.comm`)."""
        return self._fabric

    def _build_fabric(self) -> Fabric:
        """What each parallel group's collectives get (`cluster_tool.plan.comm`). All-gathers
        and reduce-scatters in a node run as rings, not NVLS: their peak is the all-reduce
        peak times the gate's ring/NVLS efficiency ratio (370/480 on HGX H100)."""
        eff = Efficiencies()
        ring_peak = self.nvlink_busbw_gbs * eff.nvlink_ring / eff.nvls
        g = self.gpus_per_node
        if self.nvlink_curve:
            nvlink = BusbwCurve.measured(list(self.nvlink_curve), self.busbw_source, g, 1)
        else:
            nvlink = BusbwCurve.shaped(NVLINK_CAPTURE, ring_peak, "capture shape", 8, 1)
        nodes = max(2, self.fabric_curve_nodes)
        if self.fabric_curve:
            network = BusbwCurve.measured(
                list(self.fabric_curve), self.busbw_source, nodes * g, nodes
            )
        else:
            network = BusbwCurve.shaped(
                NETWORK_CAPTURE, self.fabric_busbw_gbs, "capture shape", 16, 2
            )
        return Fabric(nvlink=nvlink.scaled(ring_peak), network=network, rails=self.rails)

    def su_sizes(self) -> dict[int, int]:
        """Usable nodes per SU."""
        sizes: dict[int, int] = {}
        for node in self.usable_nodes:
            sizes[node.su] = sizes.get(node.su, 0) + 1
        return sizes

    def with_drained(self, names: Iterable[str]) -> ClusterShape:
        """The same cluster with more nodes drained; an unknown name is a usage error."""
        wanted = set(names)
        known = {n.name for n in self.nodes}
        unknown = wanted - known
        if unknown:
            raise UsageError(
                f"drained nodes not in the cluster: {NodeSet.fromlist(sorted(unknown))}"
            )
        nodes = tuple(replace(n, drained=n.drained or n.name in wanted) for n in self.nodes)
        return replace(self, nodes=nodes)

    def with_busbw(
        self,
        *,
        fabric: float | None = None,
        nvlink: float | None = None,
        source: str = "gate",
        fabric_curve: Sequence[tuple[float, float]] = (),
        nvlink_curve: Sequence[tuple[float, float]] = (),
        fabric_curve_nodes: int = 2,
    ) -> ClusterShape:
        measured = fabric or nvlink or fabric_curve or nvlink_curve
        return replace(
            self,
            fabric_busbw_gbs=fabric or self.fabric_busbw_gbs,
            nvlink_busbw_gbs=nvlink or self.nvlink_busbw_gbs,
            busbw_source=source if measured else self.busbw_source,
            fabric_curve=tuple(fabric_curve) or self.fabric_curve,
            nvlink_curve=tuple(nvlink_curve) or self.nvlink_curve,
            fabric_curve_nodes=fabric_curve_nodes if fabric_curve else self.fabric_curve_nodes,
        )

    @classmethod
    def synthetic(
        cls,
        *,
        nodes: int,
        nodes_per_su: int = 32,
        gpu: str | GpuSpec = "h100",
        gpus_per_node: int = 8,
        fabric_busbw_gbs: float | None = None,
        drained: Iterable[str] = (),
        prefix: str = "gpu",
    ) -> ClusterShape:
        """A uniform cluster of `nodes` nodes, `nodes_per_su` to an SU, one NDR rail per GPU:
        for what-if planning (`--nodes`) and for tests. Its busbw is what the gate expects of
        such nodes (`cluster_tool.gate.thresholds`), unless `fabric_busbw_gbs` is given."""
        spec = gpu if isinstance(gpu, GpuSpec) else gpu_spec(gpu)
        expected = Thresholds(GateProfile(gpus_per_node=gpus_per_node))
        if fabric_busbw_gbs is None:
            fabric_busbw_gbs = expected.expect(Rung.FULL, nodes=max(2, nodes)).expected_gbs
        width = max(3, len(str(nodes)))
        drained_set = set(drained)
        plan_nodes = tuple(
            PlanNode(
                name=f"{prefix}{i + 1:0{width}d}",
                su=i // nodes_per_su + 1,
                drained=f"{prefix}{i + 1:0{width}d}" in drained_set,
            )
            for i in range(nodes)
        )
        return cls(
            nodes=plan_nodes,
            gpus_per_node=gpus_per_node,
            nvlink_domain=gpus_per_node,
            gpu=spec,
            fabric_busbw_gbs=fabric_busbw_gbs,
            nvlink_busbw_gbs=spec.nvlink_busbw_gbs,
            rails=gpus_per_node,
        )

    @classmethod
    def from_spec(cls, cluster: Any, *, drained: Iterable[str] = ()) -> ClusterShape:
        """The shape of a loaded spec (`cluster_tool.spec.load_spec`): GPU nodes with their SU,
        the profile's GPU, NVLink domain, compute HCAs (rails) and expected busbw."""
        gpu_nodes = list(cluster.gpu_nodes())
        if not gpu_nodes:
            raise UsageError("the spec has no GPU nodes to plan on")
        profile = gpu_nodes[0].profile
        for node in gpu_nodes[1:]:
            if node.profile.gpu_count != profile.gpu_count:
                raise UsageError(
                    f"{node.name}: {node.profile.gpu_count} GPUs where {gpu_nodes[0].name} has "
                    f"{profile.gpu_count}; the planner needs one GPU count for all nodes"
                )
        base = gpu_spec(str(profile.gpu_model))
        hbm = float(profile.gpu_memory_gib)
        rails = len(profile.compute_hcas)
        # The same expected busbw the gate admits nodes against: one source for both.
        try:
            gate_profile = profile_from_node_profile(profile)
        except ValueError as exc:
            raise UsageError(f"profile {gpu_nodes[0].profile_name}: {exc}") from exc
        expected = Thresholds(gate_profile)
        best_single = Rung.SINGLE_NVLS if gate_profile.nvls else Rung.SINGLE_RING
        shape = cls(
            nodes=tuple(PlanNode(name=n.name, su=int(n.su)) for n in gpu_nodes),
            gpus_per_node=int(profile.gpu_count),
            nvlink_domain=int(profile.nvlink_domain_size),
            gpu=replace(base, hbm_gib=hbm),
            fabric_busbw_gbs=expected.expect(Rung.FULL, nodes=len(gpu_nodes)).expected_gbs,
            nvlink_busbw_gbs=expected.expect(best_single).expected_gbs,
            rails=rails,
            hbm_gib=hbm,
        )
        return shape.with_drained(drained)


def parse_hostlist(text: str, what: str = "hostlist") -> list[str]:
    """`gpu[001-004],gpu017` → names; a malformed or oversized hostlist is a usage error."""
    from cluster_tool.bounds import expand_hostlist

    return expand_hostlist(text, what)


@dataclass(frozen=True)
class GateResults:
    """What the planner takes from a gate run: measured busbw and nodes to keep out."""

    fabric_busbw_gbs: float | None
    nvlink_busbw_gbs: float | None
    drained: tuple[str, ...]
    # The whole busbw curves behind those figures, (bytes, GB/s), when the results carry them,
    # and how many nodes the fabric curve was measured on.
    fabric_curve: tuple[tuple[float, float], ...] = ()
    nvlink_curve: tuple[tuple[float, float], ...] = ()
    fabric_curve_nodes: int = 2


def read_gate_results(path: Path, *, gpus_per_node: int = 8) -> GateResults:
    """Read gate results JSON. Accepted shapes (any combination, at any depth):

    - the gate's own report (`cluster-tool gate --json`): `summary.rungs.full.busbw_gbs` with
      its `nodes` count is the fabric busbw, `summary.drain.nodes` (node → reason) and error
      findings name the nodes to leave out;
    - `{"busbw_gbs": {"multi_node": X, "single_node": Y}}` or flat
      `{"multi_node_busbw_gbs": X, "single_node_busbw_gbs": Y}`;
    - nccl-tests records as `cluster-tool parse nccl-tests --json` writes them (`ranks`,
      `rows[].in_place.busbw`): a run with more ranks than one node's GPUs counts as fabric
      busbw, otherwise as NVLink busbw; the busbw of the largest message is taken;
    - a workflow's `summary.json` (`bringup`, `reimage`, `validate-after`): its `busbw`
      curves (all_reduce at the largest message: NVLS on one node, across nodes for pairs and
      larger) and every node whose `verdict` is not `pass` as drained;
    - drained nodes: `"drained"` (list or hostlist), or `"findings"` with severity `error`
      and a `node` (the findings contract of every check).

    Where several values are found the lowest counts: plan for the slowest measured path.
    """
    from cluster_tool.fileio import load_json, read_input_bytes

    data: Any = load_json(read_input_bytes(path), path)
    fabric: list[float] = []
    nvlink: list[float] = []
    drained: set[str] = set()
    curves: dict[str, list[tuple[tuple[float, float], ...]]] = {"fabric": [], "nvlink": []}
    curve_nodes: dict[tuple[tuple[float, float], ...], int] = {}

    def visit(obj: Any) -> None:
        if isinstance(obj, list):
            for item in obj:
                visit(item)
            return
        if not isinstance(obj, dict):
            return
        bw = obj.get("busbw_gbs")
        if isinstance(bw, Mapping):
            _add(fabric, bw.get("multi_node"))
            _add(nvlink, bw.get("single_node"))
        elif isinstance(obj.get("nodes"), int):
            _add(fabric if obj["nodes"] > 1 else nvlink, bw)
        _add(fabric, obj.get("multi_node_busbw_gbs"))
        _add(nvlink, obj.get("single_node_busbw_gbs"))
        if isinstance(obj.get("rows"), list) and obj["rows"]:
            value = _largest_message_busbw(obj["rows"])
            ranks = obj.get("ranks")
            count = len(ranks) if isinstance(ranks, list) else ranks
            if value is not None:
                many = isinstance(count, int) and count > gpus_per_node
                (fabric if many else nvlink).append(value)
                curve = _rows_curve(obj["rows"])
                if curve:
                    curves["fabric" if many else "nvlink"].append(curve)
                    if many and isinstance(count, int):
                        curve_nodes[curve] = max(2, count // gpus_per_node)
        points, ran_on = obj.get("points"), obj.get("nodes")
        if isinstance(points, list) and points and isinstance(ran_on, list):
            # A workflow's summary.json (`busbw`): each gate job's curve; all_reduce only
            # (NVLS inside a node, as NCCL picks by default), at its largest message.
            label = str(obj.get("label", ""))
            multi = len(ran_on) > 1
            if label.endswith(" all_reduce" if multi else "nvls-all_reduce"):
                largest = max(
                    (p for p in points if isinstance(p, list) and len(p) == 2),
                    key=lambda p: p[0],
                    default=None,
                )
                if largest is not None:
                    _add(fabric if multi else nvlink, largest[1])
                    curve = tuple(
                        (float(p[0]), float(p[1]))
                        for p in points
                        if isinstance(p, list)
                        and len(p) == 2
                        and all(isinstance(x, int | float) and x > 0 for x in p)
                    )
                    if curve:
                        curves["fabric" if multi else "nvlink"].append(curve)
                        curve_nodes[curve] = max(2, len(ran_on))
        verdicts = obj.get("nodes")
        if isinstance(verdicts, Mapping):
            # A workflow's summary.json: every node not proven stays out of the plan.
            drained.update(
                str(name)
                for name, v in verdicts.items()
                if isinstance(v, Mapping) and v.get("verdict") not in (None, "pass")
            )
        listed = obj.get("drained")
        if isinstance(listed, str):
            drained.update(parse_hostlist(listed, f"{path}: drained"))
        elif isinstance(listed, list):
            drained.update(str(x) for x in listed)
        drain = obj.get("drain")
        if isinstance(drain, Mapping) and isinstance(drain.get("nodes"), Mapping):
            drained.update(str(name) for name in drain["nodes"])
        findings = obj.get("findings")
        for finding in findings if isinstance(findings, list) else []:
            if (
                isinstance(finding, dict)
                and finding.get("severity") == "error"
                and finding.get("node")
            ):
                drained.add(str(finding["node"]))
        for key, value in obj.items():
            if key not in ("findings", "rows", "ranks") and isinstance(value, dict | list):
                visit(value)

    visit(data)
    # Of several measured curves, the one with the lowest peak: the slowest measured path.
    slowest = {
        kind: min(found, key=lambda c: max(b for _, b in c)) if found else ()
        for kind, found in curves.items()
    }
    return GateResults(
        fabric_busbw_gbs=min(fabric) if fabric else None,
        nvlink_busbw_gbs=min(nvlink) if nvlink else None,
        drained=tuple(sorted(drained)),
        fabric_curve=tuple(sorted(slowest["fabric"])),
        nvlink_curve=tuple(sorted(slowest["nvlink"])),
        fabric_curve_nodes=curve_nodes.get(slowest["fabric"], 2),
    )


def _rows_curve(rows: Sequence[Any]) -> tuple[tuple[float, float], ...]:
    """(size, busbw) of every well-formed row of an nccl-tests record."""
    out = []
    for row in rows:
        if not isinstance(row, dict) or not isinstance(row.get("size"), int):
            continue
        for key in ("in_place", "out_of_place"):
            part = row.get(key)
            if isinstance(part, dict) and isinstance(part.get("busbw"), int | float):
                if row["size"] > 0 and part["busbw"] > 0:
                    out.append((float(row["size"]), float(part["busbw"])))
                break
    return tuple(out)


def _add(values: list[float], value: Any) -> None:
    if isinstance(value, int | float) and value > 0:
        values.append(float(value))


def _largest_message_busbw(rows: Sequence[Any]) -> float | None:
    best: tuple[int, float] | None = None
    for row in rows:
        if not isinstance(row, dict):
            continue
        size = row.get("size")
        for key in ("in_place", "out_of_place"):
            part = row.get(key)
            if isinstance(part, dict) and isinstance(part.get("busbw"), int | float):
                if isinstance(size, int) and (best is None or size > best[0]):
                    best = (size, float(part["busbw"]))
                break
    return best[1] if best and best[1] > 0 else None
