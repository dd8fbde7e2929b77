"""What depends on a few layout fields is worked out once per distinct combination of them
(``collectives.groups.distinct_rows``, ``step.context.on_distinct``): every layout of a large
table gets exactly the figures it gets costed alone, whatever the stack, sharding mode,
recomputation, micro-batch, context or expert parallelism."""

from __future__ import annotations

import numpy as np
import pytest

from sweeps.config import load_search
from tasks.model.collectives.groups import distinct_rows
from tasks.model.search.space import enumerate_layouts
from tasks.model.step.context import as_layouts
from tasks.model.step.plan import step_columns


def _groups(first, inverse):
    return {tuple(np.flatnonzero(inverse == i)) for i in range(len(first))}


def test_distinct_rows_group_the_rows_that_agree_in_every_column():
    rng = np.random.default_rng(3)
    n = 5000
    columns = [rng.choice([1.0, 2.0, 8.0], n), rng.choice([0.0, 0.25, 1.0], n),        # a fractional column
               rng.choice([True, False], n), rng.choice([2.0 ** 36, 3.0, 2.0 ** 40], n),  # past the dense table
               *(rng.integers(0, 4_000_000, n) for _ in range(4))]                        # digits past 2^62
    first, inverse = distinct_rows(columns)
    rows = np.stack([np.asarray(c, dtype=np.float64) for c in columns], axis=1)
    expected, expected_inverse = np.unique(rows, axis=0, return_inverse=True)
    assert len(first) == len(expected)
    assert _groups(first, inverse) == _groups(expected, expected_inverse.ravel())
    np.testing.assert_array_equal(rows[first][inverse], rows)


@pytest.mark.parametrize("preset", [["scaling", "devices=512", "global_batch=2048"], ["moe"], ["longctx"],
                                    ["default", "stack=deepspeed-zero3-2021"],
                                    ["diminishing", "stack=torchtitan-fsdp2"],
                                    ["diminishing", "stack=maxtext-xla-2025"]])
def test_every_layout_of_a_table_costs_what_it_costs_alone(preset):
    setup = load_search(preset)
    ctx = setup.step_context
    layouts = enumerate_layouts(setup.spec.space, ctx.devices)
    table = step_columns(layouts, ctx)
    ok = np.flatnonzero(table["status_code"] == 0)
    assert len(ok) > 100
    for i in np.random.default_rng(0).choice(ok, 40, replace=False):
        alone = step_columns({name: values[i:i + 1] for name, values in layouts.items()}, ctx)
        for name, values in table.items():
            np.testing.assert_array_equal(values[i:i + 1], alone[name], err_msg=f"{' '.join(preset)}: {name}")


def test_a_layouts_distinct_rows_agree_whichever_field_lists_were_found_before():
    """``StepLayouts.distinct`` numbers each field once and starts a longer field list from a
    shorter one found before: the groups come out as a fresh ``distinct_rows`` finds them."""
    setup = load_search(["scaling", "devices=512", "global_batch=2048"])
    ctx = setup.step_context
    layouts = enumerate_layouts(setup.spec.space, ctx.devices)
    dp = np.maximum(ctx.devices // (layouts["tp"] * layouts["pp"]), 1).astype(np.float64)
    names = ("tp", "pp", "dp", "zero", "layers_per_stage", "microbatches", "recomputed_share", "heads_split")
    lay = as_layouts(layouts, dp, ctx)
    for k in (3, 5, len(names), 2):
        first, inverse = lay.distinct(names[:k])
        columns = [np.broadcast_to(getattr(lay, name), np.shape(lay.tp)) for name in names[:k]]
        expected_first, expected_inverse = distinct_rows(columns)
        assert len(first) == len(expected_first) > 1
        assert _groups(first, inverse) == _groups(expected_first, expected_inverse)
    assert lay.distinct(names[:3]) is lay.distinct(names[:3])
