"""How far training can scale (imports ``search`` and below): a model family scaled with its
compute, the best run of each member within a duration on a cluster, and where the curve of
utilisation against compute turns (Erdil and Schneider-Joseph, arXiv 2411.01137):

- ``family``: the family member trained with a given compute, and its batch;
- ``frontier``: the fewest devices whose best layout trains it in time, and its utilisation;
- ``curve``: the compute where utilisation falls and where no layout finishes in time;
- ``rows``: the ``limits`` rows of the lake and the task body that computes them.
"""

__all__ = ["family", "frontier", "curve", "rows"]
