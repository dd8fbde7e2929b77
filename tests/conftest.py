"""Shared fixtures: shipped hardware profiles, loaded the way a run loads them; and the
suite's order (the README's commands first)."""

from __future__ import annotations

import dataclasses

import pytest

from sweeps.config import load_preset

#: The test file whose commands run one after another in one folder (the README's, in the
#: order shown): the longest chain of the suite, so it is collected first and starts at once
#: on a worker of its own (pytest-xdist's ``loadfile`` hands out files in collection order)
#: while the other workers share the rest.
LONGEST_CHAIN = "test_readme_commands.py"


def pytest_collection_modifyitems(config, items):
    """The README's commands first, every other test in its collected order after them."""
    items.sort(key=lambda item: item.path.name != LONGEST_CHAIN)


@pytest.fixture(scope="session")
def study_hw():
    """The study's own system: four MI210 (conf/hardware/mi210x4.yaml)."""
    return load_preset("hardware", "mi210x4")


@pytest.fixture(scope="session")
def h100():
    return load_preset("hardware", "h100")


@pytest.fixture(scope="session")
def h100_without_nccl_sms(h100):
    """The h100 profile with NCCL holding no SMs (both tiers' ``channels`` 0): for tests of
    another part of the step's compute that must hold exactly, free of the DP collectives'
    contention (``step.dp_comm.dp_sm_share``)."""
    return dataclasses.replace(h100, intra_node=dataclasses.replace(h100.intra_node, channels=0),
                               inter_node=dataclasses.replace(h100.inter_node, channels=0))


@pytest.fixture(scope="session")
def gpt3():
    return load_preset("model", "gpt3")


@pytest.fixture(scope="session")
def llama():
    return load_preset("model", "llama3-70b")
