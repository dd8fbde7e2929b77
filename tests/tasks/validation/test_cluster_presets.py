"""A cluster preset of a device (``conf/hardware/h100-a3-high.yaml``: H100 nodes whose network
is GPUDirect-TCPX) answers to its own name only, meets the all-gather ladder of its machine
type where the InfiniBand figures it replaces miss it, and is what MaxText's A3 rows run on;
a run across nodes says whether the network rate it rests on is measured or assumed."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from sweeps.config import load_preset
from tasks.model.collectives.nccl import predicted_busbw
from tasks.validation.microbench_check import measured_networks
from tasks.validation.predict_runs import cluster_preset, find_profile, run_hardware
from tasks.validation.runs import read_runs
from tasks.validation.validate import NETWORK_WORDS, detail_parts, validate_runs

DATA = Path(__file__).resolve().parents[3] / "conf" / "data"
A3_LADDER = "2 nodes x 8xH100 A3 High (4x200G GPUDirect-TCPX)"


@pytest.fixture(scope="module")
def a3():
    return load_preset("hardware", "h100-a3-high")


def test_a_cluster_preset_answers_to_its_own_name_and_never_to_its_devices(a3):
    h100, h200 = load_preset("hardware", "h100"), load_preset("hardware", "h200")
    profiles = {a3.name: a3, h100.name: h100, h200.name: h200}    # the preset first: no luck of order
    assert cluster_preset(a3, profiles) and not cluster_preset(h100, profiles)
    for name in ("H100", "H100-SXM", "H100-SXM5-80GB", "NVIDIA H100 80GB HBM3", "DGX-H100", "h100"):
        assert find_profile(name, profiles) is h100, name
    assert find_profile("h100-a3-high", profiles) is a3
    assert find_profile("H100 A3 High", profiles) is a3


def test_the_tcpx_ladder_is_met_from_128_mib_where_the_infiniband_efficiency_misses_it_by_far(a3):
    rows = pd.read_csv(DATA / "collective_ladders.csv")
    rows = rows[(rows["system"] == A3_LADDER) & (rows["bytes"] >= 2**27)]
    assert len(rows) == 7 and set(rows["fitted_to"]) == {"h100-a3-high.inter_node.efficiency"}

    def error(hw):
        busbw = predicted_busbw("all_gather", rows["gpus"].to_numpy(), rows["bytes"].to_numpy(), hw,
                                nodes=rows["nodes"].to_numpy())
        return busbw / 1e9 / rows["busbw_GBps"].to_numpy() - 1.0

    assert np.all(np.abs(error(a3)) <= 0.05)
    h100 = load_preset("hardware", "h100")
    infiniband = replace(h100, inter_node=replace(h100.inter_node, bandwidth_GBps=a3.inter_node.bandwidth_GBps))
    assert np.all(error(infiniband) > 0.7)    # the same four NICs at InfiniBand's efficiency: 74-92 % faster


def test_maxtexts_a3_rows_run_on_the_preset_and_its_network(a3):
    runs = [r for r in read_runs(DATA / "holdout_runs.csv") if r.source == "maxtext2404_a3"]
    profiles = {name: load_preset("hardware", name) for name in ("h100", "h100-a3-high")}
    assert len(runs) == 5
    for run in runs:
        hw = run_hardware(run, find_profile(run.hw, profiles))
        assert hw.name == "h100-a3-high" and hw.inter_node == a3.inter_node
        assert hw.inter_node.bandwidth_GBps == pytest.approx(4 * 200 / 8 / 8)


def test_a_run_across_nodes_says_whether_its_network_rate_is_measured():
    """Measured where the profile's scale-out efficiency is fitted to a ladder of its own
    system (A3 High's TCPX ladder, the four-node B200 one), assumed where it is borrowed; a
    run inside one node says nothing of it, and without the ladders nothing is said."""
    assert measured_networks(DATA / "collective_ladders.csv") == {"b200", "h100-a3-high"}
    profiles = {name: load_preset("hardware", name) for name in ("h100", "h100-a3-high", "b200")}
    runs = [r for r in read_runs(DATA / "holdout_runs.csv") if r.source == "maxtext2404_a3"]
    runs.append(replace(runs[-1], hw="H100-SXM5-80GB"))
    networks = measured_networks(DATA / "collective_ladders.csv")
    notes = [[part for part in detail_parts(r.detail) if part in NETWORK_WORDS.values()]
             for r in validate_runs(runs, profiles, networks=networks)]
    assert notes == [[]] + [["network rate measured"]] * 4 + [["network rate assumed"]]
    assert not [r for r in validate_runs(runs, profiles) if "network rate" in r.detail]
