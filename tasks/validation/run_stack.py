"""A runs file row's stack switches that other cells constrain, read before anything is
predicted (``runs`` documents each column's blank default).

fp8 weights and an fp8 recipe other than delayed ask for precision fp8; the weight gather's
overlap asks for the DP overlap; a CUDA graph scope is refused where ``stack`` would refuse it;
a fused-attention kernel other than cuDNN's (``attention_impl``: ``stack.ATTENTION_IMPLS``)
asks for ``flash_attention``.
"""

from __future__ import annotations

from typing import Dict

from tasks.model.terms.stack import ATTENTION_IMPLS, CROSS_ENTROPY_IMPLS, DEFAULT_ATTENTION_IMPL, \
    DEFAULT_FP8_RECIPE, DP_ENGINE_NAMES, FP8_RECIPES, HOST_LAUNCH_US, PIPELINE_SPLITS, PROJECTIONS, TP_ENGINE_NAMES, \
    cuda_graph_scope_problem
from tasks.validation.cells import RowCells

__all__ = ["STACK_COLUMNS", "stack_fields"]

#: The columns read here.
STACK_COLUMNS = ("grad_reduce_in_fp32", "dp_engine", "tp_engine", "param_gather_overlap", "cross_entropy", "fp8_params",
                 "fp8_recipe", "offload_layers", "host_launch_us", "cuda_graph_scope", "pipeline_split",
                 "attention_impl", "projections")


def stack_fields(r: RowCells, precision: str, flash: bool) -> Dict[str, object]:
    """The row's stack switches, by ``PublishedRun`` field: fp8 weights and recipe, offloaded
    layers, the DP overlap and the weight gather's, the gradient width, the DP engine, the loss,
    the host's launch path with the parts of each layer CUDA graphs capture, the pipeline's
    split, the fused-attention kernel and the input projections; raises ``RowError`` (by
    ``r.fail``) naming the first cell that cannot be."""
    fp8_params = r.flag("fp8_params", False)
    if fp8_params and precision != "fp8":
        raise r.fail("fp8_params", r.text("fp8_params"), f"needs precision fp8, not {precision}: fp8 weights feed "
                                                          "fp8 GEMMs")
    recipe = r.choice("fp8_recipe", FP8_RECIPES, DEFAULT_FP8_RECIPE)
    if recipe != DEFAULT_FP8_RECIPE and precision != "fp8":
        raise r.fail("fp8_recipe", recipe, f"needs precision fp8, not {precision}: it scales fp8 GEMMs' inputs")
    dp_overlap, param_gather_overlap = r.flag("dp_overlap", flash), r.flag("param_gather_overlap", False)
    if param_gather_overlap and not dp_overlap:
        raise r.fail("param_gather_overlap", r.text("param_gather_overlap"), "needs dp_overlap true: Megatron-LM "
                                                                              "overlaps the weight gather only with "
                                                                              "the gradient reduction")
    impl = r.choice("attention_impl", ATTENTION_IMPLS, DEFAULT_ATTENTION_IMPL)
    if impl != DEFAULT_ATTENTION_IMPL and not flash:
        raise r.fail("attention_impl", impl, "needs flash_attention true: it names a fused attention kernel")
    return {"fp8_params": fp8_params, "fp8_recipe": recipe,
            "offload_layers": r.number("offload_layers", int, 0, minimum=0),
            "dp_overlap": dp_overlap, "param_gather_overlap": param_gather_overlap,
            "grad_reduce_in_fp32": r.flag("grad_reduce_in_fp32", None),
            "dp_engine": r.choice("dp_engine", DP_ENGINE_NAMES, "megatron"),
            "tp_engine": r.choice("tp_engine", TP_ENGINE_NAMES, "megatron"),
            "cross_entropy": r.choice("cross_entropy", CROSS_ENTROPY_IMPLS, "unfused"),
            "host_launch_us": r.number("host_launch_us", float, HOST_LAUNCH_US, minimum=0),
            "cuda_graph_scope": _graph_scope(r),
            "pipeline_split": r.choice("pipeline_split", PIPELINE_SPLITS, "layers"), "attention_impl": impl,
            "projections": r.choice("projections", PROJECTIONS, "fused")}


def _graph_scope(r: RowCells) -> str:
    """The row's ``cuda_graph_scope`` ("" where blank), refused where ``stack`` would refuse it."""
    text = r.text("cuda_graph_scope", "")
    problem = cuda_graph_scope_problem(text)
    if problem:
        raise r.fail("cuda_graph_scope", text, problem)
    return text
