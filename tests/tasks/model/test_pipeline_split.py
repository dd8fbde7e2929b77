"""A pipeline split that counts the embedding and the loss as layers (``Stack.pipeline_split``,
Megatron-Core's account_for_embedding_in_pipeline_split and account_for_loss_in_pipeline_split):
a middle stage holds ceil((layers + 2) / chunks) a chunk, the first and last stage a layer
fewer; the last runs the output layer in place of one, the first holds a layer's fewer
activations for the most micro-batches; without a pipeline nothing changes; runs files and
the exports carry it."""

from __future__ import annotations

import csv
import dataclasses
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from sweeps.config import load_preset
from sweeps.export.case import ExportCase, Unexpressible, chunk_split
from sweeps.export.megatron import pipeline_layout
from sweeps.export.torchtitan import render as torchtitan_render
from tasks.model.step import memory
from tasks.model.step.compute import output_layer_time
from tasks.model.step.context import as_layouts, busiest_stage_layers
from tasks.model.step.plan import StepContext, stage_memory, step_plan
from tasks.model.terms.layout import Layout
from tasks.model.terms.stack import PIPELINE_SPLITS, Stack
from tasks.validation.runs import read_runs

ROOT = Path(__file__).resolve().parents[3]
#: Llama 3.1 405B (126 layers) at 8,192 tokens, as the Llama 3 pre-training ran it.
LLAMA_405B = dataclasses.replace(load_preset("model", "llama3.1-405b-128k"), seq_len=8192)
EVEN = Stack(attention="flash", host_launch_us=0.0)
SPLIT = dataclasses.replace(EVEN, pipeline_split="embedding+loss")
PIPELINE = Layout(tp=8, pp=16, dp=8, micro_batch=1, zero="zero1", sequence_parallel=True)


def _lay_ctx(hw, layout: Layout, stack: Stack):
    ctx = StepContext(model=LLAMA_405B, hardware=hw, devices=layout.tp * layout.pp * layout.dp, global_batch=128,
                      stack=stack, memory_fraction=float("inf"))
    return as_layouts(layout.columns(), np.asarray([float(layout.dp)]), ctx), ctx


def test_a_middle_stage_holds_the_layers_and_the_embedding_and_loss_split_evenly():
    assert busiest_stage_layers(126.0, 16, 1, 2.0) == 8.0          # 128 / 16: the end stages build 7
    assert busiest_stage_layers(126.0, 8, 8, 2.0) == 16.0          # 64 chunks of 2
    assert busiest_stage_layers(126.0, 1, 1, 2.0) == 126.0         # one stage builds every layer
    assert busiest_stage_layers(80.0, 16, 1, 2.0) == 6.0           # 82 / 16 rounds up, as the even split does
    assert Stack().pipeline_split == "layers" and Stack().split_shortfall == (0.0, 0.0)
    assert SPLIT.split_shortfall == (1.0, 1.0) and set(PIPELINE_SPLITS) >= {"embedding", "loss"}
    with pytest.raises(ValueError, match="stack.pipeline_split='both'"):
        Stack(pipeline_split="both")


def test_the_last_stage_runs_the_output_layer_in_place_of_a_layer(h100):
    even_lay, even_ctx = _lay_ctx(h100, PIPELINE, EVEN)
    split_lay, split_ctx = _lay_ctx(h100, PIPELINE, SPLIT)
    even, split = step_plan(even_lay, even_ctx), step_plan(split_lay, split_ctx)
    t_output = float(output_layer_time(even_lay, even_ctx)[0])
    t_layer = (float(even.compute["per_microbatch"][0]) - t_output) / 8.0
    assert 0.0 < t_output < t_layer          # 405B: the output layer is lighter than a layer
    # the busiest stage: a middle one's 8 layers, against 7 and the output layer on the last
    assert float(even.compute["per_microbatch"][0] - split.compute["per_microbatch"][0]) == \
        pytest.approx(t_output, rel=1e-9)
    assert float(split.step_time[0]) < float(even.step_time[0])
    # the loss alone counted: the same; the embedding alone: the last stage keeps its 8 layers
    loss_lay, loss_ctx = _lay_ctx(h100, PIPELINE, dataclasses.replace(EVEN, pipeline_split="loss"))
    assert float(step_plan(loss_lay, loss_ctx).compute["per_microbatch"][0]) == \
        pytest.approx(float(split.compute["per_microbatch"][0]), rel=1e-12)
    emb_lay, emb_ctx = _lay_ctx(h100, PIPELINE, dataclasses.replace(EVEN, pipeline_split="embedding"))
    assert float(step_plan(emb_lay, emb_ctx).compute["per_microbatch"][0]) == \
        float(even.compute["per_microbatch"][0])


def test_an_output_layer_heavier_than_a_layer_keeps_the_last_stage_busiest(h100):
    """A small model with a large vocabulary: the last stage's 7 layers and its output layer
    outlast a middle stage's 8, by the output layer less one layer."""
    small = dataclasses.replace(LLAMA_405B, hidden=1024, heads=8, kv_heads=8, ffn_hidden=2816, vocab=256000)
    ctxs = [StepContext(model=small, hardware=h100, devices=128, global_batch=128, stack=stack,
                        memory_fraction=float("inf")) for stack in (EVEN, SPLIT)]
    layout = Layout(tp=1, pp=16, dp=8, micro_batch=1, zero="zero1")
    lays = [as_layouts(layout.columns(), np.asarray([8.0]), ctx) for ctx in ctxs]
    even, split = (float(step_plan(lay, ctx).compute["per_microbatch"][0]) for lay, ctx in zip(lays, ctxs))
    t_output = float(output_layer_time(lays[0], ctxs[0])[0])
    t_layer = (even - t_output) / 8.0
    assert t_output > t_layer
    assert even - split == pytest.approx(t_layer, rel=1e-9)


def test_without_a_pipeline_the_split_changes_nothing(h100):
    layout = Layout(tp=8, pp=1, dp=128, micro_batch=1, zero="fsdp", sequence_parallel=True)
    (even_lay, even_ctx), (split_lay, split_ctx) = _lay_ctx(h100, layout, EVEN), _lay_ctx(h100, layout, SPLIT)
    assert float(step_plan(split_lay, split_ctx).step_time[0]) == float(step_plan(even_lay, even_ctx).step_time[0])
    assert stage_memory(split_lay, split_ctx)[1] == stage_memory(even_lay, even_ctx)[1]


def test_the_first_stage_holds_a_layer_fewer_for_the_most_micro_batches():
    # 1F1B, 4 stages of 8: the first holds 4 micro-batches of 7 layers, the second 3 of 8
    assert memory.first_stages_activation_layers(16, 4, 1, False, 8.0, 1.0) == 28.0
    assert memory.first_stages_activation_layers(16, 4, 1, False, 8.0, 0.0) == 32.0
    # interleaved, v = 2: 4 x (1 + 3/8) = 5.5 micro-batches of 7 layers, against two chunks fewer of 8
    assert memory.first_stages_activation_layers(16, 4, 2, True, 8.0, 1.0) == pytest.approx(38.5)
    # 2 stages of 2 layers: the second's one micro-batch of 2 is less than the first's 2 of 1
    assert memory.first_stages_activation_layers(16, 2, 1, False, 2.0, 1.0) == 2.0


def test_the_split_lowers_the_busiest_devices_memory(h100):
    (even_lay, even_ctx), (split_lay, split_ctx) = _lay_ctx(h100, PIPELINE, EVEN), _lay_ctx(h100, PIPELINE, SPLIT)
    even_params, even_bytes = stage_memory(even_lay, even_ctx)
    split_params, split_bytes = stage_memory(split_lay, split_ctx)
    assert float(split_bytes[0]) < float(even_bytes[0])
    # the embedding (128,256 x 16,384 / TP 8) is lighter than a layer: the busiest stage holds none of it
    vocab = float(even_ctx.vocab)
    assert float(even_params[0] - split_params[0]) == pytest.approx(vocab * 16384 / 8, rel=1e-9)


def test_runs_files_name_the_split_and_the_405b_rows_use_it():
    runs = read_runs(ROOT / "conf" / "data" / "holdout_runs.csv")
    split = {(run.source, run.row) for run in runs if run.pipeline_split == "embedding+loss"}
    assert len(split) == 8 and {run.pipeline_split for run in runs} == {"layers", "embedding+loss"}
    assert all(run.layers == 126 for run in runs if (run.source, run.row) in split)


def _case(stack: Stack, layout: Layout = PIPELINE) -> ExportCase:
    return ExportCase(layout=layout, model=LLAMA_405B, hardware=load_preset("hardware", "h100"), stack=stack,
                      stack_name="test", devices=layout.tp * layout.pp * layout.dp, global_batch=128)


def test_megatron_spells_the_split_out_and_torchtitan_refuses_it():
    assert chunk_split(_case(SPLIT)) == [7] + [8] * 14 + [7]
    assert chunk_split(_case(EVEN)) == [8] * 14 + [7, 7]
    assert pipeline_layout(_case(SPLIT)) == "|".join(["Et*7", *["t*8"] * 14, "t*7L"])
    interleaved = dataclasses.replace(PIPELINE, pp=8, schedule="interleaved", virtual_stages=8)
    assert chunk_split(_case(SPLIT, interleaved)) == [1] + [2] * 62 + [1]
    layout = Layout(tp=8, pp=2, dp=8, micro_batch=1, zero="none", sequence_parallel=True)
    with pytest.raises(Unexpressible, match="pipeline_split"):
        torchtitan_render(_case(SPLIT, layout))


def test_the_moe_conversion_splits_qwen3_235b_as_its_recipe_does(tmp_path):
    out = tmp_path / "moe.csv"
    subprocess.run([sys.executable, str(ROOT / "scripts/moe_runs_to_runs.py"), "--out", str(out)], check=True,
                   cwd=ROOT, capture_output=True)
    rows = list(csv.DictReader(out.open(encoding="utf-8")))
    split = {row["model"] for row in rows if row["pipeline_split"] == "embedding+loss"}
    assert split == {"Qwen3-235B-A22B"}
    # 94 layers and the two divide every PP x VP its rows run, as Megatron-Core asks
    assert all((int(row["layers"]) + 2) % (int(row["pp"]) * int(row["vp"])) == 0 for row in rows
               if row["model"] in split)
    assert {row["pipeline_split"] for row in rows if row["model"] not in split} == {"layers"}
