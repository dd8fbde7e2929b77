"""What a runs file row may state that the model does not express yet: token dropping, a mixture
of experts' router dropping what overflows an expert's capacity (the model prices dropless
routing at the router's forced balance, as the published MoE benchmarks ran). A row stating it
is no error in the file; it is a run the model cannot predict, so ``validate`` lists it as
skipped, with why, and predicts the rest.
"""

from __future__ import annotations

from typing import Dict, Optional

from tasks.validation.cells import RowCells

__all__ = ["UNMODELLED", "unmodelled"]

#: Columns a runs file may carry for what the model does not express (they are not among
#: ``published_runs.csv``'s): a value above 0 marks the row, naming the column, rather than
#: letting it be predicted as another run (a dropping router's as a dropless one's, say).
UNMODELLED: Dict[str, str] = {
    "capacity_factor": "token dropping at an expert capacity factor is not modelled (dropless routing is)"}


def unmodelled(r: RowCells) -> Optional[str]:
    """Why the row ``r`` cannot be predicted (``field='value' why``), naming its first
    ``UNMODELLED`` column above 0; None for a row the model expresses. A cell that is no
    number raises ``RowError`` naming it, as any cell does."""
    for field, why in UNMODELLED.items():
        if r.number(field, float, 0, minimum=0) > 0:
            return f"{field}={r.text(field)!r} {why}: this row cannot be predicted"
    return None
