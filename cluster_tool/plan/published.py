"""Published H100 training runs the planner is measured against: the table in
`data/published_runs.csv` (and the shapes in `data/published_models.csv`) as typed records.

Every figure in those files was read by hand from the source named on its row; nothing is
derived from the planner. A run publishes one of four figures (step time, tokens/s per GPU,
model TFLOP/s per GPU, MFU), the last two counted by the source's FLOP convention; each is
turned into tokens/s per GPU, the one figure every convention agrees on, and from it into MFU
by the planner's convention (`ModelSpec.model_flops_per_token`).
"""

from __future__ import annotations

import csv
import io
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING

from cluster_tool.errors import ParseError, UsageError
from cluster_tool.plan.estimate import CP_COMM_TYPES, Assumptions, Estimate, Layout, Training
from cluster_tool.plan.model import FLOPS_CONVENTIONS, ModelSpec

if TYPE_CHECKING:
    from cluster_tool.plan.cluster import ClusterShape

DATA = Path(__file__).resolve().parent / "data"
RUNS_CSV = DATA / "published_runs.csv"
MODELS_CSV = DATA / "published_models.csv"

METRICS = ("step_time_s", "tokens_per_s_per_gpu", "tflops_per_gpu", "mfu")
SPLITS = ("fit", "held-out")
RECOMPUTE = ("none", "selective", "full")

# NVIDIA H100 SXM datasheet, dense (no sparsity): 989 TFLOP/s bf16, 1,979 fp8. Every source in
# the table divides by these to state its MFU.
H100_PEAK_TFLOPS = {"bf16": 989.0, "fp8": 1979.0}


@dataclass(frozen=True)
class PublishedRun:
    """One published run: its layout as the source states it (None where it does not), its
    batch, precision and throughput figure, and where it comes from."""

    id: str
    model: ModelSpec
    gpus: int
    tp: int
    pp: int
    cp: int
    dp: int
    vp: int | None
    micro_batch: int | None
    global_batch: int
    seq: int
    precision: str
    recompute: str | None
    tp_overlap: bool | None
    cp_comm: str | None
    zero: str | None
    grad_dtype: str | None
    optimizer_dtype: str | None
    metric: str
    value: float
    convention: str
    check_metric: str | None
    check_value: float | None
    split: str
    source: str
    line: int

    @property
    def peak_tflops(self) -> float:
        return H100_PEAK_TFLOPS[self.precision]

    def tokens_per_s_per_gpu(self) -> float:
        """The published figure as tokens per second per GPU."""
        return _tokens_per_s_per_gpu(self, self.metric, self.value)

    def mfu(self, convention: str = "full") -> float:
        """Model FLOPs utilisation by `convention`, against the dense peak of the run's
        precision (as the sources state theirs)."""
        flops = self.model.model_flops_per_token(self.seq, convention)
        return self.tokens_per_s_per_gpu() * flops / (self.peak_tflops * 1e12)

    def check_tokens_per_s_per_gpu(self) -> float | None:
        """The source's second figure for the run, as tokens/s per GPU (None if it has none)."""
        if self.check_metric is None or self.check_value is None:
            return None
        return _tokens_per_s_per_gpu(self, self.check_metric, self.check_value)


def _tokens_per_s_per_gpu(run: PublishedRun, metric: str, value: float) -> float:
    if metric == "step_time_s":
        return run.global_batch * run.seq / (value * run.gpus)
    if metric == "tokens_per_s_per_gpu":
        return value
    flops = run.model.model_flops_per_token(run.seq, run.convention)
    if metric == "tflops_per_gpu":
        return value * 1e12 / flops
    return value * run.peak_tflops * 1e12 / flops  # mfu


def _rows(path: Path) -> tuple[list[str], list[tuple[int, list[str]]]]:
    """Header and data rows of one of the table's CSV files, with their line numbers; `#`
    lines are comments."""
    text = path.read_text(encoding="utf-8")
    header: list[str] | None = None
    rows: list[tuple[int, list[str]]] = []
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip() or line.startswith("#"):
            continue
        fields = next(csv.reader(io.StringIO(line)))
        if header is None:
            header = fields
            continue
        if len(fields) != len(header):
            raise ParseError(
                f"{len(fields)} fields where the header has {len(header)}",
                line_no=number,
                line=line,
                source=str(path),
            )
        rows.append((number, fields))
    if header is None:
        raise ParseError("no header line", source=str(path))
    return header, rows


class _Row:
    """One data row of a table file, read field by field; every error names its line."""

    def __init__(self, path: Path, number: int, header: list[str], fields: list[str]) -> None:
        self.path, self.number = path, number
        self.fields = dict(zip(header, fields, strict=True))
        self.line = ",".join(fields)

    def error(self, message: str) -> ParseError:
        return ParseError(message, line_no=self.number, line=self.line, source=str(self.path))

    def text(self, key: str) -> str:
        return self.fields[key]

    def count(self, key: str) -> int:
        try:
            value = int(self.fields[key])
        except ValueError:
            raise self.error(f"{key}: not a whole number") from None
        if value <= 0:
            raise self.error(f"{key}: must be positive")
        return value

    def maybe_count(self, key: str) -> int | None:
        return self.count(key) if self.fields[key] else None

    def decimal(self, key: str) -> float | None:
        if not self.fields[key]:
            return None
        try:
            return float(self.fields[key])
        except ValueError:
            raise self.error(f"{key}: not a number") from None

    def choice(self, key: str, allowed: tuple[str, ...]) -> str:
        value = self.fields[key]
        if value not in allowed:
            raise self.error(f"{key} {value!r}: one of {', '.join(allowed)}")
        return value

    def maybe_choice(self, key: str, allowed: tuple[str, ...]) -> str | None:
        return self.choice(key, allowed) if self.fields[key] else None


@cache
def load_models(path: Path = MODELS_CSV) -> dict[str, ModelSpec]:
    """The table's model shapes by name."""
    header, rows = _rows(path)
    models: dict[str, ModelSpec] = {}
    for number, fields in rows:
        row = _Row(path, number, header, fields)
        name = row.text("name")
        models[name] = ModelSpec(
            name,
            layers=row.count("layers"),
            hidden=row.count("hidden"),
            heads=row.count("heads"),
            kv_heads=row.count("kv_heads"),
            ffn=row.count("ffn"),
            vocab=row.count("vocab"),
            seq=2048,  # each run sets its own
            gated_mlp=row.choice("mlp", ("gated", "plain")) == "gated",
            tied_embeddings=row.choice("tied", ("yes", "no")) == "yes",
            gpt_extras=row.choice("gpt_extras", ("yes", "no")) == "yes",
            dropout=(row.decimal("dropout") or 0.0) > 0,
        )
    return models


@cache
def load_runs(path: Path = RUNS_CSV, models_path: Path = MODELS_CSV) -> tuple[PublishedRun, ...]:
    """Every published run of the table, in table order."""
    models = load_models(models_path)
    header, rows = _rows(path)
    runs: list[PublishedRun] = []
    for number, fields in rows:
        row = _Row(path, number, header, fields)
        name = row.text("model")
        if name not in models:
            raise row.error(f"model {name!r} is not in {models_path.name}")
        seq = row.count("seq")
        value = row.decimal("value")
        if value is None or value <= 0:
            raise row.error("value: a positive number is needed")
        overlap = row.maybe_choice("tp_overlap", ("yes", "no"))
        run = PublishedRun(
            id=row.text("id"),
            model=models[name].with_seq(seq),
            gpus=row.count("gpus"),
            tp=row.count("tp"),
            pp=row.count("pp"),
            cp=row.count("cp"),
            dp=row.count("dp"),
            vp=row.maybe_count("vp"),
            micro_batch=row.maybe_count("mbs"),
            global_batch=row.count("gbs"),
            seq=seq,
            precision=row.choice("precision", tuple(H100_PEAK_TFLOPS)),
            recompute=row.maybe_choice("recompute", RECOMPUTE),
            tp_overlap=None if overlap is None else overlap == "yes",
            cp_comm=row.maybe_choice("cp_comm", CP_COMM_TYPES),
            zero=row.maybe_choice("zero", ("1", "2")),
            grad_dtype=row.maybe_choice("grad_dtype", ("fp32", "bf16")),
            optimizer_dtype=row.maybe_choice("optimizer_dtype", ("fp32", "bf16")),
            metric=row.choice("metric", METRICS),
            value=value,
            convention=row.choice("convention", FLOPS_CONVENTIONS),
            check_metric=row.maybe_choice("check_metric", METRICS),
            check_value=row.decimal("check_value"),
            split=row.choice("split", SPLITS),
            source=row.text("source"),
            line=number,
        )
        if run.tp * run.pp * run.cp * run.dp != run.gpus:
            raise row.error(
                f"TP {run.tp} × PP {run.pp} × CP {run.cp} × DP {run.dp} is not {run.gpus} GPUs"
            )
        if any(r.id == run.id for r in runs):
            raise row.error(f"run id {run.id!r} appears twice")
        runs.append(run)
    return tuple(runs)


# ---------------------------------------------------------------- what the planner is given


def run_training(run: PublishedRun) -> Training:
    """The training the run fixes, in the planner's terms: its batch, precision, sharding and
    recomputation where the source states them (the planner's defaults where it does not); the
    micro-batch is left to the planner so that its search can be compared with the run's."""
    defaults = Training(global_batch=run.global_batch)
    return Training(
        global_batch=run.global_batch,
        precision=run.precision,
        zero=run.zero or defaults.zero,
        recompute=run.recompute or defaults.recompute,
        grad_dtype=run.grad_dtype or defaults.grad_dtype,
        optimizer_dtype=run.optimizer_dtype or defaults.optimizer_dtype,
    )


def run_assumptions(run: PublishedRun) -> Assumptions:
    """The planner's assumptions for the run: TP communication overlapped unless the source
    says it was not (the planner's own default, and what Megatron-LM's and NeMo's recipes set);
    context parallelism as the source says it moved K and V (the ring where it does not)."""
    return Assumptions(tp_overlap=run.tp_overlap is not False, cp_comm=run.cp_comm or "p2p")


def run_cluster(run: PublishedRun) -> ClusterShape:
    """An H100 cluster of the run's size, 8 GPUs and 8 rails per node, 32 nodes to an SU; a
    run on fewer than 8 GPUs (NeMo's 4-GPU long-sequence row) gets one node of that many."""
    from cluster_tool.plan.cluster import ClusterShape

    if run.gpus < 8:
        return ClusterShape.synthetic(nodes=1, gpu="h100", gpus_per_node=run.gpus)
    return ClusterShape.synthetic(nodes=run.gpus // 8, gpu="h100")


def published_layouts(run: PublishedRun) -> list[Layout]:
    """The run's layout; where the source leaves the virtual stages or the micro-batch unsaid,
    every value the planner's search would consider for them (the caller keeps the best: those
    are the planner's to choose, as they would be for that layout in its search)."""
    from cluster_tool.plan.search import MICRO_BATCHES, virtual_stage_sizes

    layouts = []
    for b in [run.micro_batch] if run.micro_batch else MICRO_BATCHES:
        if run.global_batch % (run.dp * b):
            continue
        m = run.global_batch // (run.dp * b)
        for v in [run.vp] if run.vp else virtual_stage_sizes(run.model, run.pp, m):
            layouts.append(Layout(run.tp, run.pp, run.dp, run.cp, v, b))
    return layouts


def published_estimate(
    run: PublishedRun, assumptions: Assumptions | None = None
) -> tuple[Estimate, bool]:
    """The planner's estimate of the run's own layout (the best over what the source left
    unsaid), and whether the layout fits in memory."""
    from cluster_tool.plan.estimate import estimate

    cluster, training = run_cluster(run), run_training(run)
    a = assumptions or run_assumptions(run)
    estimates = []
    for lay in published_layouts(run):
        try:
            estimates.append(estimate(run.model, cluster, training, lay, a))
        except UsageError:
            continue  # a VP no split of these layers can give
    if not estimates:
        raise UsageError(f"{run.id}: no virtual-stage count splits its layers")
    fitting = [e for e in estimates if e.fits]
    return max(fitting or estimates, key=lambda e: e.mfu), bool(fitting)
