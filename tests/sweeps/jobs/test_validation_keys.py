"""A validation record's lake key covers every file its dataset reads and the figures of the
hardware profile it was predicted with: editing any of them makes the next validation's
records new rows, never a stale row served as current."""

from __future__ import annotations

import dataclasses
import shutil

from sweeps.jobs import validation
from sweeps.jobs.validation import commit_validation, data_files, lake_rows, load_profiles, run_validation
from sweeps.lake import Lake
from sweeps.lake.kinds import VALIDATION
from sweeps.lake.views import query
from tasks.validation.records import GEMM_SWEEPS_FILE


def _gemm_keys(profiles) -> set:
    return set(lake_rows(run_validation(profiles, datasets=("gemm",))).column("key").to_pylist())


def test_the_gemm_dataset_reads_both_its_files():
    assert [p.name for p in data_files(("gemm",))["gemm"]] == ["gemm_efficiency.csv", GEMM_SWEEPS_FILE]


def test_editing_the_k_sweeps_gives_the_gemm_records_new_keys(tmp_path, monkeypatch):
    data = tmp_path / "data"
    shutil.copytree(validation.DATA_DIR, data)
    monkeypatch.setattr(validation, "DATA_DIR", data)
    profiles = load_profiles()
    before = _gemm_keys(profiles)
    assert _gemm_keys(profiles) == before            # the same data: the same keys
    sweeps = data / GEMM_SWEEPS_FILE
    sweeps.write_text(sweeps.read_text(encoding="utf-8").replace(",386,", ",390,", 1), encoding="utf-8")
    assert not _gemm_keys(profiles) & before


def _newest_prediction(lake: Lake, source: str) -> float:
    statement = (f"SELECT predicted FROM {VALIDATION} WHERE source = '{source}' "
                 "ORDER BY validated_at DESC LIMIT 1")
    return query(lake, statement).column("predicted").to_pylist()[0]


def test_a_changed_profile_figure_lands_beside_the_former_record(tmp_path):
    lake = Lake(str(tmp_path / "lake"))
    profiles = load_profiles()
    first = run_validation(profiles, datasets=("runs",))
    commit_validation(lake, first)
    assert commit_validation(lake, run_validation(profiles, datasets=("runs",))).rows_written == 0
    v100 = profiles["v100"]
    slower = {**profiles, "v100": dataclasses.replace(v100, gemm_ceiling={"bf16": 0.5})}
    second = run_validation(slower, datasets=("runs",))
    changed = {r.source: r.predicted for r in second.validation.records if r.hardware == "v100"}
    before = {r.source: r.predicted for r in first.validation.records if r.hardware == "v100"}
    assert changed and all(changed[source] != before[source] for source in changed)
    assert commit_validation(lake, second).rows_written == len(changed)   # only the V100 rows are new
    for source, predicted in changed.items():
        assert _newest_prediction(lake, source) == predicted
