"""The compute time of one Transformer layer on one device, piece by piece, defined once for
the per-layer projection (``tasks.model.projection.grid``) and the whole-step model
(``tasks.model.step.plan``).

GEMMs come from ``layer.gemm_shapes`` timed by ``roofline.gemm_kernel_time`` (tile and wave
quantization, the precision's peak and ceiling); the layer's linear GEMMs run in the stack's
``gemm_precision``, the attention core's products in 16 bits. Fused attention is timed by
``tasks.model.kernels.attention``; memory-bound kernels by ``roofline.memory_bound_time`` over the
bytes ``layer.elementwise_kernels`` says each pass moves. The backward also adds the
micro-batch's weight gradients into the step's gradient buffer (``grad_accumulation_time``).
Vectorised over NumPy arrays; seconds.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property
from typing import Dict, List

import numpy as np

from tasks.model.kernels import layer
from tasks.model.kernels import op_checkpoint, roofline
from tasks.model.kernels.attention import fused_attention_times
from tasks.model.kernels.layer import STUDY_BLOCK, Block
from tasks.model.terms.specs import HardwareProfile
from tasks.model.terms.stack import Stack

__all__ = ["LayerCost", "layer_cost", "grad_accumulation_time", "cross_entropy_time", "ATTENTION_CORE_GEMMS",
           "CROSS_ENTROPY_BYTES_PER_LOGIT", "CROSS_ENTROPY_KERNELS", "TP_SIDES", "TP_SIDE_OF_GEMM"]

#: The attention core's products when the score matrix is materialised.
ATTENTION_CORE_GEMMS = ("scores", "context")
_STUDY_STACK = Stack()
#: A layer's forward GEMMs outside its attention sublayer: the MLP's (a dense one's or a mixture
#: of experts').
MLP_GEMMS = ("fc1", "fc2") + layer.MOE_GEMMS
#: The four places a layer's TP collectives sit under sequence parallelism, each beside the
#: linear GEMMs a communication-GEMM overlap pipelines it with: the attention sublayer's
#: all-gather feeds its input projections and its reduce-scatter drains its output
#: projection; the MLP's the same with its first and second GEMMs. Transformer Engine's
#: userbuffers overlap each collective with the GEMM of its own module (the all-gather with
#: ``LayerNormLinear``'s forward GEMM, the reduce-scatter with ``Linear``'s;
#: transformer_engine/pytorch/module/layernorm_linear.py and linear.py at d0067d0da,
#: ``ub_overlap_ag``/``ub_overlap_rs``), PyTorch's symmetric-memory ops each all-gather with
#: the products that read it and each reduce-scatter with the product that writes it
#: (``symm_mem.fused_all_gather_matmul``/``fused_matmul_reduce_scatter``,
#: torch/distributed/_symmetric_memory/__init__.py). In the backward pass the roles swap: the
#: gradient's all-gather feeds the output projection's (second GEMM's) input- and
#: weight-gradient GEMMs, and the input gradient's reduce-scatter follows the first GEMMs'.
TP_SIDES = ("attention_gather", "attention_scatter", "mlp_gather", "mlp_scatter")
#: The side (index into ``TP_SIDES``) of each linear GEMM, by its forward name.
TP_SIDE_OF_GEMM: Dict[str, int] = {"qkv": 0, **{name: 0 for name in layer.MLA_GEMMS}, "attn_out": 1,
                                   "fc1": 2, "router": 2, "expert_fc1": 2, "shared_fc1": 2,
                                   "fc2": 3, "expert_fc2": 3, "shared_fc2": 3}
#: The attention sublayer's element-wise kernels beside its core: the input norm and the fused
#: bias-dropout-add of its residual (Megatron-Core's TransformerLayer._forward_attention).
ATTENTION_SUBLAYER_ELEMENTWISE = 2


@dataclass(frozen=True)
class LayerCost:
    """Seconds of one layer's pieces for one micro-batch on one device (arrays).

    ``gemm_fwd``/``gemm_bwd``: every GEMM of the forward / backward pass (input- and
    weight-gradient), the materialised attention core's included; ``linear_fwd``/``linear_bwd``:
    the part of those that are the linear layers (by the TP collective beside them: ``sides_fwd``);
    ``attention_fwd``/``attention_bwd``: fused attention kernels (0 when materialised);
    ``elementwise_fwd``/``elementwise_bwd``: memory-bound kernels (the backward's with the
    gradient accumulation of ``grad_accumulation_time``); ``core_fwd``: the
    attention core's forward (what selective recomputation repeats); ``kernels_fwd``:
    kernels launched in the forward pass, ``kernels_core`` of them the attention core's and
    ``kernels_attention`` the attention sublayer's (its input norm, projections, core and
    residual add: what Megatron-Core's "attn" CUDA-graph scope captures) and ``kernels_linear``
    the linear layers' GEMMs (a mixture of experts' MLP's are not among them: ``moe_kernels``
    counts them as Megatron-Core launches them, by dispatcher and local experts);
    ``op_repeat_fwd``/``kernels_op_repeat``: the forward work and kernels torchtitan's per-op
    selective checkpointing runs again in the backward pass (``kernels.op_checkpoint``): all
    but the fused attention and the linear products it keeps. ``sides_fwd``/``sides_bwd``:
    the linear GEMMs' seconds by ``TP_SIDES`` (a trailing axis of 4; zeros where not given),
    the forward's and the backward's (input- and weight-gradient) GEMMs of each side's
    forward GEMMs: what each TP collective's overlap pipelines it with."""

    gemm_fwd: np.ndarray
    gemm_bwd: np.ndarray
    linear_fwd: np.ndarray
    linear_bwd: np.ndarray
    attention_fwd: np.ndarray
    attention_bwd: np.ndarray
    elementwise_fwd: np.ndarray
    elementwise_bwd: np.ndarray
    core_fwd: np.ndarray
    kernels_fwd: int
    kernels_core: int
    kernels_attention: int = 0
    kernels_linear: int = 0
    op_repeat_fwd: "np.ndarray | float" = 0.0
    kernels_op_repeat: int = 0
    sides_fwd: "np.ndarray | float" = 0.0
    sides_bwd: "np.ndarray | float" = 0.0

    @cached_property
    def forward(self) -> np.ndarray:
        return self.gemm_fwd + self.attention_fwd + self.elementwise_fwd

    @cached_property
    def backward(self) -> np.ndarray:
        return self.gemm_bwd + self.attention_bwd + self.elementwise_bwd

    @cached_property
    def total(self) -> np.ndarray:
        return self.forward + self.backward


def _each_gemm_time(gemms, shape, hw: HardwareProfile, *, stack: Stack, p: float) -> List[np.ndarray]:
    """``roofline.gemm_kernel_time`` of each of ``gemms`` as an array of ``shape``: the attention
    core's in bf16, the others at the stack's GEMM precision (fp8 elements a byte wide, else
    ``p``), the GEMMs of one precision timed in one call (the law is elementwise)."""
    precisions = ["bf16" if g.name in ATTENTION_CORE_GEMMS else stack.gemm_precision for g in gemms]
    out: List[np.ndarray] = [np.zeros(shape)] * len(gemms)     # each replaced below
    for precision in dict.fromkeys(precisions):
        chosen = [i for i, x in enumerate(precisions) if x == precision]
        times = roofline.gemm_kernel_times([gemms[i] for i in chosen], shape, hw, precision,
                                           1.0 if precision == "fp8" else p)
        for i, t in zip(chosen, times, strict=True):
            out[i] = t
    return out


def _gemm_times(gemms, shape, hw: HardwareProfile, *, stack: Stack, p: float, repeat_shares: Dict):
    """(all forward, all backward, linear forward, linear backward, core forward, the linear
    forward's ``repeat_shares``, the linear forward's and backward's by ``TP_SIDES``) seconds of
    ``gemms`` (``layer.gemm_shapes``), as arrays of ``shape`` (the sides' with a trailing axis
    of 4); ``repeat_shares`` gives the share of each forward GEMM (by name) to count in the
    sixth."""
    zero = np.zeros(shape)
    fwd, bwd, core, repeat = (zero.copy() for _ in range(4))
    sides = {"fwd": [zero] * len(TP_SIDES), "bwd": [zero] * len(TP_SIDES)}
    for g, t in zip(gemms, _each_gemm_time(gemms, shape, hw, stack=stack, p=p), strict=True):
        is_core = g.name in ATTENTION_CORE_GEMMS
        if g.pass_ == "fwd":
            fwd, core = fwd + t, core + (t if is_core else 0.0)
            repeat = repeat + (0.0 if is_core else repeat_shares.get(g.name, 0.0) * t)
        else:
            bwd = bwd + t
        if not is_core:     # a linear GEMM: on the side of the TP collective beside it
            by_side = sides["fwd" if g.pass_ == "fwd" else "bwd"]
            by_side[TP_SIDE_OF_GEMM[g.name]] = by_side[TP_SIDE_OF_GEMM[g.name]] + t
    sides_fwd, sides_bwd = (np.stack(sides[name], axis=-1) for name in ("fwd", "bwd"))
    return fwd, bwd, sides_fwd.sum(axis=-1), sides_bwd.sum(axis=-1), core, repeat, sides_fwd, sides_bwd


#: Bytes per element of Transformer Engine's fused cast-transpose into fp8: it reads a 16-bit
#: operand (2) and writes it in fp8, once as it is and once transposed for the other gradient (1 + 1).
FP8_CAST_TRANSPOSE_BYTES = 4.0
#: Bytes per element of per-tensor current scaling's amax pass (``Stack.fp8_recipe`` tensorwise):
#: the 16-bit operand read once more before the cast, since its scale is its own maximum.
#: Transformer Engine's ``Float8CurrentScalingQuantizer::quantize`` runs ``nvte_compute_amax``
#: over the input, then the scale, then the cast (transformer_engine/pytorch/csrc/quantizer.cpp
#: at v2.9); ``grad_output_preprocess`` quantizes an incoming gradient so wherever no bias
#: gradient is fused with it (pytorch/module/base.py). The other recipes find their scales
#: without it: delayed scaling from earlier steps' amax history, MXFP8 and blockwise scaling
#: per block inside the quantizing kernel.
FP8_AMAX_PASS_BYTES = 2.0
#: The linear GEMMs whose input a Transformer Engine norm writes with its amax: under current
#: scaling the norm of a ``LayerNormLinear`` keeps the amax as it writes its 16-bit output
#: (``FUSED_NORM_AMAX_FP8``, transformer_engine/pytorch/csrc/extensions/normalization.cpp from
#: v2.8 on), so that input's cast needs no amax pass. Megatron-Core's Transformer Engine layer
#: spec fuses the input norm with ``linear_qkv``, in a dense layer the pre-MLP norm with
#: ``linear_fc1``, and under latent attention with ``qk_layernorm`` (Megatron-Bridge's
#: DeepSeek-V3 bridge sets it) the latents' norms with ``linear_q_up_proj`` and
#: ``linear_kv_up_proj`` (``column_parallel_layer_norm_linear``; a MoE layer's pre-MLP norm is a
#: module of its own, which the router reads too, and so is latent attention's input norm while
#: ``mla_down_proj_fusion`` is off, its default: megatron/core/models/gpt/gpt_layer_specs.py at
#: d98e8a64dd). Every other input (the attention's output, Megatron-Core's own activation, an
#: expert's dispatched tokens) and every incoming gradient takes the pass.
NORM_FED_GEMMS = ("qkv", "fc1", "q_up", "kv_up")


def _fp8_casts(linear_fwd_gemms, hw: HardwareProfile, recipe: str):
    """(forward, backward) seconds of the fp8 casts the linear GEMMs need: the forward casts
    each GEMM's activation input (batch x m x k), the backward its incoming gradient
    (batch x m x n), each with its transpose (Transformer Engine's cast_transpose; Micikevicius
    et al. 2022, FP8 formats for deep learning), under ``recipe`` (``Stack.fp8_recipe``)
    tensorwise with the amax pass (``FP8_AMAX_PASS_BYTES``) where no norm fused it
    (``NORM_FED_GEMMS``). A grouped GEMM's batch is the device's local
    experts: Transformer Engine's ``GroupedLinear`` quantizes the inputs of all of them, every
    routed row the device holds (``tex.split_quantize`` of the input over ``m_splits`` forward,
    of the output gradient backward: transformer_engine/pytorch/module/grouped_linear.py at
    v2.9). Weights are cast once per step and left out."""
    amax = FP8_AMAX_PASS_BYTES if recipe == "tensorwise" else 0.0
    fwd = sum(roofline.memory_bound_time((FP8_CAST_TRANSPOSE_BYTES + (0.0 if g.name in NORM_FED_GEMMS else amax))
                                         * g.batch * g.m * g.k, hw) for g in linear_fwd_gemms)
    bwd = sum(roofline.memory_bound_time((FP8_CAST_TRANSPOSE_BYTES + amax) * g.batch * g.m * g.n, hw)
              for g in linear_fwd_gemms)
    return fwd, bwd


def _fused_attention(width, sl, b, tp, hw: HardwareProfile, stack: Stack, cp, heads_split, *, head_dim):
    """(forward, backward) seconds of fused attention ``width`` wide, its heads ``head_dim``
    wide, run by the stack's kernel (``Stack.attention_impl``; ``layer_cost``'s CP rule: CP
    causal steps over the rank's ``sl`` tokens, or under ``heads_split`` the whole sequence
    with 1/CP of the TP rank's heads)."""
    fwd, bwd = (cp * t for t in fused_attention_times(width, sl, b, tp, hw, causal=stack.causal, head_dim=head_dim,
                                                      impl=stack.attention_impl))
    if np.any(heads_split):
        whole = fused_attention_times(width, np.multiply(sl, cp), b, np.multiply(tp, cp), hw, causal=stack.causal,
                                      head_dim=head_dim, impl=stack.attention_impl)
        fwd, bwd = np.where(heads_split, whole[0], fwd), np.where(heads_split, whole[1], bwd)
    return fwd, bwd


def grad_accumulation_time(weights, hw: HardwareProfile, stack: Stack):
    """Seconds to add one micro-batch's gradients of ``weights`` (per device) into the step's
    gradient buffer: the buffer is read and written, ``2 x stack.main_grad_bytes`` per weight,
    at the HBM peak. Megatron-LM and Transformer Engine fuse the addition into the
    weight-gradient GEMM's epilogue (gradient_accumulation_fusion), which streams its output
    at the peak: the per-wave overhead fitted to the H800 K sweep (2.65 us, h100's
    ``gemm_tile_overhead_us``) is the time to write a wave's 16-bit output tiles at 97 % of
    it (132 tiles of 256 x 128 x 2 bytes over 3.35 TB/s: 2.58 us)."""
    return 2.0 * stack.main_grad_bytes * weights / (hw.hbm_tbps * 1e12)


#: Bytes per logit that Megatron's vocabulary-parallel cross entropy moves, forward and
#: backward (NVIDIA/Megatron-LM: megatron/mpu/cross_entropy.py from 2019 on, and Megatron-Core's
#: tensor_parallel/cross_entropy.py, the default while cross_entropy_loss_fusion is off): the
#: 16-bit logits are cast to fp32 (read 2, write 4); the forward takes their maximum (read 4),
#: subtracts it (read and write 8), exponentiates (8), sums (4) and divides by the sum (8),
#: keeping the softmax for the backward, which scales it by the incoming gradient (8) and
#: casts it back to 16 bits (read 4, write 2).
#: Transformer Engine's fused cross entropy (Megatron-Core's cross_entropy_loss_fusion with
#: cross_entropy_fusion_impl "te": transformer_engine/common/triton/cross_entropy.py and
#: pytorch/triton/cross_entropy.py at d0067d0da) reads the 16-bit logits twice in its
#: forward, an online softmax's max and sum (2) and a second pass (2) that writes the fp32
#: gradient at once (4); the backward scales that gradient by the incoming one (read and
#: write 8: Megatron's per-token loss weights are no scalar 1), and autograd casts it to the
#: logits' 16 bits (read 4, write 2).
#: Bytes per logit, by ``stack.CROSS_ENTROPY_IMPLS`` entry.
CROSS_ENTROPY_BYTES_PER_LOGIT: Dict[str, float] = {"unfused": 6.0 + 4.0 + 8.0 + 8.0 + 4.0 + 8.0 + 8.0 + 6.0,
                                                   "te": 2.0 + 2.0 + 4.0 + 8.0 + 6.0}
#: Kernels of each: unfused cast, max, subtract, exp, sum, divide; scale, cast back. TE's
#: online softmax and gradient passes; scale, cast.
CROSS_ENTROPY_KERNELS: Dict[str, int] = {"unfused": 8, "te": 4}


def cross_entropy_time(logits, hw: HardwareProfile, impl: str = "unfused"):
    """Seconds of the loss over ``logits`` logits per device (tokens x vocabulary / TP),
    forward and backward, as the stack's implementation ``impl`` runs it
    (``CROSS_ENTROPY_BYTES_PER_LOGIT[impl]`` at the achieved HBM bandwidth)."""
    return roofline.memory_bound_time(CROSS_ENTROPY_BYTES_PER_LOGIT[impl] * logits, hw)


def layer_cost(h, heads, sl, b, tp, hw: HardwareProfile, *, p: float = 2.0, block: Block = STUDY_BLOCK,
               stack: Stack = _STUDY_STACK, sequence_parallel=True, cp=1.0, heads_split=False, ep=1.0,
               etp=1.0) -> LayerCost:
    """Every compute piece of one layer (see ``LayerCost``). ``block.flash`` must agree with
    ``stack.attention``; ``sequence_parallel`` (bool or bool array) splits the replicated
    element-wise kernels by TP (the study's table splits them: the default).

    ``cp`` (scalar or array): context-parallel ranks, with ``sl`` each device's share of the
    sequence (SL / CP). Its fused attention is CP steps of causal attention over ``sl`` tokens:
    under Megatron's load-balanced split each step (the ring's, ``collectives.cp_exchange``) is
    as much work as that, and CP of them are the 1/CP of the causal attention each rank owns.
    Under ``heads_split`` (bool or bool array: the all-to-all exchange, ``layout.CP_COMMS`` a2a)
    a rank instead attends whole sequences, SL = CP x ``sl`` tokens, with 1/CP of its TP rank's
    heads: as much work, in one kernel. Context parallelism needs fused attention (Megatron-Core
    runs it in Transformer Engine's only). ``ep``, ``etp``: EP and ETP ranks (``layer.gemm_shapes``)."""
    _check_attention(block, stack, cp)
    gemms, linear_whole, input_sums = _layer_gemms(h, heads, sl, b, tp, block, hw, p=p, stack=stack, ep=ep, etp=etp)
    forward_gemms = [g for g in gemms if g.pass_ == "fwd"]
    linear_fwd_gemms = [g for g in forward_gemms if g.name not in ATTENTION_CORE_GEMMS]
    op_shares = op_checkpoint.recomputed_shares(h, heads, block)
    gemm_fwd, gemm_bwd, linear_fwd, linear_bwd, core, op_linear, sides_fwd, sides_bwd = _gemm_times(
        gemms, np.broadcast(h, sl, b, tp, ep, etp).shape, hw, stack=stack, p=p, repeat_shares=op_shares)
    elem_fwd, elem_bwd, kernels = np.zeros(np.shape(gemm_fwd)), np.zeros(np.shape(gemm_fwd)), 0
    counted_apart = set(layer.MOE_GEMMS + layer.MOE_KERNELS + layer.MOE_UNFUSED_KERNELS + layer.ACTIVATION_KERNELS) \
        if block.moe else set()
    core_kernels = sum(1 for g in forward_gemms if g.name in ATTENTION_CORE_GEMMS)
    for kernel in layer.elementwise_kernels(h, heads, sl, b, tp, p, block=block, sequence_parallel=sequence_parallel,
                                            style=stack.elementwise, moe_fused_mlp=stack.moe_fused_mlp):
        t = kernel.fwd_count * roofline.memory_bound_time(kernel.fwd_bytes, hw)
        elem_fwd = elem_fwd + t
        elem_bwd = elem_bwd + kernel.bwd_count * roofline.memory_bound_time(kernel.bwd_bytes, hw)
        kernels += 0 if kernel.name in counted_apart else kernel.fwd_count
        if kernel.name in layer.INSIDE_FUSED_ATTENTION:
            core = core + t
            core_kernels += kernel.fwd_count
    params = layer.layer_params(h, heads, block) / tp + layer.expert_params(h, block) / np.multiply(ep, etp)
    elem_bwd = elem_bwd + input_sums + grad_accumulation_time(params, hw, stack)
    linear_kernels = sum(1 for g in linear_fwd_gemms if g.name not in counted_apart)
    if stack.fp8:   # one cast of each input, however many products read it
        cast_fwd, cast_bwd = _fp8_casts(linear_whole, hw, stack.fp8_recipe)
        elem_fwd, elem_bwd = elem_fwd + cast_fwd, elem_bwd + cast_bwd
        kernels += sum(1 for g in linear_whole if g.name not in counted_apart)
    if block.flash:
        attn_fwd, attn_bwd = _fused_attention(block.core_width(h, heads), sl, b, tp, hw, stack, cp, heads_split,
                                              head_dim=block.kv_dim(h, heads))
        core = core + attn_fwd
        kernels += 1
        core_kernels += 1
    else:
        attn_fwd = attn_bwd = np.zeros(np.shape(gemm_fwd))
    kernels += sum(1 for g in forward_gemms if g.name not in counted_apart)
    projections = sum(1 for g in linear_fwd_gemms if g.name not in MLP_GEMMS)
    attention = core_kernels + projections * (2 if stack.fp8 else 1) + ATTENTION_SUBLAYER_ELEMENTWISE
    op_kernels = kernels - linear_kernels - (1 if block.flash else 0) + _repeated_kernels(
        [g for g in linear_fwd_gemms if g.name not in counted_apart], op_shares)
    return LayerCost(gemm_fwd=gemm_fwd, gemm_bwd=gemm_bwd, linear_fwd=linear_fwd, linear_bwd=linear_bwd,
                     attention_fwd=attn_fwd, attention_bwd=attn_bwd, elementwise_fwd=elem_fwd, elementwise_bwd=elem_bwd,
                     core_fwd=core, kernels_fwd=kernels, kernels_core=core_kernels, kernels_attention=attention,
                     kernels_linear=linear_kernels, op_repeat_fwd=elem_fwd + (gemm_fwd - linear_fwd) + op_linear,
                     kernels_op_repeat=op_kernels, sides_fwd=sides_fwd, sides_bwd=sides_bwd)


def _layer_gemms(h, heads, sl, b, tp, block: Block, hw: HardwareProfile, *, p: float, stack: Stack, ep, etp):
    """(the layer's GEMMs as the stack runs its input projections, its linear forward GEMMs with
    each projection one product, ``layer.gemm_shapes``: one fp8 cast of each input however many
    products read it (torchao's ``PrepareFloat8ModuleInput`` under TP; compiled, AOTAutograd's
    ``fx_graph_cse`` merges the identical casts), and the seconds of summing the input
    gradients of products run apart, 0 where they run fused; ``Stack.projections``,
    ``op_checkpoint.separate_products``, ``input_gradient_sums``). Uncompiled (``Stack.eager``)
    autograd adds them up, an ``add`` kernel per product past the first that reads two tensors
    and writes one at ``p`` bytes each; compiled, Inductor fuses each add into the kernel that
    reads the sum (the norm's backward), which reads one tensor more per product."""
    whole = layer.gemm_shapes(h, heads, sl, b, tp, block, ep=ep, etp=etp)
    linear = [g for g in whole if g.pass_ == "fwd" and g.name not in ATTENTION_CORE_GEMMS]
    if stack.projections != "separate":
        return whole, linear, 0.0
    sums = op_checkpoint.input_gradient_sums(whole, h, heads, block)
    seconds = sum(roofline.memory_bound_time(3.0 * p * n, hw) if stack.eager else
                  roofline.memory_bound_time(p * n, hw, floored=False) for n in sums)
    return op_checkpoint.separate_products(whole, h, heads, block), linear, seconds


def _check_attention(block: Block, stack: Stack, cp) -> None:
    """Raise ``ValueError`` where ``block`` and ``stack`` disagree on fused attention, or where
    context parallelism (``cp`` > 1) meets materialised attention."""
    if block.flash != stack.flash:
        raise ValueError(f"block.flash={block.flash} disagrees with stack.attention={stack.attention!r}")
    if not block.flash and np.any(np.asarray(cp) > 1):
        raise ValueError("context parallelism needs stack.attention='flash': Megatron-Core runs it only in "
                         "Transformer Engine's fused attention")


def _repeated_kernels(linear_gemms, shares) -> int:
    """Kernels of ``linear_gemms`` torchtitan's per-op checkpointing runs again (a GEMM with a
    share in ``op_checkpoint.recomputed_shares``); with the forward's kernels less the linear
    layers' and the fused attention's, what ``LayerCost.kernels_op_repeat`` counts."""
    return sum(1 for g in linear_gemms if np.any(shares.get(g.name, 0.0)))
