"""The per-layer projection of the study's grid (imports ``terms``, ``kernels`` and
``collectives``):

- ``grid``: the projection of a grid of (H, SL, B, TP) points, its table and version;
- ``operators`` and ``opmodel``: operator classes and the fitted operator models" evaluation.
"""

__all__ = ["grid", "operators", "opmodel"]
