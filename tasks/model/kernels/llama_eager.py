"""The memory-bound kernels of a Llama block written in PyTorch ops, run uncompiled (the
``llama_eager`` element-wise style, ``layer.elementwise_kernels``) or compiled by Inductor (the
``llama_compiled`` style: what compiling cannot fuse away)."""

from __future__ import annotations

from typing import Callable, Dict, Tuple

from tasks.model.kernels.block import Block

__all__ = ["LLAMA_EAGER", "LLAMA_EAGER_KERNELS", "LLAMA_EAGER_REPLACES", "LLAMA_ACTIVATION", "LLAMA_COMPILED_KERNELS"]


def _kv_width(h, heads, blk: Block):
    """The keys' (or the values') width over all key-value heads."""
    return blk.kv(heads) * blk.hd(h, heads)


#: The memory-bound kernels of a Llama block written in PyTorch ops and run uncompiled, as
#: torchtitan runs its model without torch.compile (pytorch/torchtitan at commit 9dec370,
#: December 2024: torchtitan/models/norms.py ``RMSNorm``, torchtitan/models/llama/model.py
#: ``apply_rotary_emb``, ``repeat_kv``, ``Attention.forward``, ``FeedForward.forward``), in
#: place of ``layer._ELEMENTWISE``'s layernorm and activation (``LLAMA_EAGER_REPLACES``). Name ->
#: (elements per kernel, forward accesses per kernel, backward accesses per kernel, kernels
#: per layer), accesses in 16-bit elements (an fp32 access counts 2), the backward's from
#: autograd's formula for each op (PyTorch's tools/autograd/derivatives.yaml):
#:
#: - ``rms_norm``: ``self._norm(x.float()).type_as(x) * self.weight`` with ``_norm`` =
#:   ``x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps)``: the cast to fp32 (read 1,
#:   write 2), pow (2 + 2), mean (2), the product with the row's rsqrt (2 + 2), the cast back
#:   (2 + 1), the weight's product (1 + 1): 18 in six kernels; the backward 42 (the weight's
#:   product's two gradients 6, the cast 3, the rsqrt product's two 12, mean's expansion 2,
#:   pow's 10, the two paths' sum 6, the cast 3), counted as six kernels; two norms a layer.
#:   The per-row add and rsqrt are left out.
#: - ``rope``: ``apply_rotary_emb`` on Q and on K, each cast to fp32 (1 + 2), multiplied as
#:   complex numbers by the frequencies (2 + 2) and cast back (2 + 1): 10 in three kernels;
#:   the backward the same (the casts' and the product's gradients). Elements: Q's and K's
#:   widths' mean.
#: - ``repeat_kv``: grouped-query attention's keys and values expanded to every query head
#:   (``unsqueeze``, ``expand``, ``reshape``: a copy reading the key-value heads and writing
#:   the heads' width); its backward sums them back. Only where there are fewer key-value
#:   heads than query heads.
#: - ``attn_out_copy``: the attention's output ``transpose(1, 2).contiguous()`` (1 + 1); the
#:   backward copies its gradient back.
#: - ``swiglu``: ``F.silu(self.w1(x)) * self.w3(x)``: silu (1 + 1) and the product (2 + 1), 5
#:   in two kernels; the backward the product's two gradients (3 each) and silu's (3): 9.
LLAMA_EAGER: Dict[str, Tuple[Callable, float, float, int]] = {
    "rms_norm": (lambda h, a, sl, b, tp, blk: sl * b * h / tp, 3.0, 7.0, 12),
    "rope": (lambda h, a, sl, b, tp, blk: sl * b * (blk.attention_width(h, a) + _kv_width(h, a, blk)) / (2.0 * tp),
             10.0 / 3.0, 10.0 / 3.0, 6),
    "repeat_kv": (lambda h, a, sl, b, tp, blk: sl * b * (blk.attention_width(h, a) + _kv_width(h, a, blk)) / tp,
                  1.0, 1.0, 2),
    "attn_out_copy": (lambda h, a, sl, b, tp, blk: sl * b * blk.attention_width(h, a) / tp, 2.0, 2.0, 1),
    "swiglu": (lambda h, a, sl, b, tp, blk: sl * b * blk.activation_width(h) / tp, 2.5, 4.5, 2),
}
#: Names of the kernels only the ``llama_eager`` style runs (``LLAMA_EAGER``).
LLAMA_EAGER_KERNELS: Tuple[str, ...] = tuple(LLAMA_EAGER)
#: The ``layer._ELEMENTWISE`` kernels the ``llama_eager`` style runs as ops of their own instead.
LLAMA_EAGER_REPLACES: Tuple[str, ...] = ("layernorm", "gelu")
#: The MLP's activation of the ``llama_eager`` style.
LLAMA_ACTIVATION: Tuple[str, ...] = ("swiglu",)
#: The ``LLAMA_EAGER`` kernels the same block still runs when torch.compile's Inductor compiles
#: it (torchtitan's ``compile`` on each Transformer block; the ``llama_compiled`` style, beside
#: the fused kernels of ``layer._ELEMENTWISE``): Inductor generates no code for complex tensors
#: (torch/_inductor/lowering.py: ``unsupported_input_tensor`` sends a node with a complex
#: input or output to its eager kernel, ``_warn_complex_not_supported``, "Torchinductor does
#: not support code generation for complex operators"; ``view_as_complex`` is a fallback
#: needing a contiguous input), so ``apply_rotary_emb``'s fp32 cast, complex product and cast
#: back stay three kernels each way; and what feeds or follows an extern kernel in another
#: layout is a copy of its own: ``repeat_kv``'s keys and values for the fused attention
#: (``_scaled_dot_product_flash_attention`` is a fallback) and the attention's output made
#: contiguous for ``wo``'s matrix product. The RMSNorms and SwiGLU fuse into one kernel each.
LLAMA_COMPILED_KERNELS: Tuple[str, ...] = ("rope", "repeat_kv", "attn_out_copy")
