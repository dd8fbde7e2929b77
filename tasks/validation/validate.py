"""``validate``: every published row predicted with the models the search uses, as
``ValidationRecord``s (``tasks.validation.records``).

Five datasets: whole training runs (``published_runs.csv`` or any CSV with its columns,
through ``tasks.model.step.plan``), one layer's forward and backward time (``layer_times.csv``,
through the same step model's layer pieces), collective bus bandwidth (``collective_ladders.csv``,
through ``tasks.model.collectives.nccl``), GEMM throughput (``gemm_efficiency.csv`` and the K
sweeps of ``gemm_k_sweeps.csv``, through ``tasks.model.kernels.roofline``), and the held-out runs
(``holdout_runs.csv``, predicted as the runs are, dataset ``HELD_OUT``). Rows whose hardware
has no profile are listed as skipped, except in a runs file, where an unknown hardware name
is an error naming the row; a run of mixture-of-experts layers, which the model does not
express yet, is listed as skipped (``runs.unmodelled``). A microbenchmark row's ``fitted_to`` cell names the figures
fitted to it (``ValidationRecord.fitted_to``); no training run is fitted to.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Dict, FrozenSet, List, Optional, Sequence

from tasks.model.kernels.attention import ATTENTION_BASES, attention_basis
from tasks.model.kernels.roofline import MissingFigure, gemm_ceiling, peak_flops
from tasks.model.kernels.sustained import SUSTAINED_BASES, sustained_basis
from tasks.model.step.dp_comm import SM_HOLD_BASES, sm_hold_basis
from tasks.model.terms.specs import HardwareProfile
from tasks.model.terms.stack import DEFAULT_ATTENTION_IMPL
from tasks.validation import layers_check, microbench_check
from tasks.validation.predict_runs import find_profile, predict_run
from tasks.validation.records import (DATA_FILES, DATASETS, GEMM_SWEEPS_FILE, HELD_OUT, MODEL_VERSION,
                                      ValidationRecord, signed_error)
from tasks.validation.runs import METRICS, PublishedRun, read_runs

__all__ = ["Validation", "validate_runs", "validate_all", "SUSTAINED_WORDS", "sustained_note", "ATTENTION_WORDS",
           "attention_note", "NETWORK_WORDS", "SM_HOLD_WORDS", "detail_parts"]

#: How a run's detail names the sustained rate its compute rests on
#: (``tasks.model.kernels.sustained.sustained_basis``).
SUSTAINED_WORDS = dict(zip(SUSTAINED_BASES, ("sustained rate measured", "sustained rate assumed",
                                             "no sustained rate: short-run ceiling assumed"), strict=True))


#: How a run's detail names the fused-attention rate it rests on
#: (``tasks.model.kernels.attention.attention_basis``).
ATTENTION_WORDS = dict(zip(ATTENTION_BASES, ("attention rate measured", "attention rate assumed"), strict=True))

#: How the detail of a run across nodes names the scale-out rate it rests on
#: (``microbench_check.network_basis``).
NETWORK_WORDS = dict(zip(microbench_check.NETWORK_BASES, ("network rate measured", "network rate assumed"),
                         strict=True))


#: How the detail of a run with DP collectives names the SMs NCCL holds while they hide
#: (``tasks.model.step.dp_comm.sm_hold_basis``).
SM_HOLD_WORDS = dict(zip(SM_HOLD_BASES, ("collective SMs read", "collective SMs assumed",
                                         "collective SMs not charged"), strict=True))


def attention_note(hw: HardwareProfile, impl: str = DEFAULT_ATTENTION_IMPL, head_dim=128.0) -> str:
    """The words a run's detail gives the fused-attention rate it rests on: measured on its
    device for its heads' width, or assumed (another device's rows as fractions of its peak,
    or another width's), naming the kernel where it is not cuDNN's (``Stack.attention_impl``)."""
    words = ATTENTION_WORDS[attention_basis(hw, impl, head_dim)]
    return words if impl == DEFAULT_ATTENTION_IMPL else f"{words} ({impl})"


def detail_parts(detail: str) -> List[str]:
    """A record's detail cut at its "; ", each part without the bracket ``attention_note`` adds
    after a kernel's basis: the words ``SUSTAINED_WORDS`` and ``ATTENTION_WORDS`` hold stand alone."""
    return [part.split(" (")[0] for part in detail.split("; ")]


def sustained_note(hw: HardwareProfile, precision: str) -> str:
    """The words a run's detail gives the sustained rate its compute rests on: measured for
    its device and precision, assumed (a sibling's measurement), or none (the short-run
    ceiling taken to hold through training)."""
    return SUSTAINED_WORDS[sustained_basis(hw, precision)]

@dataclass
class Validation:
    """Records, and the rows skipped with why (``"file row N: why"``)."""

    records: List[ValidationRecord] = field(default_factory=list)
    skipped: List[str] = field(default_factory=list)


def _run_record(run: PublishedRun, hw: HardwareProfile, dataset: str,
                networks: Optional[FrozenSet[str]]) -> ValidationRecord:
    pred = predict_run(run, hw)
    detail = (f"{pred.layout.describe()}; {pred.step_time_s:.3g} s/step; {pred.describe_memory()}; "
              f"{sustained_note(hw, run.precision)}")
    if run.flash_attention:
        detail += f"; {attention_note(hw, run.attention_impl, pred.head_dim)}"
    if pred.layout.dp * pred.layout.cp > 1:
        detail += f"; {SM_HOLD_WORDS[sm_hold_basis(hw)]}"
    if networks is not None and run.gpus > pred.devices_per_node:
        detail += f"; {NETWORK_WORDS[microbench_check.network_basis(hw, networks)]}"
    if run.cluster:
        detail += "; its cluster: " + ", ".join(f"{name} {value:g}" for name, value in run.cluster.items())
    return ValidationRecord(dataset=dataset, source=run.source, row=run.row, model=run.model, hardware=hw.name,
                            metric=run.metric, unit=METRICS[run.metric], published=run.value,
                            predicted=pred.value, error=signed_error(pred.value, run.value), detail=detail,
                            cost_model_version=MODEL_VERSION)


def validate_runs(runs: Sequence[PublishedRun], profiles: Dict[str, HardwareProfile], *,
                  dataset: str = "runs", networks: Optional[FrozenSet[str]] = None) -> List[ValidationRecord]:
    """A record of ``dataset`` per run; ``RowError`` naming the first row whose hardware has no profile,
    whose precision its profile lacks (fp8 on A100), or whose layout cannot run (hardware and
    precision checked for every row before any is predicted). Given ``networks``
    (``microbench_check.measured_networks``), a run across nodes says whether its profile's
    scale-out rate is measured (a profile of them) or assumed."""
    matched = []
    for run in runs:
        hw = find_profile(run.hw, profiles)
        if hw is None:
            raise run.error("hw", run.hw, f"names no hardware profile (known: {', '.join(sorted(profiles))})")
        try:
            peak_flops(hw, run.precision) * gemm_ceiling(hw, run.precision)
        except MissingFigure as exc:
            raise run.error("precision", run.precision, f"cannot run on {hw.name}: {exc}") from None
        matched.append((run, hw))
    return [_run_record(run, hw, dataset, networks) for run, hw in matched]


def validate_all(profiles: Dict[str, HardwareProfile], data_dir: Path, *, runs_file: Optional[Path] = None,
                 datasets: Sequence[str] = DATASETS) -> Validation:
    """Validate the shipped data in ``data_dir`` (``runs_file`` stands in for its runs, not
    for the held-out ones)."""
    out = Validation()
    networks = microbench_check.measured_networks(data_dir / DATA_FILES["collectives"])
    if "runs" in datasets:
        out.records += validate_runs(read_runs(runs_file or data_dir / DATA_FILES["runs"], out.skipped), profiles,
                                     networks=networks)
    if "layers" in datasets:
        layers_check.validate_layers(data_dir / DATA_FILES["layers"], profiles, out)
    if "collectives" in datasets:
        microbench_check.validate_ladders(data_dir / DATA_FILES["collectives"], profiles, out)
    if "gemm" in datasets:
        microbench_check.validate_gemms(data_dir / DATA_FILES["gemm"], profiles, out)
        microbench_check.validate_gemms(data_dir / GEMM_SWEEPS_FILE, profiles, out, sweep=True)
    if HELD_OUT in datasets:
        out.records += validate_runs(read_runs(data_dir / DATA_FILES[HELD_OUT], out.skipped), profiles,
                                     dataset=HELD_OUT, networks=networks)
    return out
