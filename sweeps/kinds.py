"""The result kinds of the lake: each one's table schema and its version."""

from __future__ import annotations

from typing import Dict, Tuple

import pyarrow as pa

from tasks.fit import accuracy
from tasks.fit.alpha_beta import FIT_SCHEMA, FIT_SCHEMA_VERSION
from tasks.measure import baseline, kernels, probe
from tasks.model import projection, search_rows
from tasks.outcomes import FAILURE_SCHEMA

__all__ = ["SCHEMAS", "FAILURE_KIND", "FAILURE_SCHEMA_VERSION"]

FAILURE_KIND = "failure"
FAILURE_SCHEMA_VERSION = 1

#: kind -> (schema, version) that this commscale writes and reads.
SCHEMAS: Dict[str, Tuple[pa.Schema, int]] = {
    "projection": (projection.PROJECTION_SCHEMA, projection.SCHEMA_VERSION),
    "probe": (probe.PROBE_SCHEMA, probe.SCHEMA_VERSION),
    FAILURE_KIND: (FAILURE_SCHEMA, FAILURE_SCHEMA_VERSION),
    "roi": (kernels.ROI_SCHEMA, kernels.SCHEMA_VERSION),
    "collective_fit": (FIT_SCHEMA, FIT_SCHEMA_VERSION),
    "search": (search_rows.SEARCH_SCHEMA, search_rows.SEARCH_SCHEMA_VERSION),
    "scaling": (search_rows.SCALING_SCHEMA, search_rows.SCALING_SCHEMA_VERSION),
    "baseline": (baseline.BASELINE_SCHEMA, baseline.SCHEMA_VERSION),
    "opmodel": (accuracy.OPMODEL_SCHEMA, accuracy.OPMODEL_SCHEMA_VERSION),
    "accuracy": (accuracy.ACCURACY_SCHEMA, accuracy.ACCURACY_SCHEMA_VERSION),
}
