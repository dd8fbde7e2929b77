"""The ``commscale`` CLI end to end, as a subprocess: bad input fails cleanly.

Every bad input (config, lake path, SQL) ends with exit status 2 and one message on
stderr naming the field and value or the statement, no traceback, and the lake (and
everything else under the test's tmp_path) byte-for-byte unchanged. Bad input fails
before any work, so none of these runs starts Ray.
"""

from __future__ import annotations

import csv
import hashlib
import importlib.metadata
import io
import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pyarrow as pa
import pytest

from sweeps.lake import Lake

FIXTURES = Path(__file__).resolve().parent / "fixtures"
# A bad input fails before any work; a run this slow would mean Ray was started.
FAST_S = 60


def commscale(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k not in ("COMMSCALE_LAKE", "RAY_ADDRESS")}
    return subprocess.run(
        [sys.executable, "-m", "sweeps.cli", *args],
        cwd=cwd, env=env, capture_output=True, text=True, timeout=FAST_S,
    )


def snapshot(root: Path) -> list[tuple]:
    """Sorted (relative path, size, sha256) of every entry under root; dirs have no size."""
    entries = []
    for path in sorted(root.rglob("*")):
        rel = path.relative_to(root).as_posix()
        if path.is_dir():
            entries.append((rel, None, None))
        else:
            data = path.read_bytes()
            entries.append((rel, len(data), hashlib.sha256(data).hexdigest()))
    return entries


@pytest.fixture
def lake(tmp_path: Path) -> Path:
    """A lake holding one committed file of a toy kind."""
    root = tmp_path / "lake"
    Lake(str(root)).commit("toy", {"sweep": "s", "hardware": "h"}, pa.table({"key": ["a"]}))
    return root


def assert_clean_failure(result: subprocess.CompletedProcess, fragments: list[str]) -> None:
    assert result.returncode == 2, (result.returncode, result.stdout, result.stderr)
    assert "Traceback" not in result.stderr, result.stderr
    assert result.stderr.startswith("error: "), result.stderr
    for fragment in fragments:
        assert fragment in result.stderr, (fragment, result.stderr)


BAD_CONFIG = [
    pytest.param(["sweep.tpp=[4]"], ["sweep.tpp", "[4]"], id="unknown-key"),
    pytest.param(["hw=h100"], ["hw='h100'", "known groups"], id="unknown-group"),
    pytest.param(["sweep.dp=abc"], ["sweep.dp='abc'"], id="wrong-type"),
    pytest.param(["sweep.sl=[-1024]"], ["sweep.sl=-1024", "must be positive"], id="non-positive"),
    pytest.param(["model=gpt3", "sweep.tp=[128]"], ["sweep.tp=128", "model.heads=96"], id="tp-vs-heads"),
    pytest.param(["hardware=nope"], ["hardware='nope'", "unknown preset"], id="unknown-preset"),
    pytest.param(["sweep.highlights=[nosuch]"], ["sweep.highlights='nosuch'", "unknown preset"],
                 id="unknown-highlight-names-its-field"),
    pytest.param(["sweep.links=sideways"], ["sweep.links='sideways'"], id="enum"),
    # A repeated value plans one point twice under one key: the sweep could never be done.
    pytest.param(["sweep.tp=[4,4]"], ["sweep.tp=[4, 4]", "lists 4 twice"], id="repeated-value"),
    # ROI: no GEMM pass divides by zero after the collectives were committed; an overlap TP
    # that does not divide H measures truncated shapes; fewer repeats than the minimum.
    pytest.param(["sweep=roi-smoke", "sweep.roi.passes=[]"], ["sweep.roi.passes=[]", "at least one"], id="roi-no-pass"),
    pytest.param(["sweep=roi-smoke", "sweep.overlap_tp=3"], ["sweep.overlap_tp=3", "does not divide H=256"],
                 id="roi-overlap-tp"),
    pytest.param(["sweep=roi-smoke", "sweep.roi.min_repeats=50", "sweep.roi.max_repeats=5"],
                 ["sweep.roi.max_repeats=5", "min_repeats=50"], id="roi-repeats"),
    pytest.param([f"hardware={FIXTURES / 'hardware_wrong_type.yaml'}"], ["hardware.peak_tflops='fast'"],
                 id="fixture-wrong-type"),
]


@pytest.mark.parametrize("overrides, fragments", BAD_CONFIG)
def test_run_rejects_bad_config(tmp_path, lake, overrides, fragments):
    before = snapshot(tmp_path)
    result = commscale("run", *overrides, "--lake", str(lake), cwd=tmp_path)
    assert_clean_failure(result, fragments)
    assert result.stdout == ""
    assert snapshot(tmp_path) == before


@pytest.mark.parametrize("command", [
    pytest.param(["run", "sweep=smoke"], id="run"),
    pytest.param(["query", "SELECT count(*) FROM toy"], id="query"),
])
def test_lake_path_is_a_regular_file(tmp_path, lake, command):
    not_a_dir = tmp_path / "lake-file"
    not_a_dir.write_bytes(b"not a lake\n")
    before = snapshot(tmp_path)
    result = commscale(*command, "--lake", str(not_a_dir), cwd=tmp_path)
    assert_clean_failure(result, [str(not_a_dir.name), "lake path"])
    assert snapshot(tmp_path) == before


@pytest.mark.skipif(os.geteuid() == 0, reason="runs as root: directory permissions are not enforced for root, "
                                              "so a 0o500 parent does not make the lake unwritable")
def test_lake_under_read_only_directory(tmp_path, lake):
    parent = tmp_path / "read-only"
    parent.mkdir()
    parent.chmod(0o500)
    try:
        before = snapshot(tmp_path)
        result = commscale("run", "sweep=smoke", "--lake", str(parent / "lake"), cwd=tmp_path)
        assert_clean_failure(result, ["lake path", "not writable"])
        assert snapshot(tmp_path) == before
    finally:
        parent.chmod(0o700)


@pytest.mark.parametrize("statement, fragments", [
    pytest.param("SELEC nonsense", ["SELEC nonsense", "query failed"], id="syntax"),
    pytest.param("SELECT * FROM no_such_table", ["SELECT * FROM no_such_table", "no_such_table", "query failed"],
                 id="missing-table"),
])
def test_query_rejects_bad_sql(tmp_path, lake, statement, fragments):
    before = snapshot(tmp_path)
    result = commscale("query", statement, "--lake", str(lake), cwd=tmp_path)
    assert_clean_failure(result, fragments)
    assert result.stdout == ""
    assert snapshot(tmp_path) == before



@pytest.mark.parametrize("command", [
    pytest.param(["query", "SELECT count(*) AS n FROM toy", "--format", "csv", "-o"], id="query-output"),
    pytest.param(["lake", "verify", "--keys-out"], id="verify-keys-out"),
])
def test_an_output_file_in_a_missing_folder_is_refused_before_the_lake_is_read(tmp_path, lake, command):
    """Written last, such a file would fail after the work: lake verify would have moved a
    damaged file aside and lost the list of keys to measure again."""
    before = snapshot(tmp_path)
    out = tmp_path / "no_such_folder" / "out.txt"
    result = commscale(*command, str(out), "--lake", str(lake), cwd=tmp_path)
    assert_clean_failure(result, ["out.txt", "no_such_folder", "does not exist"])
    assert result.stdout == "" and snapshot(tmp_path) == before

def test_query_csv_and_json(tmp_path, lake):
    before = snapshot(tmp_path)
    statement = "SELECT count(*) AS n FROM toy"

    as_csv = commscale("query", statement, "--lake", str(lake), "--format", "csv", cwd=tmp_path)
    assert as_csv.returncode == 0, as_csv.stderr
    assert list(csv.DictReader(io.StringIO(as_csv.stdout))) == [{"n": "1"}]

    as_json = commscale("query", statement, "--lake", str(lake), "--format", "json", cwd=tmp_path)
    assert as_json.returncode == 0, as_json.stderr
    assert json.loads(as_json.stdout) == [{"n": 1}]

    # Reading the lake leaves it as it was.
    assert snapshot(tmp_path) == before


LONG_NAME = "a" * 300

# Bad inputs that once ended in a traceback, or after the lake was created (or even after
# Ray ran): each must now end in one line naming the field (or file) and the value.
BEFORE_ANY_WRITE = [
    pytest.param([f"hardware={FIXTURES / 'hardware_yaml_syntax.yaml'}"],
                 ["hardware=", "hardware_yaml_syntax.yaml", "is not valid YAML: line 10, column 9"], id="yaml-syntax"),
    pytest.param([f"hardware={FIXTURES / 'hardware_latin1.yaml'}"],
                 ["hardware=", "hardware_latin1.yaml", "not UTF-8", "0xb5"], id="yaml-not-utf8"),
    pytest.param([f"hardware={FIXTURES / 'hardware_top_list.yaml'}"],
                 ["hardware=", "hardware_top_list.yaml", "top level is a list"], id="yaml-top-level-list"),
    pytest.param(["sweep.tp=[4,"], ["sweep.tp='[4,'", "not a valid value"], id="override-unclosed-list"),
    pytest.param(["sweep=smoke", f"sweep.name={LONG_NAME}"], ["sweep.name='aaaa", "300 characters", "at most 64"],
                 id="name-too-long"),
    pytest.param(["sweep=smoke", "sweep.name=a..b"], ["sweep.name='a..b'", "'..'"], id="name-dot-dot"),
]


def assert_one_line_and_no_lake(result: subprocess.CompletedProcess, lake: Path, fragments: list[str]) -> None:
    assert_clean_failure(result, fragments)
    assert result.stderr.count("\n") == 1, result.stderr
    assert result.stdout == ""
    assert not lake.exists(), sorted(p.name for p in lake.rglob("*"))


@pytest.mark.parametrize("overrides, fragments", BEFORE_ANY_WRITE)
def test_bad_input_ends_in_one_line_before_the_lake_exists(tmp_path, overrides, fragments):
    lake = tmp_path / "lake"
    result = commscale("run", *overrides, "--lake", str(lake), cwd=tmp_path)
    assert_one_line_and_no_lake(result, lake, fragments)



def test_a_search_space_naming_a_value_twice_ends_in_one_line_before_the_lake_exists(tmp_path):
    """It costed every layout of that value twice and explained the win of a layout over itself."""
    lake = tmp_path / "lake"
    result = commscale("search", "small", "space.tp=[1,1,2]", "--exhaustive", "--lake", str(lake), cwd=tmp_path)
    assert_one_line_and_no_lake(result, lake, ["search.space.tp=[1, 1, 2]", "lists 1 twice"])


@pytest.mark.parametrize("args, fragments", [
    pytest.param(["small", "--restart"], ["--restart: only the scaling view"], id="restart-without-scaling"),
    pytest.param(["small", "--measure-device", "gpu"], ["--measure-device: only with --measure"],
                 id="measure-option-without-measure"),
    pytest.param(["small", "--exhaustive", "--ray"], ["--ray: --exhaustive enumerates in this process"],
                 id="ray-with-exhaustive"),
    pytest.param(["scaling", "--scaling", "--no-warm-start"], ["--no-warm-start: --scaling keeps no study"],
                 id="warm-start-with-scaling"),
    pytest.param(["scaling", "--scaling", "devices=512"], ["search.devices='512'", "not read by --scaling"],
                 id="field-scaling-ignores"),
    pytest.param(["small", "pareto"], ["search='pareto'", "second preset"], id="two-presets"),
    pytest.param(["small", "--storage", "."], ["--storage .", "is a folder"], id="storage-folder"),
])
def test_a_search_option_the_mode_ignores_ends_in_one_line_before_the_lake_exists(tmp_path, args, fragments):
    """Each was accepted and had no effect, or (--storage) failed after the lake was created."""
    lake = tmp_path / "lake"
    result = commscale("search", *args, "--lake", str(lake), cwd=tmp_path)
    assert_one_line_and_no_lake(result, lake, fragments)


@pytest.mark.parametrize("args, fragments", [
    pytest.param(["run", "sweep=smoke", "calibration=cpu", "calibration.steps=99"],
                 ["calibration.steps='99'", "configures `commscale calibrate`"], id="run-calibration-field"),
    pytest.param(["calibrate", "calibration=cpu", "hardware=h100"], ["hardware='h100'", "is not read by"],
                 id="calibrate-hardware"),
    pytest.param(["calibrate", "calibration=cpu", "sweep.tp=[3]"], ["sweep.tp='[3]'", "is not read by"],
                 id="calibrate-sweep-field"),
    # Each CPU measurement asks for calibration.threads CPUs: on a smaller Ray it would wait out its cap.
    pytest.param(["calibrate", "calibration=cpu", "calibration.threads=2", "--num-cpus", "1"],
                 ["--num-cpus=1", "fewer than the 2 CPUs"], id="calibrate-too-few-cpus"),
])
def test_a_group_the_command_does_not_read_ends_in_one_line_before_the_lake_exists(tmp_path, args, fragments):
    """run calibration=NAME projects with the stored fit; calibrate measures its preset only."""
    lake = tmp_path / "lake"
    result = commscale(*args, "--lake", str(lake), cwd=tmp_path)
    assert_one_line_and_no_lake(result, lake, fragments)

def test_an_address_where_nothing_listens_is_refused_at_once(tmp_path):
    lake = tmp_path / "lake"
    result = commscale("run", "sweep=smoke", "--address", "127.0.0.1:1", "--lake", str(lake), cwd=tmp_path)
    assert_one_line_and_no_lake(result, lake, ["'127.0.0.1:1'", "nothing answers there"])


@pytest.mark.slow
def test_an_address_that_accepts_but_is_no_ray_cluster_is_refused_within_30_s(tmp_path):
    # A real listening socket that never answers: Ray alone would retry it for many minutes.
    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen(8)
        address = f"127.0.0.1:{silent.getsockname()[1]}"
        lake = tmp_path / "lake"
        started = time.monotonic()
        result = commscale("run", "sweep=smoke", "--address", address, "--lake", str(lake), cwd=tmp_path)
        assert time.monotonic() - started < 30
    assert_one_line_and_no_lake(result, lake, [repr(address), "no Ray cluster answered"])


@pytest.mark.parametrize("command", [["run", "sweep=smoke"], ["probe", "--points", "1"], ["submit", "sweep=smoke"],
                                     ["search", "small", "--ray"]])
def test_address_names_a_ray_cluster_in_every_command_not_a_web_url(tmp_path, command):
    """`run --address http://...` reached ray.init and ended in a traceback; `submit
    --address` took the dashboard's URL. --address is HOST:PORT of a cluster's GCS in
    every command; the Jobs API's URL is `submit --dashboard`."""
    with socket.socket() as listening:  # something answers there: the refusal is for the URL, not the port
        listening.bind(("127.0.0.1", 0))
        listening.listen(8)
        url = f"http://127.0.0.1:{listening.getsockname()[1]}"
        lake = tmp_path / "lake"
        result = commscale(*command, "--address", url, "--lake", str(lake), cwd=tmp_path)
    assert_one_line_and_no_lake(result, lake, [f"--address {url!r}", "web URL", "HOST:PORT", "--dashboard"])


@pytest.mark.parametrize("args, fragments", [
    pytest.param(["--dashboard", "127.0.0.1:6379"], ["--dashboard='127.0.0.1:6379'", "not a web URL", "--address"],
                 id="dashboard-not-a-url"),
])
def test_submit_dashboard_is_the_jobs_api_url(tmp_path, args, fragments):
    lake = tmp_path / "lake"
    result = commscale("submit", "sweep=smoke", *args, "--lake", str(lake), cwd=tmp_path)
    assert_one_line_and_no_lake(result, lake, fragments)


def test_version(tmp_path):
    result = commscale("--version", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert result.stdout == f"commscale {importlib.metadata.version('commscale')}\n"


def test_a_bad_probe_name_ends_in_one_line_before_the_lake_exists(tmp_path):
    lake = tmp_path / "lake"
    result = commscale("probe", "--name", "a..b", "--points", "2", "--lake", str(lake), cwd=tmp_path)
    assert_one_line_and_no_lake(result, lake, ["--name='a..b'", "'..'"])


@pytest.mark.parametrize("args, fragments", [
    pytest.param(["--fail", "die_once:3", "--fail", "die_once:1"], ["fail='die_once:1'", "repeats die_once"],
                 id="repeated-fail-mode"),
    pytest.param(["--resource", "standin_gpu=-1"], ["resource='standin_gpu=-1'", "must not be negative"],
                 id="negative-resource"),
    pytest.param(["--resource", "CPU=1"], ["resource='CPU=1'", "Ray's own resources"], id="ray-resource"),
])
def test_a_bad_probe_pair_ends_in_one_line_before_the_lake_exists(tmp_path, args, fragments):
    """A repeated name kept only its last value; Ray refused the others after the lake was made."""
    lake = tmp_path / "lake"
    result = commscale("probe", "--points", "2", *args, "--lake", str(lake), cwd=tmp_path)
    assert_one_line_and_no_lake(result, lake, fragments)


# Each of these ended in a traceback (or, the sweep, planned 10^9 points, 6 GB in 15 s),
# in a real process as a user runs it; the in-process corpus is tests/test_bad_inputs.py.
@pytest.mark.parametrize("args, files, fragments", [
    pytest.param(["run", "model=" + "A" * 5000], {}, ["model='AAAA", "(5,002 characters)", "unknown preset"],
                 id="5000-character-preset-name"),
    pytest.param(["run", "hardware=deep.yaml"], {"deep.yaml": "[" * 10000 + "]" * 10000},
                 ["hardware='deep.yaml'", "nests more than 32 levels deep"], id="yaml-nested-10000-deep"),
    pytest.param(["validate", "--runs", "runs.csv"],
                 {"runs.csv": "source,model,layers,hidden,heads,seq,global_batch,hw,metric,value\n"
                              + "x" * 131073 + ",m,1,64,1,1,1,h100,mfu,1\n"},
                 ["runs.csv row 1", "field larger than field limit (131072)"], id="runs-cell-over-csv-field-limit"),
    pytest.param(["run", "sweep.h=[" + ",".join(str(128 * i) for i in range(1, 1001)) + "]",
                  "sweep.sl=[" + ",".join(map(str, range(1, 1001))) + "]",
                  "sweep.b=[" + ",".join(map(str, range(1, 1001))) + "]", "sweep.tp=[1]", "sweep.flop_vs_bw=[1]"],
                 {}, ["sweep table2: 1,000,000,006 points exceed the bound of 100,000,000 points", "--allow-large"],
                 id="sweep-of-a-billion-points"),
])
def test_the_probes_tracebacks_and_runaway_end_in_one_line_before_the_lake_exists(tmp_path, args, files, fragments):
    for name, text in files.items():
        (tmp_path / name).write_text(text)
    lake = tmp_path / "lake"
    result = commscale(*args, "--lake", str(lake), cwd=tmp_path)
    assert_one_line_and_no_lake(result, lake, fragments)
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(files)  # no report either


@pytest.mark.parametrize("args, fragments", [
    pytest.param(["run", "sweep=smoke", "--lake", ""], ["--lake ''", "names no folder"], id="empty-lake"),
    pytest.param(["probe", "--points", "1", "--lake", ""], ["--lake ''", "names no folder"], id="empty-lake-probe"),
    pytest.param(["run", "sweep=smoke", "--address", ""], ["--address ''", "names no cluster"], id="empty-address"),
])
def test_an_empty_lake_or_address_is_refused_not_read_as_the_current_folder_or_none(tmp_path, args, fragments):
    """An empty --lake made the current folder the lake (and Ray started); an empty
    --address started an embedded Ray as if none was given."""
    result = commscale(*args, cwd=tmp_path)
    assert_clean_failure(result, fragments)
    assert result.stderr.count("\n") == 1 and list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("args, fragments", [
    pytest.param(["search", "small", "--lake", "x" * 300], ["--lake 'xxx", "300 bytes", "at most 255"],
                 id="lake-name-too-long-search"),
    pytest.param(["lake", "vacuum", "--grace-s", "nan", "--lake", "lake"], ["--grace-s=nan", "finite"],
                 id="vacuum-grace-nan"),
    pytest.param(["run", "--no-such-option"], ["--no-such-option"], id="unknown-option"),
    pytest.param(["query"], ["Missing argument 'STATEMENT'", "commscale query -h"], id="missing-argument"),
    pytest.param(["lake", "vacuum", "--grace-s", "soon"], ["'soon' is not a valid float", "commscale lake vacuum -h"],
                 id="option-of-the-wrong-type"),
])
def test_inputs_that_ended_in_a_traceback_or_a_usage_block_end_in_one_line(tmp_path, args, fragments):
    """A 300-byte name in --lake raised OSError in search; a NaN grace period was taken;
    click's own usage errors printed a four-line usage block."""
    result = commscale(*args, cwd=tmp_path)
    assert_clean_failure(result, fragments)
    assert result.stderr.count("\n") == 1 and result.stdout == "" and list(tmp_path.iterdir()) == []


def test_report_first_naming_nothing_in_the_lake_is_refused(tmp_path, lake):
    result = commscale("report", "--first", "nosuch", "--lake", str(lake), "--out", str(tmp_path / "r"), cwd=tmp_path)
    assert_clean_failure(result, ["--first 'nosuch'", "no sweep, search study or calibration", "it holds s"])
    assert not (tmp_path / "r").exists()
