"""A runs file row's parallel degrees: TP, PP, CP, DP and the GPU count they make, with context
parallelism's own checks, read before anything is predicted.

Blank cells: ``tp``, ``pp``, ``cp`` 1; ``dp`` ``gpus / (tp x pp x cp)``; ``gpus`` ``tp x pp x cp x
dp``; ``cp_comm`` p2p (``layout.CP_COMMS``: all_gather for the all-gather exchange Llama 3 ran).
``context_parallel`` is another spelling of ``cp``. A row with CP above 1 asks for fused
attention (``flash_attention`` true) and a sequence that splits into 2 x CP equal chunks
(``layout.cp_problem``).
"""

from __future__ import annotations

from typing import Dict

from tasks.model.terms.layout import CP_COMMS, cp_problem
from tasks.validation.cells import RowCells

__all__ = ["LAYOUT_COLUMNS", "parallel_degrees"]

#: The columns read here (``context_parallel`` spells ``cp`` another way).
LAYOUT_COLUMNS = ("tp", "pp", "cp", "context_parallel", "cp_comm", "dp", "gpus")


def _cp(r: RowCells) -> int:
    """The row's CP degree from ``cp`` or ``context_parallel`` (both given: they must agree)."""
    cp, spelled = r.number("cp", int, 0), r.number("context_parallel", int, 0)
    if cp and spelled and cp != spelled:
        raise r.fail("context_parallel", spelled, f"disagrees with cp {cp}: give one of them")
    return max(cp or spelled, 1)


def parallel_degrees(r: RowCells, *, seq: int, flash: bool) -> Dict[str, object]:
    """``tp``, ``pp``, ``cp``, ``cp_comm``, ``dp`` and ``gpus`` of the row, as ``PublishedRun``
    fields; raises ``RowError`` (by ``r.fail``) naming the field of a layout that cannot run."""
    tp, pp, cp = r.number("tp", int, 1), r.number("pp", int, 1), _cp(r)
    cp_comm = r.choice("cp_comm", CP_COMMS, "p2p")
    problem = cp_problem(cp, seq, flash)
    if problem:
        field = "cp" if r.text("cp", "") else "context_parallel"
        raise r.fail(field, r.text(field), problem + (" (flash_attention true)" if not flash else ""))
    gpus = r.number("gpus", int, 0, minimum=0)
    dp = r.number("dp", int, (gpus // (tp * pp * cp)) if gpus else 1)
    gpus = gpus or tp * pp * cp * dp
    if tp * pp * cp * dp != gpus:
        raise r.fail("gpus", gpus, f"is not tp x pp x cp x dp = {tp} x {pp} x {cp} x {dp} = {tp * pp * cp * dp}: "
                                   "an impossible layout")
    return {"tp": tp, "pp": pp, "cp": cp, "cp_comm": cp_comm, "dp": dp, "gpus": gpus}
