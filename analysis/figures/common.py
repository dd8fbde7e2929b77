"""What every figure shares: missing rows, a blank figure, the caption, saving.

Figures are drawn on ``matplotlib.figure.Figure`` objects (the Agg canvas, no pyplot
state), so drawing is headless and matplotlib is imported only when a figure is made.
Every artist that carries data has a ``gid`` (``SERIES``, ``MARK`` or ``BAR``), which is
how a test counts the lines or bars a figure drew.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Callable, Iterable, List, Optional, Sequence, Tuple

import pandas as pd

from analysis.report_files import make_folder, write_whole
from sweeps.lake.kinds import ACCURACY, CODESIGN, LIMITS, PROJECTION, SCALING, SEARCH, VALIDATION

__all__ = ["MissingRows", "COMMANDS", "CASE_STUDY", "DPI", "SERIES", "MARK", "BAR", "LABEL", "require", "new_figure",
           "new_panels", "caption", "fit_width", "footer", "finish", "save", "compact_svg", "data_lines", "data_bars",
           "data_labels", "log2_ticks"]

#: The resolution (dots per inch) figures are drawn and their PNG written at.
DPI = 110
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
    LIMITS: "commscale limits",
    CODESIGN: "commscale codesign",
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

    fig = Figure(figsize=(width, height), dpi=DPI, layout="constrained")
    FigureCanvasAgg(fig)
    return fig, fig.add_subplot()


def new_panels(count: int, width: float = 7.5, height: float = 4.6, columns: int = 1):
    """A blank figure of ``count`` Axes, ``columns`` to a row, each ``width`` by ``height``
    inches; the grid's unused places are left empty."""
    rows = -(-count // columns)
    fig, ax = new_figure(width * columns, height * rows)
    ax.remove()
    axes = list(fig.subplots(rows, columns, squeeze=False).ravel())
    for unused in axes[count:]:
        unused.remove()
    return fig, axes[:count]


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


def fit_width(fig, text: str, fontsize: float, width: float = 0.0) -> str:
    """``text`` broken into lines no wider than ``width`` inches (the figure's width less a
    margin when 0) at ``fontsize`` points, as the figure's renderer measures them: at its
    spaces, and within a word that is wider than a line by itself."""
    from matplotlib.font_manager import FontProperties

    renderer = fig.canvas.get_renderer()
    prop = FontProperties(size=fontsize)
    limit = (width or 0.96 * fig.get_figwidth()) * fig.dpi

    def fits(line: str) -> bool:
        return renderer.get_text_width_height_descent(line, prop, ismath=False)[0] <= limit

    lines: List[str] = []
    for paragraph in text.split("\n"):
        line = ""
        for word in (piece for word in paragraph.split(" ") for piece in _pieces(word, fits)):
            longer = f"{line} {word}" if line else word
            if line and not fits(longer):
                lines.append(line)
                longer = word
            line = longer
        lines.append(line)
    return "\n".join(lines)


def _pieces(word: str, fits: Callable[[str], bool]) -> List[str]:
    """``word`` as it is if it ``fits`` a line, else cut into the longest pieces that do."""
    if fits(word):
        return [word]
    pieces = [""]
    for char in word:
        if pieces[-1] and not fits(pieces[-1] + char):
            pieces.append("")
        pieces[-1] += char
    return pieces


def footer(fig, note: str) -> None:
    """The provenance caption under the whole figure, in as many lines as its width needs."""
    fig.supxlabel(fit_width(fig, note, 7.5), fontsize=7.5, color="#444444")


def finish(fig, ax, title: str, note: str, legend_handles: Optional[List] = None, /, **legend) -> None:
    """Title, a provenance caption under the plot, and a legend."""
    ax.set_title(title, fontsize=10.5)
    footer(fig, note)
    if legend_handles is not None:
        ax.legend(handles=legend_handles, fontsize=7.5, **legend)
    else:
        ax.legend(fontsize=7.5, **legend)
    ax.grid(True, which="major", alpha=0.3)


#: The fonts an SVG names for its text (the first is the one matplotlib measured it with).
_SVG_FONTS = ["DejaVu Sans", "Arial", "Helvetica"]
_TAG = re.compile(r"<[^>]+>")
_GEOMETRY = re.compile(r'(\s(?:d|x|y|x1|x2|y1|y2|width|height|transform|points)=")([^"]*)"')
_DECIMALS = re.compile(r"(\d\.\d\d)\d+")


def compact_svg(svg: str) -> str:
    """matplotlib's SVG, drawn the same in fewer bytes: without its metadata block, the
    doctype (it names a remote DTD no renderer needs) and the indentation between tags,
    coordinates to 1/100 pt (it writes six decimals). Only the geometry attributes of tags
    are touched, never the text a figure shows."""
    svg = re.sub(r"<metadata>.*?</metadata>|<!DOCTYPE[^>]*>", "", svg, flags=re.S)

    def tag(match) -> str:
        return _GEOMETRY.sub(lambda a: a.group(1) + " ".join(_DECIMALS.sub(r"\1", a.group(2)).split()) + '"',
                             match.group(0))

    return re.sub(r">\s+<", "><", _TAG.sub(tag, svg)).strip() + "\n"


def save(fig, stem: Path) -> List[Path]:
    """Write ``stem``.png and ``stem``.svg (text kept as text, ``compact_svg``), each whole
    or not at all (``analysis.report_files.write_whole``); returns both paths. A folder that
    cannot hold them raises ``ReportFolderError`` naming the path."""
    import io

    import matplotlib

    make_folder(stem.parent)
    paths = [stem.with_name(f"{stem.name}.png"), stem.with_name(f"{stem.name}.svg")]
    write_whole(paths[0], lambda handle: fig.savefig(handle, format="png", dpi=DPI))
    # The layout the PNG's draw settled (in figure fractions) serves the SVG as it is: laying
    # the figure out again costs as much as the draw itself.
    fig.set_layout_engine("none")
    svg = io.StringIO()
    with matplotlib.rc_context({"svg.fonttype": "none", "svg.hashsalt": "commscale", "font.sans-serif": _SVG_FONTS}):
        fig.savefig(svg, format="svg", metadata={"Date": None})
    write_whole(paths[1], lambda handle: handle.write(compact_svg(svg.getvalue()).encode("utf-8")))
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
