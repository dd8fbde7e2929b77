"""The ``dtensor`` TP engine: PyTorch's functional collectives on batch-first activations
sharded on the sequence copy each sequence-parallel collective's tensor into place, and
torchtitan's float8 plan gathers the column-parallel inputs in fp8."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from sweeps.config import load_search
from tasks.model.kernels.roofline import memory_bound_time
from tasks.model.step.comm import dtensor_copies, tp_collective
from tasks.model.step.context import as_layouts
from tasks.model.step.plan import StepContext
from tasks.model.terms.layout import Layout
from tasks.model.terms.stack import TP_ENGINE_NAMES, Stack

FLASH = Stack(attention="flash")


def one(ctx, **layout):
    lay = Layout(**{"tp": 8, "pp": 1, "dp": 1, "micro_batch": 4, "sequence_parallel": True, **layout})
    return float(tp_collective(as_layouts(lay.columns(), np.array([1.0]), ctx), ctx)[0])


def test_the_engines_and_the_torchtitan_preset():
    assert TP_ENGINE_NAMES == ("megatron", "dtensor") and Stack().tp_engine == "megatron"
    with pytest.raises(ValueError, match="stack.tp_engine='jax': choose one of megatron, dtensor"):
        Stack(tp_engine="jax")
    assert load_search(["small", "stack=torchtitan-fsdp2"]).step_context.stack.tp_engine == "dtensor"


def test_a_sequence_parallel_pair_copies_its_tensor_twice_under_dtensor(llama, h100):
    megatron = StepContext(llama, h100, devices=8, global_batch=8, stack=FLASH)
    dtensor = StepContext(llama, h100, devices=8, global_batch=8, stack=replace(FLASH, tp_engine="dtensor"))
    whole = 2.0 * llama.seq_len * 4 * llama.hidden                   # a micro-batch's activations, bf16
    copies = 2 * float(memory_bound_time(2.0 * whole, dtensor.device))  # read and write it, twice
    assert float(dtensor_copies(float(llama.hidden), float(llama.seq_len), 4.0, 2.0, 2.0, dtensor)) == \
        pytest.approx(copies)
    assert one(dtensor) - one(megatron) == pytest.approx(copies, rel=1e-9)
    # an all-reduce (no sequence parallelism) moves no dimension but the leading one: no copy
    assert one(dtensor, sequence_parallel=False) == pytest.approx(one(megatron, sequence_parallel=False))
    # a fused (async) overlap gathers and scatters in place
    overlapped = replace(dtensor, stack=replace(dtensor.stack, tp_overlap=True))
    plain = replace(megatron, stack=replace(megatron.stack, tp_overlap=True))
    assert one(overlapped) == pytest.approx(one(plain))


def test_fp8_gemms_gather_their_inputs_in_fp8_under_dtensor(llama, h100):
    fp8 = replace(FLASH, gemm_precision="fp8")
    megatron = StepContext(llama, h100, devices=8, global_batch=8, stack=fp8)
    dtensor = StepContext(llama, h100, devices=8, global_batch=8,
                          stack=replace(fp8, tp_engine="dtensor", tp_overlap=True))
    bf16_dtensor = StepContext(llama, h100, devices=8, global_batch=8,
                               stack=replace(FLASH, tp_engine="dtensor", tp_overlap=True))
    # with the copies out of the way (overlap), the pair is cheaper by a half-size all-gather
    assert one(dtensor) < one(megatron) == pytest.approx(one(bf16_dtensor))


def test_a_runs_file_names_the_engine_and_a_wrong_one_is_refused_naming_the_cell(tmp_path):
    import csv

    from tasks.validation.records import RowError
    from tasks.validation.runs import read_runs
    from pathlib import Path
    held_out = Path(__file__).resolve().parents[3] / "conf" / "data" / "holdout_runs.csv"
    rows = list(csv.DictReader(held_out.open(encoding="utf-8")))
    row = next(r for r in rows if r["source"] == "torchtitan2506_asynctp")
    assert row["tp_engine"] == "dtensor"
    path = tmp_path / "runs.csv"
    for value, ok in (("dtensor", True), ("", True), ("jax", False)):
        with path.open("w", newline="", encoding="utf-8") as handle:
            writer = csv.DictWriter(handle, fieldnames=list(row))
            writer.writeheader()
            writer.writerow({**row, "tp_engine": value})
        if ok:
            assert read_runs(path)[0].tp_engine == (value or "megatron")
        else:
            with pytest.raises(RowError, match="tp_engine='jax'"):
                read_runs(path)
