"""Time and cost to train on a number of tokens, from a layout's throughput.

A step of a layout processes ``global_batch x seq_len`` tokens on ``devices`` devices; its
throughput per device, ``tokens_per_s_per_device``, is the step model's own metric
(``tasks.model.step.plan``: global batch x sequence length / step time / devices), read from a
search row and never recomputed here. Training on ``tokens`` tokens then takes

    time = tokens / (tokens_per_s_per_device x devices)

seconds, and costs ``time x devices x price per device-hour`` (the device-hours a cloud or a
cluster charges), with no allowance for start-up, checkpoints, evaluation or failures.
"""

from __future__ import annotations

import numpy as np

__all__ = ["SECONDS_PER_DAY", "train_days", "device_hours", "train_cost"]

SECONDS_PER_DAY = 86_400.0


def train_days(tokens: float, tokens_per_s_per_device, devices: int) -> np.ndarray:
    """Days to train on ``tokens`` tokens at ``tokens_per_s_per_device`` (a number or an array,
    one per layout) on ``devices`` devices; infinite where the throughput is 0, NaN where it is."""
    speed = np.asarray(tokens_per_s_per_device, dtype=np.float64) * float(devices)
    with np.errstate(divide="ignore"):
        return float(tokens) / speed / SECONDS_PER_DAY


def device_hours(days, devices: int) -> np.ndarray:
    """Device-hours ``devices`` devices spend in ``days`` days."""
    return np.asarray(days, dtype=np.float64) * 24.0 * float(devices)


def train_cost(days, devices: int, price_per_device_hour: float) -> np.ndarray:
    """What ``days`` of ``devices`` devices cost at ``price_per_device_hour`` (a currency unit
    per device-hour, e.g. USD)."""
    return device_hours(days, devices) * float(price_per_device_hour)
