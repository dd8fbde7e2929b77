"""ROI measurements on a real embedded Ray: a gloo collective group of actors, and a CPU
ROI sweep whose second run measures nothing again."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from analysis.query import query
from sweeps.lake import Lake

pytestmark = [pytest.mark.ray, pytest.mark.slow]

COMMSCALE = str(Path(sys.executable).with_name("commscale"))


GROUP_SCRIPT = """
import json, sys
import pyarrow as pa
from sweeps.cluster.groups import run_collective_group
from sweeps.cluster.session import ray_session
from tasks.measure.collectives import CollectiveContext, CollectiveMember
from tasks.measure.kernels import ROI_POINT_SCHEMA, ROI_SCHEMA

world, placement, sizes = int(sys.argv[1]), sys.argv[2], [int(s) for s in sys.argv[3].split(",")]
interleave_bytes, backend, device = int(sys.argv[4]), sys.argv[5], sys.argv[6]
points = pa.Table.from_pylist([dict(key=str(s), op="all_reduce", name="t", m=0, n=0, k=0, batch=1, dtype="fp32",
                                    device=device, device_model_spec="auto", world=world, message_bytes=s,
                                    placement=placement) for s in sizes], schema=ROI_POINT_SCHEMA)
with ray_session(None, 2):
    import ray
    sums = []
    if world <= 2 and backend == "gloo":
        Member = ray.remote(num_cpus=1)(CollectiveMember)
        actors = [Member.remote(i, world, "gloo", "cpu") for i in range(world)]
        port = ray.get(actors[0].free_port.remote())
        ray.get([a.join.remote("127.0.0.1", port, 60) for a in actors])
        sums = ray.get([a.check.remote() for a in actors])
        for a in actors:
            ray.get(a.leave.remote())
            ray.kill(a)
    rows = run_collective_group(points, world=world, placement=placement, backend=backend, device=device,
                                context=CollectiveContext(warmup=1, repeats=3, interleave_bytes=interleave_bytes),
                                schema=ROI_SCHEMA, form_timeout_s=3)
print(json.dumps({"sums": sums, "rows": rows.to_pylist()}))
"""


def _group(world: int, placement: str, sizes, interleave_bytes: int = 1 << 30, backend: str = "gloo",
           device: str = "cpu") -> dict:
    """Run a collective group on a fresh embedded Ray in its own process (Ray keeps
    per-process state, such as the token, that other tests' clusters would leave)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("RAY_")}
    done = subprocess.run([sys.executable, "-c", GROUP_SCRIPT, str(world), placement, ",".join(map(str, sizes)),
                           str(interleave_bytes), backend, device],
                          env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_two_gloo_actors_all_reduce_the_right_sum_and_time_it():
    # The budget interleaves the two small sizes and measures 1 MiB alone; 1 TiB cannot fit.
    result = _group(2, "pack", (4096, 8192, 1 << 20, 1 << 40), interleave_bytes=1 << 16)
    assert result["sums"] == [2.0, 2.0]
    rows, huge = result["rows"][:3], result["rows"][3]
    assert [r["status"] for r in rows] == ["ok", "ok", "ok"]
    assert [r["message_bytes"] for r in rows] == [4096, 8192, 1 << 20] and all(r["repeats"] == 3 for r in rows)
    assert huge["status"] == "infeasible" and "GiB per rank" in huge["reason"] and huge["median_s"] is None
    assert all(r["median_s"] > 0 and r["busbw_GBps"] == pytest.approx(r["algbw_GBps"]) for r in rows)  # 2(n-1)/n = 1


@pytest.mark.gpu
@pytest.mark.parametrize("gpus", [1, 2])
def test_nccl_ranks_on_gpus_time_an_all_reduce_with_its_nccl_provenance(gpus):
    torch = pytest.importorskip("torch")
    if torch.cuda.device_count() < gpus:
        pytest.skip(f"needs {gpus} CUDA GPU{'s' if gpus > 1 else ''}")
    rows = _group(gpus, "pack", (1 << 20, 1 << 26), backend="nccl", device="cuda")["rows"]
    assert [r["status"] for r in rows] == ["ok", "ok"], rows
    assert all(r["median_s"] > 0 and r["nccl_version"] and r["device_model"] for r in rows)


def test_a_group_that_cannot_form_is_rows_with_the_reason():
    (row,) = _group(3, "spread", (1024,))["rows"]
    assert row["status"] == "infeasible" and "cannot form" in row["reason"]


def test_a_cpu_roi_sweep_measures_once_and_a_second_run_measures_nothing(tmp_path):
    lake = tmp_path / "lake"
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
    args = [COMMSCALE, "run", "sweep=roi-smoke", "sweep.h=[256]", "sweep.roi.ladder_bytes=[65536,1048576]",
            "--lake", str(lake)]
    first = subprocess.run(args, env=env, capture_output=True, text=True, timeout=600)
    assert first.returncode == 0, first.stderr
    measured = query(Lake(str(lake)), "SELECT key, op, status, median_s FROM roi").to_pylist()
    assert measured and all(r["status"] == "ok" and r["median_s"] > 0 for r in measured)
    assert {r["op"] for r in measured} == {"gemm", "all_reduce"}
    assert "Overlap from the ROI" in first.stdout
    (fits,) = query(Lake(str(lake)), "SELECT count(*) AS n FROM collective_fit").column("n").to_pylist()
    assert fits == 1

    renamed = subprocess.run([*args, "sweep.name=roi-again"], env=env, capture_output=True, text=True, timeout=600)
    assert renamed.returncode == 0, renamed.stderr
    assert f"0 new, {len(measured)} already in the lake" in renamed.stdout  # shared across sweeps
    assert len(query(Lake(str(lake)), "SELECT key FROM roi").to_pylist()) == len(measured)
