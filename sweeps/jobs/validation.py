"""The work of ``commscale validate``: every shipped hardware profile loaded and checked as a
run loads it, every published row predicted (``tasks.validation.validate``), and the records
committed to the lake as kind ``validation``.

    profiles = load_profiles()
    result = run_validation(profiles, datasets=("runs",), runs_file=Path("my_runs.csv"))
    commit_validation(Lake("lake"), result)

Bad input (a runs file that cannot be read, a cell that is no number, a row naming no
hardware profile or an impossible layout) raises ``DataFileError`` naming the file, the row
and the field, before anything is predicted and before the lake is touched.

A record's lake key is a hash of (dataset, source, row, metric, cost-model version, digest of
its inputs: its dataset's data files and the figures of the hardware profile it was predicted
with): committing the same model's records of the same inputs again adds nothing, while a new
cost-model version, an edited data file or a changed profile figure adds rows beside the
former ones, so the lake keeps the accuracy of every version and never serves a prediction
of figures since changed as the current one.
"""

from __future__ import annotations

import hashlib
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Dict, Optional, Sequence, Tuple

import pyarrow as pa

from conf import CONF_DIR
from sweeps.config import list_presets, load_preset
from sweeps.config.specs import validate_hardware
from sweeps.errors import DataFileError
from sweeps.lake import CommitResult, Lake
from sweeps.lake.kinds import VALIDATION, VALIDATION_ROW_SCHEMA
from tasks.identity import content_hash
from tasks.model.terms.specs import HardwareProfile, fingerprint
from tasks.validation.records import DATASETS, VALIDATION_SCHEMA_VERSION, RowError, dataset_files, records_table
from tasks.validation.validate import Validation, validate_all

__all__ = ["DATA_DIR", "PARTITION", "ValidationResult", "load_profiles", "data_files",
           "run_validation", "validation_key", "lake_rows", "commit_validation"]

#: The shipped published measurements (``conf/data``, installed with the package).
DATA_DIR = CONF_DIR / "data"
#: The one lake partition of kind ``validation``: its rows carry their own dataset and hardware.
PARTITION: Dict[str, str] = {"sweep": "validate"}


@dataclass
class ValidationResult:
    """One ``commscale validate``: its records and skipped rows (``validation``), the
    datasets asked for, the files each was read from, when (seconds since the epoch), and the
    ``specs.fingerprint`` of each hardware profile by name (its figures, not its prose)."""

    validation: Validation
    datasets: Sequence[str]
    files: Dict[str, Tuple[Path, ...]]
    validated_at: float
    profile_fingerprints: Dict[str, str]


def load_profiles() -> Dict[str, HardwareProfile]:
    """Every preset of ``conf/hardware``, composed and checked as ``hardware=NAME`` is
    (``ConfigError`` naming the field of the first one that cannot be used), by name."""
    profiles = {}
    for preset in list_presets("hardware"):
        hardware = load_preset("hardware", preset)
        validate_hardware(hardware)
        profiles[hardware.name] = hardware
    return profiles


def data_files(datasets: Sequence[str], runs_file: Optional[Path] = None) -> Dict[str, Tuple[Path, ...]]:
    """The files each of ``datasets`` is read from: the shipped ones (``dataset_files``), or
    ``runs_file`` for runs."""
    files = {name: tuple(DATA_DIR / f for f in dataset_files(name)) for name in datasets}
    if runs_file is not None and "runs" in files:
        files["runs"] = (Path(runs_file),)
    return files


def run_validation(profiles: Dict[str, HardwareProfile], *, datasets: Sequence[str] = DATASETS,
                   runs_file: Optional[Path] = None) -> ValidationResult:
    """Predict every row of ``datasets`` (the shipped data; ``runs_file``, a CSV with the
    columns of ``published_runs.csv``, stands in for the runs). ``DataFileError`` naming the
    file, row and field of the first row that cannot be used; nothing is written."""
    unknown = [name for name in datasets if name not in DATASETS]
    if unknown:
        raise DataFileError(f"unknown dataset(s) {', '.join(unknown)}; choose of {', '.join(DATASETS)}")
    started = time.time()
    try:
        validation = validate_all(profiles, DATA_DIR, runs_file=runs_file, datasets=tuple(datasets))
    except RowError as exc:
        raise DataFileError(str(exc)) from None
    return ValidationResult(validation, tuple(datasets), data_files(datasets, runs_file), started,
                            {name: fingerprint(hw) for name, hw in profiles.items()})


def _digest(paths: Sequence[Path]) -> str:
    """sha256 of the files' bytes, one after the other, 16 hex digits ("" if one cannot be
    read): a dataset's records are new when any file it reads changes."""
    digest = hashlib.sha256()
    try:
        for path in paths:
            digest.update(Path(path).read_bytes())
    except OSError:
        return ""
    return digest.hexdigest()[:16]


def validation_key(dataset: str, source: str, row: int, metric: str, cost_model_version: str,
                   data_digest: str) -> str:
    """The lake key of one validated record (kind ``validation``): its dataset, source, row
    and metric, the cost model that predicted it and the digest of its inputs."""
    return content_hash([dataset, source, row, metric, cost_model_version, data_digest], length=32)


def lake_rows(result: ValidationResult) -> pa.Table:
    """The records as ``VALIDATION_ROW_SCHEMA`` rows: each with its key, the digest of its
    inputs (``data_digest``: its dataset's files and its hardware profile's fingerprint, 16 hex
    digits) and when it was validated."""
    records = records_table(result.validation.records)
    digests = {name: _digest(paths) for name, paths in result.files.items()}
    digest = [content_hash([digests.get(dataset, ""), result.profile_fingerprints.get(hardware, "")])
              for dataset, hardware in zip(records.column("dataset").to_pylist(),
                                           records.column("hardware").to_pylist(), strict=True)]
    keys = [validation_key(r["dataset"], r["source"], r["row"], r["metric"], r["cost_model_version"], d)
            for r, d in zip(records.to_pylist(), digest, strict=True)]
    table = records.append_column("data_digest", pa.array(digest, pa.string()))
    table = table.append_column("validated_at", pa.array([result.validated_at] * table.num_rows, pa.float64()))
    return table.add_column(0, "key", pa.array(keys, pa.string())).select(VALIDATION_ROW_SCHEMA.names).cast(
        VALIDATION_ROW_SCHEMA)


def commit_validation(lake: Lake, result: ValidationResult) -> Optional[CommitResult]:
    """Commit the records to ``lake`` (kind ``validation``, one atomic commit); rows whose key
    is there already are not added again. None when there are no records."""
    table = lake_rows(result)
    if table.num_rows == 0:
        return None
    lake.ensure_writable()
    return lake.commit(VALIDATION, PARTITION, table, schema_version=VALIDATION_SCHEMA_VERSION)
