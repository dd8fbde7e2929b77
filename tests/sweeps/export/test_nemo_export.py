"""``--export nemo``: every recipe field it sets is a field of the object NeMo 2.0's recipe
holds there (MegatronStrategy, Megatron-Core's DDP, optimizer and Transformer configs, the
data module, the precision plugin, the overlap callback), with a value that field takes,
and the edits say the layout back; a layout NeMo cannot run is refused in one line."""

from __future__ import annotations

import ast
import dataclasses
import re
from typing import Dict, List, Tuple

import pytest

from sweeps.export import Unexpressible, export
from sweeps.export.case import chunk_split
from tasks.model.terms.layout import Layout

#: Where the names come from. NeMo at release v2.4.0, and the Megatron-LM commit its
#: requirements/manifest.json pins ("megatron-lm": "ref").
NEMO = {"repository": "NVIDIA/NeMo", "release": "v2.4.0", "commit": "2381f42f6979449b5b99538f8f80135831009b51"}
CORE = {"repository": "NVIDIA/Megatron-LM", "commit": "03f7793114aa49af8ad7ac5eb70affe56f5f28ea"}

#: nemo/collections/llm/recipes/{llama3_8b,gpt3_175b}.py: pretrain_recipe's parameters used.
RECIPES = ("llama3_8b", "gpt3_175b")
RECIPE_ARGUMENTS = ("num_nodes", "num_gpus_per_node")
#: Fields by where the recipe holds them; a tuple lists the values the field takes.
FIELDS: Dict[str, Dict[str, object]] = {
    # NeMo nemo/lightning/pytorch/strategies/megatron_strategy.py, MegatronStrategy.__init__;
    # fsdp: FSDPLiteral = Literal["megatron", "pytorch"], Optional.
    "trainer.strategy": {"tensor_model_parallel_size": int, "pipeline_model_parallel_size": int,
                         "virtual_pipeline_model_parallel_size": (int, None), "pipeline_model_parallel_layout":
                         (str, None), "context_parallel_size": int, "sequence_parallel": bool,
                         "fsdp": ("megatron", "pytorch", None)},
    # Megatron-Core megatron/core/distributed/distributed_data_parallel_config.py,
    # DistributedDataParallelConfig (data_parallel_sharding_strategy's docstring lists its values).
    "trainer.strategy.ddp": {"data_parallel_sharding_strategy": ("no_shard", "optim", "optim_grads",
                                                                 "optim_grads_params"),
                             "average_in_collective": bool},
    # NeMo nemo/lightning/pytorch/plugins/mixed_precision.py, MegatronMixedPrecision.__init__.
    "trainer.plugins": {"grad_reduce_in_fp32": bool},
    # NeMo nemo/collections/llm/gpt/data/mock.py, MockDataModule.__init__.
    "data": {"seq_length": int, "micro_batch_size": int, "global_batch_size": int},
    # Megatron-Core megatron/core/optimizer/optimizer_config.py, OptimizerConfig.
    "optim.config": {"use_distributed_optimizer": bool},
    # Megatron-Core megatron/core/transformer/transformer_config.py, TransformerConfig (its
    # recompute fields' docstrings give their values), and NeMo's GPTConfig.seq_length
    # (nemo/collections/llm/gpt/model/base.py).
    "model.config": {"num_layers": int, "hidden_size": int, "num_attention_heads": int, "num_query_groups": int,
                     "ffn_hidden_size": int, "gated_linear_unit": bool, "seq_length": int, "hidden_dropout": float,
                     "attention_dropout": float, "recompute_granularity": ("full", "selective", None),
                     "recompute_method": ("uniform", "block", None), "recompute_num_layers": (int, None),
                     "attention_backend": "AttnBackend", "masked_softmax_fusion": bool,
                     "bias_activation_fusion": bool, "bias_dropout_fusion": bool,
                     "cp_comm_type": ("p2p", "all_gather", "a2a", "a2a+p2p", None), "kv_channels": (int, None)},
}
#: Megatron-Core megatron/core/transformer/enums.py, class AttnBackend.
ATTN_BACKEND = ("flash", "fused", "unfused", "local", "auto")
#: NeMo nemo/collections/llm/recipes/precision/mixed_precision.py: the plugin factories used.
PLUGINS = ("bf16_mixed", "fp16_mixed", "bf16_with_fp8_mixed")
#: NeMo nemo/lightning/pytorch/callbacks/megatron_comm_overlap.py, MegatronCommOverlapCallback.__init__.
OVERLAP_ARGUMENTS = ("tp_comm_overlap", "overlap_p2p_comm", "overlap_grad_reduce", "overlap_param_gather")


def _path(node: ast.expr) -> str:
    return ast.unparse(node).removeprefix("recipe.")


def _check(path: str, value: ast.expr) -> object:
    """The value of one edit, checked against the field it sets."""
    if path == "trainer.plugins":
        assert isinstance(value, ast.Call) and ast.unparse(value.func) in PLUGINS, ast.unparse(value)
        return ast.unparse(value.func)
    owner, _, name = path.rpartition(".")
    assert owner in FIELDS and name in FIELDS[owner], f"{path}: no such field where the recipe holds it"
    kind = FIELDS[owner][name]
    if kind == "AttnBackend":
        assert ast.unparse(value.value) == "AttnBackend" and value.attr in ATTN_BACKEND
        return value.attr
    literal = ast.literal_eval(value)
    assert any(_takes(k, literal) for k in (kind if isinstance(kind, tuple) else (kind,))), (path, literal)
    return literal


def _takes(kind: object, literal: object) -> bool:
    """Whether a field of ``kind`` (a type, or one value it takes) takes ``literal``."""
    if kind is bool:
        return isinstance(literal, bool)
    if isinstance(kind, type):
        return isinstance(literal, kind) and not isinstance(literal, bool)
    return literal is kind if kind is None else literal == kind


def parse(text: str) -> Tuple[Dict[str, object], int, Dict[str, object]]:
    """The recipe's edits (path -> value), its device count and the overlap callback's
    arguments, each name checked against where NeMo holds it."""
    tree = ast.parse(text)
    edits: Dict[str, object] = {}
    devices, overlap = 0, {}
    for node in tree.body:
        if isinstance(node, ast.Assign) and ast.unparse(node.targets[0]) == "recipe":
            call = node.value
            assert re.fullmatch(rf"llm\.({'|'.join(RECIPES)})\.pretrain_recipe", ast.unparse(call.func))
            kwargs = {k.arg: ast.literal_eval(k.value) for k in call.keywords}
            assert set(kwargs) <= set(RECIPE_ARGUMENTS)
            devices = kwargs["num_nodes"] * kwargs["num_gpus_per_node"]
        elif isinstance(node, ast.Assign):
            path = _path(node.targets[0])
            assert path not in edits, f"{path} set twice"
            edits[path] = _check(path, node.value)
        elif isinstance(node, ast.Expr):
            assert ast.unparse(node.value.func) == "recipe.trainer.callbacks.append"
            config = node.value.args[0]
            assert ast.unparse(config.args[0]) == "MegatronCommOverlapCallback"
            overlap = {k.arg: ast.literal_eval(k.value) for k in config.keywords}
            assert set(overlap) <= set(OVERLAP_ARGUMENTS)
    return edits, devices, overlap


def layout_of(edits: Dict[str, object], devices: int) -> Tuple[Layout, List[int]]:
    """The layout the edits describe, and the layers of each model chunk."""
    strategy = "trainer.strategy."
    tp, pp = edits[strategy + "tensor_model_parallel_size"], edits[strategy + "pipeline_model_parallel_size"]
    v = edits["trainer.strategy.virtual_pipeline_model_parallel_size"] or 1
    layers, layout = edits["model.config.num_layers"], edits["trainer.strategy.pipeline_model_parallel_layout"]
    split = [int(m) for m in re.findall(r"t\*(\d+)", layout)] if layout else [layers // (pp * v)] * (pp * v)
    assert sum(split) == layers and len(split) == pp * v
    zero = ("zero3" if edits["trainer.strategy.fsdp"] == "megatron"
            and edits["trainer.strategy.ddp.data_parallel_sharding_strategy"] == "optim_grads_params"
            else "zero1" if edits["optim.config.use_distributed_optimizer"] else "none")
    method, count = edits["model.config.recompute_method"], edits["model.config.recompute_num_layers"]
    assert method in (None, "block") or count == 1
    cp = edits["trainer.strategy.context_parallel_size"]
    return Layout(tp=tp, pp=pp, dp=devices // (tp * pp * cp), micro_batch=edits["data.micro_batch_size"],
                  schedule="interleaved" if v > 1 else "1f1b", virtual_stages=v, zero=zero,
                  sequence_parallel=edits["trainer.strategy.sequence_parallel"],
                  recompute=edits["model.config.recompute_granularity"] or "none",
                  recompute_layers=count if method == "block" else 0, cp=cp,
                  cp_comm=edits.get("model.config.cp_comm_type") or "p2p"), split


def test_every_feasible_layout_round_trips_through_nemos_own_fields_or_is_refused_in_one_line(exports):
    exported = []
    for label, case, text in exports("nemo"):
        edits, devices, overlap = parse(text)
        assert devices == case.devices
        layout, split = layout_of(edits, devices)
        assert layout == dataclasses.replace(case.layout, zero=case.sharding,
                                             sequence_parallel=case.sequence_parallel), (label, case.layout)
        assert split == chunk_split(case)
        assert edits["data.global_batch_size"] == case.global_batch
        assert overlap["tp_comm_overlap"] == (case.stack.tp_overlap and case.layout.tp > 1)
        assert edits["trainer.plugins"] == {"bf16": "bf16_mixed", "fp16": "fp16_mixed",
                                            "fp8": "bf16_with_fp8_mixed"}[case.stack.gemm_precision]
        backend = "unfused" if not case.stack.flash else {"cudnn": "fused"}.get(case.stack.attention_impl, "flash")
        assert edits["model.config.attention_backend"] == backend
        exported.append(case.layout)
    assert {lay.zero for lay in exported} >= {"none", "zero1", "zero3"}
    assert {lay.recompute for lay in exported} == {"none", "selective", "full"}
    assert {(lay.cp, lay.cp_comm) for lay in exported} >= {(1, "p2p"), (2, "p2p"), (4, "all_gather"), (2, "a2a")}
    assert any(lay.recompute_layers for lay in exported)
    assert any(lay.schedule == "interleaved" for lay in exported)


def test_fsdp_and_tp_overlap_without_sequence_parallelism_are_refused_naming_them(cases, built_cases):
    with pytest.raises(Unexpressible, match="zero=fsdp keeps whole gradients"):
        export("nemo", dict(built_cases)["fsdp"])
    no_sp = next(case for label, case in cases if label == "core-2024" and case.layout.tp > 1
                 and not case.layout.sequence_parallel)
    with pytest.raises(Unexpressible, match="without sequence parallelism"):
        export("nemo", no_sp)
