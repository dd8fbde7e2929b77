"""Shared fixtures: shipped hardware profiles, loaded the way a run loads them."""

from __future__ import annotations

import pytest

from sweeps.config import load_preset


@pytest.fixture(scope="session")
def study_hw():
    """The study's own system: four MI210 (conf/hardware/mi210x4.yaml)."""
    return load_preset("hardware", "mi210x4")


@pytest.fixture(scope="session")
def h100():
    return load_preset("hardware", "h100")


@pytest.fixture(scope="session")
def gpt3():
    return load_preset("model", "gpt3")


@pytest.fixture(scope="session")
def llama():
    return load_preset("model", "llama3-70b")
