"""Plain data the cost model takes: a Transformer model and a hardware profile.

These dataclasses double as the OmegaConf schemas of ``conf/model/*.yaml`` and
``conf/hardware/*.yaml``: a YAML key that is not a field here is rejected, a value of
the wrong type is rejected, and a field left ``MISSING`` must be given by the YAML.

Units are in the field names: ``_tflops`` is 10^12 FLOP/s, ``_GBps`` is 10^9 bytes/s,
``_tbps`` is 10^12 bytes/s, ``_us`` is microseconds, ``_gb`` is 10^9 bytes.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Dict, Optional, Tuple

from omegaconf import MISSING

from tasks.identity import content_hash

__all__ = ["TransformerModel", "heads_problem", "DEFAULT_DROPOUT", "DEFAULT_SEQ_LEN", "LinkTier", "HardwareProfile",
           "fingerprint"]


#: Hidden and attention dropout probability where a model or run does not say: Megatron-LM's
#: default (--hidden-dropout, --attention-dropout 0.1), as GPT-2 and BERT trained.
DEFAULT_DROPOUT = 0.1


#: The sequence length of a model file that gives none: GPT-3's and Megatron-LM's 2,048.
DEFAULT_SEQ_LEN = 2048


@dataclass
class TransformerModel:
    """Hyperparameters of one Transformer model (one preset of ``conf/model``, or a file of
    the user's). Its shape (``layers``, ``hidden``, ``heads``) is all a model needs; the
    rest has defaults: ``ffn_hidden`` 4 x hidden and ``params_b`` from the shape where
    None (``sweeps.config.specs.complete_model`` fills both), ``seq_len``
    ``DEFAULT_SEQ_LEN``, and provenance (``year``, ``source``) only where known."""

    name: str = MISSING
    layers: int = MISSING
    hidden: int = MISSING
    heads: int = MISSING
    year: Optional[int] = None
    ffn_hidden: Optional[int] = None
    params_b: Optional[float] = None
    seq_len: int = DEFAULT_SEQ_LEN
    architecture: str = "decoder"
    kv_heads: Optional[int] = None
    vocab: Optional[int] = None
    source: str = ""
    gated_mlp: bool = False  # SwiGLU-style: gate and up of ffn_hidden, then down (three matrices)
    dropout: float = DEFAULT_DROPOUT  # hidden and attention dropout probability; 0: none (Llama)
    head_dim: Optional[int] = None  # one attention head's width; None: hidden / heads (Qwen3, GPT-OSS set theirs)
    # Mixture of experts (``tasks.model.kernels.model_blocks``): routed experts per MoE layer (0: a dense model),
    # experts each token visits, one expert's width (None: ffn_hidden), shared experts of that width every token
    # visits, and the leading layers that keep a dense MLP of ffn_hidden (DeepSeek-V3's first 3).
    experts: int = 0
    topk: int = 0
    moe_ffn_hidden: Optional[int] = None
    shared_experts: int = 0
    dense_layers: int = 0
    # Multi-head latent attention (DeepSeek-V2/V3, Kimi-K2; ``tasks.model.kernels.block.Block``): the key/value
    # latent's width (0: ordinary attention), the query latent's (0: one query projection), the keys' rotary part,
    # and each head's value width (None: head_dim); head_dim is then each head's non-rotary query/key width.
    kv_lora_rank: int = 0
    q_lora_rank: int = 0
    qk_rope_head_dim: int = 0
    v_head_dim: Optional[int] = None
    # A mixture of experts' routed experts as GPT-OSS has them: biases on their linears, and the gated
    # activation's inputs clamped to +-expert_clamp (GPT-OSS's swiglu_limit 7.0; 0: none).
    expert_bias: bool = False
    expert_clamp: float = 0.0


def heads_problem(hidden: int, heads: int, kv_heads: Optional[int], *,
                  prefix: str = "", head_dim: Optional[int] = None) -> Optional[Tuple[str, int, str]]:
    """Why ``heads`` and ``kv_heads`` cannot split a layer ``hidden`` wide, as (field, value,
    reason), the field named after ``prefix``; None when they can.

    Multi-head attention gives each of ``heads`` heads hidden / heads columns (Vaswani et al.
    2017); grouped-query attention (Ainslie et al. 2023) shares each of ``kv_heads`` key/value
    heads among heads / kv_heads query heads, so kv_heads divides heads (None: one key/value
    head per query head), as Megatron-LM asserts of --num-query-groups. A model that sets
    ``head_dim`` (each head that wide; heads x head_dim need not be hidden, Megatron-LM's
    --kv-channels) needs it positive instead."""
    if head_dim is not None:
        if head_dim <= 0:
            return f"{prefix}head_dim", head_dim, "must be a positive number of columns per head"
    elif hidden % heads:
        return f"{prefix}heads", heads, f"does not divide {prefix}hidden={hidden}"
    if kv_heads is not None and heads % kv_heads:
        return (f"{prefix}kv_heads", kv_heads, f"does not divide {prefix}heads={heads}: grouped-query attention "
                                               "shares each key/value head among as many query heads")
    return None


@dataclass
class LinkTier:
    """One tier of links (scale-up inside a node, scale-out across nodes).

    A ring collective over n devices on this tier pays ``latency_us`` per step under
    NCCL's lowest-latency protocol (LL; the other protocols pay fixed multiples of it)
    and saturates at the bus bandwidth ``bandwidth_GBps * efficiency`` per device and
    direction (nccl-tests' busbw); ``tasks.model.collectives.nccl`` holds the curve between.

    ``nvls_efficiency`` is the share of the in-switch reduction's bound (NVLS,
    NVSwitch gen 3+) an all-reduce reaches, 0 where the tier has no in-switch reduction;
    ``nvls_latency_us`` is the fixed latency of one such all-reduce.

    ``channels``: the thread blocks (CTAs, one streaming multiprocessor each) NCCL runs a
    large collective with among devices on this tier (``inter_node``: a group that spans
    nodes), which it holds while the collective runs and which compute beside it cannot
    use (``step.dp_comm.dp_sm_share``); 0 where no source gives them (not charged).
    """

    bandwidth_GBps: float = MISSING
    latency_us: float = MISSING
    efficiency: float = 1.0
    nvls_efficiency: float = 0.0
    nvls_latency_us: float = 0.0
    channels: int = 0


@dataclass
class HardwareProfile:
    """One accelerator system: compute roofline, memory, and two link tiers.

    Every kernel costs at least ``kernel_launch_us`` (Erdil and Schneider-Joseph, arXiv
    2411.01137, §7 of method.md); memory-bound kernels move their bytes at ``hbm_tbps`` x
    ``memory_efficiency``. ``sources`` maps each field name to where its figure comes from.

    The GEMM law (``roofline.gemm_kernel_time``) reads ``compute_units``
    (SMs or CUs, over which a GEMM's output tiles run in waves), the peak of each dtype
    (``peak_tflops`` for bf16 and fp16, ``peak_fp8_tflops`` for fp8, ``None`` where the
    datasheet gives none) and ``gemm_ceiling``: dtype -> the fraction of that peak the
    best-shaped large GEMM reaches (a measured maximum achievable matmul FLOP/s: no GEMM
    runs faster); fp16 takes bf16's entry unless it has its own; ``gemm_tile_ceiling``:
    dtype -> the fraction of that peak at which the law runs a full wave of its best tile,
    where a profile needs it above ``gemm_ceiling`` for the law to pass through the
    maximum-achievable row at that row's own shape (absent: ``gemm_ceiling``);
    ``gemm_tile_overhead_us``: the time a wave of
    output tiles spends outside its K loop (``None``: the law's default, see
    ``roofline.tile_overhead_s``).
    ``gemm_sustained``: dtype -> the fraction of that dtype's peak the best-shaped large GEMM
    sustains once the device runs at its power limit with its clock settled (a measured
    maximum sustainable matmul FLOP/s), at or below ``gemm_ceiling``; a training step runs
    its compute at this rate (``tasks.model.kernels.sustained``). A dtype without an entry
    is taken to sustain its ceiling.
    ``tdp_w``: the board power limit (W) of the datasheet; ``gemm_sustained_w``: the board
    limit at which ``gemm_sustained`` was measured where that is not ``tdp_w`` (a sibling
    device's measurement: the same die run at another limit; ``None``: ``tdp_w``);
    ``power_limit_w``: the limit the cluster's devices run at where it is lower (a
    power-capped or lower-power variant; ``None``: ``tdp_w``). The clock the compute settles
    at follows the limit it runs at against the one it was measured at
    (``sustained.power_scale``).
    ``attention_kernels``: the device whose rows of conf/data/attention_kernels.csv time this
    one's fused attention (``kernels.attention.ROW_DEVICES``: its cuDNN rows,
    ``DEVICE_EFFICIENCY``, or rows of other kernels timed forward and backward together,
    ``COMBINED_EFFICIENCY``); ``None``: the H100 rows' curves, as fractions of this device's peak.
    """

    name: str = MISSING
    accelerator: str = MISSING
    description: str = ""
    devices_per_node: int = MISSING
    peak_tflops: float = MISSING
    hbm_gb: float = MISSING
    hbm_tbps: float = MISSING
    memory_efficiency: float = MISSING
    kernel_launch_us: float = MISSING
    compute_units: int = MISSING
    gemm_ceiling: Dict[str, float] = MISSING
    gemm_tile_ceiling: Dict[str, float] = field(default_factory=dict)
    peak_fp8_tflops: Optional[float] = None
    gemm_tile_overhead_us: Optional[float] = None
    gemm_sustained: Dict[str, float] = field(default_factory=dict)
    tdp_w: Optional[float] = None
    gemm_sustained_w: Optional[float] = None
    power_limit_w: Optional[float] = None
    attention_kernels: Optional[str] = None
    intra_node: LinkTier = field(default_factory=LinkTier)
    inter_node: LinkTier = field(default_factory=LinkTier)
    sources: Dict[str, str] = field(default_factory=dict)

    def source_is_assumption(self, name: str) -> bool:
        """Whether ``sources[name]`` says the figure is an assumption (it starts with
        "assumption"); False for a figure with no source entry."""
        return str(self.sources.get(name, "")).strip().lower().startswith("assumption")


def fingerprint(spec: object) -> str:
    """A short stable hash of a spec's content, ignoring prose (description, sources).

    Two specs with the same figures have the same fingerprint whatever their comments
    say; any changed figure changes it. Used in result keys.
    """
    content = asdict(spec)  # type: ignore[arg-type]
    for prose in ("description", "sources", "source"):
        content.pop(prose, None)
    # Fields added later: a profile without them keeps its hash.
    for unset in ("tdp_w", "gemm_sustained_w", "power_limit_w", "attention_kernels"):
        if content.get(unset, 0) is None:
            content.pop(unset)
    for tier in ("intra_node", "inter_node"):
        if isinstance(content.get(tier), dict) and content[tier].get("channels", 1) == 0:
            content[tier].pop("channels")
    return content_hash(content)
