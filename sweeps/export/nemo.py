"""A layout as edits of a NeMo 2.0 pretraining recipe (NeMo-Run), release v2.4.0.

NeMo 2.0 configures a run as a recipe, a tree of ``run.Config`` objects that a script edits
by attribute before ``run.run(recipe)`` (or that ``nemo llm pretrain --factory NAME`` takes
as ``path=value`` overrides). The export writes those attribute edits as Python, one per
line. The names are those of the recipe's objects at NeMo v2.4.0 and of the Megatron-Core
configs it pins (NVIDIA/Megatron-LM@03f77931, requirements/manifest.json):

- ``llm.<recipe>.pretrain_recipe(num_nodes, num_gpus_per_node)``: llama3_8b for a model
  with a gated MLP (SwiGLU, RMSNorm, RoPE), gpt3_175b otherwise (GELU, LayerNorm); the
  ``model.config`` edits then set the shape (GPTConfig, a Megatron-Core TransformerConfig).
- ``trainer.strategy``: MegatronStrategy's TP, PP, virtual pipeline size, sequence
  parallelism and context parallelism (the layout's CP, where the llama3_8b recipe sets 2, and
  ``model.config.cp_comm_type``, Megatron-Core's name for its exchange), and ``fsdp``; an
  uneven split of the layers as Megatron-Core's ``pipeline_model_parallel_layout``.
- ``data``: the data module's micro- and global batch and sequence length.
- ZeRO: none and zero1 are ``optim.config.use_distributed_optimizer`` False and True
  (Megatron-Core's DDP and distributed optimizer, as Megatron-LM runs them); zero3 is
  ``trainer.strategy.fsdp = "megatron"`` with ``ddp.data_parallel_sharding_strategy =
  "optim_grads_params"`` (gradients reduce-scattered every micro-batch, as in Megatron-LM,
  ``sweeps.export.megatron``) and ``ddp.average_in_collective = False`` (the recipe's own
  note for FSDP); fsdp (gradients reduced once per step) has no counterpart.
- Recomputation: ``model.config.recompute_granularity``, ``recompute_method`` and
  ``recompute_num_layers`` (TransformerConfig), as Megatron-LM's flags.
- Stack: the precision plugin (``bf16_mixed``, ``fp16_mixed``, ``bf16_with_fp8_mixed``) and
  its ``grad_reduce_in_fp32``; ``model.config.attention_backend`` (AttnBackend.unfused for
  materialised attention, fused for cuDNN's kernel, flash for FlashAttention); the fusions
  off for an eager stack; and the overlaps through the recipe's own
  MegatronCommOverlapCallback (which sets them on the DDP and model configs), each given
  explicitly so that its defaults decide none.
- Mixture of experts: ``model.config.num_moe_experts``, ``moe_router_topk``,
  ``moe_ffn_hidden_size``, ``moe_shared_expert_intermediate_size``, ``moe_layer_freq``,
  ``moe_grouped_gemm``, ``moe_token_dispatcher_type`` (``moe_enable_deepep`` for flex), and
  the strategy's ``expert_model_parallel_size`` and ``expert_tensor_parallel_size``; the
  pinned Megatron-Core has no ``overlap_moe_expert_parallel_comm``, so a stack that overlaps
  the all-to-alls is refused, and so is latent attention (the recipe's ``GPTConfig`` has none).
"""

from __future__ import annotations

from typing import List

from sweeps.export.case import ExportCase, Source, Unexpressible, attention_backend, check_common, header
from sweeps.export.megatron import check_core, pipeline_layout, recompute_setting

__all__ = ["NAME", "SOURCE", "CORE", "edits", "render"]

NAME = "nemo"
SOURCE = Source("NeMo", "v2.4.0", "NVIDIA/NeMo", "2381f42f6979449b5b99538f8f80135831009b51",
                ("nemo/collections/llm/recipes/llama3_8b.py", "nemo/collections/llm/recipes/gpt3_175b.py",
                 "nemo/lightning/pytorch/strategies/megatron_strategy.py",
                 "nemo/lightning/pytorch/plugins/mixed_precision.py",
                 "nemo/collections/llm/recipes/precision/mixed_precision.py", "nemo/collections/llm/gpt/data/mock.py",
                 "nemo/lightning/pytorch/callbacks/megatron_comm_overlap.py"))
#: The Megatron-Core that NeMo v2.4.0 pins: its config dataclasses name the DDP, optimizer
#: and model fields.
CORE = Source("Megatron-Core", "as pinned by NeMo v2.4.0", "NVIDIA/Megatron-LM",
              "03f7793114aa49af8ad7ac5eb70affe56f5f28ea",
              ("megatron/core/distributed/distributed_data_parallel_config.py",
               "megatron/core/optimizer/optimizer_config.py", "megatron/core/model_parallel_config.py",
               "megatron/core/transformer/transformer_config.py", "megatron/core/transformer/enums.py"))

_PLUGINS = {"bf16": "bf16_mixed", "fp16": "fp16_mixed", "fp8": "bf16_with_fp8_mixed"}
_IMPORTS = ["import nemo_run as run", "from megatron.core.transformer.enums import AttnBackend",
            "from nemo.collections import llm",
            "from nemo.collections.llm.recipes.precision.mixed_precision import {plugin}",
            "from nemo.lightning.pytorch.callbacks.megatron_comm_overlap import MegatronCommOverlapCallback"]


def _model(case: ExportCase) -> List[str]:
    model = case.model
    values = {"num_layers": model.layers, "hidden_size": model.hidden, "num_attention_heads": model.heads,
              "num_query_groups": model.kv_heads or model.heads, "ffn_hidden_size": model.ffn_hidden,
              "gated_linear_unit": model.gated_mlp, "seq_length": model.seq_len, "hidden_dropout": model.dropout,
              "attention_dropout": model.dropout}
    if model.head_dim:
        values["kv_channels"] = model.head_dim  # Megatron-Core's TransformerConfig: hidden / heads unless set
    return [f"recipe.model.config.{name} = {value!r}" for name, value in values.items()]


def _layout(case: ExportCase) -> List[str]:
    lay = case.layout
    strategy = {"tensor_model_parallel_size": lay.tp, "pipeline_model_parallel_size": lay.pp,
                "virtual_pipeline_model_parallel_size": lay.virtual_stages if lay.schedule == "interleaved" else None,
                "pipeline_model_parallel_layout": pipeline_layout(case), "context_parallel_size": lay.cp,
                "sequence_parallel": case.sequence_parallel}
    lines = [f"recipe.data.{name} = {value!r}" for name, value in
             (("seq_length", case.model.seq_len), ("micro_batch_size", lay.micro_batch),
              ("global_batch_size", case.global_batch))]
    lines += [f"recipe.trainer.strategy.{name} = {value!r}" for name, value in strategy.items()]
    if lay.cp > 1:
        lines.append(f"recipe.model.config.cp_comm_type = {lay.cp_comm!r}")
    return lines + _sharding(case) + _recompute(case)


def _sharding(case: ExportCase) -> List[str]:
    mode = case.sharding
    lines = [f"recipe.optim.config.use_distributed_optimizer = {mode != 'none'!r}"]
    if mode == "zero3":
        return lines + ["recipe.trainer.strategy.fsdp = 'megatron'",
                        "recipe.trainer.strategy.ddp.data_parallel_sharding_strategy = 'optim_grads_params'",
                        "recipe.trainer.strategy.ddp.average_in_collective = False"]
    return lines + ["recipe.trainer.strategy.fsdp = None"]


def _recompute(case: ExportCase) -> List[str]:
    granularity, method, layers = recompute_setting(case)
    return [f"recipe.model.config.recompute_granularity = {granularity!r}",
            f"recipe.model.config.recompute_method = {method!r}",
            f"recipe.model.config.recompute_num_layers = {layers!r}"]


def _stack(case: ExportCase) -> List[str]:
    stack, lay = case.stack, case.layout
    lines = [f"recipe.trainer.plugins = {_PLUGINS[stack.gemm_precision]}()",
             f"recipe.trainer.plugins.grad_reduce_in_fp32 = {stack.main_grad_bytes == 4!r}",
             f"recipe.model.config.attention_backend = AttnBackend.{attention_backend(stack)}"]
    if stack.eager:
        lines += [f"recipe.model.config.{name} = False"
                  for name in ("masked_softmax_fusion", "bias_activation_fusion", "bias_dropout_fusion")]
    overlaps = {"tp_comm_overlap": case.tp_overlap,
                "overlap_p2p_comm": lay.schedule == "interleaved" and stack.pp_overlap,
                "overlap_grad_reduce": case.dp_overlap,
                "overlap_param_gather": case.gather_overlap}
    arguments = ", ".join(f"{name}={value!r}" for name, value in overlaps.items())
    return lines + [f"recipe.trainer.callbacks.append(run.Config(MegatronCommOverlapCallback, {arguments}))"]


def edits(case: ExportCase) -> List[str]:
    """The recipe's edits for ``case``, one Python statement each, or ``Unexpressible``."""
    check_common(case, NAME, split_written=True)
    check_core(case, NAME)
    return _model(case) + _moe(case) + _layout(case) + _stack(case)


def _moe(case: ExportCase) -> List[str]:
    """A mixture of experts' edits (module docstring); none for a dense model."""
    model, lay = case.model, case.layout
    if not model.experts:
        return []
    if model.kv_lora_rank:
        raise Unexpressible(NAME, "multi-head latent attention: the recipe's GPTConfig has no latent attention "
                                  "(NeMo's DeepSeek recipes configure it); use --export megatron")
    if case.stack.moe_a2a_overlap and lay.ep > 1:
        raise Unexpressible(NAME, "stack.moe_a2a_overlap: the Megatron-Core NeMo v2.4.0 pins has no "
                                  "overlap_moe_expert_parallel_comm; use --export megatron or a stack without it")
    width = model.moe_ffn_hidden or model.ffn_hidden
    config = {"num_moe_experts": model.experts, "moe_router_topk": model.topk, "moe_ffn_hidden_size": width,
              "moe_shared_expert_intermediate_size": model.shared_experts * width if model.shared_experts else None,
              "moe_layer_freq": [0] * model.dense_layers + [1] * (model.layers - model.dense_layers),
              "moe_grouped_gemm": True, "moe_token_dispatcher_type": lay.dispatcher,
              "moe_enable_deepep": lay.dispatcher == "flex"}
    return [f"recipe.model.config.{name} = {value!r}" for name, value in config.items()] + \
        [f"recipe.trainer.strategy.{name} = {value!r}" for name, value in
         (("expert_model_parallel_size", lay.ep), ("expert_tensor_parallel_size", lay.etp))]


def render(case: ExportCase) -> str:
    """A Python snippet: the imports, the recipe and its edits, under the header comment."""
    body = edits(case)
    recipe = "llama3_8b" if case.model.gated_mlp else "gpt3_175b"
    imports = [line.format(plugin=_PLUGINS[case.stack.gemm_precision]) for line in _IMPORTS]
    start = [f"recipe = llm.{recipe}.pretrain_recipe(num_nodes={case.nodes}, num_gpus_per_node={case.per_node})"]
    notes = ["# the recipe gives the model family (activation, normalization, position embedding), the data, the "
             "optimizer and the schedule; run it with run.run(recipe)"]
    return "\n".join([*header(case, SOURCE), f"# and {CORE.line()}", *notes, *imports, "", *start, *body]) + "\n"
