"""How published runs count their throughput, defined once: FLOPs per step by each source's
formula, and the metrics derived from a step time."""

from __future__ import annotations

from tasks.model.kernels import roofline
from tasks.model.kernels.layer import Block, layer_params, training_flops_per_layer
from tasks.model.terms.specs import HardwareProfile

__all__ = ["FLOPS_FORMULAS", "flops_per_step", "metric_value"]

#: ``model``: model FLOPs, every layer's forward and backward once plus the output layer
#: (72 B s l h^2 (1 + s/6h + V/12lh) for a GPT with a 4h MLP: Megatron-LM's own count,
#: Korthikanti et al. 2022 §6; generalised to grouped-query attention and gated MLPs by
#: counting their GEMMs). ``narayanan``: Narayanan et al. 2021, Eq. 3,
#: 96 B s l h^2 (1 + s/6h + V/16lh): one more forward per layer for full recomputation,
#: the output layer once. ``maxtext2024``: MaxText's count as of April 2024
#: (MaxText/maxtext_utils.py ``calculate_tflops_training_per_device`` in
#: AI-Hypercomputer/maxtext at commit efb6d9e4a, after PaLM's appendix B): 6 N per token, N
#: every parameter (the layers' matrices, and the embedding and output matrices apart, as its
#: Llama configs leave them untied; the O(h) norm weights, 0.004 % of a 7B model, left out),
#: plus causal attention, 6 l h s^2 per sequence (its non-causal 12 l h s^2 halved).
FLOPS_FORMULAS = ("model", "narayanan", "maxtext2024")


def flops_per_step(formula: str, *, layers: int, hidden: int, heads: int, seq: int, vocab: int,
                   global_batch: int, block: Block) -> float:
    """FLOPs of one training step of ``global_batch`` sequences, counted by ``formula``."""
    if formula == "maxtext2024":
        params = layers * float(layer_params(float(hidden), float(heads), block)) + 2.0 * vocab * hidden
        return global_batch * (6.0 * params * seq + 6.0 * layers * hidden * float(seq) ** 2)
    per_layer = float(training_flops_per_layer(float(hidden), float(heads), float(seq), 1.0, 1.0, block))
    if formula == "narayanan":
        per_layer *= 4.0 / 3.0
    elif formula != "model":
        raise ValueError(f"flops_formula={formula!r}: choose one of {', '.join(FLOPS_FORMULAS)}")
    output_layer = 6.0 * seq * hidden * vocab
    return global_batch * (layers * per_layer + output_layer)


def metric_value(metric: str, step_time_s: float, *, flops: float, gpus: int, tokens: float, sequences: float,
                 hw: HardwareProfile) -> float:
    """A run's ``metric`` (``tasks.validation.runs.METRICS``) from its step time: seconds per
    step; TFLOP/s per GPU; MFU in percent of the dense 16-bit peak; tokens/s per GPU or for
    the job; sequences/s for the job."""
    if metric == "iter_time":
        return step_time_s
    if metric == "tflops_per_gpu":
        return flops / step_time_s / gpus / 1e12
    if metric == "mfu":
        return 100.0 * flops / step_time_s / gpus / roofline.peak_flops(hw, "bf16")
    if metric == "tokens_per_s_per_gpu":
        return tokens / step_time_s / gpus
    if metric == "tokens_per_s":
        return tokens / step_time_s
    if metric == "samples_per_s":
        return sequences / step_time_s
    raise ValueError(f"metric={metric!r} is not known")
