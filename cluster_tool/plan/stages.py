"""How the transformer layers are split over pipeline ranks and their virtual stages, and how
Megatron-Core is told.

Megatron-Core (megatron/core/transformer/transformer_config.py, megatron/training/arguments.py)
accepts four ways, tried here from the plainest:

- even: every rank the same number of layers, `--num-layers-per-virtual-pipeline-stage`;
- account: the embedding and the loss each take one layer's slot
  (`--account-for-embedding-in-pipeline-split --account-for-loss-in-pipeline-split`), so the
  first and last ranks get one layer fewer (NVIDIA's Llama 3.1 405B recipes: 126 + 2 slots on
  8 ranks × 8 virtual stages);
- first/last: `--decoder-first-pipeline-num-layers` and `--decoder-last-pipeline-num-layers`,
  the middle ranks sharing the rest equally; with virtual stages every one of the three counts
  must divide by VP (`--num-virtual-stages-per-pipeline-rank`);
- layout: `--pipeline-model-parallel-layout`, any count per virtual stage.

A split is chosen for its step time: the steady state runs at the pace of the slowest rank
(its layers plus, on the last, the output layer), the pipeline fill and drain at the pace of the
largest virtual stage.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import cached_property, lru_cache

from cluster_tool.errors import UsageError

SPLIT_KINDS = ("even", "account", "first-last", "layout")


@dataclass(frozen=True)
class StageSplit:
    """Layers per pipeline rank (first to last), per virtual stage, and the form that says so."""

    layers: tuple[int, ...]
    vp: int
    kind: str
    # Layers of each virtual stage of each rank: chunks[rank][chunk].
    chunks: tuple[tuple[int, ...], ...]

    @property
    def pp(self) -> int:
        return len(self.layers)

    @property
    def even(self) -> bool:
        return len(set(self.layers)) == 1

    @cached_property
    def largest_chunk(self) -> int:
        """Layers of the largest virtual stage."""
        return max(max(c) for c in self.chunks)

    def megatron_args(self) -> list[str]:
        """The Megatron-LM flags that produce this split."""
        if self.pp == 1:
            return []
        if self.kind == "even":
            per = self.layers[0] // self.vp
            return [f"--num-layers-per-virtual-pipeline-stage {per}"] if self.vp > 1 else []
        if self.kind == "account":
            args = [
                "--account-for-embedding-in-pipeline-split",
                "--account-for-loss-in-pipeline-split",
            ]
            if self.vp > 1:
                args.append(f"--num-layers-per-virtual-pipeline-stage {self.chunks[1][0]}")
            return args
        if self.kind == "first-last":
            args = [
                f"--decoder-first-pipeline-num-layers {self.layers[0]}",
                f"--decoder-last-pipeline-num-layers {self.layers[-1]}",
            ]
            if self.vp > 1:
                args.append(f"--num-virtual-stages-per-pipeline-rank {self.vp}")
            return args
        return [f"--pipeline-model-parallel-layout '{pipeline_layout(self.chunks)}'"]


def pipeline_layout(chunks: tuple[tuple[int, ...], ...]) -> str:
    """Megatron-Core `--pipeline-model-parallel-layout`: `E` embedding, `t` a transformer layer,
    `L` the loss/output layer, `|` ends a virtual stage; virtual stage i runs on pipeline rank
    i mod PP, so the string lists chunk 0 of every rank, then chunk 1, and so on."""
    pp, vp = len(chunks), len(chunks[0])
    parts: list[str] = []
    for c in range(vp):
        for r in range(pp):
            n = chunks[r][c]
            text = "t" if n == 1 else (f"t*{n}" if n else "")
            if c == 0 and r == 0:
                text = "E" + text
            if c == vp - 1 and r == pp - 1:
                text += "L"
            parts.append(text)
    return _compress(parts)


def _compress(parts: list[str]) -> str:
    out: list[str] = []
    i = 0
    while i < len(parts):
        j = i
        while j + 1 < len(parts) and parts[j + 1] == parts[i]:
            j += 1
        run = j - i + 1
        is_last = j == len(parts) - 1
        if run >= 3 and not is_last:
            out.append(f"({parts[i]}|)*{run}")
        else:
            out.extend(p + "|" for p in parts[i : j + 1])
        i = j + 1
    text = "".join(out)
    return text[:-1] if text.endswith("|") else text


def _spread(layers: int, vp: int) -> tuple[int, ...]:
    """A rank's layers over its virtual stages, the larger ones first."""
    base, extra = divmod(layers, vp)
    return tuple(base + (1 if c < extra else 0) for c in range(vp))


def _ranks_split(ranks: tuple[int, ...], vp: int, kind: str) -> StageSplit:
    return StageSplit(ranks, vp, kind, tuple(_spread(n, vp) for n in ranks))


def _best_first_last(
    layers: int, pp: int, vp: int, head: float, microbatches: int
) -> tuple[float, StageSplit] | None:
    """The fastest first/last split: every count a multiple of VP, the middle ranks equal.
    Costed from the three counts alone (the split is built only for the winner)."""
    best: tuple[float, int, int, int] | None = None
    middle_ranks = pp - 2
    # The best middle share is near L/PP, the best last share near half of what the middle
    # leaves, less the output layer: only those neighbourhoods are costed.
    around = layers // pp // vp * vp
    for per_middle in range(max(vp, around - 2 * vp), around + 3 * vp, vp):
        ends = layers - per_middle * middle_ranks
        if ends < 2 * vp:
            break
        centre = int((ends - head) / 2) // vp * vp
        for last in range(max(vp, centre - 2 * vp), min(ends - vp, centre + 2 * vp) + 1, vp):
            first = ends - last
            if first == last == per_middle:
                continue  # that is the even split
            load = max(first, per_middle, last + head)
            chunk = max(first, per_middle, last) / vp + head
            cost = microbatches * load + (pp - 1) * chunk
            if best is None or cost < best[0] - 1e-9:
                best = (cost, first, per_middle, last)
    if best is None:
        return None
    cost, first, per_middle, last = best
    ranks = (first, *([per_middle] * middle_ranks), last)
    return cost, _ranks_split(ranks, vp, "first-last")


def _candidates(
    layers: int, pp: int, vp: int, head: float, microbatches: int
) -> list[tuple[float, StageSplit]]:
    out: list[StageSplit] = []
    if layers % (pp * vp) == 0:
        out.append(_ranks_split((layers // pp,) * pp, vp, "even"))
    # Embedding and loss as one slot each: (L + 2) slots, slots / (PP·VP) per virtual stage.
    slots = layers + 2
    if slots % (pp * vp) == 0:
        per_chunk = slots // (pp * vp)
        chunks = [[per_chunk] * vp for _ in range(pp)]
        chunks[0][0] -= 1
        chunks[-1][-1] -= 1
        if min(min(c) for c in chunks) >= 1:
            ranks = tuple(sum(c) for c in chunks)
            out.append(StageSplit(ranks, vp, "account", tuple(tuple(c) for c in chunks)))
    # Any count per rank: balance the output layer against whole layers.
    ranks = _balanced(layers, pp, head)
    if min(ranks) >= vp:
        out.append(_ranks_split(ranks, vp, "layout"))
    costed = [(_cost(split, head, microbatches), split) for split in out]
    # First and last ranks set apart, the middle ones equal, every count a multiple of VP.
    if pp > 2:
        first_last = _best_first_last(layers, pp, vp, head, microbatches)
        if first_last is not None:
            costed.append(first_last)
    return costed


def _balanced(layers: int, pp: int, head: float) -> tuple[int, ...]:
    """Per-rank counts that make the heaviest rank (the last carries the output layer, `head`
    layers' worth) as light as whole layers allow; spare layers go to the middle ranks."""
    if pp == 1:
        return (layers,)
    best: tuple[float, int] | None = None
    # From the largest last share down: among equally heavy splits the most even one wins
    # (Llama 3 405B on 16 ranks: 7 / 8 × 14 / 7).
    for last in range(layers - (pp - 1), 0, -1):
        rest = layers - last
        load = max(math.ceil(rest / (pp - 1)), last + head)
        if best is None or load < best[0] - 1e-9:
            best = (load, last)
    assert best is not None
    last = best[1]
    base, extra = divmod(layers - last, pp - 1)
    ranks = [base] * (pp - 1)
    for i in range(extra):
        ranks[(pp - 2 - i) if i < pp - 2 else 0] += 1
    return (*ranks, last)


def _cost(split: StageSplit, head: float, microbatches: int) -> float:
    """Step time in layer-times: the slowest rank for every micro-batch, plus the fill and
    drain at the pace of the largest virtual stage."""
    load = max(max(split.layers[:-1], default=0), split.layers[-1] + head)
    chunk = max(split.largest_chunk, split.chunks[-1][-1] + head)
    return microbatches * load + (split.pp - 1) * chunk


@lru_cache(maxsize=16384)
def split_stages(layers: int, pp: int, vp: int, head: float, microbatches: int) -> StageSplit:
    """The fastest split of `layers` over `pp` ranks of `vp` virtual stages each, the plainest
    form first among equals; a usage error when there is none (a virtual stage needs a layer)."""
    if pp > layers:
        raise UsageError(f"pipeline of {pp} stages for {layers} layers")
    if pp == 1:
        if vp != 1:
            raise UsageError("virtual stages need PP > 1")
        return StageSplit((layers,), 1, "even", ((layers,),))
    candidates = _candidates(layers, pp, vp, head, microbatches)
    if not candidates:
        raise UsageError(f"{layers} layers do not fill {pp} ranks × {vp} virtual stages")
    return min(candidates, key=lambda c: (round(c[0], 9), SPLIT_KINDS.index(c[1].kind)))[1]


def virtual_stage_options(layers: int, pp: int) -> list[int]:
    """Every VP some split can give to `pp` ranks (each virtual stage at least one layer)."""
    if pp == 1:
        return [1]
    return [1, *range(2, layers // pp + 1)]
