"""Every lake key is made by one builder per kind, and the keys are pinned: a key that
changes orphans every row a lake holds under the old one (their points run again and the
old rows stay beside the new), so a change here must be deliberate, with its version bumped
(a projection's key holds the cost model's version, so each bump of it moves these)."""

from __future__ import annotations

import ast
from pathlib import Path

from sweeps.config import load_run_config
from sweeps.jobs.calibration import baseline_key
from sweeps.jobs.probe import probe_key
from sweeps.jobs.projection import plan_points
from sweeps.jobs.roi import fit_key
from sweeps.jobs.scaling import scaling_key
from sweeps.jobs.search import trial_key
from sweeps.jobs.validation import validation_key
from tasks.fit.accuracy import accuracy_key, operator_model_key
from tasks.measure.roi import measurement_key

ROOT = Path(__file__).resolve().parents[1]


def test_a_projection_sweeps_points_keep_their_keys():
    """The smoke sweep's keys under cost model spec-12 (a key holds the cost model's version: a
    new version gives new keys, and its rows land beside the old ones)."""
    keys = plan_points(load_run_config(["sweep=smoke"])).points.column("key").to_pylist()
    assert len(keys) == len(set(keys)) == 34
    assert (keys[0], keys[1], keys[-1]) == ("261ebb362d0d092b9a4b26d5b8c2d2b7", "c02da681ac800d6dcf0cc321970f0bab",
                                            "fe6402a17ba87404a8ea554d64dccf73")


def test_every_other_kinds_builder_keeps_its_keys():
    point = {"op": "gemm", "m": 1024, "n": 1024, "k": 1024, "batch": 1, "dtype": "bf16", "device": "cuda",
             "device_model_spec": "H100", "world": 1, "message_bytes": 0, "placement": ""}
    got = {
        "search": trial_key("s", 3, {"tp": 8, "pp": 2, "zero": "zero1"}),
        "baseline": baseline_key("cpu", "fit", {"h": 512, "heads": 8, "sl": 256, "b": 1, "tp": 1},
                                 {"dtype": "fp32", "steps": 4}),
        "collective_fit": fit_key("roi", "all_reduce", 8, "pack", ["b", "a"]),
        "scaling": scaling_key("scaling", "abcd", "efgh", "llama3-70b", 512),
        "probe": probe_key("probe", "abcd", 7),
        "validation": validation_key("runs", "src", 4, "mfu", "spec-8+step-14", "0123456789abcdef"),
        "opmodel": operator_model_key("cpu", "id1", "gemm"),
        "accuracy": accuracy_key("id1", {"h": 512, "tp": 1}, "gemm", 0.001),
        "roi": measurement_key(point, "2.13.0", 989.0),
    }
    assert got == {
        "search": "237decaaafc1d66f990895f788f53654", "baseline": "2729eddbd3c54ee51d2b2d6d6f5483e7",
        "collective_fit": "da031c82fbaf5f7c7f64dbce65eedb0b", "scaling": "aba84691589833a1039399d7f85ad3d0",
        "probe": "15f68eb71e4c7ce5734d342294b93420", "validation": "c16f4350bf5d2b85d58469bceca896dc",
        "opmodel": "a055230d936e31821def3de94d248dd8", "accuracy": "427104ca819b4eabc52eec348183ec39",
        "roi": "9cd1048358f3c5cda1fe21688cb992e1",
    }
    assert fit_key("roi", "all_reduce", 8, "pack", ["a", "b"]) == got["collective_fit"]   # the measurements' order


def _hashing_calls(tree: ast.AST):
    """(enclosing function, line) of every call that makes a key: ``key_of``, a 32-digit
    ``content_hash`` and ``hashlib.sha256``."""
    def visit(node, function):
        for child in ast.iter_child_nodes(node):
            name = child.name if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)) else function
            if isinstance(child, ast.Call):
                called = child.func.attr if isinstance(child.func, ast.Attribute) else getattr(child.func, "id", "")
                long = any(k.arg == "length" and getattr(k.value, "value", 0) == 32 for k in child.keywords)
                if called == "key_of" or (called == "content_hash" and long) or (
                        called == "sha256" and function and "key" in function):
                    yield function, child.lineno
            yield from visit(child, name)
    yield from visit(tree, "")


def test_keys_are_made_only_by_their_builders():
    """A row's key is made in a function named for it (``*_key``, ``*_keys``), never inline."""
    stray = []
    for package in ("sweeps", "tasks", "analysis"):
        for path in sorted((ROOT / package).rglob("*.py")):
            for function, line in _hashing_calls(ast.parse(path.read_text(encoding="utf-8"))):
                if not (function.endswith(("_key", "_keys")) or function == "key_of"):
                    stray.append(f"{path.relative_to(ROOT)}:{line} in {function or 'the module'}")
    assert stray == []
