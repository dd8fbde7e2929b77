"""Which stored α-β fit a calibration takes for a link tier."""

from __future__ import annotations

import pandas as pd
import pytest

from sweeps.calibrate import link_tier


def _fit(world, points, error, busbw, placement="pack", op="all_reduce", status="ok"):
    return dict(op=op, world=world, placement=placement, points=points, max_rel_error=error, busbw_GBps=busbw,
                alpha_us=10.0, status=status)


def test_the_largest_group_then_the_most_sizes_then_the_tightest_fit_is_taken():
    fits = pd.DataFrame([_fit(2, 20, 0.01, 1.0), _fit(4, 8, 0.09, 2.0), _fit(4, 12, 0.08, 3.0), _fit(4, 12, 0.05, 4.0),
                         _fit(8, 30, 0.01, 9.0, op="all_gather"), _fit(8, 30, 0.01, 9.0, status="failed")])
    assert link_tier(fits, "pack").bandwidth_GBps == pytest.approx(4.0)
    assert link_tier(fits, "spread") is None
