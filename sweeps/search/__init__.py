"""The layout search: the Optuna driver (ask -> dispatch -> commit -> tell, with resume)
in ``driver``, and what it found, as frames, in ``results`` (top layouts, Pareto front,
the exhaustive optimum and the search's gap to it, the scaling view's winners)."""

from sweeps.search.driver import (
    IN_PROCESS,
    WARM_START_LIMIT,
    SearchReport,
    layout_params,
    local_evaluator,
    open_study,
    run_search,
    study_path,
    suggest_layout,
)

__all__ = ["SearchReport", "run_search", "open_study", "study_path", "suggest_layout", "layout_params",
           "local_evaluator", "WARM_START_LIMIT", "IN_PROCESS"]
