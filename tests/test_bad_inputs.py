"""The bad-input corpus (``scripts/bad_inputs.py``): hundreds of bad inputs across every
command end in exit status 2 and one line (or click's usage block), none in a traceback,
none starts Ray or a job or works past its time or memory, and none changes a file where
it ran: no lake is created, no report written. The valid inputs among them are accepted.

The whole corpus takes a minute and a half on a loaded 2-core machine; this runs every
fourth case, and every case of the inputs the probe of issue 31 found (``MUST``).
``tests/sweeps/config/test_bounds.py`` checks the bounds and those inputs one by one.
"""

from __future__ import annotations

import collections
import importlib.util
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
_spec = importlib.util.spec_from_file_location("bad_inputs", ROOT / "scripts" / "bad_inputs.py")
bad_inputs = sys.modules["bad_inputs"] = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(bad_inputs)
corpus = sys.modules["bad_inputs_corpus"].corpus

#: Cases run whatever the sample: a sweep beyond the point bound, 5000-character preset
#: names, deeply nested YAML, a runs-file cell beyond Python's CSV field limit.
MUST = ("bound/points", "='AAAA", "deep-list", "deep-flow-map", "long-cell")
#: Inputs accepted or crashing in code outside this suite's reach, by case name: the owner
#: of that code fixes them (then they leave this list). None today.
KNOWN_ELSEWHERE: dict = {}


def _sample():
    cases = corpus()
    return [case for i, case in enumerate(cases) if i % 4 == 0 or any(m in case.name for m in MUST)]


@pytest.fixture(scope="module")
def outcomes():
    return bad_inputs.run_corpus(_sample())


def test_the_corpus_holds_300_distinct_bad_inputs_for_every_command():
    cases = corpus()
    names = collections.Counter(case.name for case in cases)
    assert [name for name, n in names.items() if n > 1] == []
    assert sum(case.expect is None for case in cases) >= 300
    commands = {case.command for case in cases}
    assert commands >= {"run", "probe", "submit", "config", "presets", "search", "validate", "calibrate", "query",
                        "report", "status", "lake verify", "lake vacuum", "lake upgrade", "timeline"}


def test_no_bad_input_ends_in_a_traceback_or_starts_work(outcomes):
    assert len(outcomes) >= 150
    bad = [(o.case.name, o.kind, o.line) for o in outcomes
           if o.kind in ("traceback", "runaway", "multiline") and o.case.name not in KNOWN_ELSEWHERE]
    assert bad == []


def test_a_refused_input_changes_nothing_where_it_ran(outcomes):
    """No lake created, no report written, no file touched in the case's folder."""
    assert [o.case.name for o in outcomes if o.kind == "wrote"] == []
    refused = [o for o in outcomes if o.kind in ("refused", "usage")]
    assert len(refused) >= 140


def test_only_valid_inputs_are_accepted_and_each_is(outcomes):
    accepted = {o.case.name for o in outcomes if o.kind == "accepted"}
    valid = {o.case.name for o in outcomes if o.case.expect == "accepted"}
    assert accepted - set(KNOWN_ELSEWHERE) == valid
