"""A study says what decided it: its name comes from the model, hardware, device count and
stack (unless the user names it); its header, its rows, its Optuna user attributes,
``status`` and the report's search section hold the stack, the fingerprints and the
overrides; ``config`` composes searches and stacks, ``presets`` lists stacks; each search
preset costs the stack of its model's era."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pytest
import yaml
from click.testing import CliRunner

from analysis.report_search import study_records
from analysis.status import search_records, search_status
from sweeps.cli import main
from sweeps.config import list_presets, load_search
from sweeps.errors import LakeError
from sweeps.lake import Lake
from sweeps.lake.kinds import SEARCH
from sweeps.lake.views import query
from sweeps.search import open_study, run_search, study_path
from sweeps.search.results import study_rows
from tasks.model.search.rows import RECORD_FIELDS, SEARCH_SCHEMA_VERSION

TINY = ["small", "space.tp=[1,2,4]", "space.pp=[1,2]", "space.micro_batch=[1]", "space.schedule=[1f1b]",
        "space.zero=[none,zero3]", "space.recompute=[none,selective]", "trials=8", "batch=4"]


def test_a_study_is_named_from_model_hardware_devices_and_stack_unless_the_user_names_it(tmp_path):
    assert load_search(["default"]).study_name.startswith("llama3-70b-h100x256-megatron-core-2024-")
    assert load_search(["small", "devices=32"]).study_name.startswith("megatron-8.3b-a100-80gbx32-megatron-2022-")
    assert load_search(["small", "name=mine"]).study_name.startswith("mine-")
    model = tmp_path / "my model.yaml"
    model.write_text(yaml.safe_dump({"name": "private-13b", "year": 2025, "source": "mine", "layers": 40,
                                     "hidden": 5120, "heads": 40, "ffn_hidden": 13824, "params_b": 13,
                                     "seq_len": 4096, "architecture": "decoder", "vocab": 32000}))
    mine = load_search(["small", f"model={model}"])
    assert mine.study_name.startswith("private-13b-a100-80gbx16-megatron-2022-")
    assert mine.record()["overrides"] == f"'model={model}'"  # a path is recorded as given, shell-quoted
    own = tmp_path / "search.yaml"
    own.write_text("name: own-study\nmodel: gpt2\nhardware: h100\ndevices: 8\nglobal_batch: 64\n")
    assert load_search([str(own)]).study_name.startswith("own-study-")  # a search file of one's own names it


def test_each_preset_costs_the_stack_of_its_models_era():
    for preset in list_presets("search"):
        setup = load_search([preset])
        era = "megatron-core-2025-moe" if setup.model.experts else \
            "megatron-core-2024" if setup.model.year >= 2023 else "megatron-2022"
        assert setup.spec.stack == era, preset
    assert load_search(["default"]).stack.tp_overlap and load_search(["default"]).stack.attention == "flash"


def test_rows_status_report_and_the_journal_record_the_stack_fingerprints_and_overrides(tmp_path):
    lake = Lake(str(tmp_path / "lake"))
    plain = load_search(TINY)
    changed = load_search([*TINY, "model.layers=40", "hardware.devices_per_node=4", "stack=megatron-core-2024",
                           "stack.tp_overlap=false"])
    for setup in (plain, changed):
        run_search(setup, lake)
    rows = query(lake, f"SELECT * FROM {SEARCH}").to_pandas()
    by_study = rows.groupby("study")
    assert set(by_study.groups) == {plain.study_name, changed.study_name}
    for setup in (plain, changed):
        mine = rows[rows["study"] == setup.study_name]
        for name, value in setup.record().items():
            assert set(mine[name]) == {value}, name
    record = changed.record()
    assert record["overrides"].startswith("'space.tp=[1,2,4]' 'space.pp=[1,2]' ")  # shell words, as given
    assert record["overrides"].endswith(" model.layers=40 hardware.devices_per_node=4 stack=megatron-core-2024 "
                                        "stack.tp_overlap=false")
    assert record["stack"] == "megatron-core-2024" and record["objective_name"] == "step_time"
    assert all(record[f] != plain.record()[f] for f in ("stack_fp", "model_fp", "hardware_fp"))
    # two studies whose step times differ are told apart by these columns alone
    distinct = rows.drop_duplicates(subset=list(RECORD_FIELDS))
    assert len(distinct) == 2

    study = open_study(changed, study_path(lake, changed))
    attrs = study.user_attrs
    assert {k: attrs[k] for k in record} == record
    assert (attrs["model"], attrs["hardware"], attrs["devices"]) == ("megatron-8.3b", "a100-80gb", 16)

    assert search_status(lake).set_index("study").loc[changed.study_name, "stack"] == "megatron-core-2024"
    status = search_records(lake).set_index("study")
    assert status.loc[changed.study_name, "stack"] == "megatron-core-2024"
    assert status.loc[changed.study_name, "overrides"] == record["overrides"]
    assert status.loc[plain.study_name, "overrides"] == plain.record()["overrides"]
    assert status.loc[changed.study_name, "fingerprints"] == "/".join(
        record[f][:8] for f in ("model_fp", "hardware_fp", "stack_fp"))
    shown = study_records(rows).set_index("study")
    assert shown.loc[changed.study_name, "stack"] == "megatron-core-2024"
    assert shown.loc[changed.study_name, "overrides"] == record["overrides"]


def test_rows_of_the_former_search_schema_are_refused_as_the_lake_refuses_them(tmp_path):
    lake = Lake(str(tmp_path / "lake"))
    setup = load_search(TINY)
    run_search(setup, lake)
    old = study_rows(lake, setup.study_name).drop(columns=list(RECORD_FIELDS) + ["sweep", "hardware", "kind"],
                                                   errors="ignore")
    old["key"] = "older-" + old["key"]  # rows of another study, written by the former commscale
    lake.commit(SEARCH, {"sweep": "older", "hardware": "a100-80gb"}, pa.Table.from_pandas(old, preserve_index=False),
                schema_version=SEARCH_SCHEMA_VERSION - 1)
    with pytest.raises(LakeError, match="schema version"):
        search_status(lake)


def test_the_header_names_the_stack_and_what_decided_the_study(tmp_path):
    result = CliRunner().invoke(main, ["search", *TINY, "model.layers=40", "--lake", str(tmp_path / "lake")])
    assert result.exit_code == 0, result.output
    setup = load_search([*TINY, "model.layers=40"])
    head = result.stdout.splitlines()[:2]
    assert head[0].startswith(f"search {setup.study_name}:") and "stack megatron-2022" in head[0]
    assert f"model megatron-8.3b (fingerprint {setup.record()['model_fp']})" in head[1]
    assert "'space.zero=[none,zero3]'" in head[1] and head[1].endswith(" model.layers=40")
    assert "preset small" in head[1]
    shown = CliRunner().invoke(main, ["status", "--lake", str(tmp_path / "lake")])
    assert "megatron-2022" in shown.output and "model.layers=40" in shown.output


def test_config_composes_searches_and_stacks_and_presets_lists_stacks():
    search = CliRunner().invoke(main, ["config", "search", "default", "model.layers=40"])
    assert search.exit_code == 0, search.output
    composed = yaml.safe_load(search.output)
    assert composed["model"]["layers"] == 40 and composed["stack"]["attention"] == "flash"
    assert composed["study"] == load_search(["default", "model.layers=40"]).study_name
    assert composed["record"]["overrides"] == "model.layers=40"
    stack = CliRunner().invoke(main, ["config", "stack", "megatron-core-2024", "tp_overlap=false"])
    assert stack.exit_code == 0 and yaml.safe_load(stack.output)["tp_overlap"] is False
    bad = CliRunner().invoke(main, ["config", "stack", "megatron-core-2024", "tp_overlap=maybe"])
    assert bad.exit_code == 2 and "stack.tp_overlap" in bad.output
    presets = CliRunner().invoke(main, ["presets"])
    shipped = sorted(path.stem for path in (Path(__file__).resolve().parents[3] / "conf" / "stack").glob("*.yaml"))
    assert {"megatron-2022", "megatron-core-2024", "megatron-core-2024-fp8", "deepspeed-zero3-2021"} <= set(shipped)
    assert f"stack: {', '.join(shipped)}" in presets.output
