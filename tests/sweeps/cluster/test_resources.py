"""Work no node of the cluster could ever run is refused at once, in one line naming the
resource, the amount asked and what the cluster has, before the lake is written: Ray
would queue it as infeasible and the run would wait at 0 points for ever.

The loopback cluster's case (several nodes, a resource on some only) is in
``test_local_cluster.py``, on its module's cluster."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from sweeps.cluster.capacity import check_runnable, needs_of, unmet
from sweeps.errors import UserError
from sweeps.jobs.work import Resources

COMMSCALE = str(Path(sys.executable).with_name("commscale"))


def test_a_need_is_met_by_one_node_holding_every_amount_not_by_the_sum():
    nodes = [{"CPU": 1.0, "standin_gpu": 2.0}, {"CPU": 1.0, "standin_gpu": 2.0}]
    assert unmet({"CPU": 1.0, "standin_gpu": 2.0}, nodes) is None
    assert unmet({"standin_gpu": 3.0}, nodes) == ["standin_gpu"]  # 4 in all, at most 2 on one node
    assert unmet({"standin_tpu": 1.0, "CPU": 1.0}, nodes) == ["standin_tpu"]
    # each held by some node, both by none: every need is named
    assert unmet({"CPU": 2.0, "GPU": 1.0}, [{"CPU": 2.0}, {"CPU": 1.0, "GPU": 1.0}]) == ["CPU", "GPU"]
    assert unmet({"CPU": 1.0}, []) == ["CPU"]
    assert unmet({}, []) is None


def test_what_a_task_asks_is_named_as_ray_names_it():
    assert needs_of(Resources(cpus=0, custom={"standin_gpu": 1})) == {"standin_gpu": 1.0}
    assert needs_of(Resources.for_device("cuda", cpus=2)) == {"CPU": 2.0, "GPU": 1.0}


@pytest.mark.ray
def test_the_embedded_ray_refuses_what_it_lacks_unless_an_autoscaler_could_add_it():
    from ray._raylet import GCS_AUTOSCALER_CLUSTER_CONFIG_KEY, GCS_AUTOSCALER_STATE_NAMESPACE
    from ray.core.generated import autoscaler_pb2
    from ray.experimental.internal_kv import _internal_kv_put

    from sweeps.cluster.session import ray_session

    with ray_session(num_cpus=1) as session:
        assert session.embedded
        check_runnable(Resources(cpus=1), session.where, embedded=True)
        for asked, fragments in [(Resources(cpus=0, custom={"standin_gpu": 1}), ["standin_gpu=1", "CPU=1"]),
                                 (Resources(cpus=2), ["CPU=2", "the cluster has CPU=1"])]:
            with pytest.raises(UserError) as refused:
                check_runnable(asked, session.where, embedded=True)
            assert all(f in str(refused.value) for f in fragments), str(refused.value)
            assert session.where in str(refused.value)
        # A node type an autoscaler reports to the GCS (autoscaler v2, KubeRay) may come:
        # joined, such a cluster is not refused; one whose node types cannot have it is.
        config = autoscaler_pb2.ClusterConfig()
        group = config.node_group_configs.add(name="standin", max_count=2)
        group.resources["CPU"], group.resources["standin_gpu"] = 4, 2
        _internal_kv_put(GCS_AUTOSCALER_CLUSTER_CONFIG_KEY, config.SerializeToString(), overwrite=True,
                         namespace=GCS_AUTOSCALER_STATE_NAMESPACE)
        check_runnable(Resources(cpus=0, custom={"standin_gpu": 2}), session.where, embedded=False)
        with pytest.raises(UserError, match="standin_gpu=3.*nor any node type its autoscaler may add"):
            check_runnable(Resources(cpus=0, custom={"standin_gpu": 3}), session.where, embedded=False)
        group.max_count = 0  # a node type it may never start
        _internal_kv_put(GCS_AUTOSCALER_CLUSTER_CONFIG_KEY, config.SerializeToString(), overwrite=True,
                         namespace=GCS_AUTOSCALER_STATE_NAMESPACE)
        with pytest.raises(UserError, match="standin_gpu=1"):
            check_runnable(Resources(cpus=0, custom={"standin_gpu": 1}), session.where, embedded=False)


@pytest.mark.ray
def test_the_readme_probe_on_the_embedded_ray_exits_2_at_once_and_writes_no_lake(tmp_path):
    """It waited at 0/200 for ever; here each point's time cap (2 s) ends it either way."""
    env = {k: v for k, v in os.environ.items() if k not in ("RAY_ADDRESS", "COMMSCALE_LAKE")}
    lake = tmp_path / "lake"
    done = subprocess.run([COMMSCALE, "probe", "--points", "4", "--sleep-ms", "0", "--fail", "bug:1", "--resource",
                           "standin_gpu=1", "--cpus-per-point", "0", "--timeout-s", "2", "--num-cpus", "1",
                           "--lake", str(lake)], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 2, done.stderr[-3000:]
    assert done.stderr.startswith("error: ") and done.stderr.count("\n") == 1, done.stderr
    for fragment in ("standin_gpu=1", "embedded Ray", "the cluster has CPU=1"):
        assert fragment in done.stderr, done.stderr
    assert not lake.exists() and list(tmp_path.iterdir()) == []
