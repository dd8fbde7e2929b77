"""Device and element-type names, defined once: what a dtype name means, in bytes and as a
torch dtype, and which devices are CUDA devices.

Importing this module does not import torch; ``torch_dtype`` does, when called.
"""

from __future__ import annotations

from typing import Dict

__all__ = ["DTYPE_BYTES", "torch_dtype", "is_cuda", "check_device"]

#: Bytes per element of each element-type name a measurement or config accepts.
DTYPE_BYTES: Dict[str, int] = {"fp32": 4, "fp16": 2, "bf16": 2}


def torch_dtype(name: str):
    """The torch dtype of an element-type name of ``DTYPE_BYTES`` (``KeyError`` otherwise)."""
    import torch

    return {"fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}[name]


def is_cuda(device: str) -> bool:
    """Whether ``device`` names a CUDA device: "cuda" or "cuda:N"."""
    return device == "cuda" or device.startswith("cuda:")


def check_device(device: str) -> bool:
    """Whether ``device`` is a device name commscale measures on: "cpu", "cuda" or "cuda:N"."""
    return device == "cpu" or (is_cuda(device) and (device == "cuda" or device[5:].isdigit()))
