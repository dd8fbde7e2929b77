"""The Parquet lake: hive-partitioned result files behind a commit log.

- ``log``: the root, the commit log, its lock and format;
- ``store``: the commit protocol and the reads;
- ``entries``: the log's entries, sealed and checked, and the log as a sequence;
- ``integrity``: whether a data file holds what its commit recorded;
- ``repair``: verify and repair (no committed row lost);
- ``maintenance``: ``Lake`` = the store plus verify, repair, vacuum and upgrade;
- ``files``: files written whole (temporary name, fsync, rename);
- ``kinds``: the result kinds, named once, with their schemas and versions;
- ``views``: DuckDB views over the committed files.
"""

from sweeps.lake.log import LAKE_FORMAT
from sweeps.lake.maintenance import Lake, UpgradeReport, VacuumReport, VerifyReport
from sweeps.lake.store import CommitResult

__all__ = ["Lake", "LAKE_FORMAT", "CommitResult", "VerifyReport", "VacuumReport", "UpgradeReport"]
