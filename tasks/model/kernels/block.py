"""The shape of one Transformer layer beyond H and the heads (``Block``), and the shapes a
mixture-of-experts MLP's GEMMs and multi-head latent attention's projections take on one
device. Plain data and NumPy arithmetic: every
function accepts scalars or arrays (broadcasting)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Dict, Optional, Tuple

__all__ = ["Block", "STUDY_BLOCK", "qkv_width", "routed_tokens", "moe_forward", "MOE_GEMMS", "mla_forward",
           "MLA_GEMMS", "mla_params"]


@dataclass(frozen=True)
class Block:
    """What a layer's shape needs beyond H and the heads (method.md §3 takes the defaults).

    ``kv_heads``: key/value heads (grouped-query attention, Ainslie et al. 2023; None: as
    many as query heads). ``ffn``: the MLP's width (None: 4H). ``gated``: a gated MLP
    (SwiGLU, Shazeer 2020: gate and up projections of width ``ffn``, then down: three
    matrices) rather than two. ``flash``: fused attention (Dao et al. 2022): the scores and
    context products, softmax and its dropout run inside one kernel that never stores the
    SL x SL matrix (``tasks.model.kernels.attention`` times it), so they are not GEMMs or
    element-wise kernels of the layer here. ``dropout``: the layer drops out its attention
    probabilities and both branches' outputs (Megatron-LM's default, probability 0.1);
    without it (a probability of 0, as Llama trains) those kernels do not run and keep no
    masks (PyTorch's dropout returns its input at p = 0). ``head_dim``: the width of one
    attention head (None: H / heads). Where it is set, Q, the context and the attention output
    projection's input are heads x head_dim wide rather than H (Qwen3 and GPT-OSS set their
    own, as Megatron-LM's --kv-channels does).

    A mixture-of-experts layer (``experts`` > 0; Shazeer et al. 2017, Fedus et al. 2022, as
    Megatron-Core's ``MoELayer`` runs it) replaces the MLP by a router (a GEMM of H x
    ``experts``), ``experts`` routed experts, each an MLP ``moe_ffn`` wide (None: ``ffn``) of
    which every token visits ``topk``, and shared experts every token visits, one TP-split
    MLP ``shared_ffn`` wide all together (Megatron-Core's
    ``moe_shared_expert_intermediate_size``: shared experts x their width; 0: none). GPT-OSS's
    routed experts have biases (``expert_bias``) and clamp their gated activation's inputs
    (``expert_clamp``); ``layer.elementwise_kernels`` prices what that costs outside Transformer
    Engine's fused MLP.

    Multi-head latent attention (``kv_lora`` > 0; DeepSeek-AI, DeepSeek-V2, arXiv 2405.04434
    §2.1, as Megatron-Core's ``MLASelfAttention`` runs it) projects the input down to
    ``kv_lora`` (plus ``rope_dim``, the keys' shared rotary part) and up to each head's key
    (``head_dim`` + ``rope_dim`` wide) and value (``v_dim``, None: ``head_dim``), and the
    queries likewise through ``q_lora`` (0: one projection); the attention core's products are
    ``head_dim`` + ``rope_dim`` (scores) and ``v_dim`` (context) deep.
    """

    kv_heads: Optional[float] = None
    ffn: Optional[float] = None
    gated: bool = False
    flash: bool = False
    dropout: bool = True
    head_dim: Optional[float] = None
    experts: float = 0.0
    topk: float = 0.0
    moe_ffn: Optional[float] = None
    shared_ffn: float = 0.0
    q_lora: float = 0.0
    kv_lora: float = 0.0
    rope_dim: float = 0.0
    v_dim: Optional[float] = None
    expert_bias: bool = False
    expert_clamp: bool = False

    @property
    def mla(self) -> bool:
        """Whether the attention is multi-head latent attention."""
        return self.kv_lora > 0

    def value_dim(self, h, heads):
        """The width of one head's value (and context)."""
        return self.hd(h, heads) if self.v_dim is None else self.v_dim

    def qk_dim(self, h, heads):
        """The width of one head's query and key: the head's width, and latent attention's rotary part."""
        return self.hd(h, heads) + self.rope_dim

    def core_width(self, h, heads):
        """The attention core's width over all heads, as its FLOPs count it: heads x the mean of
        the scores' and the context's depths (``attention_width`` but under latent attention)."""
        return heads * (self.qk_dim(h, heads) + self.value_dim(h, heads)) / 2.0 if self.mla \
            else self.attention_width(h, heads)

    def kv_dim(self, h, heads):
        """One key/value head's width, the mean of a key's and a value's."""
        return (self.qk_dim(h, heads) + self.value_dim(h, heads)) / 2.0 if self.mla else self.hd(h, heads)

    def kv(self, heads):
        return heads if self.kv_heads is None else self.kv_heads

    def hd(self, h, heads):
        """The width of one attention head."""
        return h / heads if self.head_dim is None else self.head_dim

    def attention_width(self, h, heads):
        """The width of the context over all heads (and of Q but under latent attention): H, or
        heads x head_dim (x ``v_dim`` under latent attention)."""
        if self.mla:
            return heads * self.value_dim(h, heads)
        return h if self.head_dim is None else heads * self.head_dim

    def width(self, h):
        return 4.0 * h if self.ffn is None else self.ffn

    @property
    def moe(self) -> bool:
        """Whether the layer's MLP is a mixture of experts."""
        return self.experts > 0

    def expert_width(self, h):
        """One routed expert's width."""
        return self.width(h) if self.moe_ffn is None else self.moe_ffn

    def activation_width(self, h):
        """The MLP activation's elements per token: ``ffn``, or under a mixture of experts the
        ``topk`` experts' widths a token visits and the shared experts'."""
        return self.topk * self.expert_width(h) + self.shared_ffn if self.moe else self.width(h)

    @property
    def mlp_matrices(self) -> int:
        return 3 if self.gated else 2


#: The study's layer: multi-head attention, a 4H GELU MLP, the score matrix materialised.
STUDY_BLOCK = Block()



def qkv_width(h, heads, block: Block):
    """Width of the QKV projection's output: heads x head_dim + 2 x kv_heads x head_dim (H +
    2 x kv_heads x H / heads where the head width is H / heads)."""
    return block.attention_width(h, heads) + 2.0 * block.kv(heads) * block.hd(h, heads)


def routed_tokens(tokens, tp, block: Block, ep=1.0, etp=1.0):
    """Token rows each of a device's experts runs, at the forced balance of a router that
    spreads every expert the same load (Megatron-Core's ``moe_router_force_load_balancing``,
    as the published MoE benchmarks run; dropless routing at balance drops nothing): the
    MoE layer's input is the TP rank's 1/TP of the ``tokens`` (sequence parallel, which
    Megatron-Core requires of MoE under TP), each routed to ``topk`` experts; an EP group of
    ``ep`` ranks exchanges them so each rank's experts/EP experts get their share of the
    group's EP x tokens/TP x topk, and expert tensor parallelism all-gathers them over its
    ``etp`` ranks (``MoEAlltoAllTokenDispatcher``: all-to-all over EP, then all-gather over
    ETP; Megatron-LM megatron/core/transformer/moe/token_dispatcher.py at d98e8a64dd):
    tokens/TP x topk x ETP x EP / experts each."""
    return tokens / tp * block.topk * etp * ep / block.experts


def moe_forward(h, tokens, tp, block: Block, ep, etp) -> Dict[str, Tuple]:
    """A mixture-of-experts MLP's forward GEMMs on one device: the router on the TP rank's
    tokens/TP (its weight replicated, Megatron-Core's ``TopKRouter``); each of the device's
    experts/EP experts' FC1 and FC2 on ``routed_tokens`` rows, 1/ETP of each expert's width
    (a grouped GEMM: ``batch`` experts/EP); and the shared experts as a TP-split MLP over all
    the tokens (``SharedExpertMLP``)."""
    rows, local, width = routed_tokens(tokens, tp, block, ep, etp), block.experts / ep, block.expert_width(h)
    shapes = {
        "router": (tokens / tp, block.experts, h, 1.0),
        "expert_fc1": (rows, (block.mlp_matrices - 1) * width / etp, h, local),
        "expert_fc2": (rows, h, width / etp, local),
    }
    if block.shared_ffn:
        shapes["shared_fc1"] = (tokens, (block.mlp_matrices - 1) * block.shared_ffn / tp, h, 1.0)
        shapes["shared_fc2"] = (tokens, h, block.shared_ffn / tp, 1.0)
    return shapes


#: The forward GEMMs of a mixture-of-experts MLP, in place of FC1 and FC2.
MOE_GEMMS: Tuple[str, ...] = ("router", "expert_fc1", "expert_fc2", "shared_fc1", "shared_fc2")

#: The forward GEMMs of latent attention, in place of QKV.
MLA_GEMMS: Tuple[str, ...] = ("q_down", "q_up", "q_proj", "kv_down", "kv_up")


def mla_forward(h, heads, tokens, tp, block: Block) -> Dict[str, Tuple]:
    """Latent attention's projections' forward GEMMs on one device, as (m, n, k, batch): the
    down projections to ``q_lora`` and to ``kv_lora`` + ``rope_dim`` whole on every TP rank
    (Megatron-Core builds them ``parallel_mode="duplicated"``: multi_latent_attention.py at
    core_v0.15.3, lines 371-372 and 410-411), the up projections to each head's query and key
    and value split by TP."""
    shapes = {}
    queries = heads * block.qk_dim(h, heads) / tp
    if block.q_lora:
        shapes["q_down"] = (tokens, block.q_lora, h, 1.0)
        shapes["q_up"] = (tokens, queries, block.q_lora, 1.0)
    else:
        shapes["q_proj"] = (tokens, queries, h, 1.0)
    shapes["kv_down"] = (tokens, block.kv_lora + block.rope_dim, h, 1.0)
    shapes["kv_up"] = (tokens, heads * (block.hd(h, heads) + block.value_dim(h, heads)) / tp, block.kv_lora, 1.0)
    return shapes


def mla_params(h, heads, block: Block) -> Tuple[float, ...]:
    """Latent attention's projection matrices (all ranks together; elements each): the query's
    down and up (or its one projection), the key/value's down and up; the output projection is
    the layer's own."""
    queries = heads * block.qk_dim(h, heads)
    q = (h * block.q_lora, block.q_lora * queries) if block.q_lora else (h * queries,)
    return q + (h * (block.kv_lora + block.rope_dim),
                block.kv_lora * heads * (block.hd(h, heads) + block.value_dim(h, heads)))

