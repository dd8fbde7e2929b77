"""`commscale calibrate` reports unstable held-out configurations, with their reason, apart from the judged ones."""

from __future__ import annotations

import io

import pandas as pd
from rich.console import Console

from sweeps.cli.calibrate import render_accuracy
from tasks.measure.stability import STATUS_UNSTABLE

REASON = "unstable after 3 measurements: spread p90/p10 140% > 25%"


def _step(h, measured_ms, projected_ms, status="ok", reason=None):
    return dict(op_class="step", h=h, heads=h // 64, sl=256, b=1, tp=1, measured_s=measured_ms / 1e3,
                projected_s=projected_ms / 1e3, band_low_s=0.9 * projected_ms / 1e3,
                band_high_s=1.1 * projected_ms / 1e3, rel_error=projected_ms / measured_ms - 1,
                judged=status == "ok", extrapolated=False, status=status, reason=reason)


def test_unstable_held_out_configurations_are_listed_with_their_reason_and_kept_out_of_the_summary():
    accuracy = pd.DataFrame([_step(512, 60.0, 62.0), _step(768, 100.0, 97.0),
                             _step(1024, 313.7, 62.5, STATUS_UNSTABLE, REASON)])
    out = Console(file=io.StringIO(), width=200)
    render_accuracy(out, accuracy, "calibration t@x")
    text = out.file.getvalue()
    assert "no, unstable" in text
    assert f"unstable, not judged: H=1024, SL=256, B=1, TP=1: {REASON}" in text
    # The 313.7 ms outlier (-80%) is not the worst error: 2 judged, +3.3% and -3.0%.
    assert "End to end over 2 judged held-out configurations (1 unstable, not judged): median |error| 3.2%, " \
           "worst 3.3%" in text
