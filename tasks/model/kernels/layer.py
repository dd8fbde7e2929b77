"""The work of one Megatron-style tensor-parallel Transformer layer, per device.

All counts follow ``method.md`` §3 (Pati et al., arXiv 2302.02825, §3-4). Every function
accepts scalars or NumPy arrays (broadcasting), so a whole grid is one call.

Symbols: ``h`` hidden size, ``heads`` attention heads, ``sl`` sequence length, ``b``
micro-batch, ``tp`` tensor-parallel degree, ``p`` bytes per element.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Callable, Dict, NamedTuple, Tuple

import numpy as np

from tasks.model.kernels.block import (MLA_GEMMS, MOE_GEMMS, STUDY_BLOCK, Block, mla_forward, moe_forward, qkv_width,
                                      routed_tokens)
from tasks.model.kernels.llama_eager import (LLAMA_ACTIVATION, LLAMA_COMPILED_KERNELS, LLAMA_EAGER, LLAMA_EAGER_KERNELS,
                                             LLAMA_EAGER_REPLACES)
from tasks.model.kernels.weights import dp_gradient_bytes, expert_params, layer_params, layer_tensors

__all__ = [
    "Block",
    "STUDY_BLOCK",
    "Gemm",
    "FORWARD_GEMMS",
    "MOE_GEMMS",
    "MLA_GEMMS",
    "routed_tokens",
    "expert_params",
    "PASSES",
    "gemm_shapes",
    "training_gemms",
    "layer_training_flops",
    "elementwise_kernels",
    "ELEMENTWISE_KERNELS",
    "DENSE_ELEMENTWISE_KERNELS",
    "MOE_KERNELS",
    "MOE_UNFUSED_KERNELS",
    "EAGER_KERNELS",
    "LLAMA_EAGER_KERNELS",
    "LLAMA_EAGER_REPLACES",
    "ACTIVATION_KERNELS",
    "elementwise_elements",
    "REPLICATED_WITHOUT_SP",
    "DROPOUT_KERNELS",
    "FUSED_DROPOUT_HOST",
    "ElementwiseKernel",
    "tp_allreduce_bytes",
    "tp_allreduces_per_layer",
    "layer_params",
    "layer_tensors",
    "dp_gradient_bytes",
    "attention_core_flops",
    "training_flops_per_layer",
]


#: The three passes every GEMM runs in training: forward, input-gradient, weight-gradient.
PASSES: Tuple[str, ...] = ("fwd", "ig", "wg")


@dataclass(frozen=True)
class Gemm:
    """One GEMM of a pass: ``batch`` independent products of (m x k) by (k x n).

    FLOPs = 2 * batch * m * n * k. Bytes touched (read A and B, write C) =
    p * batch * (m*k + k*n + m*n).
    """

    name: str
    pass_: str
    m: "np.ndarray | float"
    n: "np.ndarray | float"
    k: "np.ndarray | float"
    batch: "np.ndarray | float" = 1.0

    @property
    def flops(self) -> "np.ndarray | float":
        return 2.0 * self.batch * self.m * self.n * self.k

    def bytes(self, p: float) -> "np.ndarray | float":
        return p * self.batch * (self.m * self.k + self.k * self.n + self.m * self.n)


def _forward(h, heads, sl, b, tp, block: Block, ep=1.0, etp=1.0) -> Dict[str, Tuple]:
    """Forward GEMMs as (m, n, k, batch), method.md §3 table; tokens = sl * b. The QKV
    projection is H + 2 x kv_heads x head_dim wide; FC1 is ``ffn`` wide (twice, gate and
    up, for a gated MLP); under fused attention scores and context are not GEMMs. A
    mixture-of-experts block's MLP is ``block.moe_forward``'s, latent attention's projections
    ``block.mla_forward``'s."""
    tokens = sl * b
    heads_per_device = heads / tp
    ffn = block.width(h)
    projections = mla_forward(h, heads, tokens, tp, block) if block.mla else \
        {"qkv": (tokens, qkv_width(h, heads, block) / tp, h, 1.0)}
    shapes = {
        **projections,
        "scores": (sl, sl, block.qk_dim(h, heads), b * heads_per_device),
        "context": (sl, block.value_dim(h, heads), sl, b * heads_per_device),
        "attn_out": (tokens, h, block.attention_width(h, heads) / tp, 1.0),
        "fc1": (tokens, (block.mlp_matrices - 1) * ffn / tp, h, 1.0),
        "fc2": (tokens, h, ffn / tp, 1.0),
    }
    if block.flash:
        del shapes["scores"], shapes["context"]
    if block.moe:
        del shapes["fc1"], shapes["fc2"]
        shapes.update(moe_forward(h, tokens, tp, block, ep, etp))
    return shapes


#: Names of the forward GEMMs of a layer, in execution order.
FORWARD_GEMMS: Tuple[str, ...] = ("qkv", "scores", "context", "attn_out", "fc1", "fc2")
def gemm_shapes(h, heads, sl, b, tp, block: Block = STUDY_BLOCK, *, ep=1.0, etp=1.0) -> Tuple[Gemm, ...]:
    """Every GEMM of one layer's training step on one of ``tp`` devices (a mixture-of-experts
    block's experts over ``ep`` expert-parallel and ``etp`` expert-tensor-parallel ranks).

    For a forward product Y = X W with X (m x k), W (k x n): the input-gradient GEMM
    dX = dY W^T is (m x n)(n x k), the weight-gradient GEMM dW = X^T dY is (k x m)(m x n).
    Each has the forward's FLOP count (method.md §3: backward costs twice the forward).
    """
    return tuple(g for name, shape in _forward(h, heads, sl, b, tp, block, ep, etp).items()
                 for g in training_gemms(name, *shape))


def training_gemms(name: str, m, n, k, batch=1.0) -> Tuple[Gemm, ...]:
    """The forward GEMM (m x k)(k x n) of ``name`` and its input- and weight-gradient GEMMs
    (``gemm_shapes``' rule), ``batch`` of each."""
    return (Gemm(name, "fwd", m, n, k, batch), Gemm(name, "ig", m, k, n, batch), Gemm(name, "wg", k, n, m, batch))


def layer_training_flops(h, sl, b, tp):
    """FLOPs of one layer's forward and backward GEMMs on one device.

    72 * b * sl * h^2 * (1 + sl / (6 h)) / tp: three passes of the forward's
    24 * sl * b * h^2 / tp + 4 * b * sl^2 * h / tp (method.md §3; Narayanan et al. 2021).
    """
    return 72.0 * b * sl * h**2 * (1.0 + sl / (6.0 * h)) / tp


def attention_core_flops(h, sl, b, tp):
    """Forward FLOPs of the attention core on one device, 4 * b * sl^2 * h / tp: the scores
    Q K^T and the context P V, counted over the whole SL x SL matrix as Megatron-LM counts
    them (Narayanan et al. 2021, Eq. 3), whatever the kernel skips of a causal mask. ``h``
    is the attention's width (``Block.attention_width``: heads x head_dim)."""
    return 4.0 * b * sl**2 * h / tp


def training_flops_per_layer(h, heads, sl, b, tp, block: Block = STUDY_BLOCK):
    """Model FLOPs of one layer's forward and backward pass on one device: three times the
    forward's linear GEMMs plus three times the attention core (the backward costs twice the
    forward). Equals ``layer_training_flops`` for the study's block."""
    linear = sum(g.flops for g in gemm_shapes(h, heads, sl, b, tp, replace(block, flash=True)) if g.pass_ == "fwd")
    return 3.0 * (linear + attention_core_flops(block.core_width(h, heads), sl, b, tp))


#: Memory-bound kernels of one layer: name -> (element count per device, element accesses
#: per element in the forward kernel and in its backward: reads + writes, a dropout mask
#: counted as one access; kernels per layer). Element counts follow method.md §3: SL*B*H/TP,
#: softmax and its dropout B*A*SL^2/TP, the MLP's activation SL*B*ffn/TP. Backward accesses
#: are what each gradient kernel reads and writes: LayerNorm, softmax and GELU read their
#: saved input (or output) and the incoming gradient and write the outgoing one (3); a dropout
#: reads the gradient and its mask and writes (3); a residual add's backward is the sum of the
#: two branches' gradients where they meet (3).
_ELEMENTWISE: Dict[str, Tuple[Callable, int, int, int]] = {
    # name: (elements(h, heads, sl, b, tp, block), forward accesses, backward accesses, kernels per layer)
    "layernorm": (lambda h, a, sl, b, tp, blk: sl * b * h / tp, 2, 3, 2),
    "softmax": (lambda h, a, sl, b, tp, blk: b * a * sl * sl / tp, 2, 3, 1),
    "attn_dropout": (lambda h, a, sl, b, tp, blk: b * a * sl * sl / tp, 3, 3, 1),
    "gelu": (lambda h, a, sl, b, tp, blk: sl * b * blk.activation_width(h) / tp, 2, 3, 1),
    "dropout": (lambda h, a, sl, b, tp, blk: sl * b * h / tp, 3, 3, 2),
    "residual_add": (lambda h, a, sl, b, tp, blk: sl * b * h / tp, 3, 3, 2),
    # A mixture of experts' (MOE_KERNELS): the router's scores over the experts (softmax or sigmoid and
    # the top-k choice read the logits, write the probabilities and read them again; the backward reads
    # the probabilities and their gradient and writes the logits'), and the permutation of each TP rank's
    # tokens/TP x topk routed rows into expert order before the dispatch and back after the combine
    # (Megatron-Core's moe_utils.permute / unpermute: a row read and written; the backward the same).
    "router_scores": (lambda h, a, sl, b, tp, blk: sl * b * blk.experts / tp, 3, 3, 1),
    "moe_permute": (lambda h, a, sl, b, tp, blk: sl * b * blk.topk * h / tp, 2, 2, 2),
}

#: The element-wise kernels only a mixture-of-experts layer runs.
MOE_KERNELS: Tuple[str, ...] = ("router_scores", "moe_permute")

#: Names of the memory-bound kernel classes of a layer.
ELEMENTWISE_KERNELS: Tuple[str, ...] = tuple(_ELEMENTWISE)
#: The classes of a dense layer (a calibration's measured layer), ``ELEMENTWISE_KERNELS`` less ``MOE_KERNELS``.
DENSE_ELEMENTWISE_KERNELS: Tuple[str, ...] = tuple(k for k in _ELEMENTWISE if k not in MOE_KERNELS)


#: The kernels an eager (unfused) stack runs besides ``_ELEMENTWISE``, as Megatron-LM's first
#: release ran its layer under PyTorch (NVIDIA/Megatron-LM, mpu/transformer.py and
#: mpu/layers.py at commit abe36e2, July 2019; Shoeybi et al. 2019, arXiv 1909.08053); later
#: stacks fuse each into a GEMM's epilogue or a neighbouring kernel. Name -> (elements per
#: kernel(h, heads, sl, b, tp, block), forward accesses, backward accesses, kernels per layer):
#:
#: - ``column_bias``: the QKV and FC1 biases, added after their GEMMs (PyTorch 1.1's F.linear
#:   on a 3-D input runs the matmul, then ``output += bias``); the backward's bias gradient
#:   reads the output gradient once. Elements: the two outputs' mean.
#: - ``row_bias``: the attention output's and FC2's biases, added after the TP all-reduce to
#:   the whole SL*B*H (``REPLICATED_WITHOUT_SP``).
#: - ``head_copy``: torch.matmul copies the permuted Q, K and V into its batched layout, and
#:   the context is made contiguous again (four copies; the backward copies their gradients
#:   back). Elements: the four tensors' mean.
#: - ``score_scale``: the scores divided by sqrt(head_dim), a kernel of its own.
#: - ``score_mask``: the causal mask as ``scores * mask - 10000 * (1 - mask)``: two kernels
#:   that read and write the scores; the backward multiplies the gradient by the mask once
#:   (one kernel: 2 accesses, 1 per kernel).
_EAGER: Dict[str, Tuple[Callable, int, int, int]] = {
    "column_bias": (lambda h, a, sl, b, tp, blk: sl * b * (qkv_width(h, a, blk)
                                                          + (blk.mlp_matrices - 1) * blk.width(h)) / (2.0 * tp),
                    2, 1, 2),
    "row_bias": (lambda h, a, sl, b, tp, blk: sl * b * h / tp, 2, 1, 2),
    "head_copy": (lambda h, a, sl, b, tp, blk: sl * b * (qkv_width(h, a, blk) + blk.attention_width(h, a))
                  / (4.0 * tp), 2, 2, 4),
    "score_scale": (lambda h, a, sl, b, tp, blk: b * a * sl * sl / tp, 2, 2, 1),
    "score_mask": (lambda h, a, sl, b, tp, blk: b * a * sl * sl / tp, 2, 1, 2),
}
#: Names of the kernels only an eager stack runs (``_EAGER``).
EAGER_KERNELS: Tuple[str, ...] = tuple(_EAGER)


#: The MLP's activation, as each style names it.
ACTIVATION_KERNELS: Tuple[str, ...] = ("gelu",) + LLAMA_ACTIVATION

#: The kernels a mixture of experts' routed MLP runs of its own, outside Transformer Engine's
#: fused MLP (``Stack.moe_fused_mlp`` off), where its experts clamp their activation
#: (``Block.expert_clamp``) or carry biases (``Block.expert_bias``), as Megatron-Core runs
#: them at d0b3b775 (the commit Megatron-Bridge v0.5.0 pins): name -> (elements per kernel,
#: forward accesses, backward accesses, kernels per layer), accesses in 16-bit elements (an
#: fp32 access counts 2):
#:
#: - ``expert_clamp``: ``fusions/fused_bias_geglu.py`` ``weighted_bias_quick_geglu_impl``
#:   clamps the first linear's gate and linear halves (views of its output) one kernel each,
#:   reading and writing one half (routed rows x the expert's width); each clamp's gradient
#:   reads the gradient and its input and writes one (3);
#: - ``expert_clamp_concat``: the clamped halves concatenated for the fused activation
#:   (reading and writing both halves), and in the backward the halves' gradients
#:   concatenated for the split's gradient;
#: - ``expert_bias``: ``transformer/moe/experts.py`` ``TEGroupedMLP._apply_bias`` adds the
#:   second linear's bias after its GEMM, weighted by each row's router probability (fp32):
#:   per local expert ``t + b * p`` over its rows x H, then a concatenation and a cast back:
#:   the product written in fp32 (2), the sum reading the 16-bit output and the product and
#:   writing fp32 (5), the concatenation (4) and the cast (3): 14 forward; backward 20 (the
#:   cast's gradient in fp32, 3; the output's gradient cast back, 3; the bias's and the
#:   probabilities' gradients, each a product and its sum, 6 and 6; the experts' output
#:   gradients concatenated, 2). Its launches, which grow with the local experts, are
#:   ``moe_kernels``'.
_MOE_UNFUSED: Dict[str, Tuple[Callable, int, int, int]] = {
    "expert_clamp": (lambda h, a, sl, b, tp, blk: sl * b * blk.topk * blk.expert_width(h) / tp, 2, 3, 2),
    "expert_clamp_concat": (lambda h, a, sl, b, tp, blk: 2.0 * sl * b * blk.topk * blk.expert_width(h) / tp, 2, 2, 1),
    "expert_bias": (lambda h, a, sl, b, tp, blk: sl * b * blk.topk * h / tp, 14, 20, 1),
}
#: Names of ``_MOE_UNFUSED``'s kernels.
MOE_UNFUSED_KERNELS: Tuple[str, ...] = tuple(_MOE_UNFUSED)


def _moe_unfused(block: Block, moe_fused_mlp: bool) -> Dict[str, Tuple[Callable, int, int, int]]:
    """``_MOE_UNFUSED``'s kernels ``block``'s routed experts run outside a fused MLP."""
    if not block.moe or moe_fused_mlp:
        return {}
    wanted = (("expert_clamp", "expert_clamp_concat") if block.expert_clamp else ()) \
        + (("expert_bias",) if block.expert_bias else ())
    return {name: _MOE_UNFUSED[name] for name in wanted}

#: Kernels on the full SL*B*H activation, which Megatron's tensor parallelism replicates
#: on every TP rank; only sequence parallelism splits them by TP (Korthikanti et al.,
#: arXiv 2205.05198, §4.2.2). The study's table counts them split, as method.md §3 does.
REPLICATED_WITHOUT_SP: Tuple[str, ...] = ("layernorm", "dropout", "residual_add", "row_bias", "rms_norm")

#: Kernels that fused attention absorbs into its own kernel (the attention core's
#: element-wise work, which selective recomputation repeats).
INSIDE_FUSED_ATTENTION: Tuple[str, ...] = ("softmax", "attn_dropout", "score_scale", "score_mask")

#: Kernels that run only where the layer has dropout (``Block.dropout``).
DROPOUT_KERNELS: Tuple[str, ...] = ("attn_dropout", "dropout")

#: A fused stack runs each branch's dropout forward inside the residual add's kernel, which
#: then also writes the dropout mask (one access more): Megatron-LM's bias_dropout_add, a
#: TorchScript function since September 2020 (NVIDIA/Megatron-LM 51a2e6b), whose dropout
#: PyTorch's autodiff lowers on CUDA to a random mask the fuser fuses with the adds
#: (torch/csrc/jit/runtime/symbolic_script.cpp); Megatron-Core's bias_dropout_add is fused by
#: its jit_fuser. The backward keeps both kernels: the gradient times the mask, and the
#: residual's gradient sum. An eager stack runs the two as kernels of their own.
FUSED_DROPOUT_HOST = "residual_add"


class ElementwiseKernel(NamedTuple):
    """One memory-bound kernel class of a layer: bytes one kernel moves in the forward and in
    the backward pass, and how many such kernels each pass launches per layer (0 where its
    forward runs inside another kernel)."""

    name: str
    fwd_bytes: "np.ndarray | float"
    bwd_bytes: "np.ndarray | float"
    fwd_count: int
    bwd_count: int


def _accesses(name: str, accesses: int, block: Block, backward: bool = False) -> int:
    """A gated MLP's activation reads two inputs (forward +1) and writes two gradients (+2)."""
    return accesses + (2 if backward else 1) if (name == "gelu" and block.gated) else accesses


def elementwise_elements(name: str, h, heads, sl, b, tp, *, sequence_parallel: bool = True,
                         block: Block = STUDY_BLOCK):
    """Elements one layer's ``name`` kernels touch per device, all of its kernels together
    (element count per kernel x kernels per layer). Without sequence parallelism the
    replicated kernels (``REPLICATED_WITHOUT_SP``) touch the whole SL*B*H on every rank."""
    elements, _, _, count = _ELEMENTWISE[name]
    split = 1 if (not sequence_parallel and name in REPLICATED_WITHOUT_SP) else tp
    return elements(h, heads, sl, b, split, block) * count


def elementwise_kernels(h, heads, sl, b, tp, p: float, *, sequence_parallel=True, block: Block = STUDY_BLOCK,
                        style: str = "fused", moe_fused_mlp: bool = False):
    """Yield an ``ElementwiseKernel`` per class.

    ``sequence_parallel`` (a bool or bool array): whether the replicated kernels are split
    by TP; the study's table (method.md §3) splits them, so it is the default. Under fused
    attention the softmax and its dropout are left out (inside the attention kernel), and
    without ``block.dropout`` the dropouts (``DROPOUT_KERNELS``).
    ``style``: the stack's ``elementwise`` (``stack.ELEMENTWISE_STYLES``): "eager" also runs
    the kernels of ``EAGER_KERNELS``, "llama_eager" runs ``LLAMA_EAGER_KERNELS`` in place of
    ``LLAMA_EAGER_REPLACES``, "llama_compiled" the fused kernels and ``LLAMA_COMPILED_KERNELS``;
    a fused one runs the dropout's forward inside
    ``FUSED_DROPOUT_HOST``'s kernel. A mixture of experts' routed MLP outside a fused one
    (``moe_fused_mlp`` off) runs ``MOE_UNFUSED_KERNELS`` as its experts need them."""
    sp = np.asarray(sequence_parallel, dtype=bool)
    kernels = {**_style_kernels(style, heads, block), **_moe_unfused(block, moe_fused_mlp)}
    fused_dropout = block.dropout and style == "fused"
    for name, (elements, fwd, bwd, count) in kernels.items():
        if (block.flash and name in INSIDE_FUSED_ATTENTION) or (not block.dropout and name in DROPOUT_KERNELS) \
                or (not block.moe and name in MOE_KERNELS):
            continue
        split = np.where(sp, tp, 1.0) if name in REPLICATED_WITHOUT_SP else tp
        touched = elements(h, heads, sl, b, split, block) * p
        fwd = _accesses(name, fwd, block) + (1 if fused_dropout and name == FUSED_DROPOUT_HOST else 0)
        fwd_count = 0 if fused_dropout and name == "dropout" else count
        yield ElementwiseKernel(name, touched * fwd if fwd_count else 0.0, touched * _accesses(name, bwd, block, True),
                                fwd_count, count)


def _style_kernels(style: str, heads, block: Block) -> Dict[str, Tuple[Callable, float, float, int]]:
    """The kernel classes of an element-wise ``style`` (``elementwise_kernels``); ``repeat_kv``
    only where there are fewer key-value heads than query heads."""
    if style == "eager":
        return {**_ELEMENTWISE, **_EAGER}
    if style not in ("llama_eager", "llama_compiled"):
        return dict(_ELEMENTWISE)
    names = LLAMA_EAGER_KERNELS if style == "llama_eager" else LLAMA_COMPILED_KERNELS
    llama = {name: LLAMA_EAGER[name] for name in names if name != "repeat_kv" or block.kv(heads) < heads}
    replaced = LLAMA_EAGER_REPLACES if style == "llama_eager" else ()
    return {**{name: v for name, v in _ELEMENTWISE.items() if name not in replaced}, **llama}


def tp_allreduce_bytes(h, sl, b, p: float):
    """Bytes of one TP all-reduce: the activations or errors of a layer, p*SL*B*H."""
    return p * sl * b * h


#: TP all-reduces per layer: two in the forward pass (after the attention output
#: projection and after FC2), two of errors in the backward pass (method.md §3).
tp_allreduces_per_layer = 4
