"""The work of one Megatron-style tensor-parallel Transformer layer, per device.

All counts follow ``method.md`` §3 (Pati et al., arXiv 2302.02825, §3-4). Every function
accepts scalars or NumPy arrays (broadcasting), so a whole grid is one call.

Symbols: ``h`` hidden size, ``heads`` attention heads, ``sl`` sequence length, ``b``
micro-batch, ``tp`` tensor-parallel degree, ``p`` bytes per element.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Dict, Tuple

import numpy as np

__all__ = [
    "Gemm",
    "FORWARD_GEMMS",
    "PASSES",
    "gemm_shapes",
    "layer_training_flops",
    "elementwise_kernels",
    "ELEMENTWISE_KERNELS",
    "elementwise_elements",
    "REPLICATED_WITHOUT_SP",
    "tp_allreduce_bytes",
    "tp_allreduces_per_layer",
    "layer_params",
    "dp_gradient_bytes",
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


def _forward(h, heads, sl, b, tp) -> Dict[str, Tuple]:
    """Forward GEMMs as (m, n, k, batch), method.md §3 table; tokens = sl * b."""
    tokens = sl * b
    head_dim = h / heads
    heads_per_device = heads / tp
    return {
        "qkv": (tokens, 3 * h / tp, h, 1.0),
        "scores": (sl, sl, head_dim, b * heads_per_device),
        "context": (sl, head_dim, sl, b * heads_per_device),
        "attn_out": (tokens, h, h / tp, 1.0),
        "fc1": (tokens, 4 * h / tp, h, 1.0),
        "fc2": (tokens, h, 4 * h / tp, 1.0),
    }


#: Names of the forward GEMMs of a layer, in execution order.
FORWARD_GEMMS: Tuple[str, ...] = ("qkv", "scores", "context", "attn_out", "fc1", "fc2")


def gemm_shapes(h, heads, sl, b, tp) -> Tuple[Gemm, ...]:
    """Every GEMM of one layer's training step on one of ``tp`` devices.

    For a forward product Y = X W with X (m x k), W (k x n): the input-gradient GEMM
    dX = dY W^T is (m x n)(n x k), the weight-gradient GEMM dW = X^T dY is (k x m)(m x n).
    Each has the forward's FLOP count (method.md §3: backward costs twice the forward).
    """
    gemms = []
    for name, (m, n, k, batch) in _forward(h, heads, sl, b, tp).items():
        gemms.append(Gemm(name, "fwd", m, n, k, batch))
        gemms.append(Gemm(name, "ig", m, k, n, batch))
        gemms.append(Gemm(name, "wg", k, n, m, batch))
    return tuple(gemms)


def layer_training_flops(h, sl, b, tp):
    """FLOPs of one layer's forward and backward GEMMs on one device.

    72 * b * sl * h^2 * (1 + sl / (6 h)) / tp: three passes of the forward's
    24 * sl * b * h^2 / tp + 4 * b * sl^2 * h / tp (method.md §3; Narayanan et al. 2021).
    """
    return 72.0 * b * sl * h**2 * (1.0 + sl / (6.0 * h)) / tp


#: Memory-bound kernels of one layer's forward pass: name -> (element count per device,
#: element accesses per element: reads + writes, a dropout mask counted as one access).
#: Element counts follow method.md §3: SL*B*H/TP, softmax and its dropout B*A*SL^2/TP.
_ELEMENTWISE: Dict[str, Tuple[Callable, int, int]] = {
    # name: (elements(h, heads, sl, b, tp), accesses per element, kernels per layer)
    "layernorm": (lambda h, a, sl, b, tp: sl * b * h / tp, 2, 2),
    "softmax": (lambda h, a, sl, b, tp: b * a * sl * sl / tp, 2, 1),
    "attn_dropout": (lambda h, a, sl, b, tp: b * a * sl * sl / tp, 3, 1),
    "gelu": (lambda h, a, sl, b, tp: sl * b * 4 * h / tp, 2, 1),
    "dropout": (lambda h, a, sl, b, tp: sl * b * h / tp, 3, 2),
    "residual_add": (lambda h, a, sl, b, tp: sl * b * h / tp, 3, 2),
}

#: Names of the memory-bound kernel classes of a layer.
ELEMENTWISE_KERNELS: Tuple[str, ...] = tuple(_ELEMENTWISE)

#: Kernels on the full SL*B*H activation, which Megatron's tensor parallelism replicates
#: on every TP rank; only sequence parallelism splits them by TP (Korthikanti et al.,
#: arXiv 2205.05198, §4.2.2). The table above counts them split, as method.md §3 does.
REPLICATED_WITHOUT_SP: Tuple[str, ...] = ("layernorm", "dropout", "residual_add")


def elementwise_elements(name: str, h, heads, sl, b, tp, *, sequence_parallel: bool = True):
    """Elements one layer's ``name`` kernels touch per device, all of its kernels together
    (element count per kernel x kernels per layer). Without sequence parallelism the
    replicated kernels (``REPLICATED_WITHOUT_SP``) touch the whole SL*B*H on every rank."""
    elements, _, count = _ELEMENTWISE[name]
    split = 1 if (not sequence_parallel and name in REPLICATED_WITHOUT_SP) else tp
    return elements(h, heads, sl, b, split) * count


#: A memory-bound kernel's backward moves about twice the bytes of its forward (it reads
#: the saved input and the incoming gradient and writes the outgoing one). Assumption.
ELEMENTWISE_BACKWARD_FACTOR = 2.0


def elementwise_kernels(h, heads, sl, b, tp, p: float):
    """Yield (name, bytes moved by one forward kernel, kernels per layer) per class."""
    for name, (elements, accesses, count) in _ELEMENTWISE.items():
        yield name, elements(h, heads, sl, b, tp) * accesses * p, count


def tp_allreduce_bytes(h, sl, b, p: float):
    """Bytes of one TP all-reduce: the activations or errors of a layer, p*SL*B*H."""
    return p * sl * b * h


#: TP all-reduces per layer: two in the forward pass (after the attention output
#: projection and after FC2), two of errors in the backward pass (method.md §3).
tp_allreduces_per_layer = 4


def layer_params(h):
    """Weights of one layer (all TP ranks together), 12 H^2: QKV (3 H^2) + attention output
    (H^2) + FC1 (4 H^2) + FC2 (4 H^2); biases and LayerNorm weights are O(H) and left out
    (method.md §3)."""
    return 12.0 * np.asarray(h, dtype=np.float64) ** 2


def dp_gradient_bytes(h, tp, p: float):
    """Bytes of one layer's weight gradients on one device, p * 12 H^2 / TP."""
    return p * layer_params(h) / tp
