"""Checks of a hardware profile and a model preset (``tasks.model.specs``) beyond their
types."""

from __future__ import annotations

from sweeps.config.checks import check_fraction, check_name, check_non_negative, check_positive
from sweeps.config.limits import HARDWARE, LINK_TIER, MODEL, check_fields
from sweeps.errors import ConfigError
from tasks.model.specs import HardwareProfile, TransformerModel

__all__ = ["validate_hardware", "validate_model"]


def validate_hardware(hw: HardwareProfile) -> None:
    """Raise ``ConfigError`` naming the first field of ``hw`` that cannot be used."""
    check_name("hardware.name", hw.name)
    for name in ("devices_per_node", "peak_tflops", "hbm_gb", "hbm_tbps", "gemm_half_efficiency_gflop"):
        check_positive(f"hardware.{name}", getattr(hw, name))
    check_non_negative("hardware.kernel_launch_us", hw.kernel_launch_us)
    for name in ("gemm_efficiency_max", "memory_efficiency"):
        check_fraction(f"hardware.{name}", getattr(hw, name))
    for tier_name in ("intra_node", "inter_node"):
        tier = getattr(hw, tier_name)
        check_positive(f"hardware.{tier_name}.bandwidth_GBps", tier.bandwidth_GBps)
        check_non_negative(f"hardware.{tier_name}.latency_us", tier.latency_us)
        check_fraction(f"hardware.{tier_name}.efficiency", tier.efficiency)
        check_fields(f"hardware.{tier_name}", tier, LINK_TIER)
    check_fields("hardware", hw, HARDWARE)


def validate_model(model: TransformerModel) -> None:
    """Raise ``ConfigError`` naming the first field of ``model`` that cannot be used."""
    for name in ("layers", "hidden", "heads", "ffn_hidden", "params_b", "seq_len"):
        check_positive(f"model.{name}", getattr(model, name))
    check_fields("model", model, MODEL)
    if model.hidden % model.heads:
        raise ConfigError("model.heads", model.heads, f"does not divide model.hidden={model.hidden}")
