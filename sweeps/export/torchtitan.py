"""A layout as torchtitan TOML, release v0.2.2 (the last whose runs are configured by TOML).

The sections and keys are the dataclasses of ``torchtitan/config/job_config.py`` at that
release; the constraints quoted are its trainer's (``torchtitan/train.py``), its parallel
dims' (``torchtitan/distributed/parallel_dims.py``), its Llama 3 parallelisation's
(``torchtitan/models/llama3/infra/parallelize.py``) and its pipeline split's
(``torchtitan/distributed/pipeline_parallel.py``). The mapping:

- ``[parallelism]``: ``tensor_parallel_degree``; ``pipeline_parallel_degree`` with the
  schedule ``1F1B`` or ``Interleaved1F1B``, layers per stage giving PP x v stages, and no
  layers taken off the first and last stages (``*_stage_less_layers = 0``): the split then
  puts the extra layers on the first stages, as the step model does.
- Batches: without PP, ``local_batch_size`` is the micro-batch and the trainer accumulates
  global / (micro-batch x DP) of them; with PP the local batch is the replica's whole
  share and ``pipeline_parallel_microbatch_size`` the micro-batch.
- ZeRO: none is DDP (``data_parallel_replicate_degree``), which torchtitan applies to a
  1-D mesh only and which all-reduces every micro-batch its trainer accumulates (no
  ``no_sync``), so it stands for the layout only at one micro-batch; zero3 is FSDP2
  (``data_parallel_shard_degree``, ``fsdp_reshard_after_forward = "always"``), which
  gathers the weights for every forward and backward and reduce-scatters every
  micro-batch's gradients, without PP (a pipeline stage defers both to the last micro-batch,
  torch.distributed.pipelining ``backward_maybe_with_nosync``); hsdp is FSDP2 over a 2-D
  mesh (``data_parallel_shard_degree`` the DP group's ranks on one node,
  ``data_parallel_replicate_degree`` the nodes), at one micro-batch and without PP as zero3.
  zero1 and fsdp have no counterpart.
- ``[activation_checkpoint] mode``: none or full; op is ``mode = "selective"`` with
  ``selective_ac_option = "op"`` (``_apply_op_sac`` in torchtitan/distributed/
  activation_checkpoint.py: every second ``aten.mm``'s output recomputed); torchtitan's
  every-Nth-layer mode is not the attention-core recompute the layout costs as selective.
- Stack: attention is SDPA or flex (fused), so materialised attention is refused, and a
  named FlashAttention kernel too (the export does not choose SDPA's backend);
  ``[compile]`` fuses the element-wise kernels (on for ``fused`` and ``llama_compiled``; an
  eager stack, ``llama_eager`` the uncompiled block's own kernels, leaves it off); TP is
  always sequence-parallel and its overlap is ``enable_async_tensor_parallel`` (which needs
  compile); fp8 GEMMs are ``[model] converters = ["quantize.linear.float8"]`` (the name
  torchtitan/components/quantization/float8.py registers); weights in bf16, gradients
  reduced in fp32 (``mixed_precision_reduce``'s one choice); DP communication always
  overlaps the backward pass.
- Context parallelism is refused: torchtitan's (``context_parallel_degree``) exchanges K/V
  inside PyTorch's SDPA by an all-gather after the first attention step or an all-to-all
  (``context_parallel_rotate_method``), neither the ring nor the all-gather before attention
  that the layout costs.
- A mixture of experts is refused: the Llama model the export writes for has a dense MLP
  (torchtitan's mixture-of-experts models are other model families of its own).
"""

from __future__ import annotations

import math
from typing import Dict

from sweeps.export.case import ExportCase, Source, Unexpressible, check_common, header
from tasks.model.terms.stack import DEFAULT_ATTENTION_IMPL

__all__ = ["NAME", "SOURCE", "sections", "render"]

NAME = "torchtitan"
SOURCE = Source("torchtitan", "v0.2.2", "pytorch/torchtitan", "73a0e6979dd10b6b1904098eb3c8f62c18ab87ce",
                ("torchtitan/config/job_config.py",))

Sections = Dict[str, Dict[str, object]]


def _refuse_stack(case: ExportCase) -> None:
    stack, lay = case.stack, case.layout
    problems = [(bool(case.model.experts), f"a mixture of {case.model.experts} experts (its Llama model's MLP is "
                                           "dense)"),
                (not stack.flash, "materialised attention (torchtitan's attention is SDPA or flex, fused)"),
                (stack.attention_impl != DEFAULT_ATTENTION_IMPL,
                 f"stack.attention_impl={stack.attention_impl!r} (the export does not choose SDPA's kernel)"),
                (stack.gemm_precision == "fp16", "fp16 (mixed_precision_param takes bfloat16 or float32)"),
                (stack.main_grad_bytes != 4, "16-bit gradient reduction (mixed_precision_reduce takes float32 only)"),
                (not stack.dp_overlap and lay.dp > 1, "DP communication after the backward pass (stack.dp_overlap="
                                                      "false; FSDP2 and DDP always overlap it)"),
                (case.tp_overlap and stack.eager, "overlapped TP without compile (async TP needs it)"),
                (bool(case.model.head_dim) and case.model.head_dim * case.model.heads != case.model.hidden,
                 f"heads {case.model.head_dim} wide, not hidden / heads (its Llama model derives the width)")]
    for problem, what in problems:
        if problem:
            raise Unexpressible(NAME, what)


def _parallelism(case: ExportCase) -> Dict[str, object]:
    lay, mode = case.layout, case.sharding
    if lay.cp > 1:
        raise Unexpressible(NAME, f"CP {lay.cp} ({lay.cp_comm}): torchtitan's context parallelism exchanges K/V by "
                                  "an all-gather after the first attention step or an all-to-all, not as costed")
    if lay.tp > 1 and not case.sequence_parallel:
        raise Unexpressible(NAME, f"TP {lay.tp} without sequence parallelism (torchtitan's TP always shards the "
                                  "norms by sequence)")
    if case.model.seq_len % (2 * lay.tp):
        raise Unexpressible(NAME, f"sequence length {case.model.seq_len} under TP {lay.tp}: torchtitan asks for a "
                                  "multiple of 2 x TP")
    why = {"zero1": "zero1 (torchtitan shards weights, gradients and optimizer states together, or nothing)",
           "fsdp": "zero=fsdp (whole gradients reduced once per step): torchtitan's FSDP2 reduces every micro-batch "
                   "(zero3), and under PP keeps the weights gathered between micro-batches"}.get(mode)
    if mode == "none" and lay.dp > 1 and (lay.tp > 1 or lay.pp > 1):
        why = "zero=none beside TP or PP: torchtitan's DDP takes a 1-D mesh only (use zero3)"
    elif mode == "none" and lay.dp > 1 and case.microbatches > 1:
        why = (f"zero=none over {case.microbatches} micro-batches: torchtitan's DDP all-reduces every micro-batch, "
               "not once per step")
    elif mode in ("zero3", "hsdp") and lay.pp > 1:
        why = f"{mode} beside PP: a pipeline stage defers FSDP2's reductions and re-gathers to the last micro-batch"
    elif mode == "hsdp" and case.microbatches > 1:
        why = (f"zero=hsdp over {case.microbatches} micro-batches: torchtitan's HSDP reduces every micro-batch, "
               "not once per step")
    if why:
        raise Unexpressible(NAME, why)
    shard = {"zero3": lay.dp, "hsdp": case.shard_ranks}.get(mode, 1)
    out: Dict[str, object] = {"data_parallel_replicate_degree": lay.dp // shard,
                              "data_parallel_shard_degree": shard,
                              "fsdp_reshard_after_forward": "always", "tensor_parallel_degree": lay.tp,
                              "enable_async_tensor_parallel": case.tp_overlap,
                              "pipeline_parallel_degree": lay.pp, "context_parallel_degree": 1}
    return {**out, **_pipeline(case)} if lay.pp > 1 else out


def _pipeline(case: ExportCase) -> Dict[str, object]:
    """The schedule and the split: PP x v stages of the layers, the extra ones first."""
    lay, layers = case.layout, case.model.layers
    out: Dict[str, object] = {"pipeline_parallel_schedule": "Interleaved1F1B" if lay.schedule == "interleaved"
                              else "1F1B", "pipeline_parallel_microbatch_size": lay.micro_batch,
                              "pipeline_parallel_first_stage_less_layers": 0,
                              "pipeline_parallel_last_stage_less_layers": 0}
    if lay.schedule == "interleaved":
        stages = lay.pp * lay.virtual_stages
        per_stage = math.ceil(layers / stages)  # stages = ceil(layers / per_stage) (pipeline_parallel.py)
        if math.ceil(layers / per_stage) != stages:
            raise Unexpressible(NAME, f"{layers} layers in {stages} stages: no pipeline_parallel_layers_per_stage "
                                      "gives that many")
        out["pipeline_parallel_layers_per_stage"] = per_stage
    return out


def sections(case: ExportCase) -> Sections:
    """The TOML of ``case`` as sections of keys, or ``Unexpressible``."""
    check_common(case, NAME, torchtitan_features=True)
    _refuse_stack(case)
    lay = case.layout
    if lay.recompute == "selective" or lay.recompute_layers:
        raise Unexpressible(NAME, "selective recomputation of the attention core" if lay.recompute == "selective"
                            else f"full recomputation of {lay.recompute_layers} layers per chunk (torchtitan's full "
                                 "mode recomputes every layer)")
    parallelism = _parallelism(case)
    local = lay.micro_batch if lay.pp == 1 else case.global_batch // lay.dp
    return {"training": {"local_batch_size": local, "global_batch_size": case.global_batch,
                         "seq_len": case.model.seq_len, "mixed_precision_param": "bfloat16",
                         "mixed_precision_reduce": "float32"},
            "parallelism": parallelism,
            "activation_checkpoint": ({"mode": "selective", "selective_ac_option": "op"} if lay.recompute == "op"
                                      else {"mode": lay.recompute}),
            "compile": {"enable": not case.stack.eager, "components": ["model", "loss"]},
            "model": {"converters": ["quantize.linear.float8"] if case.stack.fp8 else []}}


def _toml(value: object) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, list):
        return "[" + ", ".join(_toml(item) for item in value) + "]"
    return f'"{value}"' if isinstance(value, str) else str(value)


def render(case: ExportCase) -> str:
    """The TOML, under the header comment, to merge into the model's train config."""
    lines = [*header(case, SOURCE),
             "# merge into your model's train config (e.g. torchtitan/models/llama3/train_configs/llama3_8b.toml),",
             f"# whose [model] name and flavor give the shape: {case.model.layers} layers, hidden {case.model.hidden}, "
             f"{case.model.heads} heads; run on {case.devices} devices (NGPU={case.per_node} per node)"]
    for name, keys in sections(case).items():
        lines += ["", f"[{name}]", *(f"{key} = {_toml(value)}" for key, value in keys.items())]
    return "\n".join(lines) + "\n"
