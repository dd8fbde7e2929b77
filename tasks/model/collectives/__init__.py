"""Communication: what a collective costs and which collectives run (imports ``terms`` and
``kernels``):

- ``nccl``: collective time per op, link tier and algorithm (NCCL's protocol curve, defined once);
- ``groups``: the distinct groups of ranks among many layouts' (what depends on a group alone
  is worked out once each);
- ``layer_comm``: one layer's TP and DP collectives;
- ``cp_exchange``: context parallelism's exchange of keys and values in one layer;
- ``ep_exchange``: expert parallelism's dispatch and combine of tokens in one MoE layer;
- ``dp_protocol``: what each way of sharding model states over DP splits and which
  collectives it runs, how often and behind what (the one statement of it);
- ``dp_calls``: a stage's DP collective split into calls as an engine runs it, and the copies
  around each call;
- ``dp_sums``: the DP collectives' figures summed over each layout's own sharding mode, by class;
- ``async_tp``: which TP collectives PyTorch's async TP fuses with their products, and the
  copies and sums its fused ops add.
"""

__all__ = ["nccl", "groups", "layer_comm", "cp_exchange", "ep_exchange", "dp_protocol", "dp_calls", "dp_sums",
           "async_tp"]
