"""The per-layer projection and the whole-step model charge one layer's TP and DP
collectives alike: the same times for the same layer, layout and hardware, on whichever
link tier each group spans."""

from __future__ import annotations

import numpy as np
import pytest

from tasks.model.terms.layout import Layout
from tasks.model.projection.grid import project_columns
from tasks.model.terms.specs import TransformerModel
from tasks.model.terms.stack import Stack
from tasks.model.step.plan import StepContext, step_columns


def _one_layer(hidden: int, heads: int, seq_len: int) -> TransformerModel:
    """One layer and no vocabulary: a step is that layer alone, with no embedding traffic."""
    return TransformerModel(name="one-layer", year=2024, layers=1, hidden=hidden, heads=heads, ffn_hidden=4 * hidden,
                            params_b=12 * hidden**2 / 1e9, seq_len=seq_len, architecture="decoder", source="test")


@pytest.mark.parametrize("hidden, heads, seq_len, b, tp, dp", [
    (4096, 32, 2048, 1, 4, 2),      # both groups inside a node of 8
    (8192, 64, 4096, 2, 8, 4),      # TP fills the node, DP crosses nodes
    (12288, 96, 2048, 1, 16, 8),    # TP crosses nodes too
])
def test_projection_and_step_model_give_the_same_tp_and_dp_time_for_one_layer(h100, hidden, heads, seq_len, b, tp, dp):
    model = _one_layer(hidden, heads, seq_len)
    # the study's points reduce gradients at their own 16-bit width, a layer's in one call: a stack
    # with 16-bit gradients whose reduction is not overlapped (Megatron-Core then runs one bucket)
    ctx = StepContext(model, h100, devices=tp * dp, global_batch=dp * b, memory_fraction=1e6,
                      stack=Stack(main_grad_bytes=2.0, dp_overlap=False))
    step = {k: float(v[0]) for k, v in step_columns(Layout(tp=tp, pp=1, dp=dp, micro_batch=b).columns(), ctx).items()}
    assert step["microbatches"] == 1 and step["status_code"] == 0
    point = dict(h=hidden, heads=heads, sl=seq_len, b=b, tp=tp, dp=dp, dtype_bytes=2, flop_vs_bw=1.0, dp_slowdown=1.0)
    layer = project_columns({k: np.array([float(v)]) for k, v in point.items()} | {"placed": np.array([True])}, h100)
    assert step["tp_comm_s"] == pytest.approx(float(layer["t_tp_comm_s"][0]), rel=1e-12)
    assert step["dp_comm_s"] == pytest.approx(float(layer["t_dp_comm_s"][0]), rel=1e-12)
    assert layer["tp_crosses_nodes"][0] == (tp > h100.devices_per_node)
    assert layer["dp_crosses_nodes"][0] == (tp * dp > h100.devices_per_node)
