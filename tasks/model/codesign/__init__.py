"""Hardware co-design (imports ``search`` and below): a layout and the hardware it runs on
searched together against the cluster's cost.

- ``knobs``: the hardware a search may change (scale-up domain and bandwidth, scale-out
  bandwidth, HBM, FLOP rate, device count) and the assumed cost of each choice;
- ``evaluate``: points (knobs and a layout) costed by the step model, and a space of them
  costed exhaustively; the ``codesign`` rows of the lake;
- ``pareto``: the front of two minimised objectives and its hypervolume.
"""

__all__ = ["knobs", "evaluate", "pareto"]
