"""``commscale search ... --tokens N --price-per-device-hour P --export FRAMEWORK``: the days
and cost of each layout shown follow from its own row, the winner's export carries them in
its header, and bad values are refused in one line with exit status 2 before any work."""

from __future__ import annotations

import re

import pytest
from click.testing import CliRunner

from sweeps.cli import main
from sweeps.config import load_search
from sweeps.search.results import exhaustive_frame, layout_of

SPACE = ["small", "space.tp=[1,2]", "space.pp=[1,2]", "space.micro_batch=[1,2]", "space.schedule=[1f1b]",
         "space.zero=[none,zero1,zero3]", "space.sequence_parallel=[true]", "space.recompute=[none,full]"]


def _rows(stdout: str, title: str):
    """The cells of each row of the table under ``title``."""
    table = stdout[stdout.index(title):]
    table = table[:table.index("└")]
    return [[cell.strip() for cell in line.strip("│ ").split("│")] for line in table.splitlines()
            if line.startswith("│")]


def test_time_and_cost_to_train_follow_from_each_shown_rows_throughput_and_head_the_export(tmp_path):
    result = CliRunner().invoke(main, ["search", *SPACE, "--exhaustive", "--tokens", "1.5T",
                                       "--price-per-device-hour", "2.5", "--export", "megatron"])
    assert result.exit_code == 0, result.output
    setup = load_search(SPACE)
    shown = exhaustive_frame(setup).head(setup.spec.top)
    rows = _rows(result.stdout, "Time to train 1.5T tokens")
    assert len(rows) == len(shown)
    for cells, (_, row) in zip(rows, shown.iterrows(), strict=True):
        days = 1.5e12 / (row["tokens_per_s_per_device"] * 16) / 86_400
        assert cells == [layout_of(row).describe(), f"{row['tokens_per_s_per_device']:,.0f}", f"{days:,.1f}",
                         f"{days * 24 * 16 * 2.5:,.0f}"]
    export = result.stdout[result.stdout.index("# commscale search"):]
    winner = shown.iloc[0]
    days = 1.5e12 / (winner["tokens_per_s_per_device"] * 16) / 86_400
    assert f"# time to train 1.5T tokens: {days:,.1f} days, {days * 24 * 16 * 2.5:,.0f} USD" in export
    assert f"--micro-batch-size {winner['micro_batch']}" in export
    assert f"--tensor-model-parallel-size {winner['tp']}" in export


def test_a_study_exports_its_best_trial(tmp_path):
    result = CliRunner().invoke(main, ["search", *SPACE, "trials=6", "batch=3", "--tokens", "300B", "--export",
                                       "nemo", "--lake", str(tmp_path / "lake")])
    assert result.exit_code == 0, result.output
    best = _rows(result.stdout, "Top 10 layouts")[0][0]
    assert _rows(result.stdout, "Time to train 300B tokens")[0][0] == best
    assert re.search(rf"# layout {re.escape(best)}: ", result.stdout), result.stdout
    assert "recipe.trainer.strategy.tensor_model_parallel_size = " in result.stdout


@pytest.mark.parametrize("args, says", [
    (["--tokens", "0"], "--tokens"),
    (["--tokens", "-1e12"], "--tokens"),
    (["--tokens", "nan"], "--tokens"),
    (["--tokens", "lots"], "--tokens"),
    (["--tokens", "1T", "--price-per-device-hour", "-2"], "--price-per-device-hour"),
    (["--tokens", "1T", "--price-per-device-hour", "inf"], "--price-per-device-hour"),
    (["--price-per-device-hour", "2"], "give --tokens too"),
    (["--export", "deepspeed"], "--export"),
    (["--export", "megatron", "objective=pareto"], "no single winner"),
    (["--tokens", "1T", "--scaling"], "not with --scaling"),
])
def test_bad_values_are_refused_in_one_line_before_any_work(tmp_path, args, says):
    lake = tmp_path / "lake"
    result = CliRunner().invoke(main, ["search", "small", *args, "--lake", str(lake)])
    assert result.exit_code == 2, result.output
    assert result.stderr.startswith("error: ") and result.stderr.count("\n") == 1, result.stderr
    assert says in result.stderr and "Traceback" not in result.output
    assert result.stdout == "" and not lake.exists()


def test_a_winner_the_framework_cannot_express_is_refused_naming_what(tmp_path):
    # The small preset costs the 2022 stack: materialised attention, which torchtitan has not.
    result = CliRunner().invoke(main, ["search", *SPACE, "--exhaustive", "--export", "torchtitan"])
    assert result.exit_code == 2, result.output
    assert result.stderr == "error: --export torchtitan: materialised attention (torchtitan's attention is SDPA or " \
                            "flex, fused)\n"
