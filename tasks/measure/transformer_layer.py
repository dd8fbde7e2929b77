"""A real Transformer layer on one device, every kernel inside a labelled operator region.

The layer is Megatron-style (pre-LayerNorm; attention and MLP sub-layers; dropout and
residual adds) and is built with the per-device shapes of tensor-parallel degree ``tp``
(method.md §3): QKV ``H x 3H/TP``, attention over ``A/TP`` heads, output ``H/TP x H``,
FC1 ``H x 4H/TP``, FC2 ``4H/TP x H``. One device thus runs what one of TP devices runs;
the TP all-reduces are left out (communication is modelled apart).

Each operator runs inside a ``torch.profiler.record_function`` region named
``op:<class>.<pass>``, in the forward and in the backward pass:

Operator classes are named in ``tasks.model.projection.operators``:

- GEMMs (``layer.FORWARD_GEMMS``) run as ``LabelledMatmul``: forward ``fwd``, and in the
  backward the input-gradient GEMM (``ig``, gradient of the left operand) and the
  weight-gradient GEMM (``wg``, gradient of the right operand) in regions of their own.
- Memory-bound kernels (``layer.ELEMENTWISE_KERNELS``, plus ``head_reshape``: the copies
  that split QKV into heads and merge them back) run as ``LabelledRegion``: the forward
  builds a private autograd graph, and the backward runs it under ``<class>.bwd``.

What runs outside any region is the autograd engine's own work (summing the gradients
of a tensor used twice, as the residual stream is): the profile reports it as
unattributed time.

Inside ``region_clock(clock_ns)`` every region the opening thread runs is also timed by
that clock and summed per region name: the CPU time of a thread, which the profiler does
not read, for a CPU step that runs on one thread (``tasks.measure.timing.cpu_clock``).
"""

from __future__ import annotations

import math
import threading
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Callable, Dict, Iterator, List

from tasks.device import torch_dtype

__all__ = ["LayerShape", "OP_PREFIX", "build_layer", "region_clock", "TransformerLayer"]

#: Prefix of every operator region's name in a profile.
OP_PREFIX = "op:"


@dataclass(frozen=True)
class LayerShape:
    """One layer configuration: hidden size, heads, sequence length, micro-batch, TP degree."""

    h: int
    heads: int
    sl: int
    b: int
    tp: int

    def __post_init__(self) -> None:
        for name in ("h", "heads", "sl", "b", "tp"):
            value = getattr(self, name)
            if not isinstance(value, int) or value <= 0:
                raise ValueError(f"{name}={value!r}: must be a positive integer")
        if self.h % self.heads:
            raise ValueError(f"heads={self.heads}: must divide h={self.h}")
        if self.heads % self.tp:
            raise ValueError(f"tp={self.tp}: must divide heads={self.heads}")

    @property
    def head_dim(self) -> int:
        return self.h // self.heads

    @property
    def tokens(self) -> int:
        return self.sl * self.b

    def as_dict(self) -> dict:
        return {"h": self.h, "heads": self.heads, "sl": self.sl, "b": self.b, "tp": self.tp}


#: Per thread: the open ``region_clock``'s clock (ns) and seconds per region, or nothing.
_CLOCKED = threading.local()


@contextmanager
def region_clock(clock_ns: Callable[[], int]) -> Iterator[Dict[str, float]]:
    """Time every region this thread runs meanwhile by ``clock_ns`` (nanoseconds); yields
    seconds per region name (``<class>.<pass>``), summed over its calls, filled as they run.
    A region another thread runs (CUDA's backward) is not timed."""
    times: Dict[str, float] = {}
    outer = getattr(_CLOCKED, "open", None)
    _CLOCKED.open = (clock_ns, times)
    try:
        yield times
    finally:
        _CLOCKED.open = outer


@contextmanager
def _region(name: str) -> Iterator[None]:
    """A profiler region ``op:<name>``, also timed by this thread's open ``region_clock``."""
    from torch.profiler import record_function

    clocked = getattr(_CLOCKED, "open", None)
    with record_function(OP_PREFIX + name):
        if clocked is None:
            yield
            return
        clock_ns, times = clocked
        began = clock_ns()
        try:
            yield
        finally:
            times[name] = times.get(name, 0.0) + (clock_ns() - began) / 1e9


def _labelled_classes():
    """The two autograd Functions, built on first use so that importing this module
    does not import torch."""
    import torch

    class LabelledMatmul(torch.autograd.Function):
        """C = A @ B (batched or not) with forward, input- and weight-gradient regions."""

        @staticmethod
        def forward(ctx, a, b, name: str):
            ctx.save_for_backward(a, b)
            ctx.name = name
            with _region(f"{name}.fwd"):
                return torch.matmul(a, b)

        @staticmethod
        def backward(ctx, grad):
            a, b = ctx.saved_tensors
            grad_a = grad_b = None
            if ctx.needs_input_grad[0]:
                with _region(f"{ctx.name}.ig"):
                    grad_a = torch.matmul(grad, b.transpose(-1, -2))
            if ctx.needs_input_grad[1]:
                with _region(f"{ctx.name}.wg"):
                    grad_b = torch.matmul(a.transpose(-1, -2), grad)
            return grad_a, grad_b, None

    class LabelledRegion(torch.autograd.Function):
        """``fn(*inputs)`` in region ``<name>.fwd``; its backward in ``<name>.bwd``."""

        @staticmethod
        def forward(ctx, fn: Callable, name: str, *inputs):
            ctx.name = name
            with torch.enable_grad(), _region(f"{name}.fwd"):
                ctx.inner_inputs = [x.detach().requires_grad_(x.requires_grad) for x in inputs]
                out = fn(*ctx.inner_inputs)
            ctx.inner_outputs = out if isinstance(out, tuple) else (out,)
            detached = tuple(o.detach() for o in ctx.inner_outputs)
            return detached if isinstance(out, tuple) else detached[0]

        @staticmethod
        def backward(ctx, *grads):
            wanted = [x for x in ctx.inner_inputs if x.requires_grad]
            pairs = [(o, g) for o, g in zip(ctx.inner_outputs, grads, strict=True) if g is not None]
            with _region(f"{ctx.name}.bwd"):
                found = iter(torch.autograd.grad([o for o, _ in pairs], wanted, [g for _, g in pairs],
                                                 allow_unused=True))
            result = tuple(next(found) if x.requires_grad else None for x in ctx.inner_inputs)
            ctx.inner_inputs = ctx.inner_outputs = None  # free the private graph
            return (None, None) + result

    return LabelledMatmul, LabelledRegion


def build_layer(shape: LayerShape, *, dtype: str = "fp32", device: str = "cpu", causal: bool = True,
                dropout: float = 0.1, seed: int = 0) -> "TransformerLayer":
    """A layer with random weights of ``shape``'s per-device sizes, on ``device``."""
    return TransformerLayer(shape, dtype=dtype, device=device, causal=causal, dropout=dropout, seed=seed)


class TransformerLayer:
    """One layer's parameters and its training step (forward and backward, no optimizer).

    ``step()`` runs forward and backward once on a fixed random input and returns
    nothing; every kernel it launches is inside an ``op:`` region, except the autograd
    engine's gradient sums. ``causal`` applies a decoder's causal mask in the softmax
    region (an encoder has none).
    """

    def __init__(self, shape: LayerShape, *, dtype: str, device: str, causal: bool, dropout: float,
                 seed: int) -> None:
        import torch

        self.shape, self.device, self.causal, self.p_drop = shape, device, causal, dropout
        self.dtype = torch_dtype(dtype)
        self._matmul, self._region = _labelled_classes()
        gen = torch.Generator().manual_seed(seed)
        h, local = shape.h, shape.h // shape.tp

        def param(*size: int, scale: float = 1.0):
            tensor = torch.randn(*size, generator=gen) * scale
            return tensor.to(device=device, dtype=self.dtype).requires_grad_(True)

        init = 1.0 / math.sqrt(h)
        self.ln1_w, self.ln1_b = param(h, scale=0.0).detach().add_(1).requires_grad_(), param(h, scale=0.0)
        self.ln2_w, self.ln2_b = param(h, scale=0.0).detach().add_(1).requires_grad_(), param(h, scale=0.0)
        self.w_qkv = param(h, 3 * local, scale=init)
        self.w_out = param(local, h, scale=init)
        self.w_fc1 = param(h, 4 * local, scale=init)
        self.w_fc2 = param(4 * local, h, scale=1.0 / math.sqrt(4 * local))
        self.x = param(shape.b, shape.sl, h)
        self.grad_seed = torch.randn(shape.b, shape.sl, h, generator=gen).to(device=device, dtype=self.dtype)

    def parameters(self) -> List:
        return [self.ln1_w, self.ln1_b, self.ln2_w, self.ln2_b, self.w_qkv, self.w_out, self.w_fc1, self.w_fc2]

    # -- the operators, each a plain function of tensors ---------------------------------
    def _layernorm(self, x, w, b):
        import torch.nn.functional as F

        return F.layer_norm(x, (self.shape.h,), w, b)

    def _split_heads(self, qkv):
        s = self.shape
        heads = s.heads // s.tp
        qkv = qkv.view(s.b, s.sl, 3, heads, s.head_dim).permute(2, 0, 3, 1, 4)  # 3, b, heads, sl, d
        q, k, v = (t.reshape(s.b * heads, s.sl, s.head_dim).contiguous() for t in qkv.unbind(0))
        return q, k, v

    def _merge_heads(self, context):
        s = self.shape
        heads = s.heads // s.tp
        return context.view(s.b, heads, s.sl, s.head_dim).permute(0, 2, 1, 3).reshape(s.tokens, heads * s.head_dim)

    def _softmax(self, scores):
        import torch

        scores = scores * (1.0 / math.sqrt(self.shape.head_dim))
        if self.causal:
            sl = self.shape.sl
            mask = torch.ones(sl, sl, dtype=torch.bool, device=scores.device).triu_(1)
            scores = scores.masked_fill(mask, float("-inf"))
        return torch.softmax(scores, dim=-1)

    def _dropout(self, x):
        import torch.nn.functional as F

        return F.dropout(x, p=self.p_drop, training=True)

    @staticmethod
    def _add(x, y):
        return x + y

    def _gelu(self, x):
        import torch.nn.functional as F

        return F.gelu(x)

    # -- the step -----------------------------------------------------------------------------
    def forward(self):
        s, mm, region = self.shape, self._matmul.apply, self._region.apply
        x = self.x
        h1 = region(self._layernorm, "layernorm", x, self.ln1_w, self.ln1_b).view(s.tokens, s.h)
        q, k, v = region(self._split_heads, "head_reshape", mm(h1, self.w_qkv, "qkv"))
        scores = mm(q, k.transpose(-1, -2), "scores")
        probs = region(self._dropout, "attn_dropout", region(self._softmax, "softmax", scores))
        context = region(self._merge_heads, "head_reshape", mm(probs, v, "context"))
        attn = region(self._dropout, "dropout", mm(context, self.w_out, "attn_out")).view(s.b, s.sl, s.h)
        x = region(self._add, "residual_add", x, attn)
        h2 = region(self._layernorm, "layernorm", x, self.ln2_w, self.ln2_b).view(s.tokens, s.h)
        hidden = region(self._gelu, "gelu", mm(h2, self.w_fc1, "fc1"))
        mlp = region(self._dropout, "dropout", mm(hidden, self.w_fc2, "fc2")).view(s.b, s.sl, s.h)
        return region(self._add, "residual_add", x, mlp)

    def step(self) -> None:
        """One training step of the layer: forward, then backward from a fixed gradient."""
        out = self.forward()
        out.backward(self.grad_seed)
        for tensor in self.parameters() + [self.x]:
            tensor.grad = None
