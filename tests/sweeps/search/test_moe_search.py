"""Mixture of experts in the layout search: the space enumerates EP, ETP and the dispatcher
(the dispatcher only where EP splits), the sampler asks an ``experts`` parameter only of a
space that has several, rows carry them, a large space is costed slice by slice to the same
optimum, the ``moe`` preset's optimum splits the experts, its exports write Megatron's and
NeMo's expert flags, and its timeline draws the dispatch and combine on a track of their own."""

from __future__ import annotations

import json

import optuna
import pytest
from click.testing import CliRunner

from analysis.query import query
from sweeps.cli import main
from sweeps.config import load_search
from sweeps.lake import Lake
from sweeps.lake.kinds import SEARCH
from sweeps.search import layout_params, suggest_layout
from sweeps.search.params import trial_distributions
from sweeps.search.results import exhaustive_frame
from tasks.model.search.space import LayoutSpace, best_index, enumerate_layouts, exhaustive, slice_optimum, \
    space_slices
from tasks.model.step.plan import STATUS_CODES
from tasks.model.terms.layout import MOE_DISPATCHERS

SMALL = dict(tp=[1, 2], pp=[1, 2], micro_batch=[1], schedule=["1f1b"], zero=["zero1"], sequence_parallel=[True],
             recompute=["none"])


def test_the_space_enumerates_ep_etp_and_the_dispatcher_only_where_ep_splits():
    space = LayoutSpace(**SMALL, ep=[1, 4], etp=[1, 2], dispatcher=["alltoall", "flex"])
    assert space.expert_choices() == [(1, 1, 0), (1, 2, 0), (4, 1, 0), (4, 1, 1), (4, 2, 0), (4, 2, 1)]
    layouts = enumerate_layouts(space, 16)
    assert len(layouts["tp"]) == space.size == 4 * 6
    triples = {(int(e), int(t), MOE_DISPATCHERS[int(d)])
               for e, t, d in zip(layouts["ep"], layouts["etp"], layouts["dispatcher"], strict=True)}
    assert (1, 1, "flex") not in triples and (4, 2, "flex") in triples
    plain = enumerate_layouts(LayoutSpace(), 64)
    assert set(plain["ep"]) == {1} and set(plain["etp"]) == {1} and set(plain["dispatcher"]) == {0}


def test_the_sampler_asks_experts_only_of_a_space_with_several():
    plain, split = LayoutSpace(), LayoutSpace(ep=[1, 8], etp=[1, 2], dispatcher=["alltoall", "flex"])
    assert "experts" not in trial_distributions(plain)
    assert trial_distributions(split)["experts"].choices == ("ep1", "ep1:etp2", "ep8:alltoall", "ep8:flex",
                                                             "ep8:etp2:alltoall", "ep8:etp2:flex")
    study = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=5))
    seen = set()
    for _ in range(60):
        trial = study.ask()
        layout = suggest_layout(trial, split)
        assert layout_params(layout, split) == trial.params
        seen.add((layout["ep"], layout["etp"], layout["dispatcher"]))
        study.tell(trial, 1.0)
    assert len(seen) == 6


def test_slices_of_a_space_hold_its_layouts_once_and_give_its_optimum():
    setup = load_search(["moe"])
    space = LayoutSpace(tp=[2, 4], pp=[3, 4, 8], micro_batch=[1], schedule=["1f1b"], zero=["zero1"],
                        sequence_parallel=[True], recompute=["none", "selective"], ep=[16, 32, 64],
                        dispatcher=["alltoall", "flex"])
    layouts, costs = exhaustive(space, setup.step_context)
    pieces = [slice_optimum(piece, setup.step_context) for piece in space_slices(space)]
    assert sum(p.layouts for p in pieces) == len(layouts["tp"]) == space.size
    assert sum(p.feasible for p in pieces) == int((costs["status_code"] == 0).sum())
    assert min(p.best_step_s for p in pieces) == costs["step_time_s"][best_index(costs)]
    structural = (costs["status_code"] > 0) & (costs["status_code"] < len(STATUS_CODES) - 1)
    assert sum(p.costed for p in pieces) == int((~structural).sum()) < space.size


def test_the_moe_optimum_splits_the_experts_and_search_rows_carry_them(tmp_path):
    frame = exhaustive_frame(load_search(["moe"], exhaustive=True))
    best = frame.iloc[0]
    assert best["ep"] > 1 and best["ep_exposed_s"] <= best["ep_comm_s"]
    by_dispatcher = frame.groupby("dispatcher")["step_time_s"].min()
    assert by_dispatcher["flex"] < by_dispatcher["alltoall"]   # 256 experts over nodes: a token once per node pays
    lake = tmp_path / "lake"
    result = CliRunner().invoke(main, ["search", "moe", "trials=16", "batch=8", "--lake", str(lake)])
    assert result.exit_code == 0, result.output
    rows = query(Lake(str(lake)), f"SELECT ep, etp, dispatcher, status, ep_comm_s FROM {SEARCH}").to_pandas()
    assert len(rows) == 16 and set(rows["dispatcher"]) <= set(MOE_DISPATCHERS) and (rows["ep"] > 1).all()
    assert (rows[rows["status"] == "ok"]["ep_comm_s"] > 0).all()


def test_the_moe_exports_write_the_expert_flags_or_say_why_not(tmp_path):
    result = CliRunner().invoke(main, ["search", "moe", "--exhaustive", "--lake", str(tmp_path / "lake"),
                                       "--export", "megatron"])
    assert result.exit_code == 0, result.output
    text = result.output
    for flag in ("--num-experts 256", "--moe-router-topk 8", "--moe-ffn-hidden-size 2048",
                 "--moe-shared-expert-intermediate-size 2048", "--moe-layer-freq '([0]*3+[1]*58)'",
                 "--expert-model-parallel-size", "--expert-tensor-parallel-size", "--moe-token-dispatcher-type",
                 "--overlap-moe-expert-parallel-comm", "--multi-latent-attention", "--q-lora-rank 1536",
                 "--kv-lora-rank 512", "--qk-head-dim 128", "--qk-pos-emb-head-dim 64", "--v-head-dim 128"):
        assert flag in text, flag
    assert "--fp8-recipe tensorwise" in text     # the preset's per-tensor current scaling
    # the NeMo export writes neither Transformer Engine's loss nor a recipe but delayed scaling
    unfused = ["stack.cross_entropy=unfused", "stack.fp8_recipe=delayed"]
    nemo = CliRunner().invoke(main, ["search", "moe", *unfused, "--exhaustive", "--lake", str(tmp_path / "lake"),
                                     "--export", "nemo"])
    assert nemo.exit_code != 0 and "latent attention" in nemo.output
    plain_heads = ["model.kv_lora_rank=0", "model.q_lora_rank=0", "model.qk_rope_head_dim=0", "model.v_head_dim=null"]
    overlapped = CliRunner().invoke(main, ["search", "moe", *unfused, *plain_heads, "--exhaustive", "--lake",
                                           str(tmp_path / "lake"), "--export", "nemo"])
    assert overlapped.exit_code != 0 and "overlap_moe_expert_parallel_comm" in overlapped.output
    plain = CliRunner().invoke(main, ["search", "moe", *unfused, *plain_heads, "stack.moe_a2a_overlap=false",
                                      "--exhaustive", "--lake", str(tmp_path / "lake"), "--export", "nemo"])
    assert plain.exit_code == 0 and "recipe.model.config.num_moe_experts = 256" in plain.output
    titan = CliRunner().invoke(main, ["search", "moe", *unfused, "--exhaustive", "--lake", str(tmp_path / "lake"),
                                      "--export", "torchtitan"])
    assert titan.exit_code != 0 and "mixture of 256 experts" in titan.output


def test_the_timeline_draws_the_dispatch_and_combine_on_a_track_of_their_own(tmp_path):
    out = tmp_path / "t.json"
    result = CliRunner().invoke(main, ["timeline", "moe", "layout.dispatcher=alltoall", "--lake",
                                       str(tmp_path / "lake"), "-o", str(out)])
    assert result.exit_code == 0, result.output
    trace = json.loads(out.read_text())
    events = [e for e in trace["traceEvents"] if e.get("cat") == "ep"]
    assert events and all(e["dur"] > 0 for e in events)
    end = max(e["ts"] + e["dur"] for e in trace["traceEvents"] if e["ph"] == "X") / 1e6
    assert end == pytest.approx(trace["otherData"]["step_time_s"], rel=1e-3)
