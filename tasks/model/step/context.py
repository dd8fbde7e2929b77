"""What a whole-step costing shares (``StepContext``) and the layouts being costed, as arrays
(``StepLayouts``): the inputs of ``tasks.model.step.plan`` and of its parts."""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from functools import cached_property
from typing import Any, Callable, Mapping, NamedTuple, Optional, Sequence, Tuple

import numpy as np

from tasks.model.collectives.dp_protocol import dp_ranks_per_node, group_ranks, hybrid
from tasks.model.collectives.groups import DISTINCT_MIN, distinct_numbered, number_column
from tasks.model.kernels.layer import Block, expert_params, layer_params
from tasks.model.kernels.model_blocks import dense_block, model_block, moe_layer_share
from tasks.model.kernels.sustained import training_device
from tasks.model.terms.layout import code
from tasks.model.step.memory import USABLE_HBM_FRACTION, usable_memory_bytes, weights_sharded
from tasks.model.terms.specs import HardwareProfile, TransformerModel
from tasks.model.terms.stack import Stack

__all__ = ["StepContext", "StepLayouts", "DistinctShapes", "as_layouts", "distinct_shapes", "on_distinct",
           "local_seq", "layer_weights_per_device", "recomputed_share", "tp_crosses_nodes", "split_shortfall"]


@dataclass(frozen=True)
class StepContext:
    """What every layout of a search shares: model, cluster, global batch (sequences) and the
    software stack (``tasks.model.terms.stack``; the study's 2022 Megatron-LM by default).

    ``memory_fraction`` of HBM is usable (``memory.usable_memory_bytes``; the rest: framework,
    allocator fragmentation, communication buffers); ``flop_vs_bw`` and ``dp_slowdown`` are the scenarios of
    method.md §5.4-5.5 (compute time / m; overlapped communication slowed by interference).
    """

    model: TransformerModel
    hardware: HardwareProfile
    devices: int
    global_batch: int
    dtype_bytes: int = 2
    memory_fraction: float = USABLE_HBM_FRACTION
    flop_vs_bw: float = 1.0
    dp_slowdown: float = 1.0
    stack: Stack = field(default_factory=Stack)

    @property
    def memory_limit_bytes(self) -> float:
        return float(usable_memory_bytes(self.hardware.hbm_gb, self.memory_fraction))

    @cached_property
    def device(self) -> HardwareProfile:
        """The hardware as the step's compute runs on it: at the rates it sustains through
        training (``tasks.model.kernels.sustained.training_device``)."""
        return training_device(self.hardware)

    @property
    def block(self) -> Block:
        """The model's layer shape under this stack's attention kernel (its mixture-of-experts
        layer where it has experts: ``model_blocks.model_block``)."""
        return model_block(self.model, flash=self.stack.flash)

    @property
    def dense_block(self) -> Block:
        """A dense layer of the model under this stack's attention kernel."""
        return dense_block(self.model, flash=self.stack.flash)

    @property
    def moe_share(self) -> float:
        """The share of the layers that are ``block``'s (``model_blocks.moe_layer_share``)."""
        return moe_layer_share(self.model)

    @property
    def vocab(self) -> float:
        return float(self.model.vocab or 0)


@dataclass(frozen=True)
class StepLayouts:
    """The layouts being costed, as float arrays (codes as flags), with what follows from them."""

    tp: np.ndarray
    pp: np.ndarray
    dp: np.ndarray
    micro_batch: np.ndarray
    microbatches: np.ndarray     # micro-batches per step: global batch / (DP x micro-batch)
    stages: np.ndarray           # virtual stages per device (1 for 1F1B)
    interleaved: np.ndarray
    zero: np.ndarray             # codes of layout.ZERO_MODES
    sequence_parallel: np.ndarray
    recompute: np.ndarray        # codes of layout.RECOMPUTE_MODES
    layers_per_stage: np.ndarray
    recomputed_share: np.ndarray  # share of each model chunk's layers full recomputation repeats (0 without it)
    cp: np.ndarray               # context-parallel ranks each sequence is split over
    cp_comm: np.ndarray          # codes of layout.CP_COMMS
    ep: np.ndarray               # expert-parallel ranks a MoE layer's experts are split over (1: none)
    etp: np.ndarray              # expert-tensor-parallel ranks each expert is split over (1: none)
    dispatcher: np.ndarray       # codes of layout.MOE_DISPATCHERS

    @cached_property
    def _numbered(self) -> dict:
        """Each field's numbering (``groups.number_column``), as ``distinct`` has found it (these
        layouts never change)."""
        return {}

    @cached_property
    def _distinct_memo(self) -> dict:
        """Each field list's distinct rows, as ``distinct`` has found them."""
        return {}

    def distinct(self, names: Sequence[str]) -> Tuple[np.ndarray, np.ndarray]:
        """(one layout index per distinct combination of the fields or properties ``names``;
        each layout's index among those), as ``groups.distinct_rows``. Each field is numbered
        once however many lists it is in, and a list that extends one found before starts from
        that one's rows."""
        memo, fields_numbered, names = self._distinct_memo, self._numbered, tuple(names)
        if names in memo:
            return memo[names]
        n = len(np.atleast_1d(self.tp))
        start = max((k for k in range(1, len(names)) if names[:k] in memo), default=0)
        numbered = [(len(memo[names[:start]][0]), memo[names[:start]][1])] if start else []
        for name in names[start:]:
            if name not in fields_numbered:
                fields_numbered[name] = number_column(_rows(getattr(self, name), n))
            numbered.append(fields_numbered[name])
        memo[names] = distinct_numbered(numbered)
        return memo[names]

    def take(self, index: np.ndarray) -> "StepLayouts":
        """The layouts at ``index`` (positions into these), as ``StepLayouts``."""
        n = len(np.atleast_1d(self.tp))
        return StepLayouts(**{f.name: _rows(getattr(self, f.name), n)[index] for f in fields(self)})

    @property
    def edp(self) -> np.ndarray:
        """Expert data parallelism: the ranks holding the same experts, over which their
        gradients are reduced and their optimizer states sharded. Megatron-Core lays the
        experts on a grid of its own, ETP x EP x EDP x PP = the world (``parallel_state``'s
        expert order tp-ep-dp-pp, TP there being ETP; megatron/core/parallel_state.py at
        d98e8a64dd): EDP = TP x CP x DP / (ETP x EP)."""
        return self.tp * self.cp * self.dp / (self.etp * self.ep)

    def ep_crosses(self, hw: HardwareProfile) -> np.ndarray:
        """Whether an EP group (EP ranks at a stride of ETP) spans more than one node."""
        return self.etp * self.ep > hw.devices_per_node

    def ep_local_ranks(self, hw: HardwareProfile) -> np.ndarray:
        """Ranks of one EP group on one node."""
        return np.clip(hw.devices_per_node // self.etp, 1.0, self.ep)

    def edp_group(self, hw: HardwareProfile) -> tuple:
        """(ranks, ranks on one node, whether it spans nodes) of an EDP group, EDP ranks at a
        stride of ETP x EP."""
        stride = self.etp * self.ep
        return (self.edp, np.clip(hw.devices_per_node // stride, 1.0, self.edp),
                stride * self.edp > hw.devices_per_node)

    @property
    def grad_ranks(self) -> np.ndarray:
        """Ranks the DP collectives and the sharding modes span: DP x CP. Context-parallel ranks
        hold the same weights and each its part of every sequence's gradient, so Megatron-Core
        reduces gradients and shards the distributed optimizer over the data-parallel group with
        context parallelism (``get_data_parallel_group(with_context_parallel=True)`` in
        megatron/core/distributed/param_and_grad_buffer.py at d98e8a64dd); with ranks numbered
        TP fastest, then CP, then DP (``parallel_state``'s order tp-cp-ep-dp-pp) it is one group
        of DP x CP ranks at a stride of TP, as a DP group is without CP."""
        return self.dp * self.cp

    @property
    def heads_split(self) -> np.ndarray:
        """Whether CP splits heads rather than sequences in attention (the a2a exchange)."""
        return (self.cp > 1) & (self.cp_comm == code("cp_comm", "a2a"))

    def local_seq(self, seq_len: float) -> np.ndarray:
        """Tokens of each ``seq_len``-token sequence a device holds (``local_seq``)."""
        return local_seq(seq_len, self.cp)

    @property
    def core_recomputed(self) -> np.ndarray:
        """Where the backward pass runs the attention core's forward again (selective
        recomputation, and the ``dots`` policy, which keeps only the linear layers' outputs);
        full recomputation's repeat is ``recomputed_share``."""
        return (self.recompute == code("recompute", "selective")) | (self.recompute == code("recompute", "dots"))

    @property
    def op_tp_share(self):
        """Share of a layer's forward TP collectives the ``op`` policy runs again, those
        torchtitan's save list does not keep (it holds the reduce-scatter, not the all-gather or
        the all-reduce, ``kernels.op_checkpoint``): with sequence parallelism the two
        all-gathers, half of the forward's TP traffic, without it both all-reduces; 0 under
        every other mode."""
        op = self.recompute == code("recompute", "op")
        return np.where(op, np.where(self.sequence_parallel, 0.5, 1.0), 0.0) if np.any(op) else 0.0

    @property
    def tp_repeat_share(self) -> np.ndarray:
        """Share of a layer's forward TP collectives its backward runs again (full and ``op``)."""
        return self.recomputed_share + self.op_tp_share

    def recomputed(self, forward, core, linear, op_repeat=0.0):
        """What the backward pass runs again of one layer's forward, given its ``forward``,
        its attention core's ``core``, its linear layers' ``linear`` and what torchtitan's
        per-op policy runs again, ``op_repeat`` (seconds or kernel counts;
        ``LayerCost.op_repeat_fwd``): the whole forward for ``recomputed_share`` of the layers
        (full), the core (selective), everything but the linear layers (``dots``: JAX's
        ``checkpoint_dots_with_no_batch_dims`` keeps the outputs of GEMMs without batch
        dimensions, the linear layers', and recomputes the rest, attention and element-wise
        kernels alike), ``op_repeat`` (``op``: every second linear product and all but the
        fused attention of the rest, ``kernels.op_checkpoint``)."""
        selective = self.recompute == code("recompute", "selective")
        repeat = self.recomputed_share * forward + np.where(selective, core, 0)
        dots = self.recompute == code("recompute", "dots")
        if np.any(dots):
            repeat = repeat + np.where(dots, np.subtract(forward, linear), 0)
        op = self.recompute == code("recompute", "op")
        return repeat + np.where(op, op_repeat, 0) if np.any(op) else repeat

    @property
    def sharded(self) -> np.ndarray:
        """ZeRO-3 or FSDP: weights re-gathered every micro-batch."""
        return weights_sharded(self.zero)

    def tp_crosses(self, hw: HardwareProfile) -> np.ndarray:
        return tp_crosses_nodes(self.tp, hw)

    def cp_crosses(self, hw: HardwareProfile) -> np.ndarray:
        """Whether a CP group (TP x CP consecutive ranks) spans more than one node."""
        return self.tp * self.cp > hw.devices_per_node

    def dp_crosses(self, hw: HardwareProfile) -> np.ndarray:
        return self.tp * self.grad_ranks > hw.devices_per_node

    def dp_local_ranks(self, hw: HardwareProfile) -> np.ndarray:
        """Ranks of one DP (x CP) group on one node (``dp_ranks_per_node``)."""
        return dp_ranks_per_node(self.tp, self.grad_ranks, hw.devices_per_node)

    def shard_ranks(self, hw: HardwareProfile) -> np.ndarray:
        """Ranks each layout's sharding mode splits model states over: the DP (x CP) group, or
        for a hybrid mode (``dp_protocol.ShardingMode.hybrid``) its ranks on one node."""
        return np.where(hybrid(self.zero), self.dp_local_ranks(hw), self.grad_ranks)

    def dp_group(self, group: str, hw: HardwareProfile) -> tuple:
        """(ranks, ranks on one node, whether it spans nodes, share of a tensor each device
        moves) of the DP collectives' ``group`` (``dp_protocol.DP_GROUPS``)."""
        ranks, local, share = group_ranks(group, self.grad_ranks, self.dp_local_ranks(hw))
        crosses = self.dp_crosses(hw) if group == "dp" else (ranks > 1) & (group == "replicate")
        return ranks, local, crosses, share

    def pp_crosses(self, hw: HardwareProfile) -> np.ndarray:
        return self.tp * self.grad_ranks * self.pp > hw.devices_per_node


class DistinctShapes(NamedTuple):
    """The distinct (micro-batch, TP, sequence parallelism, CP, whether CP splits heads, EP, ETP)
    of a set of layouts, of which a space holds a few dozen, and each layout's index into them."""

    micro_batch: np.ndarray
    tp: np.ndarray
    sequence_parallel: np.ndarray
    cp: np.ndarray
    heads_split: np.ndarray
    ep: np.ndarray
    etp: np.ndarray
    index: np.ndarray

    def local_seq(self, seq_len: float) -> np.ndarray:
        """Tokens of each ``seq_len``-token sequence a device of each shape holds (``local_seq``)."""
        return local_seq(seq_len, self.cp)

    def spread(self, values, shape) -> np.ndarray:
        """Per-shape ``values`` back over the layouts, as an array of ``shape``."""
        return np.asarray(values)[self.index].reshape(shape)


def distinct_shapes(lay: StepLayouts) -> DistinctShapes:
    """The layouts' distinct (micro-batch, TP, SP, CP, heads split by CP, EP, ETP), all that a
    layer's compute, the output layer's and a TP collective depend on: each is costed once and
    spread back."""
    names = ("micro_batch", "tp", "cp", "sequence_parallel", "heads_split", "ep", "etp")
    first, inverse = lay.distinct(names)
    n = len(np.atleast_1d(lay.tp))
    b, tp, cp, sp, split, ep, etp = (np.asarray(_rows(getattr(lay, name), n)[first], dtype=np.float64)
                                     for name in names)
    return DistinctShapes(b, tp, sp > 0, cp, split > 0, ep, etp, np.asarray(inverse).reshape(-1))


def on_distinct(names: Sequence[str], figures: Callable[..., Any], lay: StepLayouts, *args: Any) -> Any:
    """``figures(lay, *args)``, worked out once per distinct combination of the ``StepLayouts``
    fields ``names`` and given to every layout that shares it. ``figures`` must read no other
    field of ``lay``; what it returns (arrays over the layouts on their last axis, scalars,
    and dicts or tuples of them) comes back over all the layouts. Called as it comes for fewer
    than ``DISTINCT_MIN`` layouts, or where more than half of them are distinct."""
    n = len(np.atleast_1d(lay.tp))
    if n < DISTINCT_MIN:
        return figures(lay, *args)
    first, inverse = lay.distinct(names)
    if 2 * len(first) > n:
        return figures(lay, *args)
    return _spread(figures(lay.take(first), *args), inverse)


def _rows(values, n: int) -> np.ndarray:
    """``values`` as an array of ``n`` rows (a view where they are not one already)."""
    return values if isinstance(values, np.ndarray) and values.shape == (n,) else np.broadcast_to(values, (n,))


def _spread(result: Any, inverse: np.ndarray, seen: Optional[dict] = None) -> Any:
    """``result`` over distinct layouts, given back to each layout (``on_distinct``); an array
    that appears more than once in it is spread once (``seen``: those spread so far, by id)."""
    seen = {} if seen is None else seen
    if isinstance(result, dict):
        return {key: _spread(value, inverse, seen) for key, value in result.items()}
    if isinstance(result, tuple):
        return tuple(_spread(value, inverse, seen) for value in result)
    if np.ndim(result) == 0:
        return result
    if id(result) not in seen:
        seen[id(result)] = (result, np.take(result, inverse, axis=-1))    # the first keeps the id taken
    return seen[id(result)][1]


def layer_weights_per_device(lay: StepLayouts, ctx: StepContext) -> Tuple[np.ndarray, np.ndarray]:
    """(the TP-split weights, the routed experts' weights) of the stage's mean layer on one
    device: ``layer.layer_params`` / TP, and ``layer.expert_params`` / (EP x ETP), each the
    mean over the model's dense and MoE layers (``StepContext.moe_share``); the experts' are 0
    for a dense model. The first are reduced and sharded over DP x CP, the second over EDP."""
    m, share = ctx.model, ctx.moe_share
    h, heads = float(m.hidden), float(m.heads)
    split = share * layer_params(h, heads, ctx.block)
    if share < 1.0:
        split = split + (1.0 - share) * layer_params(h, heads, ctx.dense_block)
    experts = share * expert_params(h, ctx.block) / (lay.ep * lay.etp)
    return split / lay.tp, np.broadcast_to(np.asarray(experts, dtype=np.float64), np.shape(lay.tp))


def local_seq(seq_len: float, cp) -> np.ndarray:
    """Tokens of a ``seq_len``-token sequence one device holds: SL / CP (context parallelism
    splits each sequence over CP ranks; 1: the whole)."""
    return float(seq_len) / np.asarray(cp, dtype=np.float64)


def tp_crosses_nodes(tp, hw: HardwareProfile) -> np.ndarray:
    """Whether a TP group of ``tp`` ranks (numbered fastest) spans more than one node."""
    return np.asarray(tp) > hw.devices_per_node


def busiest_stage_layers(layers: float, pp, virtual_stages, extra: float = 0.0):
    """Layers on the busiest pipeline stage: ``virtual_stages`` chunks of ceil(layers / (PP x v))
    layers (layers / PP when they divide evenly). ``extra``: the embedding and loss counted as
    layers in the split (``Stack.split_shortfall``'s sum; only where PP > 1): a middle stage
    then holds ceil((layers + extra) / (PP x v)) a chunk."""
    pp = np.asarray(pp, dtype=np.float64)
    chunks = pp * virtual_stages
    return np.ceil((layers + np.where(pp > 1, extra, 0.0)) / chunks) * virtual_stages


def split_shortfall(pp, stack: Stack) -> Tuple[np.ndarray, np.ndarray]:
    """(first, last) stage's layers fewer than the busiest (middle) stage's, per PP degree: the
    stack's ``split_shortfall`` where PP > 1, else 0 (one stage builds every layer)."""
    first, last = stack.split_shortfall
    piped = np.asarray(pp) > 1
    return np.where(piped, first, 0.0), np.where(piped, last, 0.0)


def microbatches_per_step(global_batch: float, dp, micro_batch):
    """Micro-batches each replica runs a step: global batch / (DP x micro-batch), whole ones."""
    return np.floor(global_batch / (np.asarray(dp, dtype=np.float64) * np.asarray(micro_batch, dtype=np.float64)))


def as_layouts(layouts: Mapping[str, np.ndarray], dp: np.ndarray, ctx: StepContext) -> StepLayouts:
    """Layout columns (``tasks.model.terms.layout`` codes) as ``StepLayouts``."""
    tp, pp, b = (np.asarray(layouts[k], dtype=np.float64) for k in ("tp", "pp", "micro_batch"))
    interleaved = np.asarray(layouts["schedule"]) == code("schedule", "interleaved")
    stages = np.where(interleaved, np.asarray(layouts["virtual_stages"], dtype=np.float64), 1.0)
    recompute = np.asarray(layouts["recompute"], dtype=np.int64)
    layers_per_stage = busiest_stage_layers(float(ctx.model.layers), pp, stages, sum(ctx.stack.split_shortfall))
    ones = np.ones(np.shape(tp))
    return StepLayouts(tp=tp, pp=pp, dp=dp, micro_batch=b, microbatches=microbatches_per_step(ctx.global_batch, dp, b),
                       stages=stages,
                       interleaved=interleaved, zero=np.asarray(layouts["zero"], dtype=np.int64),
                       sequence_parallel=np.asarray(layouts["sequence_parallel"], dtype=bool),
                       recompute=recompute, layers_per_stage=layers_per_stage,
                       recomputed_share=recomputed_share(recompute, layouts.get("recompute_layers"),
                                                         layers_per_stage / stages),
                       cp=ones * np.asarray(layouts.get("cp", 1), dtype=np.float64),
                       cp_comm=(ones * np.asarray(layouts.get("cp_comm", 0))).astype(np.int64),
                       ep=ones * np.asarray(layouts.get("ep", 1), dtype=np.float64),
                       etp=ones * np.asarray(layouts.get("etp", 1), dtype=np.float64),
                       dispatcher=(ones * np.asarray(layouts.get("dispatcher", 0))).astype(np.int64))


def recomputed_share(recompute, recompute_layers, chunk_layers):
    """Share of a model chunk's ``chunk_layers`` that full recomputation repeats: 1 under full
    recomputation of every layer, min(N, chunk) / chunk for ``recompute_layers`` N > 0
    (Megatron-LM's block method: the first N layers of each chunk), 0 otherwise. ``recompute``:
    codes of ``layout.RECOMPUTE_MODES``; ``recompute_layers``: None or an array (0: every layer)."""
    full = (np.asarray(recompute) == code("recompute", "full")).astype(np.float64)
    if recompute_layers is None:
        return full
    n = np.asarray(recompute_layers, dtype=np.float64)
    return full * np.where(n > 0, np.minimum(n, chunk_layers) / chunk_layers, 1.0)
