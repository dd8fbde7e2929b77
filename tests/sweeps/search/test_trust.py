"""How far a search's ranking is trusted: top layouts within the cost model's mean error on
comparable published runs (the validation's own predictions) are called a tie, and a winner
within 5 % of usable memory is flagged."""

from __future__ import annotations

import pandas as pd
import pytest
from click.testing import CliRunner

from sweeps.cli import main
from sweeps.config import load_search
from sweeps.jobs.validation import load_profiles, run_validation
from sweeps.search.results import exhaustive_frame
from sweeps.search.trust import MEMORY_MARGIN, memory_margin, published_error, trust

SPACE = ["small", "space.tp=[1,2,4]", "space.pp=[1,2]", "space.micro_batch=[1]", "space.schedule=[1f1b]",
         "space.zero=[none,zero3]", "space.recompute=[none,selective]"]


def test_the_error_is_the_validations_own_over_the_device_class_or_its_stack():
    records = run_validation(load_profiles(), datasets=("runs", "holdout")).validation.records
    on_a100 = [abs(r.error) for r in records if r.hardware == "a100-80gb" and not r.fitted_to]
    # no published A100 run ran megatron-core-2024's switches: every A100 run counts
    modern_setup = load_search(["small", "stack=megatron-core-2024"])
    modern = published_error(modern_setup.hardware, modern_setup.stack)
    assert modern.scope == "this device class" and modern.runs == len(on_a100)
    assert modern.mean == pytest.approx(sum(on_a100) / len(on_a100), rel=1e-12)
    setup = load_search(["small"])  # megatron-2022: Megatron-LM's own A100 runs
    own = published_error(setup.hardware, setup.stack)
    assert own.scope == "this stack and device class" and 2 <= own.runs < len(on_a100)
    assert published_error(setup.hardware, setup.stack) is own  # computed once per process


def test_a_cluster_file_is_trusted_as_its_device_class_not_by_pricing_other_clusters_runs_on_it(tmp_path):
    """A100 nodes of 4 GPUs behind one 100 Gb/s NIC each: the published A100 runs are priced
    on the clusters they ran on (their error was 94.5 % when priced on this one)."""
    cluster = tmp_path / "my_cluster.yaml"
    cluster.write_text("base: a100-80gb\ndevices_per_node: 4\ninter_node:\n  bandwidth_GBps: 12.5\n")
    own = load_search(["small", f"hardware={cluster}"])
    shipped = load_search(["small"])
    error = published_error(own.hardware, own.stack)
    assert error == published_error(shipped.hardware, shipped.stack)
    assert error.hardware == "a100-80gb" and error.mean < 0.2


def test_a_shipped_cluster_preset_is_trusted_as_its_device_class_too():
    """h100-a3-high (H100 nodes on GPUDirect-TCPX) is a preset, but the published H100 runs
    are priced on their own clusters, as h100's are (on its network they were 24 % off)."""
    a3 = load_search(["small", "hardware=h100-a3-high"])
    h100 = load_search(["small", "hardware=h100"])
    error = published_error(a3.hardware, a3.stack)
    assert error == published_error(h100.hardware, h100.stack) and error.hardware == "h100"


def test_layouts_within_the_error_are_a_tie_and_beyond_it_the_ranking_stands():
    setup = load_search(SPACE)
    e = published_error(setup.hardware, setup.stack).mean
    close = pd.DataFrame({"step_time_s": [1.0, 1 + e / 3, 1 + e / 2, 1 + 2 * e]})
    verdict = trust(close, setup)
    assert verdict.tied == 3 and (verdict.spread, verdict.next_gap) == pytest.approx((e / 2, 2 * e), rel=1e-12)
    apart = trust(pd.DataFrame({"step_time_s": [1.0, 1 + 2 * e]}), setup)
    assert apart.tied == 1 and apart.next_gap == pytest.approx(2 * e, rel=1e-12)
    assert trust(close.head(1), setup) is None

    result = CliRunner().invoke(main, ["search", *SPACE, "--exhaustive"])
    assert result.exit_code == 0, result.output
    assert "Trust: " in result.stdout and "published runs of this stack and device class (a100-80gb)" in result.stdout


def test_a_winner_within_five_percent_of_usable_memory_is_flagged(tmp_path):
    setup = load_search(SPACE)
    winner = exhaustive_frame(setup).iloc[0]
    capacity = setup.step_context.memory_limit_bytes / setup.spec.memory_fraction
    assert memory_margin(exhaustive_frame(setup), setup) is None  # 90 % of HBM leaves it room
    tight = f"memory_fraction={winner['memory_per_device_bytes'] / capacity / (MEMORY_MARGIN + 0.02):.6f}"
    tight_setup = load_search([*SPACE, tight])
    assert exhaustive_frame(tight_setup).iloc[0]["step_time_s"] == winner["step_time_s"]  # the same winner, still fits
    needs, usable = memory_margin(exhaustive_frame(tight_setup), tight_setup)
    assert needs == winner["memory_per_device_bytes"] / 1e9 and MEMORY_MARGIN * usable < needs <= usable
    result = CliRunner().invoke(main, ["search", *SPACE, tight, "trials=8", "batch=4", "--lake", str(tmp_path / "l")])
    assert result.exit_code == 0, result.output
    assert f"Memory: the winner needs {needs:.1f} GB of the {usable:.1f} GB usable per device: within 5%" \
        in result.stdout


def test_a_mixture_of_experts_search_is_trusted_as_far_as_the_mixtures_of_experts_runs_go():
    """The dense runs' error says nothing of experts: a MoE search takes the published MoE runs
    on its device class (conf/data/moe_bridge_runs.csv), a dense one the dense runs."""
    setup = load_search(["moe"])
    moe = published_error(setup.hardware, setup.stack, moe=True)
    dense = published_error(setup.hardware, setup.stack)
    assert moe.scope.startswith("mixtures of experts on") and not dense.scope.startswith("mixtures")
    assert moe.runs == 18 and moe.mean > dense.mean      # the experts' runs err more than the dense ones
