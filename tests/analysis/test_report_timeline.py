"""The report's timeline of one step: drawn from the events it is handed, a bar per event on a
row per (stage, track), redrawn only when its key changes."""

from __future__ import annotations


from analysis.figures.common import BAR
from analysis.figures.timeline import draw_timeline
from analysis.report import TimelinePicture, write_report
from sweeps.lake import Lake
from sweeps.search.timeline import build_timeline


def _built():
    drawn = build_timeline(["small", "layout.pp=4", "layout.tp=2", "layout.dp=2"], None)
    return drawn.events, drawn.stage_names, "a step", "its caption"


def _picture(key: str) -> TimelinePicture:
    return TimelinePicture(key, _built)


def test_every_stage_and_track_with_events_gets_one_row_of_bars():
    events, stage_names, title, about = _built()
    fig = draw_timeline(events, stage_names, title, about)
    (ax,) = fig.axes
    rows = {(e.stage, e.track) for e in events if e.duration_s > 0}
    bars = [c for c in ax.collections if c.get_gid() == BAR]
    assert len(bars) == len(rows) and len(stage_names) == 4
    assert sum(len(c.get_paths()) for c in bars) == sum(e.duration_s > 0 for e in events)


def test_the_page_shows_the_timeline_and_redraws_it_only_when_its_key_changes(commit, tmp_path):
    lake = Lake(str(tmp_path / "lake"))
    commit(lake, ["sweep=smoke", "sweep.h=[4096]", "sweep.sl=[2048]", "sweep.b=[1]", "sweep.tp=[8]"])
    out = tmp_path / "out"
    first = write_report(lake, out, timeline=_picture("one"))
    assert "timeline" in {f.name for f in first.drawn}
    assert "Timeline of one step" in (out / "report.html").read_text() and (out / "figures" / "timeline.png").is_file()
    builds = []
    again = write_report(lake, out, timeline=TimelinePicture("one", lambda: builds.append(1) or _built()))
    assert "timeline" not in {f.name for f in again.drawn} and again.kept
    assert builds == []                    # a kept figure is not built: the step is laid out only to be drawn
    changed = write_report(lake, out, timeline=_picture("two"))
    assert "timeline" in {f.name for f in changed.drawn}
    assert "Timeline of one step" not in (write_report(lake, tmp_path / "none").html.read_text())
