"""Checks of a hardware profile and a model preset (``tasks.model.terms.specs``) beyond their
types."""

from __future__ import annotations

import dataclasses

from sweeps.config.checks import check_choices, check_fraction, check_name, check_non_negative, check_positive
from sweeps.config.limits import FRACTION, HARDWARE, LINK_TIER, MODEL, check_fields, check_range
from sweeps.errors import ConfigError
from tasks.model.kernels.attention import ROW_DEVICES
from tasks.model.kernels.roofline import GEMM_DTYPES, MissingFigure, gemm_ceiling
from tasks.model.kernels.sustained import power_limit_problem
from tasks.model.kernels.model_blocks import layer_weights, mla_problem, moe_problem
from tasks.model.terms.specs import HardwareProfile, TransformerModel, heads_problem

__all__ = ["validate_hardware", "validate_model", "complete_model"]


def validate_hardware(hw: HardwareProfile) -> None:
    """Raise ``ConfigError`` naming the first field of ``hw`` that cannot be used."""
    check_name("hardware.name", hw.name)
    for name in ("devices_per_node", "peak_tflops", "hbm_gb", "hbm_tbps"):
        check_positive(f"hardware.{name}", getattr(hw, name))
    check_non_negative("hardware.kernel_launch_us", hw.kernel_launch_us)
    check_fraction("hardware.memory_efficiency", hw.memory_efficiency)
    for tier_name in ("intra_node", "inter_node"):
        tier = getattr(hw, tier_name)
        check_positive(f"hardware.{tier_name}.bandwidth_GBps", tier.bandwidth_GBps)
        check_non_negative(f"hardware.{tier_name}.latency_us", tier.latency_us)
        check_fraction(f"hardware.{tier_name}.efficiency", tier.efficiency)
        check_non_negative(f"hardware.{tier_name}.nvls_efficiency", tier.nvls_efficiency)
        check_non_negative(f"hardware.{tier_name}.nvls_latency_us", tier.nvls_latency_us)
        check_non_negative(f"hardware.{tier_name}.channels", tier.channels)
        check_fields(f"hardware.{tier_name}", tier, LINK_TIER)
    if hw.inter_node.nvls_efficiency != 0:
        raise ConfigError("hardware.inter_node.nvls_efficiency", hw.inter_node.nvls_efficiency,
                          "in-switch reduction (NVLS) is modelled inside a node only; set 0")
    check_fields("hardware", hw, HARDWARE)
    if hw.attention_kernels is not None:
        check_choices("hardware.attention_kernels", [hw.attention_kernels], list(ROW_DEVICES),
                      verb="names no measured attention kernels; use")
    _check_gemm_ceiling(hw)
    _check_power_limit(hw)


def _check_power_limit(hw: HardwareProfile) -> None:
    """A ``power_limit_w`` the profile can price (``sustained.power_limit_problem``), and a
    ``gemm_sustained_w`` with the datasheet limit it is compared with."""
    if hw.gemm_sustained_w is not None and hw.tdp_w is None:
        raise ConfigError("hardware.gemm_sustained_w", hw.gemm_sustained_w,
                          "needs hardware.tdp_w, the limit the device runs at, to compare it with")
    problem = power_limit_problem(hw)
    if problem:
        raise ConfigError("hardware.power_limit_w", hw.power_limit_w, problem)


def _check_gemm_ceiling(hw: HardwareProfile) -> None:
    """Each ``gemm_ceiling`` key is a known dtype with a fraction in (0, 1]; bf16 is there.
    Each ``gemm_tile_ceiling`` key too, at or above that dtype's ceiling; each
    ``gemm_sustained`` key at or below it (a device sustains no more than it bursts to)."""
    for dtype, ceiling in hw.gemm_ceiling.items():
        check_choices("hardware.gemm_ceiling", [dtype], list(GEMM_DTYPES), verb="has a key that is no dtype; use")
        check_range(f"hardware.gemm_ceiling.{dtype}", ceiling, FRACTION)
    if "bf16" not in hw.gemm_ceiling:
        raise ConfigError("hardware.gemm_ceiling", dict(hw.gemm_ceiling), "needs a bf16 entry (the default dtype "
                                                                         "of the GEMM law)")
    _check_beside_ceiling(hw, "gemm_tile_ceiling", above=True,
                          why="is below gemm_ceiling {}: the law could never reach the measured best")
    _check_beside_ceiling(hw, "gemm_sustained", above=False,
                          why="is above gemm_ceiling {}: a device sustains no more than its short-run best")


def _check_beside_ceiling(hw: HardwareProfile, name: str, *, above: bool, why: str) -> None:
    """Each key of the per-dtype table ``name`` is a known dtype with a fraction in (0, 1]
    that has a ceiling to compare with, and stands at or ``above`` it (else at or below)."""
    for dtype, fraction in getattr(hw, name).items():
        check_choices(f"hardware.{name}", [dtype], list(GEMM_DTYPES), verb="has a key that is no dtype; use")
        check_range(f"hardware.{name}.{dtype}", fraction, FRACTION)
        try:
            ceiling = gemm_ceiling(hw, dtype)
        except MissingFigure:
            raise ConfigError(f"hardware.{name}.{dtype}", fraction,
                              f"has no hardware.gemm_ceiling.{dtype} to stand {'above' if above else 'below'}; "
                              "add that first") from None
        if (fraction < ceiling) if above else (fraction > ceiling):
            raise ConfigError(f"hardware.{name}.{dtype}", fraction, why.format(ceiling))


def validate_model(model: TransformerModel) -> None:
    """Raise ``ConfigError`` naming the first field of ``model`` that cannot be used."""
    for name in ("layers", "hidden", "heads", "ffn_hidden", "params_b", "seq_len"):
        check_positive(f"model.{name}", getattr(model, name))
    check_fields("model", model, MODEL)
    if model.dropout >= 1:
        raise ConfigError("model.dropout", model.dropout, "must be a probability below 1")
    problem = heads_problem(model.hidden, model.heads, model.kv_heads, prefix="model.", head_dim=model.head_dim) \
        or moe_problem(model) or mla_problem(model)
    if problem:
        raise ConfigError(*problem)


def complete_model(model: TransformerModel) -> TransformerModel:
    """``model`` with what its shape implies where it gives none: ``ffn_hidden`` 4 x hidden
    (the MLP of GPT-2, GPT-3 and Megatron-LM), and ``params_b``: the layers' weights
    (``tasks.model.kernels.model_blocks.layer_weights``, with grouped-query heads, a gated MLP
    and a mixture of experts' routed experts)
    plus one vocab x hidden embedding, in billions. A shape that cannot split (heads not
    dividing hidden) is left for ``validate_model`` to refuse."""
    ffn = model.ffn_hidden if model.ffn_hidden is not None else 4 * model.hidden
    if model.params_b is not None or not (isinstance(model.hidden, int) and isinstance(model.heads, int)):
        return dataclasses.replace(model, ffn_hidden=ffn)
    weights = layer_weights(dataclasses.replace(model, ffn_hidden=ffn)) + float(model.vocab or 0) * model.hidden
    return dataclasses.replace(model, ffn_hidden=ffn, params_b=round(weights / 1e9, 3))
