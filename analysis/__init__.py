"""Reading the lake: SQL through DuckDB, pandas frames, summaries."""
