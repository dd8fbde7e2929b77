"""One layer's forward and backward time (``layer_times.csv``: Korthikanti et al. 2022,
Table 4) predicted with the step model's layer pieces (``tasks.model.step.parts``)."""

from __future__ import annotations

import csv
from pathlib import Path
from typing import Dict

from tasks.model.terms.layout import Layout
from tasks.model.terms.specs import HardwareProfile, TransformerModel
from tasks.model.terms.stack import Stack
from tasks.model.step.context import StepContext
from tasks.model.step.parts import layer_pass_times
from tasks.validation.predict_runs import find_profile
from tasks.validation.records import MODEL_VERSION, ValidationRecord, signed_error

__all__ = ["validate_layers"]


def _context(row: Dict[str, str], hw: HardwareProfile) -> StepContext:
    h, heads, sl = int(row["hidden"]), int(row["heads"]), int(row["seq"])
    model = TransformerModel(name=f"layer h{h}", year=0, layers=1, hidden=h, heads=heads, ffn_hidden=4 * h,
                             params_b=0.0, seq_len=sl, architecture="decoder", source=row["source"])
    tp = int(row["tp"])
    return StepContext(model, hw, devices=tp, global_batch=int(row["micro_batch"]), stack=Stack())


def validate_layers(path: Path, profiles: Dict[str, HardwareProfile], out) -> None:
    """Append a ``fwd_ms`` and a ``bwd_ms`` record per row of ``path`` to ``out.records``;
    rows whose hardware has no profile go to ``out.skipped``."""
    with open(path, encoding="utf-8", newline="") as f:
        rows = list(csv.DictReader(f))
    for i, row in enumerate(rows, start=1):
        hw = find_profile(row["hw"], profiles)
        if hw is None:
            out.skipped.append(f"{path.name} row {i}: no profile for {row['hw']}")
            continue
        sp = row["sequence_parallel"].strip().lower() == "true"
        layout = Layout(tp=int(row["tp"]), pp=1, dp=1, micro_batch=int(row["micro_batch"]),
                        sequence_parallel=sp, recompute=row["recompute"])
        times = layer_pass_times(layout, _context(row, hw))
        detail = f"h{row['hidden']} s{row['seq']} {layout.describe()}"
        for metric, seconds in (("fwd_ms", times["forward_s"]), ("bwd_ms", times["backward_s"])):
            published = float(row[metric])
            out.records.append(ValidationRecord(
                dataset="layers", source=row["source"], row=i, model=f"layer h{row['hidden']}", hardware=hw.name,
                metric=metric, unit="ms", published=published, predicted=seconds * 1e3,
                error=signed_error(seconds * 1e3, published), detail=detail, cost_model_version=MODEL_VERSION))
