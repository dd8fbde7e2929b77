"""A runs file row's multi-head latent attention (DeepSeek-V2 and V3, Kimi-K2), read before
anything is predicted.

Blank cells: ``kv_lora_rank`` 0 (ordinary attention, which then states none of the others);
``q_lora_rank`` 0 (one query projection); ``qk_rope_head_dim`` 0; ``v_head_dim`` the row's
``head_dim``. With ``kv_lora_rank`` the row states ``head_dim``, each head's non-rotary query
and key width (``tasks.model.kernels.model_blocks.mla_problem``).
"""

from __future__ import annotations

from typing import Dict, Optional

from tasks.model.kernels.model_blocks import mla_problem
from tasks.model.terms.specs import TransformerModel
from tasks.validation.cells import RowCells

__all__ = ["MLA_COLUMNS", "mla_fields"]

#: The columns read here.
MLA_COLUMNS = ("kv_lora_rank", "q_lora_rank", "qk_rope_head_dim", "v_head_dim")


def mla_fields(r: RowCells, *, layers: int, hidden: int, heads: int, head_dim: Optional[int]) -> Dict[str, object]:
    """The row's latent-attention fields, as ``PublishedRun`` fields; raises ``RowError`` (by
    ``r.fail``) naming the first cell that cannot describe it."""
    fields = {name: r.number(name, int, 0, minimum=0) for name in MLA_COLUMNS}
    fields["v_head_dim"] = fields["v_head_dim"] or None
    model = TransformerModel(name="row", layers=layers, hidden=hidden, heads=heads, head_dim=head_dim, **fields)
    problem = mla_problem(model, prefix="")
    if problem:
        raise r.fail(*problem)
    return fields
