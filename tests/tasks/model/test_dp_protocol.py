"""The data-parallel protocol (tasks.model.collectives.dp_protocol) is stated once: every consumer (the
step's DP time and traffic, its latency floor, model-state memory and a winner's per-layer
collectives) follows a changed entry, and no other module names what a ZeRO mode runs."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest

from sweeps.config import load_preset
from tasks.model.collectives import dp_protocol
from tasks.model.step import memory
from tasks.model.collectives.dp_protocol import SHARDING, DpCollective, ShardingMode
from tasks.model.terms.layout import ZERO_MODES, Layout, code
from tasks.model.terms.stack import DP_ENGINE_NAMES
from tasks.model.step.plan import StepContext, step_columns
from tasks.model.step.parts import layer_collectives

ROOT = Path(__file__).resolve().parents[3]


def _row(layout: Layout, ctx: StepContext) -> dict:
    return {name: values[0] for name, values in step_columns(layout.columns(), ctx).items()}


def _xla_unbudgeted(monkeypatch) -> None:
    """The xla engine with its calls hiding behind their whole window, as the other engines'
    do (``DpEngine.overlap_kernels`` 0), to compare what it runs alone."""
    from dataclasses import replace

    monkeypatch.setitem(dp_protocol.DP_ENGINES, "xla", replace(dp_protocol.DP_ENGINES["xla"], overlap_kernels=0.0))


def test_one_mode_per_zero_mode_each_running_known_ops_in_known_windows():
    assert tuple(SHARDING) == ZERO_MODES
    for mode in SHARDING.values():
        assert mode.shards <= {"weights", "gradients", "optimizer"}
        for c in mode.collectives:
            assert c.op in ("all_reduce", "reduce_scatter", "all_gather")
            assert c.hidden_by in dp_protocol.HIDING_WINDOWS


def test_a_changed_entry_reaches_time_traffic_latency_memory_and_the_per_layer_collectives(gpt3, h100, monkeypatch):
    """ZeRO-1 given one more weight gather per micro-batch, hidden by nothing, and its weights
    sharded: every consumer moves, and by what the entry says."""
    ctx = StepContext(gpt3, h100, devices=64, global_batch=32, memory_fraction=1e6)
    layout = Layout(tp=8, pp=1, dp=8, micro_batch=1, zero="zero1")
    before = _row(layout, ctx)
    zero1 = SHARDING["zero1"]
    changed = ShardingMode("zero1", zero1.shards | {"weights"},
                           zero1.collectives + (DpCollective("all_gather", True, "none"),))
    monkeypatch.setitem(SHARDING, "zero1", changed)
    after = _row(layout, ctx)
    microbatches = 32 / 8
    stage_params = 96 * 12 * 12288**2 / 8 + 2 * 50257 * 12288 / 8     # GPT-3's layers and embeddings over TP 8
    gather = 7 / 8 * 2 * stage_params                                   # a ring all-gather of 2-byte weights, DP 8
    ops = [c.op for c in layer_collectives(layout, ctx) if c.group == "dp"]
    assert ops == ["reduce_scatter", "all_gather"]
    assert [c.count for c in layer_collectives(layout, ctx) if c.group == "dp"] == [1, 2]
    assert after["dp_traffic_bytes"] - before["dp_traffic_bytes"] == pytest.approx(microbatches * gather, rel=1e-3)
    assert after["dp_comm_s"] > before["dp_comm_s"] and after["step_time_s"] > before["step_time_s"]
    assert after["latency_s"] > before["latency_s"]
    assert after["memory_per_device_bytes"] < before["memory_per_device_bytes"]
    assert bool(memory.weights_sharded(code("zero", "zero1")))


def test_no_other_module_names_what_a_zero_mode_runs():
    """Which collectives each mode runs, and what it shards, are read from SHARDING: no module
    of the model compares a ZeRO code or name itself."""
    pattern = re.compile(r'\bcode\("zero"|zero_is\(|zero\s*(==|<=|>=|<|>)\s*\d|"(zero1|zero3|fsdp|hsdp)"\s*[:,)]')
    allowed = {"tasks/model/collectives/dp_protocol.py", "tasks/model/terms/layout.py"}
    found = [f"{path.relative_to(ROOT)}:{i}" for path in sorted((ROOT / "tasks" / "model").rglob("*.py"))
             if str(path.relative_to(ROOT)) not in allowed
             for i, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1) if pattern.search(line)]
    assert found == []


@pytest.mark.parametrize("zero", ZERO_MODES)
def test_the_per_layer_collectives_are_the_modes_collectives(gpt3, h100, zero):
    ctx = StepContext(gpt3, h100, devices=64, global_batch=8, memory_fraction=1e6)
    listed = {c.op: c.count for c in layer_collectives(Layout(tp=2, pp=1, dp=32, micro_batch=1, zero=zero), ctx)
              if c.group == "dp"}
    expected: dict = {}
    for c in SHARDING[zero].collectives:
        expected[c.op] = expected.get(c.op, 0) + 1
    assert listed == expected


def _buckets(layout: Layout, ctx: StepContext) -> tuple:
    """``bucket_calls`` of one layout, as floats."""
    from tasks.model.step.context import as_layouts
    from tasks.model.step.dp_comm import bucket_calls

    return tuple(float(v[0]) for v in bucket_calls(as_layouts(layout.columns(), np.asarray([float(layout.dp)]), ctx),
                                                   ctx))


def _split(mode: ShardingMode, granularity: str) -> ShardingMode:
    from dataclasses import replace
    return replace(mode, collectives=tuple(replace(c, granularity=granularity) for c in mode.collectives))


def test_an_engine_changes_only_the_modes_it_runs():
    """Megatron's engine runs SHARDING, plain DP and ZeRO-1 on its DDP's buckets; DeepSpeed's
    ZeRO-3 of 2021 serialises its ZeRO-3 gathers, gathers again under recomputation and moves
    a tensor a call, and leaves the other modes as SHARDING has them (a layer a call)."""
    megatron = dp_protocol.sharding_for("megatron")
    assert {name: mode for name, mode in megatron.items() if name not in ("none", "zero1")} == \
        {name: mode for name, mode in SHARDING.items() if name not in ("none", "zero1")}
    assert megatron["none"] == _split(SHARDING["none"], "bucket") and megatron["zero1"] == _split(SHARDING["zero1"],
                                                                                                  "bucket")
    deepspeed = dp_protocol.sharding_for("deepspeed-zero3-2021")
    assert {name: mode for name, mode in deepspeed.items() if name != "zero3"} == \
        {name: mode for name, mode in SHARDING.items() if name != "zero3"}
    gathers = [c for c in deepspeed["zero3"].collectives if c.op == "all_gather"]
    assert [(c.per_microbatch, c.hidden_by, c.under_recompute, c.granularity) for c in gathers] == \
        [(True, "none", False, "tensor"), (True, "none", False, "tensor"), (True, "none", True, "tensor"),
         (False, "none", False, "persistent")]
    assert [c for c in deepspeed["zero3"].collectives if c.op == "reduce_scatter"] == \
        [c for c in _split(SHARDING["zero3"], "tensor").collectives if c.op == "reduce_scatter"]
    assert tuple(dp_protocol.DP_ENGINES) == DP_ENGINE_NAMES


def test_megatrons_buckets_follow_its_ddp_and_set_the_calls_the_latency_floor_counts(gpt3, h100):
    """Megatron-Core (core_v0.15.3, distributed_data_parallel.py): buckets of max(40M, 1M x DP)
    parameters where the reduction overlaps the backward, one call on everything where it does
    not; the stage's weights fill them from the last layer back, the remainder last. The
    latency floor charges one latency per bucket, where a layer-a-call engine charges one per
    layer and one for the embedding."""
    from tasks.model.collectives.nccl import lowest_latency
    from tasks.model.terms.stack import Stack

    layout = Layout(tp=8, pp=1, dp=64, micro_batch=1, zero="zero1")
    stage = 96 * 12 * 12288**2 / 8 + 2 * 50257 * 12288 / 8               # GPT-3's weights on one device
    for overlap, bucket in ((True, 64e6), (False, stage)):
        calls, size, last = _buckets(layout, StepContext(gpt3, h100, devices=512, global_batch=512, memory_fraction=1e6,
                                                         stack=Stack(dp_overlap=overlap)))
        assert (calls, size) == (pytest.approx(-(-stage // bucket)), pytest.approx(bucket))
        assert last == pytest.approx(stage - (calls - 1) * bucket) and 0 < last <= bucket

    def floor(engine: str) -> float:
        ctx = StepContext(gpt3, h100, devices=512, global_batch=512, memory_fraction=1e6, stack=Stack(dp_engine=engine))
        return _row(layout, ctx)["latency_s"]

    calls = -(-stage // 64e6)
    per_call = sum(float(lowest_latency(op, 64, True, h100, local_ranks=1)[()])
                   for op in ("reduce_scatter", "all_gather"))
    assert floor("megatron") - floor("xla") == pytest.approx((calls - 96 - 1) * per_call, rel=1e-9)


def test_a_reduction_hidden_by_the_backward_still_waits_for_its_last_bucket(gpt3, h100):
    """The last bucket, the stage's first layers and embedding, is reduced once the backward
    has ended (Megatron-Core's finish_grad_sync waits for it): however long the backward lasts,
    the step waits for that call."""
    from tasks.model.collectives.nccl import tier_time
    from tasks.model.terms.stack import Stack

    ctx = StepContext(gpt3, h100, devices=16, global_batch=512, memory_fraction=1e6,
                      stack=Stack(param_gather_overlap=True))
    layout = Layout(tp=8, pp=1, dp=2, micro_batch=8, zero="zero1")
    row = _row(layout, ctx)
    last = _buckets(layout, ctx)[2]
    tail = float(tier_time("reduce_scatter", 2, 4.0 * last, True, h100, local_ranks=1)[()])
    dp_waited = row["exposed_comm_s"] - row["tp_exposed_s"] - row["pp_exposed_s"]
    assert row["dp_comm_s"] > 10 * tail > 0
    # the gather's first bucket waits before the forward as the reduction's last after the backward
    gather_tail = float(tier_time("all_gather", 2, 2.0 * last, True, h100, local_ranks=1)[()])
    assert dp_waited == pytest.approx(tail + gather_tail, rel=1e-9)


def test_a_stack_that_overlaps_the_weight_gather_hides_zero1s_gather_behind_the_forward(gpt3, h100):
    """Megatron-Core's overlap_param_gather: ZeRO-1's once-per-step gather moves from no window
    to the forward pass's; no other mode or collective changes. A zero1 step then waits less,
    by no more than the gather's time; an FSDP step not at all."""
    from tasks.model.step.plan import StepContext, step_columns
    from tasks.model.terms.layout import Layout, encode
    from tasks.model.terms.stack import Stack

    plain, overlapped = Stack(attention="flash"), Stack(attention="flash", param_gather_overlap=True)
    megatron = dp_protocol.sharding_for("megatron")
    assert dp_protocol.sharding_of(plain) == megatron
    table = dp_protocol.sharding_of(overlapped)
    assert {n: m for n, m in table.items() if n != "zero1"} == {n: m for n, m in megatron.items() if n != "zero1"}
    assert [(c.op, c.per_microbatch, c.hidden_by) for c in table["zero1"].collectives] == \
        [("reduce_scatter", False, "backward"), ("all_gather", False, "forward")]

    def step(stack, zero):
        lay = Layout(tp=8, pp=1, dp=64, micro_batch=1, zero=zero, sequence_parallel=True)
        cols = lay.columns()
        for name in ("schedule", "zero", "recompute"):
            cols[name] = encode(name, [getattr(lay, name)])
        out = step_columns(cols, StepContext(gpt3, h100, devices=512, global_batch=512, stack=stack,
                                             memory_fraction=float("inf")))
        return float(out["step_time_s"][0]), float(out["dp_comm_s"][0])

    (before, dp_time), (after, same_dp_time) = step(plain, "zero1"), step(overlapped, "zero1")
    assert before - dp_time < after < before and same_dp_time == dp_time
    assert step(plain, "fsdp") == step(overlapped, "fsdp")


def test_hybrid_sharding_gathers_in_the_node_and_reduces_the_shard_across_nodes(gpt3, h100):
    """FSDP's HYBRID_SHARD (torch 2.13.0 _runtime_utils._reduce_grad): weights split over the DP
    group's ranks on one node and gathered there; the gradient reduce-scattered there, then its
    shard all-reduced across the nodes, one rank of each."""
    ctx = StepContext(gpt3, h100, devices=512, global_batch=512, memory_fraction=1e6)
    layout = dict(tp=2, pp=1, dp=256, micro_batch=1, recompute="full")
    hsdp = {(c.op, c.ranks, c.crosses_nodes, c.local_ranks): c for c in layer_collectives(Layout(**layout, zero="hsdp"),
                                                                                         ctx)
            if c.group == "dp"}
    fsdp = {c.op: c for c in layer_collectives(Layout(**layout, zero="fsdp"), ctx) if c.group == "dp"}
    assert set(hsdp) == {("all_gather", 4, False, 4), ("reduce_scatter", 4, False, 4), ("all_reduce", 64, True, 1)}
    assert hsdp[("all_gather", 4, False, 4)].message_bytes == fsdp["all_gather"].message_bytes
    assert hsdp[("all_reduce", 64, True, 1)].message_bytes == pytest.approx(fsdp["reduce_scatter"].message_bytes / 4)

    one, whole = _row(Layout(**layout, zero="hsdp"), ctx), _row(Layout(**layout, zero="fsdp"), ctx)
    stage_params = 96 * 12 * 12288**2 / 2 + 2 * 50257 * 12288 / 2        # GPT-3's layers and embeddings over TP 2
    microbatches = 512 / 256
    grads = 4.0 * stage_params                                            # fp32 main gradients (the 2022 stack)
    traffic = microbatches * 2 * 3 / 4 * 2 * stage_params + 3 / 4 * grads + 2 * 63 / 64 * grads / 4
    assert one["dp_traffic_bytes"] == pytest.approx(traffic, rel=1e-9)
    # sharded over 4 ranks, not 256: more memory; its gathers stay on the node's NVLink
    states = {z: memory.model_state_bytes(stage_params, ranks, code("zero", z)) for z, ranks in (("hsdp", 4),
                                                                                                 ("fsdp", 256))}
    assert one["memory_per_device_bytes"] - whole["memory_per_device_bytes"] == \
        pytest.approx(float(states["hsdp"] - states["fsdp"]), rel=1e-9)
    assert one["dp_comm_s"] < whole["dp_comm_s"]


def test_hybrid_sharding_inside_one_node_is_fsdp(gpt3, h100):
    """With the whole DP group on one node the replicate group has one rank: nothing crosses, and
    hybrid sharding costs and holds what FULL_SHARD does."""
    ctx = StepContext(gpt3, h100, devices=64, global_batch=64, memory_fraction=1e6)
    one, whole = (_row(Layout(tp=2, pp=8, dp=4, micro_batch=1, zero=z), ctx) for z in ("hsdp", "fsdp"))
    for column in ("step_time_s", "dp_comm_s", "dp_traffic_bytes", "memory_per_device_bytes", "latency_s"):
        assert one[column] == pytest.approx(whole[column], rel=1e-12), column


def test_fsdp2_copies_each_gathered_layer_and_each_gradient_on_the_compute_stream(gpt3, h100, monkeypatch):
    """torch 2.13.0's fully_shard: after each gather the layer is copied out into its
    parameters (bytes read and written), before each reduce-scatter the gradient copied in at
    the reduce dtype (2 bytes read, 4 written), both on the compute stream; ZeRO-3 only."""
    from tasks.model.kernels.roofline import memory_bound_time
    from tasks.model.terms.stack import Stack

    def row(engine: str, zero: str = "zero3") -> dict:
        ctx = StepContext(gpt3, h100, devices=64, global_batch=16, memory_fraction=1e6,
                          stack=Stack(dp_engine=engine, main_grad_bytes=4))
        return _row(Layout(tp=8, pp=1, dp=8, micro_batch=1, zero=zero), ctx)

    stage_params = 96 * 12 * 12288**2 / 8 + 2 * 50257 * 12288 / 8
    copy_out = memory_bound_time(2 * 2.0 * stage_params, h100)        # read and write the 16-bit layer
    copy_in = memory_bound_time((2.0 + 4.0) * stage_params, h100)
    per_microbatch = 2 * copy_out + copy_in                            # two gathers, one reduce-scatter
    fsdp2, megatron = row("pytorch-fsdp2"), row("megatron")
    assert fsdp2["compute_s"] - megatron["compute_s"] == pytest.approx(2 * per_microbatch, rel=1e-9)
    assert fsdp2["step_time_s"] > megatron["step_time_s"]
    assert fsdp2["dp_traffic_bytes"] == megatron["dp_traffic_bytes"]
    for zero in ("fsdp", "hsdp"):                                     # the modes it does not run
        assert row("pytorch-fsdp2", zero) == row("megatron", zero)
    _xla_unbudgeted(monkeypatch)
    for zero in ("none", "zero1"):                                    # a layer a call, not Megatron's buckets
        assert row("pytorch-fsdp2", zero) == row("xla", zero)


def test_xla_runs_every_mode_as_the_protocol_states_it_and_moves_bf16_at_the_maxtext_preset(gpt3, h100,
                                                                                           monkeypatch):
    """XLA's partitioner gathers the cast 16-bit kernel a layer ahead and reduce-scatters the
    16-bit gradient behind the backward, no copies: every mode costs what the protocol says;
    the MaxText preset's 16-bit gradients halve the reduce-scatter's bytes against fp32's, and its
    input projections run as dots apart (MaxText's fused_qkv and fused_mlp off)."""
    from sweeps.config.search import load_stack
    from tasks.model.terms.stack import Stack

    def row(engine: str, zero: str, grad_bytes: float = 4.0) -> dict:
        ctx = StepContext(gpt3, h100, devices=64, global_batch=16, memory_fraction=1e6,
                          stack=Stack(dp_engine=engine, main_grad_bytes=grad_bytes))
        return _row(Layout(tp=1, pp=8, dp=8, micro_batch=1, zero=zero), ctx)

    with monkeypatch.context() as patched:                            # each call behind its whole window
        _xla_unbudgeted(patched)
        for zero in ZERO_MODES:                                       # Megatron buckets plain DP and ZeRO-1
            assert row("xla", zero) == row("megatron" if zero not in ("none", "zero1") else "pytorch-fsdp2",
                                           zero), zero
    maxtext = load_stack("maxtext-xla-2025", h100)
    assert (maxtext.dp_engine, maxtext.main_grad_bytes, maxtext.attention, maxtext.projections) == \
        ("xla", 2.0, "flash", "separate")
    bf16, fp32 = row("xla", "zero3", 2.0), row("xla", "zero3", 4.0)
    # two 16-bit gathers and one reduce-scatter of the same weights: 2 + 2 + 2 bytes against 2 + 2 + 4
    assert fp32["dp_traffic_bytes"] / bf16["dp_traffic_bytes"] == pytest.approx(8.0 / 6.0, rel=1e-9)
    assert fp32["step_time_s"] >= bf16["step_time_s"]


def test_xla_hides_each_call_behind_about_five_kernels_so_a_slow_cross_node_reduction_waits(monkeypatch):
    """XLA's approximate latency estimator budgets an async collective 5,000 units and a GEMM,
    custom call or loop fusion 1,000, so each call hides behind about five kernels: Llama 2 7B's
    per-layer gradient all-reduce across four A3 nodes (TCP at half the NICs' line rate) lasts
    longer than five of its backward's kernels, and the step waits for each call's excess,
    where an engine hiding every call behind the whole backward waits for none of it."""
    from tasks.model.step.context import as_layouts
    from tasks.model.step.plan import step_plan
    from tasks.model.terms.metrics import overlapped_communication
    from tasks.model.terms.stack import Stack

    model, a3 = load_preset("model", "llama2-7b"), load_preset("hardware", "h100-a3-high")
    ctx = StepContext(model, a3, devices=32, global_batch=128, memory_fraction=1e6,
                      stack=Stack(dp_engine="xla", main_grad_bytes=2.0))
    layout = Layout(tp=1, pp=1, dp=32, micro_batch=4, zero="none")   # one all-reduce a layer, once a step

    def plan():
        return step_plan(as_layouts(layout.columns(), np.asarray([32.0]), ctx), ctx)

    budgeted = plan()
    with monkeypatch.context() as patched:
        _xla_unbudgeted(patched)
        whole = plan()
    compute = budgeted.compute
    cap = 5.0 * (compute["per_microbatch"] - compute["forward"]) / compute["backward_kernels"]
    calls = model.layers + 1                                          # a layer a call, and the embedding's
    beyond = overlapped_communication(budgeted.dp["total"], ctx.dp_slowdown) - calls * cap
    assert float(beyond[0]) > 0.0
    assert float(budgeted.dp["per_step"][0]) == pytest.approx(max(float(whole.dp["per_step"][0]), float(beyond[0])),
                                                              rel=1e-9)
    assert float(budgeted.dp["per_step"][0]) > 2.0 * float(whole.dp["per_step"][0])
    assert float(budgeted.step_time[0]) > float(whole.step_time[0])
