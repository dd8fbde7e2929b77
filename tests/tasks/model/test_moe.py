"""Mixture of experts with expert parallelism: the layer's router, grouped expert GEMMs and
shared experts; its weights over EP x ETP; the dispatch and combine over the EP group; the
expert grid's structural checks; a dense model untouched."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from tasks.model.collectives.ep_exchange import dispatch_time, ep_layer_exchange, flex_cross_node_share
from tasks.model.kernels import layer
from tasks.model.kernels.model_blocks import (dense_block, layer_weights, mla_problem, model_block, moe_layer_share,
                                              moe_problem)
from tasks.model.step.plan import StepContext, step_columns
from tasks.model.terms.layout import Layout, code
from tasks.model.terms.specs import TransformerModel
from tasks.model.terms.stack import Stack

#: Qwen3-30B-A3B's config.json (Qwen/Qwen3-30B-A3B): 48 layers, H 2,048, 32 heads of 128, 4
#: key/value heads, 128 experts of 768, top-8, vocabulary 151,936.
QWEN3_30B = TransformerModel(name="qwen3-30b-a3b", layers=48, hidden=2048, heads=32, kv_heads=4, head_dim=128,
                             ffn_hidden=6144, vocab=151936, seq_len=4096, gated_mlp=True, dropout=0.0, experts=128,
                             topk=8, moe_ffn_hidden=768)
#: DeepSeek-V3 (deepseek-ai/DeepSeek-V3 config.json): 61 layers, the first 3 dense (18,432),
#: 256 routed experts of 2,048, top-8, one shared expert; MLA taken as 128 heads of 128.
DEEPSEEK_V3 = TransformerModel(name="deepseek-v3", layers=61, hidden=7168, heads=128, head_dim=128, ffn_hidden=18432,
                               vocab=129280, seq_len=4096, gated_mlp=True, dropout=0.0, experts=256, topk=8,
                               moe_ffn_hidden=2048, shared_experts=1, dense_layers=3)
STACK = Stack(attention="flash", gemm_precision="bf16", cross_entropy="te")


def _forward(block, tp=1.0, ep=1.0, etp=1.0):
    return {g.name: g for g in layer.gemm_shapes(2048.0, 32.0, 4096.0, 1.0, tp, block, ep=ep, etp=etp)
            if g.pass_ == "fwd"}


@pytest.mark.parametrize("tp,ep,etp", [(1, 1, 1), (1, 8, 1), (2, 16, 1), (2, 8, 2), (4, 32, 4)])
def test_the_experts_flops_on_a_device_are_its_share_of_every_tokens_topk_experts(tp, ep, etp):
    """Whatever EP and ETP, a device's expert GEMMs do 1/TP of the layer's tokens x topk x the
    expert MLP's FLOPs (the balance spreads the routed rows evenly)."""
    block = model_block(QWEN3_30B, flash=True)
    gemms = _forward(block, tp, ep, etp)
    experts = gemms["expert_fc1"].flops + gemms["expert_fc2"].flops
    whole = 2.0 * 4096 * 8 * 3 * 2048 * 768 / tp
    assert experts == pytest.approx(whole)
    assert gemms["expert_fc1"].batch == 128 / ep and "fc1" not in gemms


def test_a_moe_layers_weights_are_its_split_part_and_its_experts():
    block = model_block(DEEPSEEK_V3)
    experts = layer.expert_params(7168.0, block)
    assert experts == 256 * 3 * 7168 * 2048
    shared = 3 * 7168 * 2048
    attention = float(layer.layer_params(7168.0, 128.0, dense_block(DEEPSEEK_V3))) - 3 * 7168 * 18432
    assert float(layer.layer_params(7168.0, 128.0, block)) == pytest.approx(attention + shared + 7168 * 256)
    assert sum(sum(t) for t in layer.layer_tensors(7168.0, 128.0, block)[:1]) == \
        pytest.approx(float(layer.layer_params(7168.0, 128.0, block)))
    assert moe_layer_share(DEEPSEEK_V3) == pytest.approx(58 / 61)
    total = layer_weights(DEEPSEEK_V3) + 129280 * 7168
    assert 650e9 < total < 720e9          # 671B with MLA's smaller attention, as the model card counts


def test_the_moe_fields_refuse_what_cannot_be_a_mixture_of_experts():
    assert moe_problem(QWEN3_30B) is None and moe_problem(TransformerModel(name="d", layers=2, hidden=8, heads=2)) \
        is None
    assert moe_problem(dataclasses.replace(QWEN3_30B, topk=0))[0] == "model.topk"
    assert moe_problem(dataclasses.replace(QWEN3_30B, topk=129))[0] == "model.topk"
    assert moe_problem(dataclasses.replace(QWEN3_30B, dense_layers=48))[0] == "model.dense_layers"
    assert moe_problem(dataclasses.replace(QWEN3_30B, experts=0))[0] == "model.topk"


def test_flex_sends_a_token_once_per_node_so_fewer_cross_node_bytes():
    assert flex_cross_node_share(1, 8) == pytest.approx(1.0)
    assert flex_cross_node_share(8, 1) == pytest.approx(1.0)
    assert flex_cross_node_share(8, 8) == pytest.approx(8 * (1 - (7 / 8) ** 8) / 8)


def test_the_flex_dispatcher_is_faster_across_nodes_and_the_same_inside_one(h100):
    message = 4096 * 8 * 7168 * 2.0
    inside = [float(dispatch_time(8.0, message, False, 8.0, h100, flex=f, topk=8.0)) for f in (False, True)]
    across = [float(dispatch_time(64.0, message, True, 8.0, h100, flex=f, topk=8.0)) for f in (False, True)]
    assert inside[0] == inside[1]
    assert across[1] < 0.8 * across[0]


def test_overlap_hides_the_exchange_behind_the_other_pass_as_far_as_it_lasts(h100):
    args = dict(flex=False, topk=8.0, repeats=0.0, crosses=True, local=8.0)
    plain = ep_layer_exchange(16.0, 1.0, 1e8, h100, overlap=False, hide_fwd=0.0, hide_bwd=0.0, **args)
    hidden = ep_layer_exchange(16.0, 1.0, 1e8, h100, overlap=True, hide_fwd=1.0, hide_bwd=1.0, **args)
    half = ep_layer_exchange(16.0, 1.0, 1e8, h100, overlap=True, hide_fwd=0.0, hide_bwd=1.0, **args)
    assert float(plain["exposed"]) == pytest.approx(float(plain["total"])) and float(plain["total"]) > 0
    assert float(hidden["exposed"]) == 0.0
    assert float(half["exposed"]) == pytest.approx(float(plain["total"]) / 2)
    none = ep_layer_exchange(1.0, 1.0, 1e8, h100, overlap=False, hide_fwd=0.0, hide_bwd=0.0, **args)
    assert float(none["total"]) == 0.0 and float(none["latency"]) == 0.0


def _step(model, layouts, devices, hw, stack=STACK, batch=256):
    ctx = StepContext(model=model, hardware=hw, devices=devices, global_batch=batch, stack=stack,
                      memory_fraction=float("inf"))
    rows = [lay.columns() for lay in layouts]
    cols = {k: np.concatenate([r[k] for r in rows]) for k in rows[0]}
    return step_columns(cols, ctx)


def test_expert_parallelism_shrinks_weights_and_adds_a_priced_exchange(h100):
    lays = [Layout(tp=1, pp=1, dp=16, micro_batch=1, zero="zero1", ep=ep) for ep in (1, 8, 16)]
    out = _step(QWEN3_30B, lays, 16, h100)
    assert (out["status_code"] == 0).all()
    assert out["params_per_device"][0] > out["params_per_device"][1] > out["params_per_device"][2]
    assert out["ep_comm_s"][0] == 0.0 and 0.0 < out["ep_comm_s"][1] < out["ep_comm_s"][2]
    assert out["ep_exposed_s"][2] == pytest.approx(out["ep_comm_s"][2])
    overlapped = _step(QWEN3_30B, lays[2:], 16, h100, dataclasses.replace(STACK, moe_a2a_overlap=True))
    flex = _step(QWEN3_30B, [dataclasses.replace(lays[2], dispatcher="flex")], 16, h100)
    assert flex["ep_comm_s"][0] < out["ep_comm_s"][2]     # 16 ranks over two nodes
    assert overlapped["ep_exposed_s"][0] < out["ep_exposed_s"][2]
    assert overlapped["step_time_s"][0] < out["step_time_s"][2]


def test_the_expert_grid_is_checked_before_any_cost(h100):
    bad = {"experts % EP": Layout(tp=1, pp=1, dp=16, micro_batch=1, ep=3),
           "ETP x EP beyond TP x CP x DP": Layout(tp=1, pp=2, dp=8, micro_batch=1, ep=16),
           "TP without SP": Layout(tp=2, pp=1, dp=8, micro_batch=1, ep=8)}
    out = _step(QWEN3_30B, list(bad.values()), 16, h100)
    assert list(out["status_code"]) == [7, 7, 7]
    dense = dataclasses.replace(QWEN3_30B, experts=0, topk=0, moe_ffn_hidden=None)
    assert list(_step(dense, [Layout(tp=1, pp=1, dp=16, micro_batch=1, ep=2)], 16, h100)["status_code"]) == [7]


def test_a_dense_model_prices_as_it_did_with_ep_columns_absent_or_one(h100):
    dense = dataclasses.replace(QWEN3_30B, experts=0, topk=0, moe_ffn_hidden=None)
    lay = Layout(tp=2, pp=2, dp=4, micro_batch=1, sequence_parallel=True)
    with_ep = _step(dense, [lay], 16, h100)
    cols = {k: v for k, v in lay.columns().items() if k not in ("ep", "etp")}
    ctx = StepContext(model=dense, hardware=h100, devices=16, global_batch=256, stack=STACK,
                      memory_fraction=float("inf"))
    without = step_columns(cols, ctx)
    for name in ("step_time_s", "memory_per_device_bytes", "latency_s"):
        assert with_ep[name][0] == without[name][0]
    assert with_ep["ep_comm_s"][0] == 0.0


def test_dense_layers_make_the_mean_layer_between_dense_and_moe(h100):
    lay = [Layout(tp=1, pp=1, dp=64, micro_batch=1, ep=64, zero="zero1")]
    all_moe = _step(dataclasses.replace(DEEPSEEK_V3, dense_layers=0), lay, 64, h100)
    mixed = _step(DEEPSEEK_V3, lay, 64, h100)
    assert mixed["ep_comm_s"][0] == pytest.approx(all_moe["ep_comm_s"][0] * 58 / 61)
    assert mixed["params_per_device"][0] != all_moe["params_per_device"][0]
    assert code("recompute", "none") == 0


def test_a_moe_layer_launches_megatron_cores_kernels_one_expert_gemm_each():
    """Megatron-Core's grouped linear launches one GEMM per local expert: the alltoall
    dispatcher's forward is 30 + 2L kernels and its backward 19 + 4L, flex's 43 + 2L and 32 + 4L,
    a shared expert 4 and 6 more (kernels.moe_kernels, read from core_v0.15.3)."""
    from tasks.model.kernels.moe_kernels import moe_mlp_kernels
    fwd, bwd = moe_mlp_kernels(np.asarray([128.0, 8.0]), np.asarray([False, True]), shared=False)
    assert list(fwd) == [30 + 2 * 128, 43 + 2 * 8] and list(bwd) == [19 + 4 * 128, 32 + 4 * 8]
    assert [float(x) for x in moe_mlp_kernels(16.0, False, shared=True)] == [30 + 32 + 4, 19 + 64 + 6]


def test_fp8_casts_every_routed_row_a_device_holds_whatever_the_ep(h100):
    """Under fp8 Transformer Engine's grouped linear casts the inputs (and, backward, the output
    gradients) of all of a device's local experts: tokens/TP x topk rows, however EP spreads
    the experts. So the casts' time does not depend on EP, and it is the rows' bytes at
    ``FP8_CAST_TRANSPOSE_BYTES`` each (before step-40 one expert's rows were counted)."""
    from tasks.model.kernels import roofline
    from tasks.model.kernels.layer_cost import FP8_CAST_TRANSPOSE_BYTES, layer_cost

    block = model_block(QWEN3_30B, flash=True)
    fp8 = dataclasses.replace(STACK, gemm_precision="fp8")

    def casts(ep):
        def elementwise(stack):
            cost = layer_cost(2048.0, 32.0, 4096.0, 1.0, 1.0, h100, block=block, stack=stack, ep=ep)
            return float(cost.elementwise_fwd), float(cost.elementwise_bwd)
        (f8, b8), (f16, b16) = elementwise(fp8), elementwise(STACK)
        return f8 - f16, b8 - b16

    assert casts(8.0) == pytest.approx(casts(1.0)) and casts(32.0) == pytest.approx(casts(1.0))
    rows = 4096 * 8
    fc1_input = roofline.memory_bound_time(FP8_CAST_TRANSPOSE_BYTES * rows * 2048, h100)
    assert casts(8.0)[0] > fc1_input


def test_the_host_paces_a_small_moe_layer_and_more_ep_launches_fewer_kernels(h100):
    """Qwen3-30B-A3B's layers are small: with 128 / EP expert GEMMs each, an eager step is the
    host's (53 us a kernel), and splitting the experts over more ranks shortens it; replayed
    from CUDA graphs (host_launch_us 0) the device's time is the step's."""
    lays = [Layout(tp=1, pp=1, dp=16, micro_batch=1, zero="zero1", ep=ep) for ep in (2, 16)]
    eager = _step(QWEN3_30B, lays, 16, h100)
    graphs = _step(QWEN3_30B, lays, 16, h100, dataclasses.replace(STACK, host_launch_us=0.0))
    assert eager["compute_s"][0] > 4 * graphs["compute_s"][0] and (eager["compute_s"] > graphs["compute_s"]).all()
    assert eager["compute_s"][1] < eager["compute_s"][0] / 3
    dense_kernels = _step(dataclasses.replace(QWEN3_30B, experts=0, topk=0, moe_ffn_hidden=None),
                          [dataclasses.replace(lays[0], ep=1)], 16, h100)
    assert dense_kernels["latency_s"][0] < eager["latency_s"][0]


def test_latent_attention_counts_deepseek_v3s_projections_and_its_core(h100):
    """DeepSeek-V3's multi-head latent attention (its config.json): the query through a 1,536
    latent, keys and values through a 512 one (plus the 64-wide rotary key), 128 heads whose
    query and key are 192 wide and value 128: 187.1M attention weights a layer, 671B in all."""
    from sweeps.config.specs import complete_model
    model = complete_model(dataclasses.replace(DEEPSEEK_V3, params_b=None, kv_heads=128, kv_lora_rank=512,
                                               q_lora_rank=1536, qk_rope_head_dim=64, v_head_dim=128))
    block = model_block(model, flash=True)
    projections = 7168 * 1536 + 1536 * 128 * 192 + 7168 * (512 + 64) + 512 * 128 * 256 + 128 * 128 * 7168
    assert float(layer.layer_params(7168.0, 128.0, block)) == pytest.approx(projections + 3 * 7168 * 2048
                                                                            + 7168 * 256)
    assert model.params_b == pytest.approx(671, rel=0.01)
    gemms = {g.name: g for g in layer.gemm_shapes(7168.0, 128.0, 4096.0, 1.0, 8.0, block) if g.pass_ == "fwd"}
    assert (gemms["q_down"].n, gemms["kv_down"].n) == (1536, 576)       # whole on every TP rank
    assert (gemms["q_up"].n, gemms["kv_up"].n, gemms["attn_out"].k) == (128 * 192 / 8, 128 * 256 / 8, 128 * 128 / 8)
    assert block.core_width(7168.0, 128.0) == 128 * (192 + 128) / 2
    plain = dataclasses.replace(block, kv_lora=0.0, q_lora=0.0, rope_dim=0.0, v_dim=None)
    assert plain.core_width(7168.0, 128.0) == plain.attention_width(7168.0, 128.0) == 128 * 128
    assert mla_problem(dataclasses.replace(model, head_dim=None))[0] == "model.kv_lora_rank"
    assert mla_problem(dataclasses.replace(model, kv_lora_rank=0))[0] == "model.q_lora_rank"


def test_a_stored_row_reads_back_as_its_layout_with_later_fields_defaulted():
    """``layout_from_row``: a row of an earlier schema (no EP or CP columns, or NaN there)
    reads back with the ``Layout`` defaults; counts stored as floats read as whole numbers."""
    import math

    from tasks.model.terms.layout import LATER_LAYOUT_FIELDS, Layout, layout_from_row

    full = Layout(tp=4, pp=2, dp=8, micro_batch=2, zero="zero1", sequence_parallel=True, ep=8, etp=2,
                  dispatcher="flex", cp=2, cp_comm="a2a")
    stored = {name: float(v) if isinstance(v, int) and not isinstance(v, bool) else v
              for name, v in vars(full).items()}
    assert layout_from_row(stored.get) == full
    earlier = {name: v for name, v in stored.items() if name not in LATER_LAYOUT_FIELDS}
    nan_filled = {**stored, **{name: math.nan for name in ("ep", "etp", "cp")}, "dispatcher": None, "cp_comm": None}
    expected = Layout(tp=4, pp=2, dp=8, micro_batch=2, zero="zero1", sequence_parallel=True)
    assert layout_from_row(earlier.get) == layout_from_row(nan_filled.get) == expected
