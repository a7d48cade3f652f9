"""The GPU at hand: its properties as the CUDA driver reports them through torch, and the shipped
profile that describes it.

A shipped datasheet profile describes the device when its compute capability and SM count are the
device's and its memory capacity is within MEMORY_SLACK of what the driver reports (datasheets count
"80 GB" of HBM that the driver reports as 85.0e9 bytes, 79.2 GiB: 6 % apart on the H100, the H200 and the
A100 alike). That tells apart every shipped GPU: an H100 SXM5 (132 SMs, 80 GB) from an H100 PCIe (114 SMs)
and from an H200 (132 SMs, 141 GB). A device no profile describes is named, with what napkin read of it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from analyzer.common.errors import NapkinError
from analyzer.hardware import Profile, shipped_profiles

MEMORY_SLACK = 0.15          # a datasheet's memory capacity against the driver's, either way
KERNELS_EXTRA = "pip install 'napkin[kernels]'"     # what running a generated kernel needs (README)


@dataclass(frozen=True)
class Device:
    """One CUDA device, as torch.cuda.get_device_properties reports it."""

    index: int
    name: str                       # the driver's: "NVIDIA H100 80GB HBM3"
    compute_capability: str         # "9.0"
    sm_count: int
    memory_bytes: int               # total device memory
    l2_bytes: int | None = None

    def describe(self) -> str:
        return (f"{self.name} (compute capability {self.compute_capability}, {self.sm_count} SMs, "
                f"{self.memory_bytes / 1e9:.1f} GB)")


def torch_module() -> Any:
    """torch, or a one-line error saying how to install it."""
    try:
        import torch
    except ModuleNotFoundError as exc:
        raise NapkinError("running a generated kernel needs torch and triton, which are not installed",
                          hint=KERNELS_EXTRA) from exc
    return torch


def local_device(index: int = 0) -> Device:
    """The CUDA device `index` of this machine, or a one-line error where there is none."""
    torch = torch_module()
    if not torch.cuda.is_available():
        raise NapkinError("no CUDA device: napkin measure and napkin hardware draft run on the GPU at hand, and "
                          "torch sees none", hint="run them on a machine with an NVIDIA GPU (napkin analyze and "
                                                  "napkin kernel predict and generate without one)")
    if index >= torch.cuda.device_count():
        raise NapkinError(f"no CUDA device {index}: torch sees {torch.cuda.device_count()}",
                          hint="pick one with CUDA_VISIBLE_DEVICES")
    p = torch.cuda.get_device_properties(index)
    return Device(index, p.name, f"{p.major}.{p.minor}", p.multi_processor_count, int(p.total_memory),
                  int(getattr(p, "L2_cache_size", 0)) or None)


def describes(profile: Profile, device: Device) -> bool:
    """Whether a datasheet profile is the device's GPU (the module docstring's rule)."""
    capacity = profile.levels[0].capacity_bytes or 0
    return (profile.compute_capability == device.compute_capability and profile.sm_count == device.sm_count
            and capacity > 0 and abs(device.memory_bytes / capacity - 1) <= MEMORY_SLACK)


def profile_for(device: Device) -> str:
    """The shipped datasheet profile that describes `device` (napkin reaches its calibrated sibling's
    fits from it), or a one-line error naming the device."""
    found = [name for name, p in shipped_profiles().items() if p.calibration is None and describes(p, device)]
    if not found:
        raise NapkinError(f"no shipped profile describes this GPU, {device.describe()}",
                          hint="draft one with napkin hardware draft -o my-gpu.yaml, review it, and give it "
                               "with --gpu my-gpu.yaml")
    return found[0]


__all__ = ["Device", "KERNELS_EXTRA", "MEMORY_SLACK", "describes", "local_device", "profile_for", "torch_module"]
