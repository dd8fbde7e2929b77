"""Sweep versions: a sweep's config, as a short name, so a changed config adds rows.

A sweep is known by its name and hardware; each distinct config run under that name is a
*version*, named by a short hash of the sweep's and the hardware's fingerprints. Every
version's rows stay in the lake. The log records which version each data file belongs to
(``sweep_version`` in its add entry); entries written before versions existed belong to
the version recorded last for their partition before them (a changed config could then
only replace the old one, so that is the version they were written under).
"""

from __future__ import annotations

import hashlib
from typing import Dict, Optional

__all__ = ["sweep_version", "manifest_version", "NO_VERSION", "VERSION_COLUMN"]

#: The version of rows whose partition has no sweep manifest (e.g. a calibration's fits).
NO_VERSION = ""
#: The column naming the sweep version of each row: in every data file written since it
#: existed (``LakeStore.commit``), and in every view (``sweeps.lake.views``).
VERSION_COLUMN = "sweep_version"


def sweep_version(sweep_fingerprint: str, hardware_fingerprint: str) -> str:
    """The version of a sweep config: 8 hex digits of sha256 over both fingerprints."""
    return hashlib.sha256(f"{sweep_fingerprint}\n{hardware_fingerprint}".encode()).hexdigest()[:8]


def manifest_version(manifest: Dict[str, object]) -> str:
    """The version a sweep manifest records (computed for manifests older than versions)."""
    recorded: Optional[object] = manifest.get("sweep_version")
    if isinstance(recorded, str) and recorded:
        return recorded
    return sweep_version(str(manifest.get("sweep_fingerprint", "")), str(manifest.get("hardware_fingerprint", "")))
