"""What a runs file row may state that the model does not express yet: mixture-of-experts
layers and expert parallelism. A row stating them is no error in the file; it is a run the
model cannot predict, so ``validate`` lists it as skipped, with why, and predicts the rest.
"""

from __future__ import annotations

from typing import Dict, Optional

from tasks.validation.cells import RowCells

__all__ = ["UNMODELLED", "unmodelled"]

_NO_EP = "expert parallelism (mixture of experts) is not modelled"
_NO_MOE = "mixture-of-experts layers are not modelled"
#: Columns a runs file may carry for what the model does not express (they are not among
#: ``published_runs.csv``'s): a value above 1 marks the row, naming the column, rather than
#: letting it be predicted as another layout (expert-parallel ranks folded into DP, say).
UNMODELLED: Dict[str, str] = {"ep": _NO_EP, "expert_parallel": _NO_EP, "experts": _NO_MOE, "num_experts": _NO_MOE}


def unmodelled(r: RowCells) -> Optional[str]:
    """Why the row ``r`` cannot be predicted (``field='value' why``), naming its first
    ``UNMODELLED`` column above 1; None for a row the model expresses. A cell that is no
    whole number raises ``RowError`` naming it, as any cell does."""
    for field, why in UNMODELLED.items():
        if r.number(field, int, 1, minimum=0) > 1:
            return f"{field}={r.text(field)!r} {why}: this row cannot be predicted"
    return None
