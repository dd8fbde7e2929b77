"""What an export is made of, and the rules every export shares.

An ``ExportCase`` is the winning layout of a search with what it was costed under: the
model, the cluster, the device count, the global batch and the software stack. Each
framework module (``megatron``, ``nemo``, ``torchtitan``) turns one into that framework's
own flags or config, or refuses it with ``Unexpressible``: one line naming what the
framework cannot express (exit status 2, as every bad input of the CLI).

The exports write what was costed, not what might run faster: a communication the step
model left exposed is not overlapped in the export, and a layout whose communication the
framework would run otherwise (another ZeRO cadence, another split of the layers) is
refused rather than exported as something it is not.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import FrozenSet, List, Tuple

from sweeps.errors import UserError
from tasks.model.collectives.dp_protocol import DP_ENGINES, dp_ranks_per_node
from tasks.model.step.context import split_shortfall
from tasks.model.terms.layout import Layout
from tasks.model.terms.specs import HardwareProfile, TransformerModel
from tasks.model.terms.stack import DEFAULT_ATTENTION_IMPL, DEFAULT_FP8_RECIPE, Stack, graph_scopes

__all__ = ["Source", "ExportCase", "Unexpressible", "header", "chunk_split", "check_common", "attention_backend"]


@dataclass(frozen=True)
class Source:
    """Where a mapping's names come from: the framework, the release followed, its
    repository and commit, and the files that define the names."""

    framework: str
    release: str
    repository: str
    commit: str
    paths: Tuple[str, ...]

    def line(self) -> str:
        return (f"{self.framework} {self.release} ({self.repository}@{self.commit[:10]}): names from "
                f"{', '.join(self.paths)}")


@dataclass(frozen=True)
class ExportCase:
    """A layout and what it was costed under. ``notes``: lines for the export's header
    comment (the study, its step time and throughput, time and cost to train)."""

    layout: Layout
    model: TransformerModel
    hardware: HardwareProfile
    devices: int
    global_batch: int
    stack: Stack
    stack_name: str
    notes: Tuple[str, ...] = ()

    @property
    def microbatches(self) -> int:
        """Micro-batches per step on each data-parallel replica."""
        return self.global_batch // (self.layout.dp * self.layout.micro_batch)

    @property
    def grad_ranks(self) -> int:
        """Ranks gradients are reduced and model states sharded over: DP x CP (context-parallel
        ranks hold the same weights; ``tasks.model.step.context.StepLayouts.grad_ranks``)."""
        return self.layout.dp * self.layout.cp

    @property
    def sharding(self) -> str:
        """The layout's ZeRO mode, "none" where DP x CP is 1: over one replica nothing is
        sharded and nothing is reduced, whatever the mode says."""
        return "none" if self.grad_ranks == 1 else self.layout.zero

    @property
    def sequence_parallel(self) -> bool:
        """Sequence parallelism splits something only under TP > 1."""
        return self.layout.sequence_parallel and self.layout.tp > 1

    @property
    def tp_overlap(self) -> bool:
        """The stack overlaps TP communication, and there is some (TP > 1)."""
        return self.stack.tp_overlap and self.layout.tp > 1

    @property
    def dp_overlap(self) -> bool:
        """The stack overlaps DP communication with the backward pass, and there is some (DP x CP > 1)."""
        return self.stack.dp_overlap and self.grad_ranks > 1

    @property
    def gather_overlap(self) -> bool:
        """The step model hides the layout's weight gathers behind compute: zero3's, prefetched
        wherever DP communication overlaps, or zero1's once the stack overlaps it with the next
        forward pass (``Stack.param_gather_overlap``). Megatron-Core's overlap_param_gather."""
        return self.dp_overlap and (self.sharding == "zero3"
                                    or (self.sharding == "zero1" and self.stack.param_gather_overlap))

    @property
    def shard_ranks(self) -> int:
        """Ranks a hybrid sharding mode splits model states over: the DP (x CP) group's ranks on
        one node (``dp_protocol.dp_ranks_per_node``)."""
        return int(dp_ranks_per_node(self.layout.tp, self.grad_ranks, self.hardware.devices_per_node))

    @property
    def nodes(self) -> int:
        return math.ceil(self.devices / self.hardware.devices_per_node)

    @property
    def per_node(self) -> int:
        return min(self.devices, self.hardware.devices_per_node)


class Unexpressible(UserError):
    """A layout or stack a framework cannot express; the message names what, on one line."""

    def __init__(self, framework: str, what: str) -> None:
        self.framework, self.what = framework, what
        super().__init__(f"--export {framework}: {what}")


def header(case: ExportCase, source: Source, comment: str = "#") -> List[str]:
    """The comment lines an export opens with: the notes, the run's shape, the source of its names."""
    lay, model = case.layout, case.model
    lines = [*case.notes,
             f"layout {lay.describe()}: {model.name} on {case.devices} x {case.hardware.name} ({case.nodes} nodes of "
             f"{case.per_node}), global batch {case.global_batch} sequences of {model.seq_len} tokens "
             f"({case.microbatches} micro-batches per replica), stack {case.stack_name}",
             source.line()]
    return [f"{comment} {line}" for line in lines]


def chunk_split(case: ExportCase) -> List[int]:
    """Layers of each model chunk (PP x virtual stages of them) in layer order: the extra
    layers of an uneven split on the first chunks, as the step model charges them (its
    busiest stage holds chunks of ceil(layers / chunks) layers,
    ``tasks.model.step.context.busiest_stage_layers``). Under a pipeline whose stack counts
    the embedding and/or the loss as layers (``Stack.pipeline_split``), those count in the
    split and the first and/or the last chunk builds a layer fewer."""
    chunks = case.layout.pp * case.layout.virtual_stages
    first, last = (int(short) for short in split_shortfall(case.layout.pp, case.stack))
    size, extra = divmod(case.model.layers + first + last, chunks)
    split = [size + 1] * extra + [size] * (chunks - extra)
    split[0], split[-1] = split[0] - first, split[-1] - last
    return split


def attention_backend(stack: Stack) -> str:
    """Megatron-Core's attention backend (``AttnBackend``, ``--attention-backend``) for the
    stack's attention: "unfused" materialised, "fused" cuDNN's kernel, "flash" FlashAttention
    (megatron/core/models/common/language_module/language_module.py at 309ffca6 sets
    NVTE_FUSED_ATTN 0 and NVTE_FLASH_ATTN 1 for it). Which FlashAttention runs is the
    installed package's: Transformer Engine takes FlashAttention-3 on Hopper where its
    flash_attn_interface is installed (``_use_flash_attn_3``, transformer_engine/pytorch/
    attention.py at v1.13), FlashAttention-2 otherwise."""
    if not stack.flash:
        return "unfused"
    return "fused" if stack.attention_impl == DEFAULT_ATTENTION_IMPL else "flash"


def check_common(case: ExportCase, framework: str, *, fused_loss: bool = False,
                 graph_scopes_written: FrozenSet[str] = frozenset(), split_written: bool = False,
                 torchtitan_features: bool = False, recipe_written: bool = False) -> None:
    """What no export expresses: a model that is not a decoder (each writes causal GPT-style
    pretraining), a stack without a causal mask, FlashAttention-1's kernel, the ``dots``
    recomputation (JAX's), a sharding mode run by another framework's DP engine
    (``dp_protocol.DP_ENGINES``, ``DpEngine.export``), and the switches ``_unwritten_switches``
    names (``fused_loss``, ``recipe_written``: the export writes that switch); CUDA-graphed parts
    of a layer (``Stack.cuda_graph_scope``) beyond those the export writes
    (``graph_scopes_written``); a pipeline whose split counts the
    embedding or the loss as layers (``Stack.pipeline_split``) where the export does not write it
    (``split_written``); torchtitan's own per-op checkpointing (recompute ``op``), Llama block
    (``llama_eager``, ``llama_compiled``), input projections apart (``projections`` separate) and
    DTensor tensor parallelism (``tp_engine`` dtensor at TP above 1) but for torchtitan
    (``torchtitan_features``)."""
    unwritten_scopes = sorted(graph_scopes(case.stack.cuda_graph_scope) - graph_scopes_written)
    if unwritten_scopes:
        raise Unexpressible(framework, f"stack.cuda_graph_scope={case.stack.cuda_graph_scope!r}: the export does not "
                                       f"write {', '.join(unwritten_scopes)}")
    for refused, why in ((case.model.architecture != "decoder", f"model {case.model.name} is an "
                          f"{case.model.architecture} model; the export writes decoder (GPT-style) pretraining"),
                         (not case.stack.causal, "stack.causal=false: decoder pretraining masks attention causally"),
                         (case.stack.attention_impl == "flash1", "stack.attention_impl=flash1 is FlashAttention-1, "
                          "which no exported framework runs (their flash backends run FlashAttention-2 or -3)"),
                         (case.layout.recompute == "dots", "recompute=dots is JAX's checkpoint_dots_with_no_batch_dims "
                          "policy (MaxText's remat_policy minimal); the export writes none, selective or full")):
        if refused:
            raise Unexpressible(framework, why)
    torchtitans_own = ((case.layout.recompute == "op", "recompute=op is torchtitan's per-op selective "
                                                        "checkpointing; the export writes none, selective or full"),
                       (case.stack.tp_engine == "dtensor" and case.layout.tp > 1,
                        "stack.tp_engine=dtensor is PyTorch's DTensor tensor parallelism; the export writes its "
                        "framework's own"),
                       (case.stack.elementwise in ("llama_eager", "llama_compiled"),
                        f"stack.elementwise={case.stack.elementwise} is torchtitan's Llama block (run "
                        f"{'without' if case.stack.elementwise == 'llama_eager' else 'with'} torch.compile); the "
                        "export writes fused or eager"),
                       (case.stack.projections == "separate",
                        "stack.projections=separate is torchtitan's Llama (wq, wk, wv and w1, w3 apart); the export "
                        "writes its framework's fused projections"))
    for applies, why in torchtitans_own:
        if applies and not torchtitan_features:
            raise Unexpressible(framework, why)
    engine = DP_ENGINES[case.stack.dp_engine]
    if case.layout.zero in engine.modes and engine.export != framework:
        raise Unexpressible(framework, f"stack.dp_engine={engine.name} with zero={case.layout.zero}: that engine is "
                                       f"another framework's; the export writes {framework}'s own")
    if case.stack.pipeline_split != "layers" and case.layout.pp > 1 and not split_written:
        raise Unexpressible(framework, f"stack.pipeline_split={case.stack.pipeline_split!r}: the export does not "
                                       "write it yet")
    for field, value in _unwritten_switches(case, fused_loss=fused_loss, recipe_written=recipe_written):
        if value:
            raise Unexpressible(framework, f"{field}={value!r}: the export does not write it yet")


def _unwritten_switches(case: ExportCase, *, fused_loss: bool, recipe_written: bool):
    """(field, value) of each switch no export writes yet, a value that is not falsy where the
    case sets it: fp8 weights, offloaded layers, a fused MoE MLP, GPT-OSS's expert biases and
    clamp; a fused cross entropy unless ``fused_loss`` and an fp8 recipe other than delayed
    scaling unless ``recipe_written`` (the export writes them)."""
    stack = case.stack
    recipe = None if recipe_written or stack.fp8_recipe == DEFAULT_FP8_RECIPE else stack.fp8_recipe
    loss = None if fused_loss or stack.cross_entropy == "unfused" else stack.cross_entropy
    return (("stack.fp8_params", stack.fp8_params), ("stack.offload_layers", stack.offload_layers),
            ("stack.fp8_recipe", recipe), ("stack.cross_entropy", loss), ("stack.moe_fused_mlp", stack.moe_fused_mlp),
            ("model.expert_bias", case.model.expert_bias), ("model.expert_clamp", case.model.expert_clamp))
