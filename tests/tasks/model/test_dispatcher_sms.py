"""The SMs a flex dispatcher holds while its exchange hides behind compute
(``Stack.dispatcher_sms``): the compute beside the hidden part of each micro-batch's dispatch
and combine runs on the device's other SMs, so it takes hidden x SMs held / SMs longer; NCCL's
all-to-all, an exchange nothing hides and a dense model are not charged; runs files, the
Megatron-Bridge conversion and the Megatron-LM export carry the figure."""

from __future__ import annotations

import csv
import dataclasses
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from sweeps.config import load_preset
from sweeps.export.case import ExportCase
from sweeps.export.megatron import moe_flags
from tasks.model.step.comm import dispatcher_sm_share
from tasks.model.step.context import as_layouts
from tasks.model.step.plan import StepContext, step_plan
from tasks.model.terms.layout import Layout
from tasks.model.terms.stack import DEEPEP_SMS, HYBRIDEP_SMS, Stack
from tasks.validation.runs import read_runs

ROOT = Path(__file__).resolve().parents[3]
QWEN3_30B = load_preset("model", "qwen3-30b-a3b")
OVERLAP = Stack(attention="flash", gemm_precision="bf16", cross_entropy="te", moe_a2a_overlap=True)
FLEX = Layout(tp=1, pp=1, dp=64, micro_batch=1, ep=16, zero="zero1", dispatcher="flex")


def _plan(hw, layout: Layout, stack: Stack = OVERLAP, model=QWEN3_30B):
    ctx = StepContext(model=model, hardware=hw, devices=64, global_batch=256, stack=stack,
                      memory_fraction=float("inf"))
    return step_plan(as_layouts(layout.columns(), np.asarray([float(layout.dp)]), ctx), ctx)


@pytest.mark.parametrize("preset", ["h100", "gb200"])
def test_the_compute_beside_a_hidden_flex_exchange_runs_on_the_sms_it_leaves(preset):
    hw = load_preset("hardware", preset)
    free = _plan(hw, FLEX, dataclasses.replace(OVERLAP, dispatcher_sms=0))
    held = _plan(hw, FLEX, dataclasses.replace(OVERLAP, dispatcher_sms=HYBRIDEP_SMS))
    hidden = float(held.ep["total"][0] - held.ep["exposed"][0])
    assert hidden > 0.0
    contention = hidden * HYBRIDEP_SMS / hw.compute_units
    assert float(held.ep["contention"][0]) == pytest.approx(contention, rel=1e-12)
    assert float(free.ep["contention"][0]) == 0.0
    assert float(held.compute["per_microbatch"][0] - free.compute["per_microbatch"][0]) == \
        pytest.approx(contention, rel=1e-9)
    assert float(held.step_time[0] - free.step_time[0]) == pytest.approx(float(held.ticks[0]) * contention, rel=1e-6)
    # the default is Megatron-Core's DeepEP figure
    assert Stack().dispatcher_sms == DEEPEP_SMS == 20
    assert float(_plan(hw, FLEX).ep["contention"][0]) == pytest.approx(hidden * 20 / hw.compute_units, rel=1e-12)


def test_nccls_all_to_all_an_unhidden_exchange_and_a_dense_model_are_not_charged(h100):
    nccl = _plan(h100, dataclasses.replace(FLEX, dispatcher="alltoall"))
    assert float(nccl.ep["total"][0] - nccl.ep["exposed"][0]) > 0.0
    assert float(nccl.ep["contention"][0]) == 0.0
    waited = _plan(h100, FLEX, dataclasses.replace(OVERLAP, moe_a2a_overlap=False))
    assert float(waited.ep["contention"][0]) == 0.0
    dense = _plan(h100, dataclasses.replace(FLEX, ep=1, dispatcher="alltoall"), model=load_preset("model", "gpt3"))
    assert float(dense.ep["contention"][0]) == 0.0


def test_the_share_is_capped_at_the_whole_device_and_a_negative_count_is_refused(h100):
    ctx = StepContext(model=QWEN3_30B, hardware=h100, devices=64, global_batch=256,
                      stack=dataclasses.replace(OVERLAP, dispatcher_sms=10 * h100.compute_units))
    assert dispatcher_sm_share(ctx) == 1.0
    with pytest.raises(ValueError, match="stack.dispatcher_sms=-1"):
        Stack(dispatcher_sms=-1)


def test_a_runs_file_states_the_sms_and_a_blank_cell_is_deepeps(tmp_path):
    rows = list(csv.DictReader((ROOT / "conf/data/moe_bridge_runs.csv").open(encoding="utf-8")))
    path = tmp_path / "runs.csv"
    with path.open("w", encoding="utf-8", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows([{**rows[0], "dispatcher_sms": "32"}, {**rows[0], "dispatcher_sms": ""}])
    runs = read_runs(path, [])
    assert [run.dispatcher_sms for run in runs] == [32, DEEPEP_SMS]


def test_the_conversion_gives_each_flex_backend_its_sms(tmp_path):
    out = tmp_path / "moe.csv"
    subprocess.run([sys.executable, str(ROOT / "scripts/moe_runs_to_runs.py"), "--out", str(out)], check=True,
                   capture_output=True)
    source = list(csv.DictReader((ROOT / "conf/data/moe_runs.csv").open(encoding="utf-8")))
    backends = {(r["source"], r["model"], r["hw"]): r["dispatcher"] for r in source}
    for row in csv.DictReader(out.open(encoding="utf-8")):
        backend = backends[(row["source"], row["model"], row["hw"])]
        want = "20" if backend.startswith("flex/deepep") else "32" if backend.startswith("flex/hybridep") else ""
        assert row["dispatcher_sms"] == want, (row["source"], row["model"], backend)


def test_the_megatron_export_writes_a_figure_that_is_not_the_default(h100):
    case = ExportCase(layout=FLEX, model=QWEN3_30B, hardware=h100, devices=64, global_batch=256, stack=OVERLAP,
                      stack_name="test")
    assert "--moe-deepep-num-sms" not in dict(moe_flags(case))
    held = dataclasses.replace(case, stack=dataclasses.replace(OVERLAP, dispatcher_sms=HYBRIDEP_SMS))
    assert dict(moe_flags(held))["--moe-deepep-num-sms"] == HYBRIDEP_SMS
