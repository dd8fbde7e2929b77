"""The study's region of interest (method.md §5.2): for each configuration of the
overlapped grid, the backward GEMMs (input- and weight-gradient) and the weight-gradient
all-reduce that would overlap in a real step, planned as measurement points.

A point's key is its measurement's identity (operation, shape, dtype, device, device
model, torch version), so a kernel measured once for any sweep is not measured again. A
kernel's row also stores its share of a peak (``peak_fraction``), so its key names that peak
too: a sweep on another hardware profile measures the kernel again rather than reading a
fraction of the former profile's peak.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Dict, List, Optional, Sequence

import pyarrow as pa

from tasks.device import DTYPE_BYTES
from tasks.identity import content_hash
from tasks.measure.collectives import CollectiveContext
from tasks.measure.kernels import ROI_POINT_SCHEMA, KernelContext, measure_kernels
from tasks.model.kernels import layer
from tasks.model.collectives.nccl import MODELLED_OPS

__all__ = ["RoiContext", "measure_roi_kernels", "roi_point", "roi_points", "config_gemms", "measurement_key"]


@dataclass(frozen=True)
class RoiContext:
    """What a worker needs: kernel timing settings, collective settings, backend, device."""

    kernels: KernelContext
    collectives: CollectiveContext
    backend: str
    device: str


def measure_roi_kernels(points: pa.Table, context: RoiContext) -> pa.Table:
    return measure_kernels(points, context.kernels)


def measurement_key(point: Dict[str, object], torch_version: str, peak_tflops: Optional[float] = None) -> str:
    """The key of ``point``: what it measures, and for a kernel (not a collective) the peak
    its ``peak_fraction`` refers to."""
    fields = ("op", "m", "n", "k", "batch", "dtype", "device", "device_model_spec", "world", "message_bytes",
              "placement")
    peak = [] if peak_tflops is None or point["op"] in MODELLED_OPS else [peak_tflops]
    return content_hash([point[f] for f in fields] + [torch_version] + peak, length=32)


def roi_point(*, dtype: str, device: str, device_model_spec: str, torch_version: str,
              peak_tflops: Optional[float] = None, **fields) -> Dict[str, object]:
    """One measurement point (a row of ``ROI_POINT_SCHEMA``) with its key; ``fields`` set
    op, name, m, n, k, batch, world, message_bytes (bytes), placement; ``peak_tflops`` is the
    hardware profile's peak that a kernel's ``peak_fraction`` will refer to."""
    point = {"op": "", "name": "", "m": 0, "n": 0, "k": 0, "batch": 1, "dtype": dtype, "device": device,
             "device_model_spec": device_model_spec, "world": 1, "message_bytes": 0, "placement": "", **fields}
    point["key"] = measurement_key(point, torch_version, peak_tflops)
    return point


def config_gemms(h: int, heads: int, sl: int, b: int, tp: int, passes: Sequence[str]) -> List[layer.Gemm]:
    """The GEMMs of one configuration's layer in the given passes (e.g. ig, wg)."""
    return [g for g in layer.gemm_shapes(h, heads, sl, b, tp) if g.pass_ in passes]


def roi_points(configs: Sequence[Dict[str, int]], *, passes: Sequence[str], elementwise: bool, dtype: str,
               device: str, device_model_spec: str, collective_ops: Sequence[str], world: int,
               placement: str, ladder_bytes: Sequence[int], torch_version: str,
               peak_tflops: Optional[float] = None) -> pa.Table:
    """Measurement points for ``configs`` (dicts of h, heads, sl, b, tp), deduplicated.

    Kernels: every GEMM of ``passes`` (and the memory-bound kernels if ``elementwise``).
    Collectives: each op at the exact sizes of each configuration, its weight gradients
    (p * 12 H^2 / TP bytes, the DP all-reduce) and, where TP > 1, its activations
    (p * SL * B * H bytes, the TP all-reduce), and at every size of the ladder, among
    ``world`` ranks.
    """
    p = DTYPE_BYTES[dtype]
    points: Dict[str, dict] = {}

    def add(**fields) -> None:
        point = roi_point(dtype=dtype, device=device, device_model_spec=device_model_spec, torch_version=torch_version,
                          peak_tflops=peak_tflops, **fields)
        points.setdefault(point["key"], point)

    for c in configs:
        for g in config_gemms(c["h"], c["heads"], c["sl"], c["b"], c["tp"], passes):
            add(op="gemm", name=f"{g.name}.{g.pass_}", m=int(g.m), n=int(g.n), k=int(g.k), batch=int(g.batch))
        if elementwise:
            rows, width = c["sl"] * c["b"], c["h"] // c["tp"]
            for op in ("layernorm", "gelu", "dropout", "residual_add"):
                add(op=op, name=op, m=rows, n=width * (4 if op == "gelu" else 1))
            add(op="softmax", name="softmax", m=c["b"] * max(1, c["heads"] // c["tp"]) * c["sl"], n=c["sl"])
        for op in collective_ops:
            size = int(layer.dp_gradient_bytes(c["h"], c["tp"], p))
            add(op=op, name=f"{op}.wg", world=world, message_bytes=size, placement=placement)
            if c["tp"] > 1:
                size = int(layer.tp_allreduce_bytes(c["h"], c["sl"], c["b"], p))
                add(op=op, name=f"{op}.tp", world=world, message_bytes=size, placement=placement)
    for op in collective_ops:
        for size in ladder_bytes:
            add(op=op, name=f"{op}.ladder", world=world, message_bytes=int(size), placement=placement)
    return pa.Table.from_pylist(list(points.values()), schema=ROI_POINT_SCHEMA)
