"""Project configurations onto a hardware profile: the vectorised cost model.

``project_columns`` takes a table of points as columns (one row per configuration x
hardware scenario) and returns the per-layer times and the metrics of method.md §6 as
columns: no Python loop runs per configuration. ``project_table`` wraps it for Arrow
tables, the form task results travel in.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Dict, Mapping, Optional, Tuple

import numpy as np
import pyarrow as pa

from tasks.model.kernels import layer
from tasks.model.terms import metrics
from tasks.model.collectives.layer_comm import dp_gradient_time, tp_layer_time
from tasks.model.kernels.layer_cost import layer_cost
from tasks.model.kernels.sustained import training_device
from tasks.model.projection.operators import MODELLED_CLASSES, op_family
from tasks.model.projection.opmodel import MeasuredRange, OperatorModel, predict
from tasks.model.terms.specs import HardwareProfile, LinkTier, fingerprint

__all__ = [
    "COST_MODEL_VERSION",
    "SCHEMA_VERSION",
    "POINT_SCHEMA",
    "PROJECTION_SCHEMA",
    "project_columns",
    "project_table",
    "project_with",
    "layer_times",
    "Calibration",
    "ProjectionContext",
    "HIGHLIGHT_PREFIX",
]

#: Bumped whenever a formula or assumption of the cost model changes its numbers; part
#: of every result key, so a changed model never reuses an old result.
#: What each version changed, and which numbers moved: docs/changelog.md.
COST_MODEL_VERSION = "spec-12"

#: Version of the projection table's schema (the lake's ``schema_version`` column).
#: 2 added ``status`` and ``reason``; 3 the uncertainty band of a measured calibration.
SCHEMA_VERSION = 3

#: The label of a highlighted model's point (projected at the TP Eq. 10 requires of it):
#: ``highlight:<model>``; grid points have an empty label or the model's name.
HIGHLIGHT_PREFIX = "highlight:"

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
    # A measured calibration's band on the step time, from its fits' residuals (null for spec).
    ("step_time_low_s", pa.float64()),
    ("step_time_high_s", pa.float64()),
]

#: One row per configuration x scenario; times are per layer, forward + backward.
PROJECTION_SCHEMA = pa.schema(list(POINT_SCHEMA) + [pa.field(n, t) for n, t in _RESULT_FIELDS])


def layer_times(h, heads, sl, b, tp, p, hw: HardwareProfile):
    """Forward GEMM, backward GEMM and element-wise time of one layer of the study's block
    (method.md §3: multi-head attention, a 4H MLP, the score matrix materialised), per
    device at the rates it sustains in training (``tasks.model.kernels.sustained``):
    ``tasks.model.kernels.layer_cost`` for the study's stack."""
    cost = layer_cost(h, heads, sl, b, tp, training_device(hw), p=p)
    return cost.gemm_fwd, cost.gemm_bwd, cost.elementwise_fwd + cost.elementwise_bwd


@dataclass(frozen=True)
class Calibration:
    """Measured costs of one device, standing in for the spec roofline.

    ``models``: an operator model per class of ``operators.MODELLED_CLASSES``, fitted on
    configurations inside ``measured_range``. ``intra_node`` / ``inter_node``: link
    tiers from measured α-β fits, where they exist (else the hardware profile's).
    """

    name: str
    models: Mapping[str, OperatorModel]
    measured_range: MeasuredRange
    intra_node: Optional[LinkTier] = None
    inter_node: Optional[LinkTier] = None

    def links(self, hw: HardwareProfile) -> HardwareProfile:
        """``hw`` with its link tiers replaced by the measured ones."""
        return replace(hw, intra_node=self.intra_node or hw.intra_node, inter_node=self.inter_node or hw.inter_node)


@dataclass(frozen=True)
class ProjectionContext:
    """What a projection task needs: the hardware profile and, optionally, a calibration."""

    hardware: HardwareProfile
    calibration: Optional[Calibration] = None


def _measured_layer_times(h, heads, sl, b, tp, calibration: Calibration) -> Tuple[np.ndarray, ...]:
    """Forward GEMM, backward GEMM and the other operators' time of one layer from the
    operator models, and the band half-width of their sum (seconds)."""
    configs = dict(h=h, heads=heads, sl=sl, b=b, tp=tp)
    families = {c: op_family(c) for c in MODELLED_CLASSES}
    fwd = [c for c, f in families.items() if f == "GEMM forward"]
    bwd = [c for c, f in families.items() if f in ("GEMM input-gradient", "GEMM weight-gradient")]
    rest = [c for c in MODELLED_CLASSES if c not in fwd and c not in bwd]
    (t_fwd, band_fwd), (t_bwd, band_bwd), (t_rest, band_rest) = (
        predict(calibration.models, classes, configs) for classes in (fwd, bwd, rest))
    # Class errors are independent (opmodel.predict), so the half-widths add in quadrature.
    return t_fwd, t_bwd, t_rest, np.sqrt(band_fwd**2 + band_bwd**2 + band_rest**2)


def _compute_times(columns: Dict[str, np.ndarray], hw: HardwareProfile, calibration: Optional[Calibration]):
    """Forward GEMM, backward GEMM and element-wise time per layer, after the flop-vs-bw
    scenario (§5.4: compute shrinks by m, communication stays); the step's band half-width
    (NaN for spec); the extrapolation flags; and the profile whose links to use."""
    h, heads, sl, b, tp, p = (columns[k] for k in ("h", "heads", "sl", "b", "tp", "dtype_bytes"))
    if calibration is None:
        t_gemm_fwd, t_gemm_bwd, t_elem = layer_times(h, heads, sl, b, tp, p, hw)
        band = np.full(np.shape(h), np.nan)
        extrapolated = np.zeros(np.shape(h), dtype=bool)
    else:
        t_gemm_fwd, t_gemm_bwd, t_elem, band = _measured_layer_times(h, heads, sl, b, tp, calibration)
        extrapolated = calibration.measured_range.outside(dict(h=h, heads=heads, sl=sl, b=b, tp=tp))
        hw = calibration.links(hw)
    multiplier = columns["flop_vs_bw"]
    times = tuple(metrics.apply_flop_vs_bw(t, multiplier) for t in (t_gemm_fwd, t_gemm_bwd, t_elem, band))
    return times, extrapolated, hw


def project_columns(points: Mapping[str, np.ndarray], hw: HardwareProfile,
                    calibration: Optional[Calibration] = None) -> Dict[str, np.ndarray]:
    """Times and metrics for every point; all inputs are equal-length arrays.

    Compute costs come from the spec roofline of ``hw``, or from ``calibration``'s
    operator models (then with the step time's band, ``step_time_low_s`` to
    ``step_time_high_s``, and ``extrapolated`` where a point lies outside the measured
    range; a spec projection's band is NaN); collective costs
    from ``hw``'s link tiers, or the calibration's measured ones where it has them.

    Reads the numeric columns of ``POINT_SCHEMA`` (h, heads, sl, b, tp, dp, dtype_bytes,
    flop_vs_bw, dp_slowdown) and ``placed`` (bool array: groups are placed on the tier
    they span rather than all on the scale-up tier). Returns the result columns of
    ``PROJECTION_SCHEMA`` that are arrays (tiers as bool ``tp_crosses_nodes`` and
    ``dp_crosses_nodes``).
    """
    names = ("h", "heads", "sl", "b", "tp", "dp", "dtype_bytes", "flop_vs_bw", "dp_slowdown")
    c = {k: np.asarray(points[k], dtype=np.float64) for k in names}
    placed = np.asarray(points["placed"], dtype=bool)
    (t_gemm_fwd, t_gemm_bwd, t_elem, band), extrapolated, hw = _compute_times(c, hw, calibration)
    t_compute = t_gemm_fwd + t_gemm_bwd + t_elem

    h, sl, b, tp, dp, p = (c[k] for k in ("h", "sl", "b", "tp", "dp", "dtype_bytes"))
    tp_crosses = placed & (tp > hw.devices_per_node)
    dp_crosses = placed & (tp * dp > hw.devices_per_node)
    t_tp = tp_layer_time(h, sl, b, tp, p, tp_crosses, hw)
    t_dp = dp_gradient_time("all_reduce", h, tp, dp, p, dp_crosses, hw)
    tp_bytes = layer.tp_allreduces_per_layer * layer.tp_allreduce_bytes(h, sl, b, p)
    dp_bytes = layer.dp_gradient_bytes(h, tp, p)

    t_overlappable = t_gemm_bwd
    exposed = metrics.exposed_communication(t_tp, t_dp, t_overlappable, c["dp_slowdown"])
    step = t_compute + exposed
    flops = layer.layer_training_flops(h, sl, b, tp)
    return {
        "tp_crosses_nodes": tp_crosses, "dp_crosses_nodes": dp_crosses,
        "flops": flops, "tp_comm_bytes": tp_bytes, "dp_comm_bytes": dp_bytes,
        "t_gemm_fwd_s": t_gemm_fwd, "t_gemm_bwd_s": t_gemm_bwd, "t_elementwise_s": t_elem,
        "t_compute_s": t_compute, "t_tp_comm_s": t_tp, "t_dp_comm_s": t_dp,
        "t_overlappable_s": t_overlappable, "exposed_comm_s": exposed, "step_time_s": step,
        "serialized_fraction": metrics.serialized_fraction(t_compute, t_tp),
        "overlap_percent": metrics.overlap_percent(t_dp, t_overlappable, c["dp_slowdown"]),
        "comm_share": metrics.communication_share(exposed, step),
        "flops_per_serialized_byte": metrics.compute_per_serialized_byte(flops, tp_bytes),
        "flops_per_overlapped_byte": metrics.compute_per_overlapped_byte(flops * 2.0 / 3.0, dp_bytes),
        "extrapolated": extrapolated,
        "step_time_low_s": step - band,
        "step_time_high_s": step + band,
    }


def _tier_names(crosses: np.ndarray) -> pa.Array:
    return pa.DictionaryArray.from_arrays(
        pa.array(crosses.astype(np.int8)), pa.array(["intra_node", "inter_node"])
    ).cast(pa.string())


def project_with(points: pa.Table, context: ProjectionContext) -> pa.Table:
    """``project_table`` with its inputs in one context (the form a task body takes)."""
    return project_table(points, context.hardware, context.calibration)


def project_table(points: pa.Table, hw: HardwareProfile, calibration: Optional[Calibration] = None) -> pa.Table:
    """Project an Arrow table of ``POINT_SCHEMA`` rows; returns ``PROJECTION_SCHEMA``.

    A pure function of its inputs: the same points, profile and calibration give the
    same table.
    """
    points = points.select(POINT_SCHEMA.names).cast(POINT_SCHEMA)
    columns = {name: points.column(name).to_numpy() for name in POINT_SCHEMA.names
               if name not in ("key", "label", "links")}
    links = points.column("links").to_numpy(zero_copy_only=False)
    columns["placed"] = links == "placed"
    result = project_columns(columns, hw, calibration)
    n = points.num_rows
    out = {name: points.column(name) for name in POINT_SCHEMA.names}
    out["status"] = pa.array(["ok"] * n, pa.string())
    out["reason"] = pa.nulls(n, pa.string())
    out["hardware_fingerprint"] = pa.array([fingerprint(hw)] * n, pa.string())
    label = calibration.name if calibration is not None else f"spec:{hw.name}"
    out["calibration"] = pa.array([label] * n, pa.string())
    out["cost_model_version"] = pa.array([COST_MODEL_VERSION] * n, pa.string())
    out["schema_version"] = pa.array(np.full(n, SCHEMA_VERSION, dtype=np.int32))
    out["tp_tier"] = _tier_names(result.pop("tp_crosses_nodes"))
    out["dp_tier"] = _tier_names(result.pop("dp_crosses_nodes"))
    for bound in ("step_time_low_s", "step_time_high_s"):  # NaN (no band) is stored as null
        result[bound] = pa.array(result[bound], pa.float64(), from_pandas=True)
    out.update(result)
    return pa.table(out, schema=PROJECTION_SCHEMA)
