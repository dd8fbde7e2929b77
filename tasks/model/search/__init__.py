"""The layout search's space and rows (imports ``step`` and below):

- ``space``: candidate values per layout field, enumerated and costed exhaustively;
- ``rows``: objectives, their ranking, and the ``search`` and ``scaling`` rows of the lake;
- ``penalty``: what a sampler is told for a layout over memory;
- ``heap``: the C heap an enumerating process keeps between calls.
"""

__all__ = ["space", "rows", "penalty", "heap"]
