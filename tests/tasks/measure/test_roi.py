"""The ROI's measurement points: what a configuration needs, at its exact sizes."""

from __future__ import annotations

from tasks.measure.roi import roi_points


def _points(configs, **overrides):
    settings = dict(passes=["ig", "wg"], elementwise=False, dtype="bf16", device="cpu", device_model_spec="auto",
                    collective_ops=["all_reduce"], world=2, placement="pack", ladder_bytes=[1 << 20], torch_version="t")
    return roi_points(configs, **{**settings, **overrides}).to_pylist()


def test_collectives_are_measured_at_the_weight_gradient_and_activation_sizes_of_each_configuration():
    rows = _points([dict(h=1024, heads=8, sl=512, b=2, tp=4)])
    sizes = {r["name"]: r["message_bytes"] for r in rows if r["op"] == "all_reduce"}
    assert sizes == {"all_reduce.wg": 2 * 12 * 1024**2 // 4,     # p * 12 H^2 / TP
                     "all_reduce.tp": 2 * 512 * 2 * 1024,        # p * SL * B * H
                     "all_reduce.ladder": 1 << 20}
    assert all(r["world"] == 2 and r["placement"] == "pack" for r in rows if r["op"] == "all_reduce")


def test_without_tensor_parallelism_there_is_no_activation_all_reduce():
    rows = _points([dict(h=1024, heads=8, sl=512, b=2, tp=1)], collective_ops=["all_reduce", "reduce_scatter"])
    assert not [r for r in rows if r["name"].endswith(".tp")]
    assert {r["name"] for r in rows if r["op"] != "gemm"} == {
        "all_reduce.wg", "all_reduce.ladder", "reduce_scatter.wg", "reduce_scatter.ladder"}


def test_points_shared_by_configurations_are_measured_once():
    one = _points([dict(h=512, heads=8, sl=256, b=1, tp=2)])
    two = _points([dict(h=512, heads=8, sl=256, b=1, tp=2), dict(h=512, heads=8, sl=256, b=1, tp=2)])
    assert len(two) == len(one) and len({r["key"] for r in two}) == len(two)
    gemms = [r for r in one if r["op"] == "gemm"]
    assert gemms and {r["name"].rsplit(".", 1)[1] for r in gemms} == {"ig", "wg"}


def test_a_kernel_key_names_the_peak_its_fraction_refers_to_and_a_collective_key_does_not():
    """Rows are shared by every sweep: read under another hardware profile, a kernel's
    stored peak_fraction would be a fraction of the former profile's peak."""
    config = [dict(h=512, heads=8, sl=256, b=1, tp=2)]
    mi210, h100 = _points(config, peak_tflops=181.0), _points(config, peak_tflops=989.0)
    keys = {(r["op"], r["name"], r["message_bytes"]): r["key"] for r in mi210}
    for row in h100:
        same = keys[(row["op"], row["name"], row["message_bytes"])] == row["key"]
        assert same == (row["op"] != "gemm"), row["name"]
