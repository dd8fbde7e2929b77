"""The analytic cost model: plain NumPy over columns, nothing measured, nothing imported
from torch. Its folders read in one direction, each importing only those before it
(``tests/test_structure.py`` holds them to it):

- ``terms``: model and hardware specs, stacks, layouts, metrics;
- ``kernels``: a layer's GEMMs and element-wise work, and their times;
- ``collectives``: collective times per link tier, a layer's collectives, the DP protocol;
- ``step``: the whole training step, its plan, memory and timeline;
- ``search``: the layout search's space and rows;
- ``projection``: the per-layer projection of the study's grid.
"""
