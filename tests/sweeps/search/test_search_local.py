"""The layout search in this process: no Ray unless asked for, a warm start from the step
model's best layouts, the same trials for the same seed, one layout for SP at TP = 1, the
journal written a batch at a time by one driver, and what the output explains."""

from __future__ import annotations

import itertools
import re
import subprocess
import sys

import numpy as np
import pandas as pd
import pytest
from click.testing import CliRunner
from optuna.trial import TrialState

from analysis.status import search_status
from sweeps.cli import main
from sweeps.config import load_search
from sweeps.config.search import TRIAL_PARAMETERS
from sweeps.errors import UserError
from sweeps.lake import Lake
from sweeps.search import IN_PROCESS, open_study, run_search, study_path
from sweeps.search.journal import BatchedJournal, driver_lock
from sweeps.search.results import (STEP_TERMS, exhaustive_frame, optimum_gap, step_terms, study_rows, top_layouts,
                                   why_best)
from tasks.model.search.space import cartesian_columns, enumerate_layouts

TINY = ["small", "space.tp=[1,2,4]", "space.pp=[1,2]", "space.micro_batch=[1]", "space.schedule=[1f1b]",
        "space.zero=[none,zero3]", "space.recompute=[none,selective]", "trials=12", "batch=4"]


def _params(study) -> list:
    return [(t.params, t.values) for t in study.trials]


def test_sequence_parallel_at_tp1_is_one_layout_neither_enumerated_nor_searched_twice(tmp_path):
    setup = load_search(TINY)
    layouts = enumerate_layouts(setup.spec.space, setup.spec.devices)
    rows = list(zip(*(layouts[name].tolist() for name in sorted(layouts)), strict=True))
    assert len(rows) == len(set(rows)) == setup.spec.space.size == 40  # tp1: 8 layouts, tp2 and tp4: 16 each
    assert not np.any(layouts["sequence_parallel"][layouts["tp"] == 1])
    lake = Lake(str(tmp_path / "lake"))
    setup = load_search([*TINY, "sampler=random", "trials=20"])
    run_search(setup, lake, warm_start=False)
    trials = study_rows(lake, setup.study_name)
    assert not trials[(trials["tp"] == 1) & trials["sequence_parallel"]].shape[0]
    study = open_study(load_search([*TINY, "sampler=random"]), study_path(lake, setup))
    assert study.trials[0].distributions["tensor"].choices == ("tp1", "tp2", "tp2 sp", "tp4", "tp4 sp")
    assert sorted(study.trials[0].params) == sorted(TRIAL_PARAMETERS.split(","))  # no parameter is conditional


def test_the_best_and_the_samplers_own_best_do_not_depend_on_the_order_rows_are_read(tmp_path):
    """A layout the warm start tried and the sampler chose again counts for the sampler, and
    is shown at its first trial, however the lake returns the rows."""
    setup = load_search(TINY)
    lake = Lake(str(tmp_path / "lake"))
    report = run_search(setup, lake)
    rows = study_rows(lake, setup.study_name)
    assert rows["trial"].tolist() == sorted(rows["trial"])
    again = rows[rows["trial"] == 0].assign(trial=int(rows["trial"].max()) + 1)  # the optimum, chosen by the sampler
    rows = pd.concat([rows, again], ignore_index=True)
    seen = set()
    for seed in range(8):
        shuffled = rows.sample(frac=1.0, random_state=seed)
        gap = optimum_gap(setup, shuffled, warm_start=report.warm_start)
        seen.add((gap.gap, gap.sampled_gap, int(top_layouts(shuffled, setup.spec.objective)["trial"].iloc[0])))
    assert seen == {(0.0, 0.0, 0)}


def test_a_fresh_study_starts_from_the_step_models_best_layouts_unless_told_not_to(tmp_path):
    setup = load_search(TINY)
    best = exhaustive_frame(setup).head(setup.spec.batch)
    warm = run_search(setup, Lake(str(tmp_path / "warm")))
    assert warm.where == IN_PROCESS and warm.warm_start == setup.spec.batch and warm.completed_now == 12
    first = study_rows(Lake(str(tmp_path / "warm")), setup.study_name).sort_values("trial").head(setup.spec.batch)
    assert first["step_time_s"].tolist() == pytest.approx(best["step_time_s"].tolist(), rel=1e-12)
    cold = run_search(setup, Lake(str(tmp_path / "cold")), warm_start=False)
    assert cold.warm_start == 0
    again = run_search(load_search([*TINY, "trials=16"]), Lake(str(tmp_path / "warm")))
    assert again.warm_start == setup.spec.batch and again.completed_now == 4  # a resumed study is not restarted


def test_a_seed_gives_the_same_trials_and_the_journal_holds_them_all(tmp_path):
    setup = load_search([*TINY, "seed=3", "trials=24"])
    studies = []
    for name in ("a", "b"):
        lake = Lake(str(tmp_path / name))
        run_search(setup, lake)
        studies.append(open_study(setup, study_path(lake, setup)))  # read back from the file alone
    assert _params(studies[0]) == _params(studies[1])
    assert [t.state for t in studies[0].trials].count(TrialState.COMPLETE) == 24


def test_the_journal_waits_for_flush_and_one_driver_holds_a_study(tmp_path):
    path = tmp_path / "s.journal"
    journal = BatchedJournal(path)
    journal.append_logs([{"op_code": 0}, {"op_code": 4}])
    assert [log["op_code"] for log in journal.read_logs(0)] == [0, 4] and path.read_text() == ""
    journal.flush()
    assert len(path.read_text().splitlines()) == 2 and list(BatchedJournal(path).read_logs(1)) == [{"op_code": 4}]

    setup = load_search(TINY)
    lake = Lake(str(tmp_path / "lake"))
    with driver_lock(study_path(lake, setup)):
        with pytest.raises(UserError, match="being run by another process"):
            run_search(setup, lake)
    assert run_search(setup, lake).completed_now == 12  # released with its holder


def test_without_an_address_the_search_never_imports_ray(tmp_path):
    code = ("import sys; from sweeps.cli import main; "
            f"main(['search', *{TINY!r}, '--lake', {str(tmp_path / 'lake')!r}], standalone_mode=False); "
            "print('ray imported:', 'ray' in sys.modules)")
    env = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path)}
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, env=env)
    assert done.returncode == 0, done.stderr
    assert IN_PROCESS in done.stdout and "ray imported: False" in done.stdout


def test_the_output_explains_labels_and_the_winner_and_ends_its_progress_line(tmp_path):
    result = CliRunner().invoke(main, ["search", *TINY, "--lake", str(tmp_path / "lake")])
    assert result.exit_code == 0, result.output
    assert "Legend: tpN/ppN/dpN" in result.stdout and "sp: sequence parallel" in result.stdout
    assert "Why tp" in result.stdout and "for the runner-up" in result.stdout and " decides " in result.stdout
    assert "12/12 trials" in result.stderr and result.stderr.endswith("\n")
    assert "the best of the sampler's own trials is within" in result.stdout

    space = [item for item in TINY if not item.startswith(("trials=", "batch="))]  # --exhaustive has no budget
    exhaustive = CliRunner().invoke(main, ["search", *space, "--exhaustive"])
    assert exhaustive.exit_code == 0, exhaustive.output
    assert "sampler" not in exhaustive.stdout and "Legend:" in exhaustive.stdout and "Why tp" in exhaustive.stdout


def test_the_step_splits_into_its_terms_and_memory_decides_against_a_faster_neighbour():
    setup = load_search(["default"])
    frame = exhaustive_frame(setup)
    for _, row in frame.head(50).iterrows():
        terms = step_terms(row)
        assert list(terms) == list(STEP_TERMS) and min(terms.values()) >= -1e-9
        assert sum(terms.values()) == pytest.approx(row["step_time_s"], rel=1e-9)
    why = why_best(frame, setup)
    assert why.best != why.runner_up and why.values[0] <= why.values[1] and why.savings
    change, label, value, needs = why.memory_bound
    assert value < why.values[0] and needs > why.usable_gb and change and label != why.best


def test_status_lists_search_studies_and_presets_lists_search_presets(tmp_path):
    setup = load_search(TINY)
    lake = Lake(str(tmp_path / "lake"))
    run_search(setup, lake)
    (row,) = search_status(lake).to_dict("records")
    rows = study_rows(lake, setup.study_name)
    assert (row["study"], row["model"], row["trials"], row["objective"]) == (setup.study_name, "megatron-8.3b", 12,
                                                                             "step_time_s")
    assert row["best"] == pytest.approx(rows[rows["status"] == "ok"]["step_time_s"].min(), rel=1e-12)
    shown = CliRunner().invoke(main, ["status", "--lake", str(tmp_path / "lake")], terminal_width=200)
    assert shown.exit_code == 0 and "Search studies" in shown.output and setup.study_name in shown.output
    presets = CliRunner().invoke(main, ["presets"])
    assert "search: default, diminishing, longctx, moe, pareto, scaling, small" in presets.output


def test_single_fields_of_the_searched_model_and_hardware_change_the_study_and_bad_ones_are_refused():
    plain = load_search(["small"])
    changed = load_search(["small", "model.layers=40", "hardware.devices_per_node=4"])
    assert (plain.model.layers, changed.model.layers) == (74, 40)
    assert (plain.hardware.devices_per_node, changed.hardware.devices_per_node) == (8, 4)
    assert changed.model.name == plain.model.name and changed.study_name != plain.study_name
    assert changed.step_context.model == changed.model and changed.step_context.hardware == changed.hardware
    for bad, named in (("model.nope=1", "model.nope"), ("model.layers=many", "model.layers='many'"),
                       ("hardware.peak_tflops=-1", "hardware.peak_tflops=-1"),
                       ("hardware.intra_node.latency_us=nan", "hardware.intra_node.latency_us=nan")):
        with pytest.raises(UserError, match=named):
            load_search(["small", bad])
    with pytest.raises(UserError, match="model.layers='40': the scaling view searches the presets"):
        load_search(["scaling", "model.layers=40"], scaling=True)
    assert load_search(["scaling", "hardware.devices_per_node=4"], scaling=True).hardware.devices_per_node == 4


@pytest.mark.parametrize("overrides, mode, named", [
    (["small", "scaling.devices=[8]"], {}, "search.scaling.devices='[8]': is not read by a search"),
    (["small", "trials=5"], {"exhaustive": True}, "search.trials='5': is not read by --exhaustive"),
    (["scaling", "devices=512"], {"scaling": True}, "search.devices='512': is not read by --scaling"),
    (["scaling", "model=gpt3"], {"scaling": True}, "search.model='gpt3': is not read by --scaling"),
    (["scaling", "objective=pareto"], {"scaling": True}, "search.objective='pareto': the scaling view keeps one"),
    (["small", "pareto"], {}, "search='pareto': names a second preset after 'small'"),
])
def test_a_field_the_mode_does_not_read_is_refused_not_ignored(overrides, mode, named):
    """Each was accepted and had no effect: the run then answered another question than asked."""
    with pytest.raises(UserError, match=re.escape(named)):
        load_search(overrides, **mode)


def test_a_stack_preset_and_single_switches_change_the_study_and_bad_ones_are_refused():
    plain = load_search(["small"])
    modern = load_search(["small", "stack=megatron-core-2024", "stack.tp_overlap=false"])
    assert (plain.stack.attention, modern.stack.attention, modern.stack.tp_overlap) == ("materialised", "flash",
                                                                                            False)
    assert modern.stack.pp_overlap and modern.study_name != plain.study_name
    assert modern.step_context.stack == modern.stack
    for bad, named in (("stack.attention=magic", "stack.attention='magic'"), ("stack.nope=1", "stack.nope"),
                       ("stack.tp_overlap=maybe", "stack.tp_overlap"), ("stack=nothing", "stack='nothing'"),
                       ("stack.main_grad_bytes=3", "stack.main_grad_bytes=3"),
                       ("stack.elementwise=jit", "stack.elementwise='jit'")):
        with pytest.raises(UserError, match=named):
            load_search(["default", bad])
    with pytest.raises(UserError, match="search.stack='megatron-core-2024-fp8': runs fp8 GEMMs.*peak_fp8_tflops"):
        load_search(["default", "hardware=a100-80gb", "stack=megatron-core-2024-fp8"])


def test_the_cartesian_columns_hold_every_combination_once_in_product_order():
    """``space.cartesian_columns`` (the enumeration's grid): the rows ``itertools.product``
    gives, in its order, and none for an empty axis."""
    axes = [np.array([1, 2, 3]), np.array([True, False]), np.array([5]), np.array([7, 8, 9, 10])]
    rows = list(zip(*(column.tolist() for column in cartesian_columns(axes))))
    assert rows == list(itertools.product(*(axis.tolist() for axis in axes)))
    assert all(len(column) == 0 for column in cartesian_columns([*axes, np.array([], dtype=np.int64)]))
