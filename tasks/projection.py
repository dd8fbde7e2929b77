"""Project configurations onto a hardware profile: the vectorised cost model.

``project_columns`` takes a table of points as columns (one row per configuration x
hardware scenario) and returns the per-layer times and the metrics of method.md §6 as
columns: no Python loop runs per configuration. ``project_table`` wraps it for Arrow
tables, the form task results travel in.
"""

from __future__ import annotations

from typing import Dict, Mapping

import numpy as np
import pyarrow as pa

from tasks import costs, layer, metrics
from tasks.specs import HardwareProfile, fingerprint

__all__ = [
    "COST_MODEL_VERSION",
    "SCHEMA_VERSION",
    "POINT_SCHEMA",
    "PROJECTION_SCHEMA",
    "project_columns",
    "project_table",
]

#: Bumped whenever a formula or assumption of the cost model changes its numbers; part
#: of every result key, so a changed model never reuses an old result.
COST_MODEL_VERSION = "spec-1"

#: Version of the projection table's schema (the lake's ``schema_version`` column).
#: 2 added ``status`` and ``reason``.
SCHEMA_VERSION = 2

#: What a point carries into a projection. ``links`` is "ideal" (every group on the
#: scale-up tier, the study's assumption that four devices stand in for larger groups)
#: or "placed" (a group wider than a node crosses the scale-out tier).
POINT_SCHEMA = pa.schema(
    [
        ("key", pa.string()),
        ("label", pa.string()),
        ("h", pa.int64()),
        ("heads", pa.int64()),
        ("sl", pa.int64()),
        ("b", pa.int64()),
        ("tp", pa.int64()),
        ("dp", pa.int64()),
        ("dtype_bytes", pa.int64()),
        ("flop_vs_bw", pa.float64()),
        ("dp_slowdown", pa.float64()),
        ("links", pa.string()),
    ]
)

_RESULT_FIELDS = [
    ("status", pa.string()),  # ok | infeasible | oom (tasks.outcomes)
    ("reason", pa.string()),
    ("hardware_fingerprint", pa.string()),
    ("calibration", pa.string()),
    ("cost_model_version", pa.string()),
    ("schema_version", pa.int32()),
    ("tp_tier", pa.string()),
    ("dp_tier", pa.string()),
    ("flops", pa.float64()),
    ("tp_comm_bytes", pa.float64()),
    ("dp_comm_bytes", pa.float64()),
    ("t_gemm_fwd_s", pa.float64()),
    ("t_gemm_bwd_s", pa.float64()),
    ("t_elementwise_s", pa.float64()),
    ("t_compute_s", pa.float64()),
    ("t_tp_comm_s", pa.float64()),
    ("t_dp_comm_s", pa.float64()),
    ("t_overlappable_s", pa.float64()),
    ("exposed_comm_s", pa.float64()),
    ("step_time_s", pa.float64()),
    ("serialized_fraction", pa.float64()),
    ("overlap_percent", pa.float64()),
    ("comm_share", pa.float64()),
    ("flops_per_serialized_byte", pa.float64()),
    ("flops_per_overlapped_byte", pa.float64()),
    ("extrapolated", pa.bool_()),
]

#: One row per configuration x scenario; times are per layer, forward + backward.
PROJECTION_SCHEMA = pa.schema(list(POINT_SCHEMA) + [pa.field(n, t) for n, t in _RESULT_FIELDS])


def _layer_times(h, heads, sl, b, tp, p, hw: HardwareProfile):
    """Forward GEMM, backward GEMM and element-wise time of one layer, per device.

    The input- and weight-gradient GEMMs touch the same three matrices and do the same
    FLOPs as their forward GEMM (``layer.gemm_shapes``), so under a roofline each costs
    what the forward costs: backward GEMM time = 2 x forward GEMM time.
    """
    t_fwd = np.zeros(np.shape(h))
    for gemm in layer.gemm_shapes(h, heads, sl, b, tp):
        if gemm.pass_ == "fwd":
            t_fwd += costs.gemm_time(gemm.flops, gemm.bytes(p), hw)
    t_elem = np.zeros(np.shape(h))
    for _, fwd_bytes, count in layer.elementwise_kernels(h, heads, sl, b, tp, p):
        t_elem += count * (
            costs.memory_bound_time(fwd_bytes, hw)
            + costs.memory_bound_time(layer.ELEMENTWISE_BACKWARD_FACTOR * fwd_bytes, hw)
        )
    return t_fwd, 2.0 * t_fwd, t_elem


def _tier_time(n, message_bytes, crosses_nodes, hw: HardwareProfile):
    """All-reduce time on the tier each group spans (vectorised choice)."""
    intra = costs.link_tier_time(n, message_bytes, hw.intra_node)
    inter = costs.link_tier_time(n, message_bytes, hw.inter_node)
    return np.where(crosses_nodes, inter, intra)


def project_columns(points: Mapping[str, np.ndarray], hw: HardwareProfile) -> Dict[str, np.ndarray]:
    """Times and metrics for every point; all inputs are equal-length arrays.

    Reads the numeric columns of ``POINT_SCHEMA`` (h, heads, sl, b, tp, dp, dtype_bytes,
    flop_vs_bw, dp_slowdown) and ``placed`` (bool array: groups are placed on the tier
    they span rather than all on the scale-up tier). Returns the result columns of
    ``PROJECTION_SCHEMA`` that are arrays (tiers as bool ``tp_crosses_nodes`` and
    ``dp_crosses_nodes``).
    """
    h = np.asarray(points["h"], dtype=np.float64)
    heads = np.asarray(points["heads"], dtype=np.float64)
    sl = np.asarray(points["sl"], dtype=np.float64)
    b = np.asarray(points["b"], dtype=np.float64)
    tp = np.asarray(points["tp"], dtype=np.float64)
    dp = np.asarray(points["dp"], dtype=np.float64)
    p = np.asarray(points["dtype_bytes"], dtype=np.float64)
    m = np.asarray(points["flop_vs_bw"], dtype=np.float64)
    slowdown = np.asarray(points["dp_slowdown"], dtype=np.float64)
    placed = np.asarray(points["placed"], dtype=bool)

    t_gemm_fwd, t_gemm_bwd, t_elem = _layer_times(h, heads, sl, b, tp, p, hw)
    # Hardware evolution (§5.4): compute shrinks by m, communication stays.
    t_gemm_fwd = metrics.apply_flop_vs_bw(t_gemm_fwd, m)
    t_gemm_bwd = metrics.apply_flop_vs_bw(t_gemm_bwd, m)
    t_elem = metrics.apply_flop_vs_bw(t_elem, m)
    t_compute = t_gemm_fwd + t_gemm_bwd + t_elem

    per_node = hw.devices_per_node
    tp_crosses = placed & (tp > per_node)
    dp_crosses = placed & (tp * dp > per_node)
    tp_bytes_one = layer.tp_allreduce_bytes(h, sl, b, p)
    t_tp = layer.tp_allreduces_per_layer * _tier_time(tp, tp_bytes_one, tp_crosses, hw)
    dp_bytes = layer.dp_gradient_bytes(h, tp, p)
    t_dp = _tier_time(dp, dp_bytes, dp_crosses, hw)

    t_overlappable = t_gemm_bwd
    exposed = metrics.exposed_communication(t_tp, t_dp, t_overlappable, slowdown)
    step = t_compute + exposed
    flops = layer.layer_training_flops(h, sl, b, tp)
    return {
        "tp_crosses_nodes": tp_crosses,
        "dp_crosses_nodes": dp_crosses,
        "flops": flops,
        "tp_comm_bytes": layer.tp_allreduces_per_layer * tp_bytes_one,
        "dp_comm_bytes": dp_bytes,
        "t_gemm_fwd_s": t_gemm_fwd,
        "t_gemm_bwd_s": t_gemm_bwd,
        "t_elementwise_s": t_elem,
        "t_compute_s": t_compute,
        "t_tp_comm_s": t_tp,
        "t_dp_comm_s": t_dp,
        "t_overlappable_s": t_overlappable,
        "exposed_comm_s": exposed,
        "step_time_s": step,
        "serialized_fraction": metrics.serialized_fraction(t_compute, t_tp),
        "overlap_percent": metrics.overlap_percent(t_dp, t_overlappable),
        "comm_share": metrics.communication_share(exposed, step),
        "flops_per_serialized_byte": metrics.compute_per_serialized_byte(
            flops, layer.tp_allreduces_per_layer * tp_bytes_one
        ),
        "flops_per_overlapped_byte": metrics.compute_per_overlapped_byte(flops * 2.0 / 3.0, dp_bytes),
    }


def _tier_names(crosses: np.ndarray) -> pa.Array:
    return pa.DictionaryArray.from_arrays(
        pa.array(crosses.astype(np.int8)), pa.array(["intra_node", "inter_node"])
    ).cast(pa.string())


def project_table(points: pa.Table, hw: HardwareProfile) -> pa.Table:
    """Project an Arrow table of ``POINT_SCHEMA`` rows; returns ``PROJECTION_SCHEMA``.

    A pure function of its inputs: the same points and profile give the same table.
    """
    points = points.select(POINT_SCHEMA.names).cast(POINT_SCHEMA)
    columns = {name: points.column(name).to_numpy() for name in POINT_SCHEMA.names if name not in ("key", "label", "links")}
    links = points.column("links").to_numpy(zero_copy_only=False)
    columns["placed"] = links == "placed"
    result = project_columns(columns, hw)
    n = points.num_rows
    out = {name: points.column(name) for name in POINT_SCHEMA.names}
    out["status"] = pa.array(["ok"] * n, pa.string())
    out["reason"] = pa.nulls(n, pa.string())
    out["hardware_fingerprint"] = pa.array([fingerprint(hw)] * n, pa.string())
    out["calibration"] = pa.array([f"spec:{hw.name}"] * n, pa.string())
    out["cost_model_version"] = pa.array([COST_MODEL_VERSION] * n, pa.string())
    out["schema_version"] = pa.array(np.full(n, SCHEMA_VERSION, dtype=np.int32))
    out["tp_tier"] = _tier_names(result.pop("tp_crosses_nodes"))
    out["dp_tier"] = _tier_names(result.pop("dp_crosses_nodes"))
    out.update(result)
    # The spec roofline measures nothing, so it extrapolates from nothing measured.
    out["extrapolated"] = pa.array(np.zeros(n, dtype=bool))
    return pa.table(out, schema=PROJECTION_SCHEMA)
