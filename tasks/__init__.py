"""What runs on a worker: the cost model, measurements and fits.

- ``model/``: the analytic cost model (NumPy only);
- ``measure/``: measurements on real devices (PyTorch);
- ``fit/``: fits of what was measured;
- ``outcomes``: how a task's point ends (ok, infeasible, oom, failure), ``identity``: the
  content hash of keys, ``device``: device and element-type names.

Plain functions on plain data (dataclasses, NumPy arrays, Arrow tables). Nothing here
imports Ray, the driver (``sweeps``) or the readers (``analysis``), and nothing needs a
GPU to be imported.
"""
