"""The whole-step model against hand-computed cases: memory (method.md §8), TP and DP
traffic, the pipeline bubble, and infeasible layouts as results."""

from __future__ import annotations

import numpy as np
import pytest

from tasks.model.kernels import layer
from tasks.model.step import memory
from tasks.model.kernels.layer import Block
from tasks.model.terms.stack import Stack
from tasks.model.terms.layout import RECOMPUTE_MODES, ZERO_MODES, Layout, family
from tasks.model.search.space import LayoutSpace, best_index, enumerate_layouts, exhaustive
from tasks.model.collectives.nccl import tier_time
from tasks.model.step.plan import STATUS_CODES, StepContext, reasons, step_columns

Z = {name: i for i, name in enumerate(ZERO_MODES)}
R = {name: i for i, name in enumerate(RECOMPUTE_MODES)}


def _one(layout: Layout, ctx: StepContext) -> dict:
    return {name: values[0] for name, values in step_columns(layout.columns(), ctx).items()}


def test_model_states_follow_zero_sharding():
    params, dp = 1e9, 8
    got = {name: float(memory.model_state_bytes(params, dp, Z[name])) for name in ZERO_MODES}
    assert got == pytest.approx({"none": 16e9, "zero1": (2 + 2 + 12 / 8) * 1e9, "zero3": 16e9 / 8,
                                 "fsdp": (2 / 8 + 2 + 12 / 8) * 1e9, "hsdp": (2 / 8 + 2 + 12 / 8) * 1e9})


def test_fsdp_at_one_micro_batch_keeps_only_its_gradient_shard(gpt3, h100):
    """PyTorch FSDP keeps a unit's whole gradient only under no_sync (torch 2.13.0
    _runtime_utils.py: a synchronised backward reduce-scatters it and sets flat_param.grad to
    None): at one micro-batch per step FSDP and hybrid FSDP hold 2/DP bytes of gradient per
    parameter as ZeRO-3 does, at two the whole 2 bytes; ZeRO-1 (Megatron's contiguous buffer)
    keeps it whole either way."""
    for mode in ("fsdp", "hsdp"):
        assert float(memory.model_state_bytes(1e9, 8, Z[mode], microbatches=1)) == pytest.approx(16e9 / 8)
        assert float(memory.model_state_bytes(1e9, 8, Z[mode], microbatches=2)) == \
            pytest.approx(float(memory.model_state_bytes(1e9, 8, Z[mode])))
    assert float(memory.model_state_bytes(1e9, 8, Z["zero1"], microbatches=1)) == pytest.approx((4 + 12 / 8) * 1e9)
    ctx = StepContext(gpt3, h100, devices=64, global_batch=8, memory_fraction=1e6)
    one = _one(Layout(tp=8, pp=1, dp=8, micro_batch=1, zero="fsdp"), ctx)
    zero3 = _one(Layout(tp=8, pp=1, dp=8, micro_batch=1, zero="zero3"), ctx)
    assert one["memory_per_device_bytes"] == pytest.approx(zero3["memory_per_device_bytes"], rel=1e-12)


@pytest.mark.parametrize("sp, recompute, expected", [
    (False, "none", 2048 * 12288 * (10 + 24 / 8 + 5 * 96 * 2048 / (12288 * 8))),
    (True, "none", 2048 * 12288 / 8 * (34 + 5 * 96 * 2048 / 12288)),
    (False, "selective", 2048 * 12288 * (10 + 24 / 8)),
    (True, "selective", 2048 * 12288 * 34 / 8),
    (False, "full", 2 * 2048 * 12288),
    (True, "full", 2 * 2048 * 12288 / 8),
])
def test_activations_match_korthikanti_table_2(sp, recompute, expected):
    got = memory.layer_activation_bytes(2048, 1, 12288, 96, 8, sp, R[recompute])
    assert float(got) == pytest.approx(expected)


def test_activations_without_parallelism_are_34_plus_5as_over_h():
    for sp in (False, True):
        assert float(memory.layer_activation_bytes(1024, 2, 4096, 32, 1, sp, 0)) == pytest.approx(
            1024 * 2 * 4096 * (34 + 5 * 32 * 1024 / 4096))


@pytest.mark.parametrize("flash, saved", [(False, 1 + 1 + 1 + 4), (True, 1 + 1 - 1 + 4)])
def test_fp8_linear_inputs_are_kept_in_one_byte(flash, saved):
    # Transformer Engine keeps the QKV, FC1, FC2 and projection inputs as fp8 copies; fused
    # attention keeps its 16-bit output besides, so the projection's copy adds a byte there.
    args = (2048, 1, 12288, 96, 1, False, R["none"], Block(flash=flash))
    bf16 = memory.layer_activation_bytes(*args)
    fp8 = memory.layer_activation_bytes(*args, fp8_inputs=True)
    assert float(bf16 - fp8) == pytest.approx(2048 * 12288 * saved)
    full = (2048, 1, 12288, 96, 8, True, R["full"], Block(flash=flash))
    assert memory.layer_activation_bytes(*full, fp8_inputs=True) == memory.layer_activation_bytes(*full)


def test_an_fp8_stack_keeps_fp8_weights_and_smaller_activations(gpt3, h100):
    lay = Layout(tp=8, pp=1, dp=1, micro_batch=1, sequence_parallel=True)
    memories = [_one(lay, StepContext(gpt3, h100, devices=8, global_batch=1, memory_fraction=1.0,
                                      stack=Stack(attention="flash", gemm_precision=p)))["memory_per_device_bytes"]
                for p in ("bf16", "fp8")]
    args = (2048, 1, 12288, 96, 8, True, R["none"], Block(flash=True, ffn=4 * 12288.0))
    activations = 96 * (memory.layer_activation_bytes(*args) - memory.layer_activation_bytes(*args, fp8_inputs=True))
    weights = memory.FP8_WEIGHT_BYTES * 96 * layer.layer_params(12288.0, 96.0) / 8
    assert memories[1] - memories[0] == pytest.approx(weights - float(activations))


@pytest.mark.parametrize("zero, copies_per_device", [("zero1", 1.0), ("zero3", 1 / 8), ("fsdp", 1 / 8)])
def test_fp8_weight_copies_are_sharded_as_the_weights_are(gpt3, h100, zero, copies_per_device):
    # Under ZeRO-3 and FSDP a device holds its shard of the weights between gathers, and of
    # their fp8 copies; a whole fp8 copy of every weight on each device was 1 byte/parameter.
    lay = Layout(tp=1, pp=1, dp=8, micro_batch=1, zero=zero, recompute="full")
    memories = [_one(lay, StepContext(gpt3, h100, devices=8, global_batch=8, memory_fraction=1.0,
                                      stack=Stack(attention="flash", gemm_precision=p)))["memory_per_device_bytes"]
                for p in ("bf16", "fp8")]
    copies = memory.FP8_WEIGHT_BYTES * 96 * layer.layer_params(12288.0, 96.0) * copies_per_device
    assert memories[1] - memories[0] == pytest.approx(copies)   # full recomputation: the same activations


def test_device_memory_of_a_plain_replica_is_states_plus_activations_plus_logits(gpt3, h100):
    ctx = StepContext(gpt3, h100, devices=8, global_batch=8, memory_fraction=1.0)
    row = _one(Layout(tp=8, pp=1, dp=1, micro_batch=1, recompute="full", sequence_parallel=True), ctx)
    params = (96 * 12 * 12288**2 + 2 * 50257 * 12288) / 8
    expected = 16 * params + 96 * 2 * 2048 * 12288 / 8 + 4 * 2048 * 50257 / 8
    assert row["memory_per_device_bytes"] == pytest.approx(expected)
    assert row["status_code"] == STATUS_CODES.index("fits_memory")  # 350 GB of states on 80 GB
    (reason,) = reasons({k: np.asarray([v]) for k, v in row.items()}, ctx)
    assert reason.startswith("memory: needs") and "80 GiB" in reason


@pytest.mark.parametrize("tp, blocks", [(1, 1), (1, 24), (8, 70)])
def test_full_recomputation_of_n_layers_of_a_stage_costs_n_over_l_of_full_recomputation(gpt3, h100, tp, blocks):
    # One stage of 96 layers, one micro-batch: the step's compute, the TP collectives its
    # recomputed forwards repeat, and the memory it keeps are linear in the layers recomputed
    # (Megatron-LM's --recompute-method block).
    ctx = StepContext(gpt3, h100, devices=tp, global_batch=1, memory_fraction=1e6)
    none, full = (_one(Layout(tp=tp, pp=1, dp=1, micro_batch=1, recompute=r), ctx) for r in ("none", "full"))
    some = _one(Layout(tp=tp, pp=1, dp=1, micro_batch=1, recompute="full", recompute_layers=blocks), ctx)
    share = blocks / 96
    for name in ("step_time_s", "tp_exposed_s", "memory_per_device_bytes"):
        assert some[name] == pytest.approx(none[name] + share * (full[name] - none[name]), rel=1e-9), name
    assert none["step_time_s"] < some["step_time_s"] < full["step_time_s"]
    assert (tp > 1) == (full["tp_exposed_s"] > none["tp_exposed_s"])
    everything = _one(Layout(tp=tp, pp=1, dp=1, micro_batch=1, recompute="full", recompute_layers=96), ctx)
    assert everything["step_time_s"] == pytest.approx(full["step_time_s"], rel=1e-12)


def test_a_layer_of_a_partly_recomputed_stage_charges_the_mean_of_its_layers(gpt3, h100):
    from tasks.model.step.parts import layer_collectives, layer_pass_times
    ctx = StepContext(gpt3, h100, devices=8, global_batch=1, memory_fraction=1e6)
    layouts = {n: Layout(tp=8, pp=1, dp=1, micro_batch=1, recompute=r, recompute_layers=n)
               for n, r in ((0, "none"), (24, "full"), (96, "full"))}
    counts = {n: [c.count for c in layer_collectives(lay, ctx)] for n, lay in layouts.items()}
    assert counts == {0: [4.0], 24: [4.5], 96: [6.0]}
    backward = {n: layer_pass_times(lay, ctx)["backward_s"] for n, lay in layouts.items()}
    assert backward[24] == pytest.approx(backward[0] + (backward[96] - backward[0]) / 4)


def test_a_winners_dp_collectives_carry_the_widths_the_step_model_charges(gpt3, h100):
    from tasks.model.step.parts import layer_collectives
    values = 12 * 12288**2 / 8                                       # one layer's weights per TP rank
    for stack, grads in ((Stack(), 4.0), (Stack(main_grad_bytes=2.0), 2.0)):
        ctx = StepContext(gpt3, h100, devices=64, global_batch=8, memory_fraction=1e6, stack=stack)
        sizes = {c.op: c.message_bytes for c in layer_collectives(Layout(tp=8, pp=1, dp=8, micro_batch=1, zero="zero1"),
                                                                  ctx) if c.group == "dp"}
        assert sizes == pytest.approx({"reduce_scatter": grads * values, "all_gather": 2.0 * values})


def test_partial_recomputation_counts_layers_per_model_chunk_and_is_a_full_recomputation_setting():
    from tasks.model.step.context import recomputed_share
    full, none = R["full"], R["none"]
    got = recomputed_share(np.asarray([full, full, full, none]), np.asarray([0, 5, 40, 5]), np.asarray(32.0))
    assert got.tolist() == pytest.approx([1.0, 5 / 32, 1.0, 0.0])
    assert recomputed_share(np.asarray([full, R["selective"]]), None, 8.0).tolist() == [1.0, 0.0]
    assert Layout(tp=1, pp=4, dp=1, micro_batch=1, recompute="full", recompute_layers=5).describe().endswith("full(5)")
    for bad in ({"recompute": "selective", "recompute_layers": 5}, {"recompute": "full", "recompute_layers": -1}):
        with pytest.raises(ValueError, match="recompute_layers"):
            Layout(tp=1, pp=1, dp=1, micro_batch=1, **bad)


@pytest.mark.parametrize("pp, m", [(2, 4), (4, 8), (8, 8), (4, 32)])
def test_1f1b_bubble_is_p_minus_1_over_m_plus_p_minus_1(gpt3, h100, pp, m):
    ctx = StepContext(gpt3, h100, devices=8 * pp, global_batch=m, memory_fraction=1e6)
    row = _one(Layout(tp=8, pp=pp, dp=1, micro_batch=1), ctx)
    assert row["microbatches"] == m
    assert row["bubble_fraction"] == pytest.approx((pp - 1) / (m + pp - 1))


def test_interleaving_divides_the_bubble_by_v(gpt3, h100):
    """Narayanan et al. 2021: bubble / ideal time = (p-1) / (v m)."""
    ctx = StepContext(gpt3, h100, devices=32, global_batch=8, memory_fraction=1e6)
    row = _one(Layout(tp=8, pp=4, dp=1, micro_batch=1, schedule="interleaved", virtual_stages=3), ctx)
    bubble = row["bubble_fraction"]
    assert bubble / (1 - bubble) == pytest.approx((4 - 1) / (3 * 8))


def test_dp_traffic_reduces_gradients_at_the_buffer_width_and_gathers_weights_at_theirs(gpt3, h100):
    """Gradients are reduced in the fp32 buffer a bf16 run accumulates them in, weights gathered
    in 16 bits: ZeRO-3 then moves as much as plain DP (one micro-batch), ZeRO-1 three quarters;
    with 16-bit gradients (an fp16 run), ZeRO-3 moves 1.5 times plain DP and ZeRO-1 as much."""
    params = 96 * 12 * 12288**2 / 8 + 2 * 50257 * 12288 / 8
    ring = 7 / 8                                                    # (n-1)/n of the bytes, n = 8

    def traffic(stack: Stack, global_batch: int = 8) -> dict:      # 8: one micro-batch per replica
        ctx = StepContext(gpt3, h100, devices=64, global_batch=global_batch, memory_fraction=1e6, stack=stack)
        return {z: _one(Layout(tp=8, pp=1, dp=8, micro_batch=1, zero=z), ctx)["dp_traffic_bytes"] for z in ZERO_MODES}

    fp32 = traffic(Stack())
    assert fp32["none"] == pytest.approx(2 * ring * 4 * params)    # all-reduce of 4-byte gradients
    assert fp32["zero1"] == pytest.approx(ring * (4 + 2) * params)  # reduce-scatter them, all-gather 2-byte weights
    assert fp32["zero3"] == pytest.approx(ring * (2 * 2 + 4) * params) == pytest.approx(fp32["none"])
    assert fp32["fsdp"] == pytest.approx(fp32["zero3"])
    assert traffic(Stack(), global_batch=32)["zero3"] == pytest.approx(4 * fp32["zero3"])  # per micro-batch
    fp16 = traffic(Stack(main_grad_bytes=2.0))
    assert fp16["none"] == pytest.approx(2 * ring * 2 * params)
    assert fp16["zero3"] == pytest.approx(1.5 * fp16["none"]) and fp16["zero1"] == pytest.approx(fp16["none"])


def test_tp_time_is_the_collective_model_and_sequence_parallelism_splits_each_all_reduce(gpt3, h100):
    ctx = StepContext(gpt3, h100, devices=8, global_batch=1, memory_fraction=1e6)
    message = 2 * 2048 * 1 * 12288
    ring = float(tier_time("all_reduce", 8, message, False, h100))
    split = float(tier_time("reduce_scatter", 8, message, False, h100) + tier_time("all_gather", 8, message, False,
                                                                                    h100))
    plain = _one(Layout(tp=8, pp=1, dp=1, micro_batch=1), ctx)
    assert plain["tp_comm_s"] == pytest.approx((4 * 96 + 1) * ring)
    assert _one(Layout(tp=8, pp=1, dp=1, micro_batch=1, sequence_parallel=True), ctx)["tp_comm_s"] == pytest.approx(
        (4 * 96 + 1) * split)
    full = _one(Layout(tp=8, pp=1, dp=1, micro_batch=1, recompute="full"), ctx)
    assert full["tp_comm_s"] == pytest.approx((6 * 96 + 1) * ring)
    assert full["compute_s"] > plain["compute_s"]


def test_a_group_wider_than_a_node_uses_the_scale_out_tier(gpt3, h100):
    """TP 16 over two nodes of 8: its rings cross the network through each node's 8 NICs
    (Megatron numbers TP fastest, so a node's GPUs are all in the group), slower than TP 8
    inside a node, faster than through one NIC."""
    from tasks.model.collectives.nccl import tier_time
    from tasks.model.kernels.layer import tp_allreduce_bytes
    ctx = StepContext(gpt3, h100, devices=16, global_batch=1, memory_fraction=1e6)
    inside = _one(Layout(tp=8, pp=1, dp=1, micro_batch=1), StepContext(gpt3, h100, 8, 1, memory_fraction=1e6))
    across = _one(Layout(tp=16, pp=1, dp=1, micro_batch=1), ctx)
    message = tp_allreduce_bytes(12288.0, 2048.0, 1.0, 2.0)
    collectives = across["tp_comm_s"] / tier_time("all_reduce", 16, message, True, h100, local_ranks=8)
    assert collectives == pytest.approx(4 * 96 + 1)                   # four a layer, one for the embedding
    assert across["tp_comm_s"] > inside["tp_comm_s"]
    assert tier_time("all_reduce", 16, message, True, h100, local_ranks=1) > \
        2 * tier_time("all_reduce", 16, message, True, h100, local_ranks=8)


def test_tp_overlap_stays_inside_a_node(gpt3, h100):
    """Transformer Engine's userbuffers build the TP group from one node's NVLink GPUs: a
    stack that overlaps TP hides TP 8's collectives, not TP 16's across two nodes."""
    from tasks.model.terms.stack import Stack
    overlapping = Stack(attention="flash", tp_overlap=True)
    for tp, devices, hidden in ((8, 8, True), (16, 16, False)):
        def row(stack):
            ctx = StepContext(gpt3, h100, devices=devices, global_batch=1, memory_fraction=1e6, stack=stack)
            return _one(Layout(tp=tp, pp=1, dp=1, micro_batch=1, sequence_parallel=True), ctx)
        on, off = row(overlapping), row(Stack(attention="flash"))
        assert bool(on["exposed_comm_s"] < 0.5 * off["exposed_comm_s"]) is hidden
        if not hidden:
            assert on["exposed_comm_s"] == pytest.approx(off["exposed_comm_s"])


def test_step_metrics_are_consistent(gpt3, h100):
    ctx = StepContext(gpt3, h100, devices=512, global_batch=1536)
    row = _one(Layout(tp=8, pp=8, dp=8, micro_batch=1, zero="zero1", sequence_parallel=True, recompute="selective"),
               ctx)
    assert row["status_code"] == 0
    assert row["exposed_comm_share"] == pytest.approx(row["exposed_comm_s"] / row["step_time_s"])
    assert row["tokens_per_s_per_device"] == pytest.approx(1536 * 2048 / row["step_time_s"] / 512)
    assert 0 < row["latency_s"] < row["step_time_s"]
    assert row["step_time_s"] >= row["compute_s"]


def test_structurally_infeasible_layouts_are_rows_with_reasons(gpt3, h100):
    ctx = StepContext(gpt3, h100, devices=64, global_batch=64)
    layouts = [Layout(tp=5, pp=1, dp=1, micro_batch=1), Layout(tp=8, pp=3, dp=1, micro_batch=1),
               Layout(tp=8, pp=1, dp=8, micro_batch=3), Layout(tp=8, pp=1, dp=8, micro_batch=1, schedule="interleaved",
                                                               virtual_stages=2)]
    columns = {k: np.concatenate([lay.columns()[k] for lay in layouts]) for k in layouts[0].columns()}
    result = step_columns(columns, ctx)
    assert [STATUS_CODES[c] for c in result["status_code"]] == [
        "tp_divides_heads", "tp_pp_divides_devices", "batch_divisible", "schedule_fits"]
    assert np.isnan(result["step_time_s"]).all()
    assert all(r and ":" in r for r in reasons(result, ctx))


def test_a_layout_costs_the_same_beside_infeasible_ones_and_those_cost_nothing(gpt3, h100):
    """Only the layouts that break no structural constraint are costed: a feasible one gets
    the figures it gets alone, the others NaN (memory too), and every row its micro-batches."""
    ctx = StepContext(gpt3, h100, devices=64, global_batch=64)
    good, bad = Layout(tp=8, pp=1, dp=8, micro_batch=1), Layout(tp=5, pp=1, dp=1, micro_batch=1)
    mixed = step_columns({k: np.concatenate([bad.columns()[k], good.columns()[k]]) for k in good.columns()}, ctx)
    alone = step_columns(good.columns(), ctx)
    for name, values in alone.items():
        np.testing.assert_array_equal(mixed[name][1:], values, err_msg=name)
    assert np.isnan(mixed["step_time_s"][0]) and np.isnan(mixed["memory_per_device_bytes"][0])
    assert mixed["microbatches"][0] == 64 // 12 and mixed["status_code"][0] == STATUS_CODES.index("tp_divides_heads")
    only_bad = step_columns(bad.columns(), ctx)
    assert np.isnan(only_bad["step_time_s"]).all() and np.isnan(only_bad["memory_per_device_bytes"]).all()


def test_enumeration_covers_the_space_once():
    space = LayoutSpace(tp=[1, 2], pp=[1, 2], micro_batch=[1, 2], virtual_stages=[2, 3])
    layouts = enumerate_layouts(space, devices=8)
    # TP x SP: (1, off), (2, off), (2, on): sequence parallelism is no choice at TP 1
    assert len(layouts["tp"]) == space.size == 3 * 2 * 2 * 3 * len(ZERO_MODES) * 3
    rows = set(zip(*(layouts[k].tolist() for k in ("tp", "pp", "micro_batch", "schedule", "virtual_stages", "zero",
                                                   "sequence_parallel", "recompute")), strict=True))
    assert len(rows) == space.size
    assert set(layouts["dp"].tolist()) == {8, 4, 2}


def test_the_exhaustive_best_is_the_fastest_feasible_layout(gpt3, h100):
    ctx = StepContext(gpt3, h100, devices=256, global_batch=512)
    layouts, costs = exhaustive(LayoutSpace(tp=[4, 8], pp=[4, 8, 16], micro_batch=[1, 2]), ctx)
    best = best_index(costs)
    feasible = costs["step_time_s"][costs["status_code"] == 0]
    assert costs["step_time_s"][best] == feasible.min()


def test_families():
    assert family(1, 1, 64, "fsdp") == family(1, 1, 64, "zero3") == "fsdp"
    assert family(1, 1, 64, "none") == "dp"
    assert family(1, 1, 64, "hsdp") == "hsdp"
    assert family(8, 1, 8, "zero1") == "tp+dp"
    assert family(8, 4, 2, "none") == "tp+pp+dp"
    assert family(8, 4, 1, "none") == "tp+pp"


def test_fp8_weights_drop_the_16_bit_copy_and_gather_in_fp8(gpt3, h100):
    """Megatron-Core's fp8_param_gather: a linear weight is 1 byte, not 2 plus its 1-byte fp8
    copy, and the distributed optimizer gathers it in fp8, half the bytes of a 16-bit gather
    (the embedding stays 16-bit in memory and on the wire)."""
    layout = Layout(tp=8, pp=1, dp=8, micro_batch=1, zero="zero1")

    def row(**stack) -> dict:
        ctx = StepContext(gpt3, h100, devices=64, global_batch=8, memory_fraction=1e6,
                          stack=Stack(gemm_precision="fp8", **stack))
        return _one(layout, ctx)

    copy, fp8 = row(), row(fp8_params=True)
    linear = 96 * layer.layer_params(12288, 96, Block()) / 8
    assert copy["memory_per_device_bytes"] - fp8["memory_per_device_bytes"] == pytest.approx(2.0 * linear)
    ring = 7 / 8
    assert copy["dp_traffic_bytes"] - fp8["dp_traffic_bytes"] == pytest.approx(ring * 1.0 * linear)
    with pytest.raises(ValueError, match="fp8_params=true needs stack.gemm_precision=fp8"):
        Stack(fp8_params=True)


def test_offloaded_layers_leave_one_in_transit_and_only_without_a_pipeline(gpt3, h100):
    assert memory.resident_layers(80, 1, 40) == 41          # 40 on the device, one being reloaded
    assert memory.resident_layers(80, 1, 0) == 80
    assert memory.resident_layers(10, 2, 4) == 10           # Megatron-Core offloads with PP 1 only
    assert memory.resident_layers(8, 1, 100) == 2           # at most all but the last layer go
    ctx = {n: StepContext(gpt3, h100, devices=8, global_batch=8, memory_fraction=1e6, stack=Stack(offload_layers=n))
           for n in (0, 48)}
    one, offloaded = (_one(Layout(tp=8, pp=1, dp=1, micro_batch=1), ctx[n]) for n in (0, 48))
    act = memory.layer_activation_bytes(2048, 1, 12288, 96, 8, False, 0, ctx[0].block)
    assert one["memory_per_device_bytes"] - offloaded["memory_per_device_bytes"] == pytest.approx(47 * act)
    assert one["step_time_s"] == offloaded["step_time_s"]   # the copies run behind compute: no time charged
