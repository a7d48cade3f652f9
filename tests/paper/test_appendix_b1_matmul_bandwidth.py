"""Appendix B.1: the "MatMul Bandwidth" sheet for H100 SXM5, derived from matmul.yaml.

The paper takes 256 KB of SMEM per SM (the combined L1/shared memory) where the profile holds the
228 KB of shared memory (227 KB per block); this test uses the paper's value. Everything else comes
from hardware/h100-sxm5.yaml: 989.4 TFLOP/s, 3.35 TB/s into L2, 12 TB/s L2 -> SMEM, two L2 halves of
66 SMs each (docs/hardware-profiles.md).
"""

import pytest
from helpers import models_of

from analyzer import hardware
from analyzer.model.intensity import bandwidth_limit

KB = 1024   # the paper's sheets use KB = 1024 B


@pytest.fixture(scope="module")
def limits():
    paper = hardware.load("h100-sxm5").with_level("smem", capacity_bytes=256 * KB,
                                                 capacity_bytes_per_block=256 * KB)
    out = {}
    for m in models_of("matmul", profile=paper):
        sizes = dict(m.schedule.diagram.defaults)
        out[m.level.name] = (m.level, bandwidth_limit(
            m.optimum, m.cost.flops["tensor"], sizes, tensor_rate=paper.rate("tensor", "fp16"),
            bandwidth_bytes_per_s=m.level.bandwidth_bytes_per_s, bytes_per_value=2,
            memory_bytes=m.level.memory_bytes))
    return out


def test_l2_level_row(limits):
    level, b = limits["l2"]
    assert level.children == 66 and level.memory_bytes == 16896 * KB     # M_SM N_SM (Theorem 2)
    assert round(b.compute_per_transfer) == 591                          # Kt/Ht
    assert int(b.min_memory_values * 2 / KB) == 681                      # q (Kt/Ht)^2
    assert int(b.min_sizes["b"]) == 295                                  # (Kt/Ht)/2
    assert int(b.tile_sizes["g_a"]) == int(b.tile_sizes["g_c"]) == 2941  # (M/q)^0.5
    assert round(b.min_sizes_at_memory["b"]) == 370


def test_smem_level_row(limits):
    level, b = limits["smem"]
    assert level.memory_bytes == 256 * KB
    assert round(b.compute_per_transfer) == 165
    assert int(b.min_memory_values * 2 / KB) == 53
    assert int(b.min_sizes["b"]) == 82
    assert int(b.tile_sizes["g_a"]) == 362
    assert int(b.min_sizes_at_memory["b"]) == 151
