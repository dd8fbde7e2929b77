"""Context parallelism in the layout search: the space enumerates CP and its exchange, the
sampler asks a ``context`` parameter only of a space that has more than one, the rows carry
them, a space the stack or the sequence cannot split is refused before any work, and the
``longctx`` preset finds where splitting sequences pays."""

from __future__ import annotations

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
from tasks.model.search.space import LayoutSpace, enumerate_layouts
from tasks.model.terms.layout import CP_COMMS


def test_the_space_enumerates_cp_and_its_exchange_only_where_cp_splits(tmp_path):
    space = LayoutSpace(tp=[1, 2], pp=[1, 2], micro_batch=[1], schedule=["1f1b"], zero=["zero1"],
                        sequence_parallel=[True], recompute=["none"], cp=[1, 2, 4], cp_comm=["p2p", "all_gather"])
    assert space.context_choices() == [(1, 0), (2, 0), (2, 1), (4, 0), (4, 1)]
    layouts = enumerate_layouts(space, 16)
    assert len(layouts["tp"]) == space.size == 2 * 2 * 5
    pairs = {(int(cp), CP_COMMS[int(comm)]) for cp, comm in zip(layouts["cp"], layouts["cp_comm"], strict=True)}
    assert pairs == {(1, "p2p"), (2, "p2p"), (2, "all_gather"), (4, "p2p"), (4, "all_gather")}
    assert all(int(dp) * tp * pp * cp == 16 for dp, tp, pp, cp in
               zip(layouts["dp"], layouts["tp"], layouts["pp"], layouts["cp"], strict=True))
    plain = enumerate_layouts(LayoutSpace(), 64)
    assert set(plain["cp"]) == {1} and set(plain["cp_comm"]) == {0}


def test_the_sampler_asks_context_only_of_a_space_with_several(tmp_path):
    """A space without CP asks the six parameters it asked before CP (its studies go on as they
    were); one with CP asks a seventh, and every layout round-trips through it."""
    plain, split = LayoutSpace(), LayoutSpace(cp=[1, 2], cp_comm=["p2p", "all_gather"])
    assert list(trial_distributions(plain)) == ["tensor", "pp", "micro_batch", "pipeline", "zero", "recompute"]
    assert list(trial_distributions(split))[-1] == "context"
    assert trial_distributions(split)["context"].choices == ("cp1", "cp2:p2p", "cp2:all_gather")
    study = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=3))
    seen = set()
    for _ in range(40):
        trial = study.ask()
        layout = suggest_layout(trial, split)
        assert layout_params(layout, split) == trial.params
        seen.add((layout["cp"], layout["cp_comm"]))
        study.tell(trial, 1.0)
    assert seen == {(1, "p2p"), (2, "p2p"), (2, "all_gather")}


@pytest.mark.parametrize("overrides, says", [
    (["small", "space.cp=[1,2]"], "search.space.cp=[1, 2]: needs fused (flash) attention"),
    (["default", "space.cp=[1,3]"], "does not split 8192-token sequences into 2 x CP = 6 equal chunks"),
    (["default", "space.cp=[1,2]", "space.cp_comm=[ring]"], "search.space.cp_comm"),
    (["default", "space.cp=[0]"], "search.space.cp"),
])
def test_a_space_the_stack_or_sequence_cannot_split_is_refused_before_any_work(tmp_path, overrides, says):
    result = CliRunner().invoke(main, ["search", *overrides, "--lake", str(tmp_path / "lake")])
    assert result.exit_code == 2 and says in result.output and len(result.output.strip().splitlines()) == 1
    assert not (tmp_path / "lake").exists()


def test_search_rows_carry_cp_and_the_longctx_optimum_splits_sequences(tmp_path):
    """At 131,072 tokens a 405B model fits an H100 only with its sequences split: the longctx
    space's optimum has CP above 1, every layout without CP that fits is slower, and the
    search's rows say which CP and exchange each trial ran."""
    frame = exhaustive_frame(load_search(["longctx"], exhaustive=True))
    best = frame.iloc[0]
    assert best["cp"] > 1 and best["step_time_s"] < frame[frame["cp"] == 1]["step_time_s"].min()
    ring = frame[(frame["cp_comm"] == "p2p") & (frame["cp"] > 1)]
    gathered = frame[frame["cp_comm"] == "all_gather"]
    assert ring["step_time_s"].min() < gathered["step_time_s"].min()   # the ring hides what the gather exposes
    lake = tmp_path / "lake"
    result = CliRunner().invoke(main, ["search", "longctx", "trials=16", "batch=8", "--lake", str(lake)])
    assert result.exit_code == 0, result.output
    rows = query(Lake(str(lake)), f"SELECT cp, cp_comm, status, family FROM {SEARCH}").to_pandas()
    assert len(rows) == 16 and set(rows["cp_comm"]) <= set(CP_COMMS) and (rows["cp"] > 1).any()
    assert all(("cp" in fam.split("+")) == (cp > 1) for fam, cp in zip(rows["family"], rows["cp"], strict=True))
