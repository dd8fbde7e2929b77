"""What runs on a worker: the cost model and, later, measurements.

Plain functions on plain data (dataclasses, NumPy arrays, Arrow tables). Nothing here
imports Ray, the driver (``sweeps``) or the readers (``analysis``), and nothing needs a
GPU to be imported.
"""
