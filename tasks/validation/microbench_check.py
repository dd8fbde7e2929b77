"""Microbenchmark rows predicted: collective bus bandwidth (``collective_ladders.csv``, through
``tasks.model.collectives.nccl``) and GEMM throughput (``gemm_efficiency.csv``, through
``tasks.model.kernels.roofline``). Rows of systems without a hardware profile are listed as skipped.
A row's ``fitted_to`` cell (``fitted_cells``) names the figures fitted to it, and its record
carries them."""

from __future__ import annotations

import csv
from pathlib import Path
from typing import Dict, FrozenSet, List, Optional

from tasks.model.collectives.nccl import predicted_busbw
from tasks.model.kernels.gemm_published import predict_row, read_gemm_rows
from tasks.model.kernels.roofline import MissingFigure
from tasks.model.terms.specs import HardwareProfile
from tasks.validation.records import MODEL_VERSION, ValidationRecord, fitted_figures, signed_error

__all__ = ["LADDER_SYSTEM_PROFILES", "JUDGED_FROM_BYTES", "AT_SCALE_RANKS", "ladder_algorithm", "size_label",
           "read_ladder_rows", "ladder_row_bytes", "ladder_row_ranks", "fitted_cells", "validate_ladders",
           "validate_gemms", "NETWORK_BASES", "measured_networks", "network_basis"]

#: Ladder systems of ``collective_ladders.csv`` -> hardware profiles (``conf/hardware``), one by one.
LADDER_SYSTEM_PROFILES: Dict[str, str] = {
    "8xA100-SXM (NVLink3)": "a100-80gb",
    "8xH200-SXM (NVLink4)": "h200",
    "4 of 8xH200-SXM": "h200",
    "8xB200-SXM (NVLink5)": "b200",
    "4 nodes x 8xB200 (8x400G EFA per node)": "b200",
    "8xMI300X (XGMI)": "mi300x",
    "2 racks x 64 GB200 (NVL72 racks; 32 trays of 4)": "gb200",
    "2 nodes x 8xH100 A3 High (4x200G GPUDirect-TCPX)": "h100-a3-high",
}
#: Where a profile's scale-out efficiency (``inter_node.efficiency``) comes from: "measured"
#: (fitted to a ladder of its own system) or "assumed" (another system's ladder, or none).
NETWORK_BASES = ("measured", "assumed")
#: The ladder target judges every point from this size up (1 MiB).
JUDGED_FROM_BYTES = 1 << 20
#: Ladders of at least this many ranks are the at-scale check, shown apart without a target
#: (no profile figure is fitted to them; the one on hand is a vendor's example run).
AT_SCALE_RANKS = 64


def ladder_algorithm(name: str) -> Optional[str]:
    """A row's algorithm as ``predicted_busbw`` takes it: "ring" where the row forced the
    ring, None (the library's own choice, in-switch reduction where it has it) otherwise."""
    return "ring" if name.strip().lower().startswith("ring") else None


def size_label(n: int) -> str:
    """A message size for people: "16 MiB", "1 GiB"."""
    for unit, scale in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= scale:
            return f"{n / scale:g} {unit}"
    return f"{n} B"


def read_ladder_rows(path: Path) -> List[Dict[str, str]]:
    """The data rows of a csv with the columns of ``collective_ladders.csv``, in order (row i
    of a record is element i - 1)."""
    with open(path, encoding="utf-8", newline="") as f:
        return list(csv.DictReader(f))


def ladder_row_bytes(path: Path) -> Dict[int, int]:
    """Each ladder row's message size in bytes, by its 1-based row number (a record's ``row``)."""
    return {i: int(row["bytes"]) for i, row in enumerate(read_ladder_rows(path), start=1)}


def ladder_row_ranks(path: Path) -> Dict[int, int]:
    """Each ladder row's rank count, by its 1-based row number (a record's ``row``)."""
    return {i: int(row["gpus"]) for i, row in enumerate(read_ladder_rows(path), start=1)}


def fitted_cells(path: Path) -> Dict[int, str]:
    """Each data row's ``fitted_to`` (``records.fitted_figures``) by its 1-based row number:
    the figures fitted to that row, "" for none (every row of a file without the column)."""
    return {i: fitted_figures(row.get("fitted_to")) for i, row in enumerate(read_ladder_rows(path), start=1)}


def validate_ladders(path: Path, profiles: Dict[str, HardwareProfile], out) -> None:
    """A ``busbw`` record (GB/s) per ladder row whose system has a profile; others skipped."""
    for i, row in enumerate(read_ladder_rows(path), start=1):
        hw = profiles.get(LADDER_SYSTEM_PROFILES.get(row["system"], ""))
        if hw is None:
            out.skipped.append(f"{path.name} row {i}: no profile for {row['system']}")
            continue
        gpus, nodes, size = int(row["gpus"]), int(row["nodes"]), int(row["bytes"])
        predicted = float(predicted_busbw(row["op"], gpus, size, hw, nodes=nodes,
                                          algorithm=ladder_algorithm(row["algorithm"]))) / 1e9
        published = float(row["busbw_GBps"])
        out.records.append(ValidationRecord(
            dataset="collectives", source=row["system"], row=i, model=row["op"], hardware=hw.name, metric="busbw",
            unit="GB/s", published=published, predicted=predicted, error=signed_error(predicted, published),
            detail=f"{row['op']} {size_label(size)} x {gpus} ranks on {nodes} node(s), {row['algorithm']}",
            cost_model_version=MODEL_VERSION, fitted_to=fitted_figures(row.get("fitted_to"))))


def validate_gemms(path: Path, profiles: Dict[str, HardwareProfile], out, *, sweep: bool = False) -> None:
    """A ``gemm_tflops`` record per GEMM row whose accelerator has a profile; others skipped.
    ``sweep``: the file holds K sweeps (``read_gemm_rows``)."""
    fitted = fitted_cells(path)
    for row in read_gemm_rows(path, sweep=sweep):
        hw = profiles.get(row.profile or "")
        if hw is None:
            out.skipped.append(f"{path.name} row {row.row}: no profile for {row.gpu}")
            continue
        try:
            predicted, shape = predict_row(row, hw)
        except MissingFigure as exc:
            out.skipped.append(f"{path.name} row {row.row}: {exc}")
            continue
        shape_text = "x".join(str(s) for s in shape) + ("" if row.shape else " (best of the shapes tried)")
        out.records.append(ValidationRecord(
            dataset="gemm", source=f"{row.gpu} {row.kind}", row=row.row,
            model=row.dtype, hardware=hw.name, metric="gemm_tflops", unit="TF", published=row.tflops,
            predicted=predicted, error=signed_error(predicted, row.tflops), detail=shape_text,
            cost_model_version=MODEL_VERSION, fitted_to=fitted.get(row.row, "")))


def measured_networks(path: Path) -> FrozenSet[str]:
    """The profiles whose scale-out efficiency is fitted to a ladder of their own system: a
    row of ``path`` whose system ``LADDER_SYSTEM_PROFILES`` maps to the profile and whose
    ``fitted_to`` names ``PROFILE.inter_node.efficiency``."""
    return frozenset(profile for row in read_ladder_rows(path)
                     if (profile := LADDER_SYSTEM_PROFILES.get(row["system"]))
                     and f"{profile}.inter_node.efficiency" in fitted_figures(row.get("fitted_to")).split())


def network_basis(hw: HardwareProfile, measured: FrozenSet[str]) -> str:
    """One of ``NETWORK_BASES`` for ``hw``'s scale-out efficiency, given ``measured_networks``."""
    return NETWORK_BASES[0] if hw.name in measured else NETWORK_BASES[1]
