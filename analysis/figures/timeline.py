"""A projected step's timeline (``tasks.model.step.timeline`` events) as a Gantt chart: a row per
(pipeline stage, track), a bar per event, hidden communication drawn under the compute it
overlaps. Drawn from the events the report is handed, not from lake rows."""

from __future__ import annotations

from typing import Dict, Sequence

from analysis.figures.common import BAR, finish, new_figure

__all__ = ["TRACK_COLOURS", "draw_timeline"]

#: Colour of each track's bars.
TRACK_COLOURS = {"compute": "#4c72b0", "tp": "#dd8452", "pp": "#55a868", "dp": "#c44e52"}


def draw_timeline(events: Sequence, stage_names: Dict[int, str], title: str, note: str):
    """The events (``TimelineEvent``: stage, track, start_s, duration_s) of the stages
    ``stage_names`` names, one row per stage and track, time in seconds."""
    from matplotlib.patches import Patch

    tracks = list(TRACK_COLOURS)
    rows = [(stage, track) for stage in stage_names for track in tracks]
    fig, ax = new_figure(9.0, 1.0 + 0.28 * len(rows))
    index = {row: i for i, row in enumerate(rows)}
    spans: Dict[tuple, list] = {row: [] for row in rows}
    for e in events:
        if (e.stage, e.track) in spans and e.duration_s > 0:
            spans[(e.stage, e.track)].append((e.start_s, e.duration_s))
    for row, bars in spans.items():
        if bars:
            container = ax.broken_barh(bars, (index[row] - 0.4, 0.8), facecolors=TRACK_COLOURS[row[1]],
                                       linewidth=0)
            container.set_gid(BAR)
    ax.set_yticks(range(len(rows)), [f"{stage_names[stage]}: {track}" for stage, track in rows], fontsize=7)
    ax.invert_yaxis()
    ax.set_xlabel("time in the step (s)", fontsize=8)
    end = max((e.start_s + e.duration_s for e in events), default=1.0)
    ax.set_xlim(0.0, end * 1.01)
    handles = [Patch(color=colour, label=track) for track, colour in TRACK_COLOURS.items()]
    finish(fig, ax, title, note, handles, loc="upper left", bbox_to_anchor=(1.0, 1.0))
    return fig
