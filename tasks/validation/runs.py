"""Published training runs as plain data: one ``PublishedRun`` per row of a CSV with the
columns of ``conf/data/published_runs.csv``.

Blank cells take these documented defaults (a blank cell means the source does not say):

- ``kv_heads``: ``heads`` (multi-head attention; else it divides ``heads``); ``ffn_hidden``: 4 x
  ``hidden``; ``vocab``: 0 (no embedding or output layer); ``vp``: 1 (no interleaving); ``pp``,
  ``tp``: 1;
- ``gated_mlp`` (a column ``published_runs.csv`` need not have): true for a gated MLP (SwiGLU:
  gate and up projections of ``ffn_hidden``, then down: three matrices); blank: gated where
  ``ffn_hidden`` is not 4 x ``hidden`` (Llama's widths), plain where it is (GPT's), so a gated
  MLP 4 x ``hidden`` wide (PaLM's) says true;
- ``cp``, ``cp_comm``, ``dp``, ``gpus``: as ``tasks.validation.run_layout`` reads them (CP 1,
  ``gpus / (tp x pp x cp)``, ``tp x pp x cp x dp``);
- ``micro_batch``: the fastest one that fits memory, of 1, 2, 4, 8, 16 dividing the batch of a
  replica (what a tuned run uses; the layout search's own rule);
- ``zero``: 0. A ZeRO stage (0 to 3; ZeRO-2 communicates as ZeRO-1) or a sharding mode by
  name (``layout.ZERO_MODES``: none, zero1, zero3, fsdp for FULL_SHARD reducing once per step,
  hsdp for hybrid sharding, FSDP inside a node replicated across nodes);
  ``recompute``: none (``layout.RECOMPUTE_MODES``: none, selective, full, dots, op);
  ``recompute_layers`` (a column ``published_runs.csv`` need not have): 0, full
  recomputation repeats every layer; N > 0 repeats the first N layers of each model chunk
  (Megatron-LM's --recompute-method block --recompute-num-layers N), and asks for
  ``recompute`` full; ``sequence_parallel``, ``flash_attention``, ``tp_overlap``:
  false;
- ``dp_overlap``: the row's ``flash_attention``. A run with fused attention ran a 2023 or
  later stack, where bucketed gradient reduction behind the backward pass is the default
  (Megatron-Core and NeMo with overlap_grad_reduce, PyTorch FSDP); Megatron-LM before
  September 2023 reduced gradients after the backward pass (its --overlap-grad-reduce
  arrived then: NVIDIA/Megatron-LM issues 391 and 456), as Korthikanti et al. §6.3 ran;
- ``pp_overlap`` (a column ``published_runs.csv`` need not have; it matters only where ``vp``
  is above 1): the row's ``flash_attention``, for the same reason. Megatron-LM overlaps an
  interleaved pipeline's sends with compute by default since October 2023 (overlap_p2p_comm,
  commit 4eeff55), NeMo's launcher configs set it, and Megatron-Bridge sets it whenever VP > 1;
- ``elementwise``: fused (``tasks.model.terms.stack.ELEMENTWISE_STYLES``: every stack since
  Megatron-LM of September 2020 fuses biases, the scores' scale and mask; ``eager`` is
  PyTorch's unfused layer, as Megatron-LM ran through its 1.0 release; ``llama_eager`` a
  Llama block of PyTorch ops run uncompiled, as torchtitan runs it without torch.compile;
  ``llama_compiled`` the same block compiled by Inductor, RoPE's complex products and the
  copies around the fused attention left as they were);
- ``grad_reduce_in_fp32`` (a column ``published_runs.csv`` need not have): true keeps and
  reduces the weight gradients in fp32 (``Stack.main_grad_bytes`` 4), false in the run's 16
  bits (2; Megatron-Core's ``grad_reduce_in_fp32``); blank: false for an fp16 run, else true;
- ``dp_engine`` (a column ``published_runs.csv`` need not have): megatron; how the framework
  runs the sharding modes' collectives (``Stack.dp_engine``, ``stack.DP_ENGINE_NAMES``:
  deepspeed-zero3-2021 for DeepSpeed's ZeRO-3 of early 2021);
- ``tp_engine`` (a column ``published_runs.csv`` need not have): megatron; how the framework
  runs tensor parallelism's collectives (``Stack.tp_engine``, ``stack.TP_ENGINE_NAMES``:
  dtensor for PyTorch's DTensor plans, torchtitan's);
- ``param_gather_overlap`` (a column ``published_runs.csv`` need not have): false; true runs
  the distributed optimizer's gather of the updated weights behind the next step's forward
  pass (``Stack.param_gather_overlap``: Megatron-Core's overlap_param_gather, apex's
  DistributedFusedAdam overlap_param_sync), and asks for ``dp_overlap``;
- ``cross_entropy`` (a column ``published_runs.csv`` need not have): unfused; how the loss over
  the logits runs (``Stack.cross_entropy``, ``stack.CROSS_ENTROPY_IMPLS``: te for Transformer
  Engine's fused kernels, Megatron-Core's cross_entropy_loss_fusion with impl te);
- ``fp8_params`` (a column ``published_runs.csv`` need not have): false; true keeps the linear
  weights in fp8 only and gathers them in fp8 (``Stack.fp8_params``, Megatron-Core's
  fp8_param_gather), and asks for ``precision`` fp8;
- ``fp8_recipe`` (a column ``published_runs.csv`` need not have): delayed; how an fp8 run
  scales its GEMMs' inputs (``Stack.fp8_recipe``: tensorwise for per-tensor current scaling,
  Megatron-Bridge's FP8-CS; mxfp8; blockwise);
- ``offload_layers`` (a column ``published_runs.csv`` need not have): 0; N > 0 offloads N
  layers' activations to host memory (``Stack.offload_layers``, Megatron-Core's
  cpu_offloading_num_layers), which Megatron-Core allows with PP 1, no recomputation and
  fewer layers than the model has;
- ``head_dim`` (a column ``published_runs.csv`` need not have): blank, hidden / heads; each
  attention head's width where the model sets its own (``TransformerModel.head_dim``: Qwen3,
  GPT-OSS), and then ``heads`` need not divide ``hidden``;
- ``host_launch_us`` (a column ``published_runs.csv`` need not have): blank, the measured eager
  figure (``Stack.host_launch_us``); 0 for a run that replays CUDA graphs or runs a compiled
  step, whose host never paces the device;
- ``cuda_graph_scope`` (a column ``published_runs.csv`` need not have): blank, none; the parts of
  every layer captured in Transformer Engine's per-layer CUDA graphs while the rest runs
  eagerly, "+"-joined (``Stack.cuda_graph_scope``, ``stack.CUDA_GRAPH_SCOPES``: attn,
  moe_router, moe_preprocess), whose kernels the host's launch path no longer paces;
- ``pipeline_split`` (a column ``published_runs.csv`` need not have): layers; embedding, loss or
  embedding+loss count as layers in the split (``Stack.pipeline_split``, ``PIPELINE_SPLITS``);
- ``attention_impl`` (a column ``published_runs.csv`` need not have): cudnn; the fused kernel of
  a ``flash_attention`` row (``Stack.attention_impl``: flash2, flash3, flash1);
- ``projections`` (a column ``published_runs.csv`` need not have): fused; separate where the
  model's code runs its input projections as products apart (``Stack.projections``:
  torchtitan's Llama; MaxText's, whose ``fused_qkv`` and ``fused_mlp`` are off but in its GPT-3
  configs);
- ``experts``, ``topk``, ``moe_ffn_hidden``, ``shared_experts``, ``dense_layers``, ``ep``,
  ``etp``, ``dispatcher``, ``moe_a2a_overlap``, ``dispatcher_sms``, ``expert_bias``,
  ``expert_clamp`` and ``moe_fused_mlp`` (columns ``published_runs.csv`` need not have): a
  mixture of experts, its experts' biases and activation clamp (GPT-OSS's), its
  expert-parallel layout, the SMs its flex dispatcher holds and whether its MLP runs as
  Transformer Engine's fused operations, as ``tasks.validation.run_moe`` reads them
  (blank: a dense model); ``kv_lora_rank``, ``q_lora_rank``, ``qk_rope_head_dim``,
  ``v_head_dim``: multi-head latent attention, as ``tasks.validation.run_mla`` reads them
  (blank: ordinary attention);
- the cluster the run ran on, where it differs from its hardware profile's (columns
  ``published_runs.csv`` need not have; blank: the profile's): ``gpus_per_node``;
  ``nics_per_node`` and ``nic_gbps`` (its scale-out NICs and each one's speed in Gb/s: a
  device's share of the node's network is nics x speed / gpus_per_node; one of the two
  blank keeps the profile's one NIC per GPU at the profile's per-device speed); ``hbm_gb``
  and ``hbm_tbps`` (a memory variant: capacity in datasheet gigabytes, bandwidth in TB/s);
  ``power_limit_w`` (each GPU's board power limit in W where it ran below the datasheet's: a
  power-capped or lower-power variant, ``kernels.sustained.power_scale``).
  ``predict_runs.run_hardware`` prices the run on that cluster;
- ``precision``: bf16; ``flops_formula``: model; ``unit``: the metric's own (``METRICS``);
- ``dropout`` (the hidden and attention dropout probability, a column ``published_runs.csv``
  need not have): 0 for a gated MLP, else 0.1, Megatron-LM's default
  (``tasks.model.terms.specs.DEFAULT_DROPOUT``). The models with gated MLPs pre-train without
  dropout (PaLM, Chowdhery et al. 2022, arXiv 2204.02311 §5; Llama 2's and 3's recipes in NeMo and
  Megatron-Bridge set 0), where Megatron-LM's GPT runs keep its 0.1.

A metric may be spelled as in ``METRIC_ALIASES`` (``step_time`` for ``iter_time``), and its
value given in another unit of ``UNIT_FACTORS`` (``ms``; an MFU as a ``fraction``).

A column of ``run_scope.UNMODELLED`` (``capacity_factor``: token dropping) above 0 marks a
row the model does not express: ``read_runs`` refuses it,
or, given a ``skipped`` list, leaves it out and lists it there with why, so the file's other
rows are still predicted.

A value that cannot be read, or a layout that cannot run (TP x PP x CP x DP not the GPU count,
a batch that does not split into micro-batches), raises ``RowError`` naming the file, the row
(1-based, after the header) and the field, before anything is predicted (context parallelism's
checks: ``run_layout``). So does a file that
is no CSV text: not a regular file, a NUL byte, a cell beyond Python's CSV field limit
(131,072 characters), a row of more cells than the header. A number is ASCII, finite and at
most ``MAX_NUMBER``. A file beyond ``MAX_RUNS_BYTES`` or ``MAX_RUNS_ROWS``
(``runs_size_problem``) is larger than any published dataset; the command line refuses it
unless told to go on.
"""

from __future__ import annotations

from dataclasses import dataclass, field as dataclass_field
from pathlib import Path
from typing import Dict, List, Optional

from tasks.model.terms.layout import RECOMPUTE_MODES, ZERO_MODES, recompute_layers_problem
from tasks.model.terms.specs import DEFAULT_DROPOUT, heads_problem
from tasks.model.terms.stack import DEEPEP_SMS, DEFAULT_ATTENTION_IMPL, DEFAULT_FP8_RECIPE, ELEMENTWISE_STYLES, \
    HOST_LAUNCH_US, offload_problem
from tasks.validation.cells import MAX_NUMBER, RowCells, row_error
from tasks.validation.records import RowError
from tasks.validation.run_layout import LAYOUT_COLUMNS, parallel_degrees
from tasks.validation.run_mla import MLA_COLUMNS, mla_fields
from tasks.validation.run_moe import MOE_COLUMNS, moe_fields
from tasks.validation.run_scope import UNMODELLED, unmodelled
from tasks.validation.run_stack import STACK_COLUMNS, stack_fields
from tasks.validation.runs_csv import MAX_RUNS_BYTES, MAX_RUNS_ROWS, csv_header, csv_rows, regular_size, \
    runs_size_problem
from tasks.validation.throughput import FLOPS_FORMULAS

__all__ = ["REQUIRED_COLUMNS", "OPTIONAL_COLUMNS", "CLUSTER_COLUMNS", "UNMODELLED", "METRICS", "METRIC_ALIASES",
           "UNIT_FACTORS", "ZERO_STAGES", "MAX_RUNS_BYTES", "MAX_RUNS_ROWS", "MAX_NUMBER", "PublishedRun", "read_runs",
           "runs_size_problem"]

#: Columns stating the cluster a run ran on where it differs from its profile's (``PublishedRun.cluster``).
CLUSTER_COLUMNS = ("gpus_per_node", "nics_per_node", "nic_gbps", "hbm_gb", "hbm_tbps", "power_limit_w")
#: Columns a runs file must have (the others may be absent or blank).
REQUIRED_COLUMNS = ("source", "model", "layers", "hidden", "heads", "seq", "global_batch", "hw", "metric", "value")
#: The other columns a runs file may have: what a row's prediction reads (blank: its
#: default), and ``params_b``, ``confidence`` and ``notes``, which it does not. Any other
#: column is refused, naming it: a misspelled ``recompute`` would otherwise be blank and
#: predict another layout.
OPTIONAL_COLUMNS = ("params_b", "kv_heads", "ffn_hidden", "gated_mlp", "vocab", *LAYOUT_COLUMNS, "vp", "micro_batch",
                    "zero", "recompute", "recompute_layers", "sequence_parallel", "flash_attention",
                    "dp_overlap", "tp_overlap", "pp_overlap", "elementwise", "dropout", "precision", "flops_formula",
                    "head_dim", *STACK_COLUMNS, *MOE_COLUMNS, *MLA_COLUMNS, *CLUSTER_COLUMNS, "unit", "confidence",
                    "notes")

#: Metrics a run can report -> the unit it is compared in.
METRICS: Dict[str, str] = {
    "iter_time": "s",               # seconds per training step
    "tflops_per_gpu": "TF",         # 10^12 FLOP/s per GPU, FLOPs counted by flops_formula
    "mfu": "%",                     # model FLOPs utilisation: model FLOP/s per GPU over the dense peak
    "tokens_per_s_per_gpu": "tok/s",
    "tokens_per_s": "tok/s",        # the whole job's
    "samples_per_s": "seq/s",       # sequences per second, the whole job's
}
#: Other spellings of a metric, read as the metric they name.
METRIC_ALIASES: Dict[str, str] = {"step_time": "iter_time", "iteration_time": "iter_time",
                                  "tflops": "tflops_per_gpu", "model_tflops_per_gpu": "tflops_per_gpu",
                                  "throughput_per_gpu": "tokens_per_s_per_gpu", "sequences_per_s": "samples_per_s"}
#: A ``unit`` cell -> the factor that turns a value in it into the metric's unit (blank: the
#: metric's own unit). An MFU written as a fraction (unit "fraction", or a value at most 1
#: with a blank unit) is read as a percentage.
UNIT_FACTORS: Dict[str, Dict[str, float]] = {
    "iter_time": {"s": 1.0, "sec": 1.0, "ms": 1e-3},
    "tflops_per_gpu": {"tf": 1.0, "tflops": 1.0, "tflop/s": 1.0, "pf": 1e3, "pflops": 1e3},
    "mfu": {"%": 1.0, "percent": 1.0, "fraction": 100.0},
}


_PRECISIONS = ("bf16", "fp16", "fp8")
_RECOMPUTE = RECOMPUTE_MODES
#: ZeRO stages a ``zero`` cell may give, as the sharding mode each runs (ZeRO-2 communicates as ZeRO-1).
ZERO_STAGES: Dict[int, str] = {0: "none", 1: "zero1", 2: "zero1", 3: "zero3"}


@dataclass(frozen=True)
class PublishedRun:
    """One measured training run: model shape, layout, hardware, precision and its metric."""

    path: str
    row: int
    source: str
    model: str
    layers: int
    hidden: int
    heads: int
    kv_heads: int
    ffn_hidden: int
    gated_mlp: bool
    vocab: int
    seq: int
    tp: int
    pp: int
    vp: int
    dp: int
    gpus: int
    global_batch: int
    micro_batch: Optional[int]
    zero: str
    recompute: str
    recompute_layers: int
    sequence_parallel: bool
    flash_attention: bool
    dp_overlap: bool
    tp_overlap: bool
    pp_overlap: bool
    dropout: float
    elementwise: str
    hw: str
    precision: str
    metric: str
    flops_formula: str
    value: float
    fp8_params: bool = False
    fp8_recipe: str = DEFAULT_FP8_RECIPE
    offload_layers: int = 0
    grad_reduce_in_fp32: Optional[bool] = None
    dp_engine: str = "megatron"
    tp_engine: str = "megatron"
    param_gather_overlap: bool = False
    cross_entropy: str = "unfused"
    host_launch_us: float = HOST_LAUNCH_US
    cuda_graph_scope: str = ""
    pipeline_split: str = "layers"
    attention_impl: str = DEFAULT_ATTENTION_IMPL
    projections: str = "fused"
    head_dim: Optional[int] = None
    cp: int = 1
    cp_comm: str = "p2p"
    experts: int = 0
    topk: int = 0
    moe_ffn_hidden: Optional[int] = None
    shared_experts: int = 0
    dense_layers: int = 0
    ep: int = 1
    etp: int = 1
    dispatcher: str = "alltoall"
    moe_a2a_overlap: bool = False
    expert_bias: bool = False
    expert_clamp: float = 0.0
    moe_fused_mlp: bool = False
    dispatcher_sms: int = DEEPEP_SMS
    kv_lora_rank: int = 0
    q_lora_rank: int = 0
    qk_rope_head_dim: int = 0
    v_head_dim: Optional[int] = None
    cluster: Dict[str, float] = dataclass_field(default_factory=dict)

    def error(self, field: str, value: object, why: str) -> RowError:
        return row_error(self.path, self.row, field, value, why)


def _zero(r: RowCells) -> str:
    """The sharding mode (``layout.ZERO_MODES``) of a ``zero`` cell: a ZeRO stage
    (``ZERO_STAGES``) or a mode's name; blank: none."""
    raw = r.text("zero", "0").lower()
    if raw in ZERO_MODES:
        return raw
    stage = r.number("zero", float, 0, minimum=0) if raw[:1].isdigit() else None
    if stage not in ZERO_STAGES:
        raise r.fail("zero", raw, f"is not a ZeRO stage ({', '.join(map(str, ZERO_STAGES))}) nor a sharding mode "
                                  f"({', '.join(ZERO_MODES)})")
    return ZERO_STAGES[int(stage)]


def _run(path: str, row: int, cells: Dict[str, Optional[str]]) -> PublishedRun:
    r = RowCells(path, row, cells)
    hidden, heads = r.number("hidden", int), r.number("heads", int)
    kv_heads, ffn_hidden = r.number("kv_heads", int, heads), r.number("ffn_hidden", int, 4 * hidden)
    head_dim = r.number("head_dim", int, 0) or None
    problem = heads_problem(hidden, heads, kv_heads, head_dim=head_dim)
    if problem:
        raise r.fail(*problem)
    metric = METRIC_ALIASES.get(r.text("metric").lower(), r.text("metric").lower())
    if metric not in METRICS:
        raise r.fail("metric", r.text("metric"), f"is not one of {', '.join([*METRICS, *METRIC_ALIASES])}")
    flash = r.flag("flash_attention", False)
    degrees = parallel_degrees(r, seq=r.number("seq", int), flash=flash)
    gated = r.flag("gated_mlp", ffn_hidden != 4 * hidden)
    recompute, recompute_layers = r.choice("recompute", _RECOMPUTE, "none"), r.number("recompute_layers", int, 0,
                                                                                      minimum=0)
    problem = recompute_layers_problem(recompute, recompute_layers)
    if problem:
        raise r.fail("recompute_layers", recompute_layers, problem)
    precision = r.choice("precision", _PRECISIONS, "bf16")
    switches = stack_fields(r, precision, flash)
    problem = offload_problem(switches["offload_layers"], r.number("layers", int), degrees["pp"], recompute)
    if problem:
        raise r.fail("offload_layers", switches["offload_layers"], problem)
    return PublishedRun(
        path=path, row=row, source=r.text("source"), model=r.text("model"), layers=r.number("layers", int),
        hidden=hidden, heads=heads, kv_heads=kv_heads, ffn_hidden=ffn_hidden, head_dim=head_dim,
        gated_mlp=gated, vocab=r.number("vocab", int, 0, minimum=0),
        seq=r.number("seq", int), vp=r.number("vp", int, 1), **degrees,
        global_batch=r.number("global_batch", int), micro_batch=r.number("micro_batch", int, 0, minimum=0) or None,
        zero=_zero(r), recompute=recompute, recompute_layers=recompute_layers,
        sequence_parallel=r.flag("sequence_parallel", False), flash_attention=flash,
        tp_overlap=r.flag("tp_overlap", False), pp_overlap=r.flag("pp_overlap", flash),
        dropout=r.probability("dropout", 0.0 if gated else DEFAULT_DROPOUT),
        elementwise=r.choice("elementwise", ELEMENTWISE_STYLES, "fused"), hw=r.text("hw"),
        precision=precision, metric=metric,
        flops_formula=r.choice("flops_formula", FLOPS_FORMULAS, "model"),
        value=_in_metric_unit(r, metric, r.number("value", float, minimum=1e-12)),
        cluster=_cluster(r), **switches, **moe_fields(r, layers=r.number("layers", int), hidden=hidden, heads=heads,
                                                      gated=gated),
        **mla_fields(r, layers=r.number("layers", int), hidden=hidden, heads=heads, head_dim=head_dim),
    )


def _cluster(r: "RowCells") -> Dict[str, float]:
    """The row's ``CLUSTER_COLUMNS`` that are not blank: whole numbers of GPUs and NICs, NIC
    speeds, HBM sizes and power limits of at least 1 (Gb/s, GB, W), HBM bandwidths of at least
    0.01 TB/s."""
    out: Dict[str, float] = {}
    for column in CLUSTER_COLUMNS:
        whole = column in ("gpus_per_node", "nics_per_node")
        value = r.number(column, int if whole else float, 0, minimum=0.01 if column == "hbm_tbps" else 1)
        if value:
            out[column] = value
    return out


def _in_metric_unit(r: "RowCells", metric: str, value: float) -> float:
    """``value`` in ``METRICS[metric]``'s unit, read through the row's ``unit`` cell."""
    unit = (r.cells.get("unit") or "").strip().lower()
    factors = UNIT_FACTORS.get(metric, {})
    if not unit or unit == METRICS[metric].lower():
        return value * (100.0 if metric == "mfu" and not unit and value <= 1.0 else 1.0)
    if unit not in factors:
        raise r.fail("unit", unit, f"is not a unit of {metric} (known: {', '.join([METRICS[metric], *factors])})")
    return value * factors[unit]


def read_runs(path: Path, skipped: Optional[List[str]] = None) -> List[PublishedRun]:
    """Every row of a runs CSV, checked; ``RowError`` on the first row that cannot be used.
    With a ``skipped`` list, a row the model does not express (``unmodelled``) is left out
    and listed there (``"file row N: why"``) instead; every other row is still checked."""
    regular_size(path)
    try:
        text = Path(path).read_text(encoding="utf-8-sig")     # a spreadsheet's byte order mark is not a column
    except (OSError, UnicodeDecodeError) as exc:
        raise RowError(f"{path}: cannot be read ({exc})") from None
    reader = csv_header(path, text)
    columns = reader.fieldnames or []
    missing = [c for c in REQUIRED_COLUMNS if c not in columns]
    if missing:
        raise RowError(f"{path}: lacks the column(s) {', '.join(missing)} of published_runs.csv")
    known = (*REQUIRED_COLUMNS, *OPTIONAL_COLUMNS, *UNMODELLED)
    unknown = [c for c in columns if c not in known]
    if unknown:
        raise RowError(f"{path}: column {unknown[0]!r} is not a column of a runs file (known: {', '.join(known)}); "
                       "free text goes in notes")
    runs, left_out = [], []
    for i, cells in enumerate(csv_rows(path, reader), start=1):
        problem = unmodelled(RowCells(str(path), i, cells))
        if problem and skipped is None:
            raise RowError(f"{path} row {i}: {problem}")
        if problem:
            left_out.append(f"{Path(path).name} row {i}: {problem}")
        else:
            runs.append(_run(str(path), i, cells))
    if not runs:
        raise RowError(f"{path}: holds no rows" + (" the model expresses" if left_out else ""))
    if skipped is not None:
        skipped += left_out
    return runs
