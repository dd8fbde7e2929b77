"""Kernels one mixture-of-experts layer's MLP launches from the host in training, as
Megatron-Core runs it: what the host's launch path (``Stack.host_launch_us``) charges a MoE
layer. Read from Megatron-LM core_v0.15.3 (309ffca6; ``moe/router.py``, ``moe_utils.py``,
``token_dispatcher.py``, ``experts.py``) with the Transformer Engine (v2.9) and DeepEP (v1.2.1)
functions it calls, under the configuration Megatron-Bridge's MoE benchmarks set (router
and permute fusion, grouped GEMM with a fused SwiGLU, dropless routing, a softmax router with
the aux loss), counted from the source, not profiled:

- the alltoall dispatcher (``MoEAlltoAllTokenDispatcher``): forward 30 + 2L kernels (router
  GEMM, forced-balance noise, fused top-k, the aux loss's scores, counts and value and its
  tracker, the dispatch's token counts and an all-gather of them, the fused permutation, the
  dispatch all-to-alls of tokens and probabilities, the chunk sort, L expert GEMMs for FC1 and
  L for FC2, the activation, the combine's chunk sort and all-to-all, the unpermutation),
  backward 19 + 4L (each expert GEMM's input and weight gradients); L = experts / EP, the
  device's local experts, each expert's GEMM one cuBLAS kernel (TE's grouped linear runs
  ``multi_stream_cublas_gemm``);
- the flex dispatcher over DeepEP: forward about 43 + 2L, backward about 32 + 4L (DeepEP's
  five kernels replace the all-gather, sums and all-to-alls, and converting its indices to a
  mask, unfused at that release, adds about 20 forward and 11 backward);
- a shared expert: 4 more forward (FC1, activation, FC2, the add), 6 backward;
- outside Transformer Engine's fused MLP (``Stack.moe_fused_mlp`` off), at d0b3b775 (the
  commit Megatron-Bridge v0.5.0 pins): experts that clamp their activation (GPT-OSS) 3 more
  forward (the two halves' clamps and their concatenation, ``weighted_bias_quick_geglu_impl``)
  and 3 backward; experts with biases 2 + 2L forward (``TEGroupedMLP._apply_bias``: a product
  and a sum per local expert, the concatenation, the cast) and 3 + 5L backward (the cast's
  gradient, per local expert the output gradient's cast and the bias's and probabilities'
  products and sums, and two concatenations) (``layer.MOE_UNFUSED_KERNELS``' bytes).

The alltoall dispatcher also synchronises the host with the device once per layer's forward
(``token_dispatcher.py`` 857-859: the host waits for the token counts before the dispatch),
the flex one four times forward (``_indices_to_multihot``'s two boolean-mask indexings and
its ``repeat_interleave``, 1034-1039; DeepEP's dispatch, whose CPU waits for the receive
counts, ``fused_a2a.py`` 102-104) and once backward (``HOST_SYNCS``); the waits of a forward
that full recomputation repeats are not counted. The launches of the fp8 casts of the expert
GEMMs' inputs are not counted (their bytes are: ``layer_cost._fp8_casts``).
"""

from __future__ import annotations

from typing import Dict, Tuple

import numpy as np

__all__ = ["ALLTOALL_KERNELS", "FLEX_KERNELS", "SHARED_EXPERT_KERNELS", "EXPERT_CLAMP_KERNELS", "EXPERT_BIAS_KERNELS",
           "HOST_SYNCS", "moe_mlp_kernels", "by_dispatcher"]

#: (forward, backward) kernels of a MoE layer's MLP as (fixed, per local expert), by dispatcher.
ALLTOALL_KERNELS: Tuple[Tuple[int, int], Tuple[int, int]] = ((30, 2), (19, 4))
FLEX_KERNELS: Tuple[Tuple[int, int], Tuple[int, int]] = ((43, 2), (32, 4))
#: (forward, backward) host-device synchronisations of a MoE layer's MLP, by dispatcher.
HOST_SYNCS: Dict[str, Tuple[int, int]] = {"alltoall": (1, 0), "flex": (4, 1)}
#: (forward, backward) kernels a shared expert adds.
SHARED_EXPERT_KERNELS: Tuple[int, int] = (4, 6)
#: (forward, backward) kernels an unfused clamp of the experts' activation adds.
EXPERT_CLAMP_KERNELS: Tuple[int, int] = (3, 3)
#: (forward, backward) kernels unfused expert biases add, as (fixed, per local expert).
EXPERT_BIAS_KERNELS: Tuple[Tuple[int, int], Tuple[int, int]] = ((2, 2), (3, 5))


def moe_mlp_kernels(local_experts, flex, shared: bool, *, clamp: bool = False,
                    bias: bool = False) -> Tuple[np.ndarray, np.ndarray]:
    """(forward, backward) kernels of one MoE layer's MLP on a device holding ``local_experts``
    experts (experts / EP; scalars or arrays), with the flex dispatcher where ``flex`` (a bool
    or bool array), a shared expert where ``shared``, and an unfused clamp of the experts'
    activation and unfused expert biases where ``clamp`` and ``bias`` (module docstring)."""
    local = np.asarray(local_experts, dtype=np.float64)
    flex = np.asarray(flex, dtype=bool)
    out = []
    for (a_fixed, a_each), (f_fixed, f_each), extra, clamped, (b_fixed, b_each) in zip(
            ALLTOALL_KERNELS, FLEX_KERNELS, SHARED_EXPERT_KERNELS, EXPERT_CLAMP_KERNELS, EXPERT_BIAS_KERNELS,
            strict=True):
        count = np.where(flex, f_fixed + f_each * local, a_fixed + a_each * local)
        out.append(count + (extra if shared else 0) + (clamped if clamp else 0)
                   + ((b_fixed + b_each * local) if bias else 0.0))
    return out[0], out[1]


def by_dispatcher(table: Dict[str, Tuple[int, int]], flex) -> Tuple[np.ndarray, np.ndarray]:
    """(forward, backward) figures of ``table`` (keyed "alltoall" and "flex") for each layout:
    flex's where ``flex`` (a bool or bool array), else the alltoall dispatcher's."""
    return (np.where(flex, table["flex"][0], table["alltoall"][0]),
            np.where(flex, table["flex"][1], table["alltoall"][1]))
