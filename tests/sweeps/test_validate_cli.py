"""``commscale validate``: its three output formats and the error's sign, a runs file of
one's own, bad rows refused (exit 2, one line naming the file, row and field, the lake not
created), records committed once per cost-model version and data, read back by ``query``,
and drawn by the report. In process (click's CliRunner): no Ray, a second or two each."""

from __future__ import annotations

import csv
import dataclasses
import io
import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from analysis.figures import draw_validation
from analysis.figures.common import SERIES, data_lines
from analysis.query import frame
from analysis.report import write_report
from analysis.report_validation import version_table
from sweeps.cli import main
from sweeps.jobs.validation import PARTITION, commit_validation, lake_rows, load_profiles, run_validation
from sweeps.lake import Lake
from sweeps.lake.kinds import VALIDATION
from tasks.validation.records import MODEL_VERSION, VALIDATION_SCHEMA_VERSION, lean

#: A runs file of one's own: two rows, blank cells taking their defaults (dp from the GPU
#: count, ffn_hidden 4 x hidden, the fastest micro-batch that fits).
MY_RUNS = """source,model,layers,hidden,heads,seq,tp,pp,dp,gpus,global_batch,micro_batch,hw,metric,value
mine_a,gpt-22b,48,6144,64,2048,8,1,1,8,4,4,a100-80gb,iter_time,1.42
mine_b,gpt-7.5b,36,4096,32,2048,4,1,,128,512,,a100-80gb,tflops_per_gpu,142
"""


def validate(*args: str, env: dict | None = None):
    return CliRunner().invoke(main, ["validate", *args], env={"COLUMNS": "240", **(env or {})})


def runs_file(tmp_path: Path, text: str, name: str = "runs.csv") -> Path:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


@pytest.fixture(scope="module")
def runs_csv(tmp_path_factory) -> list:
    """The shipped runs' records as `--format csv` prints them."""
    result = validate("--dataset", "runs", "--format", "csv", "--no-lake")
    assert result.exit_code == 0, result.output
    return list(csv.DictReader(io.StringIO(result.stdout)))


def test_csv_records_carry_the_signed_error_of_each_published_row(runs_csv):
    assert len(runs_csv) >= 5 and {r["dataset"] for r in runs_csv} == {"runs"}
    assert list(runs_csv[0]) == ["dataset", "source", "row", "model", "hardware", "metric", "unit", "published",
                                 "predicted", "error", "detail", "cost_model_version", "fitted_to"]
    for r in runs_csv:
        published, predicted, error = float(r["published"]), float(r["predicted"]), float(r["error"])
        assert error == pytest.approx(predicted / published - 1.0)
        assert (error > 0) == (predicted > published) and r["cost_model_version"] == MODEL_VERSION
    assert {float(r["error"]) > 0 for r in runs_csv} == {True, False}  # the shipped runs err both ways


def test_json_is_a_list_of_the_same_records(runs_csv):
    result = validate("--dataset", "runs", "--format", "json", "--no-lake")
    records = json.loads(result.stdout)
    assert isinstance(records, list) and len(records) == len(runs_csv)
    assert [(r["source"], r["row"], r["metric"]) for r in records] == \
        [(r["source"], int(r["row"]), r["metric"]) for r in runs_csv]
    assert all(r["error"] == pytest.approx(r["predicted"] / r["published"] - 1) for r in records)
    assert "Lake: not written" in result.stderr  # the account leaves stdout to the records


def test_the_table_has_a_table_per_source_a_summary_and_the_model_version(runs_csv):
    result = validate("--dataset", "runs", "--no-lake")
    assert result.exit_code == 0, result.output
    out = result.stdout
    for source in {r["source"] for r in runs_csv}:
        assert f"runs · {source}" in out and f"{source}: mean |error|" in out
        mine = [r for r in runs_csv if r["source"] == source]
        leaning = lean([float(r["error"]) for r in mine], [r["unit"] for r in mine])
        assert f"{source}: mean |error|" in out and f", lean {100 * leaning:+.1f}%" in out
    for r in runs_csv:  # each row's signed error, as a percentage
        assert f"{100 * float(r['error']):+.1f}%" in out
    assert "Every source" in out and f"Cost model {MODEL_VERSION}" in out


def test_the_default_output_marks_fitted_rows_and_shows_the_held_out_runs_apart():
    result = validate("--no-lake", "--format", "csv")
    assert result.exit_code == 0, result.output
    records = list(csv.DictReader(io.StringIO(result.stdout)))
    assert {r["dataset"] for r in records} == {"runs", "layers", "collectives", "gemm", "holdout"}
    fitted = [r for r in records if r["fitted_to"]]
    assert fitted and {r["dataset"] for r in fitted} == {"collectives", "gemm"}
    assert all(r["fitted_to"].startswith(r["hardware"]) or "tasks.model" in r["fitted_to"]
               or f" {r['hardware']}." in f" {r['fitted_to']}" for r in fitted)
    table = validate("--no-lake").stdout
    held_out = table.index("Held-out runs (holdout_runs.csv)")
    assert held_out > table.rindex("gemm · ") and "holdout · llama3_paper_bf16" in table[held_out:]
    assert "fitted rows left out" in table and "every row fitted to" in table
    for line in ("Shipped, out of sample: mean |error|", "Shipped, fitted rows included: mean |error|",
                 "Held out (holdout_runs.csv, never fitted to): mean |error|"):
        assert line in table


def test_a_runs_file_of_ones_own_replaces_the_shipped_runs(tmp_path):
    out = tmp_path / "records.json"
    result = validate("--runs", str(runs_file(tmp_path, MY_RUNS)), "--dataset", "runs", "--format", "json",
                      "--out", str(out), "--no-lake")
    assert result.exit_code == 0, result.output
    records = json.loads(out.read_text())
    assert [(r["source"], r["row"], r["metric"], r["unit"]) for r in records] == \
        [("mine_a", 1, "iter_time", "s"), ("mine_b", 2, "tflops_per_gpu", "TF")]
    assert records[1]["detail"].startswith("tp4 pp1 dp32")  # dp = 128 GPUs / (tp 4 x pp 1)
    assert not (tmp_path / "lake").exists() and result.stdout.startswith("Wrote 2 records (json)")


@pytest.mark.parametrize("edit, row, names", [
    (("a100-80gb,tflops", "tpu-v9,tflops"), 2, ["hw='tpu-v9'", "names no hardware profile"]),
    ((",8,4,4,", ",16,4,4,"), 1, ["gpus=16", "impossible layout"]),
    ((",142\n", ",fast\n"), 2, ["value='fast'", "is not a number"]),
])
def test_a_bad_row_exits_2_naming_the_row_before_the_lake_is_touched(tmp_path, edit, row, names):
    path = runs_file(tmp_path, MY_RUNS.replace(*edit))
    lake = tmp_path / "lake"
    result = validate("--runs", str(path), "--lake", str(lake))
    assert result.exit_code == 2, result.output
    line = result.stderr.strip()
    assert "\n" not in line and line.startswith(f"error: {path} row {row}: ")
    assert all(n in line for n in names) and "Traceback" not in result.output
    assert not lake.exists() and result.stdout == ""


def test_a_missing_runs_file_exits_2_naming_it(tmp_path):
    result = validate("--runs", str(tmp_path / "nope.csv"), "--lake", str(tmp_path / "lake"))
    assert result.exit_code == 2 and f"{tmp_path / 'nope.csv'}: cannot be read" in result.stderr
    assert not (tmp_path / "lake").exists()



def test_a_column_no_runs_file_has_exits_2_naming_it(tmp_path):
    """A misspelled column would otherwise be blank in every row and predict another layout."""
    path = runs_file(tmp_path, MY_RUNS.replace(",micro_batch,", ",micro_bach,"))
    result = validate("--runs", str(path), "--lake", str(tmp_path / "lake"))
    assert result.exit_code == 2, result.output
    line = result.stderr.strip()
    assert "\n" not in line and f"{path}: column 'micro_bach' is not a column of a runs file" in line
    assert not (tmp_path / "lake").exists()


def test_a_runs_file_without_the_runs_dataset_exits_2(tmp_path):
    """--runs stands in for the shipped runs; with only other datasets it would go unread."""
    result = validate("--runs", str(runs_file(tmp_path, MY_RUNS)), "--dataset", "layers", "--lake", str(tmp_path / "l"))
    assert result.exit_code == 2, result.output
    assert "--runs" in result.stderr and "--dataset runs" in result.stderr and "\n" not in result.stderr.strip()
    assert not (tmp_path / "l").exists()


def test_an_out_file_in_a_missing_folder_exits_2_before_any_prediction(tmp_path):
    out = tmp_path / "no_such_folder" / "records.csv"
    result = validate("--dataset", "runs", "--format", "csv", "--out", str(out), "--lake", str(tmp_path / "lake"))
    assert result.exit_code == 2, result.output
    assert result.stderr.strip() == f"error: --out {out}: its folder {out.parent} does not exist"
    assert result.stdout == "" and not (tmp_path / "lake").exists()

def test_records_committed_twice_are_not_doubled_and_query_reads_them(tmp_path, runs_csv):
    lake = str(tmp_path / "lake")
    first = validate("--dataset", "runs", "--lake", lake, "--no-report", "--format", "csv")
    again = validate("--dataset", "runs", "--lake", lake, "--no-report", "--format", "csv")
    n = len(runs_csv)
    assert f"({n} records: {n} new, 0 already there" in first.stderr
    assert f"({n} records: 0 new, {n} already there" in again.stderr
    query = CliRunner().invoke(main, ["query", "SELECT count(*) AS n, count(DISTINCT key) AS keys, "
                                      "min(cost_model_version) AS v FROM validation", "--lake", lake,
                                      "--format", "json"])
    assert query.exit_code == 0, query.output
    assert json.loads(query.stdout) == [{"n": n, "keys": n, "v": MODEL_VERSION}]


def test_a_new_cost_model_version_adds_rows_beside_the_former_ones(tmp_path):
    lake = Lake(str(tmp_path / "lake"))
    result = run_validation(load_profiles(), datasets=("runs",))
    first = commit_validation(lake, result)
    older = dataclasses.replace(result.validation, records=[
        dataclasses.replace(r, cost_model_version="old-1", predicted=r.predicted * 1.5,
                            error=r.predicted * 1.5 / r.published - 1) for r in result.validation.records])
    assert lake_rows(result).column("key").to_pylist() != lake_rows(
        dataclasses.replace(result, validation=older)).column("key").to_pylist()
    second = commit_validation(lake, dataclasses.replace(result, validation=older, validated_at=0.0))
    n = len(result.validation.records)
    assert (first.rows_written, second.rows_written) == (n, n)
    rows = frame(lake, "SELECT * FROM validation")
    assert sorted(rows["cost_model_version"].unique()) == sorted(["old-1", MODEL_VERSION])
    table = version_table(rows)
    assert list(table["cost_model_version"].unique()) == ["old-1", MODEL_VERSION]  # oldest first
    assert table.groupby("cost_model_version")["n"].sum().to_dict() == {"old-1": n, MODEL_VERSION: n}
    fig = draw_validation(rows)  # the newest version only: one point per record
    assert sum(len(line.get_xdata()) for ax in fig.axes for line in data_lines(ax, SERIES)) == n
    assert lake.files(VALIDATION, PARTITION) and lake.schema_versions(VALIDATION) == {VALIDATION_SCHEMA_VERSION}


def test_validate_ends_with_the_report_and_its_validation_figure(tmp_path):
    lake, report = tmp_path / "lake", tmp_path / "report"
    result = validate("--dataset", "runs", "--lake", str(lake), env={"COMMSCALE_REPORT": str(report)})
    assert result.exit_code == 0, result.output
    assert f"Report: {report / 'report.html'}" in result.stdout
    assert (report / "figures" / "validation.png").stat().st_size > 5000
    again = write_report(Lake(str(lake)), tmp_path / "elsewhere")
    entry = next(f for f in again.figures if f.name == "validation")
    assert not entry.skipped and entry.drawn
    markdown = again.markdown.read_text()
    assert "Error per source and cost-model version" in markdown and MODEL_VERSION in markdown
    assert again.findings[0].title == "Validation against published measurements"


def test_the_lake_and_the_report_carry_the_fitted_marks_and_the_held_out_headline(tmp_path):
    lake = Lake(str(tmp_path / "lake"))
    commit_validation(lake, run_validation(load_profiles(), datasets=("runs", "collectives", "holdout")))
    rows = frame(lake, "SELECT * FROM validation")
    assert set(rows.loc[rows["fitted_to"] != "", "dataset"]) == {"collectives"}
    assert set(rows.loc[rows["fitted_to"] == "", "dataset"]) == {"runs", "collectives", "holdout"}
    table = version_table(rows)
    assert table.set_index("source").loc["8xMI300X (XGMI)", "fitted"] == 1
    assert table.set_index("source").loc["korthikanti22_t5_full", "fitted"] == 0
    report = write_report(lake, tmp_path / "report")
    lines = next(f for f in report.findings if f.title == "Validation against published measurements").lines
    assert lines[0].startswith("Shipped, out of sample: mean |error|") and "fitted rows left out" in lines[0]
    assert any(line.startswith("Held out (holdout_runs.csv, never fitted to)") for line in lines)
