"""Where a measurement came from: device, software, and the settings in force."""

from __future__ import annotations

import os
import platform
import socket
from typing import Dict

from tasks.device import is_cuda

__all__ = ["PROVENANCE_FIELDS", "device_provenance", "available_memory_bytes"]

#: What a measurement row records of where it ran (``device_provenance``'s keys but ``device``).
PROVENANCE_FIELDS = ("device_model", "device_count", "driver_version", "torch_version", "cuda_version",
                     "nccl_version", "nccl_settings", "host")

#: NCCL settings that change which algorithm or protocol a collective uses.
NCCL_SETTINGS = ("NCCL_ALGO", "NCCL_PROTO", "NCCL_MIN_NCHANNELS", "NCCL_MAX_NCHANNELS", "NCCL_NET",
                 "NCCL_IB_DISABLE", "NCCL_P2P_DISABLE", "NCCL_SHM_DISABLE")


def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as handle:
            for line in handle:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def device_provenance(device: str) -> Dict[str, str]:
    """Device model and count, driver, torch / CUDA / NCCL versions, NCCL settings, host."""
    import torch

    info = {"host": socket.gethostname(), "torch_version": torch.__version__, "device": device,
            "cuda_version": str(torch.version.cuda or ""), "nccl_version": "", "driver_version": "",
            "nccl_settings": ",".join(f"{k}={os.environ[k]}" for k in NCCL_SETTINGS if k in os.environ)}
    if is_cuda(device):
        index = torch.device(device).index or 0
        info["device_model"] = torch.cuda.get_device_name(index)
        info["device_count"] = str(torch.cuda.device_count())
        try:
            info["nccl_version"] = ".".join(map(str, torch.cuda.nccl.version()))
        except (AttributeError, RuntimeError):
            pass
        try:
            with open("/proc/driver/nvidia/version") as handle:
                info["driver_version"] = handle.readline().strip()
        except OSError:
            pass
    else:
        info["device_model"] = f"CPU {_cpu_model()} ({torch.get_num_threads()} threads)"
        info["device_count"] = "1"
    return info


def available_memory_bytes(device: str) -> int:
    """Memory a measurement may use on ``device`` now (free GPU memory, or MemAvailable)."""
    if is_cuda(device):
        import torch

        free, _ = torch.cuda.mem_get_info(torch.device(device))
        return int(free)
    try:
        with open("/proc/meminfo") as handle:
            for line in handle:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_AVPHYS_PAGES")
