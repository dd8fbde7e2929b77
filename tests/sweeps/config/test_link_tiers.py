"""The in-switch reduction figures of a link tier are checked like every other figure:
one clear error naming the field."""

from __future__ import annotations

import pytest

from sweeps.config import load_run_config
from sweeps.errors import ConfigError


@pytest.mark.parametrize("override, field", [
    ("hardware.intra_node.nvls_efficiency=-0.1", "hardware.intra_node.nvls_efficiency"),
    ("hardware.intra_node.nvls_efficiency=1.5", "hardware.intra_node.nvls_efficiency"),
    ("hardware.intra_node.nvls_latency_us=nan", "hardware.intra_node.nvls_latency_us"),
    ("hardware.inter_node.nvls_efficiency=0.5", "hardware.inter_node.nvls_efficiency"),
    ("hardware.inter_node.channels=-1", "hardware.inter_node.channels"),
    ("hardware.intra_node.channels=100000", "hardware.intra_node.channels"),
])
def test_bad_in_switch_reduction_figures_are_refused_naming_the_field(override, field):
    with pytest.raises(ConfigError) as caught:
        load_run_config(["hardware=h200", override])
    assert caught.value.field == field


def test_shipped_in_switch_reduction_figures_load():
    config = load_run_config(["hardware=h200"])
    assert config.hardware.intra_node.nvls_efficiency > 0 and config.hardware.inter_node.nvls_efficiency == 0
