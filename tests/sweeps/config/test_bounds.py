"""Bounded work and hostile inputs, in process (click's CliRunner): a sweep beyond 10^8
points or the machine's memory, a YAML file beyond 1 MiB, a runs file beyond 16 MiB or
100,000 rows are refused before any work in one line naming the figure and the bound, and
go on with --allow-large; deep, oddly shaped or binary inputs end in one line, never a
traceback; nothing is created where the lake would be."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from click.testing import CliRunner

from sweeps.cli import main
from sweeps.config import load_run_config
from sweeps.config.bounds import MAX_POINTS, MAX_YAML_BYTES, check_points
from sweeps.errors import UserError
from sweeps.jobs.bounds import check_probe_size, check_sweep_size, projection_bytes_per_point
from sweeps.jobs.projection import plan_points, planned_count
from tasks.validation.runs import MAX_RUNS_BYTES, MAX_RUNS_ROWS

H100 = (Path(__file__).resolve().parents[3] / "conf" / "hardware" / "h100.yaml").read_text()
#: A grid of 1000 x 1000 x 1000 points (plus one highlighted model): 10^9, from lists of 1000.
THOUSAND = "[" + ",".join(str(i) for i in range(1, 1001)) + "]"
HUGE_GRID = ["sweep.h=[" + ",".join(str(128 * i) for i in range(1, 1001)) + "]", f"sweep.sl={THOUSAND}",
             f"sweep.b={THOUSAND}", "sweep.tp=[1]", "sweep.flop_vs_bw=[1]"]
RUNS_HEADER = "source,model,layers,hidden,heads,seq,tp,pp,dp,gpus,global_batch,micro_batch,hw,metric,value\n"
RUNS_ROW = "s,gpt,48,6144,64,2048,8,1,1,8,4,4,a100-80gb,iter_time,1.42\n"


def commscale(tmp_path: Path, *args: str):
    """``commscale ARGS`` in process, in ``tmp_path``, its lake and report there (not yet made)."""
    cwd = os.getcwd()
    os.chdir(tmp_path)
    try:
        return CliRunner().invoke(main, list(args), env={"COMMSCALE_LAKE": str(tmp_path / "lake"), "RAY_ADDRESS": None,
                                                         "COMMSCALE_REPORT": str(tmp_path / "report")})
    finally:
        os.chdir(cwd)


def one_line(result, *fragments: str) -> str:
    """The refusal's one line, after checking it: status 2, no traceback, each fragment in it."""
    assert result.exit_code == 2, (result.exit_code, result.output, result.exception)
    line = result.stderr.strip()
    assert "\n" not in line and line.startswith("error: ") and "Traceback" not in result.output, result.output
    for fragment in fragments:
        assert fragment in line, (fragment, line)
    return line


# --- a sweep's points and memory -------------------------------------------------------------

@pytest.mark.parametrize("overrides", [[], ["sweep=smoke"], ["sweep=casestudy"], ["model=gpt3", "sweep=smoke"],
                                       ["sweep=smoke", "sweep.highlights=[]"]])
def test_the_point_count_is_what_the_plan_plans(overrides):
    config = load_run_config(overrides)
    assert planned_count(config) == plan_points(config).points.num_rows


def test_a_sweep_of_a_billion_points_is_counted_and_refused_without_planning_it(tmp_path):
    count = planned_count(load_run_config(HUGE_GRID))  # 10^9 and table2's six highlighted models
    assert count == 10**9 + 6
    line = one_line(commscale(tmp_path, "run", *HUGE_GRID), "sweep table2", f"{count:,} points",
                    f"bound of {MAX_POINTS:,} points", "--allow-large")
    assert line.count("error") == 1
    assert sorted(p.name for p in tmp_path.iterdir()) == []  # no lake, no report


@pytest.mark.parametrize("command", ["submit", "run"])
def test_submit_and_a_roi_sweep_count_the_points_too(tmp_path, command):
    extra = ["sweep=roi-smoke"] if command == "run" else []
    one_line(commscale(tmp_path, command, *extra, *HUGE_GRID), "points", "--allow-large")
    assert list(tmp_path.iterdir()) == []


def test_allow_large_lifts_the_point_bound():
    config = load_run_config(HUGE_GRID)
    with pytest.raises(UserError, match="1,000,000,006 points exceed"):
        check_sweep_size(config, allow_large=False, available=10**15)
    check_sweep_size(config, allow_large=True)  # returns at once: the count alone decides


def test_a_sweep_beyond_the_memory_the_machine_has_is_refused_naming_both():
    config = load_run_config(["sweep=smoke"])
    per_point = projection_bytes_per_point(config)
    assert 100 < per_point < 2000  # Arrow bytes of a small plan of the same sweep, times the planning peak
    with pytest.raises(UserError) as refused:
        check_sweep_size(config, allow_large=False, available=int(per_point * 10))
    assert "34 points would take about" in str(refused.value) and "more than the 0.0 GB" in str(refused.value)
    check_sweep_size(config, allow_large=False, available=int(per_point * 34) + 1)
    check_sweep_size(config, allow_large=True, available=1)


def test_check_points_names_the_figure_and_the_bound():
    with pytest.raises(UserError, match=r"sweep s: 200,000,000 points exceed the bound of 100,000,000 points"):
        check_points("sweep s", 2 * 10**8, 1.0, allow_large=False, available=10**18)
    with pytest.raises(UserError, match=r"5,000 points would take about 5.0 GB .* more than the 1.0 GB"):
        check_points("sweep s", 5000, 1e6, allow_large=False, available=10**9)
    check_points("sweep s", 2 * 10**8, 1e9, allow_large=True)


def test_a_probe_of_a_billion_points_is_refused_before_its_points_exist(tmp_path):
    one_line(commscale(tmp_path, "probe", "--points", "1000000000"), "1,000,000,000 points", "--allow-large")
    assert list(tmp_path.iterdir()) == []
    with pytest.raises(UserError, match="would take about"):
        check_probe_size(10**6, allow_large=False, available=10**6)
    check_probe_size(10**12, allow_large=True)


@pytest.mark.parametrize("option", ["--sleep-ms", "--timeout-s", "--cpus-per-point"])
@pytest.mark.parametrize("value", ["nan", "inf"])
def test_a_probe_number_that_is_not_finite_is_refused(tmp_path, option, value):
    """NaN passes click's ranges (it compares false); an infinite sleep never ends."""
    one_line(commscale(tmp_path, "probe", "--points", "1", option, value), option, "must be a finite number")
    assert list(tmp_path.iterdir()) == []


# --- YAML files ------------------------------------------------------------------------------------

def test_a_yaml_file_beyond_1_mib_is_refused_before_it_is_read_and_read_with_allow_large(tmp_path):
    big = tmp_path / "big.yaml"
    big.write_text(H100 + "not_a_field: 1\n" + "# padding\n" * (MAX_YAML_BYTES // 10))
    one_line(commscale(tmp_path, "run", "hardware=big.yaml"), "hardware='big.yaml'", f"bound of {MAX_YAML_BYTES:,}",
             "--allow-large")
    one_line(commscale(tmp_path, "config", "--allow-large", "hardware=big.yaml"), "hardware.not_a_field",
             "unknown key")
    one_line(commscale(tmp_path, "calibrate", "calibration=big.yaml"), "calibration='big.yaml'", "bytes")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["big.yaml"]


@pytest.mark.parametrize("text", [
    pytest.param("[" * 10000 + "]" * 10000, id="list-10000-deep"),
    pytest.param("name: " + "{a: " * 5000 + "1" + "}" * 5000, id="flow-mapping-5000-deep"),
    pytest.param("".join("  " * i + "a:\n" for i in range(200)) + "  " * 200 + "1\n", id="block-mapping-200-deep"),
    pytest.param("name: " + "[" * 200 + "]" * 200, id="list-200-deep"),
])
@pytest.mark.parametrize("group", ["hardware", "model", "sweep"])
def test_deeply_nested_yaml_is_refused_in_one_line(tmp_path, text, group):
    (tmp_path / "deep.yaml").write_text(text)
    one_line(commscale(tmp_path, "config", f"{group}=./deep.yaml"), f"{group}='deep.yaml'",
             "nests more than 32 levels deep")


def test_a_yaml_mapping_where_the_schema_has_a_list_is_refused_in_one_line(tmp_path):
    (tmp_path / "shape.yaml").write_text("name: x\nh: {a: 1}\n")
    one_line(commscale(tmp_path, "config", "sweep=shape.yaml"), "sweep='shape.yaml'",
             "a mapping and a list do not merge")


def test_a_deep_yaml_search_preset_is_refused_in_one_line(tmp_path):
    (tmp_path / "deep.yaml").write_text("[" * 10000 + "]" * 10000)
    one_line(commscale(tmp_path, "search", "./deep.yaml"), "search='deep.yaml'", "nests more than 32 levels")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["deep.yaml"]


@pytest.mark.parametrize("item, fragments", [
    pytest.param("sweep.tp=" + "[" * 10000 + "]" * 10000, ["sweep.tp=", "(20,002 characters)", "nests more"],
                 id="deep-override"),
    pytest.param("sweep.tp=[[1]]", ["sweep.tp=[1]", "must be a number"], id="list-in-list"),
    pytest.param("sweep.tp=[{a: 1}]", ["sweep.tp={'a': 1}", "must be a number"], id="mapping-in-list"),
    pytest.param("sweep.tp={a: 1}", ["sweep.tp='{a: 1}'", "a mapping and a list do not merge"], id="mapping-for-list"),
    pytest.param("sweep.tp.x=1", ["sweep.tp.x='1'", "do not merge"], id="field-of-a-list"),
    pytest.param("sweep.tp[0]=4", ["sweep.tp[0]='4'", "do not merge"], id="indexed-list"),
    pytest.param("sweep.t\np=[4]", [r"sweep.t\np=", "unknown key"], id="newline-in-key"),
    pytest.param("model=../hardware/h100", ["model='../hardware/h100'", "unknown preset"], id="preset-name-a-path"),
    pytest.param("hardware=../hardware/h100", ["hardware='../hardware/h100'", "unknown preset"],
                 id="preset-name-a-path-to-its-own-group"),
    pytest.param("calibration.vary.sl=[512,512]", ["calibration.vary.sl=[512, 512]", "lists 512 twice"],
                 id="repeated-variation"),
])
def test_an_odd_override_ends_in_one_line(tmp_path, item, fragments):
    args = ["calibrate", "calibration=cpu", item] if item.startswith("calibration.") else ["run", item]
    one_line(commscale(tmp_path, *args), *fragments)
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("args", [
    ["run", "model=" + "A" * 5000], ["run", "hardware=" + "A" * 5000], ["run", "sweep=" + "A" * 5000],
    ["calibrate", "calibration=" + "A" * 5000], ["search", "A" * 5000], ["search", "small", "stack=" + "A" * 5000],
    ["run", "hardware=" + "A" * 5000 + ".yaml"], ["run", "sweep.highlights=[" + "A" * 5000 + "]"],
])
def test_a_5000_character_preset_name_ends_in_one_short_line(tmp_path, args):
    line = one_line(commscale(tmp_path, *args), "AAAA", "(5,0")
    assert len(line) < 600  # the name is shown cut, with its length
    assert list(tmp_path.iterdir()) == []


# --- runs files ------------------------------------------------------------------------------------

def _runs(tmp_path: Path, data: bytes) -> str:
    (tmp_path / "runs.csv").write_bytes(data)
    return "runs.csv"


@pytest.mark.parametrize("data, fragments", [
    pytest.param((RUNS_HEADER + "x" * 200000 + RUNS_ROW[1:]).encode(), ["runs.csv row 1", "field limit"],
                 id="cell-beyond-csv-field-limit"),
    pytest.param((RUNS_HEADER + "s\x00" + RUNS_ROW[1:]).encode(), ["runs.csv: holds a NUL byte (line 2)"], id="nul"),
    pytest.param((RUNS_HEADER + RUNS_ROW.strip() + ",1,2\n").encode(), ["row 1: holds 17 cells", "header's 15"],
                 id="more-cells-than-the-header"),
    pytest.param((RUNS_HEADER + RUNS_ROW.replace(",48,", ",1e400,")).encode(), ["layers='1e400'", "finite"],
                 id="overflowing-number"),
    pytest.param((RUNS_HEADER + RUNS_ROW.replace(",48,", ",99999999999999999999,")).encode(),
                 ["layers='99999999999999999999'", "larger than any run"], id="absurd-number"),
    pytest.param((RUNS_HEADER + RUNS_ROW.replace(",1.42", ",\uff11")).encode(), ["value=", "is not a number"],
                 id="non-ascii-digit"),
])
def test_a_runs_file_that_is_no_csv_text_ends_in_one_line(tmp_path, data, fragments):
    one_line(commscale(tmp_path, "validate", "--runs", _runs(tmp_path, data)), *fragments)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["runs.csv"]


def test_a_runs_file_that_is_no_regular_file_is_refused_without_reading_it(tmp_path):
    os.mkfifo(tmp_path / "pipe.csv")  # reading it would wait for a writer forever
    one_line(commscale(tmp_path, "validate", "--runs", "pipe.csv"), "pipe.csv", "not a regular file")
    one_line(commscale(tmp_path, "validate", "--runs", "/dev/zero", "--allow-large"), "/dev/zero",
             "not a regular file")


def test_a_runs_file_beyond_16_mib_is_refused_before_it_is_read_and_read_with_allow_large(tmp_path):
    bad_row = RUNS_ROW.replace(",48,", ",-1,")
    name = _runs(tmp_path, (RUNS_HEADER + bad_row * (MAX_RUNS_BYTES // len(bad_row) + 1)).encode())
    one_line(commscale(tmp_path, "validate", "--runs", name), f"bound of {MAX_RUNS_BYTES:,} bytes", "--allow-large")
    one_line(commscale(tmp_path, "validate", "--runs", name, "--allow-large"), "row 1: layers='-1'")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["runs.csv"]


def test_a_runs_file_beyond_100000_rows_is_refused_and_read_with_allow_large(tmp_path):
    short = "s,g,-1,64,1,1,1,1,1,1,1,1,h,mfu,1\n"
    name = _runs(tmp_path, (RUNS_HEADER + short * (MAX_RUNS_ROWS + 1)).encode())
    one_line(commscale(tmp_path, "validate", "--runs", name), f"{MAX_RUNS_ROWS + 1:,} rows exceed the bound of "
                                                              f"{MAX_RUNS_ROWS:,} rows", "--allow-large")
    one_line(commscale(tmp_path, "validate", "--runs", name, "--allow-large"), "row 1: layers='-1'")
