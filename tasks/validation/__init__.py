"""Validation against published measurements: each shipped row predicted by the same models
the search uses (``tasks.model``), with its signed error."""
