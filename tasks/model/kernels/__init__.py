"""What a layer computes and how long its kernels take, from a hardware profile (imports
``terms`` only):

- ``layer``: a tensor-parallel layer's GEMMs, element-wise work and message sizes;
- ``roofline``: GEMM and memory-bound kernel times;
- ``attention``: fused attention's time;
- ``layer_cost``: one layer's compute pieces, forward and backward;
- ``sustained``: the rates a device sustains through training, against a short run's;
- ``gemm_published``: published matmul throughput beside the GEMM law's prediction of it.
"""

__all__ = ["layer", "roofline", "attention", "layer_cost", "sustained", "gemm_published"]
