"""A planned sweep: its points (each with a key), what runs them, and its identity."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Dict

import pyarrow as pa

from sweeps.jobs.work import Workload
from sweeps.lake.versions import sweep_version

__all__ = ["SweepJob"]


@dataclass
class SweepJob:
    """A planned sweep: its points (with keys), what runs them, and its identity.

    ``config`` is the JSON-able config the manifest keeps (diffed to name what changed);
    ``sweep_fingerprint`` must change whenever the points would, except through the
    hardware, which ``hardware_fingerprint`` covers (one partition per hardware name).
    """

    name: str
    hardware: str
    points: pa.Table
    workload: Workload
    config: Dict[str, Any]
    sweep_fingerprint: str
    hardware_fingerprint: str
    #: Keys identify a measurement whatever the sweep: a key committed by any sweep counts.
    share_results: bool = False

    @property
    def version(self) -> str:
        """The version of this config of the sweep (``sweeps.lake.versions.sweep_version``)."""
        return sweep_version(self.sweep_fingerprint, self.hardware_fingerprint)

    @property
    def partition(self) -> Dict[str, str]:
        return {"sweep": self.name, "hardware": self.hardware}
