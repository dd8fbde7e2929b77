"""Memory of one device under a parallel layout (method.md §8): model states and activations,
and what of a device's HBM a layout may fill (``usable_memory_bytes``).

Every function is vectorised over NumPy arrays; results are bytes. Coded fields follow
``tasks.model.terms.layout`` (``ZERO_MODES``, ``RECOMPUTE_MODES``); a layer's parameters are
``layer.layer_params``.
"""

from __future__ import annotations

import numpy as np

from tasks.model.collectives.dp_protocol import shards
from tasks.model.kernels import op_checkpoint
from tasks.model.kernels.layer import STUDY_BLOCK, Block
from tasks.model.terms.layout import code

__all__ = [
    "HBM_BYTES_PER_GB",
    "USABLE_HBM_FRACTION",
    "first_stages_activation_layers",
    "usable_memory_bytes",
    "WEIGHT_BYTES",
    "GRADIENT_BYTES",
    "OPTIMIZER_BYTES",
    "weights_sharded",
    "model_state_bytes",
    "model_state_shard_params",
    "FP8_WEIGHT_BYTES",
    "fp8_weight_copy_bytes",
    "layer_activation_bytes",
    "dots_activation_bytes",
    "in_flight_microbatches",
    "resident_layers",
    "logits_bytes",
]

#: Bytes in one gigabyte of a datasheet's HBM capacity (a profile's ``hbm_gb``): a binary
#: gigabyte. HBM comes in stacks of whole binary gigabytes (an H100 SXM's 80 GB are five
#: 16 GiB HBM3 stacks, an A100's 80 GB five of HBM2e), and CUDA's deviceQuery reports
#: 85,045,477,376 bytes of global memory on an "H100 80GB HBM3" (99 % of 80 GiB, 6 % above
#: 80e9; nvidia-smi: 81,559 MiB): the part the driver keeps is far below the 6 % a decimal
#: reading would lose.
HBM_BYTES_PER_GB = float(2**30)

#: The share of HBM a layout's model states and activations may fill: the rest holds the CUDA
#: context, communication buffers and what the caching allocator cannot reuse. Assumption, the
#: one definition (the step model, the search's ``memory_fraction`` default, validation).
USABLE_HBM_FRACTION = 0.9


def usable_memory_bytes(hbm_gb, fraction=USABLE_HBM_FRACTION):
    """Bytes a layout may fill on a device of ``hbm_gb`` datasheet gigabytes of HBM
    (``HBM_BYTES_PER_GB`` each): ``fraction`` of them."""
    return np.asarray(hbm_gb, dtype=np.float64) * HBM_BYTES_PER_GB * fraction


#: Mixed-precision Adam keeps 16 bytes per parameter (Rajbhandari et al., ZeRO, 2020 §3.1):
#: fp16 weights (2) and gradients (2), fp32 master weights, momentum and variance (12).
WEIGHT_BYTES, GRADIENT_BYTES, OPTIMIZER_BYTES = 2.0, 2.0, 12.0


def weights_sharded(zero) -> np.ndarray:
    """Where ``zero`` (codes) shards the weights themselves over DP (``dp_protocol.SHARDING``:
    ZeRO-3, FSDP and hybrid FSDP, the last over its shard group)."""
    return shards(zero, "weights")


def model_state_bytes(params, dp, zero, weight_bytes=WEIGHT_BYTES, microbatches=None):
    """Weights, gradients and optimizer states of ``params`` parameters on one device.
    ``weight_bytes``: the width the model keeps its weights in (``WEIGHT_BYTES``, or
    ``FP8_WEIGHT_BYTES`` under a stack's ``fp8_params``). ``microbatches``: per step and
    replica, where known; at one, fsdp and hsdp shard the gradients too (no ``no_sync``
    accumulation: ``dp_protocol.ShardingMode.shards_unaccumulated``).

    ZeRO (Rajbhandari et al. 2020) divides by the DP degree what it shards
    (``dp_protocol.SHARDING``): zero1 the optimizer states (4 + 12/DP bytes per parameter);
    zero3 everything (16/DP); fsdp (FULL_SHARD with gradients accumulated unsharded under
    ``no_sync``) the weights and optimizer states, not the gradients (2/DP + 2 + 12/DP);
    hsdp as fsdp over its shard group. ``dp``: the ranks the states are split over
    (``StepLayouts.shard_ranks``: the DP degree, a hybrid mode's ranks on one node);
    ``zero`` holds codes.
    """
    params = np.asarray(params, dtype=np.float64)
    dp = np.asarray(dp, dtype=np.float64)
    weights = np.where(shards(zero, "weights"), weight_bytes / dp, weight_bytes)
    gradients = np.where(shards(zero, "gradients", microbatches), GRADIENT_BYTES / dp, GRADIENT_BYTES)
    optimizer = np.where(shards(zero, "optimizer"), OPTIMIZER_BYTES / dp, OPTIMIZER_BYTES)
    return params * (weights + gradients + optimizer)


#: Transformer Engine keeps an fp8 copy of each weight beside the 16-bit one when the linear
#: GEMMs run in fp8 (one byte per parameter).
FP8_WEIGHT_BYTES = 1.0


def fp8_weight_copy_bytes(params, dp, zero):
    """The fp8 copies (``FP8_WEIGHT_BYTES`` each) of ``params`` weights on one device, sharded
    as the 16-bit weights are: whole under plain DP and ZeRO-1, 1/DP under ZeRO-3 and FSDP,
    whose devices keep only their shard between gathers (a gathered layer is cast as it is
    used, or its fp8 shards are gathered: Megatron-LM's fp8_param_gather). ``zero``: codes."""
    dp = np.asarray(dp, dtype=np.float64)
    return FP8_WEIGHT_BYTES * np.asarray(params, dtype=np.float64) / np.where(weights_sharded(zero), dp, 1.0)


def model_state_shard_params(params, dp, zero):
    """Parameters whose optimizer states this device holds and updates: all of ``params``
    for plain DP, 1/DP of them under any ZeRO stage or FSDP."""
    params = np.asarray(params, dtype=np.float64)
    return np.where(shards(zero, "optimizer"), params / np.asarray(dp, dtype=np.float64), params)


def layer_activation_bytes(sl, b, h, heads, tp, sequence_parallel, recompute, block: Block = STUDY_BLOCK, *,
                           fp8_inputs: bool = False, recomputed_share=1.0, etp=1.0):
    """Activations one layer keeps for its backward pass, per micro-batch, per device.

    Korthikanti et al. (arXiv 2205.05198), Table 2, 16-bit activations and 1-byte dropout
    masks: without parallelism SL*B*H*(34 + 5*A*SL/H). Tensor parallelism splits all but
    10*SL*B*H (LayerNorms, dropouts, the inputs of the QKV and FC1 GEMMs); sequence
    parallelism splits those too. Selective recomputation drops the 5*A*SL/H attention
    core; full recomputation keeps only the layer's input, 2*SL*B*H (split by TP under
    sequence parallelism); the ``dots`` policy, ``dots_activation_bytes``; torchtitan's
    per-op policy, ``op_activation_bytes``. When full
    recomputation covers only ``recomputed_share`` of the layers
    (``step.context.recomputed_share``), the others keep everything: the mean over the layers.

    The same accounting for any ``block``: of the 24 split terms, 4*SL*B*H are K and V
    (scaled by kv_heads / heads under grouped-query attention, by kv_heads x head_dim / H in
    general), 4*SL*B*H Q and the projection's input (by heads x head_dim / H where the block
    sets its head width) and 16*SL*B*H the MLP's
    activation inputs and outputs (4*SL*B*ffn, 6*SL*B*ffn for a gated MLP's two inputs);
    fused attention stores no score matrix (its softmax statistics, 4 bytes per row and
    head, are negligible and left out), so the 5*A*SL/H core is gone. A block without
    dropout keeps no masks (1*SL*B*H each, two of the 10) and no dropped-out probabilities:
    its materialised core is the softmax output alone, 2*A*SL/H.

    ``fp8_inputs``: the linear GEMMs run in fp8 under Transformer Engine, which keeps each
    one's input for the weight gradient as the 1-byte fp8 copy it cast (NVIDIA/
    TransformerEngine v1.8, ``Linear``, ``LayerNormLinear`` and ``LayerNormMLP``
    ``save_for_backward``): the QKV and FC1 inputs take 1*SL*B*H each of the 10, the FC2
    input SL*B*ffn of the MLP's (the activation's input stays 16-bit), and the attention
    output projection's input SL*B*H, where fused attention keeps its 16-bit output as well.

    A mixture-of-experts block (``Block.moe``) keeps the MLP's terms for each of the ``topk``
    rows a token is routed to and for its shared experts (``Block.activation_width``), and the
    routed rows' FC1 inputs, ``topk`` x ``etp`` (the rows expert tensor parallelism gathers)
    H-wide rows per token at the GEMM input's width (Megatron-Core's grouped MLP saves its
    inputs for the weight gradient); its LayerNorm output, the router's and the shared
    experts' input, is the kept FC1 input.
    """
    sl, b, h, heads, tp = (np.asarray(x, dtype=np.float64) for x in (sl, b, h, heads, tp))
    sp = np.asarray(sequence_parallel, dtype=bool)
    recompute = np.asarray(recompute)
    sbh = sl * b * h
    # the score matrix: softmax output (2 bytes), dropout mask (1) and dropped-out copy (2); without dropout, the first
    core = 0.0 if block.flash else (5.0 * heads if block.dropout else 2.0 * heads) * sl / h / tp
    q_share, kv_share = _attention_shares(h, heads, block)
    saved_input = 1.0 if fp8_inputs else 2.0            # bytes per element of a GEMM input kept
    mlp = ((4.0 if block.gated else 2.0) + saved_input) * block.activation_width(h) / h
    if block.moe:
        mlp = mlp + saved_input * block.topk * np.asarray(etp, dtype=np.float64)
    projection = ((2.0 if block.flash else 0.0) + saved_input) if fp8_inputs else 2.0
    split = (2.0 + projection) * q_share + 4.0 * kv_share + mlp  # Q, the projection's input, K and V, the MLP
    masks = 2.0 if block.dropout else 0.0                 # the two branches' 1-byte dropout masks
    kept = 4.0 + masks + 2.0 * saved_input                # LayerNorm inputs, dropout masks, QKV and FC1 inputs
    replicated = np.where(sp, kept / tp, kept)
    stored = sbh * (replicated + split / tp + np.where(recompute == code("recompute", "selective"), 0.0, core))
    full = 2.0 * sbh / np.where(sp, tp, 1.0)
    share = np.asarray(recomputed_share, dtype=np.float64)
    stored = np.where(recompute == code("recompute", "full"), share * full + (1.0 - share) * stored, stored)
    return _policies_kept(stored, recompute, sl, b, h, heads, tp, sp, block=block, etp=etp)


def _policies_kept(stored, recompute, sl, b, h, heads, tp, sp, *, block: Block, etp):
    """``stored`` where the layouts' ``recompute`` is Megatron's, and what the ``dots`` and
    ``op`` policies keep where it is one of those."""
    dots = recompute == code("recompute", "dots")
    if np.any(dots):
        stored = np.where(dots, dots_activation_bytes(sl * b * h, h, heads, tp, sp, block), stored)
    op = recompute == code("recompute", "op")
    return np.where(op, op_activation_bytes(sl, b, h, heads, tp, sp, block, etp=etp), stored) if np.any(op) else stored


def op_activation_bytes(sl, b, h, heads, tp, sequence_parallel, block: Block = STUDY_BLOCK, *, etp=1.0):
    """Activations one layer keeps under torchtitan's per-op checkpointing (``op``,
    ``layout.RECOMPUTE_MODES``), per micro-batch, per device, each 16-bit: the layer's input
    (the checkpoint's, 2*SL*B*H, split by TP under sequence parallelism), the outputs of every
    second linear product (``op_checkpoint.kept_elements``: Q, V, the gate and the down
    projection in torchtitan's Llama) and the attention kernel's output (its softmax
    statistics, 4 bytes per row and head, left out as in ``layer_activation_bytes``)."""
    sl, b, h, tp = (np.asarray(x, dtype=np.float64) for x in (sl, b, h, tp))
    tokens = sl * b
    layer_input = 2.0 * tokens * h / np.where(np.asarray(sequence_parallel, dtype=bool), tp, 1.0)
    attention = 2.0 * tokens * block.attention_width(h, heads) / tp
    return layer_input + attention + 2.0 * op_checkpoint.kept_elements(h, heads, sl, b, tp, block, etp=etp)


def dots_activation_bytes(sbh, h, heads, tp, sequence_parallel, block: Block = STUDY_BLOCK):
    """Activations one layer keeps under the ``dots`` policy (``layout.RECOMPUTE_MODES``), per
    micro-batch of ``sbh`` = SL*B*H elements, per device: the linear layers' outputs its
    backward needs, as JAX's ``checkpoint_dots_with_no_batch_dims`` saves them around a layer,
    each 16-bit: the layer's input and the output projection's output (the residual stream's
    two terms, 2*SL*B*H each, split by TP under sequence parallelism), and Q, K, V and the
    MLP's first GEMM's outputs (two under a gated MLP), split by TP. The rest (norms, the
    attention core, the activation function's output) is recomputed."""
    fc1 = (4.0 if block.gated else 2.0) * block.activation_width(h) / h
    q_share, kv_share = _attention_shares(h, heads, block)
    return sbh * (4.0 / np.where(sequence_parallel, tp, 1.0) + (2.0 * q_share + 4.0 * kv_share + fc1) / tp)


def _attention_shares(h, heads, block: Block):
    """(Q's width, and K's or V's, in units of H): ``block``'s heads x head width, and its
    key-value heads x their width (grouped-query attention's fewer)."""
    return block.attention_width(h, heads) / h, block.kv(heads) * block.kv_dim(h, heads) / h


def in_flight_microbatches(microbatches, pp, virtual_stages, interleaved):
    """Micro-batches whose activations the first pipeline stage holds at its peak.

    1F1B: min(M, PP) for M micro-batches (Narayanan et al. 2021). Interleaved: Korthikanti et al. §4.2.3, the
    first stage holds L*(1 + (PP-1)/(PP*v)) layers' worth, i.e. PP*(1 + (PP-1)/(PP*v))
    micro-batches of its L/PP layers.
    """
    microbatches, pp, v = (np.asarray(x, dtype=np.float64) for x in (microbatches, pp, virtual_stages))
    base = np.minimum(microbatches, pp)
    return np.where(interleaved, base * (1.0 + (pp - 1.0) / (pp * v)), base)


def first_stages_activation_layers(microbatches, pp, virtual_stages, interleaved, layers, short_first):
    """Layers' worth of one micro-batch's activations (``layer_activation_bytes`` units) the
    first stages hold at their peak: the first stage's ``in_flight_microbatches`` of its
    ``layers``, or, where the split leaves the first stage ``short_first`` layers short
    (``Stack.pipeline_split``), the larger of that and the second stage's, which holds a full
    stage's layers for fewer micro-batches: one fewer under 1F1B (min(M, PP - 1); Narayanan et
    al. 2021), two chunks fewer interleaved (its warm-up runs (PP - rank - 1) x 2 + (v - 1) x PP
    chunk forwards; Megatron-Core's ``get_pp_rank_microbatches``), 2 / v micro-batches."""
    microbatches, pp, v = (np.asarray(x, dtype=np.float64) for x in (microbatches, pp, virtual_stages))
    held = in_flight_microbatches(microbatches, pp, v, interleaved)
    second = np.where(interleaved, held - 2.0 / v, np.minimum(microbatches, pp - 1.0))
    layers = np.asarray(layers, dtype=np.float64)
    return np.where(short_first > 0, np.maximum(held * (layers - short_first), second * layers), held * layers)


def resident_layers(layers, pp, offload_layers):
    """Layers of a stage whose activations stay on the device (``Stack.offload_layers``): all
    ``layers`` where nothing is offloaded or PP > 1 (Megatron-Core offloads with PP 1 only);
    else the layers not offloaded, plus the one offloaded layer in transit (Transformer
    Engine reloads one layer ahead of the backward pass). At least one layer stays."""
    layers, pp = np.asarray(layers, dtype=np.float64), np.asarray(pp, dtype=np.float64)
    offloaded = np.minimum(float(offload_layers), layers - 1.0)
    return np.where((offloaded > 0) & (pp == 1), layers - offloaded + 1.0, layers)


def logits_bytes(sl, b, vocab, tp):
    """The output layer's logits kept for the cross-entropy in fp32, 4*SL*B*V/TP
    (Korthikanti et al., arXiv 2205.05198 §4.3; the vocabulary is split over TP)."""
    return 4.0 * np.asarray(sl, dtype=np.float64) * b * vocab / tp
