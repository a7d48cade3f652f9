"""napkin measure finds the local GPU's profile from its properties (analyzer.measure.device): each
shipped GPU as the driver reports it, and a GPU napkin has no profile for, named in one line."""

from __future__ import annotations

import pytest

from analyzer.common.errors import NapkinError
from analyzer.measure.device import Device, profile_for

# (name, compute capability, SMs, total memory in bytes) as torch.cuda.get_device_properties reports them
REPORTED = [
    ("NVIDIA H100 80GB HBM3", "9.0", 132, 85_029_158_912, "h100-sxm5"),
    ("NVIDIA H200", "9.0", 132, 150_110_011_392, "h200"),
    ("NVIDIA H100 PCIe", "9.0", 114, 85_031_714_816, "h100-pcie"),
    ("NVIDIA A100-SXM4-80GB", "8.0", 108, 85_097_971_712, "a100"),
    ("Tesla T4", "7.5", 40, 15_835_660_288, "t4"),
]


@pytest.mark.parametrize("name, cc, sms, memory, profile", REPORTED)
def test_each_shipped_gpu_is_found_from_what_the_driver_reports(name, cc, sms, memory, profile):
    assert profile_for(Device(0, name, cc, sms, memory)) == profile


@pytest.mark.parametrize("name, cc, sms, memory", [
    ("NVIDIA GeForce RTX 4090", "8.9", 128, 25_393_692_672),
    ("NVIDIA A100-SXM4-40GB", "8.0", 108, 42_505_273_344),    # the 40 GB A100: another HBM, another bandwidth
    ("NVIDIA H100 NVL", "9.0", 132, 100_030_000_000),
])
def test_a_gpu_no_profile_describes_is_named(name, cc, sms, memory):
    with pytest.raises(NapkinError) as e:
        profile_for(Device(0, name, cc, sms, memory))
    assert name in str(e.value) and "--gpu" in e.value.hint
