"""The profiled layer: real steps on the CPU, every kernel attributed to an operator class."""

import math
import time

import pyarrow as pa
import pytest
import torch
import torch.nn.functional as F

from tasks.measure.baseline import BASELINE_POINT_SCHEMA, ProfileContext, _Subject, _Visits, measure_points, \
    profile_step
from tasks.measure.stability import StabilityRule
from tasks.measure.timing import THREAD_CPU
from tasks.model.kernels.layer import gemm_shapes
from tasks.measure.transformer_layer import LayerShape, build_layer, region_clock
from tasks.model.projection.operators import GEMM_CLASSES, OP_CLASSES, class_column


#: Operators that make a view of a tensor (or detach one), moving no data.
VIEW_OPERATORS = {"aten::detach", "aten::view", "aten::transpose", "aten::reshape", "aten::_unsafe_view",
                  "aten::as_strided", "aten::t", "aten::expand", "aten::permute", "aten::alias"}


def test_every_kernel_of_a_step_lands_in_an_operator_class():
    layer = build_layer(LayerShape(h=256, heads=4, sl=128, b=2, tp=1))
    layer.step()
    profile = profile_step(layer.step, device="cpu", steps=5)
    assert set(profile.classes) == set(OP_CLASSES)
    assert all(t > 0 for t in profile.classes.values()), [c for c, t in profile.classes.items() if t <= 0]
    # Operators outside every region: the engine's gradient sums (where the residual stream's
    # two branches meet), and ops that only make views; their time is counted once.
    outside = set(profile.unattributed_operators) - {"aten::add", "aten::add_"} - VIEW_OPERATORS
    assert not outside, outside
    assert profile.unattributed_kernel_s == pytest.approx(sum(profile.unattributed_operators.values()))
    assert profile.unattributed_kernel_s <= profile.unattributed_s
    assert sum(profile.classes.values()) <= profile.step_s * 1.001


def test_a_region_clock_times_each_region_by_the_clock_it_is_given():
    layer = build_layer(LayerShape(h=64, heads=1, sl=8, b=1, tp=1))
    x = torch.ones(4, requires_grad=True)

    def waits(t):  # a region whose thread is off its core, as a busy machine's time slices leave it
        time.sleep(0.05)
        return t * 2

    with region_clock(time.perf_counter_ns) as wall:
        layer._region.apply(waits, "gelu", x).sum().backward()
    with region_clock(time.thread_time_ns) as cpu:
        layer._region.apply(waits, "gelu", x).sum().backward()
    assert set(wall) == set(cpu) == {"gelu.fwd", "gelu.bwd"}
    assert wall["gelu.fwd"] >= 0.05 and cpu["gelu.fwd"] < 0.025


def test_on_one_thread_every_class_is_timed_by_the_threads_cpu_clock():
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        layer = build_layer(LayerShape(h=128, heads=2, sl=64, b=1, tp=1))
        layer.step()
        profile = profile_step(layer.step, device="cpu", steps=2, clock=THREAD_CPU)
    finally:
        torch.set_num_threads(threads)
    assert set(profile.classes) == set(OP_CLASSES)
    assert all(t > 0 for t in profile.classes.values()), [c for c, t in profile.classes.items() if t <= 0]
    assert sum(profile.classes.values()) <= profile.step_s


def test_labelled_layer_computes_the_gradients_of_the_plain_layer():
    shape = LayerShape(h=64, heads=4, sl=16, b=2, tp=2)
    layer = build_layer(shape, dropout=0.0, causal=True)
    out = layer.forward()
    out.backward(layer.grad_seed)
    got = [p.grad.clone() for p in layer.parameters()] + [layer.x.grad.clone()]

    # The same layer written with plain torch operations.
    params = [p.detach().clone().requires_grad_() for p in layer.parameters()]
    x = layer.x.detach().clone().requires_grad_()
    ln1_w, ln1_b, ln2_w, ln2_b, w_qkv, w_out, w_fc1, w_fc2 = params
    b, sl, h, d, heads = shape.b, shape.sl, shape.h, shape.head_dim, shape.heads // shape.tp
    qkv = F.layer_norm(x, (h,), ln1_w, ln1_b) @ w_qkv
    q, k, v = qkv.view(b, sl, 3, heads, d).permute(2, 0, 3, 1, 4)
    scores = q @ k.transpose(-1, -2) / math.sqrt(d)
    scores = scores.masked_fill(torch.ones(sl, sl, dtype=torch.bool).triu(1), float("-inf"))
    context = (scores.softmax(-1) @ v).permute(0, 2, 1, 3).reshape(b, sl, heads * d)
    x2 = x + context @ w_out
    ref = x2 + F.gelu(F.layer_norm(x2, (h,), ln2_w, ln2_b) @ w_fc1) @ w_fc2
    torch.testing.assert_close(out.detach(), ref.detach(), rtol=1e-5, atol=1e-5)
    ref.backward(layer.grad_seed)
    for mine, theirs in zip(got, [p.grad for p in params] + [x.grad], strict=True):
        torch.testing.assert_close(mine, theirs, rtol=1e-4, atol=1e-5)


def test_tp_emulation_builds_the_per_device_shapes():
    layer = build_layer(LayerShape(h=256, heads=8, sl=32, b=1, tp=4))
    assert tuple(layer.w_qkv.shape) == (256, 3 * 64)
    assert tuple(layer.w_fc2.shape) == (4 * 64, 256)
    # The GEMM shapes the layer runs are the ones the algebra counts (layer.gemm_shapes).
    fc1 = next(g for g in gemm_shapes(256, 8, 32, 1, 4) if g.name == "fc1" and g.pass_ == "fwd")
    assert (fc1.m, fc1.k, fc1.n) == (32, 256, 4 * 64)


@pytest.mark.parametrize("field,value", [("h", 0), ("heads", 3), ("tp", 3)])
def test_bad_layer_shapes_are_refused(field, value):
    good = dict(h=64, heads=4, sl=8, b=1, tp=2)
    with pytest.raises(ValueError, match=field):
        LayerShape(**{**good, field: value})


#: Stability thresholds no machine misses: these tests are about what a row holds, not about the machine's noise.
LENIENT = StabilityRule(max_drift=1e3, max_excess=1e3)


def _points(*shapes, device="cpu", dtype="fp32"):
    return pa.Table.from_pylist([dict(key=str(i), calibration="t", role="variation", varied="sl", dtype=dtype,
                                      device=device, causal=True, **s) for i, s in enumerate(shapes)],
                                schema=BASELINE_POINT_SCHEMA)


def test_measured_rows_carry_every_class_and_the_plain_step():
    rows = measure_points(_points(dict(h=128, heads=2, sl=64, b=1, tp=1)),
                          ProfileContext(warmup=1, steps=2, plain_repeats=3, time_cap_s=60.0,
                                         rule=LENIENT)).to_pylist()
    row = rows[0]
    assert row["status"] == "ok" and row["plain_step_s"] > 0 and row["device_model"].startswith("CPU")
    assert all(row[class_column(c)] > 0 for c in GEMM_CLASSES)


def test_a_layer_that_cannot_fit_is_a_row_not_an_exception():
    rows = measure_points(_points(dict(h=1 << 16, heads=512, sl=1 << 16, b=64, tp=1)), ProfileContext()).to_pylist()
    assert rows[0]["status"] == "infeasible" and "GB" in rows[0]["reason"]


def test_a_missing_device_is_a_row_not_an_exception():
    if torch.cuda.is_available():
        pytest.skip("this machine has CUDA")
    rows = measure_points(_points(dict(h=64, heads=1, sl=8, b=1, tp=1), device="cuda"), ProfileContext()).to_pylist()
    assert rows[0]["status"] in ("infeasible",)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_on_a_gpu_the_classes_and_the_step_count_each_kernel_once():
    # On an H200 the regions and the profiled step used to count each kernel two and three
    # times (the profiler lays every region on the device's timeline too): the classes summed
    # to 1.9x and the profiled step to 2.8x the plain step, and held-out steps projected +126 %.
    context = ProfileContext(warmup=2, steps=3, plain_repeats=6, rounds=2, rule=LENIENT)
    rows = measure_points(_points(dict(h=4096, heads=32, sl=4096, b=2, tp=1), device="cuda", dtype="bf16"),
                          context).to_pylist()
    row = rows[0]
    classes = sum(row[class_column(c)] for c in OP_CLASSES)
    assert classes <= row["step_s"] * 1.001 and 0.7 < row["step_s"] / row["plain_step_s"] < 1.1


def test_configurations_are_measured_together_in_rounds_and_each_row_says_how_steady_it_was():
    shapes = [dict(h=128, heads=2, sl=64, b=1, tp=1), dict(h=64, heads=1, sl=32, b=2, tp=1)]
    context = ProfileContext(warmup=1, steps=3, plain_repeats=6, rounds=3, rule=LENIENT)
    rows = measure_points(_points(*shapes), context).to_pylist()
    assert [(r["h"], r["sl"]) for r in rows] == [(128, 64), (64, 32)]  # the order of the points
    for row in rows:
        assert row["status"] == "ok" and row["reason"] is None and row["attempts"] == 1
        assert row["profiled_steps"] == 3 and row["spread"] >= 0 and row["drift"] >= 0
        assert math.isfinite(row["excess"])  # against the sum of its classes' fastest times
        assert 0 < row["plain_step_s"] <= row["plain_median_s"] <= row["plain_p90_s"]  # the fastest, then the load


def test_a_configuration_that_stays_unstable_is_measured_again_then_stored_unstable_with_its_reason():
    # No two rounds' fastest steps are alike to the nanosecond, so a drift threshold of 1e-9 is never met.
    context = ProfileContext(warmup=1, steps=2, plain_repeats=3, rounds=3, pause_s=0.0,
                             rule=StabilityRule(max_drift=1e-9, max_excess=1e3, remeasure=2))
    row = measure_points(_points(dict(h=64, heads=1, sl=16, b=1, tp=1)), context).to_pylist()[0]
    assert row["status"] == "unstable" and row["attempts"] == 3
    assert row["reason"].startswith("unstable after 3 measurements: fastest step not reproduced")
    assert row["profiled_steps"] == 6  # the profiled steps of every measurement count
    assert row["plain_step_s"] > 0


def test_a_slowed_machine_takes_fewer_steps_in_each_visit_rather_than_fewer_rounds():
    visits = _Visits([_Subject({}) for _ in range(4)], ProfileContext(time_cap_s=6.0, rounds=3), keep_layers=False)
    assert visits.budget() == pytest.approx(2.0, rel=0.01)  # on schedule: time_cap_s / rounds
    visits.deadline, visits.visits = time.perf_counter() + 3.0, 6  # behind: 3 s left for 6 visits of the 12
    assert visits.budget() == pytest.approx(0.5, rel=0.05)
    visits.deadline = time.perf_counter() - 1.0  # past the cap: each visit times one step of each kind
    assert visits.budget() == 0.0
