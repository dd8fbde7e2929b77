"""Rows a figure was fitted to are marked from the data (each microbenchmark file's
``fitted_to`` column), agree with the hardware profiles' ``sources``, and stay out of the
headline; the held-out runs are a dataset of their own, summed up apart."""

from __future__ import annotations

import csv
import importlib
from pathlib import Path

import pytest
import yaml

from sweeps.jobs.validation import DATA_DIR, load_profiles
from tasks.validation.headline import headline, headline_lines, headline_of
from tasks.validation.records import DATASETS, HELD_OUT, signed_error, speed_error
from tasks.validation.validate import validate_all

ROOT = Path(__file__).resolve().parents[3]
HARDWARE = ROOT / "conf" / "hardware"
#: The files whose rows set figures (a training run or a layer time is never fitted to).
FITTED_FILES = ("collective_ladders.csv", "gemm_efficiency.csv", "gemm_k_sweeps.csv", "gemm_sustained.csv")


def _profiles_yaml():
    return {d["name"]: d for d in (yaml.safe_load(p.read_text(encoding="utf-8")) for p in HARDWARE.glob("*.yaml"))}


def _named(path: Path):
    """(row, figure) for every figure a row of ``path`` names in its fitted_to cell."""
    with open(path, encoding="utf-8", newline="") as f:
        return [(i, name) for i, row in enumerate(csv.DictReader(f), start=1)
                for name in (row["fitted_to"] or "").split()]


def _value(profile: dict, dotted: str):
    value = profile
    for part in dotted.split("."):
        value = value[part]
    return value


def _opens_with_file(text: str, file: str) -> bool:
    """A source that is no assumption and cites ``file`` in its opening clause: the figure was
    read off or fitted to that file's rows."""
    at = text.find("conf/data/")
    return not text.lower().startswith("assumption") and 0 <= at < 120 and text.startswith(file, at + 10)


@pytest.mark.parametrize("file", FITTED_FILES)
def test_every_figure_a_row_names_is_a_profile_figure_whose_source_cites_that_file(file):
    profiles, named = _profiles_yaml(), _named(DATA_DIR / file)
    assert named, f"{file} names no fitted figure"
    for row, name in named:
        if name.startswith("tasks."):
            module, constant = name.rsplit(".", 1)
            assert isinstance(getattr(importlib.import_module(module), constant), float), (file, row, name)
            continue
        profile, figure = name.split(".", 1)
        assert isinstance(_value(profiles[profile], figure), float), (file, row, name)
        assert _opens_with_file(profiles[profile]["sources"][figure], file), (file, row, name)


@pytest.mark.parametrize("file", FITTED_FILES)
def test_every_profile_figure_read_off_a_file_names_its_rows_there(file):
    named = {name for _, name in _named(DATA_DIR / file)}
    cited = {f"{p}.{figure}" for p, d in _profiles_yaml().items() for figure, text in d["sources"].items()
             if _opens_with_file(text, file)}
    assert cited and cited <= named, sorted(cited - named)


@pytest.fixture(scope="module")
def shipped():
    return validate_all(load_profiles(), DATA_DIR)


def test_the_records_of_fitted_rows_say_what_was_fitted_and_no_run_is(shipped):
    fitted = [r for r in shipped.records if r.fitted_to]
    assert {r.dataset for r in fitted} == {"collectives", "gemm"}
    assert not [r for r in shipped.records if r.dataset in ("runs", "layers", HELD_OUT) and r.fitted_to]
    mamf = [r for r in shipped.records if r.source.endswith("MAMF")]
    assert mamf and all("gemm_ceiling" in r.fitted_to for r in mamf)    # a ceiling is its MAMF row
    sweeps = {r.model: {bool(r.fitted_to)} for r in shipped.records if r.source.endswith("K sweep")}
    assert sweeps == {"fp16": {True}, "fp8": {False}}
    assert [r for r in shipped.records if r.dataset == "collectives" and not r.fitted_to]   # out of sample too


def test_the_held_out_runs_are_a_dataset_of_the_default_validation(shipped):
    assert DATASETS[-1] == HELD_OUT
    held_out = [r for r in shipped.records if r.dataset == HELD_OUT]
    assert len(held_out) == 61 and {r.source for r in held_out} >= {"llama3_paper_bf16", "mtnlg22_deepspeed"}
    assert len([r for r in shipped.records if r.dataset == "runs"]) == 19


def test_the_headline_leaves_out_fitted_rows_and_sums_held_out_runs_apart(shipped):
    h = headline_of(shipped.records)
    out = [abs(r.error) for r in shipped.records if r.dataset != HELD_OUT and not r.fitted_to]
    assert h.shipped.n == len(out) and h.shipped.mean == pytest.approx(sum(out) / len(out))
    assert h.fitted == len([r for r in shipped.records if r.fitted_to]) > 0
    assert h.with_fitted.n == h.shipped.n + h.fitted
    assert h.held_out.n == 61 and h.held_out.worst == max(abs(r.error) for r in shipped.records
                                                          if r.dataset == HELD_OUT)


def test_a_fitted_row_however_wrong_moves_no_headline_figure():
    base = headline(["gemm", "gemm", HELD_OUT], [0.02, -0.04, 0.3], ["", "", ""], ["TF"] * 3)
    wrong = headline(["gemm", "gemm", HELD_OUT, "gemm"], [0.02, -0.04, 0.3, signed_error(5.0, 1.0)],
                     ["", "", "", "h100.gemm_ceiling.bf16"], ["TF"] * 4)
    assert wrong.shipped == base.shipped and wrong.held_out == base.held_out and wrong.fitted == 1
    assert wrong.with_fitted.worst == pytest.approx(4.0)


def test_the_lean_says_which_way_the_model_errs_whatever_the_metric():
    """A step predicted 20 % short and a throughput predicted 25 % high are the same optimism:
    the work runs 1.25 times as fast as measured."""
    assert speed_error(signed_error(0.8, 1.0), "s") == pytest.approx(0.25)
    assert speed_error(signed_error(1.25, 1.0), "tok/s") == pytest.approx(0.25)
    assert speed_error(signed_error(12.0, 10.0), "ms") == pytest.approx(10 / 12 - 1)
    h = headline(["runs", "runs", HELD_OUT], [signed_error(0.8, 1.0), signed_error(1.25, 1.0), -0.1], ["", "", ""],
                 ["s", "tok/s", "%"])
    assert h.shipped.lean == pytest.approx(0.25) and h.shipped.mean == pytest.approx((0.2 + 0.25) / 2)
    assert h.held_out.lean == pytest.approx(-0.1)
    assert "lean +25.0% (faster than measured)" in headline_lines(h)[0]
    assert "lean -10.0% (slower than measured)" in headline_lines(h)[-1]
