"""A user's own model and cluster: a model file needs its shape only, a cluster file names a
shipped profile as its base and sets what differs, and a file that lacks fields is refused
naming every one of them at once. The templates under docs/templates load as they are."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from sweeps.cli import main
from sweeps.config import load_preset
from sweeps.errors import ConfigError

ROOT = Path(__file__).resolve().parents[3]
TEMPLATES = ROOT / "docs" / "templates"


def test_a_model_file_of_its_shape_alone_is_a_model(tmp_path):
    path = tmp_path / "private_gpt.yaml"
    path.write_text("layers: 96\nhidden: 12288\nheads: 96\nvocab: 50257\n")  # GPT-3 175B's shape
    model = load_preset("model", str(path))
    assert model.name == "private_gpt" and model.ffn_hidden == 4 * 12288 and model.seq_len == 2048
    assert model.year is None and model.source == ""
    assert model.params_b == pytest.approx(175.0, rel=0.01)  # Brown et al. 2020, Table 2.1: 175.0B


def test_a_model_file_lacking_fields_names_every_one_at_once(tmp_path):
    path = tmp_path / "m.yaml"
    path.write_text("hidden: 4096\nvocab: 32000\n")
    with pytest.raises(ConfigError, match=r"lacks 2 fields: model\.heads, model\.layers"):
        load_preset("model", str(path))


def test_a_hardware_file_lacking_fields_names_every_one_at_once(tmp_path):
    path = tmp_path / "hw.yaml"
    path.write_text("name: mine\naccelerator: X\n")
    with pytest.raises(ConfigError) as info:
        load_preset("hardware", str(path))
    assert "lacks 12 fields" in str(info.value) and "hardware.peak_tflops" in str(info.value)
    assert "hardware.inter_node.bandwidth_GBps" in str(info.value)


def test_a_cluster_file_on_a_base_holds_what_differs_and_sources_it(tmp_path):
    path = tmp_path / "our_cluster.yaml"
    path.write_text("base: a100-80gb\ndevices_per_node: 4\ninter_node:\n  bandwidth_GBps: 12.5\n")
    mine, base = load_preset("hardware", str(path)), load_preset("hardware", "a100-80gb")
    assert (mine.name, mine.devices_per_node, mine.inter_node.bandwidth_GBps) == ("our_cluster", 4, 12.5)
    assert (mine.peak_tflops, mine.inter_node.latency_us) == (base.peak_tflops, base.inter_node.latency_us)
    assert str(path) in mine.sources["inter_node.bandwidth_GBps"] and str(path) in mine.sources["devices_per_node"]
    assert mine.sources["peak_tflops"] == base.sources["peak_tflops"]


@pytest.mark.parametrize("text, fragment", [
    ("base: nosuch\n", "unknown preset"),
    ("base: ./other.yaml\n", "names a preset of conf/hardware"),
])
def test_a_base_must_be_a_shipped_preset(tmp_path, text, fragment):
    path = tmp_path / "c.yaml"
    path.write_text(text)
    with pytest.raises(ConfigError, match=fragment):
        load_preset("hardware", str(path))


def test_the_templates_give_a_search_answer_in_one_command(tmp_path):
    result = CliRunner().invoke(main, ["search", "small", f"model={TEMPLATES / 'model.yaml'}",
                                       f"hardware={TEMPLATES / 'cluster.yaml'}", "--exhaustive",
                                       "--lake", str(tmp_path / "lake")])
    assert result.exit_code == 0, result.output
    assert "my-model on 16 x my-cluster" in result.output
