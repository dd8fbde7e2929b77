"""DeepSpeed's ZeRO-3 of 2021 (``dp_engine`` deepspeed-zero3-2021, microsoft/DeepSpeed v0.3.13) as
its code runs it: a tensor a call, each gather serialised and its buffer zero-filled, every call
through PyTorch's list API (a copy per rank, the whole buffer moved), the layer's small tensors
kept gathered between passes and gathered once a step."""

from __future__ import annotations

from dataclasses import replace

import pytest

from tasks.model.collectives import dp_protocol
from tasks.model.collectives.nccl import bus_factor, lowest_latency
from tasks.model.kernels.layer import layer_tensors
from tasks.model.kernels.roofline import memory_bound_time
from tasks.model.step.plan import StepContext, step_columns
from tasks.model.terms.layout import Layout
from tasks.model.terms.stack import Stack

ENGINE = "deepspeed-zero3-2021"
#: GPT-3's layers and embeddings over TP 8: the values one device gathers a pass.
STAGE_PARAMS = 96 * 12 * 12288**2 / 8 + 2 * 50257 * 12288 / 8


def _row(gpt3, hw, *, engine: str = ENGINE, recompute: str = "full", dp: int = 8) -> dict:
    ctx = StepContext(gpt3, hw, devices=8 * dp, global_batch=dp, memory_fraction=1e6, stack=Stack(dp_engine=engine))
    layout = Layout(tp=8, pp=1, dp=dp, micro_batch=1, zero="zero3", recompute=recompute)
    return {name: values[0] for name, values in step_columns(layout.columns(), ctx).items()}


def _keeping(monkeypatch, below: float) -> None:
    """The engine with its persistence threshold at ``below`` values (0: keeps nothing)."""
    engine = dp_protocol.DP_ENGINES[ENGINE]
    monkeypatch.setitem(dp_protocol.DP_ENGINES, ENGINE, replace(engine, persist_below_params=below))


def test_it_serialises_its_gathers_and_gathers_again_under_recomputation(gpt3, h100):
    megatron, deepspeed = _row(gpt3, h100, engine="megatron"), _row(gpt3, h100)
    assert deepspeed["dp_traffic_bytes"] - megatron["dp_traffic_bytes"] == pytest.approx(
        7 / 8 * 2 * STAGE_PARAMS + bus_factor("all_gather", 8) * 2 * 96 * sum(layer_tensors(12288.0, 96)[1]) / 8)
    assert deepspeed["exposed_comm_s"] > megatron["exposed_comm_s"]
    assert deepspeed["step_time_s"] > megatron["step_time_s"]


def test_every_call_copies_its_ranks_parts_one_kernel_each(gpt3, h100):
    """Without recomputation: two gathers a pass of a layer's 4 matrices and of the 2 embedding
    matrices (its 8 vectors stay gathered), each call a zero fill and 8 copies; one
    reduce-scatter of all 12 tensors and both embeddings, 8 copies each; once a step the 96 x 8
    kept vectors gathered (a fill, 8 list copies) and copied out one rank at a time (8 copies
    each, and one into the device's own part)."""
    matrices, vectors = layer_tensors(12288.0, 96)
    launches = 9 * 2 * (96 * len(matrices) + 2) + 8 * (96 * (len(matrices) + len(vectors)) + 2) \
        + 9 + 96 * len(vectors) * (8 + 1)
    copies = _row(gpt3, h100, recompute="none")["dp_comm_s"] \
        - _row(gpt3, replace(h100, kernel_launch_us=0.0), recompute="none")["dp_comm_s"]
    assert copies == pytest.approx(launches * h100.kernel_launch_us * 1e-6)


def test_its_small_tensors_stay_gathered_and_are_gathered_once_a_step(gpt3, h100, monkeypatch):
    """stage3_param_persistence_threshold (100,000 values): GPT-3's biases and LayerNorm weights
    (under 5,000 values each at TP 8) leave every pass's gathers, and one call a step gathers
    them all: the latency floor counts 96 x 8 calls fewer in each of the three gather passes
    and one more a step."""
    one = float(lowest_latency("all_gather", 8, True, h100, local_ranks=1)[()])   # one rank a node (TP 8)
    kept = _row(gpt3, h100)
    _keeping(monkeypatch, 0.0)
    every = _row(gpt3, h100)
    assert every["latency_s"] - kept["latency_s"] == pytest.approx((3 * 96 * 8 - 1) * one, rel=1e-9)
    assert every["dp_traffic_bytes"] < kept["dp_traffic_bytes"]   # the once-a-step call's bytes
    assert every["dp_comm_s"] > kept["dp_comm_s"]
    # above a layer's largest vector and below its smallest matrix: the same; above a matrix: more kept
    _keeping(monkeypatch, 1e6)
    assert _row(gpt3, h100)["latency_s"] == pytest.approx(kept["latency_s"], rel=1e-12)
    _keeping(monkeypatch, 1e12)
    assert _row(gpt3, h100)["latency_s"] < kept["latency_s"]


def test_each_gather_fills_its_buffer_with_zeros_and_copies_it_out(h100):
    """A gathered tensor is written by torch.zeros (one kernel more), then read and written by
    the list API's copies: three passes of its bytes at the achieved HBM bandwidth; a reduced
    tensor's list copies two."""
    from tasks.model.collectives.dp_calls import call_copies

    engine, launches, message = dp_protocol.DP_ENGINES[ENGINE], 8 * h100.kernel_launch_us * 1e-6, 1e9
    assert float(call_copies(engine, "all_gather", message, 8.0, h100)) == pytest.approx(
        launches + h100.kernel_launch_us * 1e-6 + float(memory_bound_time(3 * message, h100)))
    assert float(call_copies(engine, "reduce_scatter", message, 8.0, h100)) == pytest.approx(
        launches + float(memory_bound_time(2 * message, h100)))
    assert float(call_copies(dp_protocol.DP_ENGINES["megatron"], "all_gather", message, 8.0, h100)) == 0.0


def test_a_winners_layer_lists_the_gathers_of_its_weights_not_the_once_a_step_one(gpt3, h100):
    """A layer's DP collectives (``parts.layer_collectives``): under full recomputation three
    gathers of its weights and a reduce-scatter; the once-a-step gather of the kept vectors is
    not one of them."""
    from tasks.model.step.parts import layer_collectives

    ctx = StepContext(gpt3, h100, devices=64, global_batch=8, memory_fraction=1e6, stack=Stack(dp_engine=ENGINE))
    listed = {c.op: c.count for c in layer_collectives(Layout(tp=8, pp=1, dp=8, micro_batch=1, zero="zero3",
                                                              recompute="full"), ctx) if c.group == "dp"}
    assert listed == {"all_gather": 3, "reduce_scatter": 1}
