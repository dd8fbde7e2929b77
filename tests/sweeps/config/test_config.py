"""Unit tests of config composition: ``load_run_config`` and ``load_preset``.

Good inputs compose the presets of ``conf/``; every bad input raises ``ConfigError``
whose message names the offending field and the value. Bad inputs that are files live
under ``tests/fixtures/`` and are selected with ``hardware=/abs/path.yaml``.
"""

from __future__ import annotations

import dataclasses
import typing
from pathlib import Path

import pytest
import yaml

from sweeps.config import (
    GROUPS,
    LinkPlacement,
    RunConfig,
    SweepSpec,
    list_presets,
    load_preset,
    load_run_config,
)
from sweeps.errors import ConfigError, UserError
from tasks.model.terms.specs import HardwareProfile, LinkTier, TransformerModel

REPO = Path(__file__).resolve().parents[3]
CONF = REPO / "conf"
FIXTURES = REPO / "tests" / "fixtures"


def _yaml(path: Path) -> dict:
    """Read a YAML file independently of the code under test."""
    with open(path) as handle:
        return yaml.safe_load(handle)


def _raises(overrides) -> ConfigError:
    with pytest.raises(ConfigError) as info:
        load_run_config(overrides)
    return info.value


# -- good inputs --------------------------------------------------------------------------


def test_defaults_compose_mi210x4_table2_without_model_or_calibration():
    defaults = _yaml(CONF / "defaults.yaml")["defaults"]
    assert defaults == {"model": None, "hardware": "mi210x4", "sweep": "table2", "calibration": None}

    config = load_run_config([])
    assert config.calibration is None
    assert isinstance(config, RunConfig)
    assert isinstance(config.hardware, HardwareProfile)
    assert isinstance(config.sweep, SweepSpec)
    assert config.model is None
    assert config.hardware.name == "mi210x4"
    assert config.sweep.name == "table2"
    assert config.hardware == load_preset("hardware", "mi210x4")


def test_table2_grid_sizes():
    sweep = load_run_config().sweep
    assert (len(sweep.h), len(sweep.sl), len(sweep.b), len(sweep.tp)) == (7, 4, 2, 7)
    assert sweep.flop_vs_bw == [1.0, 2.0, 4.0]
    assert sweep.links is LinkPlacement.ideal
    # The grid matches the YAML file, read without the loader.
    raw = _yaml(CONF / "sweep" / "table2.yaml")
    assert (sweep.h, sweep.sl, sweep.b, sweep.tp) == (raw["h"], raw["sl"], raw["b"], raw["tp"])


def test_group_selection_picks_h100_profile():
    raw = _yaml(CONF / "hardware" / "h100.yaml")
    config = load_run_config(["hardware=h100"])
    assert config.hardware.name == "h100"
    assert config.hardware.peak_tflops == pytest.approx(float(raw["peak_tflops"]))
    assert config.hardware.hbm_tbps == pytest.approx(float(raw["hbm_tbps"]))
    assert config.hardware.intra_node.bandwidth_GBps == pytest.approx(float(raw["intra_node"]["bandwidth_GBps"]))
    # Selecting one group leaves the others at their defaults.
    assert config.sweep.name == "table2"
    assert config.model is None


def test_dotted_override_replaces_list():
    config = load_run_config(["sweep.tp=[8,16]"])
    assert config.sweep.tp == [8, 16]
    assert all(type(tp) is int for tp in config.sweep.tp)
    # The rest of the sweep preset is untouched.
    assert len(config.sweep.h) == 7


def test_model_selection_with_tp_override():
    config = load_run_config(["model=gpt3", "sweep.tp=[8,16]"])
    assert isinstance(config.model, TransformerModel)
    assert config.model.name == "gpt3"
    assert config.model.heads == 96 == _yaml(CONF / "model" / "gpt3.yaml")["heads"]
    assert config.sweep.tp == [8, 16]


def test_later_override_wins_and_enum_parses():
    config = load_run_config(["sweep=smoke", "sweep.links=placed", "hardware.memory_efficiency=0.5"])
    assert config.sweep.name == "smoke"
    assert config.sweep.links is LinkPlacement.placed
    assert config.hardware.memory_efficiency == 0.5


def test_list_presets_matches_conf_folders():
    for group in GROUPS:
        expected = sorted(p.stem for p in (CONF / group).glob("*.yaml"))
        assert expected, f"conf/{group} has no presets"
        assert list_presets(group) == expected


@pytest.mark.parametrize(
    "group, name",
    [(group, name) for group in GROUPS for name in list_presets(group)],
)
def test_every_shipped_preset_loads(group, name):
    preset = load_preset(group, name)
    assert isinstance(preset, GROUPS[group])
    assert preset.name == _yaml(CONF / group / f"{name}.yaml")["name"]


@pytest.mark.parametrize("name", list_presets("model"))
def test_every_model_preset_composes_with_its_own_tp(name):
    heads = _yaml(CONF / "model" / f"{name}.yaml")["heads"]
    config = load_run_config([f"model={name}", f"sweep.tp=[{heads}]"])
    assert config.model.heads == heads


def _numeric_fields(schema: type, prefix: str = "") -> list[str]:
    """Dotted names of the int/float fields of a dataclass schema, nested tiers included."""
    hints = typing.get_type_hints(schema)
    names = []
    for f in dataclasses.fields(schema):
        kind = hints[f.name]
        if dataclasses.is_dataclass(kind):
            names += _numeric_fields(kind, f"{prefix}{f.name}.")
        elif kind in (int, float):
            names.append(f"{prefix}{f.name}")
    return names


def test_numeric_field_walk_covers_link_tiers():
    names = _numeric_fields(HardwareProfile)
    tier = [f.name for f in dataclasses.fields(LinkTier)]
    for prefix in ("intra_node", "inter_node"):
        assert {f"{prefix}.{n}" for n in tier} <= set(names)
    assert "peak_tflops" in names and "devices_per_node" in names
    assert "name" not in names and "sources" not in names


@pytest.mark.parametrize("name", list_presets("hardware"))
def test_every_hardware_profile_sources_every_numeric_field(name):
    profile = load_preset("hardware", name)
    missing = [f for f in _numeric_fields(HardwareProfile) if f not in profile.sources]
    assert not missing, f"hardware {name}: no sources entry for {missing}"
    empty = [k for k, v in profile.sources.items() if not str(v).strip()]
    assert not empty, f"hardware {name}: empty sources for {empty}"


def test_load_preset_accepts_yaml_path():
    path = CONF / "hardware" / "h100.yaml"
    assert load_preset("hardware", str(path)) == load_preset("hardware", "h100")


def test_config_error_is_user_error_with_attributes():
    error = _raises(["sweep.b=[0]"])
    assert isinstance(error, UserError)
    assert (error.field, error.value) == ("sweep.b", 0)


# -- bad inputs: one test each, message names the field and the value ---------------------


def test_unknown_key_names_field():
    error = _raises(["sweep.tpp=[4]"])
    assert "sweep.tpp" in str(error)
    assert "unknown key" in str(error)


def test_unknown_key_names_value():
    error = _raises(["sweep.tpp=[4]"])
    assert "[4]" in str(error)


def test_unknown_group():
    message = str(_raises(["hw=h100"]))
    assert "hw='h100'" in message
    assert "known groups" in message


@pytest.mark.parametrize(
    "override, fragments",
    [
        ("sweep.tp=[abc]", ["sweep.tp", "'abc'", "Integer"]),
        ("sweep.dp=abc", ["sweep.dp='abc'", "Integer"]),
    ],
)
def test_wrong_type(override, fragments):
    message = str(_raises([override]))
    for fragment in fragments:
        assert fragment in message


@pytest.mark.parametrize(
    "override, fragment",
    [
        ("sweep.h=[0]", "sweep.h=0: must be positive"),
        ("sweep.sl=[-1024]", "sweep.sl=-1024: must be positive"),
        ("sweep.b=[0]", "sweep.b=0: must be positive"),
    ],
)
def test_non_positive_size(override, fragment):
    assert fragment in str(_raises([override]))


def test_empty_grid_axis():
    message = str(_raises(["sweep.tp=[]"]))
    assert "sweep.tp=[]" in message
    assert "at least one value" in message


def test_tp_not_dividing_model_heads():
    message = str(_raises(["model=gpt3", "sweep.tp=[128]"]))
    assert "sweep.tp=128" in message
    assert "model.heads=96" in message
    assert "gpt3" in message


def test_tp_not_dividing_h_in_grid_mode():
    message = str(_raises(["sweep.tp=[3]"]))
    assert "sweep.tp=3" in message
    assert "sweep.h=1024" in message


@pytest.mark.parametrize("group, choice", [("hardware", "nope"), ("sweep", "nope"), ("model", "nope")])
def test_unknown_preset(group, choice):
    message = str(_raises([f"{group}={choice}"]))
    assert f"{group}='{choice}'" in message
    assert "unknown preset" in message
    # The message lists the presets to choose from.
    assert list_presets(group)[0] in message


def test_override_without_equals():
    message = str(_raises(["hardware"]))
    assert "hardware" in message
    assert "KEY=VALUE" in message


def test_enum_value_out_of_choices():
    message = str(_raises(["sweep.links=sideways"]))
    assert "sweep.links='sideways'" in message
    assert "ideal" in message and "placed" in message


def test_memory_efficiency_above_one():
    message = str(_raises(["hardware.memory_efficiency=1.5"]))
    assert "hardware.memory_efficiency=1.5" in message
    assert "(0, 1]" in message


@pytest.mark.parametrize(
    "override, fragment",
    [
        ("hardware.gemm_ceiling.bf16=1.5", "hardware.gemm_ceiling.bf16=1.5"),
        ("hardware.intra_node.efficiency=1.01", "hardware.intra_node.efficiency=1.01"),
        ("hardware.inter_node.efficiency=-0.5", "hardware.inter_node.efficiency=-0.5"),
    ],
)
def test_efficiency_out_of_range(override, fragment):
    message = str(_raises([override]))
    assert fragment in message
    assert "(0, 1]" in message


def test_model_field_without_model_selected():
    error = _raises(["model.hidden=1"])
    assert error.field == "model"
    assert "model=None" in str(error)
    assert "no model is selected" in str(error)
    # With a model selected, the same kind of override is accepted.
    assert load_run_config(["model=gpt3", "sweep.tp=[8]", "model.hidden=12288"]).model.hidden == 12288


@pytest.mark.parametrize("value, why", [("1", "must be a probability below 1"), ("-0.1", "outside the sane range"),
                                        ("nan", "must be a finite number")])
def test_a_dropout_that_is_no_probability_is_refused(value, why):
    error = _raises(["model=llama3-70b", f"model.dropout={value}"])
    assert error.field == "model.dropout" and why in str(error)
    assert load_run_config(["model=gpt3", "sweep.tp=[8]", "model.dropout=0"]).model.dropout == 0.0


@pytest.mark.parametrize("value, why", [("0", "outside the sane range"), ("-128", "outside the sane range"),
                                        ("10000000", "outside the sane range")])
def test_a_head_width_that_is_no_width_is_refused(value, why):
    error = _raises(["model=qwen3-32b", f"model.head_dim={value}"])
    assert error.field == "model.head_dim" and why in str(error)
    assert load_run_config(["model=qwen3-32b", "sweep.tp=[8]"]).model.head_dim == 128


def test_scalar_for_nested_tier_names_field_and_value():
    message = str(_raises(["hardware.intra_node=3"]))
    assert "hardware.intra_node" in message
    assert "3" in message


# -- bad inputs that are files ------------------------------------------------------------


def test_fixtures_have_exactly_one_defect(tmp_path):
    """Guard the fixtures (snapshots of h100.yaml): each has exactly one defect."""
    fields = {f.name for f in dataclasses.fields(HardwareProfile)}
    missing = _yaml(FIXTURES / "hardware_missing_field.yaml")
    assert fields - set(missing) == {"description", "hbm_tbps"} - set(missing) == {"hbm_tbps"}
    assert set(missing) <= fields
    unknown = _yaml(FIXTURES / "hardware_unknown_key.yaml")
    assert set(unknown) - fields == {"warp_drive_gbps"}
    assert fields - set(unknown) <= {"description"}
    wrong = _yaml(FIXTURES / "hardware_wrong_type.yaml")
    assert set(wrong) <= fields and fields - set(wrong) <= {"description"}
    assert wrong["peak_tflops"] == "fast"
    # With its defect repaired, each fixture is a valid profile.
    repairs = {
        "hardware_missing_field.yaml": lambda text: text + "hbm_tbps: 3.35\n",
        "hardware_unknown_key.yaml": lambda text: "".join(
            line for line in text.splitlines(keepends=True) if not line.startswith("warp_drive_gbps:")),
        "hardware_wrong_type.yaml": lambda text: text.replace("peak_tflops: fast", "peak_tflops: 989.0"),
    }
    for name, repair in repairs.items():
        repaired = tmp_path / name
        repaired.write_text(repair((FIXTURES / name).read_text()))
        assert load_preset("hardware", str(repaired)).name == "h100"


def test_hardware_file_missing_field():
    path = FIXTURES / "hardware_missing_field.yaml"
    error = _raises([f"hardware={path}"])
    assert error.field == "hardware.hbm_tbps"
    assert "hardware.hbm_tbps" in str(error)
    assert "missing field" in str(error)
    assert str(path) in str(error)


def test_hardware_file_unknown_key_names_field():
    path = FIXTURES / "hardware_unknown_key.yaml"
    message = str(_raises([f"hardware={path}"]))
    assert "hardware.warp_drive_gbps" in message
    assert "unknown key" in message
    assert str(path) in message


def test_hardware_file_unknown_key_names_value():
    message = str(_raises([f"hardware={FIXTURES / 'hardware_unknown_key.yaml'}"]))
    assert "12.5" in message


def test_hardware_file_wrong_type():
    path = FIXTURES / "hardware_wrong_type.yaml"
    message = str(_raises([f"hardware={path}"]))
    assert "hardware.peak_tflops='fast'" in message
    assert str(path) in message


def test_hardware_file_that_does_not_exist(tmp_path):
    path = tmp_path / "absent.yaml"
    message = str(_raises([f"hardware={path}"]))
    assert f"hardware='{path}'" in message
    assert "no such YAML file" in message


def test_load_preset_rejects_bad_file_directly():
    with pytest.raises(ConfigError) as info:
        load_preset("hardware", str(FIXTURES / "hardware_wrong_type.yaml"))
    assert info.value.field == "hardware.peak_tflops"
    assert info.value.value == "fast"


def test_a_calibration_preset_composes_and_its_fields_override():
    config = load_run_config(["calibration=cpu", "calibration.steps=3"])
    assert config.calibration.name == "cpu" and config.calibration.steps == 3
    assert config.calibration.baseline.h == 512 and len(config.calibration.held_out) == 8


@pytest.mark.parametrize("override,field", [
    ("calibration.dtype=fp8", "calibration.dtype"),
    ("calibration.baseline.tp=3", "calibration.baseline.tp"),
    ("calibration.vary.h=[100]", "calibration.vary.h"),
    ("calibration.steps=0", "calibration.steps"),
    ("calibration.held_out=[{h: 512, heads: 8, sl: 256, b: 1, tp: 1}]", "calibration.held_out[0]"),
])
def test_bad_calibrations_name_the_field(override, field):
    with pytest.raises(ConfigError) as caught:
        load_run_config(["calibration=cpu", override])
    assert field in str(caught.value)


def test_a_calibration_field_without_a_calibration_is_refused():
    with pytest.raises(ConfigError, match="no calibration is selected"):
        load_run_config(["calibration.steps=3"])


# -- numbers that are not numbers, and numbers out of any sane range -----------------------


@pytest.mark.parametrize("override, field, value", [
    ("sweep.dp_slowdown=nan", "sweep.dp_slowdown", "nan"),
    ("sweep.flop_vs_bw=[nan]", "sweep.flop_vs_bw", "nan"),
    ("sweep.flop_vs_bw=[1,inf]", "sweep.flop_vs_bw", "inf"),
    ("sweep.reference_hbm_gb=nan", "sweep.reference_hbm_gb", "nan"),
    ("sweep.h=[1000000000000]", "sweep.h", "1000000000000"),
    ("sweep.sl=[9223372036854775807]", "sweep.sl", "9223372036854775807"),
    ("sweep.dp=1000000000000000000", "sweep.dp", "1000000000000000000"),
    ("sweep.flop_vs_bw=[1e9]", "sweep.flop_vs_bw", "1000000000.0"),
    ("hardware.peak_tflops=nan", "hardware.peak_tflops", "nan"),
    ("hardware.intra_node.latency_us=nan", "hardware.intra_node.latency_us", "nan"),
    ("hardware.kernel_launch_us=inf", "hardware.kernel_launch_us", "inf"),
])
def test_nan_inf_and_absurd_numbers_are_refused_naming_the_field(override, field, value):
    error = _raises([override])
    assert error.field == field and f"{field}={value}" in str(error)


def test_a_hardware_yaml_with_nan_is_refused(tmp_path):
    raw = _yaml(CONF / "hardware" / "h100.yaml")
    raw["peak_tflops"] = float("nan")
    path = tmp_path / "nan.yaml"
    path.write_text(yaml.safe_dump(raw))
    error = _raises([f"hardware={path}"])
    assert error.field == "hardware.peak_tflops" and "finite" in error.reason


@pytest.mark.parametrize("override, field", [
    ("memory_fraction=nan", "search.memory_fraction"),
    ("devices=1000000000000", "search.devices"),
    ("space.micro_batch=[10000000000]", "search.space.micro_batch"),
])
def test_search_numbers_are_finite_and_sane(override, field):
    from sweeps.config import load_search

    with pytest.raises(ConfigError) as info:
        load_search(["small", override])
    assert info.value.field == field
