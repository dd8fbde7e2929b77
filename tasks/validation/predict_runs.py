"""Predict a published run with the whole-step model the layout search uses
(``tasks.model.step.plan``): the run's model, layout, stack and hardware profile in, its metric out."""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, replace
from typing import Dict, List, Optional

import numpy as np

from tasks.model.kernels.sustained import power_limit_problem
from tasks.model.terms.layout import CODED_FIELDS, Layout, encode
from tasks.model.step.memory import usable_memory_bytes
from tasks.model.terms.specs import HardwareProfile, TransformerModel
from tasks.model.terms.stack import Stack
from tasks.model.step.plan import STATUS_CODES, StepContext, step_columns
from tasks.validation.runs import PublishedRun
from tasks.validation.throughput import flops_per_step, metric_value

__all__ = ["MICRO_BATCH_CANDIDATES", "RunPrediction", "run_model", "run_stack", "run_hardware", "predict_run",
           "find_profile", "cluster_preset"]

#: Micro-batches tried where a run does not say which it used (the fastest that fits wins).
MICRO_BATCH_CANDIDATES = (1, 2, 4, 8, 16)


@dataclass(frozen=True)
class RunPrediction:
    """What the step model says of one run: its metric, step time, layout and memory.

    ``memory_limit_gb``: the usable share of the device's HBM (``memory.usable_memory_bytes``,
    the margin the search plans with); ``hbm_gb``: all of it. Both in 10^9 bytes.
    ``devices_per_node``: the run's cluster's (``run_hardware``); ``head_dim``: the attention
    head width the model priced (``Block.kv_dim``)."""

    value: float
    step_time_s: float
    layout: Layout
    memory_gb: float
    fits_memory: bool
    memory_limit_gb: float
    hbm_gb: float = math.inf
    devices_per_node: int = 1
    head_dim: float = 128.0

    @property
    def memory_verdict(self) -> str:
        """"fits" within the usable share; "tight" over it but within the device's HBM (the
        run fits only if it kept less aside than ``memory.USABLE_HBM_FRACTION`` assumes);
        "over" beyond the HBM itself, which a run that ran contradicts."""
        return "fits" if self.fits_memory else "tight" if self.memory_gb <= self.hbm_gb else "over"

    def describe_memory(self) -> str:
        """The memory a run needs, and against what when it is over the usable share:
        "72 GB", "186 GB > 180 GB usable, within 200 GB of HBM", "342 GB > 200 GB of HBM"."""
        needs = f"{self.memory_gb:.0f} GB"
        if self.memory_verdict == "fits":
            return needs
        if self.memory_verdict == "tight":
            return f"{needs} > {self.memory_limit_gb:.0f} GB usable, within {self.hbm_gb:.0f} GB of HBM"
        return f"{needs} > {self.hbm_gb:.0f} GB of HBM"


def run_model(run: PublishedRun) -> TransformerModel:
    """The run's Transformer (its MLP gated as the row's ``gated_mlp`` says)."""
    return TransformerModel(name=run.model, year=0, layers=run.layers, hidden=run.hidden, heads=run.heads,
                            ffn_hidden=run.ffn_hidden, params_b=0.0, seq_len=run.seq, architecture="decoder",
                            kv_heads=run.kv_heads, vocab=run.vocab, source=run.source,
                            gated_mlp=run.gated_mlp, dropout=run.dropout, head_dim=run.head_dim, experts=run.experts,
                            topk=run.topk, moe_ffn_hidden=run.moe_ffn_hidden, shared_experts=run.shared_experts,
                            dense_layers=run.dense_layers, kv_lora_rank=run.kv_lora_rank,
                            q_lora_rank=run.q_lora_rank, qk_rope_head_dim=run.qk_rope_head_dim,
                            v_head_dim=run.v_head_dim, expert_bias=run.expert_bias, expert_clamp=run.expert_clamp)


#: A 16-bit gradient buffer: an fp16 run's (Megatron-LM accumulates fp16 runs' gradients in 16
#: bits, its fp32 accumulation is forced for bf16 only; Shoeybi et al. 2019 kept fp16 grads),
#: or a run that turns Megatron-Core's grad_reduce_in_fp32 off.
FP16_MAIN_GRAD_BYTES = 2.0


def _main_grad_bytes(run: PublishedRun) -> float:
    """The gradient buffer's width: as the row's ``grad_reduce_in_fp32`` says (fp32, or the
    16 bits of a bf16 or fp16 run), else 16 bits for an fp16 run and fp32 for the others."""
    fp32 = run.precision != "fp16" if run.grad_reduce_in_fp32 is None else run.grad_reduce_in_fp32
    return Stack.main_grad_bytes if fp32 else FP16_MAIN_GRAD_BYTES


def run_stack(run: PublishedRun) -> Stack:
    """The run's stack: its attention and fused kernel, GEMM precision, overlap switches, element-wise
    kernels, gradient buffer (``_main_grad_bytes``), fp8 weights and recipe, offloaded layers, DP engine,
    weight-gather overlap, cross entropy, the host's launch path, whether a mixture of
    experts' all-to-alls overlap compute, the SMs its flex dispatcher holds, the pipeline's
    split and the input projections."""
    return Stack(attention="flash" if run.flash_attention else "materialised", attention_impl=run.attention_impl,
                 gemm_precision=run.precision,
                 dp_overlap=run.dp_overlap, tp_overlap=run.tp_overlap, pp_overlap=run.pp_overlap,
                 elementwise=run.elementwise,
                 main_grad_bytes=_main_grad_bytes(run),
                 fp8_params=run.fp8_params, fp8_recipe=run.fp8_recipe, offload_layers=run.offload_layers,
                 dp_engine=run.dp_engine,
                 tp_engine=run.tp_engine,
                 param_gather_overlap=run.param_gather_overlap, cross_entropy=run.cross_entropy,
                 host_launch_us=run.host_launch_us, moe_a2a_overlap=run.moe_a2a_overlap,
                 cuda_graph_scope=run.cuda_graph_scope, moe_fused_mlp=run.moe_fused_mlp,
                 dispatcher_sms=run.dispatcher_sms, pipeline_split=run.pipeline_split, projections=run.projections)


#: Bits in a byte: a NIC's speed is given in Gb/s, a link tier's bandwidth in GB/s.
BITS_PER_BYTE = 8.0


def run_hardware(run: PublishedRun, hw: HardwareProfile) -> HardwareProfile:
    """``hw`` as the run's own cluster had it (``PublishedRun.cluster``; unchanged where the row
    states nothing): its GPUs per node, HBM capacity and bandwidth, and each device's share of
    the node's scale-out network, nics_per_node x nic_gbps / 8 / gpus_per_node GB/s (a blank
    count or speed: the profile's one NIC per device, at the profile's per-device speed); and
    each GPU's power limit. Raises ``RowError`` for a power limit the profile cannot price
    (no datasheet limit to compare with, or at or below its static part)."""
    cluster = run.cluster
    if not cluster:
        return hw
    per_node = int(cluster.get("gpus_per_node", hw.devices_per_node))
    nic_gbps = cluster.get("nic_gbps", hw.inter_node.bandwidth_GBps * BITS_PER_BYTE)
    scale_out = cluster.get("nics_per_node", per_node) * nic_gbps / BITS_PER_BYTE / per_node
    out = replace(hw, devices_per_node=per_node, hbm_gb=cluster.get("hbm_gb", hw.hbm_gb),
                  hbm_tbps=cluster.get("hbm_tbps", hw.hbm_tbps), power_limit_w=cluster.get("power_limit_w"),
                  inter_node=replace(hw.inter_node, bandwidth_GBps=scale_out))
    problem = power_limit_problem(out)
    if problem:
        raise run.error("power_limit_w", out.power_limit_w, problem)
    return out


def _layout(run: PublishedRun, micro_batch: int) -> Layout:
    return Layout(tp=run.tp, pp=run.pp, dp=run.dp, micro_batch=micro_batch,
                  schedule="interleaved" if run.vp > 1 else "1f1b", virtual_stages=run.vp, zero=run.zero,
                  sequence_parallel=run.sequence_parallel, recompute=run.recompute,
                  recompute_layers=run.recompute_layers, cp=run.cp, cp_comm=run.cp_comm, ep=run.ep, etp=run.etp,
                  dispatcher=run.dispatcher)


def _columns(layouts: List[Layout]) -> Dict[str, np.ndarray]:
    rows = [lay.columns() for lay in layouts]
    cols = {k: np.concatenate([r[k] for r in rows]) for k in rows[0]}
    for name in CODED_FIELDS:
        cols[name] = encode(name, [getattr(lay, name) for lay in layouts])
    return cols


def predict_run(run: PublishedRun, hw: HardwareProfile) -> RunPrediction:
    """The run's metric as the step model predicts it. Memory is judged, not enforced: a
    layout over ``memory.usable_memory_bytes`` of its device is still timed and reported as
    not fitting (``memory_limit_gb``: those bytes in 10^9).
    The run is priced on its own cluster (``run_hardware``).
    Raises ``RowError`` for a layout the model cannot cost (the constraint named)."""
    hw = run_hardware(run, hw)
    sizes = [run.micro_batch] if run.micro_batch else \
        [b for b in MICRO_BATCH_CANDIDATES if run.global_batch % (run.dp * b) == 0] or [1]
    layouts = [_layout(run, b) for b in sizes]
    ctx = StepContext(run_model(run), hw, devices=run.gpus, global_batch=run.global_batch,
                      memory_fraction=float("inf"), stack=run_stack(run))
    out = step_columns(_columns(layouts), ctx)
    limit = float(usable_memory_bytes(hw.hbm_gb)) / 1e9
    fits = out["memory_per_device_bytes"] / 1e9 <= limit
    ok = out["status_code"] == 0
    if not ok.any():
        reason = STATUS_CODES[int(out["status_code"][0])]
        raise run.error("layout", layouts[0].describe(), f"breaks {reason}: an impossible layout")
    step = np.where(ok, out["step_time_s"], np.inf)
    fitting = fits & ok
    pick = int(np.argmin(np.where(fitting, step, np.inf))) if fitting.any() else int(np.argmin(step))
    step_s = float(step[pick])
    flops = flops_per_step(run.flops_formula, layers=run.layers, hidden=run.hidden, heads=run.heads, seq=run.seq,
                           vocab=run.vocab, global_batch=run.global_batch, block=ctx.block)
    value = metric_value(run.metric, step_s, flops=flops, gpus=run.gpus, tokens=run.global_batch * run.seq,
                         sequences=run.global_batch, hw=hw)
    memory_gb = float(out["memory_per_device_bytes"][pick]) / 1e9
    return RunPrediction(value=value, step_time_s=step_s, layout=layouts[pick], memory_gb=memory_gb,
                         fits_memory=bool(fits[pick]), memory_limit_gb=limit,
                         hbm_gb=float(usable_memory_bytes(hw.hbm_gb, 1.0)) / 1e9,
                         devices_per_node=hw.devices_per_node, head_dim=float(ctx.block.kv_dim(run.hidden, run.heads)))


def _plain(name: str) -> str:
    return "".join(ch for ch in name.upper() if ch.isalnum())


#: Words of a hardware name that say who sells or packages an accelerator, not which it is.
VENDOR_WORDS = frozenset({"NVIDIA", "AMD", "INSTINCT", "TESLA", "DGX", "HGX"})


def _words(name: str) -> List[str]:
    """The upper-case words of ``name`` without the vendor's: 'NVIDIA A100-SXM4-80GB' ->
    ['A100', 'SXM4', '80GB']."""
    return [w for w in re.split(r"[^A-Z0-9]+", name.upper()) if w and w not in VENDOR_WORDS]


def _pcie(words: List[str]) -> bool:
    """Whether ``words`` name a PCIe card (every profile here is an SXM or OAM module, whose
    clocks and power a PCIe card does not have)."""
    return any(w.startswith("PCIE") for w in words)


def _same_part(words: List[str], hw: HardwareProfile) -> bool:
    """``words`` name ``hw``'s accelerator family (its first word: A100, H100, MI300X), say no
    other memory size (a word such as 40GB) and no PCIe card (``_pcie``)."""
    sizes = [int(w[:-2]) for w in words if re.fullmatch(r"\d+GB", w)]
    return (words[0] == _words(hw.accelerator)[0] and all(size == round(hw.hbm_gb) for size in sizes)
            and not _pcie(words))


def cluster_preset(hw: HardwareProfile, profiles: Dict[str, HardwareProfile]) -> bool:
    """Whether ``hw`` is a cluster preset of another profile's device: its name is that
    profile's name and a suffix ('h100-a3-high' of 'h100'), its accelerator the same."""
    return any(hw.name.startswith(f"{other.name}-") and other.accelerator == hw.accelerator
               for other in profiles.values())


def find_profile(name: str, profiles: Dict[str, HardwareProfile]) -> Optional[HardwareProfile]:
    """The profile of the hardware ``name`` calls, or None.

    In order: the profile whose name or accelerator is ``name`` compared without case, spaces
    or punctuation; else the profiles of the same part (``_same_part``: 'NVIDIA A100-SXM4-80GB',
    'H100 SXM5 80GB', 'DGX A100'), the one with the most HBM where the name gives no memory
    size (an 'A100' is the 80 GB part); else the one profile whose accelerator name starts
    with it or it with the accelerator's ('H100SXM'), a name shorter than the accelerator's
    family word excepted ('MI250' is not the MI250X). 'A100-PCIe', 'V100 16GB' and 'TPU-Z'
    call none. A cluster preset of a device (``cluster_preset``: 'h100-a3-high') answers to its
    own name only, never to its accelerator's."""
    key = _plain(name)
    named = [p for p in profiles.values() if key == _plain(p.name)]
    if named:
        return named[0]
    devices = [p for p in profiles.values() if not cluster_preset(p, profiles)]
    exact = [p for p in devices if key == _plain(p.accelerator)]
    if exact:
        return exact[0]
    words = _words(name)
    same = [p for p in devices if words and _same_part(words, p)]
    if same:
        return max(same, key=lambda p: p.hbm_gb)
    near = [p for p in devices
            if (_plain(p.accelerator).startswith(key) and len(key) >= len(_words(p.accelerator)[0]))
            or key.startswith(_plain(p.accelerator))]
    return near[0] if len(near) == 1 and not _pcie(words) else None
