"""How a stage's DP collective is split into calls, and what each call costs beside NCCL's
own time, as a DP engine runs it (``dp_protocol.GRANULARITIES``, ``DpEngine``): a layer's
weights a call (and one for the stage's embedding matrices); a weight tensor a call, with
the copies PyTorch's list API and the engine make around it and without the tensors the
engine keeps gathered; the engine's buckets; or one call a step on those kept tensors.
Seconds, bytes and values; vectorised over layouts (``DpStage``'s arrays)."""

from __future__ import annotations

from typing import Dict, NamedTuple, Optional, Tuple

import numpy as np

from tasks.model.collectives.dp_protocol import DpEngine
from tasks.model.collectives.nccl import tier_time
from tasks.model.kernels import roofline
from tasks.model.terms.specs import HardwareProfile

__all__ = ["DpStage", "layer_tensor_values", "kept_gathered", "persistent_values", "call_copies", "latency_calls",
           "split_into_calls"]


class DpStage(NamedTuple):
    """What splitting a stage's DP collective into calls reads, per layout: ``tp``, the DP
    group's ``ranks``, the stage's ``layers``, its ``embedding`` matrices (0 without a
    vocabulary), and one layer's weight tensors (``layer.layer_tensors``: (matrices,
    vectors), all TP ranks together)."""

    tp: np.ndarray
    ranks: np.ndarray
    layers: np.ndarray
    embedding: np.ndarray
    tensors: Tuple[Tuple[float, ...], Tuple[float, ...]]


def layer_tensor_values(stage: DpStage) -> np.ndarray:
    """Values of each weight tensor of one layer on one device (over TP), shape (tensors,
    layouts): the matrices first, then the vectors."""
    matrices, vectors = stage.tensors
    return np.asarray(matrices + vectors)[:, None] / np.atleast_1d(stage.tp)[None, :]


def kept_gathered(values: np.ndarray, engine: DpEngine) -> np.ndarray:
    """Which tensors of ``values`` (``layer_tensor_values``) the engine keeps gathered between
    passes: fewer values on a device than ``DpEngine.persist_below_params``."""
    return values < engine.persist_below_params


def persistent_values(stage: DpStage, engine: DpEngine) -> Tuple[np.ndarray, np.ndarray]:
    """(tensors, values) on one device of the stage's weight tensors ``engine`` keeps gathered
    between passes (0 for an engine that keeps none)."""
    values = layer_tensor_values(stage)
    kept = kept_gathered(values, engine)
    shape = np.shape(stage.tp)
    return (stage.layers * kept.sum(axis=0).reshape(shape),
            stage.layers * np.where(kept, values, 0.0).sum(axis=0).reshape(shape))


def call_copies(engine: DpEngine, op: str, message_bytes, ranks, hw: HardwareProfile) -> np.ndarray:
    """Seconds one call of ``op`` among ``ranks`` on ``message_bytes`` (the whole gathered
    output, or the whole input reduced) spends in copies around the collective: through
    PyTorch's list API (``DpEngine.copy_per_rank``) one copy kernel per rank moving the whole
    buffer, read and written; a gather's zero fill of its output (``zero_fill_gathers``), one
    kernel writing it once. Each kernel costs its launch (``kernel_launch_us``), the bytes
    their time at the achieved HBM bandwidth. 0 for an engine that makes neither."""
    fill = engine.zero_fill_gathers and op == "all_gather"
    kernels = (np.asarray(ranks, dtype=np.float64) if engine.copy_per_rank else 0.0) + (1.0 if fill else 0.0)
    passes = (2.0 if engine.copy_per_rank else 0.0) + (1.0 if fill else 0.0)
    moved = roofline.memory_bound_time(passes * np.asarray(message_bytes, dtype=np.float64), hw, floored=False)
    return kernels * hw.kernel_launch_us * 1e-6 + moved + np.zeros(np.shape(ranks))


def _gathered(op: str, values: np.ndarray, engine: DpEngine) -> np.ndarray:
    """Which tensors of ``values`` a per-pass ``op`` moves: all but a weight gather's kept ones."""
    return ~kept_gathered(values, engine) if op == "all_gather" else np.ones(values.shape, dtype=bool)


def latency_calls(stage: DpStage, engine: DpEngine, op: str) -> Dict[str, np.ndarray]:
    """Calls a stage's DP collective ``op`` makes at each granularity but the engine's buckets
    (``step.dp_comm`` counts those): a layer's weights a call and one for the embedding; every
    tensor of a layer a pass moves and each embedding matrix; one call for the kept tensors."""
    per_layer = _gathered(op, layer_tensor_values(stage), engine).sum(axis=0).reshape(np.shape(stage.tp))
    return {"layer": stage.layers + np.where(stage.embedding > 0, 1.0, 0.0),
            "tensor": stage.layers * per_layer + stage.embedding,
            "persistent": np.where(persistent_values(stage, engine)[0] > 0, 1.0, 0.0)}


def _per_tensor_layer_time(op: str, width: float, stage: DpStage, engine: DpEngine, hw: HardwareProfile,
                           tiers: tuple) -> np.ndarray:
    """``op`` over one layer's weights moved one tensor per collective (each 1/TP on a device,
    at ``width`` bytes per value; a weight gather leaves out the tensors the engine keeps
    gathered), on the DP group's tiers (``tiers``: crosses nodes, ranks on a node), each call
    with its copies (``call_copies``)."""
    values = layer_tensor_values(stage)
    tensors = values * width
    crosses, local = tiers
    each = tier_time(op, stage.ranks, tensors, crosses, hw, local_ranks=local) \
        + call_copies(engine, op, tensors, stage.ranks, hw)
    # tensor by tensor, in one order whatever the table's length (``np.sum`` pairs a lone layout's)
    total = np.zeros(np.shape(values)[1:])
    for moved in np.where(_gathered(op, values, engine), each, 0.0):
        total = total + moved
    return total.reshape(np.shape(stage.tp))


def _persistent_call(width: float, stage: DpStage, engine: DpEngine, hw: HardwareProfile, tiers: tuple) -> np.ndarray:
    """The once-a-step gather of the stage's kept tensors (``persistent_values``): one call on all
    their bytes with its list copies (``call_copies``), then a copy kernel for each tensor and
    rank, and one each into the device's own part (DeepSpeed's ``_allgather_params``); 0 where
    none is kept."""
    tensors, values = persistent_values(stage, engine)
    message = values * width
    crosses, local = tiers
    launches = tensors * (stage.ranks + 1.0) * hw.kernel_launch_us * 1e-6
    call = tier_time("all_gather", stage.ranks, message, crosses, hw, local_ranks=local) \
        + call_copies(engine, "all_gather", message, stage.ranks, hw) + launches
    return np.where(tensors > 0, call, 0.0)


def split_into_calls(granularity: str, op: str, width: float, each: np.ndarray, stage: DpStage, engine: DpEngine,
                     hw: HardwareProfile, *, tiers: tuple, buckets: Optional[tuple] = None,
                     embed_bytes=0.0) -> Tuple[np.ndarray, np.ndarray]:
    """(time over a stage, tail) of ``op`` split into calls as ``granularity`` says, given
    ``each``: its time on one layer's weights, on the embedding matrices and (with buckets)
    on a bucket and on the last one; ``width``: bytes per value moved; ``tiers``: the group's
    (crosses nodes, ranks on a node); ``embed_bytes``: the bytes moved of all the stage's
    embedding matrices (a tensor a call copies each matrix's)."""
    has_embedding = stage.embedding > 0
    embed_t = np.where(has_embedding, each[1], 0.0)
    matrices = np.maximum(stage.embedding, 1.0)
    if granularity == "bucket":
        return (buckets[0] - 1.0) * each[2] + each[3], each[3]
    if granularity == "persistent":
        call = _persistent_call(width, stage, engine, hw, tiers)
        return call, call
    if granularity == "tensor":
        copies = call_copies(engine, op, np.asarray(embed_bytes) / matrices, stage.ranks, hw)
        embed_t_copies = embed_t + np.where(has_embedding, copies, 0.0) * matrices
        total = stage.layers * _per_tensor_layer_time(op, width, stage, engine, hw, tiers) + embed_t_copies
        return total, embed_t_copies / matrices
    return stage.layers * each[0] + embed_t, np.maximum(each[0], embed_t / matrices)
