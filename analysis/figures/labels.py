"""Text labels beside data points that cover no other label, no marked point and nothing
outside their axes: the Pareto front's layouts, Fig. 10a's highlighted models.

A label is tried at a few offsets around its point, nearest first (``offsets``), and
kept at the first where its box, in display units, stays inside the axes and overlaps
none of the obstacles (``obstacles``: the labels already placed, the legend, and the
markers of the lines whose ``gid`` is named). Boxes are measured with the figure's own
renderer once its layout has settled, so call ``label_points`` when the figure is
otherwise complete; the labels are kept out of the layout, so saving it moves none.
"""

from __future__ import annotations

from typing import Callable, List, Sequence, Tuple

import numpy as np
import pandas as pd

from analysis.figures.common import LABEL, MARK, SERIES, data_labels, data_lines

__all__ = ["offsets", "obstacles", "label_points"]

#: Vertical offsets (points) of a label's baseline from its point, nearest first: level with
#: the point (just above, just below), then one and two label heights further out.
_RISES = (4, -11, 13, -20, 22, -29)
#: Room (display pixels) kept around each label box, so labels with a background never touch.
_GAP = 1.5


def offsets(clearance: float = 5.0) -> Tuple[Tuple[float, float], ...]:
    """Where a label's near end may go from its point (points, x then y), nearest first:
    right of the marker, then left, at each rise of ``_RISES``. ``clearance``: how far right
    or left of the point the label starts (beyond the point's own marker)."""
    near = ((clearance, 4), (clearance, -11), (-clearance, 4), (-clearance, -11))
    return near + tuple((side * clearance, rise) for rise in _RISES[2:] for side in (1, -1))


def obstacles(ax, renderer, gids: Sequence[str] = (SERIES, MARK)) -> list:
    """Display boxes a label must not cover: the labels already placed (``LABEL``), the
    legend, and every marker of the data lines whose gid is in ``gids`` (each as a square
    of its marker's size)."""
    from matplotlib.transforms import Bbox

    boxes = [t.get_window_extent(renderer).padded(_GAP) for t in data_labels(ax)]
    if ax.get_legend() is not None:
        boxes.append(ax.get_legend().get_window_extent(renderer))
    for line in [line for gid in gids for line in data_lines(ax, gid)]:
        half = max(4.0, line.get_markersize() * ax.figure.dpi / 72 / 2)
        for px, py in ax.transData.transform(np.column_stack([line.get_xdata(), line.get_ydata()])):
            boxes.append(Bbox.from_extents(px - half, py - half, px + half, py + half))
    return boxes


def _inside(box, area) -> bool:
    return area.x0 <= box.x0 and box.x1 <= area.x1 and area.y0 <= box.y0 and box.y1 <= area.y1


def _annotate(ax, words: str, xy: Tuple[float, float], offset: Tuple[float, float], style: dict):
    """A label of ``words`` at ``offset`` points from ``xy`` (data units), kept out of the layout."""
    label = ax.annotate(words, xy, textcoords="offset points", xytext=offset, ha="left" if offset[0] > 0 else "right",
                        gid=LABEL, annotation_clip=False, **style)
    label.set_in_layout(False)
    return label


def label_points(ax, points: pd.DataFrame, x: str, y: str, text: Callable[[object], str], *, limit: int = 6,
                 avoid: Sequence[str] = (SERIES, MARK), clearance: float = 5.0, required: bool = False,
                 renderer=None, **style) -> List[str]:
    """Label at most ``limit`` of ``points`` (spread over them, ends first) with ``text(row)``
    at (``x``, ``y``) in data units, each at the first of ``offsets(clearance)`` where it
    stays inside the axes and covers none of ``obstacles(ax, ..., avoid)``. ``style``: the
    text's properties (fontsize 6.5 unless given). Returns the texts of the labels that fit
    nowhere: left out, or, if ``required``, placed all the same at their first offset inside
    the axes (where they may cover something). ``renderer``: the figure's, once its layout
    has settled (labelling several axes of one figure needs one draw); None: draw it now."""
    if points.empty:
        return []
    if renderer is None:
        ax.figure.draw_without_rendering()
        renderer = ax.figure.canvas.get_renderer()
    area = ax.get_window_extent(renderer)
    placed = obstacles(ax, renderer, avoid)
    style = {"fontsize": 6.5, **style}
    order = sorted(set(np.linspace(0, len(points) - 1, min(limit, len(points))).round().astype(int)))
    left_out = []
    for r in points.iloc[order].itertuples():
        words, xy, fallback = text(r), (getattr(r, x), getattr(r, y)), None
        for offset in offsets(clearance):
            label = _annotate(ax, words, xy, offset, style)
            box = label.get_window_extent(renderer).padded(_GAP)
            if _inside(box, area) and not any(box.overlaps(other) for other in placed):
                placed.append(box)
                break
            fallback = fallback or (offset if _inside(box, area) else None)
            label.remove()
        else:
            left_out.append(words)
            if required:
                placed.append(_annotate(ax, words, xy, fallback or (clearance, 4), style)
                              .get_window_extent(renderer).padded(_GAP))
    return left_out
