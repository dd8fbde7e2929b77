"""Time and cost to train: tokens over the layout's throughput on every device, and the
device-hours that takes at a price."""

from __future__ import annotations

import numpy as np
import pytest

from tasks.model.terms.train_time import SECONDS_PER_DAY, device_hours, train_cost, train_days


def test_days_are_tokens_over_the_throughput_of_every_device():
    # 1e12 tokens at 1,000 tokens/s on each of 10 devices: 1e8 s.
    assert train_days(1e12, 1_000.0, 10) == pytest.approx(1e8 / SECONDS_PER_DAY)
    days = train_days(2e12, np.array([1_000.0, 2_000.0, 0.0]), 10)
    assert days[0] == pytest.approx(2 * days[1]) and np.isinf(days[2])


def test_cost_is_the_device_hours_at_the_price():
    days = train_days(1e12, 1_000.0, 10)
    assert device_hours(days, 10) == pytest.approx(1e8 / 3_600 * 10)
    assert train_cost(days, 10, 2.5) == pytest.approx(2.5 * 1e8 / 3_600 * 10)
