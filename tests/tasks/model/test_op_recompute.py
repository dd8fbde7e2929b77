"""The ``op`` recomputation (torchtitan's per-op selective checkpointing): every second linear
product's output and the fused attention's kept, the rest of the forward run again."""

from __future__ import annotations

import pytest

from tasks.model.kernels import op_checkpoint
from tasks.model.kernels.block import Block
from tasks.model.step import memory
from tasks.model.step.compute import stage_layer_cost
from tasks.model.step.parts import _one_layout, layer_pass_times
from tasks.model.step.plan import StepContext, step_columns
from tasks.model.terms.layout import RECOMPUTE_MODES, SEARCHED_RECOMPUTE_MODES, Layout

R = {name: i for i, name in enumerate(RECOMPUTE_MODES)}
LLAMA_8B = Block(kv_heads=8, ffn=14336, gated=True, flash=True, dropout=False)


def test_op_is_a_mode_a_run_can_name_but_no_search_varies_unless_told():
    assert "op" in RECOMPUTE_MODES and "op" not in SEARCHED_RECOMPUTE_MODES
    assert [R[m] for m in ("none", "selective", "full", "dots")] == [0, 1, 2, 3]   # earlier codes kept
    assert Layout(tp=1, pp=1, dp=8, micro_batch=2, zero="zero3", recompute="op").describe() == "tp1 pp1 dp8 b2 zero3 op"


def test_the_products_run_again_are_torchtitans_even_ones():
    """Llama 3 8B's products in torchtitan's order: wq, wk, wv, wo, w1, w3, w2; the policy keeps
    the 1st, 3rd, 5th and 7th, so wk (a sixth of the QKV GEMM under 8 of 32 key-value heads),
    wo and w3 (half of the gated first GEMM) run again."""
    pieces = op_checkpoint.mm_pieces(4096, 32, LLAMA_8B)
    assert [name for name, _ in pieces] == ["qkv", "qkv", "qkv", "attn_out", "fc1", "fc1", "fc2"]
    shares = op_checkpoint.recomputed_shares(4096, 32, LLAMA_8B)
    assert {k: float(v) for k, v in shares.items()} == pytest.approx({"qkv": 1 / 6, "attn_out": 1.0, "fc1": 0.5})
    # kept: Q (H), V (H/4), the gate (ffn) and the down projection's output (H)
    assert float(op_checkpoint.kept_elements(4096, 32, 8192, 2, 1, LLAMA_8B)) == \
        pytest.approx(8192 * 2 * (4096 + 1024 + 14336 + 4096))


def test_a_materialised_core_and_grouped_experts_run_again_whole():
    plain = Block(flash=False)
    shares = op_checkpoint.recomputed_shares(1024, 16, plain)
    assert shares["scores"] == shares["context"] == 1.0 and shares["fc2"] == 1.0 and "fc1" not in shares
    moe = Block(kv_heads=4, gated=True, flash=True, experts=8, topk=2, moe_ffn=512)
    shares = op_checkpoint.recomputed_shares(1024, 16, moe)
    assert shares["expert_fc1"] == shares["expert_fc2"] == 1.0


def test_op_runs_again_what_the_policy_does_not_keep(llama, h100):
    """The backward pass under ``op`` is the plain one plus the forward's element-wise kernels
    and the recomputed products (not the fused attention, which selective runs again)."""
    ctx = StepContext(llama, h100, devices=1, global_batch=1, memory_fraction=1e6)
    layouts = {r: Layout(tp=1, pp=1, dp=1, micro_batch=1, recompute=r) for r in ("none", "selective", "op", "full")}
    backward = {r: layer_pass_times(lay, ctx)["backward_s"] for r, lay in layouts.items()}
    cost = stage_layer_cost(_one_layout(layouts["op"], ctx), ctx)
    shares = op_checkpoint.recomputed_shares(llama.hidden, llama.heads, ctx.block)
    assert 0.0 < float(shares["fc1"]) <= 0.5
    repeat = float(cost.op_repeat_fwd[0])
    assert repeat > float(cost.elementwise_fwd[0])                                # some products run again
    assert repeat < float((cost.forward - cost.attention_fwd)[0])                  # not all of them
    assert backward["op"] == pytest.approx(backward["none"] + repeat, rel=1e-9)
    assert backward["none"] < backward["op"] < backward["full"]
    columns = {r: step_columns(lay.columns(), ctx) for r, lay in layouts.items()}
    memory_of = {r: columns[r]["memory_per_device_bytes"][0] for r in layouts}
    assert memory_of["full"] < memory_of["op"] < memory_of["none"]


def test_op_keeps_the_input_the_attention_output_and_every_second_products_output():
    sl, b, h, heads, tp = 8192, 2, 4096, 32, 1
    got = memory.layer_activation_bytes(sl, b, h, heads, tp, False, R["op"], LLAMA_8B)
    expected = 2 * sl * b * (h + h) + 2 * float(op_checkpoint.kept_elements(h, heads, sl, b, tp, LLAMA_8B))
    assert float(got) == pytest.approx(expected)
    # under TP with sequence parallelism the input is split; the column-parallel products' outputs
    # (Q, V, the gate) are split by TP, the row-parallel down projection's is whole on each rank
    split = op_checkpoint.kept_elements(h, heads, sl, b, 4, LLAMA_8B)
    assert float(split) == pytest.approx(sl * b * ((4096 + 1024 + 14336) / 4 + 4096))
    got = memory.layer_activation_bytes(sl, b, h, heads, 4, True, R["op"], LLAMA_8B)
    assert float(got) == pytest.approx(2 * sl * b * (h / 4 + h / 4) + 2 * float(split))


@pytest.mark.parametrize("sp, expected", [(True, {"reduce_scatter": 4.0, "all_gather": 6.0}),
                                          (False, {"all_reduce": 6.0})])
def test_op_runs_the_tp_collectives_it_does_not_keep_again(llama, h100, sp, expected):
    """torchtitan's save list holds the reduce-scatter, not the all-gather or the all-reduce: a
    recomputed forward gathers again under sequence parallelism, all-reduces again without."""
    from tasks.model.step.parts import layer_collectives
    ctx = StepContext(llama, h100, devices=8, global_batch=8, memory_fraction=1e6)
    lay = Layout(tp=8, pp=1, dp=1, micro_batch=1, sequence_parallel=sp, recompute="op")
    got = {c.op: c.count for c in layer_collectives(lay, ctx) if c.group == "tp"}
    assert got == expected
    plain = {c.op: c.count for c in layer_collectives(Layout(tp=8, pp=1, dp=1, micro_batch=1, sequence_parallel=sp),
                                                      ctx) if c.group == "tp"}
    assert set(plain.values()) == {4.0}
    columns = {r: step_columns(Layout(tp=8, pp=1, dp=1, micro_batch=1, sequence_parallel=sp, recompute=r).columns(),
                               ctx) for r in ("none", "op")}
    # a layer's four collectives become five (half of the forward's two again) or six; the
    # embedding's one collective a step keeps the ratio a little under that
    tp = {r: float(columns[r]["tp_comm_s"][0]) for r in columns}
    assert tp["op"] / tp["none"] == pytest.approx((5.0 if sp else 6.0) / 4.0, rel=0.02)
