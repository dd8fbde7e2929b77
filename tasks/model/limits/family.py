"""A dense Transformer family scaled with its training compute, as a question about the limits
of scale needs one (Erdil and Schneider-Joseph, "Data movement limits to frontier model
training", arXiv 2411.01137, scale a dense model this way): compute-optimal parameters and
tokens, a fixed shape ratio, and a batch that grows with the compute.

- Parameters and tokens: Hoffmann et al. 2022 (Chinchilla, arXiv 2203.15556), about
  ``tokens_per_param`` = 20 training tokens per parameter, so C = 6 N D = 6 x 20 x N².
- Shape: d_model / layers held at ``aspect_ratio`` (GPT-3 175B: 12,288 / 96 = 128; Llama 3
  405B: 16,384 / 126 = 130), heads of ``head_dim``; the study's block (4 d² attention and
  8 d² MLP weights a layer, so N = 12 L d²), no embedding (negligible at these sizes).
- Batch, in tokens: ``batch_coefficient`` x C ^ ``batch_exponent`` x ``batch_scale``; by
  default DeepSeek LLM's fit of the compute-optimal batch (Bi et al. 2024, arXiv 2401.02954,
  §3.1: B_opt = 0.2920 · C^0.3271 tokens), in sequences of ``seq_len`` tokens.
- Sparse members (``experts`` > 0): every layer's MLP a mixture of ``experts`` routed experts
  of which each token visits ``topk``, each expert 4 d / topk wide (rounded to 128), so that a
  token's active weights are the dense member's (12 L d²) and the layer holds experts / topk
  times the dense MLP; the compute-optimal rule is applied to the active parameters (an
  assumption: 6 N_active D FLOP, D = 20 N_active).

Layers and heads are rounded so that pipeline and tensor degrees of powers of two divide
them (each to a multiple of the largest power of two at most an eighth of it: within about
6 % of the unrounded shape), and the batch to the nearest power of two of sequences; a
point's FLOP is then its own model's 6 N D, not the target's.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from tasks.model.terms.specs import TransformerModel

__all__ = ["Family", "FamilyPoint", "family_point", "rounded"]


@dataclass
class Family:
    """How the family scales (module docstring); every figure an assumption a preset states
    (``conf/limits``, where ``batch_scale`` is also each scenario's what-if)."""

    tokens_per_param: float = 20.0
    aspect_ratio: float = 128.0
    head_dim: int = 128
    seq_len: int = 8192
    batch_coefficient: float = 0.2920
    batch_exponent: float = 0.3271
    batch_scale: float = 1.0
    experts: int = 0
    topk: int = 0


@dataclass(frozen=True)
class FamilyPoint:
    """One member of the family: its model, its training FLOP (6 N D), the parameters a token
    uses N (all of a dense member's), tokens D, the global batch in sequences, the optimizer
    steps D / batch tokens, and every parameter the member holds."""

    model: TransformerModel
    flop: float
    params: float
    tokens: float
    batch_sequences: int
    steps: float
    total_params: float = 0.0


def rounded(value: float) -> int:
    """``value`` (at least 1) rounded to a multiple of the largest power of two at most an
    eighth of it: 359 -> 352 (a multiple of 32), 77 -> 80 (of 8), 5 -> 5."""
    step = 2 ** max(0, math.floor(math.log2(max(value, 1.0) / 8.0)))
    return max(step, int(round(value / step)) * step)


def family_point(flop: float, family: Family) -> FamilyPoint:
    """The member of ``family`` trained with about ``flop`` FLOP (module docstring)."""
    if not flop > 0:
        raise ValueError(f"flop={flop!r}: a training compute must be positive")
    target = math.sqrt(flop / (6.0 * family.tokens_per_param))
    layers = rounded((target / (12.0 * family.aspect_ratio ** 2)) ** (1.0 / 3.0))
    heads = rounded(math.sqrt(target / (12.0 * layers)) / family.head_dim)
    hidden = heads * family.head_dim
    sparse = {}
    params = total = 12.0 * layers * float(hidden) ** 2
    if family.experts:
        width = max(128, int(round(4 * hidden / family.topk / 128)) * 128)
        sparse = dict(experts=family.experts, topk=family.topk, moe_ffn_hidden=width)
        params = layers * (4.0 * hidden ** 2 + 2.0 * family.topk * hidden * width)
        total = layers * (4.0 * hidden ** 2 + 2.0 * family.experts * hidden * width)
    model = TransformerModel(name=f"family-{layers}x{hidden}" + (f"-e{family.experts}" if sparse else ""),
                             layers=layers, hidden=hidden, heads=heads, seq_len=family.seq_len, vocab=0, dropout=0.0,
                             source="tasks.model.limits.family (Chinchilla-optimal, fixed aspect ratio)", **sparse)
    tokens = family.tokens_per_param * params
    actual = 6.0 * params * tokens
    batch_tokens = family.batch_coefficient * actual ** family.batch_exponent * family.batch_scale
    sequences = 2 ** max(0, round(math.log2(max(batch_tokens / family.seq_len, 1.0))))
    return FamilyPoint(model=model, flop=actual, params=params, tokens=tokens, batch_sequences=int(sequences),
                       steps=tokens / (sequences * family.seq_len), total_params=total)
