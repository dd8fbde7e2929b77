"""Test support, not product: what the tests, the cluster script (``scripts/cluster.py``) and
the scale-out benchmark need to stand up real infrastructure on one host. No module of
``sweeps``, ``tasks`` or ``analysis`` imports it (``tests/test_structure.py`` holds them to it).

- ``loopback``: a multi-node Ray cluster of separate ``ray start`` processes on 127.0.0.1,
  token authentication on.
"""

__all__ = ["loopback"]
