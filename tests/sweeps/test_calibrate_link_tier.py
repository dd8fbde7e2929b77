"""Which stored α-β fit a calibration takes for a link tier."""

from __future__ import annotations

import pandas as pd
import pyarrow as pa
import pytest

from sweeps.calibrate import link_tier, load_calibration
from sweeps.lake import Lake
from sweeps.lake.kinds import COLLECTIVE_FIT, OPMODEL
from tasks.fit.accuracy import OPMODEL_SCHEMA
from tasks.fit.alpha_beta import FIT_SCHEMA
from tasks.model.projection.operators import MODELLED_CLASSES


def _fit(world, points, error, busbw, placement="pack", op="all_reduce", status="ok"):
    return dict(op=op, world=world, placement=placement, points=points, max_rel_error=error, busbw_GBps=busbw,
                alpha_us=10.0, status=status)


def test_the_largest_group_then_the_most_sizes_then_the_tightest_fit_is_taken():
    fits = pd.DataFrame([_fit(2, 20, 0.01, 1.0), _fit(4, 8, 0.09, 2.0), _fit(4, 12, 0.08, 3.0), _fit(4, 12, 0.05, 4.0),
                         _fit(8, 30, 0.01, 9.0, op="all_gather"), _fit(8, 30, 0.01, 9.0, status="failed")])
    assert link_tier(fits, "pack").bandwidth_GBps == pytest.approx(4.0)
    assert link_tier(fits, "spread") is None


def _opmodel_rows(name: str = "cpu", device: str = "CPU test") -> pa.Table:
    """One stored fit of calibration ``name``: a model per modelled class, made up."""
    rows = [dict(key=f"k-{c}", calibration=name, calibration_id="fit1", op_class=c, alpha_s=1e-5, beta_s=1e-9,
                 d_half=0.0, rms_rel_error=0.01, max_rel_error=0.02, points=8, device_model=device, dtype="fp32",
                 torch_version="t", fitted_at=1.0, status="ok",
                 **{f"{k}_{end}": v for k in ("h", "sl", "b", "tp") for end, v in (("min", 1.0), ("max", 64.0))})
            for c in MODELLED_CLASSES]
    return pa.Table.from_pylist(rows, schema=OPMODEL_SCHEMA)


def _fit_rows(busbw: float, device: str = "CPU test") -> pa.Table:
    row = dict(key=f"fit-{busbw}", op="all_reduce", world=2, placement="pack", device_model=device, alpha_us=50.0,
               busbw_GBps=busbw, max_rel_error=0.05, judged_from_bytes=0, points=10, status="ok")
    return pa.Table.from_pylist([row], schema=FIT_SCHEMA)


def test_a_new_link_fit_gives_the_calibration_a_new_label(tmp_path):
    """The label is in every projected row's key and in the sweep's version: if it named only
    the compute fit, rows priced before the links were measured would be served after."""
    lake = Lake(str(tmp_path / "lake"))
    partition = {"sweep": "calibration-cpu", "hardware": "cpu"}
    lake.commit(OPMODEL, partition, _opmodel_rows())
    compute_only = load_calibration(lake, "cpu")
    assert compute_only.name == "measured:cpu@fit1" and compute_only.intra_node is None
    lake.commit(COLLECTIVE_FIT, {"sweep": "roi", "hardware": "cpu"}, _fit_rows(2.0))
    with_links = load_calibration(lake, "cpu")
    assert with_links.intra_node.bandwidth_GBps == pytest.approx(2.0)
    assert with_links.name.startswith("measured:cpu@fit1+links:") and with_links.name != compute_only.name
    lake.commit(COLLECTIVE_FIT, {"sweep": "roi", "hardware": "cpu"}, _fit_rows(3.0).set_column(
        0, "key", pa.array(["fit-3"])).set_column(9, "points", pa.array([20])))
    faster = load_calibration(lake, "cpu")
    assert faster.intra_node.bandwidth_GBps == pytest.approx(3.0) and faster.name not in (with_links.name,
                                                                                    compute_only.name)
