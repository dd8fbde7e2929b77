"""What the training software does, as data: the attention kernel, the GEMMs' precision and
which communication it overlaps with compute.

A ``Stack`` is part of a whole-step model's context (``tasks.model.step.plan.StepContext``) and of
a validated run. Its defaults are the study's 2022 Megatron-LM stack (Pati et al., arXiv
2302.02825; Korthikanti et al., arXiv 2205.05198): materialised attention, 16-bit GEMMs,
TP and PP communication serialized, the DP gradient all-reduce overlapped with the backward
pass. Named stacks are the presets of ``conf/stack`` (``commscale presets`` lists them: the
Megatron stacks of 2022 and 2024, DeepSpeed's ZeRO-3 of 2021, torchtitan's FSDP2, MaxText's XLA).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import FrozenSet, Optional, Tuple

__all__ = ["ATTENTION_KINDS", "CROSS_ENTROPY_IMPLS", "DEEPEP_SMS", "HYBRIDEP_SMS", "DP_ENGINE_NAMES",
           "ELEMENTWISE_STYLES", "GEMM_PRECISIONS", "TP_ENGINE_NAMES", "MAIN_GRAD_WIDTHS", "Stack", "offload_problem",
           "CUDA_GRAPH_SCOPES", "graph_scopes", "cuda_graph_scope_problem", "PIPELINE_SPLITS", "ATTENTION_IMPLS",
           "DEFAULT_ATTENTION_IMPL", "PROJECTIONS", "FP8_RECIPES",
           "DEFAULT_FP8_RECIPE"]

#: "materialised": the SL x SL scores are GEMM outputs, softmax and dropout are kernels of
#: their own and their outputs are stored; "flash": one fused kernel (``tasks.model.kernels.attention``).
ATTENTION_KINDS: Tuple[str, ...] = ("materialised", "flash")
#: Which fused kernel runs a "flash" attention (``Stack.attention_impl``): "cudnn", cuDNN's
#: fused attention, which Transformer Engine selects on Hopper when both are available
#: ("Select FusedAttention on sm90 and FlashAttention on others for performance",
#: ``DotProductAttention.forward`` in transformer_engine/pytorch/attention.py at v1.4);
#: "flash2", Dao's FlashAttention-2, what Transformer Engine runs when cuDNN's is switched off
#: (NVTE_FUSED_ATTN=0; Megatron-Core's --attention-backend flash); "flash3", Shah et al.'s
#: FlashAttention-3 for Hopper; "flash1", Dao et al.'s FlashAttention (v1, flash-attn 1.x),
#: which predates Hopper's instructions (2022-2023 stacks; MosaicML's llm-foundry ran its
#: Triton port, which FlashAttention-2's release times within 10 % of it on A100 at 128-wide
#: causal heads). Each has its own curves (``kernels.attention.FUSED_EFFICIENCY``,
#: ``COMBINED_EFFICIENCY``).
ATTENTION_IMPLS: Tuple[str, ...] = ("cudnn", "flash2", "flash3", "flash1")
#: The fused kernel of a stack that names none (``Stack.attention_impl``, a runs file's blank cell).
DEFAULT_ATTENTION_IMPL = ATTENTION_IMPLS[0]
#: Precisions of the layer's linear GEMMs (QKV, attention output, MLP). Under "fp8" they run
#: at the device's fp8 rate, as Transformer Engine runs them (Micikevicius et al. 2022, FP8
#: formats); attention, element-wise kernels, communication and master weights keep 16/32 bits.
GEMM_PRECISIONS: Tuple[str, ...] = ("bf16", "fp16", "fp8")
#: How an fp8 run scales its GEMMs' inputs (``Stack.fp8_recipe``), by Megatron-Core's names
#: (``Fp8Recipe`` in megatron/core/enums.py at d98e8a64dd): "delayed", a tensor's scale from
#: the amax history of earlier steps (Transformer Engine's ``DelayedScaling``, the only recipe
#: before 2025); "tensorwise", from the tensor's own amax, read before the cast
#: (``Float8CurrentScaling``; Megatron-Bridge's FP8-CS recipes); "mxfp8" and "blockwise", a
#: scale per block of 32 or 128 values found inside the quantizing kernel. Their bytes:
#: ``tasks.model.kernels.layer_cost.FP8_AMAX_PASS_BYTES``.
FP8_RECIPES: Tuple[str, ...] = ("delayed", "tensorwise", "mxfp8", "blockwise")
#: The recipe of a stack or runs-file row that names none (Megatron-Core's default, ``--fp8-recipe``'s).
DEFAULT_FP8_RECIPE = FP8_RECIPES[0]
#: Bytes per element of the buffer a step's weight gradients are accumulated in, micro-batch
#: after micro-batch: fp32 main gradients (4: Megatron-LM forces them for bf16, Megatron-Core
#: and Transformer Engine keep them, PyTorch AMP's gradients of fp32 weights are fp32), or
#: the 16-bit gradients of fp16 Megatron-LM (2).
MAIN_GRAD_WIDTHS: Tuple[float, ...] = (2.0, 4.0)
#: How a framework runs the sharding modes' collectives (``collectives.dp_protocol.DP_ENGINES``
#: holds what each does, with its sources): "megatron" as ``dp_protocol.SHARDING`` states
#: them, "deepspeed-zero3-2021" DeepSpeed's ZeRO-3 of early 2021, "pytorch-fsdp2" PyTorch's
#: fully_shard, "xla" XLA's SPMD partitioner as MaxText runs it on GPUs.
DP_ENGINE_NAMES: Tuple[str, ...] = ("megatron", "deepspeed-zero3-2021", "pytorch-fsdp2", "xla")
#: How a framework runs tensor parallelism's collectives (``Stack.tp_engine``): "megatron" on
#: sequence-first activations ([s, b, h]), so sequence parallelism gathers and scatters the
#: leading dimension in place; "dtensor", PyTorch's DTensor as torchtitan's plan runs it, on
#: batch-first activations sharded on the sequence (``Shard(1)``), whose functional
#: collectives move a non-leading dimension through a copy (``step.comm.tp_collective``).
TP_ENGINE_NAMES: Tuple[str, ...] = ("megatron", "dtensor")
#: How a layer's input projections run (``Stack.projections``): "fused", one product for the
#: attention's query, key and value and one for a gated MLP's gate and up (Megatron-Core's
#: ``linear_qkv`` and ``linear_fc1``); "separate", each its own product (torchtitan's Llama:
#: ``wq``, ``wk``, ``wv``, ``w1``, ``w3``; MaxText's ``query``, ``key``, ``value``, ``wi_0``,
#: ``wi_1``; ``kernels.op_checkpoint.mm_pieces``).
PROJECTIONS: Tuple[str, ...] = ("fused", "separate")
#: How the layer's memory-bound work runs. "fused": as Megatron-LM from September 2020 on
#: and every later stack run it, biases in the GEMMs' epilogues or fused with GELU and
#: dropout, the scores' scale and mask inside the softmax kernel, heads split without
#: copies; "eager": as PyTorch runs an unfused layer (Megatron-LM through its 1.0 release,
#: 2019-20), each of those a kernel of its own (``tasks.model.kernels.layer.EAGER_KERNELS``);
#: "llama_eager": a Llama block of PyTorch ops run uncompiled, as torchtitan runs its model
#: without torch.compile: RMSNorm in fp32 ops, RoPE as complex fp32 products, grouped keys and
#: values copied to every head, SiLU and the gate's product apart
#: (``tasks.model.kernels.layer.LLAMA_EAGER_KERNELS``); "llama_compiled": the same block compiled
#: by Inductor, as torchtitan runs it with torch.compile: the norms and SwiGLU fused, RoPE's
#: complex products still eager and the copies around the fused attention still copies
#: (``tasks.model.kernels.llama_eager.LLAMA_COMPILED_KERNELS``).
ELEMENTWISE_STYLES: Tuple[str, ...] = ("fused", "eager", "llama_eager", "llama_compiled")
#: How the loss over the logits runs. "unfused": Megatron's vocabulary-parallel cross entropy
#: in fp32, one kernel per step (Megatron-Core's default, cross_entropy_loss_fusion off);
#: "te": Transformer Engine's fused Triton kernels (cross_entropy_loss_fusion with
#: cross_entropy_fusion_impl "te", which Megatron-Bridge's GPT provider and performance
#: recipes set). Their bytes: ``tasks.model.kernels.layer_cost.CROSS_ENTROPY_BYTES_PER_LOGIT``.
CROSS_ENTROPY_IMPLS: Tuple[str, ...] = ("unfused", "te")
#: Streaming multiprocessors DeepEP's kernels hold (Megatron-Core's ``moe_deepep_num_sms``
#: default, megatron/core/transformer/transformer_config.py at d0b3b775).
DEEPEP_SMS = 20
#: The SMs Megatron-Bridge's performance scripts give HybridEP (``moe_hybridep_num_sms``,
#: scripts/performance/utils/overrides.py at v0.4.0 to v0.5.1; perf_recipes/_common.py at v0.6.0).
HYBRIDEP_SMS = 32
#: How a pipeline's stages share the layers (``Stack.pipeline_split``): "layers", the layers
#: alone; "embedding", "loss" or both, the embedding and/or the loss counted as one layer more
#: each, so the first and/or the last stage builds one layer fewer (Megatron-Core's
#: account_for_embedding_in_pipeline_split and account_for_loss_in_pipeline_split,
#: ``get_num_layers_to_build`` in megatron/core/transformer/transformer_block.py at 309ffca6).
PIPELINE_SPLITS: Tuple[str, ...] = ("layers", "embedding", "loss", "embedding+loss")


#: Parts of a layer Megatron-Core's per-layer CUDA graphs can capture while the rest runs
#: eagerly (TransformerConfig.cuda_graph_scope; megatron/core/transformer/transformer_config.py
#: at d98e8a64dd): "attn" the attention sublayer (TransformerLayer._forward_attention),
#: "moe_router" a MoE layer's MLP up to and including its router, "moe_preprocess" the token
#: dispatcher's preprocessing after it (only beside "moe_router").
CUDA_GRAPH_SCOPES: Tuple[str, ...] = ("attn", "moe_router", "moe_preprocess")


def _is_count(value: object) -> bool:
    """Whether ``value`` is a whole number, 0 or more (not a bool)."""
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def graph_scopes(text: str) -> FrozenSet[str]:
    """The scopes of a "+"-joined ``Stack.cuda_graph_scope`` ("" none)."""
    return frozenset(part.strip() for part in text.split("+") if part.strip())


def cuda_graph_scope_problem(text: str) -> Optional[str]:
    """Why ``text`` is not a ``Stack.cuda_graph_scope``, or None."""
    scopes = graph_scopes(text)
    unknown = sorted(scopes - set(CUDA_GRAPH_SCOPES))
    if unknown:
        return f"{unknown[0]!r} is not a scope: join some of {', '.join(CUDA_GRAPH_SCOPES)} with '+'"
    if "moe_preprocess" in scopes and "moe_router" not in scopes:
        return "moe_preprocess is captured only beside moe_router (Megatron-Core refuses it alone)"
    return None


#: The host's time per kernel of an eager training step, measured (``Stack.host_launch_us``).
HOST_LAUNCH_US = 53.0


@dataclass(frozen=True)
class Stack:
    """The software stack's choices, each a switch of the cost model.

    ``attention``: one of ``ATTENTION_KINDS``; ``attention_impl``: one of ``ATTENTION_IMPLS``,
    the fused kernel (another than "cudnn" needs ``attention`` flash); ``causal``: a causal
    mask (a fused kernel skips the masked half); ``gemm_precision``: one of ``GEMM_PRECISIONS``.
    ``dp_overlap``: DP gradient reduction bucketed and overlapped with the backward pass (as
    Megatron's DDP with overlap_grad_reduce, PyTorch DDP and FSDP do); off, it runs after it.
    ``tp_overlap``: TP collectives overlapped with the GEMMs they feed (Megatron-Core /
    Transformer Engine communication-GEMM overlap; Wang et al. 2022); off, serialized.
    ``pp_overlap``: an interleaved pipeline's sends and receives overlapped with compute
    (Megatron-Core's overlap_p2p_comm, Megatron-LM's default since October 2023, commit
    4eeff55); off, serialized. The plain 1F1B schedule has no such overlap, so the switch
    leaves it serialized.
    ``main_grad_bytes``: one of ``MAIN_GRAD_WIDTHS``, the width of the gradient buffer each
    micro-batch's weight gradients are added into, and which DP reduces as it is (Megatron's
    DDP: --accumulate-allreduce-grads-in-fp32, forced for bf16 since April 2021; Megatron-Core's
    grad_reduce_in_fp32, which Megatron-Bridge's bf16 recipes set).
    ``elementwise``: one of ``ELEMENTWISE_STYLES``.
    ``fp8_recipe``: one of ``FP8_RECIPES``, how an fp8 run scales its GEMMs' inputs (delayed
    where the GEMMs are 16-bit).
    ``fp8_params``: the linear layers' weights are kept in fp8 only, with no 16-bit copy, and
    gathered over DP in fp8 (Megatron-Core's ``fp8_param_gather``: "keep the compute param in
    fp8 (do not use any other intermediate dtype) and perform the param all-gather in fp8",
    megatron/core/distributed/distributed_data_parallel_config.py; Megatron-Bridge's FP8
    current-scaling recipe sets it, ``bf16_with_fp8_current_scaling_mixed`` in
    src/megatron/bridge/training/mixed_precision.py at d9f7643bb). Needs ``gemm_precision``
    fp8; the embedding and output layer stay 16-bit.
    ``offload_layers``: the activations of this many of a stage's layers are copied to host
    memory during the forward pass and back for the backward (Megatron-Core's
    ``cpu_offloading_num_layers`` through Transformer Engine's CPU offload, which reloads one
    layer ahead of the backward pass, so one offloaded layer's activations are on the device
    at a time). Megatron-Core refuses it with PP > 1, with recomputation and for as many
    layers as the model has (megatron/core/transformer/transformer_config.py,
    ``__post_init__``); the step model applies it where PP is 1 and never to a stage's last
    layer. The copies are taken to run behind the layers' compute on their own stream (no
    time is charged): an assumption, which holds where the host link is as fast as Grace's
    NVLink-C2C (the GB200 and GB300 recipes that set it).
    ``dp_engine``: one of ``DP_ENGINE_NAMES``, how the framework runs the sharding modes'
    collectives (``collectives.dp_protocol.DP_ENGINES``).
    ``projections``: one of ``PROJECTIONS``. "separate" runs each input projection as its own
    product: each reads the layer's input (and, backward, the weight gradients read it again),
    a narrow key or value product fills its tiles worse, and autograd adds the products'
    input gradients up, one ``add`` of the input-sized gradient per product past the first
    (``kernels.op_checkpoint.separate_products``, ``input_gradient_sums``): torchtitan's
    Llama (torchtitan/models/llama3/model/model.py: ``Attention`` holds ``wq``, ``wk``, ``wv``,
    ``FeedForward`` ``w1``, ``w3``, each an ``nn.Linear``; Inductor leaves them apart), and
    MaxText's (``fused_qkv`` and ``fused_mlp`` off: ``DenseGeneral`` layers apart, which XLA's
    ``DotMerger`` leaves apart above 16 MiB of a dot's input and output; the
    ``maxtext-xla-2025`` preset).
    ``tp_engine``: one of ``TP_ENGINE_NAMES``, how the framework runs tensor parallelism's
    collectives. Under "dtensor" a sequence-parallel all-gather on the sequence dimension
    gathers into the leading one and copies the result into place, and a reduce-scatter
    copies its input the other way first (PyTorch's ``_functional_collectives``
    ``all_gather_tensor``: ``torch.cat(torch.chunk(res, group_size, dim=0), dim=gather_dim)``
    for a ``gather_dim`` other than 0; ``reduce_scatter_tensor`` chunks and concatenates for a
    ``scatter_dim`` other than 0), as torchtitan's Llama plan shards its batch-first activations
    (``SequenceParallel`` and ``Shard(1)`` in parallelize_llama.py at 9dec370); with fp8 GEMMs
    the column-parallel layers' inputs are cast to fp8 before they are gathered
    (``Float8ColwiseParallel`` and ``PrepareFloat8ModuleInput`` in the same plan, from
    torchao.float8), the reduce-scatters stay 16-bit.
    ``param_gather_overlap``: the distributed optimizer's (ZeRO-1's) gather of the updated
    weights is issued bucket by bucket after the optimizer step and waited for in the
    forward pre-hooks of the next step, so it runs behind the first micro-batch's forward
    pass (Megatron-Core's ``overlap_param_gather``, "overlap param all-gather with forward
    compute", megatron/core/distributed/distributed_data_parallel_config.py at d98e8a64dd;
    apex's DistributedFusedAdam ``overlap_param_sync``, which NeMo 24.07's launcher configs
    set; Megatron-Bridge sets ``overlap_param_gather`` whenever DP > 1,
    src/megatron/bridge/training/comm_overlap.py at 067f987df). Off, the step waits for the
    gather after the optimizer step. Megatron-LM asks for ``dp_overlap`` with it
    (megatron/training/arguments.py: "Must use --overlap-param-gather with
    --overlap-grad-reduce").
    ``cross_entropy``: one of ``CROSS_ENTROPY_IMPLS``, how the loss over the logits runs.
    ``host_launch_us``: the host's time per kernel of an eager training step (Python, torch's
    dispatcher and autograd, the launch call). The device cannot run ahead of the host, so a
    micro-batch lasts at least its kernels times this; 0 where the host never paces the
    device (CUDA graphs replay a step's kernels with no host work between them; XLA runs a
    compiled step). The default is measured (``tasks.measure.launch.plain_layer_launch``):
    53 us per kernel for a plain ``torch.nn`` decoder layer's forward and backward in eager
    mode, on an H200 machine's host with torch 2.11 (conf/data/device/h200-2026-11-27, run2);
    another framework's or host's path is taken to cost the same (an assumption).
    ``moe_a2a_overlap``: a mixture of experts' dispatch and combine run behind another
    micro-batch's compute (Megatron-Core's ``overlap_moe_expert_parallel_comm``: the combined
    1F1B schedule runs one micro-batch's forward beside another's backward, each one's
    all-to-all on its own stream behind the other's compute;
    megatron/core/pipeline_parallel/combined_1f1b.py at d98e8a64dd); off, the step waits for
    them.
    ``cuda_graph_scope``: the parts of every layer Megatron-Core captures in CUDA graphs while
    the rest runs eagerly, "+"-joined ``CUDA_GRAPH_SCOPES`` (Transformer Engine's per-layer
    graphs, cuda_graph_impl transformer_engine): their kernels replay without the host's
    launch path, which still launches the others (``kernels.cuda_graphs``); "" none. A graph
    of the whole layer or iteration is ``host_launch_us`` 0.
    ``dispatcher_sms``: streaming multiprocessors the flex dispatcher's kernels hold while a
    dispatch or combine runs behind another micro-batch's compute (``moe_a2a_overlap``): that
    compute runs on the rest (``step.comm.ep_comm``'s ``contention``). Megatron-Core gives
    DeepEP ``moe_deepep_num_sms`` = 20 (megatron/core/transformer/transformer_config.py at
    d0b3b775; its flex dispatcher's default backend, ``moe_flex_dispatcher_backend`` "deepep");
    Megatron-Bridge's performance scripts give HybridEP 32 (``moe_hybridep_num_sms``,
    scripts/performance/utils/overrides.py ``_set_common_perf_overrides`` at v0.4.0 to v0.5.1,
    src/megatron/bridge/perf_recipes/_common.py at v0.6.0). NCCL's all-to-all (the alltoall
    dispatcher) picks its channels by topology and is not charged.
    ``moe_fused_mlp``: a mixture of experts' routed MLP runs as Transformer Engine's fused
    operations (Megatron-Core's ``use_transformer_engine_op_fuser`` path, ``TEGroupedMLP
    ._fused_forward``): the activation, its clamp, the router's weights and the biases inside
    the grouped GEMMs' kernels; off, ``TEGroupedMLP.forward`` runs a clamp and the second
    linear's bias as kernels of their own (``layer.MOE_UNFUSED_KERNELS``).
    ``pipeline_split``: one of ``PIPELINE_SPLITS``. With a pipeline, "embedding+loss" splits
    layers + 2 evenly over the stages and the first and last stage each build one layer fewer
    (Megatron-Bridge's Llama 3.1 405B recipe sets both switches, src/megatron/bridge/recipes/
    llama/llama3.py at v0.2.0 to v0.6.0; the Llama 3 405B pre-training ran so: "we reduce one
    Transformer layer each from the first and the last stages", Grattafiori et al. 2024, arXiv
    2407.21783 §3.3.2). The last stage's output layer and loss then run in place of a layer.
    """

    attention: str = "materialised"
    attention_impl: str = DEFAULT_ATTENTION_IMPL
    causal: bool = True
    gemm_precision: str = "bf16"
    dp_overlap: bool = True
    tp_overlap: bool = False
    pp_overlap: bool = False
    main_grad_bytes: float = 4.0
    elementwise: str = "fused"
    fp8_params: bool = False
    fp8_recipe: str = DEFAULT_FP8_RECIPE
    offload_layers: int = 0
    dp_engine: str = "megatron"
    tp_engine: str = "megatron"
    param_gather_overlap: bool = False
    cross_entropy: str = "unfused"
    host_launch_us: float = HOST_LAUNCH_US
    moe_a2a_overlap: bool = False
    cuda_graph_scope: str = ""
    moe_fused_mlp: bool = False
    dispatcher_sms: int = DEEPEP_SMS
    pipeline_split: str = "layers"
    projections: str = "fused"

    def __post_init__(self) -> None:
        if self.attention not in ATTENTION_KINDS:
            raise ValueError(f"stack.attention={self.attention!r}: choose one of {', '.join(ATTENTION_KINDS)}")
        if self.attention_impl not in ATTENTION_IMPLS:
            raise ValueError(f"stack.attention_impl={self.attention_impl!r}: choose one of "
                             f"{', '.join(ATTENTION_IMPLS)}")
        if self.attention_impl != DEFAULT_ATTENTION_IMPL and not self.flash:
            raise ValueError(f"stack.attention_impl={self.attention_impl!r} needs stack.attention=flash, not "
                             f"{self.attention!r}: it names a fused kernel")
        if self.gemm_precision not in GEMM_PRECISIONS:
            raise ValueError(f"stack.gemm_precision={self.gemm_precision!r}: choose one of "
                             f"{', '.join(GEMM_PRECISIONS)}")
        if self.elementwise not in ELEMENTWISE_STYLES:
            raise ValueError(f"stack.elementwise={self.elementwise!r}: choose one of {', '.join(ELEMENTWISE_STYLES)}")
        if self.cross_entropy not in CROSS_ENTROPY_IMPLS:
            raise ValueError(f"stack.cross_entropy={self.cross_entropy!r}: choose one of "
                             f"{', '.join(CROSS_ENTROPY_IMPLS)}")
        if not self.host_launch_us >= 0:
            raise ValueError(f"stack.host_launch_us={self.host_launch_us!r}: must be 0 or more microseconds")
        graph_problem = cuda_graph_scope_problem(self.cuda_graph_scope)
        if graph_problem:
            raise ValueError(f"stack.cuda_graph_scope={self.cuda_graph_scope!r}: {graph_problem}")
        if self.pipeline_split not in PIPELINE_SPLITS:
            raise ValueError(f"stack.pipeline_split={self.pipeline_split!r}: choose one of "
                             f"{', '.join(PIPELINE_SPLITS)}")
        if self.dp_engine not in DP_ENGINE_NAMES:
            raise ValueError(f"stack.dp_engine={self.dp_engine!r}: choose one of {', '.join(DP_ENGINE_NAMES)}")
        if self.tp_engine not in TP_ENGINE_NAMES:
            raise ValueError(f"stack.tp_engine={self.tp_engine!r}: choose one of {', '.join(TP_ENGINE_NAMES)}")
        if self.projections not in PROJECTIONS:
            raise ValueError(f"stack.projections={self.projections!r}: choose one of {', '.join(PROJECTIONS)}")
        if self.fp8_params and self.gemm_precision != "fp8":
            raise ValueError(f"stack.fp8_params=true needs stack.gemm_precision=fp8, not {self.gemm_precision!r}: "
                             "fp8 weights feed fp8 GEMMs")
        if self.fp8_recipe not in FP8_RECIPES:
            raise ValueError(f"stack.fp8_recipe={self.fp8_recipe!r}: choose one of {', '.join(FP8_RECIPES)}")
        if self.fp8_recipe != DEFAULT_FP8_RECIPE and self.gemm_precision != "fp8":
            raise ValueError(f"stack.fp8_recipe={self.fp8_recipe!r} needs stack.gemm_precision=fp8, not "
                             f"{self.gemm_precision!r}: it scales fp8 GEMMs' inputs")
        if self.param_gather_overlap and not self.dp_overlap:
            raise ValueError("stack.param_gather_overlap=true needs stack.dp_overlap=true: Megatron-LM overlaps the "
                             "weight gather only with the gradient reduction (--overlap-grad-reduce)")
        for name, unit in (("dispatcher_sms", "SMs"), ("offload_layers", "layers")):
            if not _is_count(getattr(self, name)):
                raise ValueError(f"stack.{name}={getattr(self, name)!r}: a whole number of {unit}, 0 or more")
        if self.main_grad_bytes not in MAIN_GRAD_WIDTHS:
            raise ValueError(f"stack.main_grad_bytes={self.main_grad_bytes!r}: choose one of "
                             f"{', '.join(f'{w:g}' for w in MAIN_GRAD_WIDTHS)}")

    @property
    def flash(self) -> bool:
        return self.attention == "flash"

    @property
    def eager(self) -> bool:
        """Whether the layer's element-wise work runs unfused (either eager style)."""
        return self.elementwise in ("eager", "llama_eager")

    @property
    def split_shortfall(self) -> Tuple[float, float]:
        """Layers (first stage, last stage) build fewer than a middle stage under a pipeline
        (``pipeline_split``): 1 where the embedding or the loss takes a layer's place, else 0."""
        return float("embedding" in self.pipeline_split), float("loss" in self.pipeline_split)

    @property
    def fp8(self) -> bool:
        """The linear GEMMs run in fp8 (Transformer Engine)."""
        return self.gemm_precision == "fp8"


def offload_problem(offload_layers: int, layers: int, pp: int, recompute: str) -> Optional[str]:
    """Why Megatron-Core would refuse to offload ``offload_layers`` layers' activations
    (megatron/core/transformer/transformer_config.py, ``__post_init__``), or None."""
    if not offload_layers:
        return None
    if offload_layers >= layers:
        return f"must be below the model's {layers} layers (Megatron-Core offloads fewer layers than it has)"
    if pp > 1:
        return f"needs pp 1, not {pp} (Megatron-Core offloads activations without pipeline parallelism only)"
    if recompute != "none":
        return f"needs recompute none, not {recompute} (Megatron-Core offloads without recomputation only)"
    return None
