"""Context parallelism in the step model: each rank's share of the sequence, the exchange of
keys and values and what hides it, the gradient group it widens, its memory saving, and the
timeline's track for it."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from tasks.model.kernels.layer_cost import layer_cost
from tasks.model.step.context import as_layouts
from tasks.model.collectives.cp_exchange import kv_chunk_bytes
from tasks.model.step.plan import STATUS_CODES, StepContext, step_columns, step_plan
from tasks.model.step.timeline import step_timeline
from tasks.model.terms.layout import Layout, cp_problem, family
from tasks.model.terms.stack import Stack

FLASH = Stack(attention="flash", tp_overlap=True, pp_overlap=True)


def _one(layout: Layout, ctx: StepContext) -> dict:
    return {name: values[0] for name, values in step_columns(layout.columns(), ctx).items()}


def _ctx(model, hw, seq: int, devices: int = 64, global_batch: int = 16, stack: Stack = FLASH) -> StepContext:
    return StepContext(replace(model, seq_len=seq), hw, devices=devices, global_batch=global_batch,
                       memory_fraction=1e6, stack=stack)


def test_cp_one_is_the_layout_without_context_parallelism(llama, h100):
    ctx = _ctx(llama, h100, 8192)
    plain = _one(Layout(tp=8, pp=1, dp=8, micro_batch=1, zero="zero1", sequence_parallel=True), ctx)
    stated = _one(Layout(tp=8, pp=1, dp=8, micro_batch=1, zero="zero1", sequence_parallel=True, cp=1), ctx)
    assert plain == stated
    assert plain["cp_comm_s"] == 0.0 and plain["cp_exposed_s"] == 0.0


def test_each_rank_attends_its_share_of_the_sequence_as_cp_causal_steps(h100):
    """A rank of CP 4 runs its GEMMs on SL/4 tokens and attention as 4 causal steps over SL/4:
    1/4 of the whole sequence's causal attention, within what smaller kernels lose."""
    h, heads, sl = 8192.0, 64.0, 32768.0
    from tasks.model.kernels.layer import Block
    block = Block(kv_heads=8.0, ffn=28672.0, gated=True, flash=True, dropout=False)
    whole = layer_cost(h, heads, sl, 1.0, 8.0, h100, block=block, stack=FLASH)
    share = layer_cost(h, heads, sl / 4, 1.0, 8.0, h100, block=block, stack=FLASH, cp=4.0)
    assert float(share.attention_fwd) == pytest.approx(float(whole.attention_fwd) / 4, rel=0.15)
    assert float(share.linear_fwd) == pytest.approx(float(whole.linear_fwd) / 4, rel=0.1)
    with pytest.raises(ValueError, match="flash"):
        layer_cost(h, heads, sl / 4, 1.0, 8.0, h100, cp=4.0)


def test_the_ring_hides_behind_long_attention_and_is_exposed_when_it_is_short(llama, h100):
    """At 131,072 tokens a ring hop of K/V (GQA: 8 kv heads) takes far less than an attention
    step, so the step waits for none of it; at 4,096 tokens across nodes the hop outlasts the
    step's attention and the difference is exposed. An all-gather exchange hides nothing."""
    long_ctx = _ctx(llama, h100, 131072, devices=128, global_batch=8)
    ring = _one(Layout(tp=8, pp=1, dp=1, micro_batch=1, cp=16, zero="zero1", sequence_parallel=True), long_ctx)
    assert ring["cp_comm_s"] > 0 and ring["cp_exposed_s"] == 0.0
    gathered = _one(Layout(tp=8, pp=1, dp=1, micro_batch=1, cp=16, cp_comm="all_gather", zero="zero1",
                           sequence_parallel=True), long_ctx)
    assert gathered["cp_exposed_s"] == pytest.approx(gathered["cp_comm_s"]) and gathered["cp_exposed_s"] > 0
    assert gathered["step_time_s"] > ring["step_time_s"]
    short_ctx = _ctx(llama, h100, 4096, devices=128, global_batch=8)
    short = _one(Layout(tp=8, pp=1, dp=1, micro_batch=1, cp=16, zero="zero1", sequence_parallel=True), short_ctx)
    assert 0 < short["cp_exposed_s"] < short["cp_comm_s"]


def test_the_kv_chunk_is_a_ranks_tokens_of_its_kv_heads():
    # K and V, 2 sequences x 4,096 tokens, 8 kv heads of 128 over TP 4, 2 bytes
    assert float(kv_chunk_bytes(2 * 4096, 8.0, 128.0, 4.0)) == 2 * 2 * 4096 * 8 * 128 / 4 * 2


def test_gradients_are_reduced_and_states_sharded_over_dp_times_cp(llama, h100):
    """CP ranks hold the same weights: DP 4 x CP 2 reduces and shards over the 8 ranks DP 8
    does, so the DP traffic, the optimizer's shard and the model states match."""
    ctx = _ctx(llama, h100, 8192, devices=64, global_batch=64)
    with_cp = _one(Layout(tp=8, pp=1, dp=4, micro_batch=1, cp=2, zero="zero1", sequence_parallel=True), ctx)
    without = _one(Layout(tp=8, pp=1, dp=8, micro_batch=1, zero="zero1", sequence_parallel=True), ctx)
    assert with_cp["dp"] == 4 and with_cp["microbatches"] == 16 and without["microbatches"] == 8
    assert with_cp["dp_traffic_bytes"] == pytest.approx(without["dp_traffic_bytes"])
    assert with_cp["dp_comm_s"] == pytest.approx(without["dp_comm_s"])
    assert with_cp["optimizer_s"] == pytest.approx(without["optimizer_s"])


def test_cp_divides_the_activations_a_rank_keeps(llama, h100):
    ctx = _ctx(llama, h100, 32768, devices=64, global_batch=8)
    states = _one(Layout(tp=8, pp=1, dp=8, micro_batch=1, zero="zero1", sequence_parallel=True),
                  replace(ctx, global_batch=8))
    halves = _one(Layout(tp=8, pp=1, dp=4, micro_batch=1, cp=2, zero="zero1", sequence_parallel=True), ctx)
    quarters = _one(Layout(tp=8, pp=1, dp=2, micro_batch=1, cp=4, zero="zero1", sequence_parallel=True), ctx)
    # the same model states (sharded over DP x CP = 8), activations and logits over CP
    saved_half = states["memory_per_device_bytes"] - halves["memory_per_device_bytes"]
    saved_quarter = states["memory_per_device_bytes"] - quarters["memory_per_device_bytes"]
    assert saved_half > 0 and saved_quarter == pytest.approx(1.5 * saved_half, rel=1e-9)


def test_devices_must_split_into_tp_pp_cp_and_cp_needs_fused_attention(llama, h100):
    ctx = _ctx(llama, h100, 8192, devices=48, global_batch=48)
    broken = _one(Layout(tp=8, pp=1, dp=1, micro_batch=1, cp=4), ctx)
    assert STATUS_CODES[broken["status_code"]] == "tp_pp_divides_devices"
    assert "flash" in cp_problem(2, 8192, flash=False)
    assert "2 x CP = 6" in cp_problem(3, 8192, flash=True)
    assert cp_problem(2, 8192, flash=True) == "" and cp_problem(1, 8191, flash=False) == ""
    with pytest.raises(ValueError, match="cp_comm='ring'"):
        Layout(tp=1, pp=1, dp=1, micro_batch=1, cp=2, cp_comm="ring")
    assert Layout(tp=8, pp=2, dp=4, micro_batch=1, cp=2, cp_comm="all_gather").describe().startswith("tp8 cp2(ag) pp2")
    # a family names CP where sequences are split: data parallelism with CP is no plain FSDP
    assert (family(8, 8, 1, "zero3", 16), family(1, 1, 4, "fsdp", 2), family(1, 1, 8, "fsdp")) == \
        ("tp+cp+pp", "cp+dp", "fsdp")


def test_the_timeline_draws_the_exchange_on_its_own_track_and_ends_at_the_step_time(llama, h100):
    ctx = _ctx(llama, h100, 4096, devices=128, global_batch=16)
    layout = Layout(tp=8, pp=2, dp=2, micro_batch=1, cp=4, zero="zero1", sequence_parallel=True)
    plan = step_plan(as_layouts(layout.columns(), np.asarray([2.0]), ctx), ctx)
    events = step_timeline(plan)
    cp_events = [e for e in events if e.track == "cp" and e.stage == 0]
    exposed = sum(e.args["exposed_us"] for e in cp_events) * 1e-6
    assert cp_events and {e.name.split()[1] for e in cp_events} == {"forward", "backward"}
    assert max(e.start_s + e.duration_s for e in events) == pytest.approx(float(plan.step_time[0]), rel=1e-3)
    ticks_exposed = float(plan.cp["exposed"][0]) * float(plan.layouts.microbatches[0])
    assert exposed == pytest.approx(ticks_exposed, rel=1e-6) and exposed > 0


def test_each_distinct_shape_is_costed_once_and_spread_back_whatever_its_degrees():
    """Layouts that share (micro-batch, TP, CP, SP) share one costing; the shapes come back
    exact, from small degrees to the largest a config admits (10^9 sequences, 10^8 ranks)."""
    from dataclasses import fields

    from tasks.model.step.context import StepLayouts, distinct_shapes
    from tasks.model.terms.layout import code

    for b, tp, cp in (([1, 2, 1, 4, 1], [8, 8, 8, 2**23, 8], [1, 1, 2, 1, 1]),
                      ([1e9, 2, 1e9, 2, 1], [1e8, 8, 1e8, 8, 8], [1e8, 1, 1e8, 1, 1])):
        sp = [True, True, False, True, True]
        split = [False, False, True, False, False]      # CP splits heads (the a2a exchange) in the third
        given = dict(micro_batch=np.asarray(b, dtype=float), tp=np.asarray(tp, dtype=float),
                     cp=np.asarray(cp, dtype=float), sequence_parallel=np.asarray(sp),
                     cp_comm=np.where(split, code("cp_comm", "a2a"), code("cp_comm", "p2p")))
        lay = StepLayouts(**{f.name: given.get(f.name, np.ones(5)) for f in fields(StepLayouts)})
        assert list(lay.heads_split) == split
        shapes = distinct_shapes(lay)
        back = [(shapes.micro_batch[i], shapes.tp[i], shapes.cp[i], bool(shapes.sequence_parallel[i]),
                 bool(shapes.heads_split[i])) for i in shapes.index]
        assert back == [(float(x), float(y), float(z), w, v) for x, y, z, w, v in zip(b, tp, cp, sp, split,
                                                                                     strict=True)]
        assert len(shapes.tp) == len(set(back))


def test_the_all_to_all_exchange_splits_heads_attends_whole_sequences_and_waits_for_its_swaps(llama, h100):
    """Ulysses-style CP (a2a): Q, K, V and the output swap sequence for heads by all-to-all, all
    of it waited for; attention runs whole sequences over 1/CP of the heads (one kernel at the
    full length, as much work as CP ring steps); and CP must divide each TP rank's K/V heads
    (Llama 3 70B's 8 over TP 8 leave one: no a2a CP there)."""
    ctx = _ctx(llama, h100, 65536, devices=64, global_batch=16)
    swapped = _one(Layout(tp=1, pp=1, dp=8, micro_batch=1, cp=8, cp_comm="a2a", zero="fsdp"), ctx)
    ring = _one(Layout(tp=1, pp=1, dp=8, micro_batch=1, cp=8, zero="fsdp"), ctx)
    assert swapped["status_code"] == 0 and swapped["cp_comm_s"] > 0
    assert swapped["cp_exposed_s"] == pytest.approx(swapped["cp_comm_s"])
    assert ring["cp_exposed_s"] == 0.0
    # one long kernel per layer against eight shorter ones: no slower, and within 5 % (same work)
    assert ring["compute_s"] * 0.95 < swapped["compute_s"] <= ring["compute_s"]
    split = _one(Layout(tp=8, pp=1, dp=4, micro_batch=1, cp=2, cp_comm="a2a", zero="fsdp", sequence_parallel=True),
                 ctx)
    assert STATUS_CODES[split["status_code"]] == "cp_splits_heads"
    assert Layout(tp=1, pp=1, dp=8, micro_batch=1, cp=8, cp_comm="a2a").describe().startswith("tp1 cp8(a2a) pp1")
