"""The layout's rules, checked on the sources (``scripts/code_shape.py`` reads them with
``ast``): no import cycle; tasks imports nothing of sweeps or analysis; analysis reads the
lake through sweeps.lake only and only sweeps.cli imports it; only sweeps.cluster imports
ray; size limits; and one definition of each formula, name and rule."""

from __future__ import annotations

import ast
import importlib.util
import re
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
_spec = importlib.util.spec_from_file_location("code_shape", ROOT / "scripts" / "code_shape.py")
shape = sys.modules["code_shape"] = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(shape)


@pytest.fixture(scope="module")
def modules():
    return shape.scan(ROOT)


def _sources():
    for package in shape.PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            yield path.relative_to(ROOT).as_posix(), path.read_text(encoding="utf-8")


def test_no_module_imports_itself_through_others(modules):
    assert shape.cycles(modules) == []


def test_the_import_rules_hold(modules):
    assert shape.rule_breaks(modules) == []


def test_ray_is_imported_under_sweeps_cluster_only(modules):
    importers = [name for name in shape.importers_of(modules, "ray") if not name.startswith("harness.")]
    assert importers and all(name.startswith("sweeps.cluster.") for name in importers), importers


def test_the_command_line_runs_no_job_itself(modules):
    """Each command's CLI parses and renders; what a command does (run a job, read its rows
    back, commit) is a workflow of ``sweeps.sweep`` beside the run engine."""
    engine = ("sweeps.run.run_job", "sweeps.lake.views.read_rows", "sweeps.jobs.validation.commit_validation",
              "sweeps.jobs.validation.run_validation")
    found = [f"{name} imports {imported}" for name, module in modules.items() if name.startswith("sweeps.cli")
             for imported in module.imports if any(imported == e or imported.startswith(e + ".") for e in engine)]
    assert found == []


def test_the_test_support_stands_apart_and_no_program_hides_in_a_string(modules):
    """The loopback cluster is test support (``harness``), which the product never imports;
    a program run as a process of its own is a module (linted, checked), not a string."""
    assert {name for name in modules if name.startswith("harness.loopback.")} >= {
        "harness.loopback.local", "harness.loopback.launcher", "harness.loopback.ray_start"}
    assert not [name for name in modules if name.startswith("sweeps.cluster.") and name.split(".")[2] in
                ("local", "launcher", "processes", "host", "sockets")]
    programs = [f"{path}:{i}" for path, text in _sources() if not path.startswith("tests/")
                for i, line in enumerate(text.splitlines(), start=1) if re.search(r'[\'"]-c[\'"]\s*,', line)]
    assert programs == []


def test_no_module_over_400_lines_no_function_over_60_lines_or_8_positional_parameters(modules):
    assert shape.long_modules(modules) == []
    assert shape.long_functions(modules) == []
    assert shape.wide_functions(modules) == []


def test_the_checker_sees_what_it_must_refuse(tmp_path):
    """The checks above would fail on a tree that breaks them."""
    for package in shape.PACKAGES:
        (tmp_path / package).mkdir()
    (tmp_path / "tasks" / "a.py").write_text("import sweeps.b\n\ndef f(a, b, c, d, e, f, g, h, i):\n    pass\n")
    (tmp_path / "sweeps" / "b.py").write_text("def g():\n    import tasks.a\n    import ray\n"
                                               + "    x = 1\n" * 60)
    (tmp_path / "analysis" / "c.py").write_text("from sweeps import b\n" + "\n" * 400)
    (tmp_path / "sweeps" / "d.py").write_text("import harness.e\n")
    (tmp_path / "harness" / "e.py").write_text("import ray\n")
    found = shape.scan(tmp_path)
    assert shape.cycles(found) == [["sweeps.b", "tasks.a"]]
    assert len(shape.rule_breaks(found)) == 4      # the three above, and sweeps.d importing the test support
    assert shape.long_modules(found) == [("analysis.c", 401)]
    assert [f for _, f, _ in shape.long_functions(found)] == ["g"]
    assert [f for _, f, _ in shape.wide_functions(found)] == ["f"]


def test_the_cost_models_folders_read_one_way_and_the_checker_sees_a_break(tmp_path, modules):
    """kernels -> collectives -> step: each folder of tasks/model imports only those before it
    (``code_shape.MODEL_FOLDERS``), and says what it holds in its public face."""
    model = ROOT / "tasks" / "model"
    folders = sorted(p.name for p in model.iterdir() if p.is_dir() and p.name != "__pycache__")
    assert folders == sorted(shape.MODEL_FOLDERS)
    assert sorted(p.name for p in model.glob("*.py")) == ["__init__.py"]
    for folder in folders:
        face = (model / folder / "__init__.py").read_text(encoding="utf-8")
        listed = set(ast.literal_eval(face.split("__all__ = ", 1)[1].strip()))
        assert listed == {p.stem for p in (model / folder).glob("*.py")} - {"__init__"}, folder
    assert shape.model_shape(modules)["step_path_modules"] <= 9
    (tmp_path / "tasks" / "model" / "kernels").mkdir(parents=True)
    (tmp_path / "tasks" / "model" / "step").mkdir()
    (tmp_path / "tasks" / "model" / "kernels" / "k.py").write_text("from tasks.model.step import s\n")
    (tmp_path / "tasks" / "model" / "step" / "s.py").write_text("X = 1\n")
    breaks = shape.rule_breaks(shape.scan(tmp_path, ("tasks",)))
    assert breaks == ["tasks.model.kernels.k imports tasks.model.step.s (tasks.model.kernels imports only terms, "
                      "kernels)"]


#: One definition each: (what, pattern, the only file allowed to hold it).
ONE_DEFINITION = [
    ("the ring's bus factor (n-1)/n", r"\(\s*n\s*-\s*1(\.0)?\s*\)\s*/\s*n\b", "tasks/model/collectives/nccl.py"),
    ("the ring's (n-1) steps", r"\*\s*\(\s*n\s*-\s*1(\.0)?\s*\)(?!\s*/)", "tasks/model/collectives/nccl.py"),
    ("a layer's weights (12 H^2 for the study's block)", r"mlp_matrices\s*\*\s*h\b", "tasks/model/kernels/weights.py"),
    ("Korthikanti's 5 A SL / H attention activations", r"\b5(\.0)?\s*\*\s*[\w\[\]\"']*heads",
     "tasks/model/step/memory.py"),
    ("Korthikanti's split activations (24 / TP for the study's block)", r"\bsplit\s*/\s*tp\b",
     "tasks/model/step/memory.py"),
    ("the torch dtypes", r"torch\.(float32|float16|bfloat16)\b", "tasks/device.py"),
    ("the dtype widths", r"[\"']fp32[\"']\s*:\s*4\b", "tasks/device.py"),
    ("the cuda rule", r"startswith\(\s*[\"']cuda", "tasks/device.py"),
    ("layout names <-> codes", r"\b(SCHEDULES|ZERO_MODES|RECOMPUTE_MODES|names)(\.index\(|\[int\(|\[\w+\])",
     "tasks/model/terms/layout.py"),
    ("Ray task options", r"[\"']num_(cpus|gpus)[\"']\s*:", "sweeps/cluster/session.py"),
]


@pytest.mark.parametrize("what, pattern, home", ONE_DEFINITION, ids=[w for w, _, _ in ONE_DEFINITION])
def test_each_formula_and_rule_is_written_once(what, pattern, home):
    found = [f"{path}:{i}" for path, text in _sources() for i, line in enumerate(text.splitlines(), start=1)
             if re.search(pattern, line) and not line.lstrip().startswith("#")
             and not _in_docstring(text, i)]
    assert found and all(place.startswith(home + ":") for place in found), (what, found)


def _in_docstring(text: str, line: int) -> bool:
    tree = ast.parse(text)
    for node in ast.walk(tree):
        body = getattr(node, "body", None)
        if isinstance(body, list) and body and isinstance(body[0], ast.Expr) \
                and isinstance(body[0].value, ast.Constant) and isinstance(body[0].value.value, str):
            if body[0].lineno <= line <= body[0].end_lineno:
                return True
    return False


#: Calls that name a result kind: the kind must be one of ``sweeps.lake.kinds``' constants.
KIND_CALLS = {"commit": 0, "dataset": 0, "keys": 0, "files": 0, "schema_versions": 0, "remove_partition": 0,
              "read_rows": 1, "view_frame": 1, "kind_frame": 1}


def test_result_kinds_are_named_by_their_constants_not_by_strings():
    literal = []
    for path, text in _sources():
        if path == "sweeps/lake/kinds.py":
            continue
        for node in ast.walk(ast.parse(text)):
            if not isinstance(node, ast.Call):
                continue
            name = node.func.attr if isinstance(node.func, ast.Attribute) else getattr(node.func, "id", "")
            args = [kw.value for kw in node.keywords if kw.arg == "kind" and name in (*KIND_CALLS, "Workload")]
            if name in KIND_CALLS and len(node.args) > KIND_CALLS[name]:
                args.append(node.args[KIND_CALLS[name]])
            literal += [f"{path}:{node.lineno}" for a in args
                        if isinstance(a, ast.Constant) and isinstance(a.value, str)]
    assert literal == []
