"""The Arrow face of the projection: schema, provenance, agreement with the columns."""

from __future__ import annotations

import numpy as np

from sweeps.config import load_run_config
from sweeps.jobs.projection import plan_points
from tasks.model.projection.grid import PROJECTION_SCHEMA, project_columns, project_table


def test_project_table_keeps_points_and_matches_the_column_model(study_hw):
    points = plan_points(load_run_config(["sweep=smoke"])).points
    table = project_table(points, study_hw)
    assert table.schema == PROJECTION_SCHEMA
    assert table.column("key").to_pylist() == points.column("key").to_pylist()
    cols = {n: points.column(n).to_numpy()
            for n in ("h", "heads", "sl", "b", "tp", "dp", "dtype_bytes", "flop_vs_bw", "dp_slowdown")}
    cols["placed"] = np.zeros(points.num_rows, bool)
    direct = project_columns(cols, study_hw)
    np.testing.assert_allclose(table.column("serialized_fraction").to_numpy(), direct["serialized_fraction"])
    assert set(table.column("calibration").to_pylist()) == {"spec:mi210x4"}


def test_step_time_is_compute_plus_exposed_communication(study_hw):
    table = project_table(plan_points(load_run_config(["sweep=smoke"])).points, study_hw).to_pandas()
    np.testing.assert_allclose(table["step_time_s"], table["t_compute_s"] + table["exposed_comm_s"])
    assert (table["comm_share"] >= table["t_tp_comm_s"] / table["step_time_s"] - 1e-12).all()
    assert ((table["serialized_fraction"] > 0) & (table["serialized_fraction"] < 1)).all()


def test_an_empty_chunk_projects_to_an_empty_table(study_hw):
    points = plan_points(load_run_config(["sweep=smoke"])).points.slice(0, 0)
    assert project_table(points, study_hw).num_rows == 0
