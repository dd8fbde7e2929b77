"""Kernels the host no longer launches one at a time when Megatron-Core captures parts of
every layer in CUDA graphs and runs the rest eagerly (``Stack.cuda_graph_scope``;
Transformer Engine's per-layer graphs, cuda_graph_impl transformer_engine, which
Megatron-Bridge's MoE benchmarks run with the scopes attn, moe_router and moe_preprocess).

A captured part replays as one graph in the forward pass and one in the backward, each a
launch of the host's path (``Stack.host_launch_us``; an assumption: a graph's replay through
Transformer Engine's graphed callable is taken to cost the host what one kernel does). The
kernels it captures (counted as the rest of the model counts them):

- "attn": the attention sublayer's forward kernels (``LayerCost.kernels_attention``) and the
  backward's two for each;
- "moe_router": a MoE layer's pre-MLP norm and its router (the gating GEMM, the forced-balance
  scores, the fused top-k, the aux loss and its tracker), ``ROUTER_KERNELS``;
- "moe_preprocess": the token dispatcher's preprocessing after the router, by dispatcher,
  ``PREPROCESS_KERNELS``.

Router and preprocessing are a share of ``moe_kernels``' fixed counts, split by where each
kernel is launched in Megatron-LM core_v0.15.3 (309ffca6), whose ``MoELayer.router_and_preprocess``
(``moe/moe_layer.py`` 169-182) is the boundary the later scopes capture:

- the router (``TopKRouter.forward``, ``moe/router.py`` 541-560, the same for both
  dispatchers): forward 9 (the gating GEMM, the forced-balance noise's copy and draw, the
  fused top-k, the aux loss's scores, the routing map's sum, the fused aux loss, the
  tracker's two), backward 12 (the aux-loss scaler's two, the aux loss's, the scores', the
  top-k's, the two logits gradients' sum, and the fp32 gating GEMM's two GEMMs and four
  casts: a router in fp32, ``moe_router_dtype``, as Megatron-Bridge's MoE recipes run it);
- the alltoall dispatcher's preprocessing (``token_dispatcher.py`` 466-604): forward 11 (the
  counts' five sums, their all-gather and a copy, the fused permutation's four), backward 1
  (the permutation's); its host waits for the counts later, at the dispatch, outside it;
- the flex dispatcher's (``token_dispatcher.py`` 977, 1199-1208): forward 2 (a top-k's gather
  and sort), backward 2; DeepEP's layout, its dispatch and the indices' conversion to a mask
  come after it.
"""

from __future__ import annotations

from typing import Dict, Tuple, Union

import numpy as np

from tasks.model.kernels.moe_kernels import by_dispatcher
from tasks.model.terms.stack import graph_scopes

__all__ = ["ROUTER_KERNELS", "PREPROCESS_KERNELS", "graphed_kernels"]

#: A count of kernels: an array over layouts, or one number for all of them.
Kernels = Union[np.ndarray, float]
#: (forward, backward) kernels of the "moe_router" scope: the pre-MLP norm (1, 1) and the router.
ROUTER_KERNELS: Tuple[int, int] = (1 + 9, 1 + 12)
#: (forward, backward) kernels of the "moe_preprocess" scope, by dispatcher.
PREPROCESS_KERNELS: Dict[str, Tuple[int, int]] = {"alltoall": (11, 1), "flex": (2, 2)}


def graphed_kernels(scope: str, attention_fwd, moe_share: float, flex) -> Tuple[Kernels, Kernels]:
    """(forward, backward) kernels one layer's micro-batch no longer launches from the host
    under ``scope`` (a ``Stack.cuda_graph_scope``), less the graphs' own replays (one each
    pass): the attention sublayer's ``attention_fwd`` forward kernels and the backward's twice
    as many under "attn", and on the ``moe_share`` of layers that are MoE layers the router's
    and, under "moe_preprocess", the dispatcher's preprocessing (``flex``: a bool or bool
    array, the flex dispatcher's counts, else the alltoall's). (0.0, 0.0) for ""."""
    scopes = graph_scopes(scope)
    if not scopes:
        return 0.0, 0.0
    fwd, bwd = np.zeros(np.shape(flex)), np.zeros(np.shape(flex))
    if "attn" in scopes:
        attention = np.asarray(attention_fwd, dtype=np.float64)
        fwd, bwd = fwd + attention - 1, bwd + 2 * attention - 1
    if "moe_router" in scopes and moe_share > 0:
        pre_fwd, pre_bwd = by_dispatcher(PREPROCESS_KERNELS, flex) if "moe_preprocess" in scopes else (0, 0)
        fwd = fwd + moe_share * (ROUTER_KERNELS[0] + pre_fwd - 1)
        bwd = bwd + moe_share * (ROUTER_KERNELS[1] + pre_bwd - 1)
    return fwd, bwd
