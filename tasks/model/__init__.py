"""The analytic cost model: plain NumPy over columns, nothing measured, nothing imported
from torch.

- ``specs``: the model and hardware dataclasses (also the YAML schemas);
- ``layer``: a tensor-parallel layer's GEMMs, element-wise work and message sizes;
- ``roofline``: kernel times from a hardware profile;
- ``gemm_published``: published matmul throughput beside the GEMM law's prediction of it;
- ``collectives``: collective time per op, link tier and algorithm (NCCL's protocol curve, defined once);
- ``communication``: one layer's TP and DP collectives;
- ``operators`` and ``opmodel``: operator classes and the fitted operator models' evaluation;
- ``projection``: the per-layer projection of the study's grid;
- ``metrics``: the study's metrics, defined once;
- ``dp_protocol``: what each way of sharding model states over DP splits and which
  collectives it runs (the one statement of it);
- ``layout``, ``space``, ``memory``, ``plan``, ``step``, ``step_parts``, ``search_rows``:
  parallel layouts, the plan of a step's operations, and the whole-step model summed from it
  that a layout search costs them with;
- ``timeline``: one layout's planned step laid out in time (a Trace Event file).
"""
