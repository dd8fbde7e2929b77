"""Launch costs and the sustained GEMM, measured for real (CPU here; the CUDA parts skip without a GPU)."""

import pytest

from tasks.measure.launch import layer_launch, plain_layer_launch, tiny_kernel_launch
from tasks.measure.sustained import sustained_gemm
from tasks.measure.transformer_layer import LayerShape

torch = pytest.importorskip("torch")
needs_gpu = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")


@pytest.mark.parametrize("kernel", ["matmul", "add"])
def test_tiny_kernels_on_cpu_have_a_host_cost_and_no_graph(kernel):
    found = tiny_kernel_launch(kernel, count=200, repeats=2)
    assert found.host_us > 0 and found.device_us is None
    assert found.as_dict()["kernel"] == kernel


def test_tiny_kernel_launch_refuses_an_unknown_kernel_and_empty_runs():
    with pytest.raises(ValueError, match="kernel='conv'"):
        tiny_kernel_launch("conv")
    with pytest.raises(ValueError, match="count=0"):
        tiny_kernel_launch("add", count=0)


def test_a_layer_step_spreads_its_wall_time_over_the_operators_it_runs():
    found = layer_launch(LayerShape(h=64, heads=2, sl=16, b=1, tp=1), repeats=2, warmup=1)
    assert found.kernels >= 10  # four GEMMs forward, their gradients, norms, softmax, ...
    assert found.step_us > 0 and found.device_busy_us is None
    assert found.host_us_per_kernel == pytest.approx(found.step_us / found.kernels)


def test_a_plain_torch_layer_runs_fewer_operators_than_the_labelled_one():
    shape = LayerShape(h=64, heads=2, sl=16, b=1, tp=1)
    plain, labelled = plain_layer_launch(shape, repeats=2, warmup=1), layer_launch(shape, repeats=2, warmup=1)
    assert 0 < plain.kernels < labelled.kernels and plain.step_us > 0


def test_sustained_gemm_times_windows_and_summarises_the_last_third():
    run = sustained_gemm(64, fill="zeros", dtype="fp32", seconds=0.3, window=5)
    assert len(run.windows) >= 3 and all(w.tflops > 0 for w in run.windows)
    assert run.board == [] and run.power_limit_w is None  # no NVML on a CPU
    summary = run.summary()
    assert summary["fill"] == "zeros" and summary["best_tflops"] >= summary["sustained_tflops"] > 0
    with pytest.raises(ValueError, match="fill='ones'"):
        sustained_gemm(64, fill="ones")


@needs_gpu
def test_on_a_gpu_a_graph_replay_costs_the_device_less_than_eager_launches_cost_the_host():
    found = tiny_kernel_launch("add", device="cuda", dtype="bf16", count=500, repeats=3)
    assert 0 < found.device_us < found.host_us
    layer = layer_launch(LayerShape(h=256, heads=4, sl=128, b=1, tp=1), device="cuda", dtype="bf16", repeats=3)
    assert layer.kernels > 20 and 0 < layer.device_busy_us < layer.step_us
    plain = plain_layer_launch(LayerShape(h=256, heads=4, sl=128, b=1, tp=1), device="cuda", dtype="bf16",
                               repeats=3)
    assert plain.kernels > 20 and 0 < plain.device_busy_us < plain.step_us


@needs_gpu
def test_on_a_gpu_the_board_is_sampled_while_the_gemm_runs():
    run = sustained_gemm(2048, device="cuda", seconds=1.0, sample_s=0.1)
    assert run.board and run.power_limit_w and run.summary()["sustained_watts"] > 0
