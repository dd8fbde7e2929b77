"""A step's DP figures summed over each layout's own sharding mode by class
(``collectives.dp_sums``): the sums a step takes from them are, layout by layout, the sums over
that layout's mode's collectives, each counted per micro-batch and again under recomputation,
and each window's wait the longer of what its compute leaves and its longest waiting tail."""

from __future__ import annotations

from functools import reduce

import numpy as np
import pytest

from tasks.model.collectives import dp_protocol
from tasks.model.collectives.dp_sums import figure, mode_sums, per_pass, step_sum, unhidden_tail, waited

#: Every mode, and one whose repeated collective's tail waits (a reduction behind the forward).
TABLE = {**dp_protocol.SHARDING, "repeated_tail": dp_protocol.ShardingMode("repeated_tail", frozenset(), (
    dp_protocol.DpCollective("reduce_scatter", True, "forward", under_recompute=True),
    dp_protocol.DpCollective("all_gather", True, "forward", granularity="tensor")))}
N = 400


@pytest.fixture(scope="module")
def layouts():
    rng = np.random.default_rng(7)
    keys = {(c.op, c.group, c.granularity) for mode in TABLE.values() for c in mode.collectives}
    figures = {name: {key: rng.uniform(0.1, 2.0, N) for key in keys} for name in ("times", "tails", "bytes", "latency")}
    return {"zero": rng.integers(0, len(TABLE), N), "microbatches": rng.choice([1.0, 4.0, 32.0], N),
            "share": rng.choice([0.0, 0.5, 1.0], N), "hide": {"forward": rng.uniform(0, 3, N),
                                                                "backward": rng.uniform(0, 3, N)},
            "figures": figures}


def _each(layouts, i):
    mode = list(TABLE.values())[layouts["zero"][i]]

    def repeats(c):
        return layouts["share"][i] if c.under_recompute else 1.0

    def value(name, c):
        return figure(layouts["figures"][name], c)[i]

    return mode, repeats, value


def test_step_sums_and_latency_are_each_layouts_own_modes_sums(layouts):
    sums = mode_sums(layouts["zero"], TABLE, layouts["figures"])
    traffic = step_sum(sums, "bytes", microbatches=layouts["microbatches"], recomputed_share=layouts["share"])
    latency_mb, latency_step = per_pass(sums, "latency", recomputed_share=layouts["share"])
    for i in range(N):
        mode, repeats, value = _each(layouts, i)
        expected = sum((layouts["microbatches"][i] if c.per_microbatch else 1.0) * repeats(c) * value("bytes", c)
                       for c in mode.collectives)
        assert traffic[i] == pytest.approx(expected, rel=1e-12)
        for per_mb, got in ((True, latency_mb[i]), (False, latency_step[i])):
            assert got == pytest.approx(sum(repeats(c) * value("latency", c) for c in mode.collectives
                                            if c.per_microbatch == per_mb), rel=1e-12, abs=1e-15)


@pytest.mark.parametrize("dp_overlap", [True, False])
def test_each_window_waits_what_its_compute_leaves_and_never_less_than_its_tail(layouts, dp_overlap):
    sums = mode_sums(layouts["zero"], TABLE, layouts["figures"])
    for per_mb in (True, False):
        got = waited(sums, per_mb, hide=layouts["hide"], recomputed_share=layouts["share"], dp_overlap=dp_overlap,
                     slowdown=1.5)
        total = waited(sums, per_mb, hide=layouts["hide"], recomputed_share=layouts["share"], dp_overlap=dp_overlap,
                       exposed=False)
        for i in range(N):
            mode, repeats, value = _each(layouts, i)
            expected = expected_total = 0.0
            for (hidden_by, needs_overlap), collectives in dp_protocol.windows(mode, per_mb).items():
                t = sum(value("times", c) * repeats(c) for c in collectives)
                expected_total += t
                if hidden_by != "none" and (dp_overlap or not needs_overlap):
                    tail = reduce(max, (value("tails", c) * (repeats(c) > 0) for c in collectives
                                        if unhidden_tail(c, hidden_by)), 0.0)
                    t = max(max(0.0, 1.5 * t - layouts["hide"][hidden_by][i]), tail)
                expected += t
            assert got[i] == pytest.approx(expected, rel=1e-12, abs=1e-15)
            assert total[i] == pytest.approx(expected_total, rel=1e-12, abs=1e-15)
