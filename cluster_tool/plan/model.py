"""Transformer models the planner sizes: presets with published shapes, parameter and FLOP counts.

Symbols used throughout `cluster_tool.plan` (the PaLM paper's, Chowdhery et al. 2022, App. B):
P parameters taking part in matrix multiplies, L layers, H attention heads, Q head dimension
(H·Q = hidden size h), T sequence length, f FFN hidden size, V vocabulary, b micro-batch.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from functools import cached_property

from cluster_tool.errors import UsageError

# How a source counts training FLOPs per token (`ModelSpec.model_flops_per_token`).
FLOPS_CONVENTIONS = ("full", "causal", "full-mha")


@dataclass(frozen=True)
class ModelSpec:
    """A decoder-only transformer, by its shape.

    `gated_mlp` is SwiGLU (three FFN matrices, Llama); otherwise a plain MLP with two (GeLU
    in GPT, squared ReLU in Nemotron-4). `dropout` and `flash_attention` change what the
    backward pass must keep in memory (dropout masks, the T×T attention scores).

    Mixture of experts: `experts` > 0 replaces every layer's MLP by that many experts of
    `moe_ffn` (default `ffn`) and a router; each token goes through `top_k` of them
    (Mixtral 8x7B: 8 experts, top 2). The FLOPs count the experts a token uses, the memory
    all of them.
    """

    name: str
    layers: int
    hidden: int
    heads: int
    kv_heads: int
    ffn: int
    vocab: int
    seq: int
    gated_mlp: bool = True
    tied_embeddings: bool = False
    dropout: bool = False
    flash_attention: bool = True
    # GPT-style: learned position embeddings (T·h weights) and biases on every linear layer
    # and layer norm; Llama has neither (RoPE, RMSNorm, no biases).
    gpt_extras: bool = False
    # A published "N B parameters" figure, when the user gives --params: it replaces the
    # count derived from the shape for weights memory and the 6·P term.
    params_override: float | None = None
    experts: int = 0
    top_k: int = 0
    moe_ffn: int = 0

    def __post_init__(self) -> None:
        for field in ("layers", "hidden", "heads", "kv_heads", "ffn", "vocab", "seq"):
            if getattr(self, field) <= 0:
                raise UsageError(f"model {self.name}: {field} must be positive")
        if self.experts < 0 or self.top_k < 0 or self.moe_ffn < 0:
            raise UsageError(f"model {self.name}: experts, top-k and MoE FFN cannot be negative")
        if self.experts and not 1 <= self.top_k <= self.experts:
            raise UsageError(
                f"model {self.name}: top-k {self.top_k} must be from 1 to {self.experts} experts"
            )
        if not self.experts and (self.top_k or self.moe_ffn):
            raise UsageError(f"model {self.name}: top-k and MoE FFN need --experts")
        if self.hidden % self.heads:
            raise UsageError(f"model {self.name}: hidden {self.hidden} not divisible by heads")
        if self.heads % self.kv_heads:
            raise UsageError(f"model {self.name}: heads {self.heads} not a multiple of kv-heads")

    @cached_property
    def head_dim(self) -> int:
        """Q: the dimension of one attention head."""
        return self.hidden // self.heads

    @cached_property
    def kv_dim(self) -> int:
        """Width of K (and of V): kv_heads·Q; smaller than h under grouped-query attention."""
        return self.kv_heads * self.head_dim

    @property
    def moe(self) -> bool:
        return self.experts > 0

    @cached_property
    def expert_ffn(self) -> int:
        """FFN width of one expert (of the dense MLP when there are no experts)."""
        return (self.moe_ffn or self.ffn) if self.moe else self.ffn

    @cached_property
    def attention_params(self) -> int:
        """Q, K, V and output projections of one layer."""
        h = self.hidden
        return h * (h + 2 * self.kv_dim) + h * h

    @cached_property
    def mlp_params(self) -> int:
        """One MLP: the dense one, or one expert."""
        return (3 if self.gated_mlp else 2) * self.hidden * self.expert_ffn

    @cached_property
    def router_params(self) -> int:
        return self.hidden * self.experts

    @cached_property
    def _layer_extras(self) -> int:
        h = self.hidden
        biases = (3 * h + h + self.ffn + h) + 2 * h if self.gpt_extras else 0
        return 2 * h + biases  # two norms (+ biases)

    @cached_property
    def layer_params(self) -> int:
        """Weights of one transformer layer: Q, K, V, output projections, the MLP (every
        expert and the router in a MoE layer), two norms."""
        mlps = self.experts if self.moe else 1
        return (
            self.attention_params + mlps * self.mlp_params + self.router_params + self._layer_extras
        )

    @cached_property
    def expert_layer_params(self) -> int:
        """The part of `layer_params` in experts (sharded over expert parallelism)."""
        return self.experts * self.mlp_params if self.moe else 0

    @cached_property
    def active_layer_params(self) -> int:
        """Weights one token multiplies through in a layer: all but the experts it skips."""
        mlps = self.top_k if self.moe else 1
        return (
            self.attention_params + mlps * self.mlp_params + self.router_params + self._layer_extras
        )

    @cached_property
    def embedding_params(self) -> int:
        return self.vocab * self.hidden

    @cached_property
    def head_params(self) -> int:
        """The output projection to the vocabulary; shares the embedding's weights when tied."""
        return 0 if self.tied_embeddings else self.vocab * self.hidden

    @cached_property
    def counted_params(self) -> int:
        return (
            self.layers * self.layer_params
            + self.embedding_params
            + self.head_params
            + self.hidden  # final norm
            + (self.seq * self.hidden if self.gpt_extras else 0)  # learned positions
        )

    @cached_property
    def params(self) -> float:
        """Total parameters (what the model is named after)."""
        return self.params_override if self.params_override else float(self.counted_params)

    @cached_property
    def matmul_params(self) -> float:
        """P of `6·P`: every weight used in a matrix multiply. The input embedding is a table
        lookup (no FLOPs); the output projection multiplies even when it is tied."""
        counted = self.layers * self.active_layer_params + self.vocab * self.hidden
        return counted * self.scale

    @cached_property
    def scale(self) -> float:
        """Published over counted parameters: 1 unless --params overrides the count."""
        return self.params / self.counted_params

    def model_flops_per_token(self, seq: int | None = None, convention: str = "full") -> float:
        """Training FLOPs per token, `6·P + 12·L·H·Q·T` (forward 2, backward 4 per weight;
        attention scores and their use on values: 2·2·T·H·Q per layer forward, ×3 with backward).
        Recomputation is not counted: this is the numerator of MFU.

        `convention` says how the attention is counted, as sources differ (see FLOPS_CONVENTIONS):
        `full` over the whole sequence (PaLM's MFU, Megatron-LM's and NeMo's FLOP counters),
        `causal` only the lower triangle the causal mask keeps (half the attention term),
        `full-mha` as `full` with K and V projections counted as if every query head had its
        own (some NeMo benchmark READMEs count grouped-query models this way)."""
        t = self.seq if seq is None else seq
        if convention not in FLOPS_CONVENTIONS:
            raise UsageError(
                f"FLOP convention {convention!r}: one of {', '.join(FLOPS_CONVENTIONS)}"
            )
        attention = 12.0 * self.layers * self.hidden * t
        if convention == "causal":
            attention /= 2.0
        matmul = self.matmul_params
        if convention == "full-mha":
            matmul += self.layers * 2.0 * self.hidden * (self.hidden - self.kv_dim) * self.scale
        return 6.0 * matmul + attention

    def with_seq(self, seq: int) -> ModelSpec:
        return replace(self, seq=seq)


# Published shapes. Llama 3: "The Llama 3 Herd of Models" (Dubey et al. 2024), Table 3 and
# the released config.json (vocab 128,256, untied embeddings, SwiGLU, GQA with 8 KV heads).
# GPT-3: "Language Models are Few-Shot Learners" (Brown et al. 2020), Table 2.1
# (96 layers, d_model 12,288, 96 heads of 128, context 2,048; vocab 50,257, tied).
PRESETS: dict[str, ModelSpec] = {
    "llama3-8b": ModelSpec(
        "llama3-8b",
        layers=32,
        hidden=4096,
        heads=32,
        kv_heads=8,
        ffn=14336,
        vocab=128256,
        seq=8192,
    ),
    "llama3-70b": ModelSpec(
        "llama3-70b",
        layers=80,
        hidden=8192,
        heads=64,
        kv_heads=8,
        ffn=28672,
        vocab=128256,
        seq=8192,
    ),
    "llama3-405b": ModelSpec(
        "llama3-405b",
        layers=126,
        hidden=16384,
        heads=128,
        kv_heads=8,
        ffn=53248,
        vocab=128256,
        seq=8192,
    ),
    # Nemotron-4: squared-ReLU MLP of 4h (plain, two matrices), GQA with 8 KV heads, untied
    # 256K vocabulary: 15B "Nemotron-4 15B Technical Report" (arXiv:2402.16819) Table 1;
    # 340B "Nemotron-4 340B Technical Report" (arXiv:2406.11704) Table 1.
    "nemotron4-15b": ModelSpec(
        "nemotron4-15b",
        layers=32,
        hidden=6144,
        heads=48,
        kv_heads=8,
        ffn=24576,
        vocab=256000,
        seq=4096,
        gated_mlp=False,
    ),
    "nemotron4-340b": ModelSpec(
        "nemotron4-340b",
        layers=96,
        hidden=18432,
        heads=96,
        kv_heads=8,
        ffn=73728,
        vocab=256000,
        seq=4096,
        gated_mlp=False,
    ),
    # Mixtral 8x7B, "Mixtral of Experts" (arXiv:2401.04088) Table 1: 32 layers, dim 4096,
    # 32 heads (8 KV), 8 SwiGLU experts of 14,336, 2 per token, vocabulary 32,000.
    "mixtral-8x7b": ModelSpec(
        "mixtral-8x7b",
        layers=32,
        hidden=4096,
        heads=32,
        kv_heads=8,
        ffn=14336,
        vocab=32000,
        seq=4096,
        experts=8,
        top_k=2,
    ),
    "gpt3-175b": ModelSpec(
        "gpt3-175b",
        layers=96,
        hidden=12288,
        heads=96,
        kv_heads=96,
        ffn=4 * 12288,
        vocab=50257,
        seq=2048,
        gated_mlp=False,
        tied_embeddings=True,
        dropout=True,
        flash_attention=False,
        gpt_extras=True,
    ),
}


def preset(name: str) -> ModelSpec:
    """A built-in model by name; a usage error lists the known ones."""
    try:
        return PRESETS[name.lower()]
    except KeyError:
        raise UsageError(f"unknown model {name!r}; one of: {', '.join(sorted(PRESETS))}") from None


def megatron_gpt(
    name: str, *, layers: int, hidden: int, heads: int, seq: int = 2048, vocab: int = 51200
) -> ModelSpec:
    """The GPT shape of Narayanan et al. 2021 (Megatron-LM, SC'21): GeLU MLP of 4h, tied
    embeddings, dropout, no FlashAttention (it did not exist yet), vocabulary 51,200."""
    return ModelSpec(
        name,
        layers=layers,
        hidden=hidden,
        heads=heads,
        kv_heads=heads,
        ffn=4 * hidden,
        vocab=vocab,
        seq=seq,
        gated_mlp=False,
        tied_embeddings=True,
        dropout=True,
        flash_attention=False,
        gpt_extras=True,
    )
