"""Parts of each layer in CUDA graphs (Stack.cuda_graph_scope) and a MoE layer's host waits
(moe_kernels.HOST_SYNCS): what the host's launch path still paces."""

from __future__ import annotations

import dataclasses
import re

import numpy as np
import pytest

from sweeps.config import load_preset
from tasks.model.kernels.cuda_graphs import PREPROCESS_KERNELS, ROUTER_KERNELS, graphed_kernels
from tasks.model.kernels.layer_cost import layer_cost
from tasks.model.kernels.model_blocks import model_block
from tasks.model.step.plan import StepContext, step_columns
from tasks.model.terms.layout import Layout
from tasks.model.terms.stack import Stack

#: Qwen3-30B-A3B as the shipped preset has it (its config.json): 48 layers, 128 experts of 768, top-8.
QWEN3_30B = load_preset("model", "qwen3-30b-a3b")
EAGER = Stack(attention="flash", gemm_precision="bf16", cross_entropy="te")


def _step(stack: Stack, hw, layouts, model=QWEN3_30B, flop_vs_bw=1.0):
    ctx = StepContext(model=model, hardware=hw, devices=16, global_batch=64, stack=stack, memory_fraction=float("inf"),
                      flop_vs_bw=flop_vs_bw)
    rows = [lay.columns() for lay in layouts]
    return step_columns({k: np.concatenate([r[k] for r in rows]) for k in rows[0]}, ctx)


def _host_launches(stack: Stack, hw, layouts, model=QWEN3_30B) -> float:
    """What the host launches (and waits for) in a micro-batch, in host launch times: the step's
    compute on a device 10^6 times faster than ``hw``, which only the host paces."""
    out = _step(stack, hw, layouts, model, flop_vs_bw=1e6)
    return float(out["compute_s"][0] / out["microbatches"][0] / (stack.host_launch_us * 1e-6))


@pytest.mark.parametrize("scope, why", [("mlp", "'mlp' is not a scope"), ("attn+moe_preprocess", "only beside"),
                                        ("attn,moe_router", "'attn,moe_router' is not a scope")])
def test_a_scope_megatron_core_cannot_capture_is_refused_naming_the_field(scope, why):
    with pytest.raises(ValueError, match=re.escape(f"stack.cuda_graph_scope={scope!r}: ") + f".*{why}"):
        Stack(cuda_graph_scope=scope)


def test_the_attention_sublayer_is_its_core_projections_norm_and_residual(h100):
    """A fused bf16 layer's attention sublayer launches the fused attention, the QKV and output
    GEMMs, the input norm and the bias-dropout-add: 5 forward kernels; fp8 casts each GEMM's
    input first: 7."""
    block = model_block(QWEN3_30B, flash=True)
    stacks = [dataclasses.replace(EAGER, gemm_precision=p) for p in ("bf16", "fp8")]
    kernels = [layer_cost(2048.0, 32.0, 4096.0, 1.0, 1.0, h100, block=block, stack=stack).kernels_attention
               for stack in stacks]
    assert kernels == [5, 7]


def test_graphed_scopes_take_their_kernels_off_the_host_less_one_replay_a_pass():
    fwd, bwd = graphed_kernels("attn", 5, 1.0, np.asarray([False]))
    assert (fwd[0], bwd[0]) == (4, 9)
    fwd, bwd = graphed_kernels("moe_router+moe_preprocess", 5, 0.5, np.asarray([False, True]))
    router_a2a = ROUTER_KERNELS[0] + PREPROCESS_KERNELS["alltoall"][0] - 1
    assert list(fwd) == [0.5 * router_a2a, 0.5 * (ROUTER_KERNELS[0] + PREPROCESS_KERNELS["flex"][0] - 1)]
    assert list(bwd) == [0.5 * (ROUTER_KERNELS[1] + PREPROCESS_KERNELS["alltoall"][1] - 1),
                         0.5 * (ROUTER_KERNELS[1] + PREPROCESS_KERNELS["flex"][1] - 1)]
    assert graphed_kernels("", 5, 1.0, np.asarray([True])) == (0.0, 0.0)


def test_partial_graphs_leave_a_small_moe_step_paced_by_what_stays_eager(h100):
    """Qwen3-30B-A3B at EP 8 on H100s: an eager step is the host's; graphing the attention and
    the router takes exactly their kernels off every layer and shortens it, but the experts'
    GEMMs and the dispatch still launch one by one, so it stays well above a whole-step graph."""
    lay = [Layout(tp=1, pp=1, dp=16, micro_batch=1, zero="zero1", ep=8, dispatcher="flex")]
    scope = "attn+moe_router+moe_preprocess"
    eager, partial = _step(EAGER, h100, lay), _step(dataclasses.replace(EAGER, cuda_graph_scope=scope), h100, lay)
    whole = _step(dataclasses.replace(EAGER, host_launch_us=0.0), h100, lay)
    fwd, bwd = graphed_kernels(scope, 5, 1.0, np.asarray([True]))
    graphed = dataclasses.replace(EAGER, cuda_graph_scope=scope)
    assert _host_launches(EAGER, h100, lay) - _host_launches(graphed, h100, lay) == pytest.approx(48 * (fwd + bwd)[0])
    assert whole["compute_s"][0] < partial["compute_s"][0] < eager["compute_s"][0]
    assert partial["compute_s"][0] > 1.5 * whole["compute_s"][0]


def test_a_moe_layers_host_waits_keep_the_forward_from_running_ahead(h100_without_nccl_sms):
    """At a host launch time that makes the host and the device about even, the forward's waits
    for the device (one a layer, alltoall) cost the step more than the longer of the two: the
    host's lead in the backward cannot carry over into the next forward. A dense model of the
    same shape pays none of it."""
    lay = [Layout(tp=1, pp=1, dp=16, micro_batch=1, zero="zero1", ep=8)]
    device = _step(dataclasses.replace(EAGER, host_launch_us=0.0), h100_without_nccl_sms, lay)
    kernels = _host_launches(EAGER, h100_without_nccl_sms, lay)
    micro = device["compute_s"][0] / device["microbatches"][0]
    even = dataclasses.replace(EAGER, host_launch_us=micro / kernels * 1e6)
    assert _step(even, h100_without_nccl_sms, lay)["compute_s"][0] > 1.05 * device["compute_s"][0]
    dense = dataclasses.replace(QWEN3_30B, experts=0, topk=0, moe_ffn_hidden=None)
    dense_lay = [dataclasses.replace(lay[0], ep=1)]
    dense_device = _step(dataclasses.replace(EAGER, host_launch_us=0.0), h100_without_nccl_sms, dense_lay, dense)
    dense_kernels = _host_launches(EAGER, h100_without_nccl_sms, dense_lay, dense)
    dense_micro = dense_device["compute_s"][0] / dense_device["microbatches"][0]
    dense_even = dataclasses.replace(EAGER, host_launch_us=dense_micro / dense_kernels * 1e6)
    dense_even_s = _step(dense_even, h100_without_nccl_sms, dense_lay, dense)["compute_s"][0]
    assert dense_even_s == pytest.approx(dense_device["compute_s"][0])
