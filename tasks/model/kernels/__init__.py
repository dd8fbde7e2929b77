"""What a layer computes and how long its kernels take, from a hardware profile (imports
``terms`` only):

- ``block``: a layer's shape (``Block``) and a mixture-of-experts MLP's GEMM shapes;
- ``weights``: a layer's weights, as counts and as the tensors an engine moves;
- ``layer``: a tensor-parallel layer's GEMMs, element-wise work and message sizes;
- ``llama_eager``: the element-wise kernels of a Llama block in PyTorch ops, run uncompiled or
  compiled by Inductor (what it cannot fuse);
- ``roofline``: GEMM and memory-bound kernel times;
- ``attention``: fused attention's time;
- ``op_checkpoint``: what torchtitan's per-op checkpointing keeps of a layer and runs again;
- ``layer_cost``: one layer's compute pieces, forward and backward;
- ``sustained``: the rates a device sustains through training, against a short run's;
- ``moe_kernels``: the kernels a mixture-of-experts layer's MLP launches, by dispatcher;
- ``cuda_graphs``: the kernels a layer's CUDA-graphed parts take off the host's launches;
- ``model_blocks``: a model's layers (dense or mixture of experts) as layer shapes;
- ``gemm_published``: published matmul throughput beside the GEMM law's prediction of it.
"""

__all__ = ["block", "weights", "layer", "roofline", "attention", "layer_cost", "sustained", "gemm_published",
           "model_blocks", "moe_kernels", "cuda_graphs", "op_checkpoint", "llama_eager"]
