"""A parallel layout of one training step, as plain data, and its structural checks.

A layout splits ``devices`` accelerators into TP x CP x PP x DP groups (DP is what is left:
``devices / (tp * cp * pp)``; CP, context parallelism, splits each sequence) and says how the
step runs: micro-batch size, pipeline schedule (1F1B or interleaved with ``virtual_stages``
model chunks per device), how ZeRO/FSDP shards the model states over DP, sequence
parallelism, activation recomputation, and how CP ranks exchange keys and values.

Layouts travel as columns (one NumPy array per field, one row per layout) so that a whole
space is checked and costed in one call. String-valued fields are integer codes in
columns (an index into ``SCHEDULES``, ``ZERO_MODES``, ``RECOMPUTE_MODES``, ``CP_COMMS``) and names in
``Layout`` and in the lake. Nothing here imports Ray; checks run before any distributed
call, as plain data (after torchtitan's ``ParallelDims``).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Callable, Dict, List, Mapping, Sequence, Tuple

import numpy as np

__all__ = [
    "SCHEDULES",
    "ZERO_MODES",
    "RECOMPUTE_MODES",
    "SEARCHED_RECOMPUTE_MODES",
    "CP_COMMS",
    "MOE_DISPATCHERS",
    "CODED_FIELDS",
    "code",
    "encode",
    "decode",
    "LAYOUT_FIELDS",
    "LATER_LAYOUT_FIELDS",
    "LAYOUT_LEGEND",
    "STRUCTURAL_CONSTRAINTS",
    "Layout",
    "layout_from_row",
    "recompute_layers_problem",
    "cp_problem",
    "structural_violations",
    "first_violation",
    "family",
    "families",
]

#: Pipeline schedules: "1f1b" (PipeDream-Flush, Narayanan et al. 2021) and "interleaved"
#: (each device holds ``virtual_stages`` model chunks, Narayanan et al. 2021 §2.2).
SCHEDULES: Tuple[str, ...] = ("1f1b", "interleaved")
#: How model states are sharded over the DP group (Rajbhandari et al., ZeRO, 2020):
#: "none" (plain DP), "zero1" (optimizer states), "zero3" (parameters, gradients and
#: optimizer states, re-gathered every micro-batch, DeepSpeed stage 3), "fsdp" (PyTorch
#: FSDP FULL_SHARD with gradient accumulation under ``no_sync``: parameters re-gathered
#: every micro-batch, gradients kept unsharded and reduce-scattered once per step, only
#: their shard kept where a step has one micro-batch), "hsdp"
#: (FSDP's HYBRID_SHARD: "fsdp" among the DP group's ranks on each node, the reduced
#: gradient shards all-reduced across nodes).
ZERO_MODES: Tuple[str, ...] = ("none", "zero1", "zero3", "fsdp", "hsdp")
#: Activation recomputation (Korthikanti et al., arXiv 2205.05198): none, selective
#: (the attention core: scores, softmax, dropout, context), full (the whole layer); and
#: "dots", JAX's ``jax.checkpoint_policies.checkpoint_dots_with_no_batch_dims`` around each
#: layer (MaxText's remat policies "minimal" and, where nothing is named "context",
#: "minimal_flash", MaxText/layers/models.py): the linear layers' GEMM outputs and the layer's
#: input are kept, and everything else of the forward (the attention core, whose GEMMs have
#: batch dimensions, and every element-wise kernel) runs again in the backward pass; "op",
#: torchtitan's per-op selective checkpointing (``[activation_checkpoint] mode = "selective"``
#: with ``selective_ac_option = "op"``): the fused attention's output and every second linear
#: product's are kept, the other products and every element-wise kernel run again
#: (``tasks.model.kernels.op_checkpoint``).
RECOMPUTE_MODES: Tuple[str, ...] = ("none", "selective", "full", "dots", "op")
#: The recomputation modes a search space varies unless it names its own: Megatron's three.
SEARCHED_RECOMPUTE_MODES: Tuple[str, ...] = RECOMPUTE_MODES[:3]

#: How context-parallel ranks exchange keys and values (Megatron-Core's ``cp_comm_type``, run by
#: Transformer Engine's ``attention/dot_product_attention/context_parallel.py`` at d0067d0da):
#: "p2p" passes each rank's K/V chunk around a ring, one hop per attention step, behind that
#: step's attention (``AttnFuncWithCPAndKVP2P``, Megatron-LM's default ``--cp-comm-type p2p``);
#: "all_gather" gathers the whole K/V before a layer's attention and reduce-scatters their
#: gradients after it (``AttnFuncWithCPAndKVAllGather``; the variant Llama 3 trained with,
#: Grattafiori et al. 2024, arXiv 2407.21783 §3.3.2); "a2a" swaps sequence for heads by
#: all-to-all, Q, K and V before attention and its output after (``AttnFuncWithCPAndQKVOA2A``,
#: DeepSpeed Ulysses: Jacobs et al. 2023, arXiv 2309.14509), so each rank attends whole
#: sequences with 1/CP of its TP rank's heads. Names in a ``Layout``, codes in columns.
CP_COMMS: Tuple[str, ...] = ("p2p", "all_gather", "a2a")

#: How a mixture of experts' tokens reach their experts' ranks and come back
#: (``tasks.model.collectives.ep_exchange``). "alltoall": Megatron-Core's
#: ``MoEAlltoAllTokenDispatcher``, an NCCL all-to-all over the EP group that sends each routed
#: copy of a token to its expert's rank; "flex": its ``MoEFlexTokenDispatcher`` over DeepEP or
#: HybridEP, which sends a token once to each other node holding one of its experts and
#: forwards it to those experts' ranks inside the node over NVLink (DeepSeek-AI, DeepSeek-V3
#: technical report, arXiv 2412.19437 §3.2.2; deepseek-ai/DeepEP's normal kernels). Names in a
#: ``Layout``, codes in columns; a layout without EP dispatches nothing (alltoall).
MOE_DISPATCHERS: Tuple[str, ...] = ("alltoall", "flex")

#: The layout fields that are names in a ``Layout`` and in the lake, integer codes in columns.
CODED_FIELDS: Dict[str, Tuple[str, ...]] = {"schedule": SCHEDULES, "zero": ZERO_MODES, "recompute": RECOMPUTE_MODES,
                                            "cp_comm": CP_COMMS, "dispatcher": MOE_DISPATCHERS}


def code(field: str, name: str) -> int:
    """The code of one name of a coded field, e.g. ``code("zero", "fsdp") == 3``."""
    names = CODED_FIELDS[field]
    if name not in names:
        raise ValueError(f"{field}={name!r}: choose one of {', '.join(names)}")
    return names.index(name)


def encode(field: str, names: Sequence[str]) -> np.ndarray:
    """Names of a coded field as an int64 array of codes."""
    return np.asarray([code(field, name) for name in names], dtype=np.int64)


def decode(field: str, codes: Sequence[int]) -> List[str]:
    """Codes of a coded field back to their names."""
    names = CODED_FIELDS[field]
    return [names[int(c)] for c in codes]


#: The fields of a layout a search varies and the lake keeps, in table order (a ``Layout``'s
#: ``recompute_layers``, which only a run states, is 0 for each of them).
LAYOUT_FIELDS: Tuple[str, ...] = ("tp", "pp", "dp", "micro_batch", "schedule", "virtual_stages", "zero",
                                  "sequence_parallel", "recompute", "cp", "cp_comm", "ep", "etp", "dispatcher")
#: The fields of ``LAYOUT_FIELDS`` a row of an earlier lake schema may lack (context parallelism
#: from search schema 3, expert parallelism from 4): absent, each takes its ``Layout`` default.
LATER_LAYOUT_FIELDS: Tuple[str, ...] = ("cp", "cp_comm", "ep", "etp", "dispatcher")

#: What the words of ``Layout.describe`` mean, on one line.
LAYOUT_LEGEND = ("tpN/ppN/dpN: tensor-, pipeline-, data-parallel degree; pp2(i5): interleaved schedule, 5 model "
                 "chunks per device; bN: micro-batch of N sequences; none/zero1/zero3/fsdp/hsdp: how DP shards model "
                 "states; cpN: context-parallel degree, cpN(ag) exchanging K/V by all-gather, cpN(a2a) by "
                 "all-to-all of Q, K, V and the output; epN: expert-parallel degree, epN(etpM) with M-way expert "
                 "tensor parallelism, (flex) dispatching a token once per node; sp: sequence parallel; "
                 "sele/full: selective/full activation recomputation; dots: the linear layers' outputs kept, all "
                 "else recomputed; op: torchtitan's per-op checkpointing, every second linear layer's output kept; "
                 "full(5): full "
                 "recomputation of 5 layers per model chunk, the others keep their activations")

#: Structural constraints, checked before any cost: name -> what must hold.
STRUCTURAL_CONSTRAINTS: Dict[str, str] = {
    "tp_divides_heads": "TP divides the model's attention heads",
    "tp_pp_divides_devices": "TP x PP x CP divides the device count",
    "stages_hold_layers": "every model chunk holds a layer: layers >= PP x virtual stages (an uneven split puts "
                          "the extra layers on the first stages, as Megatron-Core's uneven pipeline split does)",
    "batch_divisible": "the global batch is divisible by DP x micro-batch",
    "schedule_fits": "an interleaved schedule has PP > 1, virtual stages > 1 and micro-batches a multiple of PP; "
                     "1F1B has one virtual stage",
    "cp_splits_heads": "an all-to-all CP exchange (a2a) splits each TP rank's query and key/value heads over CP "
                       "(Transformer Engine's AttnFuncWithCPAndQKVOA2A divides the heads it holds by CP)",
    "experts_fit": "expert parallelism needs a mixture of experts whose experts EP divides, and ETP x EP divides TP x "
                   "CP x DP (Megatron-Core's expert grid, ETP x EP x EDP x PP = the world); a mixture of experts "
                   "under TP > 1 runs sequence parallel (megatron/core/transformer/moe/moe_layer.py refuses it "
                   "without)",
}


@dataclass(frozen=True)
class Layout:
    """One parallel layout (one row of a layout table), with names for coded fields."""

    tp: int
    pp: int
    dp: int
    micro_batch: int
    schedule: str = "1f1b"
    virtual_stages: int = 1
    zero: str = "none"
    sequence_parallel: bool = False
    recompute: str = "none"
    #: Under full recomputation, how many layers of each model chunk it repeats, the first ones
    #: (Megatron-LM's --recompute-method block with --recompute-num-layers); the others keep
    #: their activations. 0: every layer.
    recompute_layers: int = 0
    #: Context parallelism: ranks each sequence is split over (1: none), and how they exchange
    #: keys and values (``CP_COMMS``).
    cp: int = 1
    cp_comm: str = "p2p"
    #: Expert parallelism (a mixture of experts): ranks the experts are split over, and ranks
    #: each expert is split over (expert tensor parallelism); 1: none.
    ep: int = 1
    etp: int = 1
    dispatcher: str = "alltoall"

    def __post_init__(self) -> None:
        for name in CODED_FIELDS:
            code(name, getattr(self, name))
        for name in ("tp", "pp", "dp", "micro_batch", "virtual_stages", "cp", "ep", "etp"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name}={getattr(self, name)} must be at least 1")
        problem = recompute_layers_problem(self.recompute, self.recompute_layers)
        if problem:
            raise ValueError(f"recompute_layers={self.recompute_layers} {problem}")

    def columns(self) -> Dict[str, np.ndarray]:
        """This layout as a one-row column table with coded fields."""
        row = asdict(self)
        for name in CODED_FIELDS:
            row[name] = code(name, row[name])
        return {name: np.asarray([value]) for name, value in row.items()}

    def describe(self) -> str:
        """A short human label, e.g. ``tp8 pp4(i2) dp16 b1 zero1 sp sele`` (``LAYOUT_LEGEND``
        spells it out)."""
        pp = f"pp{self.pp}" + (f"(i{self.virtual_stages})" if self.schedule == "interleaved" else "")
        cp = [f"cp{self.cp}" + {"all_gather": "(ag)", "a2a": "(a2a)"}.get(self.cp_comm, "")] if self.cp > 1 else []
        ep = [f"ep{self.ep}" + (f"(etp{self.etp})" if self.etp > 1 else "")
              + ("(flex)" if self.dispatcher == "flex" else "")] if self.ep * self.etp > 1 else []
        parts = [f"tp{self.tp}", *cp, pp, f"dp{self.dp}", *ep, f"b{self.micro_batch}", self.zero]
        parts += ["sp"] if self.sequence_parallel else []
        parts += [] if self.recompute == "none" else [self.recompute[:4] + (f"({self.recompute_layers})"
                                                                            if self.recompute_layers else "")]
        return " ".join(parts)


def layout_from_row(value_of: Callable[[str], object]) -> Layout:
    """The ``Layout`` of a stored row (field names, not codes), ``value_of(field)`` giving each
    ``LAYOUT_FIELDS`` entry's value: a field the row lacks (None, or NaN, as a row of an
    earlier schema lacks ``LATER_LAYOUT_FIELDS``) takes the ``Layout`` default; counts read as
    whole numbers, sequence parallelism as a flag."""
    def read(name: str, value):
        return value if isinstance(value, str) else bool(value) if name == "sequence_parallel" else int(value)

    values = {name: value_of(name) for name in LAYOUT_FIELDS}
    return Layout(**{name: read(name, v) for name, v in values.items()
                     if v is not None and not (isinstance(v, float) and v != v)})


def recompute_layers_problem(recompute: str, recompute_layers: int) -> str:
    """What is wrong with ``recompute_layers`` beside ``recompute`` (empty: nothing): a count of
    layers is never negative and asks for full recomputation."""
    if recompute_layers < 0:
        return "must be 0 (every layer) or a count of layers"
    if recompute_layers and recompute != "full":
        return f"needs recompute full, not {recompute}"
    return ""


def cp_problem(cp: int, seq_len: int, flash: bool) -> str:
    """What is wrong with context parallelism of ``cp`` ranks for ``seq_len``-token sequences
    (empty: nothing): it needs fused attention (Megatron-Core runs it only in Transformer
    Engine's attention: megatron/core/transformer/dot_product_attention.py at d98e8a64dd asserts
    "Context parallelism is only supported by TEDotProductAttention!"), and each sequence must
    split into 2 x CP equal chunks (Megatron's causal load balance gives each rank two)."""
    if cp > 1 and not flash:
        return "needs fused (flash) attention: Megatron-Core runs context parallelism only in Transformer Engine's"
    if cp > 1 and seq_len % (2 * cp):
        return f"does not split {seq_len}-token sequences into 2 x CP = {2 * cp} equal chunks"
    return ""


def structural_violations(layouts: Mapping[str, np.ndarray], *, heads: int, layers: int, devices: int,
                          global_batch: int, kv_heads: int = 0, experts: int = 0) -> Dict[str, np.ndarray]:
    """For each of ``STRUCTURAL_CONSTRAINTS``, a bool array: True where a layout breaks it.

    ``layouts`` holds ``tp``, ``pp``, ``micro_batch``, ``schedule`` (code),
    ``virtual_stages`` (and ``cp``, 1 where not given; ``dp`` if given, otherwise it is
    ``devices / (tp * pp * cp)``), ``cp_comm`` (codes; p2p where not given), ``ep``, ``etp`` and
    ``sequence_parallel`` (1, 1 and false where not given). ``kv_heads``: 0 for as many as
    ``heads``; ``experts``: the model's routed experts (0: a dense model).
    Vectorised; every constraint is checked on every layout (not only the first that
    fails), so a caller can say how many layouts each one rules out.
    """
    tp = np.asarray(layouts["tp"], dtype=np.int64)
    pp = np.asarray(layouts["pp"], dtype=np.int64)
    b = np.asarray(layouts["micro_batch"], dtype=np.int64)
    v = np.asarray(layouts["virtual_stages"], dtype=np.int64)
    interleaved = np.asarray(layouts["schedule"]) == code("schedule", "interleaved")
    cp = np.asarray(layouts.get("cp", 1), dtype=np.int64)
    model_parallel = tp * pp * cp
    dp = np.asarray(layouts["dp"], dtype=np.int64) if "dp" in layouts else devices // np.maximum(model_parallel, 1)
    splits = devices % model_parallel != 0
    if "dp" in layouts:
        splits |= model_parallel * dp != devices
    replicas = np.maximum(dp * b, 1)
    batch_bad = (global_batch % replicas != 0) | (dp < 1)
    microbatches = global_batch // replicas
    schedule_bad = np.where(interleaved, (pp < 2) | (v < 2) | (microbatches % pp != 0), v != 1)
    a2a = np.asarray(layouts.get("cp_comm", 0)) == code("cp_comm", "a2a")
    kv = kv_heads or heads
    per_rank = np.maximum(heads // np.maximum(tp, 1), 1), np.maximum(kv // np.maximum(tp, 1), 1)
    heads_bad = a2a & (cp > 1) & ((per_rank[0] % cp != 0) | (per_rank[1] % cp != 0))
    ep = np.asarray(layouts.get("ep", 1), dtype=np.int64)
    etp = np.asarray(layouts.get("etp", 1), dtype=np.int64)
    expert_ranks = np.maximum(ep * etp, 1)
    if experts:
        sp = np.asarray(layouts.get("sequence_parallel", False), dtype=bool)
        experts_bad = (experts % np.maximum(ep, 1) != 0) | ((tp * cp * dp) % expert_ranks != 0) | ((tp > 1) & ~sp)
    else:
        experts_bad = expert_ranks > 1
    return {
        "tp_divides_heads": heads % tp != 0,
        "tp_pp_divides_devices": splits,
        "stages_hold_layers": layers < pp * v,
        "batch_divisible": batch_bad | splits,
        "schedule_fits": schedule_bad,
        "cp_splits_heads": heads_bad,
        "experts_fit": experts_bad,
    }


def first_violation(violations: Mapping[str, np.ndarray]) -> np.ndarray:
    """Index + 1 into ``STRUCTURAL_CONSTRAINTS`` of the first constraint each layout breaks;
    0 where it breaks none."""
    code = np.zeros(np.shape(next(iter(violations.values()))), dtype=np.int64)
    for i, name in reversed(list(enumerate(STRUCTURAL_CONSTRAINTS, start=1))):
        code = np.where(violations[name], i, code)
    return code


def family(tp: int, pp: int, dp: int, zero: str, cp: int = 1) -> str:
    """The strategy family of a layout, as Fernandez et al. (arXiv 2411.13055) compare
    them: "fsdp" (data parallel only, fully sharded), "hsdp" (data parallel only, sharded
    within each node and replicated across nodes), "dp" (data parallel only, replicated or
    ZeRO-1), else the parallel dimensions in use joined by "+", e.g. "tp+pp+dp" (and
    "tp+cp+pp" where sequences are split)."""
    if tp == 1 and pp == 1 and cp == 1:
        return {"zero3": "fsdp", "fsdp": "fsdp", "hsdp": "hsdp"}.get(zero, "dp")
    parts = [name for name, degree in (("tp", tp), ("cp", cp), ("pp", pp), ("dp", dp)) if degree > 1]
    return "+".join(parts)


def families(tp: np.ndarray, pp: np.ndarray, dp: np.ndarray, zero_code: np.ndarray, cp=None) -> np.ndarray:
    """``family`` of each row of a layout table (zero as codes; ``cp`` None: 1 throughout)."""
    cp = np.ones(len(tp), dtype=np.int64) if cp is None else cp
    return np.asarray([family(int(t), int(p), int(d), z, int(c))
                       for t, p, d, z, c in zip(tp, pp, dp, decode("zero", zero_code), cp, strict=True)],
                      dtype=object)
