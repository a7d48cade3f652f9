"""The integer tile search: divisor constraints, memory limits, pins and exact ceiling counts."""

import pytest

from analyzer.common.errors import NapkinError
from analyzer.model.analysis import analyze, load
from analyzer.model.optimize import candidates


def smem(analysis, kernel=0):
    return analysis.kernels[kernel].levels[-1]


def test_candidates_include_divisors_round_multiples_and_the_rounded_up_axis():
    assert candidates(100, 16) == [16, 32, 48, 64, 80, 96, 112]
    assert 7 in candidates(7) and 1 in candidates(7)


@pytest.mark.parametrize("gpu,m,k", [("h100", 64, 16), ("a100", 16, 16), ("t4", 16, 8)])
def test_tensor_core_multiples_per_gpu(gpu, m, k):
    level = smem(analyze("attention", gpu))
    assert level.chosen["g_q"] % m == 0 and level.chosen["s_x"] % k == 0
    assert level.memory_bytes_value <= level.memory_limit_bytes


def test_coalesced_rows_for_a_partitioned_contiguous_axis():
    level = smem(analyze("matmul", "h100"))
    assert level.chosen["g_c"] % 64 == 0 and level.chosen["s_b"] % 64 == 0   # 128 B of fp16


def test_pinned_tiles_and_tiles_that_do_not_fit():
    assert smem(analyze("attention", "h100", sets={"g_q": 64})).chosen["g_q"] == 64
    with pytest.raises(NapkinError, match="no tile sizes for kernel flash at smem fit"):
        analyze("attention", "h100", sets={"g_q": 4096})


def test_sizes_that_no_tile_divides_use_ceiling_groups():
    level = smem(analyze("attention", "h100", sets={"q": 1000, "x": 1000}))
    g = level.chosen["g_q"]
    assert level.groups_value == -(-1000 // g)
    assert level.transfers_values == 2 * 1000 * 128 + 2 * 1000 * 128 * level.groups_value


def test_causal_stream_divides_group():
    level = smem(analyze("causal_attention", "h100", sets={"q": 4096}))
    assert level.chosen["g_q"] % level.chosen["s_x"] == 0 and 4096 % level.chosen["g_q"] == 0


def test_fp8_needs_fp8_tensor_cores():
    with pytest.raises(NapkinError, match="a100 has no fp8 tensor cores"):
        analyze("attention", "a100", dtype="fp8")
    assert smem(analyze("attention", "h100", dtype="fp8")).chosen["s_x"] % 32 == 0


def test_lowest_level_minimises_predicted_time_upper_levels_their_transfers():
    a = analyze("attention", "h100")
    l2, low = a.kernels[0].levels
    assert l2.chosen["g_q_l2"] == 16384     # 66 SMs of smem hold every query: K and V read once
    assert a.kernels[0].predicted_time_s == pytest.approx(
        max(max(a.kernels[0].compute_time_s.values()), a.kernels[0].transfer_time_s))


def test_unit_loader_rejects_unknown_dtype_override():
    with pytest.raises(NapkinError):
        load("attention", dtype="fp64")
