"""Each figure draws the lines or bars its rows imply, and skips cleanly without rows.

Projection figures read a real lake (the smoke grid and the case study, committed and read
back through DuckDB); the figures of kinds the lake does not hold yet read small synthetic
frames with those kinds' columns.
"""

from __future__ import annotations

import re

import numpy as np
import pandas as pd
import pytest
from matplotlib.transforms import Bbox

from analysis import figures
from analysis.figures.common import MARK, data_bars, data_labels, data_lines


def _axes(fig):
    (ax,) = fig.axes
    return ax


def test_serialized_draws_one_line_per_h_and_sl_and_marks_the_highlight(projection_rows, smoke_serialized):
    smoke = projection_rows[projection_rows["sweep"] == "smoke"]
    ax = _axes(figures.draw_serialized(smoke_serialized, m=1.0))
    lines = data_lines(ax)
    assert len(lines) == 2 * 2  # H in {1024, 8192} x SL in {1024, 4096}
    assert {line.get_label() for line in lines} == {f"H={h:,}, SL={sl:,}" for h in (1024, 8192) for sl in (1024, 4096)}
    line = next(x for x in lines if x.get_label() == "H=8,192, SL=4,096")
    expected = smoke[(smoke["h"] == 8192) & (smoke["sl"] == 4096) & (smoke["b"] == 1) & (smoke["flop_vs_bw"] == 1)
                     & (smoke["label"] == "")].sort_values("tp")
    np.testing.assert_allclose(line.get_xdata(), expected["tp"])
    np.testing.assert_allclose(line.get_ydata(), 100 * expected["serialized_fraction"])
    (marks,) = data_lines(ax, MARK)
    assert len(marks.get_xdata()) == 1  # gpt3 at its Eq. 10 TP
    assert "gpt3" in " ".join(t.get_text() for t in ax.texts)
    assert "hardware mi210x4" in ax.figure.get_supxlabel() and "calibration spec:mi210x4" in ax.figure.get_supxlabel()
    assert ax.get_xlabel() and ax.get_ylabel() and ax.get_legend() is not None


def test_each_multiplier_gets_its_figure_and_a_missing_one_is_skipped(smoke_serialized):
    smoke = smoke_serialized
    at_1 = data_lines(_axes(figures.draw_serialized(smoke, m=1.0)))
    at_4 = data_lines(_axes(figures.draw_serialized(smoke, m=4.0)))
    assert len(at_4) == len(at_1) == 4
    assert all(b.get_ydata()[-1] > a.get_ydata()[-1] for a, b in zip(at_1, at_4, strict=True))  # m = 4 exposes more
    assert "Fig. 11" in _axes(figures.draw_serialized(smoke, m=4.0)).get_title()
    with pytest.raises(figures.MissingRows, match="`commscale run`"):
        figures.draw_serialized(smoke, m=2.0)


def test_overlapped_draws_one_line_per_h_and_the_100_percent_line(projection_rows, smoke_overlap):
    smoke = projection_rows[projection_rows["sweep"] == "smoke"]
    ax = _axes(figures.draw_overlapped(smoke_overlap, m=4.0))
    lines = data_lines(ax)
    assert [line.get_label() for line in lines] == ["H = 1,024", "H = 8,192"]
    for line in lines:  # SL·B in {1024, 4096 (two ways, counted once), 16384}
        np.testing.assert_allclose(line.get_xdata(), [1024, 4096, 16384])
    (threshold,) = data_lines(ax, "threshold")
    assert set(threshold.get_ydata()) == {100}
    expected = smoke[(smoke["tp"] == 16) & (smoke["h"] == 1024) & (smoke["flop_vs_bw"] == 4) & (smoke["sl"] == 1024)
                     & (smoke["b"] == 1) & (smoke["label"] == "")]["overlap_percent"]
    assert lines[0].get_ydata()[0] == pytest.approx(expected.item())


def test_case_study_stacks_compute_serialized_and_exposed_to_the_step_time(projection_rows):
    case = projection_rows[projection_rows["sweep"] == "casestudy"]
    ax = _axes(figures.draw_case_study(case))
    containers = data_bars(ax)
    assert [c.get_label() for c in containers] == ["compute", "serialized (TP) comm", "exposed overlapped (DP) comm"]
    assert all(len(c) == 9 for c in containers)  # m in {1, 2, 4} x three network scenarios
    tops = sorted(p.get_y() + p.get_height() for p in containers[-1])
    np.testing.assert_allclose(tops, sorted(1e3 * case["step_time_s"]), rtol=1e-9)
    labels = [t.get_text() for t in ax.get_xticklabels()]
    assert sum("inter-node" in t for t in labels) == 6 and sum("interference" in t for t in labels) == 3


def test_case_study_needs_a_sweep_with_placed_links(projection_rows):
    smoke = projection_rows[projection_rows["sweep"] == "smoke"]
    with pytest.raises(figures.MissingRows, match="`commscale run sweep=casestudy`"):
        figures.draw_case_study(smoke)


def test_accuracy_draws_one_series_per_operator_family_and_rings_extrapolation(accuracy_rows):
    ax = _axes(figures.draw_accuracy(accuracy_rows))
    series = data_lines(ax)
    assert len(series) == 3
    legend = [t.get_text().split(" (")[0] for t in ax.get_legend().get_texts()]
    families = ("GEMM weight-gradient", "element-wise", "step")
    assert [t for t in legend if t in families] == ["GEMM weight-gradient", "element-wise", "step"]
    np.testing.assert_allclose(sorted(series[0].get_xdata()), [2.0, 8.0])  # both weight-gradient GEMMs, in ms
    np.testing.assert_allclose(sorted(series[2].get_xdata()), [20.0, 80.0])  # the step rows, in ms
    (ringed,) = data_lines(ax, MARK)
    assert list(ringed.get_xdata()) == [pytest.approx(80.0)]  # the step row measured at 80 ms
    assert ax.get_xscale() == "log" and "ms" in ax.get_xlabel()


def test_pareto_front_keeps_only_undominated_trials(search_rows):
    front = figures.pareto_front(search_rows[(search_rows["study"] == "a") & (search_rows["status"] == "ok")])
    assert list(front["trial"]) == [0, 1, 4]  # trial 2 is beaten by trial 0 on both axes
    a, b = figures.draw_pareto(search_rows).axes  # one panel per study
    (line,) = data_lines(a)
    np.testing.assert_allclose(line.get_xdata(), [1000, 1200, 1500])
    assert sum(len(m.get_xdata()) for m in data_lines(a, MARK)) == 4  # study a's feasible trials
    assert a.get_title().startswith("a") and "1 infeasible" in a.get_title() and "0 infeasible" in b.get_title()


def _dense_front(search_rows: pd.DataFrame, model: str, study: str, n: int = 30) -> pd.DataFrame:
    """``n`` trials of one study, each on the front, close together: their labels would collide."""
    base = search_rows.iloc[0].to_dict()
    return pd.DataFrame([dict(base, key=f"{study}{t}", model=model, study=study, trial=t, tp=2 ** (t % 4), pp=1 + t % 3,
                              status="ok", tokens_per_s_per_device=1000.0 + 10 * t, exposed_comm_share=0.1 + 0.01 * t)
                         for t in range(n)])


def _overlapping(boxes: list) -> list:
    return [(a, b) for i, a in enumerate(boxes) for b in boxes[i + 1:] if a.overlaps(b)]


def test_pareto_draws_one_panel_per_study_and_its_labels_never_overlap(search_rows):
    rows = pd.concat([_dense_front(search_rows, "gpt3", "a"), _dense_front(search_rows, "gpt3", "b"),
                      _dense_front(search_rows, "llama3-70b", "c", n=3)])
    fig = figures.draw_pareto(rows)
    assert len(fig.axes) == 3  # three studies, two of one model: three panels, never one shared axis
    assert [ax.get_title().split("\n")[0] for ax in fig.axes] == ["a", "b", "c"]
    assert "llama3-70b" in fig.axes[2].get_title() and "gpt3" not in fig.axes[2].get_title()
    assert [len(data_lines(ax)) for ax in fig.axes] == [1, 1, 1]
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    for ax in fig.axes:
        labels = data_labels(ax)
        assert labels and all(t.get_text().startswith("tp") for t in labels)
        boxes = [t.get_window_extent(renderer) for t in labels]
        assert not _overlapping(boxes)
        inside = ax.get_window_extent(renderer)
        assert all(inside.x0 <= b.x0 and b.x1 <= inside.x1 for b in boxes)


def _studies(search_rows: pd.DataFrame, count: int) -> pd.DataFrame:
    """``count`` studies, each of another model on another cluster, with names longer than a panel is wide."""
    return pd.concat([search_rows[search_rows["study"] == "a"].assign(
        study=f"llama3-8b-h100-sxm-80gb-x{64 * (i + 1)}-megatron-core-2024-{i:08x}-" + "my-own-run" * 8,
        model=f"my-own-model-{i}-13b",
        hardware=f"my-a100-cluster-{i}-of-the-lab", stack="megatron-core-2024", devices=64 * (i + 1),
        key=lambda r, i=i: r["key"] + str(i))
        for i in range(count)], ignore_index=True)


def test_pareto_titles_and_footer_stay_whole_inside_the_figure(search_rows):
    fig = figures.draw_pareto(_studies(search_rows, 5))
    assert len(fig.axes) == 5
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    whole = fig.bbox
    footer = fig._supxlabel
    texts = [footer] + [ax.title for ax in fig.axes]
    for text in texts:
        box = text.get_window_extent(renderer)
        assert whole.x0 <= box.x0 and box.x1 <= whole.x1 and whole.y0 <= box.y0 and box.y1 <= whole.y1, text.get_text()
    (fifth,) = [ax.get_title() for ax in fig.axes if "my-own-model-4-13b" in ax.get_title()]
    assert fifth.startswith("llama3-8b-h100-sxm-80gb-x320-") and "320 x my-a100-cluster-4" in fifth
    assert "stack megatron-core-2024" in " ".join(fifth.split())
    assert "my-a100-cluster-0" in footer.get_text()
    assert not _overlapping([t.get_window_extent(renderer) for t in texts])


@pytest.fixture(scope="module")
def table2_h100(tmp_path_factory, commit) -> pd.DataFrame:
    """The table2 grid on h100 with its six highlighted models, as the report selects it for Fig. 10a."""
    from analysis.summary import serialized_rows
    from sweeps.lake import Lake
    from sweeps.lake.views import connect

    lake = Lake(str(tmp_path_factory.mktemp("table2") / "lake"))
    commit(lake, ["hardware=h100", "sweep.flop_vs_bw=[1.0]"])
    con = connect(lake)
    try:
        return serialized_rows(con, "table2", "h100")
    finally:
        con.close()


def test_fig_10a_names_every_model_with_labels_that_never_overlap(table2_h100):
    """Six models, two of them starred at TP 256 and one at TP 128 close by: each is named
    once, by a label beside its star or in the legend, and no label covers another or a star."""
    ax = _axes(figures.draw_serialized(table2_h100, m=1.0))
    ax.figure.canvas.draw()
    renderer = ax.figure.canvas.get_renderer()
    labels = ax.texts  # every text drawn inside the axes
    legend = " ".join(t.get_text() for t in ax.get_legend().get_texts())
    models = ["gpt3", "llama3-70b", "megatron-8.3b", "mt-nlg", "palm", "t-nlg"]
    named = [t.get_text() for t in labels] + re.findall(r"(?<![\w-])[\w.-]+ \(TP \d+\)", legend)
    assert sorted(n.split(" (")[0] for n in named) == models
    boxes = [t.get_window_extent(renderer) for t in labels]
    assert len(labels) >= 4 and not _overlapping(boxes)
    (stars,) = data_lines(ax, MARK)
    centres = ax.transData.transform(np.column_stack([stars.get_xdata(), stars.get_ydata()]))
    radius = stars.get_markersize() * ax.figure.dpi / 72 / 2
    for box in boxes:
        assert not any(box.overlaps(Bbox.from_extents(x - radius, y - radius, x + radius, y + radius))
                       for x, y in centres)
    inside = ax.get_window_extent(renderer)
    assert all(inside.x0 <= b.x0 and b.x1 <= inside.x1 and inside.y0 <= b.y0 and b.y1 <= inside.y1 for b in boxes)


def test_scaling_and_latency_floor_draw_one_line_per_model_and_batch(scaling_rows):
    scaling = _axes(figures.draw_scaling(scaling_rows))
    assert len(data_lines(scaling)) == 2
    latency = _axes(figures.draw_latency_floor(scaling_rows))
    lines = data_lines(latency)
    assert len(lines) == 2
    np.testing.assert_allclose(lines[0].get_xdata(), [8, 16, 32, 64])
    np.testing.assert_allclose(lines[0].get_ydata(), [0.5, 100 * 0.02 / 1.1, 100 * 0.04 / 0.6, 20.0])


@pytest.mark.parametrize("draw, command", [
    (lambda rows: figures.draw_serialized(rows, m=1.0), "commscale run"),
    (lambda rows: figures.draw_overlapped(rows, m=1.0), "commscale run"),
    (figures.draw_case_study, "commscale run sweep=casestudy"),
    (figures.draw_accuracy, "commscale calibrate"),
    (figures.draw_pareto, "commscale search"),
    (figures.draw_scaling, "commscale search scaling --scaling"),
    (figures.draw_latency_floor, "commscale search scaling --scaling"),
], ids=["serialized", "overlapped", "casestudy", "accuracy", "pareto", "scaling", "latency"])
@pytest.mark.parametrize("rows", [None, pd.DataFrame(), pd.DataFrame({"key": ["x"]})],
                         ids=["no-view", "empty", "no-columns"])
def test_missing_rows_skip_with_the_command_that_produces_them(draw, command, rows):
    with pytest.raises(figures.MissingRows) as info:
        draw(rows)
    assert info.value.command == command and f"`{command}`" in str(info.value)


def test_infeasible_trials_alone_are_missing_rows(search_rows):
    with pytest.raises(figures.MissingRows, match="feasible"):
        figures.draw_pareto(search_rows[search_rows["status"] != "ok"])


def test_scaling_points_without_a_feasible_layout_are_not_drawn(scaling_rows):
    rows = scaling_rows.assign(status="ok")
    rows.loc[rows["devices"] == 64, ["status", "tokens_per_s_per_device", "latency_s", "step_time_s"]] = (
        "infeasible", None, None, None)
    for draw in (figures.draw_scaling, figures.draw_latency_floor):
        lines = data_lines(_axes(draw(rows)))
        assert [list(line.get_xdata()) for line in lines] == [[8, 16, 32]] * 2
