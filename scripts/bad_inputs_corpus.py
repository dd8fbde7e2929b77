"""The corpus of ``scripts/bad_inputs.py``: bad inputs for every ``commscale`` command.

    python scripts/bad_inputs.py   # runs it

Each case is the command line of one bad input and the files it needs in its folder (YAML
presets, runs files, a lake). Paths in a case are relative to that folder. The families:
override keys and values, preset names, preset files, runs files, options of every command,
and work beyond the bounds (points, rows, bytes) that is refused unless ``--allow-large``.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from typing import Callable, Iterator, List, Optional, Tuple, Union

__all__ = ["Case", "corpus"]

Content = Union[bytes, Callable[[], bytes], str, None]   # None: a folder; "fifo": a named pipe


@dataclass(frozen=True)
class Case:
    name: str
    args: Tuple[str, ...]
    files: Tuple[Tuple[str, Content], ...] = ()
    lake: bool = False          # a small committed lake at ./lake first
    env: Tuple[Tuple[str, str], ...] = ()
    expect: Optional[str] = None  # None: refused (status 2); "accepted" for a valid input

    @property
    def command(self) -> str:
        return " ".join(self.args[:2]) if self.args[:1] == ("lake",) else (self.args[0] if self.args else "")


def _case(name: str, *args: str, **extra) -> Case:
    return Case(name, tuple(args), **extra)


def _label(value: str, width: int = 16) -> str:
    """A short, printable name for a value in a case's name (its length when cut)."""
    return repr(value[:width]) + (f"..{len(value)}" if len(value) > width else "")


LONG = "A" * 5000
#: Values no number field takes.
BAD_NUMBERS = ["-1", "0", "nan", ".nan", "inf", "-.inf", "1e309", "99999999999999999999999", "abc", "''", "[]",
               "{a: 1}", "null", "1e-300", "\x07", "Ω", LONG]
#: Values no list-of-numbers field takes.
BAD_LISTS = ["[]", "[-1]", "[0]", "[.nan]", "[.inf]", "[1e400]", "[1,1]", "[abc]", "[[1]]", "[1,", "]", "{a: 1}",
             "[1e30]", "[" + ",".join(["1"] * 20001) + "]", "[\x01]"]
#: Values no name field takes.
BAD_NAMES = ["", "../x", "a/b", "/etc/passwd", "..", ".hidden", "Ω", "a b", "a\nb", "a\x1bb", "a" * 65, LONG, "[1]",
             "{a: 1}", "'; DROP TABLE projection; --"]


def _override_cases() -> Iterator[Case]:
    """Bad ``KEY=VALUE`` overrides of run, config, submit and calibrate."""
    number_fields = ["sweep.dp", "sweep.head_dim", "sweep.dtype_bytes", "sweep.overlap_tp", "hardware.peak_tflops",
                     "hardware.hbm_gb", "hardware.intra_node.bandwidth_GBps", "sweep.dp_slowdown"]
    commands = itertools.cycle(["run", "config", "submit", "run"])
    for key, value in itertools.product(number_fields, BAD_NUMBERS[:12]):
        command = next(commands)
        yield _case(f"{command}/{key}={_label(value, 12)}", command, f"{key}={value}")
    for key, value in itertools.product(["sweep.tp", "sweep.sl", "sweep.flop_vs_bw"], BAD_LISTS):
        yield _case(f"run/{key}={_label(value, 12)}", "run", f"{key}={value}")
    for value in BAD_NAMES:
        yield _case(f"run/sweep.name={_label(value, 12)}", "run", f"sweep.name={value}")
    for value in BAD_NAMES[:8]:
        yield _case(f"config/hardware.name={_label(value, 12)}", "config", f"hardware.name={value}")
    for item in ["sweep.tpp=[4]", "sweep=", "=", "sweep", "Ω=1", "sweep..tp=[4]", "sweep.tp.x=1", ".tp=1",
                 "sweep.roi.nothing=1", "model.hidden=1024", "calibration.steps=2", f"{LONG}=1", "sweep.tp[0]=4",
                 "sweep.links=sideways", "sweep.mode=fast", "sweep.highlights=[nosuch]", "sweep.reference_model=x",
                 "sweep.scenarios=[{links: wide}]", "sweep.scenarios=[{dp_slowdown: 0.5}]",
                 "hardware.gemm_ceiling.bf16=null",
                 "hardware.gemm_ceiling={bf16: 2}", "hardware.gemm_ceiling={int3: 0.5}", "sweep.h=[1000]",
                 "hardware.attention_kernels=H999",
                 "sweep.tp=[3]", "model=gpt3", "sweep.roi=1"]:
        yield _case(f"run/{item[:24]!r}", "run", *(["model=gpt3", "sweep.tp=[7]"] if item == "model=gpt3" else [item]))
    roi = ["sweep.roi.passes=[]", "sweep.roi.passes=[xx]", "sweep.roi.device=tpu", "sweep.roi.dtype=int3",
           "sweep.roi.world=0", "sweep.roi.min_repeats=50", "sweep.overlap_tp=3", "sweep.roi.ladder_bytes=[0]",
           "sweep.roi.placement=moon", "sweep.roi.collective_ops=[gossip]", "sweep.roi.time_cap_s=nan"]
    for item in roi:
        yield _case(f"run/roi/{item}", "run", "sweep=roi-smoke", item)
    calibration = ["calibration.steps=-1", "calibration.device=tpu", "calibration.vary.sl=[1,1]",
                   "calibration.rounds=100", "calibration.dropout=1", "calibration.held_out=[{h: 1}]",
                   "calibration.baseline.h=nan", "calibration.threads=-2", "sweep.tp=[4]",
                   "calibration.vary={sl: [], b: [], h: [], tp: []}"]
    for item in calibration:
        yield _case(f"calibrate/{item}", "calibrate", "calibration=cpu", item)
    yield _case("calibrate/no-preset", "calibrate")
    yield _case("calibrate/num-cpus-0", "calibrate", "calibration=cpu", "--num-cpus", "0")
    yield _case("run/calibration.x", "run", "calibration.steps=1")
    for label, item in (("deep-list", "sweep.tp=" + "[" * 10000 + "]" * 10000), ("deep-map", "sweep.tp=" + "{a: " * 5000
                        + "1" + "}" * 5000), ("list-of-map", "sweep.tp=[{a: 1}]"), ("newline-key", "sweep.t\np=[4]"),
                        ("escape-value", "sweep.name=\x1b[31mred"), ("huge-int", "sweep.dp=" + "9" * 5000),
                        ("bool", "sweep.tp=[true]"), ("float-int", "sweep.dp=4.0"), ("anchor", "sweep.tp=&a [*a]"),
                        ("tag", "sweep.tp=!!python/object:os.system [1]")):
        yield _case(f"run/override/{label}", "run", item)


def _preset_name_cases() -> Iterator[Case]:
    """Preset names that are no preset, for every group that reads one."""
    names = ["nosuch", LONG, "../hardware/h100", "/etc/passwd", "..", "Ω", "a\x1bb", "h100\n", " h100", "-", "x" * 300,
             "nosuch.yaml", LONG + ".yaml", "/dev/null.yaml", "lake.yaml"]
    for group, name in itertools.product(["model", "hardware", "sweep", "calibration"], names):
        command = "calibrate" if group == "calibration" else ("run" if len(name) % 2 else "config")
        yield _case(f"{command}/{group}={_label(name)}", command, f"{group}={name}", files=(("lake.yaml", None),))
    for name in names[:8]:
        yield _case(f"search/preset={_label(name)}", "search", name)
        yield _case(f"search/stack={_label(name)}", "search", "small", f"stack={name}")
    yield _case("run/highlight-long", "run", f"sweep.highlights=[{LONG}]")
    yield _case("search/scaling-model-long", "search", "scaling", "--scaling", f"scaling.models=[{LONG}]")


def _deep(depth: int, open_: str, close: str, inner: str = "1") -> bytes:
    return (open_ * depth + inner + close * depth).encode()


def _laughs() -> bytes:
    lines = ["a: &a [1, 1, 1, 1, 1, 1, 1, 1, 1, 1]"]
    for i, name in enumerate("bcdefghij"):
        prev = "abcdefghij"[i]
        lines.append(f"{name}: &{name} [" + ", ".join([f"*{prev}"] * 10) + "]")
    return ("\n".join(lines) + "\n").encode()


def _block_nesting(depth: int) -> bytes:
    return "".join("  " * i + "a:\n" for i in range(depth)).encode() + b"  " * depth + b"1\n"


#: Bad preset files: name -> content.
BAD_YAML = {
    "empty": b"", "null": b"~\n", "list": b"- 1\n- 2\n", "scalar": b"42\n", "binary": bytes(range(256)) * 8,
    "latin1": "name: caf\xe9\n".encode("latin-1"), "nul": b"name: a\x00b\n", "syntax": b"name: [1,\n",
    "tabs": b"name:\n\t- x\n", "deep-list": _deep(10000, "[", "]"), "deep-flow-map": _deep(10000, "{a: ", "}"),
    "deep-block": _block_nesting(400), "deep-200": b"name: " + _deep(200, "[", "]"), "laughs": _laughs(),
    "python-tag": b"name: !!python/object/apply:os.system ['touch pwned']\n", "binary-tag": b"name: !!binary AAAA\n",
    "unknown-key": b"name: x\nnot_a_field: 1\n", "wrong-type": b"name: x\npeak_tflops: fast\n",
    "nested-scalar": b"intra_node: 5\n", "long-key": b"x" * 20000 + b": 1\n", "huge": lambda: b"# pad\n" * 400000,
    "bom-garbage": b"\xef\xbb\xbf\xff\xfe", "duplicate": b"name: a\nname: b\n", "nan": b"name: x\npeak_tflops: .nan\n",
    "dotted-key": b"intra_node.bandwidth_GBps: 5\n", "anchor-loop": b"a: &a [*a]\n",
    "long-value": b"name: " + b"x" * 200000,
    "utf16": "name: x\n".encode("utf-16"), "merge-key": b"base: &b {x: 1}\nname:\n  <<: *b\n",
}


def _preset_file_cases() -> Iterator[Case]:
    """Bad YAML files given as a preset by path."""
    groups = itertools.cycle(["hardware", "model", "sweep", "calibration"])
    for label, content in BAD_YAML.items():
        group = next(groups)
        command = "calibrate" if group == "calibration" else "run"
        yield _case(f"{command}/{group}-file/{label}", command, f"{group}=./bad.yaml", files=(("bad.yaml", content),))
        other = "model" if group == "hardware" else "hardware"
        yield _case(f"config/{other}-file/{label}", "config", f"{other}=bad.yaml", files=(("bad.yaml", content),))
    for label in ("deep-list", "deep-flow-map", "huge", "laughs", "binary", "syntax", "unknown-key", "empty"):
        yield _case(f"search/preset-file/{label}", "search", "./bad.yaml", files=(("bad.yaml", BAD_YAML[label]),))
    yield _case("run/preset-file-is-folder", "run", "hardware=d.yaml", files=(("d.yaml", None),))
    yield _case("run/preset-file-missing-folder", "run", "hardware=no/such/x.yaml")
    yield _case("run/preset-file-dev-null", "run", "hardware=/dev/null/x.yaml")


HEADER = ("source,model,layers,hidden,heads,seq,tp,pp,dp,gpus,global_batch,micro_batch,hw,metric,value\n").encode()
ROW = "s,gpt,48,6144,64,2048,8,1,1,8,4,4,A100-SXM-80GB,iter_time,1.42\n"


def _row(**cells: str) -> bytes:
    names = HEADER.decode().strip().split(",")
    values = dict(zip(names, ROW.strip().split(",")), **cells)
    return HEADER + (",".join(values[n] for n in names) + "\n").encode()


def _row_with(columns: str, values: str, **cells: str) -> bytes:
    """``_row(**cells)`` with ``columns`` added to the header and ``values`` to the row."""
    header, row = _row(**cells).decode().splitlines()
    return f"{header.strip()},{columns}\n{row.strip()},{values}\n".encode()


#: Bad runs files of ``commscale validate --runs``.
BAD_RUNS = {
    "fp8-params-bf16": _row_with("fp8_params", "true"), "fp8-params-word": _row_with("fp8_params", "maybe"),
    "offload-all": _row_with("offload_layers", "48"), "offload-negative": _row_with("offload_layers", "-1"),
    "offload-pp": _row_with("offload_layers", "4", pp="2", gpus="16"),
    "offload-recompute": _row_with("offload_layers,recompute", "4,full"),
    "cluster-no-nics": _row_with("nics_per_node", "0"), "cluster-hbm-word": _row_with("hbm_gb", "lots"),
    "cluster-half-gpu": _row_with("gpus_per_node", "7.5"), "cluster-slow-hbm": _row_with("hbm_tbps", "0.001"),
    "dispatcher-sms-negative": _row_with("dispatcher_sms", "-1"),
    "dispatcher-sms-word": _row_with("dispatcher_sms", "all"),
    "pipeline-split-word": _row_with("pipeline_split", "both"),
    "attention-impl-word": _row_with("attention_impl", "xformers"),
    "fp8-recipe-word": _row_with("fp8_recipe", "current"), "fp8-recipe-bf16": _row_with("fp8_recipe", "tensorwise"),
    "empty": b"", "header-only": HEADER, "no-columns": b"a,b\n1,2\n", "unknown-column": b"bogus," + HEADER + b"1," +
    ROW.encode(), "long-cell": lambda: _row(source="x" * 200000), "nul": HEADER + b"s\x00," + ROW.encode()[2:],
    "binary": bytes(range(256)) * 8, "latin1": _row(model="caf\xe9").decode().encode("latin-1"),
    "bad-quote": HEADER + b'"s,' + ROW.encode()[2:], "extra-cells": HEADER + ROW.strip().encode() + b",1,2,3\n",
    "few-cells": HEADER + b"s,gpt\n", "negative": _row(layers="-4"), "nan": _row(value="nan"), "inf": _row(value="inf"),
    "huge-number": _row(hidden="1e400"), "fraction": _row(tp="1.5"), "zero-gpus": _row(gpus="0", dp="0"),
    "layout": _row(gpus="7"), "metric": _row(metric="speed"), "unit": _row(hw="nosuch"),
    "heads": _row(heads="7"), "huge-layers": _row(layers="99999999999999999999"), "unicode": _row(value="１"),
    "utf16": _row().decode().encode("utf-16"), "many-columns": b",".join([b"c%d" % i for i in range(5000)]) + b"\n",
    "oversize": lambda: HEADER + ROW.encode() * (17 * 2**20 // len(ROW) + 1),
    "too-many-rows": lambda: HEADER + b"s,g,1,64,1,1,1,1,1,1,1,1,h,mfu,1\n" * 100_001,
    "cr-only": _row().replace(b"\n", b"\r"), "bom-only": b"\xef\xbb\xbf",
}


#: Runs files that look odd but are valid: old Mac line ends.
VALID_RUNS = ("cr-only",)


def _runs_cases() -> Iterator[Case]:
    for label, content in BAD_RUNS.items():
        yield _case(f"validate/runs/{label}", "validate", "--runs", "runs.csv", "--no-lake",
                    files=(("runs.csv", content),), expect="accepted" if label in VALID_RUNS else None)
    yield _case("validate/runs/oversize-allowed-bad-row", "validate", "--runs", "runs.csv", "--allow-large",
                "--no-lake", files=(("runs.csv", lambda: HEADER + b"s,g,-1,64,1,1,1,1,1,1,1,1,h,mfu,1\n" * 200_000),))
    for label, path in (("missing", "nosuch.csv"), ("folder", "d"), ("dev-null", "/dev/null"),
                        ("dev-zero", "/dev/zero"), ("long", LONG + ".csv"), ("fifo", "fifo.csv"),
                        ("under-file", "runs.csv/x.csv")):
        yield _case(f"validate/runs-path/{label}", "validate", "--runs", path, "--no-lake",
                    files=(("d", None), ("runs.csv", _row()), ("fifo.csv", "fifo")))
    yield _case("validate/runs-other-dataset", "validate", "--runs", "runs.csv", "--dataset", "layers",
                files=(("runs.csv", _row()),))
    for args in (["--dataset", "nosuch"], ["--format", "xml"], ["--out", "no/such/out.csv"], ["--out", "d"],
                 ["--out", "/dev/null/x"], ["--lake", "lake.txt"], ["--lake", "bogus://x"], ["--bogus"]):
        yield _case(f"validate/{' '.join(args)[:24]}", "validate", *args, files=(("d", None), ("lake.txt", b"x")))


def _lake_option_cases() -> Iterator[Case]:
    """``--lake`` where no lake can be: a file, a device, a folder under a file, a bad URI."""
    lakes = {"file": "lake.txt", "dev-null": "/dev/null", "under-file": "lake.txt/lake", "bad-uri": "bogus://x",
             "long": LONG, "proc": "/proc/lake", "empty": ""}
    commands = {"run": ["run", "sweep=smoke"], "status": ["status"], "query": ["query", "SELECT 1"],
                "report": ["report"], "lake verify": ["lake", "verify"], "lake vacuum": ["lake", "vacuum"],
                "lake upgrade": ["lake", "upgrade"], "probe": ["probe", "--points", "1"],
                "calibrate": ["calibrate", "calibration=cpu"], "search": ["search", "small"]}
    for (command, args), (label, lake) in itertools.product(commands.items(), lakes.items()):
        yield _case(f"{command}/--lake {label}", *args, "--lake", lake, files=(("lake.txt", b"not a lake\n"),))
    for command in ("status", "query", "report", "lake verify", "lake vacuum", "lake upgrade"):
        args = commands[command]
        yield _case(f"{command}/--lake missing", *args, "--lake", "no/such/lake")
        yield _case(f"{command}/env-lake file", *args, env=(("COMMSCALE_LAKE", "lake.txt"),),
                    files=(("lake.txt", b"x"),))


def _command_option_cases() -> Iterator[Case]:
    """Bad options and arguments of each command but run's overrides."""
    probe = [["--points", "0"], ["--points", "-5"], ["--points", "abc"], ["--sleep-ms", "-1"], ["--sleep-ms", "nan"],
             ["--timeout-s", "0"], ["--timeout-s", "nan"], ["--cpus-per-point", "-1"], ["--cpus-per-point", "nan"],
             ["--fail", "bogus:1"], ["--fail", "die_once:-1"], ["--fail", "die_once:abc"], ["--fail", ":3"],
             ["--fail", "die_once:5", "--points", "2"], ["--resource", "CPU=1"], ["--resource", "x=-1"],
             ["--resource", "x=nan"], ["--resource", "=1"], ["--resource", "x=1", "--resource", "x=2"],
             ["--name", "../x"], ["--name", ""], ["--name", LONG], ["--name", "a/b"], ["--chunk-size", "0"],
             ["--num-cpus", "0"], ["--num-cpus", "-1"], ["--points", "1", "--sleep-ms", "inf"]]
    for args in probe:
        yield _case(f"probe/{' '.join(args)[:30]}", "probe", *args)
    run = [["--num-cpus", "0"], ["--chunk-size", "-1"], ["--address", ""], ["--bogus"], ["--num-cpus", "nan"]]
    for args in run:
        yield _case(f"run/{' '.join(args)[:30]}", "run", *args)
    query = [[""], ["SELEC nonsense"], ["SELECT * FROM nosuch"], ["DROP VIEW toy"], ["COPY toy TO 'x.csv'"],
             ["SELECT 1; SELECT 2"], ["SELECT '\x1b'"], ["SELECT " + "1+" * 50000 + "1"], ["ATTACH 'x.db'"],
             ["SELECT 1", "--format", "xml"], ["SELECT 1", "-o", "d"], ["SELECT 1", "-o", "no/such/x"],
             ["SELECT 1", "--format", "parquet"], ["INSTALL httpfs"], ["SELECT * FROM read_csv('/etc/passwd')"],
             ["EXPLAIN ANALYZE COPY (SELECT 1) TO 'x.csv'"], ["PRAGMA version"], ["SET threads=1"]]
    for args in query:
        yield _case(f"query/{_label(' '.join(args), 30)}", "query", *args, lake=True, files=(("d", None),),
                    expect="accepted" if args == ["SELECT '\x1b'"] else None)  # a string holding ESC is valid SQL
    others = [["status", LONG], ["status", "'; DROP"], ["status", "nosuch"], ["report", "--max-m", "-1"],
              ["report", "--out", "/dev/null"], ["report", "--out", "f.txt"], ["report", "--first", LONG],
              ["lake", "verify", "--keys-out", "no/such/k"], ["lake", "verify", "--keys-out", "d"],
              ["lake", "vacuum", "--grace-s", "-1"], ["lake", "vacuum", "--grace-s", "nan"], ["lake", "nosuch"],
              ["lake", "upgrade", "extra"], ["presets", "extra"], ["nosuch"], ["config", "--bogus"],
              ["submit", "sweep.tp=[3]"], ["submit", "--address", "http://127.0.0.1:1", "sweep=nosuch"]]
    for args in others:
        yield _case(f"{args[0]}/{_label(' '.join(args[1:]), 30)}", *args, lake=args[0] in ("report", "lake", "status"),
                    files=(("d", None), ("f.txt", b"x")))
    search = [["trials=-1"], ["trials=abc"], ["seed=-1"], ["nosuch=1"], ["sampler=bogus"], ["objective=x"],
              ["--measure", "-1"], ["--measure", "1", "--measure-world", "0"], ["--measure", "1", "--measure-device",
              "tpu"], ["--storage", "d"], ["--storage", "f.txt/x"], ["--restart"], ["--exhaustive", "--ray"],
              ["space.tp=[]"], ["space.tp=[3]"], ["devices=0"], ["memory_fraction=2"], ["model.hidden=-1"],
              ["hardware.peak_tflops=nan"], ["stack.nosuch=1"], ["space.schedule=[bogus]"], ["devices=nan"],
              ["stack.pipeline_split=both"], ["stack.attention_impl=xformers"], ["stack.fp8_recipe=tensorwise"],
              ["stack.gemm_precision=fp8", "stack.fp8_recipe=current"]]
    for args in search:
        yield _case(f"search/{' '.join(args)[:30]}", "search", "small", *args, files=(("d", None), ("f.txt", b"x")))


def _timeline_cases() -> Iterator[Case]:
    """``timeline``: its preset and search overrides, each layout field, and the trace's path."""
    layout = [["layout.tp=3"], ["layout.tp=0"], ["layout.tp=abc"], ["layout.pp=1000"], ["layout.dp=7"],
              ["layout.schedule=bogus"], ["layout.schedule=interleaved", "layout.virtual_stages=1"],
              ["layout.zero=zero2"], ["layout.sequence_parallel=maybe"], ["layout.recompute=all"],
              ["layout.recompute_layers=-1"], ["layout.recompute_layers=2"], ["layout.nosuch=1"],
              ["layout.micro_batch=" + "9" * 40], ["layout.tp=" + LONG], ["nosuch"], ["trials=5"], ["devices=0"],
              ["space.tp=[3]"], ["model.hidden=-1"], ["-o", "d"], ["-o", "f.txt/x"], ["-o", "/dev/null/x"],
              ["--lake", "f.txt"]]
    for args in layout:
        yield _case(f"timeline/{_label(' '.join(args), 30)}", "timeline", *args, files=(("d", None), ("f.txt", b"x")))


def _bound_cases() -> Iterator[Case]:
    """Work beyond the bounds, refused before it starts unless --allow-large."""
    h = "[" + ",".join(str(128 * i) for i in range(1, 1001)) + "]"
    thousand = "[" + ",".join(str(i) for i in range(1, 1001)) + "]"
    grid = [f"sweep.h={h}", f"sweep.sl={thousand}", f"sweep.b={thousand}", "sweep.tp=[1]", "sweep.flop_vs_bw=[1]"]
    yield _case("run/bound/points-1e9", "run", *grid)
    yield _case("submit/bound/points-1e9", "submit", *grid)
    yield _case("run/bound/points-1e9-roi", "run", "sweep=roi-smoke", *grid)
    yield _case("probe/bound/points-1e9", "probe", "--points", "1000000000")
    yield _case("probe/bound/points-1e12", "probe", "--points", "1000000000000")
    yield _case("run/bound/yaml-2MiB", "run", "hardware=big.yaml",
                files=(("big.yaml", lambda: b"name: x\n" + b"# pad\n" * 400000),))
    yield _case("run/bound/allow-large-still-checks", "run", "--allow-large", "sweep.tp=[3]")
    yield _case("probe/bound/allow-large-still-checks", "probe", "--allow-large", "--points", "0")
    yield _case("submit/bound/allow-large-still-checks", "submit", "--allow-large", "sweep.tp=[3]")
    yield _case("calibrate/bound/yaml-2MiB", "calibrate", "calibration=big.yaml",
                files=(("big.yaml", lambda: b"name: x\n" + b"# pad\n" * 400000),))
    yield _case("config/bound/allow-large-yaml-bad", "config", "--allow-large", "sweep=big.yaml",
                files=(("big.yaml", lambda: b"name: x\nbogus: 1\n" + b"# pad\n" * 400000),))
    yield _case("run/bound/allow-large-yaml-bad", "run", "--allow-large", "hardware=big.yaml",
                files=(("big.yaml", lambda: b"name: x\nbogus: 1\n" + b"# pad\n" * 400000),))


def _accepted_cases() -> Iterator[Case]:
    """Valid inputs that look odd: they must be accepted (cheap commands only)."""
    for item in ["sweep.flop_vs_bw=[1.5]", "hardware=./conf/hardware/h100.yaml", "model=null", "sweep.highlights=[]"]:
        yield _case(f"config/valid/{item}", "config", item.replace("./conf", str(_conf())), expect="accepted")
    yield _case("presets/valid", "presets", expect="accepted")


def _conf():
    from conf import CONF_DIR

    return CONF_DIR.parent / "conf"


def corpus() -> List[Case]:
    """Every case, in a fixed order."""
    families = (_override_cases, _preset_name_cases, _preset_file_cases, _runs_cases, _lake_option_cases,
                _command_option_cases, _timeline_cases, _bound_cases, _accepted_cases)
    return [case for family in families for case in family()]
