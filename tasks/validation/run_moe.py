"""A runs file row's mixture of experts: its experts and routing, and the expert-parallel layout
and dispatcher it ran with, read before anything is predicted.

Blank cells: ``experts`` 0 (a dense model, which then states none of the others); ``topk``
(required with experts); ``moe_ffn_hidden`` the row's ``ffn_hidden``; ``shared_experts`` and
``dense_layers`` 0; ``ep`` and ``etp`` 1; ``dispatcher`` alltoall (``layout.MOE_DISPATCHERS``:
flex for DeepEP or HybridEP under Megatron-Core's flex dispatcher); ``moe_a2a_overlap`` false
(Megatron-Core's ``overlap_moe_expert_parallel_comm``); ``dispatcher_sms`` 20 (the SMs the
flex dispatcher's kernels hold, ``Stack.dispatcher_sms``: Megatron-Core's DeepEP default; 32
for HybridEP as Megatron-Bridge's performance scripts run it). The model is
``tasks.model.kernels.model_blocks``' and the layout's checks ``layout.structural_violations``'
(experts that EP divides, ETP x EP dividing TP x CP x DP, sequence parallelism under TP).
"""

from __future__ import annotations

from typing import Dict

from tasks.model.kernels.model_blocks import moe_problem
from tasks.model.terms.specs import TransformerModel
from tasks.model.terms.layout import MOE_DISPATCHERS
from tasks.model.terms.stack import DEEPEP_SMS
from tasks.validation.cells import RowCells

__all__ = ["MOE_COLUMNS", "moe_fields"]

#: The columns read here.
MOE_COLUMNS = ("experts", "topk", "moe_ffn_hidden", "shared_experts", "dense_layers", "ep", "etp", "dispatcher",
               "moe_a2a_overlap", "dispatcher_sms", "expert_bias", "expert_clamp", "moe_fused_mlp")


def moe_fields(r: RowCells, *, layers: int, hidden: int, heads: int, gated: bool) -> Dict[str, object]:
    """The row's mixture-of-experts fields, as ``PublishedRun`` fields; raises ``RowError`` (by
    ``r.fail``) naming the first cell that cannot describe one (``model_blocks.moe_problem``)."""
    experts = r.number("experts", int, 0, minimum=0)
    model = TransformerModel(name="row", layers=layers, hidden=hidden, heads=heads, experts=experts,
                             topk=r.number("topk", int, 0, minimum=0),
                             moe_ffn_hidden=r.number("moe_ffn_hidden", int, 0, minimum=0) or None,
                             shared_experts=r.number("shared_experts", int, 0, minimum=0),
                             dense_layers=r.number("dense_layers", int, 0, minimum=0), gated_mlp=gated,
                             expert_bias=bool(r.flag("expert_bias", False)),
                             expert_clamp=r.number("expert_clamp", float, 0.0, minimum=0))
    problem = moe_problem(model, prefix="")
    if problem:
        raise r.fail(*problem)
    ep, etp = r.number("ep", int, 1), r.number("etp", int, 1)
    if ep * etp > 1 and not experts:
        raise r.fail("ep" if ep > 1 else "etp", ep if ep > 1 else etp, "needs experts above 0 (a mixture of experts)")
    return {"experts": experts, "topk": model.topk, "moe_ffn_hidden": model.moe_ffn_hidden,
            "shared_experts": model.shared_experts, "dense_layers": model.dense_layers, "ep": ep, "etp": etp,
            "dispatcher": r.choice("dispatcher", MOE_DISPATCHERS, "alltoall"),
            "moe_a2a_overlap": bool(r.flag("moe_a2a_overlap", False)),
            "dispatcher_sms": r.number("dispatcher_sms", int, DEEPEP_SMS, minimum=0), "expert_bias": model.expert_bias,
            "expert_clamp": model.expert_clamp, "moe_fused_mlp": bool(r.flag("moe_fused_mlp", False))}
