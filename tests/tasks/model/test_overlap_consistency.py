"""Overlap percent and exposed communication measure one overlapped time: the DP
all-reduce under interference (T_dp_comm * dp_slowdown, method.md §5.5). A row is
exposed exactly when its overlap percent exceeds 100, whatever the slowdown."""

from __future__ import annotations

import itertools

import numpy as np

from tasks.model.terms import metrics
from tasks.model.projection.grid import project_columns


def test_the_metrics_share_the_slowed_overlapped_time():
    # The all-reduce alone (1.0 s) hides behind 1.2 s of compute; slowed 1.3x (1.3 s) it does not.
    assert metrics.overlap_percent(1.0, 1.2) < 100
    assert metrics.overlap_percent(1.0, 1.2, slowdown=1.3) > 100
    assert metrics.exposed_communication(0.0, 1.0, 1.2, slowdown=1.3) > 0
    assert metrics.overlapped_communication(2.0, 1.5) == 3.0


def test_a_projected_row_is_exposed_exactly_when_its_overlap_exceeds_100(study_hw):
    grid = np.array(list(itertools.product([4096, 8192, 16384, 32768], [2**e for e in range(10, 16)], [4, 16],
                                           [1.0, 1.3, 2.0])), dtype=np.float64)
    h, slb, tp, slowdown = grid.T
    n = len(h)
    rows = project_columns(dict(h=h, heads=h / 128, sl=slb, b=np.ones(n), tp=tp, dp=np.full(n, 4.0),
                                dtype_bytes=np.full(n, 2.0), flop_vs_bw=np.ones(n), dp_slowdown=slowdown,
                                placed=np.zeros(n, bool)), study_hw)
    percent, hidden_behind = rows["overlap_percent"], rows["t_overlappable_s"]
    exposed_dp = rows["exposed_comm_s"] - rows["t_tp_comm_s"]
    # The grid holds rows that only the slowdown pushes over 100 %: hidden at slowdown 1, exposed under it.
    unslowed = 100.0 * rows["t_dp_comm_s"] / hidden_behind
    assert ((unslowed < 100) & (slowdown > 1) & (exposed_dp > 0)).any()
    np.testing.assert_array_equal(percent > 100, exposed_dp > 0)
    np.testing.assert_allclose(exposed_dp, hidden_behind * np.maximum(0.0, percent / 100.0 - 1.0),
                               rtol=1e-9, atol=1e-15)
