"""A study's journal and its rows in the lake, kept as one record of one sequence of trials:
rows ``lake verify`` set aside are recomputed by the next run, a torn last journal line is
dropped (and kept beside), a damaged one is refused in one line and rebuilt from the lake's
rows with ``--repair-journal``, a lost journal is rebuilt from the lake (two studies are never
mixed), a file that is no journal is refused as ``--storage`` before the lake exists, and a
trial budget beyond the space, or beyond a sane bound, needs ``--allow-large``.

Real CLI runs (in this process, the step model, no Ray), real journals, a real lake."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Dict, List

import pytest
from click.testing import CliRunner, Result
from optuna.trial import TrialState

import conf
from sweeps.cli import main
from sweeps.config import load_search
from sweeps.errors import ConfigError
from sweeps.jobs.search import trial_key
from sweeps.lake import Lake
from sweeps.lake.kinds import SEARCH
from sweeps.search import open_study, study_path, suggest_layout

#: 40 layouts; a batch of 4 trials is one data file in the lake.
TINY = ["small", "space.tp=[1,2,4]", "space.pp=[1,2]", "space.micro_batch=[1]", "space.schedule=[1f1b]",
        "space.zero=[none,zero3]", "space.recompute=[none,selective]", "batch=4"]


def _search(lake: Path, *args: str) -> Result:
    return CliRunner().invoke(main, ["search", *TINY, *args, "--lake", str(lake)])


def _ok(result: Result) -> Result:
    assert result.exit_code == 0, (result.output, result.exception)
    return result


def _refused(result: Result) -> str:
    """The one line a refusal prints (no traceback)."""
    assert result.exit_code == 2 and isinstance(result.exception, SystemExit), (result.output, result.exception)
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), result.stderr
    return lines[0]


def _rows(lake: Path) -> List[Dict]:
    """The lake's search rows in trial order, NaN spelled ``"nan"`` so that rows compare equal."""
    table = Lake(str(lake)).dataset(SEARCH).to_table()
    rows = [{k: "nan" if isinstance(v, float) and math.isnan(v) else v for k, v in row.items()}
            for row in table.to_pylist()]
    return sorted(rows, key=lambda row: (row["trial"], row["key"]))


def _journal(lake: Path) -> Path:
    return study_path(Lake(str(lake)), load_search(TINY))


def _assert_one_sequence(lake: Path, trials: int) -> None:
    """The lake holds one row per completed trial of the journal's study, each keyed by its
    trial's number and layout: no row lost, none doubled, no second sequence mixed in."""
    setup = load_search(TINY)
    rows = _rows(lake)
    numbers = [row["trial"] for row in rows]
    assert len(rows) == trials and len(set(numbers)) == trials, numbers
    study = open_study(setup, _journal(lake))
    complete = [t for t in study.trials if t.state == TrialState.COMPLETE]
    assert len(complete) == trials
    assert {row["key"] for row in rows} == {trial_key(setup.study_name, t.number, suggest_layout(t, setup.spec.space))
                                            for t in complete}


def _flip(path: Path, at: float = 0.5, count: int = 16) -> None:
    data = bytearray(path.read_bytes())
    start = int(len(data) * at)
    data[start:start + count] = bytes(b ^ 0xFF for b in data[start:start + count])
    path.write_bytes(bytes(data))


def test_rows_that_verify_set_aside_are_recomputed_by_the_next_run(tmp_path):
    """They were gone for good: the journal counted its trials complete and ran nothing."""
    lake = tmp_path / "lake"
    _ok(_search(lake, "trials=12"))
    before = _rows(lake)
    _flip(Path(Lake(str(lake)).files(SEARCH)[1]))
    report = Lake(str(lake)).verify()
    assert len(report.bad) == 1 and len(_rows(lake)) == 8

    again = _ok(_search(lake, "trials=12"))
    assert "4 rows the lake had lost recomputed" in again.stdout
    assert _rows(lake) == before  # every trial's row again, none doubled, the same values
    _assert_one_sequence(lake, 12)
    assert "rows the lake had lost" not in _ok(_search(lake, "trials=12")).stdout


@pytest.mark.parametrize("tail", [b'{"op_code":5,"worker_id":"4f1c', b'{"op_code":5,"wor\n', b"\x00" * 37],
                         ids=["no-newline", "not-json", "zeros"])
def test_a_torn_last_journal_line_is_dropped_kept_beside_and_the_study_goes_on(tmp_path, tail):
    lake = tmp_path / "lake"
    _ok(_search(lake, "trials=8"))
    path = _journal(lake)
    whole = path.read_bytes()
    path.write_bytes(whole + tail)

    first = _ok(_search(lake, "trials=12"))
    second = _ok(_search(lake, "trials=16"))  # every later extension crashed
    _assert_one_sequence(lake, 16)
    assert f"journal {path}: its last line was torn" in first.stdout and "last line was torn" not in second.stdout
    (kept,) = path.parent.glob(path.name + ".torn-*")
    assert kept.read_bytes() == whole + tail


@pytest.mark.parametrize("damage", [b"garbage", b'{"op_code": 42}', b'{"worker_id": "w"}', b"\xff\xfe{\x01",
                                    b'{"op_code":5,"trial_id":0,"param_name":"pp"}'],
                         ids=["text", "unknown-op", "no-op", "binary", "record-missing-fields"])
def test_a_damaged_journal_line_is_refused_in_one_line_and_rebuilt_from_the_lake(tmp_path, damage):
    lake = tmp_path / "lake"
    _ok(_search(lake, "trials=8"))
    before = _rows(lake)
    path = _journal(lake)
    lines = path.read_bytes().split(b"\n")
    lines[4] = damage
    damaged = b"\n".join(lines)
    path.write_bytes(damaged)

    line = _refused(_search(lake, "trials=8"))
    assert f"journal {path}: line 5 " in line and "--repair-journal" in line
    assert path.read_bytes() == damaged and _rows(lake) == before  # nothing written

    repaired = _ok(_search(lake, "trials=8", "--repair-journal"))
    assert "rebuilt from the lake's 8 rows" in repaired.stdout
    (kept,) = path.parent.glob(path.name + ".damaged-*")
    assert kept.read_bytes() == damaged
    assert _rows(lake) == before
    _assert_one_sequence(lake, 8)
    _ok(_search(lake, "trials=12"))
    _assert_one_sequence(lake, 12)
    assert _rows(lake)[:8] == before


@pytest.mark.parametrize("lose", [Path.unlink, lambda path: path.write_bytes(b"")], ids=["deleted", "emptied"])
def test_a_lost_journal_is_rebuilt_from_the_lake_and_another_seed_mixes_no_second_study(tmp_path, lose):
    """A run with another seed started a fresh study under the same name: 24 rows for 12 trials."""
    lake = tmp_path / "lake"
    _ok(_search(lake, "trials=12", "seed=0"))
    before = _rows(lake)
    lose(_journal(lake))

    again = _ok(_search(lake, "trials=12", "seed=1"))
    assert "rebuilt from the lake's 12 rows" in again.stdout and "0 new, 12 from before" in again.stdout
    assert _rows(lake) == before
    _assert_one_sequence(lake, 12)
    _ok(_search(lake, "trials=16", "seed=1"))
    _assert_one_sequence(lake, 16)
    assert "Warm start: the study's first 4 trials" in _ok(_search(lake, "trials=16")).stdout


def test_a_journal_that_lacks_rows_of_the_lake_is_refused_and_rebuilt_on_request(tmp_path):
    """An older copy of the journal numbers new trials like rows the lake holds already."""
    lake = tmp_path / "lake"
    _ok(_search(lake, "trials=8"))
    path = _journal(lake)
    older = path.read_bytes()
    _ok(_search(lake, "trials=12"))
    path.write_bytes(older)

    line = _refused(_search(lake, "trials=16"))
    assert f"journal {path}" in line and "4 rows" in line and "--repair-journal" in line
    assert len(_rows(lake)) == 12
    _ok(_search(lake, "trials=16", "--repair-journal"))
    _assert_one_sequence(lake, 16)


def test_a_layout_the_space_cannot_hold_is_a_clear_error(tmp_path):
    lake = tmp_path / "lake"
    _ok(_search(lake, "trials=4"))
    path = _journal(lake)
    # trial 0's TP choice (the third of its distribution's choices) becomes one the space lacks
    path.write_bytes(path.read_bytes().replace(b'\\"tp2 sp\\"', b'\\"tp3 sp\\"', 1))
    line = _refused(_search(lake, "trials=8"))
    assert f"journal {path}" in line and "tensor" in line and "tp3 sp" in line and "--repair-journal" in line


@pytest.mark.parametrize("content", [b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR\x00\x00", b"hello\nworld\n",
                                     b'{"event": "start", "pid": 12}\n{"event": "stop"}\n', b"SQLite format 3\x00"],
                         ids=["png", "text", "other-jsonl", "sqlite"])
def test_storage_on_a_file_that_is_no_journal_is_refused_before_the_lake_exists(tmp_path, content):
    lake, storage = tmp_path / "lake", tmp_path / "study.file"
    storage.write_bytes(content)
    line = _refused(_search(lake, "trials=4", "--storage", str(storage)))
    assert f"--storage {storage}" in line and "not an Optuna journal" in line
    assert not lake.exists() and storage.read_bytes() == content


def test_storage_on_an_empty_file_starts_the_study_there(tmp_path):
    lake, storage = tmp_path / "lake", tmp_path / "study.journal"
    storage.write_bytes(b"")
    _ok(_search(lake, "trials=4", "--storage", str(storage)))
    assert len(storage.read_bytes().splitlines()) > 4


def test_more_trials_than_the_space_has_layouts_needs_allow_large(tmp_path):
    lake = tmp_path / "lake"
    line = _refused(_search(lake, "trials=41"))
    assert "search.trials=41" in line and "40 layouts" in line and "--allow-large" in line
    assert not lake.exists()
    _ok(_search(lake, "trials=41", "--allow-large"))
    assert len(_rows(lake)) == 41


def test_a_trial_budget_beyond_the_sane_bound_needs_allow_large_even_in_a_larger_space(tmp_path):
    """``trials=10000000`` was accepted: about 46 hours."""
    from sweeps.config.search import TRIALS_BOUND, check_budget

    micro_batch = "space.micro_batch=[" + ",".join(str(b) for b in range(1, 501)) + "]"
    setup = load_search(["default", micro_batch, f"trials={TRIALS_BOUND + 1}"])
    assert setup.spec.space.size > TRIALS_BOUND + 1
    with pytest.raises(ConfigError, match=f"search.trials={TRIALS_BOUND + 1}: .*{TRIALS_BOUND:,}.*--allow-large"):
        check_budget(setup.spec, allow_large=False)
    check_budget(setup.spec, allow_large=True)
    check_budget(load_search(["default", micro_batch, f"trials={TRIALS_BOUND}"]).spec, allow_large=False)
    lake = tmp_path / "lake"
    result = CliRunner().invoke(main, ["search", "default", "trials=10000000", "--lake", str(lake)])
    line = _refused(result)
    assert "search.trials=10000000" in line and "8,100 layouts" in line and not lake.exists()


def test_allow_large_reads_a_search_preset_file_beyond_the_yaml_bound(tmp_path):
    preset = tmp_path / "big.yaml"
    text = (Path(conf.__file__).parent / "search" / "small.yaml").read_text()
    preset.write_text(text + "#" + "x" * (1 << 20) + "\n")
    result = CliRunner().invoke(main, ["search", str(preset), "--exhaustive", "--lake", str(tmp_path / "lake")])
    assert "--allow-large" in _refused(result)
    allowed = CliRunner().invoke(main, ["search", str(preset), "--exhaustive", "--allow-large", "--lake",
                                        str(tmp_path / "lake")])
    assert allowed.exit_code == 0, allowed.output


@pytest.mark.parametrize("mode", ["--exhaustive", "--scaling"])
@pytest.mark.parametrize("flag", ["--repair-journal"])
def test_the_journal_and_budget_flags_are_refused_where_no_study_is_kept(tmp_path, mode, flag):
    preset = "scaling" if mode == "--scaling" else "small"
    result = CliRunner().invoke(main, ["search", preset, mode, flag, "--lake", str(tmp_path / "lake")])
    assert f"{flag}: {mode} keeps no study" in _refused(result)
    assert not (tmp_path / "lake").exists()
