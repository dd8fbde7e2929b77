"""The ``dots`` recomputation (JAX's ``checkpoint_dots_with_no_batch_dims`` around a layer, as
MaxText runs it): the linear layers' outputs kept, everything else of the forward run again."""

from __future__ import annotations

import numpy as np
import pytest

from tasks.model.step import memory
from tasks.model.step.compute import stage_layer_cost
from tasks.model.step.context import as_layouts
from tasks.model.step.parts import _one_layout, layer_pass_times
from tasks.model.step.plan import StepContext, step_columns
from tasks.model.terms.layout import RECOMPUTE_MODES, SEARCHED_RECOMPUTE_MODES, Layout

R = {name: i for i, name in enumerate(RECOMPUTE_MODES)}


def test_dots_is_a_mode_a_run_can_name_but_no_search_varies_unless_told():
    assert "dots" in RECOMPUTE_MODES and "dots" not in SEARCHED_RECOMPUTE_MODES
    assert (R["none"], R["selective"], R["full"]) == (0, 1, 2)     # the earlier modes keep their codes
    assert Layout(tp=1, pp=1, dp=8, micro_batch=4, zero="zero3", recompute="dots").describe() == \
        "tp1 pp1 dp8 b4 zero3 dots"


@pytest.mark.parametrize("sp, expected", [
    # the input and the projection's output (replicated), Q, K, V and FC1's output (split by TP)
    (False, 2048 * 12288 * (4 + (2 + 4 + 2 * 4) / 8)),
    (True, 2048 * 12288 * (4 + 2 + 4 + 2 * 4) / 8),
])
def test_dots_keeps_the_layer_input_and_the_linear_layers_outputs(sp, expected):
    got = memory.layer_activation_bytes(2048, 1, 12288, 96, 8, sp, R["dots"])
    assert float(got) == pytest.approx(expected)
    full, selective = (float(memory.layer_activation_bytes(2048, 1, 12288, 96, 8, sp, R[m])) for m in ("full",
                                                                                                        "selective"))
    assert full < float(got) < selective


def test_a_gated_mlp_keeps_both_of_its_first_gemms_outputs(llama, h100):
    ctx = StepContext(llama, h100, devices=1, global_batch=1, memory_fraction=1e6)
    block = ctx.block
    m = llama
    got = memory.layer_activation_bytes(m.seq_len, 1, m.hidden, m.heads, 1, False, R["dots"], block)
    kv = block.kv(m.heads) * block.kv_dim(m.hidden, m.heads) / m.hidden
    expected = m.seq_len * m.hidden * (4 + 2 + 4 * kv + 4 * block.activation_width(m.hidden) / m.hidden)
    assert float(got) == pytest.approx(expected)


def test_dots_runs_again_all_of_the_forward_but_the_linear_layers(llama, h100):
    """The backward pass of a layer under ``dots`` is selective's plus the forward's element-wise
    kernels: everything but the linear layers' GEMMs and the attention core selective repeats."""
    ctx = StepContext(llama, h100, devices=1, global_batch=1, memory_fraction=1e6)
    layouts = {r: Layout(tp=1, pp=1, dp=1, micro_batch=1, recompute=r) for r in ("none", "selective", "dots")}
    backward = {r: layer_pass_times(lay, ctx)["backward_s"] for r, lay in layouts.items()}
    cost = stage_layer_cost(_one_layout(layouts["dots"], ctx), ctx)
    rest = float((cost.forward - cost.linear_fwd - cost.core_fwd)[0])
    assert rest > 0
    assert backward["dots"] == pytest.approx(backward["selective"] + rest, rel=1e-9)
    assert backward["selective"] > backward["none"]
    kernels = {r: step_columns(lay.columns(), ctx) for r, lay in layouts.items()}
    assert kernels["dots"]["step_time_s"][0] > kernels["selective"]["step_time_s"][0]
    assert kernels["dots"]["memory_per_device_bytes"][0] < kernels["selective"]["memory_per_device_bytes"][0]


def test_recomputed_work_per_mode(gpt3, h100):
    """``StepLayouts.recomputed`` of a forward of 10, a core of 3 and linear layers of 6: none
    nothing, selective the core, full the forward, dots all but the linear layers."""
    ctx = StepContext(gpt3, h100, devices=8, global_batch=8, memory_fraction=1e6)
    modes = ("none", "selective", "full", "dots")
    columns = {name: np.concatenate([Layout(tp=1, pp=1, dp=8, micro_batch=1, recompute=r).columns()[name]
                                     for r in modes]) for name in Layout(tp=1, pp=1, dp=8, micro_batch=1).columns()}
    lay = as_layouts(columns, np.full(len(modes), 8.0), ctx)
    assert lay.recomputed(10.0, 3.0, 6.0).tolist() == [0.0, 3.0, 10.0, 4.0]
    assert lay.core_recomputed.tolist() == [False, True, False, True]
