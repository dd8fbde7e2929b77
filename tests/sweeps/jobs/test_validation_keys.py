"""A validation record's lake key covers every file its dataset reads: editing any of them
makes the next validation's records new rows, never a stale row served as current."""

from __future__ import annotations

import shutil

from sweeps.jobs import validation
from sweeps.jobs.validation import data_files, lake_rows, load_profiles, run_validation
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
