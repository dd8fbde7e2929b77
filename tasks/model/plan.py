"""The plan of a training step: every operation a step runs, for a table of layouts, built
once and read by everything that reports on a step (method.md §3, §6 and §8).

``step_plan`` costs each piece once, vectorised over layouts: one micro-batch's compute on the
busiest pipeline stage (``step_compute``), its TP, PP and DP collectives with what hides them
(``step_comm``, DP by ``dp_protocol.SHARDING``), the optimizer step, the device's memory, and
the pipeline's ticks. ``step.step_columns`` sums the plan into a step's time and metrics;
``timeline`` lays one layout's plan out in time. Seconds and bytes.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Dict

import numpy as np

from tasks.model import layer, memory
from tasks.model.step_comm import dp_comm, embedding_matrices, pp_comm, tp_comm
from tasks.model.step_compute import compute_per_microbatch, optimizer_time, stage_layer_cost
from tasks.model.step_context import StepContext, StepLayouts, distinct_shapes

__all__ = ["StepPlan", "step_plan", "pipeline_ticks", "stage_memory"]


@dataclass(frozen=True)
class StepPlan:
    """One step's operations for each layout (arrays over layouts).

    ``layouts`` and ``ctx``: what was costed. ``cost``: one layer's compute pieces
    (``layer_cost.LayerCost``). ``compute``: one micro-batch on the busiest stage
    (``step_compute.compute_per_microbatch``: ``per_microbatch``, ``forward``,
    ``forward_hide``, ``backward_hide``, ``kernels_per_microbatch``). ``tp``, ``pp``: one
    micro-batch's TP and PP communication (``step_comm.tp_comm``, ``pp_comm``). ``dp``: the
    step's DP collectives (``step_comm.dp_comm``). ``optimizer``: the optimizer step.
    ``params``: parameters on the largest device; ``memory``: its bytes. ``ticks``: the
    pipeline's ticks (``pipeline_ticks``)."""

    layouts: StepLayouts
    ctx: StepContext
    cost: object
    compute: Dict[str, np.ndarray]
    tp: Dict[str, np.ndarray]
    pp: Dict[str, np.ndarray]
    dp: Dict[str, np.ndarray]
    optimizer: np.ndarray
    params: np.ndarray
    memory: np.ndarray
    ticks: np.ndarray

    @property
    def exposed_per_microbatch(self) -> np.ndarray:
        """Communication one micro-batch's tick waits for: TP, PP and per-micro-batch DP."""
        return self.tp["exposed"] + self.pp["exposed"] + self.dp["per_microbatch"]

    @property
    def tick(self) -> np.ndarray:
        """One tick: a micro-batch's forward and backward on the busiest stage, with the
        communication it waits for."""
        return self.compute["per_microbatch"] + self.exposed_per_microbatch

    @property
    def step_time(self) -> np.ndarray:
        """The step: its ticks, then the once-per-step DP collectives and the optimizer."""
        return self.ticks * self.tick + self.dp["per_step"] + self.optimizer


def pipeline_ticks(lay: StepLayouts) -> np.ndarray:
    """Ticks of a step: M micro-batches plus the bubble, (p-1)/v (Narayanan et al. 2021)."""
    return lay.microbatches + (lay.pp - 1.0) / lay.stages


def step_plan(lay: StepLayouts, ctx: StepContext) -> StepPlan:
    """Every operation of a step for the layouts ``lay``, each costed once."""
    shapes = distinct_shapes(lay)
    cost = stage_layer_cost(lay, ctx, shapes)
    compute = compute_per_microbatch(lay, ctx, cost, shapes)
    params, device_memory = stage_memory(lay, ctx)
    return StepPlan(layouts=lay, ctx=ctx, cost=cost, compute=compute, tp=tp_comm(lay, ctx, cost, shapes),
                    pp=pp_comm(lay, ctx, compute["per_microbatch"]), dp=dp_comm(lay, ctx, compute),
                    optimizer=optimizer_time(lay, ctx, params), params=params, memory=device_memory,
                    ticks=pipeline_ticks(lay))


def stage_memory(lay: StepLayouts, ctx: StepContext):
    """(parameters, bytes) of the largest device (method.md §8): model states (and fp8
    weight copies), the gathered layer (and its prefetch) under ZeRO-3/FSDP, and the
    activations the first stage holds at its peak (or the last stage's with the logits)."""
    model, block = ctx.model, ctx.block
    h, heads, vocab = float(model.hidden), float(model.heads), ctx.vocab
    per_layer = layer.layer_params(h, heads, block)
    params = lay.layers_per_stage * per_layer / lay.tp + embedding_matrices(lay) * vocab * h / lay.tp
    states = memory.model_state_bytes(params, lay.dp, lay.zero)
    if ctx.stack.fp8:
        states = states + memory.fp8_weight_copy_bytes(lay.layers_per_stage * per_layer / lay.tp, lay.dp, lay.zero)
    gathered = np.where(lay.sharded, 2.0 * memory.WEIGHT_BYTES * per_layer / lay.tp, 0.0)
    act = memory.layer_activation_bytes(float(model.seq_len), lay.micro_batch, h, heads, lay.tp,
                                        lay.sequence_parallel, lay.recompute, block,
                                        fp8_inputs=ctx.stack.fp8, recomputed_share=lay.recomputed_share)
    first = memory.in_flight_microbatches(lay.microbatches, lay.pp, lay.stages, lay.interleaved) \
        * lay.layers_per_stage * act
    last = lay.layers_per_stage * act + memory.logits_bytes(float(model.seq_len), lay.micro_batch, vocab, lay.tp)
    return params, states + gathered + np.maximum(first, last)
