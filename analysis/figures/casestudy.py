"""The case study (Pati et al., arXiv 2302.02825, Fig. 12; method.md §5.5): one large
layer with TP inside a node and DP across nodes, its time per layer as stacked bars of
compute, serialized (TP) communication and the exposed part of the overlapped (DP)
communication, for each network scenario (DP links inside a node, across nodes, across
nodes with interference) and each flop-vs-bw multiplier m.

Reads ``projection`` rows of a sweep that places its links (``sweep=casestudy``).
"""

from __future__ import annotations

import pandas as pd

from analysis.figures.common import BAR, CASE_STUDY, caption, finish, new_figure, require

__all__ = ["draw_case_study", "is_case_study", "scenario_label"]

_COLUMNS = ["h", "sl", "b", "tp", "dp", "flop_vs_bw", "links", "dp_slowdown", "dp_tier", "status",
            "t_compute_s", "t_tp_comm_s", "t_dp_comm_s", "exposed_comm_s", "step_time_s", "comm_share"]
_SEGMENTS = (("compute", "#4c72b0"), ("serialized (TP) comm", "#dd8452"), ("exposed overlapped (DP) comm", "#c44e52"))


def is_case_study(rows: pd.DataFrame) -> bool:
    """Rows of a sweep that places some group on its links (``links = placed``)."""
    return "links" in rows.columns and bool((rows["links"] == "placed").any())


def scenario_label(dp_tier: str, slowdown: float) -> str:
    """How a bar's DP all-reduce runs, in words."""
    where = "DP inter-node" if dp_tier == "inter_node" else "DP intra-node"
    return where + (f"\n+{slowdown:g}x interference" if slowdown > 1 else "")


def draw_case_study(rows: pd.DataFrame):
    """One stacked bar per (configuration, m, scenario): compute + serialized + exposed DP
    (the last is the rows' exposed communication less their serialized part; the bar's
    height is the row's step time). The DP all-reduce's own time (before interference) is
    drawn as an outline beside each bar, and the rows' communication share is written on top."""
    rows = require(rows, CASE_STUDY, _COLUMNS, "case-study rows")
    rows = rows[(rows["status"] == "ok") & (rows["tp"] > 0)]
    if not is_case_study(rows):
        rows = rows.iloc[0:0]
    rows = require(rows, CASE_STUDY, [], "case-study rows (a sweep with links placed)")
    rows = rows.sort_values(["h", "sl", "b", "tp", "dp", "flop_vs_bw", "dp_tier", "dp_slowdown"],
                            key=lambda c: c.map({"intra_node": 0, "inter_node": 1}) if c.name == "dp_tier" else c)
    configs = rows[["h", "sl", "b", "tp", "dp"]].drop_duplicates()
    fig, ax = new_figure(max(7.5, 0.85 * len(rows) + 2), 5.4)
    x = range(len(rows))
    ms = 1e3
    parts = [rows["t_compute_s"] * ms, rows["t_tp_comm_s"] * ms, (rows["exposed_comm_s"] - rows["t_tp_comm_s"]) * ms]
    bottom = pd.Series(0.0, index=rows.index)
    for (label, color), values in zip(_SEGMENTS, parts, strict=True):
        ax.bar(x, values, 0.62, bottom=bottom, color=color, label=label, gid=BAR)
        bottom = bottom + values
    ax.bar([i + 0.36 for i in x], rows["t_dp_comm_s"] * ms, 0.1, color="none", edgecolor="#c44e52", hatch="///",
           lw=0.8, label="DP all-reduce in all (hidden or not, before interference)", gid="dp_total")
    for i, (top, share) in enumerate(zip(bottom, rows["comm_share"], strict=True)):
        ax.annotate(f"{100 * share:.0f}%", (i, top), textcoords="offset points", xytext=(0, 2), ha="center",
                    fontsize=7.5)
    labels = []
    for r in rows.itertuples():
        config = f"H={r.h:,} SL={r.sl:,}\n" if len(configs) > 1 else ""
        labels.append(f"{config}m={r.flop_vs_bw:g}\n{scenario_label(r.dp_tier, r.dp_slowdown)}")
    ax.set_xticks(list(x), labels, fontsize=7)
    ax.set_ylim(0, 1.3 * max(bottom.max(), (rows["t_dp_comm_s"] * ms).max()))  # room for the legend
    ax.set_ylabel("time per layer, fwd + bwd (ms)")
    ax.set_xlabel("scenario (m: compute m times faster relative to network bandwidth); % on top: communication share")
    c = configs.iloc[0]
    what = (f"H={c.h:,}, SL={c.sl:,}, B={c.b}, TP={c.tp} in a node, DP={c.dp} across nodes" if len(configs) == 1
            else f"{len(configs)} configurations")
    finish(fig, ax, f"Fig. 12 · case study: {what}",
           caption(rows, ("sweep", "sweep"), ("cost model", "cost_model_version")), loc="upper center", ncol=2)
    return fig
