"""The sane range of every numeric config field, as data in one place, and its check.

Every number a config holds must be finite (no NaN, no infinity) and inside its range
before anything runs or is written: a NaN compares false with every bound, so an
unchecked one slips through ``value <= 0`` and fills the lake with NaN rows marked ok, and
an absurd size (H = 10^12) makes a projection of numbers that mean nothing. The ranges are
wide (they admit every model and system in sight and generations beyond) and are listed in
the README.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Dict, Iterable, Mapping

from sweeps.errors import ConfigError

__all__ = ["Range", "SIZE", "SEQUENCE", "DEVICES", "MULTIPLIER", "FRACTION", "check_range", "check_fields",
           "SWEEP", "ROI", "HARDWARE", "LINK_TIER", "MODEL", "SEARCH", "SPACE", "SCALING", "CALIBRATION", "LAYER_POINT"]


@dataclass(frozen=True)
class Range:
    """A closed range ``[low, high]`` (``low_open``: ``(low, high]``) of finite numbers."""

    low: float
    high: float
    low_open: bool = False

    def holds(self, value: float) -> bool:
        if not math.isfinite(value):
            return False
        return (value > self.low if self.low_open else value >= self.low) and value <= self.high

    def describe(self) -> str:
        return f"{'(' if self.low_open else '['}{self.low:g}, {self.high:g}]"


#: A width (hidden size, FFN width, heads, head dimension): up to a million.
SIZE = Range(1, 1e6)
#: A sequence length: up to ten million tokens.
SEQUENCE = Range(1, 1e7)
#: A count of devices or a parallel degree: up to a hundred million.
DEVICES = Range(1, 1e8)
#: A scenario multiplier (flop-vs-bw m, a slowdown): (0, 1000].
MULTIPLIER = Range(0, 1e3, low_open=True)
#: A fraction: (0, 1].
FRACTION = Range(0, 1, low_open=True)
_BATCH = Range(1, 1e9)
_SECONDS = Range(0, 1e6, low_open=True)
_COUNT = Range(1, 1e7)
_NON_NEGATIVE_COUNT = Range(0, 1e7)
_BYTES_PER_ELEMENT = Range(1, 8)

SWEEP: Dict[str, Range] = {"h": SIZE, "sl": SEQUENCE, "b": _BATCH, "tp": DEVICES, "dp": DEVICES, "head_dim": SIZE,
                           "dtype_bytes": _BYTES_PER_ELEMENT, "flop_vs_bw": MULTIPLIER, "dp_slowdown": MULTIPLIER,
                           "overlap_tp": DEVICES, "reference_tp": DEVICES, "reference_hbm_gb": Range(0, 1e6, True)}
ROI: Dict[str, Range] = {"world": DEVICES, "warmup": _COUNT, "min_repeats": _COUNT, "max_repeats": _COUNT,
                         "rel_spread": Range(0, 1e3, True), "time_cap_s": _SECONDS, "collective_repeats": _COUNT,
                         "point_timeout_s": _SECONDS, "ladder_bytes": Range(1, 2.0**50)}
HARDWARE: Dict[str, Range] = {"devices_per_node": DEVICES, "peak_tflops": Range(0, 1e9, True),
                              "hbm_gb": Range(0, 1e7, True), "hbm_tbps": Range(0, 1e6, True),
                              "memory_efficiency": FRACTION, "kernel_launch_us": Range(0, 1e6),
                              "compute_units": Range(1, 1e6), "peak_fp8_tflops": Range(0, 1e9, True),
                              "gemm_tile_overhead_us": Range(0, 1e6), "tdp_w": Range(0, 1e5, True),
                              "gemm_sustained_w": Range(0, 1e5, True),
                              "power_limit_w": Range(0, 1e5, True)}
LINK_TIER: Dict[str, Range] = {"bandwidth_GBps": Range(0, 1e9, True), "latency_us": Range(0, 1e7),
                               "efficiency": FRACTION, "nvls_efficiency": Range(0, 1), "nvls_latency_us": Range(0, 1e7),
                               "channels": Range(0, 1e4)}
MODEL: Dict[str, Range] = {"year": Range(1900, 3000), "layers": Range(1, 1e6), "hidden": SIZE, "heads": SIZE,
                           "ffn_hidden": Range(1, 1e7), "params_b": Range(0, 1e9, True), "seq_len": SEQUENCE,
                           "kv_heads": SIZE, "vocab": Range(1, 1e9), "dropout": Range(0, 1), "head_dim": SIZE,
                           "experts": Range(0, 1e6), "topk": Range(0, 1e6), "moe_ffn_hidden": Range(1, 1e7),
                           "shared_experts": Range(0, 1e6), "dense_layers": Range(0, 1e6),
                           "kv_lora_rank": Range(0, 1e7), "q_lora_rank": Range(0, 1e7),
                           "qk_rope_head_dim": Range(0, 1e7), "v_head_dim": SIZE}
SEARCH: Dict[str, Range] = {"devices": DEVICES, "global_batch": _BATCH, "trials": _COUNT, "batch": Range(1, 1e5),
                            "seed": Range(0, 2.0**63 - 1), "memory_fraction": FRACTION,
                            "dtype_bytes": _BYTES_PER_ELEMENT, "top": Range(1, 1e5)}
SPACE: Dict[str, Range] = {"tp": DEVICES, "pp": DEVICES, "micro_batch": _BATCH, "virtual_stages": Range(1, 1e4),
                           "cp": DEVICES, "ep": DEVICES, "etp": DEVICES}
SCALING: Dict[str, Range] = {"devices": DEVICES, "global_batch": _BATCH}
CALIBRATION: Dict[str, Range] = {"threads": Range(0, 1e5), "head_dim": SIZE, "warmup": _NON_NEGATIVE_COUNT,
                                 "steps": _COUNT, "plain_repeats": _COUNT, "time_cap_s": _SECONDS,
                                 "point_timeout_s": _SECONDS, "dropout": Range(0, 1), "judged_from_ms": Range(0, 1e9),
                                 "rounds": _COUNT, "max_drift": MULTIPLIER,
                                 "max_excess": MULTIPLIER,
                                 "remeasure": Range(0, 100)}
LAYER_POINT: Dict[str, Range] = {"h": SIZE, "heads": SIZE, "sl": SEQUENCE, "b": _BATCH, "tp": DEVICES}


def _values(value: Any) -> Iterable[Any]:
    return value if isinstance(value, (list, tuple)) else [value]


def check_range(field: str, value: Any, limits: Range) -> None:
    """Each number of ``value`` (one, or a list) is finite and inside ``limits``."""
    for item in _values(value):
        if item is None or isinstance(item, bool):
            continue
        if not isinstance(item, (int, float)):
            raise ConfigError(field, item, "must be a number")
        if not math.isfinite(item):
            raise ConfigError(field, item, "must be a finite number")
        if not limits.holds(item):
            raise ConfigError(field, item, f"lies outside the sane range {limits.describe()}")


def check_fields(prefix: str, obj: Any, table: Mapping[str, Range]) -> None:
    """``check_range`` on every field of ``obj`` (a dataclass) named in ``table``."""
    for name, limits in table.items():
        check_range(f"{prefix}.{name}", getattr(obj, name), limits)
