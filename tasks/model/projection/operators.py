"""The operator classes of one layer's training step, named once.

A class is ``<operator>.<pass>``: each GEMM of ``layer.FORWARD_GEMMS`` as forward
(``fwd``), input-gradient (``ig``) and weight-gradient (``wg``) GEMM; each memory-bound
kernel of ``layer.DENSE_ELEMENTWISE_KERNELS`` (a measured layer is dense), plus
``head_reshape`` (the copies that split QKV
into heads and merge them back), as forward and backward (``bwd``). The profiled layer
(``tasks.measure.transformer_layer``) labels its kernels with these names, the operator
models (``tasks.model.projection.opmodel``) are fitted per class, and accuracy is judged per class and
per family.
"""

from __future__ import annotations

from typing import Tuple

from tasks.model.kernels import layer

__all__ = ["ELEMENTWISE_CLASSES", "GEMM_CLASSES", "OP_CLASSES", "UNATTRIBUTED", "MODELLED_CLASSES", "STEP",
           "op_family", "class_column"]

#: Memory-bound classes: the spec model's element-wise kernels, and the head split/merge copies.
ELEMENTWISE_CLASSES: Tuple[str, ...] = layer.DENSE_ELEMENTWISE_KERNELS + ("head_reshape",)
GEMM_CLASSES: Tuple[str, ...] = tuple(f"{g}.{p}" for g in layer.FORWARD_GEMMS for p in layer.PASSES)
#: Every operator class of a layer's training step, as ``<operator>.<pass>``.
OP_CLASSES: Tuple[str, ...] = GEMM_CLASSES + tuple(f"{e}.{p}" for e in ELEMENTWISE_CLASSES for p in ("fwd", "bwd"))

#: The engine's own work outside every region (gradient sums of the residual stream),
#: modelled like a memory-bound class over the layer's SL*B*H elements.
UNATTRIBUTED = "unattributed"
MODELLED_CLASSES: Tuple[str, ...] = OP_CLASSES + (UNATTRIBUTED,)

#: The whole step, end to end (``op_class`` of the end-to-end accuracy rows).
STEP = "step"


def op_family(op_class: str) -> str:
    """The family an operator class belongs to: GEMM forward, input- or weight-gradient,
    element-wise, unattributed, or the whole step."""
    if op_class in (STEP, UNATTRIBUTED):
        return {STEP: "step (end to end)", UNATTRIBUTED: "unattributed"}[op_class]
    name, _, pass_ = op_class.partition(".")
    if pass_ in ("ig", "wg") or (pass_ == "fwd" and name in layer.FORWARD_GEMMS):
        return {"fwd": "GEMM forward", "ig": "GEMM input-gradient", "wg": "GEMM weight-gradient"}[pass_]
    return "element-wise"


def class_column(op_class: str) -> str:
    """The column of an operator class's time in a ``baseline`` row: ``qkv.ig`` -> ``t_qkv_ig_s``."""
    return "t_" + op_class.replace(".", "_") + "_s"
