"""What every figure shares: missing rows, a blank figure, the caption, saving.

Figures are drawn on ``matplotlib.figure.Figure`` objects (the Agg canvas, no pyplot
state), so drawing is headless and matplotlib is imported only when a figure is made.
Every artist that carries data has a ``gid`` (``SERIES``, ``MARK`` or ``BAR``), which is
how a test counts the lines or bars a figure drew.
"""

from __future__ import annotations

from pathlib import Path
from typing import Iterable, List, Optional, Sequence, Tuple

import pandas as pd

from analysis.report_files import make_folder, write_whole
from sweeps.lake.kinds import ACCURACY, PROJECTION, SCALING, SEARCH, VALIDATION

__all__ = ["MissingRows", "COMMANDS", "CASE_STUDY", "SERIES", "MARK", "BAR", "LABEL", "require", "new_figure",
           "new_panels", "caption", "finish", "save", "data_lines", "data_bars", "data_labels", "log2_ticks"]

#: gid of a data line (one per series the rows imply).
SERIES = "series"
#: gid of marked points (highlighted models, trials).
MARK = "mark"
#: gid of a bar segment container.
BAR = "bar"
#: gid of a text label placed beside a data point.
LABEL = "label"

#: The case study's rows: projection rows of a sweep whose links are placed.
CASE_STUDY = "casestudy"
#: The command that produces the rows of each source a figure reads (a kind, or the case study).
COMMANDS = {
    PROJECTION: "commscale run",
    CASE_STUDY: "commscale run sweep=casestudy",
    ACCURACY: "commscale calibrate",
    SEARCH: "commscale search",
    SCALING: "commscale search scaling --scaling",
    VALIDATION: "commscale validate",
}


class MissingRows(LookupError):
    """A figure's rows are not in the lake; ``command`` produces them."""

    def __init__(self, source: str, what: str) -> None:
        self.source = source
        self.command = COMMANDS[source]
        super().__init__(f"no {what} in the lake: `{self.command}` produces them")


def require(rows: Optional[pd.DataFrame], source: str, columns: Sequence[str], what: str) -> pd.DataFrame:
    """``rows`` if it has rows and every column of ``columns``; else ``MissingRows``."""
    if rows is None or rows.empty or any(c not in rows.columns for c in columns):
        raise MissingRows(source, what)
    return rows


def new_figure(width: float = 7.5, height: float = 4.8):
    """A blank figure and its one Axes on the Agg canvas."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(width, height), dpi=110, layout="constrained")
    FigureCanvasAgg(fig)
    return fig, fig.add_subplot()


def new_panels(count: int, width: float = 7.5, height: float = 4.6):
    """A blank figure of ``count`` Axes stacked one above the other (``height`` each)."""
    fig, ax = new_figure(width, height * count)
    ax.remove()
    return fig, list(fig.subplots(count, 1, squeeze=False)[:, 0])


def _distinct(rows: pd.DataFrame, column: str) -> str:
    if column not in rows.columns:
        return ""
    values = sorted({str(v) for v in rows[column].dropna()})
    return ", ".join(values[:4]) + (f" (+{len(values) - 4})" if len(values) > 4 else "")


def caption(rows: pd.DataFrame, *fields: Tuple[str, str]) -> str:
    """A provenance line from the rows themselves: hardware, calibration, then each
    (label, column) of ``fields`` whose values the rows carry."""
    parts = []
    for label, column in (("hardware", "hardware"), ("calibration", "calibration"), *fields):
        text = _distinct(rows, column)
        if text:
            parts.append(f"{label} {text}")
    return " · ".join(parts)


def finish(fig, ax, title: str, note: str, legend_handles: Optional[List] = None, /, **legend) -> None:
    """Title, a provenance caption under the plot, and a legend."""
    ax.set_title(title, fontsize=10.5)
    fig.supxlabel(note, fontsize=7.5, color="#444444")
    if legend_handles is not None:
        ax.legend(handles=legend_handles, fontsize=7.5, **legend)
    else:
        ax.legend(fontsize=7.5, **legend)
    ax.grid(True, which="major", alpha=0.3)


def save(fig, stem: Path) -> List[Path]:
    """Write ``stem``.png and ``stem``.svg (text kept as text), each whole or not at all
    (``analysis.report_files.write_whole``); returns both paths. A folder that cannot hold
    them raises ``ReportFolderError`` naming the path."""
    import matplotlib

    make_folder(stem.parent)
    paths = [stem.with_name(f"{stem.name}.png"), stem.with_name(f"{stem.name}.svg")]
    write_whole(paths[0], lambda handle: fig.savefig(handle, format="png", dpi=110))
    # The layout the PNG's draw settled (in figure fractions) serves the SVG as it is: laying
    # the figure out again costs as much as the draw itself.
    fig.set_layout_engine("none")
    with matplotlib.rc_context({"svg.fonttype": "none", "svg.hashsalt": "commscale"}):
        write_whole(paths[1], lambda handle: fig.savefig(handle, format="svg", metadata={"Date": None}))
    return paths


def data_lines(ax, gid: str = SERIES) -> list:
    """The lines of ``ax`` drawn for data of kind ``gid``."""
    return [line for line in ax.get_lines() if line.get_gid() == gid]


def data_labels(ax, gid: str = LABEL) -> list:
    """The text labels of ``ax`` placed beside data points."""
    return [text for text in ax.texts if text.get_gid() == gid]


def data_bars(ax, gid: str = BAR) -> list:
    """The bar containers of ``ax`` whose bars carry ``gid`` (one per stacked segment)."""
    return [c for c in ax.containers if c.patches and c.patches[0].get_gid() == gid]


def log2_ticks(ax, values: Iterable[float], axis: str = "x") -> None:
    """A base-2 log axis labelled at the rows' own values."""
    from matplotlib.ticker import NullLocator

    ticks = sorted({float(v) for v in values})
    getattr(ax, f"set_{axis}scale")("log", base=2)
    getattr(ax, f"set_{axis}ticks")(ticks, [f"{t:,.0f}" if t >= 1 else f"{t:g}" for t in ticks])
    getattr(ax, f"{axis}axis").set_minor_locator(NullLocator())
