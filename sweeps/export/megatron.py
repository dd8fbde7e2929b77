"""A layout as Megatron-LM command-line flags (``pretrain_gpt.py``), release core_v0.15.3.

Every flag is an argument of ``megatron/training/arguments.py`` at that release (the last
before its arguments were generated from config dataclasses); the constraints quoted are
``validate_args``' in the same file. The mapping:

- TP, PP: ``--tensor-model-parallel-size``, ``--pipeline-model-parallel-size``; the
  interleaved schedule: ``--num-layers-per-virtual-pipeline-stage`` (layers / (PP x v));
  an uneven split, or one whose stack counts the embedding and loss as layers
  (``Stack.pipeline_split``): ``--pipeline-model-parallel-layout``, each chunk's layers
  spelled out, the end chunks a layer short.
- ``--sequence-parallel``; ``--micro-batch-size``; ``--global-batch-size`` (DP is what the
  devices leave, as in the layout).
- Context parallelism: ``--context-parallel-size`` and ``--cp-comm-type`` (``p2p`` or
  ``all_gather``, the names Transformer Engine's attention takes: its ``context_parallel.py``
  at d0067d0da; ``validate_args`` asks a sequence of a multiple of 2 x CP, as the layout does).
- ZeRO: none is Megatron's DDP (gradients all-reduced once per step, under ``no_sync``
  until the last micro-batch); zero1 is ``--use-distributed-optimizer`` (optimizer states
  sharded, gradients reduce-scattered once per step, weights all-gathered after the
  optimizer step); zero3 is Megatron-FSDP with ``--data-parallel-sharding-strategy
  optim_grads_params``, which gathers the weights for every forward and backward and
  reduce-scatters every micro-batch's gradients (``grad_reduce_every_bprop``,
  megatron/core/distributed/fsdp/src/megatron_fsdp/megatron_fsdp.py), with the flags its
  guide (docs/source/api-guide/custom_fsdp.md) and ``validate_args`` ask for. fsdp (whole
  gradients reduced once per step) has no Megatron counterpart: both Megatron-FSDP and
  ``--use-torch-fsdp2`` (whose ``no_sync`` does nothing) reduce every micro-batch.
- Recomputation: selective is ``--recompute-granularity selective`` (its default
  ``--recompute-modules core_attn``, the attention core of Korthikanti et al.); full is
  ``--recompute-granularity full --recompute-method uniform --recompute-num-layers 1``
  (every layer), or ``block`` with N for the first N layers of each chunk.
- Stack: ``--bf16``/``--fp16`` (``--fp8-format hybrid`` for fp8 GEMMs, with ``--fp8-recipe``
  where the stack's ``fp8_recipe`` is not the parser's default, delayed); materialised
  attention is ``--attention-backend unfused``, cuDNN's fused kernel ``fused`` (Transformer
  Engine's), FlashAttention ``flash`` (``case.attention_backend``);
  ``--overlap-grad-reduce`` where DP traffic hides behind the backward pass (and
  ``--overlap-param-gather`` for zero3, whose gathers the step model prefetches, and for
  zero1 where the stack overlaps its gather with the next forward pass,
  ``param_gather_overlap``; otherwise zero1's gather after the optimizer step is costed
  exposed, so it is not overlapped); ``--tp-comm-overlap`` (which needs sequence
  parallelism); an interleaved pipeline overlaps its sends by default,
  ``--no-overlap-p2p-communication`` where the stack does not; the fp32 gradient buffer is
  forced for bf16, asked with ``--accumulate-allreduce-grads-in-fp32`` for fp16; Transformer
  Engine's fused cross entropy is ``--cross-entropy-loss-fusion --cross-entropy-fusion-impl
  te``; the attention sublayer replayed from Transformer Engine's CUDA graphs
  (``Stack.cuda_graph_scope`` attn) is ``--cuda-graph-impl transformer_engine
  --cuda-graph-scope attn`` (that release's scopes are full, attn and full_iteration: a MoE
  router's or preprocessing's graph is refused).
- Mixture of experts: ``--num-experts``, ``--moe-router-topk``, ``--moe-ffn-hidden-size``,
  ``--moe-shared-expert-intermediate-size`` (shared experts x their width), ``--moe-layer-freq``
  (the leading dense layers as a list expression), ``--moe-grouped-gemm`` (the experts' GEMMs
  are costed grouped); ``--expert-model-parallel-size`` and ``--expert-tensor-parallel-size``
  (written always: Megatron takes TP where it is unset); the dispatcher as
  ``--moe-token-dispatcher-type alltoall``, or ``flex`` with ``--moe-enable-deepep`` (and
  ``--moe-deepep-num-sms`` where the stack's ``dispatcher_sms`` is not its default 20); the
  stack's ``moe_a2a_overlap`` as ``--overlap-moe-expert-parallel-comm``, which Megatron-Core
  refuses beside full recomputation (transformer_config.py at that release). The router is
  costed at its forced balance; no flag forces it (a real run routes as it learns).
- Multi-head latent attention: ``--multi-latent-attention`` with ``--q-lora-rank`` (where
  the queries have a latent), ``--kv-lora-rank``, ``--qk-head-dim`` (the model's head_dim),
  ``--qk-pos-emb-head-dim`` and ``--v-head-dim``.
"""

from __future__ import annotations

from typing import List, Optional, Tuple

from sweeps.export.case import ExportCase, Source, Unexpressible, attention_backend, check_common, chunk_split, \
    header
from tasks.model.terms.stack import DEEPEP_SMS, DEFAULT_FP8_RECIPE

__all__ = ["NAME", "SOURCE", "check_core", "pipeline_layout", "recompute_setting", "flags", "moe_flags", "render"]

NAME = "megatron"
SOURCE = Source("Megatron-LM", "core_v0.15.3", "NVIDIA/Megatron-LM", "309ffca6a40553362d44fd17efc56b772fa1aa44",
                ("megatron/training/arguments.py",))

Flag = Tuple[str, Optional[object]]

#: The parts of a layer core_v0.15.3's ``--cuda-graph-scope`` can name alone (its choices are
#: full, attn and full_iteration).
GRAPH_SCOPES = frozenset({"attn"})


def _model(case: ExportCase) -> List[Flag]:
    """The model's shape (the layout's splits depend on it)."""
    model = case.model
    out: List[Flag] = [("--num-layers", model.layers), ("--hidden-size", model.hidden),
                       ("--num-attention-heads", model.heads), ("--ffn-hidden-size", model.ffn_hidden)]
    if model.kv_heads and model.kv_heads != model.heads:
        out += [("--group-query-attention", None), ("--num-query-groups", model.kv_heads)]
    if model.head_dim:  # Megatron-LM takes hidden / heads unless --kv-channels says otherwise
        out.append(("--kv-channels", model.head_dim))
    if model.kv_lora_rank:  # multi-head latent attention: core_v0.15.3's --multi-latent-attention and its widths
        out += [("--multi-latent-attention", None)] + ([("--q-lora-rank", model.q_lora_rank)] if model.q_lora_rank
                                                       else []) \
            + [("--kv-lora-rank", model.kv_lora_rank), ("--qk-head-dim", model.head_dim),
               ("--qk-pos-emb-head-dim", model.qk_rope_head_dim), ("--v-head-dim", model.v_head_dim or model.head_dim)]
    if model.gated_mlp:
        out.append(("--swiglu", None))
    out += [("--seq-length", model.seq_len), ("--max-position-embeddings", model.seq_len),
            ("--hidden-dropout", model.dropout), ("--attention-dropout", model.dropout)]
    return out


def check_core(case: ExportCase, framework: str) -> None:
    """What Megatron-Core, which Megatron-LM and NeMo both run, cannot run as costed: FSDP
    with whole gradients reduced once per step, hybrid FSDP, ZeRO-3 without its prefetch, TP
    overlap without sequence parallelism."""
    lay, stack = case.layout, case.stack
    if case.sharding == "fsdp":
        raise Unexpressible(framework, "zero=fsdp keeps whole gradients and reduce-scatters them once per step; "
                                       "Megatron-Core's FSDPs (Megatron-FSDP, and PyTorch FSDP2, whose no_sync does "
                                       "nothing) reduce every micro-batch, as zero3 does; search without fsdp")
    if case.sharding == "hsdp":
        raise Unexpressible(framework, "zero=hsdp shards within each node and all-reduces the shards across nodes "
                                       "(FSDP's HYBRID_SHARD); Megatron-Core's FSDP shards over the whole DP group; "
                                       "search without hsdp")
    if case.sharding == "zero3" and not stack.dp_overlap:
        raise Unexpressible(framework, "stack.dp_overlap=false with zero3: Megatron-FSDP prefetches the weights the "
                                       "step model hides only with overlap_param_gather, which needs "
                                       "overlap_grad_reduce")
    if case.tp_overlap and not case.sequence_parallel:
        raise Unexpressible(framework, f"the stack overlaps TP communication (tp_overlap) and the layout has TP "
                                       f"{lay.tp} without sequence parallelism, which Megatron-Core's TP overlap "
                                       "needs (--tp-comm-overlap asks for --sequence-parallel)")


def _sharding(case: ExportCase) -> List[Flag]:
    mode = case.sharding
    out: List[Flag] = {"none": [], "zero1": [("--use-distributed-optimizer", None)],
                       "zero3": [("--use-megatron-fsdp", None), ("--data-parallel-sharding-strategy",
                                                                 "optim_grads_params"),
                                 ("--use-distributed-optimizer", None), ("--no-gradient-accumulation-fusion", None),
                                 ("--ckpt-format", "fsdp_dtensor")]}[mode]
    if case.dp_overlap:
        out.append(("--overlap-grad-reduce", None))
    if case.gather_overlap:
        out.append(("--overlap-param-gather", None))
    return out


def recompute_setting(case: ExportCase) -> Tuple[Optional[str], Optional[str], Optional[int]]:
    """Megatron-Core's ``recompute_granularity``, ``recompute_method`` and
    ``recompute_num_layers`` of the layout (None where unset): selective is the attention
    core; full is every layer (uniform, 1), or the first N layers of each chunk (block, N)."""
    lay = case.layout
    if lay.recompute == "none":
        return None, None, None
    if lay.recompute == "selective":
        return "selective", None, None
    return ("full", "block", lay.recompute_layers) if lay.recompute_layers else ("full", "uniform", 1)


def _recompute(case: ExportCase) -> List[Flag]:
    names = ("--recompute-granularity", "--recompute-method", "--recompute-num-layers")
    return [(name, value) for name, value in zip(names, recompute_setting(case), strict=True) if value is not None]


def pipeline_layout(case: ExportCase) -> Optional[str]:
    """Megatron-Core's ``pipeline_model_parallel_layout`` of an uneven split: one stage per
    model chunk in layer order, split by "|", "t*N" for N decoder layers, the embedding "E"
    on the first and the loss "L" on the last (megatron/core/transformer/
    pipeline_parallel_layer_layout.py); None for an even split, which the plain flags say."""
    split = chunk_split(case)
    if len(set(split)) == 1:
        return None
    stages = [f"t*{layers}" for layers in split]
    return "|".join(["E" + stages[0], *stages[1:-1], stages[-1] + "L"])


def _layout(case: ExportCase) -> List[Flag]:
    lay = case.layout
    out: List[Flag] = [("--tensor-model-parallel-size", lay.tp), ("--pipeline-model-parallel-size", lay.pp)]
    layout = pipeline_layout(case)
    if layout is not None:
        out.append(("--pipeline-model-parallel-layout", f"'{layout}'"))
    elif lay.schedule == "interleaved":
        out.append(("--num-layers-per-virtual-pipeline-stage", chunk_split(case)[0]))
    if lay.cp > 1:
        out += [("--context-parallel-size", lay.cp), ("--cp-comm-type", lay.cp_comm)]
    if case.sequence_parallel:
        out.append(("--sequence-parallel", None))
    out += [("--micro-batch-size", lay.micro_batch), ("--global-batch-size", case.global_batch)]
    return out + _sharding(case) + _recompute(case)


def _stack(case: ExportCase) -> List[Flag]:
    stack, lay = case.stack, case.layout
    out: List[Flag] = [("--fp16", None)] if stack.gemm_precision == "fp16" else [("--bf16", None)]
    if stack.fp8:
        out.append(("--fp8-format", "hybrid"))
        if stack.fp8_recipe != DEFAULT_FP8_RECIPE:
            out.append(("--fp8-recipe", stack.fp8_recipe))
    if stack.main_grad_bytes == 4 and stack.gemm_precision == "fp16":
        out.append(("--accumulate-allreduce-grads-in-fp32", None))
    elif stack.main_grad_bytes == 2 and stack.gemm_precision != "fp16":
        out.append(("--grad-reduce-in-bf16", None))
    out.append(("--attention-backend", attention_backend(stack)))
    if stack.eager:
        out += [("--no-masked-softmax-fusion", None), ("--no-bias-dropout-fusion", None),
                ("--no-bias-swiglu-fusion" if case.model.gated_mlp else "--no-bias-gelu-fusion", None)]
    if case.tp_overlap:
        out.append(("--tp-comm-overlap", None))
    if stack.cross_entropy == "te":
        out += [("--cross-entropy-loss-fusion", None), ("--cross-entropy-fusion-impl", "te")]
    if stack.cuda_graph_scope:
        out += [("--cuda-graph-impl", "transformer_engine"), ("--cuda-graph-scope", stack.cuda_graph_scope)]
    if lay.schedule == "interleaved" and not stack.pp_overlap:
        if lay.pp <= 2:
            raise Unexpressible(NAME, f"an interleaved schedule over PP {lay.pp} without overlapped sends "
                                      "(stack.pp_overlap=false) needs PP > 2")
        out.append(("--no-overlap-p2p-communication", None))
    return out


def flags(case: ExportCase) -> List[Flag]:
    """The flags of ``case``, in order (name, value; None for a switch), or ``Unexpressible``."""
    check_common(case, NAME, fused_loss=True, graph_scopes_written=GRAPH_SCOPES, split_written=True,
                 recipe_written=True)
    check_core(case, NAME)
    return _model(case) + moe_flags(case) + _layout(case) + _stack(case)


def moe_flags(case: ExportCase) -> List[Flag]:
    """A mixture of experts' flags (module docstring); none for a dense model."""
    model, lay = case.model, case.layout
    if not model.experts:
        return []
    out: List[Flag] = [("--num-experts", model.experts), ("--moe-router-topk", model.topk),
                       ("--moe-grouped-gemm", None)]
    width = model.moe_ffn_hidden or model.ffn_hidden
    if model.moe_ffn_hidden:
        out.append(("--moe-ffn-hidden-size", model.moe_ffn_hidden))
    if model.shared_experts:
        out.append(("--moe-shared-expert-intermediate-size", model.shared_experts * width))
    if model.dense_layers:
        out.append(("--moe-layer-freq", f"'([0]*{model.dense_layers}+[1]*{model.layers - model.dense_layers})'"))
    out += [("--expert-model-parallel-size", lay.ep), ("--expert-tensor-parallel-size", lay.etp),
            ("--moe-token-dispatcher-type", lay.dispatcher)]
    if lay.dispatcher == "flex":
        out.append(("--moe-enable-deepep", None))
        if case.stack.dispatcher_sms != DEEPEP_SMS:
            out.append(("--moe-deepep-num-sms", case.stack.dispatcher_sms))
    if case.stack.moe_a2a_overlap and lay.ep > 1:
        if lay.recompute == "full":
            raise Unexpressible(NAME, "stack.moe_a2a_overlap with full recomputation: Megatron-Core refuses "
                                      "--overlap-moe-expert-parallel-comm beside it; search without full")
        out.append(("--overlap-moe-expert-parallel-comm", None))
    return out


def render(case: ExportCase) -> str:
    """A bash array of the flags, under the header comment, with the launch line as a comment."""
    body = [f"    {name}" + ("" if value is None else f" {value}") for name, value in flags(case)]
    launch = (f"# torchrun --nnodes {case.nodes} --nproc-per-node {case.per_node} pretrain_gpt.py "
              '"${MEGATRON_ARGS[@]}" with your data, tokenizer, optimizer and model-family flags '
              "(normalization, position embedding, biases)")
    return "\n".join([*header(case, SOURCE), "MEGATRON_ARGS=(", *body, ")", launch]) + "\n"
