"""The data-parallel protocol of each way of sharding model states (``layout.ZERO_MODES``):
which model states it splits over the DP group, which collectives it runs on a stage's
weights, how often, and what compute each may hide behind. The one statement of it: the
step's DP time, its DP traffic, its latency floor, the memory of its model states and a
winner's per-layer comparison all read ``SHARDING`` (a new mode is one entry here).

Sources: Rajbhandari et al. 2020 (ZeRO, arXiv 1910.02054) §5 for what each stage shards and
moves; PyTorch FSDP FULL_SHARD with gradient accumulation under ``no_sync`` (Zhao et al.
2023, arXiv 2304.11277: parameters gathered before the forward and again before the backward
of each unit, gradients kept unsharded across micro-batches and reduce-scattered once);
Megatron-LM's DDP and distributed optimizer (gradients reduced once per step behind
the last micro-batch's backward with ``overlap_grad_reduce``, the updated weights gathered
after the optimizer step); PyTorch FSDP's HYBRID_SHARD (torch 2.13.0, git cf30153c4c:
torch/distributed/fsdp/_init_utils.py shards over the ranks of one node, a group of
``device_count()`` ranks from ``_init_intra_and_inter_node_groups``, or a 2-D device mesh's
inner dimension; _runtime_utils.py ``_reduce_grad`` reduce-scatters a unit's gradient in that
group and all-reduces the reduced shard across the nodes, ``_inter_node_pg``, on its own
stream behind the backward; under ``no_sync`` neither runs; a synchronised backward frees
each unit's unsharded gradient once it is reduced, ``flat_param.grad = None`` in
``_reduce_grad``, keeping only the shard, so a step of one micro-batch holds no whole gradient).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Callable, Dict, FrozenSet, Optional, Tuple

import numpy as np

from tasks.model.terms.layout import ZERO_MODES, code
from tasks.model.terms.stack import DP_ENGINE_NAMES, Stack

__all__ = ["DP_GROUPS", "GRANULARITIES", "DpCollective", "ShardingMode", "SHARDING", "HIDING_WINDOWS", "DpEngine",
           "DP_ENGINES",
           "sharding_for", "sharding_of", "by_mode", "shards", "hybrid", "dp_ranks_per_node", "group_ranks",
           "windows"]

#: What compute a DP collective may run behind: the micro-batch's forward or backward on
#: the stage, or nothing (the step waits for all of it).
HIDING_WINDOWS: Tuple[str, ...] = ("forward", "backward", "none")

#: The group a DP collective runs among: the whole DP group ("dp"); the DP group's ranks on
#: one node ("shard", ``step.context.StepLayouts.dp_local_ranks``), over which a hybrid mode
#: splits its model states; or one rank of each node ("replicate": DP / shard ranks, one
#: rank per node, each group on its own NIC), across which a hybrid mode reduces the shards.
DP_GROUPS: Tuple[str, ...] = ("dp", "shard", "replicate")

#: How a DP collective splits a stage's weights into calls: one per layer (and one for the
#: stage's embedding matrices), one per weight tensor, buckets of a stack's size
#: (``DpEngine.bucket_modes``), or one call a step on the tensors an engine keeps gathered
#: between passes (``DpEngine.persist_below_params``). The step charges each call its own
#: latency, and a window cannot hide the call that starts after (a reduction) or must end
#: before (a forward gather) the compute it sits beside: ``step.dp_comm``'s exposed tail.
GRANULARITIES: Tuple[str, ...] = ("layer", "tensor", "bucket", "persistent")


@dataclass(frozen=True)
class DpCollective:
    """One collective a sharding mode runs on each of a stage's weight tensors (a layer's, and
    the stage's embedding matrices').

    ``op``: all_reduce, reduce_scatter or all_gather (its bytes per value:
    ``step.dp_comm.dp_widths``). ``per_microbatch``: it runs every micro-batch, else once per
    step. ``hidden_by``: a ``HIDING_WINDOWS`` entry. ``needs_dp_overlap``: it hides only
    when the stack overlaps gradient reduction (``Stack.dp_overlap``); otherwise always where
    its window lasts (a prefetched gather). ``under_recompute``: it runs for the layers full
    recomputation repeats, so its count per micro-batch is the layout's recomputed share (a
    weight gather again before the repeated forward). ``group``: a ``DP_GROUPS`` entry; on
    "replicate" it moves the device's shard of the tensor (1 / shard ranks of it).
    ``granularity``: a ``GRANULARITIES`` entry, as the stack's DP engine runs it."""

    op: str
    per_microbatch: bool
    hidden_by: str
    needs_dp_overlap: bool = False
    under_recompute: bool = False
    group: str = "dp"
    granularity: str = "layer"


@dataclass(frozen=True)
class ShardingMode:
    """A ``layout.ZERO_MODES`` entry: the model states it splits ("weights", "gradients",
    "optimizer") over the DP group, or with ``hybrid`` over the DP group's ranks on one node
    (the "shard" group of ``DP_GROUPS``, replicated across nodes), and the collectives it
    runs, in the order they run. ``shards_unaccumulated``: the states it splits too where a
    step runs one micro-batch per replica, so that nothing is accumulated between reductions
    (FSDP keeps a whole gradient only under ``no_sync``)."""

    name: str
    shards: FrozenSet[str]
    collectives: Tuple[DpCollective, ...]
    hybrid: bool = False
    shards_unaccumulated: FrozenSet[str] = frozenset()


_REDUCE_BEHIND_BACKWARD = dict(hidden_by="backward", needs_dp_overlap=True)
_GRADIENTS = frozenset({"gradients"})

#: Every sharding mode, in ``ZERO_MODES`` order.
SHARDING: Dict[str, ShardingMode] = {
    # plain DP: gradients all-reduced once per step
    "none": ShardingMode("none", frozenset(), (
        DpCollective("all_reduce", False, **_REDUCE_BEHIND_BACKWARD),)),
    # ZeRO-1 / distributed optimizer: gradients reduce-scattered once, updated weights all-gathered after the optimizer
    "zero1": ShardingMode("zero1", frozenset({"optimizer"}), (
        DpCollective("reduce_scatter", False, **_REDUCE_BEHIND_BACKWARD),
        DpCollective("all_gather", False, "none"))),
    # ZeRO-3: weights gathered for the forward and again for the backward, gradients reduce-scattered every micro-batch
    "zero3": ShardingMode("zero3", frozenset({"weights", "gradients", "optimizer"}), (
        DpCollective("all_gather", True, "forward"),
        DpCollective("all_gather", True, "backward"),
        DpCollective("reduce_scatter", True, "backward"))),
    # FSDP FULL_SHARD under no_sync: weights gathered twice every micro-batch, gradients reduce-scattered once per step
    "fsdp": ShardingMode("fsdp", frozenset({"weights", "optimizer"}), (
        DpCollective("all_gather", True, "forward"),
        DpCollective("all_gather", True, "backward"),
        DpCollective("reduce_scatter", False, **_REDUCE_BEHIND_BACKWARD)), shards_unaccumulated=_GRADIENTS),
    # FSDP HYBRID_SHARD under no_sync: FSDP within each node, the reduced gradient shards all-reduced across nodes
    "hsdp": ShardingMode("hsdp", frozenset({"weights", "optimizer"}), (
        DpCollective("all_gather", True, "forward", group="shard"),
        DpCollective("all_gather", True, "backward", group="shard"),
        DpCollective("reduce_scatter", False, **_REDUCE_BEHIND_BACKWARD, group="shard"),
        DpCollective("all_reduce", False, **_REDUCE_BEHIND_BACKWARD, group="replicate")), hybrid=True,
        shards_unaccumulated=_GRADIENTS),
}
assert tuple(SHARDING) == ZERO_MODES and all(code("zero", name) == i for i, name in enumerate(SHARDING)), \
    "one sharding mode per layout.ZERO_MODES entry, in its order, numbered as its code"
assert all(c.group in DP_GROUPS and (c.group == "dp") != mode.hybrid for mode in SHARDING.values()
           for c in mode.collectives), "a hybrid mode runs on its shard and replicate groups, the others on DP"


@dataclass(frozen=True)
class DpEngine:
    """How a framework runs the collectives of the sharding modes in ``modes`` (stack data;
    ``Stack.dp_engine`` names one of ``DP_ENGINES``; the other modes run as ``SHARDING`` has
    them). ``per_tensor``: one collective per weight tensor of a layer
    (``layer.layer_tensors``), where Megatron-style engines run one per layer's weights (a
    bucket); ``serialized_gathers``: the device is synchronised before each weight gather, so
    no gather hides behind compute; ``regather_under_recompute``: full recomputation gathers
    the weights once more for the repeated forward; ``copy_per_rank``: each collective goes
    through PyTorch's list API, which copies the DP group's ranks' parts one copy kernel per
    rank (``kernel_launch_us`` each) on the communication stream; ``gather_copy_out``: each
    weight gather is copied out of the gathered buffer into the parameters on the compute
    stream (the gathered bytes read and written); ``reduce_copy_in``: each gradient
    reduce-scatter's input is assembled on the compute stream (the unsharded gradient read at
    the run's width and written at the reduction's). With ``copy_per_rank`` the copies move
    the whole buffer too (read and written at the achieved HBM bandwidth: PyTorch flattens a
    list's parts into one buffer before the collective, or copies them out after it);
    ``zero_fill_gathers``: each weight gather first fills its output buffer with zeros (one
    write of the gathered bytes); ``persist_below_params``: weight tensors of fewer values on
    a device stay gathered between passes: no pass gathers them, and they are gathered once a
    step, after the optimizer, in one call whose output is copied into each of them one rank
    at a time (a copy kernel per tensor and rank, ``kernel_launch_us`` each; their memory,
    whole O(H) vectors, is not charged). ``bucket_modes``: the modes whose
    collectives it runs on buckets of max(``bucket_min_params``, ``bucket_params_per_rank`` x
    DP) of a stage's weights (counted in parameters, filled from the stage's last layer
    back), where the stack overlaps the reduction with the backward (``Stack.dp_overlap``;
    otherwise one call on the whole stage); its other modes run one collective per layer.
    ``overlap_kernels``: how many of its window's kernels one asynchronous collective call
    hides behind at most, where the framework's scheduler gives each call a fixed budget of
    compute rather than the whole window (0: the whole window, as far as it lasts; a call
    longer than its budget waits for the rest). ``export``: the ``--export`` framework that
    runs it ("" for none)."""

    name: str
    modes: FrozenSet[str] = frozenset()
    per_tensor: bool = False
    serialized_gathers: bool = False
    regather_under_recompute: bool = False
    copy_per_rank: bool = False
    gather_copy_out: bool = False
    reduce_copy_in: bool = False
    bucket_modes: FrozenSet[str] = frozenset()
    bucket_min_params: float = 0.0
    bucket_params_per_rank: float = 0.0
    overlap_kernels: float = 0.0
    zero_fill_gathers: bool = False
    persist_below_params: float = 0.0
    export: str = ""


#: The engines, in ``stack.DP_ENGINE_NAMES`` order. Sources:
#: "megatron": the modes as ``SHARDING`` states them, gathers prefetched behind compute:
#: Megatron-LM's DDP and distributed optimizer (plain DP and ZeRO-1) on buckets, PyTorch
#: FSDP1 (the sharded modes) one unit, a layer, per collective. Megatron-Core at core_v0.15.3
#: (309ffca6): distributed/distributed_data_parallel.py sets ``bucket_size`` (parameters) to
#: max(40,000,000, 1,000,000 x the data-parallel world size) "to ensure that chunks used in NCCL
#: ring-reduce implementations are large enough to remain bandwidth-bound", and to None (one
#: bucket) without ``overlap_grad_reduce``; param_and_grad_buffer.py fills buckets walking the
#: parameters in reverse ("to roughly follow backprop order") and closes one once it holds
#: ``bucket_size``, so the stage's first parameters, the embedding among them, are the last
#: bucket: the remainder, reduced once the backward has ended. The distributed optimizer
#: gathers the updated weights on the same buckets, the first layers' first.
#: "deepspeed-zero3-2021": DeepSpeed's ZeRO stage 3 as of v0.3.13 (microsoft/DeepSpeed, tag
#: v0.3.13, March 2021; Narayanan et al. 2021 compared against that season's release):
#: deepspeed/runtime/zero/partition_parameters.py ``_allgather_param`` gathers one parameter
#: per ``torch.distributed.all_gather`` call into a list of world-size partitions after
#: ``torch.cuda.synchronize()``, and ``_reduce_scatter_gradient`` reduce-scatters one
#: gradient per call from a list; stage3.py ``fetch_sub_module`` gathers a module's
#: parameters when its forward (or backward) hook fires, so a recomputed forward gathers
#: them again, and ``_synchronize_communication`` waits for them with another device
#: synchronisation. PyTorch's ProcessGroupNCCL::allgather and reduce_scatter copy a list's
#: parts to or from a flat buffer one ``copy_`` per rank (pytorch/pytorch
#: torch/lib/c10d/ProcessGroupNCCL.cpp at 00f5dfd57: "Copy the flattened output tensors to
#: the outputs"), and ``_allgather_param`` allocates each gathered buffer with
#: ``torch.zeros``. A parameter of fewer than ``param_persistence_threshold`` values (100,000:
#: deepspeed/runtime/zero/constants.py, ``stage3_param_persistence_threshold``; stage3.py
#: ``persistent_parameters``) is never released after a fetch (``release_sub_module`` checks
#: ``ds_persist``): it is partitioned again once the backward has ended
#: (``_partition_all_parameters``) and gathered once a step by ``_post_step``, through
#: ``_allgather_params``: one ``all_gather`` of all of them, then a Python loop that copies
#: each parameter's part of each rank into it. The layer's biases and LayerNorm weights are such
#: parameters. Megatron's ZeRO-3 example of that season keeps the threshold (its config spells
#: the key ``stage3_param_persitence_threshold``, which DeepSpeed does not read) and reduces by
#: reduce-scatter (``contiguous_gradients`` true: microsoft/DeepSpeedExamples
#: Megatron-LM-v1.1.5-ZeRO3/examples/ds_zero_stage_3_config.json at 44be774).
#: "pytorch-fsdp2": PyTorch's ``fully_shard`` (FSDP2) as torch 2.13.0 (git cf30153c4c) runs
#: FULL_SHARD, a reduce-scatter every backward (_fsdp_param_group.py: ``reduce_grads`` True
#: unless ``set_requires_gradient_sync(False)``, which torchtitan's trainer does not call),
#: so ZeRO-3's collectives, one per module (a layer): _fsdp_collectives.py
#: ``foreach_all_gather_copy_out`` copies the gathered output into each parameter
#: (``split_with_sizes_copy``) on the stream that waits for the unshard, the compute stream,
#: and ``foreach_reduce`` assembles the reduce-scatter input (``_chunk_cat`` of the unsharded
#: gradients, cast to the reduce dtype) on the current stream before the reduce-scatter
#: stream waits for it. Its all-gather copy-in (1/DP of a layer) runs on a stream of its own
#: and is not charged. PyTorch's FSDP1 (flat parameters gathered in place, the gradient cast
#: for the reduction on its post-backward stream, _runtime_utils.py) runs the modes as
#: "megatron" has them.
#: "xla": XLA's SPMD partitioner as MaxText runs it on GPUs (AI-Hypercomputer/maxtext at
#: 948fb88ec, March 2025), every mode its own (no ``--export`` writes MaxText's config), each
#: run as ``SHARDING`` states it: a layer's dense kernel is cast from its fp32 weight to the
#: activations' bf16 before its dot (MaxText/layers/linears.py, ``DenseGeneral``:
#: ``jnp.asarray(kernel, self.dtype)``), and the partitioner gathers the cast kernel where the
#: dot needs it, so weights are gathered, and gradients reduced, at 16 bits (MaxText says so
#: itself: ``maybe_all_gather_kernel_weight_in_expert_parallelism``, "otherwise compiler will
#: handle communication automatically", and base.yml's ``pipeline_fsdp_ag_once``, "the FSDP
#: gathered weights and gradients (typically in bf16)"; ``Stack.main_grad_bytes`` 2). With
#: ``scan_layers`` the layers are one loop body, and the XLA flags of its GPU configs
#: (MaxText/configs/a3/*/*.sh: the latency-hiding scheduler, ``pipelined_all_gather``,
#: ``pipelined_reduce_scatter``, ``while_loop_double_buffering``) issue a layer's gathers an
#: iteration ahead, behind the previous layer's compute, and its gradients' reduce-scatter
#: behind the backward; gathers combine up to ``all_gather_combine_threshold_bytes`` (128 MiB
#: to 2 GiB in those configs), charged as one per layer. Under ``remat_policy`` full the
#: backward repeats a layer's forward, gather included, and its dots read that gather: one
#: gather per layer in the backward, as ``SHARDING``'s ZeRO-3 has it. Gathers read no copy: the
#: gathered buffer is the dot's operand. XLA's latency-hiding scheduler, with neither a profile
#: (``xla_gpu_pgle_profile_file_or_directory_path``) nor ``xla_gpu_enable_analytical_latency_estimator``
#: set, as MaxText's GPU configs leave them, prices a schedule with its approximate estimator
#: (openxla/xla, xla/service/latency_hiding_scheduler.cc ``ApproximateLatencyEstimator`` and
#: xla/service/gpu/gpu_hlo_schedule.cc ``GpuLatencyEstimator``, unchanged from 2023 to 2025):
#: an asynchronous collective's start-to-done latency is 5,000 units (``kHighLatency``), a
#: cuBLAS GEMM, a cuDNN or other custom call and a loop fusion cost 1,000 (``kMediumCost``),
#: "so the LHS will try to schedule approximately 5 of these in between each start/end pair"
#: (the source's own comment); the costly-all-reduce multiplier is off by default
#: (``xla_gpu_enable_approx_costly_collectives`` false), and one all-reduce is in flight at a
#: time (``all_reduce_overlap_limit`` 1). So each call hides behind about five kernels, however
#: long it lasts: ``overlap_kernels`` 5, the kernels counted as the layer's (an approximation:
#: XLA's reduction fusions cost 1 unit and its fusion boundaries are its own).
DP_ENGINES: Dict[str, DpEngine] = {
    "megatron": DpEngine("megatron", bucket_modes=frozenset({"none", "zero1"}), bucket_min_params=40e6,
                         bucket_params_per_rank=1e6),
    "deepspeed-zero3-2021": DpEngine("deepspeed-zero3-2021", frozenset({"zero3"}), per_tensor=True,
                                     serialized_gathers=True, regather_under_recompute=True, copy_per_rank=True,
                                     zero_fill_gathers=True, persist_below_params=100_000.0),
    "pytorch-fsdp2": DpEngine("pytorch-fsdp2", frozenset({"zero3"}), gather_copy_out=True, reduce_copy_in=True,
                              export="torchtitan"),
    "xla": DpEngine("xla", frozenset(ZERO_MODES), overlap_kernels=5.0),
}
assert tuple(DP_ENGINES) == DP_ENGINE_NAMES, "one engine per stack.DP_ENGINE_NAMES entry, in its order"


def _granularity(mode: ShardingMode, engine: DpEngine) -> ShardingMode:
    """``mode`` with its collectives split into calls as ``engine`` splits them
    (``GRANULARITIES``): a tensor a call where the engine runs the mode per tensor, buckets
    where it buckets the mode, else a layer a call (the dataclass default); a collective
    already given another granularity keeps it."""
    kind = "tensor" if engine.per_tensor and mode.name in engine.modes else \
        "bucket" if mode.name in engine.bucket_modes else "layer"
    if kind == "layer":
        return mode
    return replace(mode, collectives=tuple(replace(c, granularity=kind) if c.granularity == "layer" else c
                                           for c in mode.collectives))


def _as_engine_runs(mode: ShardingMode, engine: DpEngine) -> ShardingMode:
    """``mode`` as ``engine`` runs it: its gathers hidden by nothing where the engine
    serialises them, a gather again under recomputation where it re-gathers, and a gather
    once a step, waited for, of the tensors it keeps gathered (``persist_below_params``); its
    collectives split as the engine splits them (``_granularity``)."""
    if mode.name not in engine.modes:
        return _granularity(mode, engine)

    def gather_window(c: DpCollective) -> str:
        return "none" if engine.serialized_gathers and c.op == "all_gather" else c.hidden_by

    collectives = tuple(replace(c, hidden_by=gather_window(c)) for c in mode.collectives)
    if engine.regather_under_recompute:
        collectives += (DpCollective("all_gather", True, "none" if engine.serialized_gathers else "forward",
                                     under_recompute=True),)
    if engine.persist_below_params > 0 and "weights" in mode.shards:
        collectives += (DpCollective("all_gather", False, "none", granularity="persistent"),)
    return _granularity(replace(mode, collectives=collectives), engine)


def sharding_for(engine: str, *, param_gather_overlap: bool = False) -> Dict[str, ShardingMode]:
    """``SHARDING`` as the engine named ``engine`` (a ``DP_ENGINES`` key) runs it: ``SHARDING``
    itself for an engine that runs no mode its own way (read afresh, so a changed entry
    reaches every consumer). With ``param_gather_overlap`` (``Stack.param_gather_overlap``)
    ZeRO-1's once-per-step weight gather runs behind the forward pass instead of before it."""
    chosen = DP_ENGINES[engine]
    table = SHARDING if not (chosen.modes or chosen.bucket_modes) else \
        {name: _as_engine_runs(mode, chosen) for name, mode in SHARDING.items()}
    if not param_gather_overlap:
        return table
    return {**table, "zero1": _gather_behind_forward(table["zero1"])}


def _gather_behind_forward(mode: ShardingMode) -> ShardingMode:
    """``mode`` with its once-per-step weight gathers hidden by the forward pass."""
    return replace(mode, collectives=tuple(replace(c, hidden_by="forward") if c.op == "all_gather"
                                           and not c.per_microbatch else c for c in mode.collectives))


def sharding_of(stack: Stack) -> Dict[str, ShardingMode]:
    """The sharding modes as ``stack`` runs them: ``sharding_for`` its DP engine and its
    weight-gather overlap."""
    return sharding_for(stack.dp_engine, param_gather_overlap=stack.param_gather_overlap)


def by_mode(zero, value: Callable[[ShardingMode], object],
            table: Optional[Dict[str, ShardingMode]] = None) -> np.ndarray:
    """``value(mode)`` for each layout's mode: ``zero`` holds codes (``layout.code``, which
    number the modes in ``SHARDING``'s order); each value is a scalar or an array shaped like
    ``zero``. ``table``: the modes as an engine runs them (``sharding_for``; default
    ``SHARDING``). One pass over the layouts, whatever the number of modes."""
    zero = np.asarray(zero)
    modes = (SHARDING if table is None else table).values()
    return np.choose(zero, [np.asarray(value(mode), dtype=np.float64) for mode in modes])


def shards(zero, state: str, microbatches=None) -> np.ndarray:
    """Whether each layout's mode (codes) splits ``state`` ("weights", "gradients",
    "optimizer") over its DP group (or, for a hybrid mode, its shard group); given each
    layout's ``microbatches`` per step, also where its mode splits it at one micro-batch
    (``ShardingMode.shards_unaccumulated``)."""
    zero = np.asarray(zero)
    always = np.asarray([state in mode.shards for mode in SHARDING.values()])[zero]
    if microbatches is None:
        return always
    single = np.asarray([state in mode.shards_unaccumulated for mode in SHARDING.values()])[zero]
    return always | (single & (np.asarray(microbatches) <= 1))


def hybrid(zero) -> np.ndarray:
    """Whether each layout's mode (codes) splits its model states over the DP group's ranks
    on one node and replicates them across nodes (``ShardingMode.hybrid``)."""
    return np.asarray([mode.hybrid for mode in SHARDING.values()])[np.asarray(zero)]


def dp_ranks_per_node(tp, dp, devices_per_node: int) -> np.ndarray:
    """Ranks of one DP group on one node, ranks numbered TP fastest, then DP (Megatron-LM's
    order; torchtitan's device mesh has the same): floor(devices per node / TP), at least 1 and
    at most DP."""
    return np.clip(np.floor(devices_per_node / np.asarray(tp, dtype=np.float64)), 1.0, dp)


def group_ranks(group: str, dp, shard_ranks):
    """(ranks, ranks on one node, share of a tensor each device moves) of a DP collective's
    ``group`` (``DP_GROUPS``) for a DP group of ``dp`` ranks with ``shard_ranks`` of them on
    one node: the whole group; its ranks on one node; or one rank per node, each moving its
    shard (1 / ``shard_ranks``) of the tensor."""
    dp, local = np.asarray(dp, dtype=np.float64), np.asarray(shard_ranks, dtype=np.float64)
    if group == "dp":
        return dp, local, 1.0
    if group == "shard":
        return local, local, 1.0
    if group == "replicate":
        return dp / local, np.ones_like(dp), 1.0 / local
    raise ValueError(f"group={group!r}: choose one of {', '.join(DP_GROUPS)}")


def windows(mode: ShardingMode, per_microbatch: bool) -> Dict[Tuple[str, bool], Tuple[DpCollective, ...]]:
    """The collectives of ``mode`` that run per micro-batch (or once per step), grouped by
    what hides them: {(hidden_by, needs_dp_overlap): collectives in running order}.
    Collectives sharing a window hide together: the window's compute covers their sum."""
    grouped: Dict[Tuple[str, bool], Tuple[DpCollective, ...]] = {}
    for c in mode.collectives:
        if c.per_microbatch == per_microbatch:
            key = (c.hidden_by, c.needs_dp_overlap)
            grouped[key] = grouped.get(key, ()) + (c,)
    return grouped
