"""The study's metrics, defined once (method.md §4 and §6; Pati et al., arXiv 2302.02825).

Every function is vectorised over NumPy arrays; times in seconds.
"""

from __future__ import annotations

import numpy as np

__all__ = [
    "serialized_fraction",
    "overlapped_communication",
    "overlap_percent",
    "exposed_communication",
    "communication_share",
    "latency_share",
    "compute_per_serialized_byte",
    "compute_per_overlapped_byte",
    "required_tp",
    "profiling_cost_ratio",
    "apply_flop_vs_bw",
]


def serialized_fraction(t_compute, t_tp_comm):
    """T_tp_comm / (T_compute + T_tp_comm): share of a layer's fwd+bwd time spent in
    serialized (TP) communication, which nothing can hide (method.md §6)."""
    return t_tp_comm / (t_compute + t_tp_comm)


def overlapped_communication(t_dp_comm, slowdown=1.0):
    """T_dp_comm * slowdown: how long the overlapped (DP) communication takes beside compute.

    ``slowdown`` >= 1 models interference on communication that runs beside compute
    (method.md §5.5). ``overlap_percent`` and ``exposed_communication`` both measure this
    time, so a row is exposed (exposed > T_tp_comm) exactly when its overlap percent
    exceeds 100."""
    return t_dp_comm * slowdown


def overlap_percent(t_dp_comm, t_overlappable_compute, slowdown=1.0):
    """100 * T_dp_comm * slowdown / T_overlappable_compute; above 100 the excess is
    exposed (§6)."""
    return 100.0 * overlapped_communication(t_dp_comm, slowdown) / t_overlappable_compute


def exposed_communication(t_tp_comm, t_dp_comm, t_overlappable_compute, slowdown=1.0):
    """T_tp_comm + max(0, T_dp_comm * slowdown - T_overlappable_compute) (§6)."""
    return t_tp_comm + np.maximum(0.0, overlapped_communication(t_dp_comm, slowdown) - t_overlappable_compute)


def communication_share(exposed, step_time):
    """Exposed communication / step time (§6)."""
    return exposed / step_time


def latency_share(latency, step_time):
    """Latency terms / step time: the part of a step that no bandwidth or FLOP rate can
    shrink (kernel launch floors and per-step α of collectives), the floor that limits how
    far a run can be spread (Erdil and Schneider-Joseph, arXiv 2411.01137)."""
    return latency / step_time


def compute_per_serialized_byte(flops, tp_bytes):
    """FLOPs per serialized byte, O((H + SL) / TP): compute's edge over TP traffic (§4)."""
    return flops / tp_bytes


def compute_per_overlapped_byte(backward_flops, dp_bytes):
    """Backprop FLOPs per overlapped byte, O(SL * B): the slack to hide DP traffic (§4)."""
    return backward_flops / dp_bytes


def required_tp(param_ratio, memory_growth, base_tp: float = 8.0):
    """Eq. 10 of Pati et al.: TP = base_TP * p / s.

    ``param_ratio`` p: the model's parameters over the reference model's (the 8.3B
    Megatron-LM model, trained at base_TP = 8); ``memory_growth`` s: how many times
    device memory grew meanwhile (method.md §4)."""
    return base_tp * np.asarray(param_ratio, dtype=np.float64) / memory_growth


def apply_flop_vs_bw(t_compute, multiplier):
    """Hardware evolution (§5.4): compute grows ``multiplier`` (m) times faster than
    network bandwidth, so compute time shrinks by m while communication stays."""
    return t_compute / multiplier


def profiling_cost_ratio(strategy_s, step_times_s, iterations, startup_s):
    """How many times cheaper the strategy is than running every configuration (§5.6;
    Pati et al. report over three orders of magnitude for about two hundred):
    sum over configurations of (start-up + iterations x step time), over the wall time
    the strategy spent (baseline, variations, fits, projection). Seconds throughout."""
    return (np.size(step_times_s) * startup_s + iterations * np.sum(step_times_s)) / strategy_s
