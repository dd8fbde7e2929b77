"""The cases every export test reads: each feasible layout of the small search space
(Megatron 8.3B on 16 A100) under several stacks and models, so that every branch of each
mapping (interleaved and uneven pipelines, each ZeRO mode, each recomputation, each
precision, grouped-query attention, a gated MLP) is met."""

from __future__ import annotations

import dataclasses
from typing import Callable, List, Tuple

import pytest

from sweeps.config import load_preset, load_search
from sweeps.export import ExportCase, Unexpressible, case_of, export
from sweeps.search.results import exhaustive_frame

#: Overrides of the small preset, each a space of a few hundred layouts.
SETUPS = {
    "2022": ["stack=megatron-2022"],
    "core-2024": ["stack=megatron-core-2024"],
    "fp16-eager": ["stack=megatron-2022", "stack.gemm_precision=fp16", "stack.elementwise=eager"],
    "llama-bf16-grads": ["stack=megatron-core-2024", "stack.main_grad_bytes=2", "model=llama3-70b"],
    "fp8": ["stack=megatron-core-2024-fp8", "hardware=h100"],
}


@pytest.fixture(scope="session")
def cases() -> List[Tuple[str, ExportCase]]:
    """(setup label, case) for every feasible layout of each of ``SETUPS``."""
    out = []
    for label, overrides in SETUPS.items():
        setup = load_search(["small", *overrides])
        out += [(label, case_of(setup, row)) for _, row in exhaustive_frame(setup).iterrows()]
    return out


@pytest.fixture(scope="session")
def built_cases(cases) -> List[Tuple[str, ExportCase]]:
    """Layouts no search of these spaces yields: FSDP (no_sync), full recomputation of the
    first 3 layers of each chunk, sequence parallelism at TP 1, ZeRO-3 over one replica,
    hybrid FSDP, context parallelism (a ring of 2, an all-gather over 4, an all-to-all over 2),
    torchtitan's per-op recomputation, FlashAttention-2's kernel, and a model whose heads set their own width."""
    base = next(case for label, case in cases if label == "core-2024" and case.layout.tp == 1
                and case.layout.pp == 1 and case.layout.dp == 16)
    lay = base.layout
    layouts = {"fsdp": dataclasses.replace(lay, zero="fsdp"),
               "block": dataclasses.replace(lay, recompute="full", recompute_layers=3),
               "sp-at-tp1": dataclasses.replace(lay, sequence_parallel=True),
               "zero3-dp1": dataclasses.replace(lay, tp=4, pp=4, dp=1, zero="zero3", sequence_parallel=True),
               "cp-ring": dataclasses.replace(lay, cp=2, dp=8),
               "cp-gather": dataclasses.replace(lay, cp=4, dp=4, cp_comm="all_gather"),
               "cp-a2a": dataclasses.replace(lay, cp=2, dp=8, cp_comm="a2a"),
               "op": dataclasses.replace(lay, recompute="op", zero="zero3")}
    built = [(label, dataclasses.replace(base, layout=layout)) for label, layout in layouts.items()]
    # FlashAttention-2 in place of cuDNN's kernel (NeMo's launcher of 2024)
    built.append(("flash2", dataclasses.replace(base, stack=dataclasses.replace(base.stack, attention_impl="flash2"))))
    # heads wider than hidden / heads (Qwen3 32B: 64 x 128 against 5,120)
    built.append(("head-dim", dataclasses.replace(base, model=load_preset("model", "qwen3-32b"))))
    # hybrid sharding (two nodes of 8) at one micro-batch, which torchtitan's HSDP runs as costed
    hsdp = dataclasses.replace(lay, zero="hsdp")
    return built + [("hsdp", dataclasses.replace(base, layout=hsdp, global_batch=hsdp.dp * hsdp.micro_batch))]


@pytest.fixture(scope="session")
def exports(cases, built_cases) -> Callable[[str], List[Tuple[str, ExportCase, str]]]:
    """``exports(framework)``: (label, case, text) of each case the framework expresses; each
    it refuses is refused in one line that names the framework."""
    def run(framework: str) -> List[Tuple[str, ExportCase, str]]:
        out = []
        for label, case in cases + built_cases:
            try:
                out.append((label, case, export(framework, case)))
            except Unexpressible as exc:
                assert "\n" not in str(exc) and str(exc).startswith(f"--export {framework}: "), str(exc)
        return out
    return run
