"""Which device and dtype to run on.

``auto`` means the fastest device this machine has and the dtype that device computes well in.
A device that was asked for but is missing is an error naming what IS available, never a silent
fallback to CPU: a benchmark on the wrong device answers the wrong question.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import torch

import os
import platform
from pathlib import Path

from specnb.core.errors import DeviceError, ParameterError


def available_devices() -> list[str]:
    """Device kinds this machine has, best first."""
    import torch

    found = ["cuda"] if torch.cuda.is_available() else []
    if getattr(torch.backends, "mps", None) is not None and torch.backends.mps.is_available():
        found.append("mps")
    return [*found, "cpu"]


def resolve_device(device: str = "auto") -> torch.device:
    """``auto`` picks cuda > mps > cpu; a requested device this machine lacks is an error."""
    import torch

    available = available_devices()
    if device == "auto":
        return torch.device(available[0])
    try:
        resolved = torch.device(device)
    except (RuntimeError, TypeError):
        raise DeviceError(f"unknown device {device!r}; use auto or one of: {', '.join(available)}") from None
    count = torch.cuda.device_count() if resolved.type == "cuda" else 1
    if resolved.type not in available or (resolved.index or 0) >= count:
        raise DeviceError(f"device {device!r} is not available on this machine; available: {', '.join(available)} (or "
                          "auto)")
    return resolved


_DTYPES = {"float32": "float32", "fp32": "float32", "float": "float32", "float16": "float16", "fp16": "float16",
           "half": "float16", "bfloat16": "bfloat16", "bf16": "bfloat16"}


def resolve_dtype(dtype: str, device: torch.device) -> torch.dtype:
    """``auto``: float32 on CPU (half-precision matmuls are emulated or slow on most CPUs, and
    fp32 is the reference numerics); bfloat16 on CUDA (fp32's exponent range, so no fp16 overflow
    in large activations, at half the memory traffic; float16 on GPUs older than Ampere, which
    lack bf16); float16 on MPS (bfloat16 is missing or slow on many Apple GPUs / macOS versions)."""
    import torch

    if isinstance(dtype, torch.dtype):
        return dtype
    if dtype == "auto":
        if device.type == "cuda":
            return torch.bfloat16 if torch.cuda.is_bf16_supported() else torch.float16
        return torch.float16 if device.type == "mps" else torch.float32
    if dtype not in _DTYPES:
        raise ParameterError(f"unknown dtype {dtype!r}; use auto, float32, float16 or bfloat16")
    return getattr(torch, _DTYPES[dtype])


def cpu_name() -> str:
    """The CPU model as /proc/cpuinfo names it (platform's guess elsewhere)."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def gpu_name() -> str | None:
    import torch

    if torch.cuda.is_available():
        return torch.cuda.get_device_name(0)
    if getattr(torch.backends, "mps", None) and torch.backends.mps.is_available():
        return "Apple MPS"
    return None


def describe_machine(device=None) -> dict:
    """Enough to tell two machines apart: platform, CPU, cores, torch threads, GPU, torch version."""
    import torch

    return {"platform": platform.platform(), "cpu": cpu_name(), "cpu_count": os.cpu_count(),
            "torch_threads": torch.get_num_threads(), "gpu": gpu_name(),
            "device": str(device) if device is not None else None, "torch": torch.__version__}
