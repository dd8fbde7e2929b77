"""The stack's switches and the shapes of modern layers, each against what it must change:
fused attention, grouped-query attention, gated MLPs, fp8 GEMMs, overlap switches, sequence
parallelism's element-wise split, the gradient accumulation, the optimizer step and uneven
pipeline splits."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
from scipy.optimize import curve_fit

from sweeps.config import load_preset
from tasks.model.kernels import layer
from tasks.model.step import memory
from tasks.model.kernels.attention import FITTED_HEAD_DIMS, FUSED_EFFICIENCY, fused_attention_times, \
    fused_efficiency
from tasks.model.kernels.layer import STUDY_BLOCK, Block
from tasks.model.kernels.layer_cost import cross_entropy_time, grad_accumulation_time, layer_cost
from tasks.model.terms.layout import Layout, code
from tasks.model.terms.stack import ATTENTION_IMPLS, Stack
from tasks.model.step.plan import StepContext, step_columns
from tasks.model.step.compute import OPTIMIZER_BYTES_PER_PARAM, output_layer_time
from tasks.model.step.context import as_layouts

ROOT = Path(__file__).resolve().parents[3]
FLASH = Stack(attention="flash")


def _one(layout: Layout, ctx: StepContext) -> dict:
    return {name: values[0] for name, values in step_columns(layout.columns(), ctx).items()}


def test_llama_shapes_are_exact(llama):
    block = StepContext(llama, load_preset("hardware", "h100"), 8, 8).block
    per_layer = float(layer.layer_params(8192.0, 64.0, block))
    embeddings = 2 * 128256 * 8192
    assert (80 * per_layer + embeddings) / 1e9 == pytest.approx(70.55, abs=0.01)   # 70.6B, the model card
    shapes = {g.name: g for g in layer.gemm_shapes(8192.0, 64.0, 8192.0, 1.0, 8.0, block) if g.pass_ == "fwd"}
    assert shapes["qkv"].n == (8192 + 2 * 8 * 128) / 8          # 64 query heads, 8 key/value heads of 128
    assert shapes["fc1"].n == 2 * 28672 / 8 and shapes["fc2"].k == 28672 / 8   # gate and up, then down
    plain = layer.dp_gradient_bytes(8192.0, 8.0, 2.0)
    assert layer.dp_gradient_bytes(8192.0, 8.0, 2.0, 64.0, block) == pytest.approx(2 * per_layer / 8) != plain


def test_model_flops_of_the_study_block_are_megatrons_formula():
    got = layer.training_flops_per_layer(6144.0, 64.0, 2048.0, 4.0, 8.0)
    assert got == pytest.approx(layer.layer_training_flops(6144.0, 2048.0, 4.0, 8.0))


def test_fused_attention_drops_the_score_matrix_from_time_and_memory(h100):
    args = (8192.0, 64.0, 4096.0, 1.0, 8.0, h100)
    plain, fused = layer_cost(*args), layer_cost(*args, block=Block(flash=True), stack=FLASH)
    assert fused.attention_fwd > 0 and plain.attention_fwd == 0
    assert fused.gemm_fwd < plain.gemm_fwd and fused.elementwise_fwd < plain.elementwise_fwd
    fwd, bwd = fused_attention_times(8192.0, 4096.0, 1.0, 8.0, h100)
    assert (fused.attention_fwd, fused.attention_bwd) == (pytest.approx(fwd), pytest.approx(bwd))
    full, _ = fused_attention_times(8192.0, 4096.0, 1.0, 8.0, h100, causal=False)
    assert 0.4 * full < fwd < 0.75 * full     # the causal kernel skips half the tiles, at a lower rate
    sbh = 4096 * 1 * 8192
    stored = memory.layer_activation_bytes(4096, 1, 8192, 64, 8, True, code("recompute", "none"))
    flash = memory.layer_activation_bytes(4096, 1, 8192, 64, 8, True, code("recompute", "none"), Block(flash=True))
    assert stored - flash == pytest.approx(sbh * 5 * 64 * 4096 / 8192 / 8)


def test_fused_attention_curves_are_the_fit_of_each_kernels_shipped_rows():
    rows = []
    with open(ROOT / "conf" / "data" / "attention_kernels.csv", encoding="utf-8") as f:
        for line in list(f)[1:]:
            gpu, dtype, head_dim, seq, pass_, causal, impl, tflops = line.split(",")[:8]
            if impl in ATTENTION_IMPLS and gpu == "H100-SXM":      # the reference curves: H100's rows
                rows.append((impl, int(head_dim), pass_, causal, float(seq), float(tflops) / 989.0))
    assert {d for _, d, *_ in rows} == set(FITTED_HEAD_DIMS)
    assert {key[0] for key in FUSED_EFFICIENCY} == set(ATTENTION_IMPLS) - {"flash1"}   # FA1: fwd + bwd rows
    for (impl, pass_, causal, head_dim), (e_max, sl_half) in FUSED_EFFICIENCY.items():
        key = (impl, head_dim, "forward", "true" if causal else "false") if pass_ == "fwd" \
            else (impl, head_dim, "backward", "")
        sl, eff = (np.array(v) for v in zip(*[(s, e) for k, d, p, c, s, e in rows if (k, d, p, c) == key],
                                            strict=True))
        (fit_max, fit_half), _ = curve_fit(lambda s, a, b: a * s / (s + b), sl, eff, p0=(0.6, 300.0))
        assert (e_max, sl_half) == (pytest.approx(fit_max, abs=0.005), pytest.approx(fit_half, rel=0.05))
        fitted = fused_efficiency(pass_, causal, sl, head_dim, impl=impl)
        assert np.max(np.abs(fitted / eff - 1.0)) < (0.05 if impl == "cudnn" else 0.06)


def test_flashattention_2_takes_longer_than_cudnns_kernel_and_flashattention_3_less(h100):
    """The FlashAttention-3 paper's H100 rows at 8,192 tokens, 128-wide causal heads: FA2 runs
    the forward at 333 TFLOP/s and the backward at 318 against cuDNN's 529 and 518, FA3 at 602
    and 559 (the file's rows, which the curves fit); the stack's kernel picks the curve."""
    def times(impl):
        stack = replace(FLASH, attention_impl=impl)
        cost = layer_cost(8192.0, 64.0, 8192.0, 1.0, 1.0, h100, block=Block(flash=True), stack=stack)
        return np.array([cost.attention_fwd, cost.attention_bwd])
    cudnn, fa2, fa3 = times("cudnn"), times("flash2"), times("flash3")
    assert fa2 / cudnn == pytest.approx([529.0 / 333.0, 518.0 / 318.0], rel=0.06)
    assert fa3 / cudnn == pytest.approx([529.0 / 602.0, 518.0 / 559.0], rel=0.06)
    with pytest.raises(ValueError, match="stack.attention_impl='flash2' needs stack.attention=flash"):
        Stack(attention_impl="flash2")
    with pytest.raises(ValueError, match="stack.attention_impl='xformers': choose one of cudnn, flash2, flash3"):
        Stack(attention="flash", attention_impl="xformers")


def test_narrower_heads_run_fused_attention_slower_for_the_same_work(h100):
    """The cuDNN rows at head dimension 64 run 0.70 (causal forward) and 0.84 (backward) of
    the 128-wide rate at 4,096 tokens; a head between takes a rate between, a wider one the
    128-wide rate. Same attention width (4,096) and work in each case."""
    def attention(heads, head_dim):
        cost = layer_cost(4096.0, heads, 4096.0, 1.0, 1.0, h100, block=Block(flash=True, head_dim=head_dim),
                          stack=FLASH)
        return cost.attention_fwd, cost.attention_bwd
    (f64, b64), (f96, b96), (f128, b128), (f256, b256) = (attention(4096 / d, d) for d in (64, 96, 128, 256))
    assert f64 / f128 == pytest.approx(518.0 / 363.0, rel=0.05) and b64 / b128 == pytest.approx(499.0 / 417.0, rel=0.05)
    assert f128 < f96 < f64 and b128 < b96 < b64
    assert (f256, b256) == (pytest.approx(f128), pytest.approx(b128))


def test_fp8_runs_the_linear_gemms_faster_and_keeps_attention(h100):
    args = (8192.0, 64.0, 4096.0, 1.0, 8.0, h100)
    bf16 = layer_cost(*args, block=Block(flash=True), stack=FLASH)
    fp8 = layer_cost(*args, block=Block(flash=True), stack=replace(FLASH, gemm_precision="fp8"))
    assert fp8.linear_fwd < 0.7 * bf16.linear_fwd
    assert fp8.attention_fwd == pytest.approx(bf16.attention_fwd)
    assert fp8.elementwise_fwd > bf16.elementwise_fwd and fp8.elementwise_bwd > bf16.elementwise_bwd  # the casts


def test_sequence_parallelism_splits_the_replicated_elementwise_kernels(h100):
    args = (8192.0, 64.0, 4096.0, 1.0, 8.0, h100)
    with_sp, without = layer_cost(*args, sequence_parallel=True), layer_cost(*args, sequence_parallel=False)
    assert with_sp.elementwise_fwd < without.elementwise_fwd
    assert with_sp.gemm_fwd == pytest.approx(without.gemm_fwd)


def test_overlap_switches_change_only_what_they_name(gpt3, h100):
    base = StepContext(gpt3, h100, devices=64, global_batch=64, memory_fraction=1e6)
    layout = Layout(tp=8, pp=2, dp=4, micro_batch=1, sequence_parallel=True)
    serial = _one(layout, base)
    no_dp = _one(layout, replace(base, stack=Stack(dp_overlap=False)))
    assert no_dp["exposed_comm_s"] - serial["exposed_comm_s"] > 0
    # the DP collectives no longer run beside compute, so it keeps the SMs they held
    assert no_dp["compute_s"] < serial["compute_s"]
    assert no_dp["step_time_s"] - serial["step_time_s"] == pytest.approx(
        no_dp["exposed_comm_s"] - serial["exposed_comm_s"] + no_dp["compute_s"] - serial["compute_s"])
    tp_over = _one(layout, replace(base, stack=Stack(tp_overlap=True)))
    assert tp_over["tp_comm_s"] == pytest.approx(serial["tp_comm_s"])               # the traffic is the same
    assert serial["tp_comm_s"] / 8 <= tp_over["tp_exposed_s"] < serial["tp_exposed_s"]  # one chunk of 8 stays
    pp_over = _one(layout, replace(base, stack=Stack(pp_overlap=True)))
    assert pp_over["pp_exposed_s"] == serial["pp_exposed_s"] == pytest.approx(serial["pp_comm_s"])
    assert serial["pp_comm_s"] > 0


def test_only_an_interleaved_pipeline_hides_its_sends_behind_compute(gpt3, h100):
    """Megatron overlaps pipeline sends (overlap_p2p_comm) only in the interleaved schedule;
    the plain 1F1B schedule waits for each send whatever the stack says."""
    base = StepContext(gpt3, h100, devices=64, global_batch=64, memory_fraction=1e6)
    overlapped = replace(base, stack=Stack(pp_overlap=True))
    plain = Layout(tp=8, pp=2, dp=4, micro_batch=1, sequence_parallel=True)
    interleaved = replace(plain, schedule="interleaved", virtual_stages=2)
    for layout in (plain, interleaved):
        serial = _one(layout, base)
        assert serial["pp_comm_s"] > 0 and serial["pp_exposed_s"] == pytest.approx(serial["pp_comm_s"])
    assert _one(plain, overlapped)["pp_exposed_s"] == _one(plain, base)["pp_exposed_s"]
    hidden = _one(interleaved, overlapped)
    assert hidden["pp_exposed_s"] == 0.0 < hidden["pp_comm_s"]
    assert hidden["step_time_s"] < _one(interleaved, base)["step_time_s"]


def test_each_microbatch_adds_its_weight_gradients_into_the_buffer(h100):
    # 22B layer at TP 8: 12 x 6144^2 / 8 weights per device, read and written in fp32.
    weights = 12 * 6144.0**2 / 8
    fp32, fp16 = (layer_cost(6144.0, 64.0, 2048.0, 4.0, 8.0, h100, stack=Stack(main_grad_bytes=w))
                  for w in (4.0, 2.0))
    assert float(fp32.elementwise_bwd - fp16.elementwise_bwd) == pytest.approx(4.0 * weights / 3.35e12)
    assert float(fp32.forward) == float(fp16.forward)
    assert float(grad_accumulation_time(weights, h100, Stack())) == pytest.approx(8.0 * weights / 3.35e12)
    with pytest.raises(ValueError, match="stack.main_grad_bytes=3.0: choose one of 2, 4"):
        Stack(main_grad_bytes=3.0)


def test_an_eager_stack_pays_each_unfused_kernel_and_nothing_else(h100):
    # GPT-2 1.2B at Shoeybi et al.'s shape: H 1536, 16 heads, SL 1024, micro-batch 8, TP 1.
    h, a, sl, b, p = 1536.0, 16.0, 1024.0, 8.0, 2.0
    fused, eager = (layer_cost(h, a, sl, b, 1.0, h100, stack=Stack(elementwise=e)) for e in ("fused", "eager"))
    tokens, scores = sl * b * h, b * a * sl * sl

    def seconds(elements):
        return p * elements / (h100.hbm_tbps * 1e12 * h100.memory_efficiency)

    # biases: QKV 3H, FC1 4H, output and FC2 H each; 4 head copies of H; scale 2 and mask 4 accesses of the scores;
    # each branch's dropout its own kernel (3 accesses) where the fused stack's residual add writes its mask (1)
    forward = 2 * (3 + 4 + 1 + 1) * tokens + 2 * 4 * tokens + 2 * scores + 4 * scores + 2 * (3 - 1) * tokens
    backward = (3 + 4 + 1 + 1) * tokens + 2 * 4 * tokens + 2 * scores + 2 * scores
    assert float(eager.elementwise_fwd - fused.elementwise_fwd) == pytest.approx(seconds(forward), rel=0.02)
    assert float(eager.elementwise_bwd - fused.elementwise_bwd) == pytest.approx(seconds(backward), rel=0.02)
    assert float(eager.gemm_fwd) == float(fused.gemm_fwd) and eager.kernels_fwd == fused.kernels_fwd + 13
    # the attention core: scores and context GEMMs, softmax, dropout; eager adds scale and mask
    assert (fused.kernels_core, eager.kernels_core) == (4, 7)
    # selective repeats them
    assert float(eager.core_fwd - fused.core_fwd) == pytest.approx(seconds(6 * scores), rel=0.02)
    flash = [layer_cost(h, a, sl, b, 1.0, h100, block=Block(flash=True), stack=Stack(attention="flash", elementwise=e))
             for e in ("fused", "eager")]
    assert flash[0].kernels_core == flash[1].kernels_core == 1   # one fused kernel holds the whole core
    assert float(flash[1].elementwise_fwd - flash[0].elementwise_fwd) == pytest.approx(seconds(forward - 6 * scores),
                                                                                       rel=0.02)
    with pytest.raises(ValueError, match="stack.elementwise='jit': choose one of fused, eager"):
        Stack(elementwise="jit")


def test_the_accumulation_is_paid_once_per_microbatch(gpt3, h100):
    # GPT-3 175B at TP 8 on 8 devices, 8 sequences as 8 micro-batches of 1 or 2 of 4: fp32
    # rather than 16-bit gradients add 4 bytes per weight per micro-batch, output layer included.
    params = 12 * 12288.0**2 * 96 / 8 + gpt3.vocab * 12288.0 / 8
    extra = float(grad_accumulation_time(params, h100, Stack())) / 2
    for b, microbatches in ((1, 8), (4, 2)):
        fp32, fp16 = (_one(Layout(tp=8, pp=1, dp=1, micro_batch=b),
                           StepContext(gpt3, h100, devices=8, global_batch=8, memory_fraction=1e6,
                                       stack=Stack(main_grad_bytes=w)))
                      for w in (4.0, 2.0))
        assert fp32["compute_s"] - fp16["compute_s"] == pytest.approx(microbatches * extra, rel=1e-6)


def test_the_loss_reads_and_writes_every_logit_in_fp32(gpt3, h100):
    # 2048 tokens x 51200 / 8 logits per device: 52 bytes each at 70 % of 3.35 TB/s.
    logits = 2048 * 51200 / 8
    assert float(cross_entropy_time(logits, h100)) == pytest.approx(52 * logits / (0.7 * 3.35e12))
    # A narrow model with a wide vocabulary: its output layer is mostly the loss, whose
    # fp32 passes move 26 times the 16-bit logits the GEMM writes.
    narrow = replace(gpt3, hidden=256, heads=2, vocab=256_000)
    ctx = StepContext(narrow, h100, devices=1, global_batch=4, memory_fraction=1e6)
    layout = Layout(tp=1, pp=1, dp=1, micro_batch=4)
    output = float(output_layer_time(as_layouts(layout.columns(), np.array([1.0]), ctx), ctx)[0])
    loss = float(cross_entropy_time(4 * narrow.seq_len * 256_000, h100))
    assert loss < output < 1.25 * loss


def test_transformer_engines_fused_loss_moves_22_bytes_per_logit_in_four_kernels(gpt3, h100):
    """Two passes over the 16-bit logits writing the fp32 gradient (8), its scaling (8) and its
    cast to 16 bits (6): the output layer of a stack that fuses the loss is shorter by the 30
    bytes per logit it saves, and launches four kernels fewer per micro-batch."""
    logits = 2048 * 51200 / 8
    assert float(cross_entropy_time(logits, h100, "te")) == pytest.approx(22 * logits / (0.7 * 3.35e12))
    layout = Layout(tp=8, pp=1, dp=1, micro_batch=1)
    unfused, te = (_one(layout, StepContext(gpt3, h100, devices=8, global_batch=1, memory_fraction=1e6,
                                            stack=Stack(cross_entropy=impl)))
                   for impl in ("unfused", "te"))
    step_logits = gpt3.seq_len * gpt3.vocab / 8
    assert unfused["compute_s"] - te["compute_s"] == pytest.approx(30 * step_logits / (0.7 * 3.35e12), rel=1e-6)
    with pytest.raises(ValueError, match="stack.cross_entropy='liger': choose one of unfused, te"):
        Stack(cross_entropy="liger")


def test_the_optimizer_step_reads_and_writes_its_shard(gpt3, h100):
    ctx = StepContext(gpt3, h100, devices=64, global_batch=64, memory_fraction=1e6)
    plain = _one(Layout(tp=8, pp=1, dp=8, micro_batch=1), ctx)
    zero1 = _one(Layout(tp=8, pp=1, dp=8, micro_batch=1, zero="zero1"), ctx)
    rate = h100.hbm_tbps * 1e12 * h100.memory_efficiency
    assert plain["optimizer_s"] == pytest.approx(plain["params_per_device"] * OPTIMIZER_BYTES_PER_PARAM / rate)
    assert zero1["optimizer_s"] == pytest.approx(plain["optimizer_s"] / 8)


def test_an_uneven_pipeline_split_runs_and_charges_the_busiest_stage(gpt3, h100):
    odd = replace(gpt3, layers=126)
    ctx = StepContext(odd, h100, devices=64, global_batch=64, memory_fraction=1e6)
    row = _one(Layout(tp=8, pp=8, dp=1, micro_batch=1, schedule="interleaved", virtual_stages=2), ctx)
    assert row["status_code"] == 0                                   # 126 layers over 16 chunks
    even = _one(Layout(tp=8, pp=8, dp=1, micro_batch=1, schedule="interleaved", virtual_stages=2),
                replace(ctx, model=replace(gpt3, layers=128)))
    assert row["compute_s"] == pytest.approx(even["compute_s"])      # the busiest stage holds 16 either way
    assert _one(Layout(tp=8, pp=2, dp=4, micro_batch=1, schedule="interleaved", virtual_stages=2),
                replace(ctx, model=gpt3))["status_code"] == 0


def test_the_study_block_is_the_default(gpt3, h100):
    assert STUDY_BLOCK == Block() and StepContext(gpt3, h100, 8, 8).block.ffn == 4 * 12288


def test_a_layer_without_dropout_runs_no_dropout_kernels_and_keeps_no_masks(h100):
    # Llama trains without dropout: PyTorch's dropout at p = 0 returns its input, so neither
    # the two branches' dropouts nor the attention probabilities' run or keep a mask.
    names = {name for name, *_ in layer.elementwise_kernels(4096.0, 32.0, 2048.0, 1.0, 1.0, 2.0)}
    without = {name for name, *_ in layer.elementwise_kernels(4096.0, 32.0, 2048.0, 1.0, 1.0, 2.0,
                                                              block=Block(dropout=False))}
    assert names - without == set(layer.DROPOUT_KERNELS) == {"dropout", "attn_dropout"}
    args = (8192.0, 64.0, 4096.0, 1.0, 8.0, h100)
    for block, stack in ((STUDY_BLOCK, Stack()), (Block(flash=True), FLASH)):
        kept, dropped = layer_cost(*args, block=block, stack=stack), layer_cost(
            *args, block=replace(block, dropout=False), stack=stack)
        assert dropped.elementwise_fwd < kept.elementwise_fwd and dropped.gemm_fwd == kept.gemm_fwd
    sbh, none = 4096 * 1 * 8192, code("recompute", "none")
    for flash, core in ((False, 3 * 64 * 4096 / 8192 / 8), (True, 0.0)):  # a 1-byte mask and the dropped copy
        block = Block(flash=flash)
        masks = (memory.layer_activation_bytes(4096, 1, 8192, 64, 8, False, none, block)
                 - memory.layer_activation_bytes(4096, 1, 8192, 64, 8, False, none, replace(block, dropout=False)))
        assert float(masks) == pytest.approx(sbh * (2 + core))


def test_the_llama_preset_has_no_dropout_and_the_study_models_do(h100):
    llama, gpt3 = load_preset("model", "llama3-70b"), load_preset("model", "gpt3")
    assert (llama.dropout, gpt3.dropout) == (0.0, 0.1)
    contexts = {p: StepContext(replace(llama, dropout=p), h100, devices=64, global_batch=64, stack=FLASH)
                for p in (0.0, 0.1)}
    assert not contexts[0.0].block.dropout and contexts[0.1].block.dropout
    lay = Layout(tp=8, pp=8, dp=1, micro_batch=1, sequence_parallel=True)
    got = {p: {k: v[0] for k, v in step_columns(lay.columns(), ctx).items()} for p, ctx in contexts.items()}
    assert got[0.0]["step_time_s"] < got[0.1]["step_time_s"]
    assert got[0.0]["memory_per_device_bytes"] < got[0.1]["memory_per_device_bytes"]


def test_a_fused_stack_drops_out_inside_the_residual_add():
    # Megatron-LM's bias_dropout_add: one forward kernel per branch reads the branch's output
    # and the residual and writes the sum and the mask; the backward keeps both kernels.
    def pair(**kw):
        return {k.name: k for k in layer.elementwise_kernels(4096.0, 32.0, 2048.0, 1.0, 1.0, 2.0, **kw)
                if k.name in ("dropout", "residual_add")}
    tokens = 2.0 * 2048 * 4096
    fused, eager, plain = pair(), pair(style="eager"), pair(block=Block(dropout=False))
    assert ((fused["dropout"].fwd_count, fused["dropout"].fwd_bytes, fused["residual_add"].fwd_bytes)
            == (0, 0.0, 4 * tokens))
    assert ((eager["dropout"].fwd_count, eager["dropout"].fwd_bytes, eager["residual_add"].fwd_bytes)
            == (2, 3 * tokens, 3 * tokens))
    assert all(fused[n].bwd_bytes == eager[n].bwd_bytes == 3 * tokens and fused[n].bwd_count == 2 for n in fused)
    assert set(plain) == {"residual_add"} and plain["residual_add"].fwd_bytes == 3 * tokens


def test_the_weight_gather_overlaps_only_where_the_gradient_reduction_does():
    """Megatron-LM refuses --overlap-param-gather without --overlap-grad-reduce; so does a stack."""
    assert Stack(param_gather_overlap=True).param_gather_overlap
    with pytest.raises(ValueError, match="stack.param_gather_overlap=true needs stack.dp_overlap=true"):
        Stack(dp_overlap=False, param_gather_overlap=True)
