"""The result kinds of the lake, named once: each kind's table schema and its version.

Every module that reads or writes a kind names it by these constants, never by a string.
"""

from __future__ import annotations

from typing import Dict, Tuple

import pyarrow as pa

from tasks.fit import accuracy
from tasks.fit.alpha_beta import FIT_SCHEMA, FIT_SCHEMA_VERSION
from tasks.measure import baseline, kernels, probe
from tasks.model.projection import grid as projection
from tasks.model.codesign import evaluate as codesign_rows
from tasks.model.limits import rows as limits_rows
from tasks.model.search import rows as search_rows
from tasks.outcomes import FAILURE_SCHEMA
from tasks.validation.records import VALIDATION_SCHEMA, VALIDATION_SCHEMA_VERSION

__all__ = ["PROJECTION", "PROBE", "FAILURE", "ROI", "COLLECTIVE_FIT", "SEARCH", "SCALING", "BASELINE", "OPMODEL",
           "ACCURACY", "VALIDATION", "LIMITS", "CODESIGN", "VALIDATION_ROW_SCHEMA", "SCHEMAS", "FAILURE_SCHEMA_VERSION",
           "SHARED_KINDS"]

PROJECTION = "projection"      # one configuration x hardware scenario, projected
PROBE = "probe"                # a synthetic point of `commscale probe`
FAILURE = "failure"            # one failed attempt at a point, with its traceback
ROI = "roi"                    # one measured kernel or collective
COLLECTIVE_FIT = "collective_fit"  # an α-β fit of measured collectives
SEARCH = "search"              # one trial of a layout search
SCALING = "scaling"            # the best layout of a space for one model and device count
BASELINE = "baseline"          # per-operator times of one profiled layer step
OPMODEL = "opmodel"            # a fitted operator model
ACCURACY = "accuracy"          # a held-out configuration, projected against measured
VALIDATION = "validation"      # a published measurement, predicted by the cost model (`commscale validate`)
LIMITS = "limits"              # one training compute of a scaled family, its best run in a duration (`commscale limits`)
CODESIGN = "codesign"          # one trial of a hardware co-design study (`commscale codesign`)

FAILURE_SCHEMA_VERSION = 1

#: Kinds whose key names a measurement whatever the sweep: a row measured under one version
#: of a sweep serves every later one, so their views show every version's rows. The fits
#: and judgements made from measurements (collective_fit, opmodel, accuracy) are keyed by
#: those measurements and committed without a version: they too serve every later version.
SHARED_KINDS = frozenset({ROI, COLLECTIVE_FIT, OPMODEL, ACCURACY})

#: A ``validation`` row: ``tasks.validation.records.VALIDATION_SCHEMA`` with the lake's key,
#: ``data_digest`` (16 hex digits of sha256 over what the row was predicted from: the data
#: files it was read from and its hardware profile's figures) and
#: ``validated_at`` (seconds since the epoch of the ``commscale validate`` that committed it).
VALIDATION_ROW_SCHEMA = pa.schema([pa.field("key", pa.string()), *VALIDATION_SCHEMA,
                                   pa.field("data_digest", pa.string()), pa.field("validated_at", pa.float64())])

#: kind -> (schema, version) that this commscale writes and reads.
SCHEMAS: Dict[str, Tuple[pa.Schema, int]] = {
    PROJECTION: (projection.PROJECTION_SCHEMA, projection.SCHEMA_VERSION),
    PROBE: (probe.PROBE_SCHEMA, probe.SCHEMA_VERSION),
    FAILURE: (FAILURE_SCHEMA, FAILURE_SCHEMA_VERSION),
    ROI: (kernels.ROI_SCHEMA, kernels.SCHEMA_VERSION),
    COLLECTIVE_FIT: (FIT_SCHEMA, FIT_SCHEMA_VERSION),
    SEARCH: (search_rows.SEARCH_SCHEMA, search_rows.SEARCH_SCHEMA_VERSION),
    SCALING: (search_rows.SCALING_SCHEMA, search_rows.SCALING_SCHEMA_VERSION),
    BASELINE: (baseline.BASELINE_SCHEMA, baseline.SCHEMA_VERSION),
    OPMODEL: (accuracy.OPMODEL_SCHEMA, accuracy.OPMODEL_SCHEMA_VERSION),
    ACCURACY: (accuracy.ACCURACY_SCHEMA, accuracy.ACCURACY_SCHEMA_VERSION),
    VALIDATION: (VALIDATION_ROW_SCHEMA, VALIDATION_SCHEMA_VERSION),
    LIMITS: (limits_rows.LIMITS_SCHEMA, limits_rows.LIMITS_SCHEMA_VERSION),
    CODESIGN: (codesign_rows.CODESIGN_SCHEMA, codesign_rows.CODESIGN_SCHEMA_VERSION),
}
