"""Lakes for the figure and report tests: real Parquet lakes written by the lake's own
commit path from the real cost model (no Ray), read back through DuckDB; and small
synthetic frames for the kinds the lake does not hold yet (accuracy, search, scaling)."""

from __future__ import annotations

from typing import Sequence

import pandas as pd
import pytest

from analysis.query import kind_frame
from analysis.summary import overlap_rows, serialized_rows
from sweeps.config import load_run_config
from sweeps.jobs.projection import projection_job
from sweeps.lake import Lake
from sweeps.lake.views import connect
from tasks.model.projection.grid import SCHEMA_VERSION, project_table


def commit_sweep(lake: Lake, overrides: Sequence[str]) -> int:
    """Project a sweep and commit its rows and manifest as `commscale run` would; returns rows."""
    config = load_run_config(overrides)
    job, plan = projection_job(config)
    lake.ensure_writable()
    lake.record_sweep({"sweep": job.name, "hardware": job.hardware, "kind": "projection",
                       "planned": job.points.num_rows, "sweep_fingerprint": job.sweep_fingerprint,
                       "hardware_fingerprint": job.hardware_fingerprint, "config": job.config})
    table = project_table(plan.points, config.hardware)
    return lake.commit("projection", job.partition, table, schema_version=SCHEMA_VERSION).rows_written


@pytest.fixture(scope="session")
def commit():
    """``commit_sweep``, for tests that build a lake of their own."""
    return commit_sweep


@pytest.fixture(scope="module")
def study_lake(tmp_path_factory) -> Lake:
    """The smoke grid (H 2 x SL 2 x B 2 x TP 2, m in {1, 4}, GPT-3 highlighted) and the case study."""
    lake = Lake(str(tmp_path_factory.mktemp("study") / "lake"))
    assert commit_sweep(lake, ["sweep=smoke"]) == 34
    assert commit_sweep(lake, ["sweep=casestudy"]) == 9
    return lake


@pytest.fixture(scope="module")
def projection_rows(study_lake) -> pd.DataFrame:
    return kind_frame(study_lake, "projection")


@pytest.fixture(scope="module")
def smoke_serialized(study_lake) -> pd.DataFrame:
    """The smoke sweep's serialized-analysis rows, as the report selects them."""
    con = connect(study_lake)
    try:
        return serialized_rows(con, "smoke", "mi210x4")
    finally:
        con.close()


@pytest.fixture(scope="module")
def smoke_overlap(study_lake) -> pd.DataFrame:
    """The smoke sweep's overlapped-analysis rows at TP 16, as the report selects them."""
    con = connect(study_lake)
    try:
        return overlap_rows(con, "smoke", "mi210x4", 16)
    finally:
        con.close()


@pytest.fixture
def accuracy_rows() -> pd.DataFrame:
    """Two GEMM weight-gradient classes, two element-wise classes and the step, over two
    configurations; one extrapolated row."""
    rows = []
    for i, (op_class, measured, projected) in enumerate([
        ("fc1.wg", 2e-3, 2.2e-3), ("qkv.wg", 8e-3, 7.5e-3), ("layernorm.fwd", 1e-3, 1.3e-3), ("gelu.bwd", 4e-3, 3.8e-3),
        ("step", 20e-3, 22e-3), ("step", 80e-3, 70e-3),
    ]):
        rows.append(dict(key=f"k{i}", calibration="measured:cpu", device_model="CPU", h=1024 * (1 + i % 2), heads=8,
                         sl=256, b=1, tp=1, op_class=op_class, measured_s=measured, projected_s=projected,
                         band_low_s=0.9 * projected, band_high_s=1.1 * projected,
                         rel_error=(projected - measured) / measured, extrapolated=i == 5))
    return pd.DataFrame(rows)


@pytest.fixture
def search_rows() -> pd.DataFrame:
    """Two studies; in study a, trial 2 is dominated by trial 1 and trial 3 is infeasible."""
    base = dict(model="gpt3", hardware="h100", devices=64, global_batch=512, micro_batch=1, schedule="1f1b",
                virtual_stages=1, zero="zero1", sequence_parallel=False, recompute="none", cp=1, cp_comm="p2p",
                reason=None, latency_s=0.01,
                memory_per_device_bytes=6e10, step_time_s=1.0, exposed_comm_s=0.1, objective=0.0)
    trials = [("a", 0, 8, 8, 1, "ok", 1000.0, 0.15), ("a", 1, 8, 4, 2, "ok", 1200.0, 0.20),
              ("a", 2, 4, 8, 2, "ok", 900.0, 0.35), ("a", 3, 64, 1, 1, "infeasible", None, None),
              ("a", 4, 2, 8, 4, "ok", 1500.0, 0.40), ("b", 0, 8, 2, 4, "ok", 1100.0, 0.25),
              ("b", 1, 4, 4, 4, "ok", 1300.0, 0.28)]
    return pd.DataFrame([dict(base, key=f"{s}{t}", study=s, trial=t, tp=tp, pp=pp, dp=dp, status=status,
                              tokens_per_s_per_device=tok, exposed_comm_share=share)
                         for s, t, tp, pp, dp, status, tok, share in trials])


@pytest.fixture
def scaling_rows() -> pd.DataFrame:
    """Two (model, hardware, batch) series over 8..64 devices."""
    rows = []
    for model, batch in (("gpt3", 512), ("llama3-70b", 256)):
        for devices, tokens, latency, step in ((8, 3000.0, 0.01, 2.0), (16, 2800.0, 0.02, 1.1), (32, 2400.0, 0.04, 0.6),
                                                (64, 1800.0, 0.08, 0.4)):
            rows.append(dict(key=f"{model}{devices}", model=model, hardware="h100", devices=devices, global_batch=batch,
                             tp=8, pp=1, dp=devices // 8, micro_batch=1, schedule="1f1b", virtual_stages=1, zero=1,
                             sequence_parallel=True, recompute="none", cp=1, cp_comm="p2p", step_time_s=step,
                             exposed_comm_share=0.2,
                             tokens_per_s_per_device=tokens, memory_per_device_bytes=5e10, latency_s=latency,
                             winner_family="tp+dp"))
    return pd.DataFrame(rows)

