"""The study's figures, each drawn from lake rows only (matplotlib, Agg canvas).

Every ``draw_*`` function takes a pandas DataFrame of rows of one result kind, returns a
``matplotlib.figure.Figure`` and raises ``MissingRows`` (which names the command that
produces the rows) when the rows it needs are absent. ``save`` writes PNG and SVG.

| function | rows | figure |
| --- | --- | --- |
| ``draw_serialized`` | projection | serialized fraction vs TP per (H, SL) (Fig. 10a; Fig. 11 for m > 1) |
| ``draw_overlapped`` | projection | overlapped comm % of compute vs SL·B per H (Fig. 10b; Fig. 11) |
| ``draw_case_study`` | projection, sweep with links placed | stacked compute / serialized / exposed DP (Fig. 12) |
| ``draw_accuracy`` | accuracy | projected vs measured per operator class (Fig. 13) |
| ``draw_pareto`` | search | exposed communication share vs tokens/s/device, Pareto front |
| ``draw_scaling`` | scaling | tokens/s/device vs device count |
| ``draw_latency_floor`` | scaling | latency share of step time vs device count |
| ``draw_codesign`` | codesign | step time vs cluster cost of a co-design study's trials, its Pareto front |
| ``draw_limits`` | limits | best utilisation within a duration vs training FLOP, per scenario |
| ``draw_validation`` | validation | predicted vs published per dataset and metric, newest cost model |
| ``draw_timeline`` | a step's timeline events | a Gantt chart per pipeline stage and track |
"""

from analysis.figures.accuracy import draw_accuracy
from analysis.figures.casestudy import draw_case_study, is_case_study
from analysis.figures.common import COMMANDS, MissingRows, save
from analysis.figures.codesign import draw_codesign
from analysis.figures.limits import draw_limits
from analysis.figures.search import draw_latency_floor, draw_pareto, draw_scaling, pareto_front
from analysis.figures.study import draw_overlapped, draw_serialized
from analysis.figures.timeline import draw_timeline
from analysis.figures.validation import draw_validation

__all__ = [
    "COMMANDS",
    "MissingRows",
    "save",
    "draw_serialized",
    "draw_overlapped",
    "draw_case_study",
    "is_case_study",
    "draw_accuracy",
    "draw_pareto",
    "draw_scaling",
    "draw_latency_floor",
    "pareto_front",
    "draw_validation",
    "draw_limits",
    "draw_codesign",
    "draw_timeline",
]
