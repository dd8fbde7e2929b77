"""``--export megatron``: every flag it writes is an argument of Megatron-LM's own parser,
with a value that parser takes, and the flags say the layout back (TP, PP, DP, virtual
stages and the split of the layers, sequence parallelism, micro- and global batch, ZeRO,
recomputation); a layout Megatron-LM cannot run is refused in one line."""

from __future__ import annotations

import dataclasses
import re
import shlex
from typing import Dict, List, Optional, Tuple

import pytest

from sweeps.export import Unexpressible, export
from sweeps.export.case import chunk_split
from tasks.model.terms.layout import Layout

#: Where the names below come from: ``group.add_argument`` calls of Megatron-LM's parser.
SOURCE = {"repository": "NVIDIA/Megatron-LM", "release": "core_v0.15.3",
          "commit": "309ffca6a40553362d44fd17efc56b772fa1aa44", "path": "megatron/training/arguments.py"}
#: megatron/core/transformer/enums.py, class AttnBackend, at the same commit.
ATTN_BACKEND = ("flash", "fused", "unfused", "local", "auto")
#: Each argument the mapping writes, copied from ``SOURCE``: "switch" (action store_true or
#: store_false: no value), the ``type`` it parses with, or its ``choices``.
ARGUMENTS: Dict[str, object] = {
    "--num-layers": "int",  # line 1549
    "--hidden-size": "int",  # line 1555
    "--num-attention-heads": "int",  # line 1560
    "--ffn-hidden-size": "int",  # line 1557
    "--group-query-attention": "switch",  # line 1568
    "--num-query-groups": "int",  # line 1570
    "--kv-channels": "int",  # line 1563
    "--swiglu": "switch",  # line 1646
    "--seq-length": "int",  # line 2850
    "--max-position-embeddings": "int",  # line 1585
    "--hidden-dropout": "float",  # line 1878
    "--attention-dropout": "float",  # line 1876
    "--tensor-model-parallel-size": "int",  # line 2561
    "--pipeline-model-parallel-size": "int",  # line 2563
    "--num-layers-per-virtual-pipeline-stage": "int",  # line 2584
    "--pipeline-model-parallel-layout": "str",  # line 2573
    "--sequence-parallel": "switch",  # line 2224
    "--context-parallel-size": "int",  # line 2704
    # line 2706: nargs "+", no choices; these are the values Transformer Engine's attention takes
    # (transformer_engine/pytorch/attention/dot_product_attention/context_parallel.py at d0067d0da)
    "--cp-comm-type": ("p2p", "all_gather", "a2a", "a2a+p2p"),
    "--micro-batch-size": "int",  # line 1974
    "--global-batch-size": "int",  # line 1981
    "--use-distributed-optimizer": "switch",  # line 2658
    "--use-megatron-fsdp": "switch",  # line 2674
    "--data-parallel-sharding-strategy": ("no_shard", "optim", "optim_grads", "optim_grads_params"),  # line 2677
    "--no-gradient-accumulation-fusion": "switch",  # line 2226
    "--ckpt-format": ("torch", "torch_dist", "zarr", "torch_dcp", "fsdp_dtensor"),  # line 2457
    "--overlap-grad-reduce": "switch",  # line 2605
    "--overlap-param-gather": "switch",  # line 2629
    "--recompute-granularity": ("full", "selective"),  # line 2010
    "--recompute-method": ("uniform", "block"),  # line 2031
    "--recompute-num-layers": "int",  # line 2040
    "--bf16": "switch",  # line 2520
    "--fp16": "switch",  # line 2518
    "--fp8-format": ("e4m3", "hybrid"),  # line 1313
    "--fp8-recipe": ("tensorwise", "delayed", "mxfp8", "blockwise"),  # line 1318
    "--accumulate-allreduce-grads-in-fp32": "switch",  # line 2543
    "--grad-reduce-in-bf16": "switch",  # line 2522
    "--attention-backend": ATTN_BACKEND,  # line 1562: type AttnBackend[name], choices list(AttnBackend)
    "--no-masked-softmax-fusion": "switch",  # line 2157
    "--no-bias-dropout-fusion": "switch",  # line 2171
    "--no-bias-gelu-fusion": "switch",  # line 2162
    "--no-bias-swiglu-fusion": "switch",  # line 2165
    "--tp-comm-overlap": "switch",  # line 2090
    "--no-overlap-p2p-communication": "switch",  # line 2591
    "--cross-entropy-loss-fusion": "switch",  # line 2182
    "--cross-entropy-fusion-impl": ("native", "te"),  # line 2185
    "--cuda-graph-impl": ("none", "local", "transformer_engine"),  # line 1405
    "--cuda-graph-scope": ("full", "attn", "full_iteration"),  # line 1411
}


def parse(text: str) -> Tuple[Dict[str, Optional[str]], int]:
    """The flags of an export (name -> value, None for a switch), as bash and argparse read
    them, checked against ``ARGUMENTS``; and the world size of its launch line."""
    body = text[text.index("MEGATRON_ARGS=(\n") + len("MEGATRON_ARGS=(\n"):text.index("\n)\n")]
    words = shlex.split(body)
    flags: Dict[str, Optional[str]] = {}
    while words:
        name = words.pop(0)
        assert name in ARGUMENTS, f"{name} is no argument of {SOURCE['path']} at {SOURCE['release']}"
        assert name not in flags, f"{name} given twice"
        kind = ARGUMENTS[name]
        value = None if kind == "switch" else words.pop(0)
        if isinstance(kind, tuple):
            assert value in kind, (name, value)
        elif kind in ("int", "float"):
            {"int": int, "float": float}[kind](value)
        flags[name] = value
    launch = re.search(r"--nnodes (\d+) --nproc-per-node (\d+)", text)
    return flags, int(launch.group(1)) * int(launch.group(2))


def layout_of(flags: Dict[str, Optional[str]], world: int) -> Tuple[Layout, List[int]]:
    """The layout the flags describe (DP is what TP x PP leave of the world, as Megatron-LM
    computes it) and the layers of each model chunk."""
    tp, pp, layers = (int(flags[f]) for f in ("--tensor-model-parallel-size", "--pipeline-model-parallel-size",
                                               "--num-layers"))
    if "--pipeline-model-parallel-layout" in flags:
        stages = flags["--pipeline-model-parallel-layout"].split("|")
        assert stages[0].startswith("E") and stages[-1].endswith("L")
        split = [int(re.fullmatch(r"E?t\*(\d+)L?", stage).group(1)) for stage in stages]
    else:
        per_chunk = int(flags.get("--num-layers-per-virtual-pipeline-stage") or layers // pp)
        split = [per_chunk] * (layers // per_chunk)
    assert sum(split) == layers
    zero = ("zero3" if flags.get("--data-parallel-sharding-strategy") == "optim_grads_params" else
            "zero1" if "--use-distributed-optimizer" in flags else "none")
    recompute, recompute_layers = flags.get("--recompute-granularity") or "none", 0
    if flags.get("--recompute-method") == "block":
        recompute_layers = int(flags["--recompute-num-layers"])
    elif recompute == "full":
        assert (flags["--recompute-method"], flags["--recompute-num-layers"]) == ("uniform", "1")
    v = len(split) // pp
    cp = int(flags.get("--context-parallel-size") or 1)
    return Layout(tp=tp, pp=pp, dp=world // (tp * pp * cp), micro_batch=int(flags["--micro-batch-size"]),
                  schedule="interleaved" if v > 1 else "1f1b", virtual_stages=v, zero=zero,
                  sequence_parallel="--sequence-parallel" in flags, recompute=recompute,
                  recompute_layers=recompute_layers, cp=cp, cp_comm=flags.get("--cp-comm-type") or "p2p"), split


def expected(case) -> Layout:
    """The layout as the export must say it: no ZeRO over one replica, no sequence
    parallelism at TP 1 (both change nothing there)."""
    return dataclasses.replace(case.layout, zero=case.sharding, sequence_parallel=case.sequence_parallel)


def test_every_feasible_layout_round_trips_through_megatron_lms_own_arguments_or_is_refused_in_one_line(exports, cases):
    exported = []
    for label, case, text in exports("megatron"):
        flags, world = parse(text)
        assert world == case.devices
        layout, split = layout_of(flags, world)
        assert layout == expected(case), (label, case.layout, flags)
        assert split == chunk_split(case)
        assert int(flags["--global-batch-size"]) == case.global_batch
        backend = {"materialised": "unfused"}.get(case.stack.attention) or \
            {"cudnn": "fused"}.get(case.stack.attention_impl, "flash")
        assert flags["--attention-backend"] == backend
        assert ("--tp-comm-overlap" in flags) == (case.stack.tp_overlap and case.layout.tp > 1)
        gathers_hidden = case.sharding == "zero3" or (case.sharding == "zero1" and case.stack.param_gather_overlap)
        assert ("--overlap-param-gather" in flags) == (case.dp_overlap and gathers_hidden)
        assert "--overlap-param-gather" not in flags or "--overlap-grad-reduce" in flags   # validate_args asks it
        exported.append(case.layout)
    # Every branch was met: interleaved and uneven pipelines, each ZeRO mode, each recomputation.
    assert {lay.zero for lay in exported} >= {"none", "zero1", "zero3"}
    assert {lay.recompute for lay in exported} == {"none", "selective", "full"}
    assert any(lay.schedule == "interleaved" for lay in exported)
    assert any(lay.recompute_layers for lay in exported)
    assert any(case.sharding == "zero1" and case.stack.param_gather_overlap for _, case, _ in exports("megatron"))
    assert {(lay.cp, lay.cp_comm) for lay in exported} >= {(1, "p2p"), (2, "p2p"), (4, "all_gather"), (2, "a2a")}
    assert {case.stack.attention_impl for _, case, _ in exports("megatron")} == {"cudnn", "flash2"}
    assert len(exported) > len(cases) // 2


@pytest.mark.parametrize("label, why", [
    ("fsdp", "zero=fsdp keeps whole gradients"),
    ("hsdp", "zero=hsdp shards within each node"),
])
def test_what_megatron_lm_cannot_run_is_refused_naming_it(built_cases, label, why):
    case = dict(built_cases)[label]
    with pytest.raises(Unexpressible, match=why):
        export("megatron", case)


def test_tp_overlap_without_sequence_parallelism_and_an_uneven_split_are_told_apart(cases):
    """TP overlap needs sequence parallelism (refused without it); an uneven split is spelled
    out as Megatron-Core's pipeline layout, the extra layers on the first chunks."""
    no_sp = next(case for label, case in cases if label == "core-2024" and case.layout.tp > 1
                 and not case.layout.sequence_parallel)
    with pytest.raises(Unexpressible, match="without sequence parallelism"):
        export("megatron", no_sp)
    uneven = next(case for label, case in cases if label == "core-2024" and case.layout.tp == 1
                  and case.model.layers % (case.layout.pp * case.layout.virtual_stages))
    flags, _ = parse(export("megatron", uneven))
    stages = flags["--pipeline-model-parallel-layout"].split("|")
    assert stages[0] == f"Et*{-(-uneven.model.layers // len(stages))}"


@pytest.mark.parametrize("framework", ["megatron", "nemo", "torchtitan"])
def test_another_frameworks_dp_engine_and_unwritten_switches_are_refused_naming_them(cases, framework):
    """A ZeRO-3 layout costed on DeepSpeed's engine is not what any of these frameworks runs;
    fp8 weights and offloaded layers are not written yet, nor an fp8 recipe other than delayed
    scaling or CUDA-graphed parts of a layer but by Megatron-LM (its --fp8-recipe, its attention
    sublayer's graphs): each refused, never dropped."""
    zero3 = next(case for label, case in cases if case.layout.zero == "zero3")
    deepspeed = dataclasses.replace(zero3, stack=dataclasses.replace(zero3.stack, dp_engine="deepspeed-zero3-2021"))
    with pytest.raises(Unexpressible, match="stack.dp_engine=deepspeed-zero3-2021 with zero=zero3"):
        export(framework, deepspeed)
    fsdp2 = dataclasses.replace(zero3, stack=dataclasses.replace(zero3.stack, dp_engine="pytorch-fsdp2"))
    if framework != "torchtitan":            # FSDP2 is torchtitan's own engine
        with pytest.raises(Unexpressible, match="stack.dp_engine=pytorch-fsdp2 with zero=zero3"):
            export(framework, fsdp2)
    for label, case in cases:                # XLA runs every mode itself: MaxText's config is written by none
        xla = dataclasses.replace(case, stack=dataclasses.replace(case.stack, dp_engine="xla"))
        with pytest.raises(Unexpressible, match=f"stack.dp_engine=xla with zero={case.layout.zero}"):
            export(framework, xla)
    for field, value in (("fp8_params", True), ("offload_layers", 4), ("moe_fused_mlp", True)):
        stack = dataclasses.replace(zero3.stack, gemm_precision="fp8", **{field: value})
        with pytest.raises(Unexpressible, match=f"stack.{field}="):
            export(framework, dataclasses.replace(zero3, stack=stack))
    current = dataclasses.replace(zero3, stack=dataclasses.replace(zero3.stack, gemm_precision="fp8",
                                                                   fp8_recipe="tensorwise"))
    if framework == "megatron":   # core_v0.15.3's --fp8-recipe (line 1318) takes Megatron-Core's recipe names
        assert parse(export(framework, current))[0]["--fp8-recipe"] == "tensorwise"
    else:
        with pytest.raises(Unexpressible, match="stack.fp8_recipe='tensorwise'"):
            export(framework, current)
    for field, value in (("expert_bias", True), ("expert_clamp", 7.0)):   # GPT-OSS's experts: not written yet
        with pytest.raises(Unexpressible, match=f"model.{field}="):
            export(framework, dataclasses.replace(zero3, model=dataclasses.replace(zero3.model, **{field: value})))
    attn = dataclasses.replace(zero3, stack=dataclasses.replace(zero3.stack, cuda_graph_scope="attn"))
    router = dataclasses.replace(zero3, stack=dataclasses.replace(zero3.stack, cuda_graph_scope="attn+moe_router"))
    with pytest.raises(Unexpressible, match="stack.cuda_graph_scope='attn\\+moe_router': the export does not write "
                                           "(attn, )?moe_router$"):
        export(framework, router)
    if framework == "megatron":   # core_v0.15.3 graphs the attention sublayer alone; the others write no graphs
        flags, _ = parse(export(framework, attn))
        assert (flags["--cuda-graph-impl"], flags["--cuda-graph-scope"]) == ("transformer_engine", "attn")
    else:
        with pytest.raises(Unexpressible, match="stack.cuda_graph_scope='attn': the export does not write attn"):
            export(framework, attn)
    fused = dataclasses.replace(zero3, stack=dataclasses.replace(zero3.stack, cross_entropy="te"))
    if framework == "megatron":   # Megatron-LM writes Transformer Engine's fused loss; the others do not yet
        flags, _ = parse(export(framework, fused))
        assert "--cross-entropy-loss-fusion" in flags and flags["--cross-entropy-fusion-impl"] == "te"
    else:
        with pytest.raises(Unexpressible, match="stack.cross_entropy='te'"):
            export(framework, fused)


@pytest.mark.parametrize("framework, setting", [("megatron", "--kv-channels 128"),
                                                ("nemo", "recipe.model.config.kv_channels = 128")])
def test_heads_of_their_own_width_are_written_as_kv_channels(built_cases, framework, setting):
    case = dict(built_cases)["head-dim"]
    assert setting in export(framework, case)
    plain = dict(built_cases)["cp-ring"]
    assert "kv-channels" not in export(framework, plain) and "kv_channels" not in export(framework, plain)


@pytest.mark.parametrize("framework", ["megatron", "nemo", "torchtitan"])
def test_no_export_writes_jaxs_dots_recomputation(built_cases, framework):
    """The ``dots`` policy keeps the linear layers' outputs: no PyTorch framework's setting."""
    case = next(case for _, case in built_cases)
    dots = dataclasses.replace(case, layout=dataclasses.replace(case.layout, recompute="dots"))
    with pytest.raises(Unexpressible, match="recompute=dots is JAX's"):
        export(framework, dots)


@pytest.mark.parametrize("framework", ["megatron", "nemo", "torchtitan"])
def test_no_export_writes_flashattention_1(built_cases, framework):
    """Megatron-Core's and NeMo's flash backend runs FlashAttention-2 or -3, torchtitan's SDPA
    its own choice: none writes FlashAttention-1, so each refuses it in one line."""
    case = next(case for _, case in built_cases if case.stack.flash)
    fa1 = dataclasses.replace(case, stack=dataclasses.replace(case.stack, attention_impl="flash1"))
    with pytest.raises(Unexpressible, match="stack.attention_impl=flash1 is FlashAttention-1"):
        export(framework, fa1)


@pytest.mark.parametrize("framework", ["megatron", "nemo"])
def test_megatrons_exports_refuse_torchtitans_per_op_recomputation(built_cases, framework):
    """``op`` is torchtitan's own policy (every second matrix product's output kept): Megatron has
    no setting for it; the torchtitan export writes it."""
    with pytest.raises(Unexpressible, match="recompute=op is torchtitan's per-op"):
        export(framework, dict(built_cases)["op"])


@pytest.mark.parametrize("framework", ["megatron", "nemo"])
def test_megatrons_exports_refuse_torchtitans_llama_block_compiled_or_not(built_cases, framework):
    case = dict(built_cases)["cp-ring"]
    for style in ("llama_eager", "llama_compiled"):
        block = dataclasses.replace(case, stack=dataclasses.replace(case.stack, elementwise=style))
        with pytest.raises(Unexpressible, match=f"stack.elementwise={style} is torchtitan's"):
            export(framework, block)


@pytest.mark.parametrize("framework", ["megatron", "nemo"])
def test_megatrons_exports_refuse_a_layout_costed_on_dtensor_tensor_parallelism(cases, framework):
    case = next(case for label, case in cases if label == "core-2024" and case.layout.tp > 1)
    dtensor = dataclasses.replace(case, stack=dataclasses.replace(case.stack, tp_engine="dtensor"))
    with pytest.raises(Unexpressible, match="stack.tp_engine=dtensor is PyTorch's DTensor"):
        export(framework, dtensor)
    lay = dataclasses.replace(case.layout, tp=1, dp=case.layout.dp * case.layout.tp, sequence_parallel=False)
    single = dataclasses.replace(dtensor, layout=lay)
    assert export(framework, single)       # without TP the engine runs nothing
