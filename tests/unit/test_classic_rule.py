"""The classic FlashAttention block-size rule (Dao et al. 2022, Algorithm 1) as a baseline in the analysis.

Hand computations use the profiles' numbers: smem per block 232448 B (H100, H200), 166912 B (A100),
65536 B (T4); fp16 is 2 bytes per value.
"""

import json

import pytest
from typer.testing import CliRunner

from analyzer import hardware
from analyzer.cli import app
from analyzer.common import resources
from analyzer.model.analysis import analyze, load
from analyzer.model.classic import block_sizes, rule_axes
from analyzer.model.fusion import schedule

runner = CliRunner()
SHIPPED_GPUS = list(resources.shipped("hardware"))


def rule_of(diagram: str, gpu: str = "h100", **options):
    return analyze(diagram, gpu, **options).kernels[0].classic_rule


def figure_21_bytes(q: int, x: int, d: int, g_q: int) -> int:
    """H = 2qd + 2qxd/g_q (Figure 21) in fp16 bytes, with whole query groups."""
    return 2 * (2 * q * d + 2 * q * x * d // g_q)


@pytest.mark.parametrize(("gpu", "smem_bytes", "m", "b_c", "b_r"), [
    ("h100", 232448, 116224, 227, 128),   # ceil(116224 / 512) = 227; min(227, 128) = 128
    ("t4", 65536, 32768, 64, 64),         # ceil(32768 / 512) = 64; min(64, 128) = 64
    ("a100", 166912, 83456, 163, 128),
])
def test_block_sizes_from_the_profile_match_a_hand_computation(gpu, smem_bytes, m, b_c, b_r):
    assert hardware.load(gpu).level("smem").capacity_bytes_per_block == smem_bytes
    assert smem_bytes // 2 == m and block_sizes(m, 128) == (b_c, b_r)
    r = rule_of("attention", gpu)
    assert (r.memory_elements, r.head_dim, r.b_c, r.b_r) == (m, 128, b_c, b_r)
    assert r.tiles == {"g_q": b_r, "s_x": b_c}


def test_block_sizes_round_up_and_cap_the_query_block_at_d():
    assert block_sizes(58112, 128) == (114, 114)   # 58112 / 512 = 113.5
    assert block_sizes(116224, 64) == (454, 64)


def test_rule_blocks_are_clamped_to_the_sequence():
    r = rule_of("attention", sets={"q": 100, "x": 200})
    assert (r.b_c, r.b_r) == (227, 128) and r.tiles == {"g_q": 100, "s_x": 200}


def test_rule_transfers_are_figure_21_at_g_q_equal_b_r():
    h100 = rule_of("attention", "h100")
    assert h100.transfer_bytes == figure_21_bytes(16384, 16384, 128, 128)
    t4 = rule_of("attention", "t4")
    assert t4.transfer_bytes == figure_21_bytes(16384, 16384, 128, 64)
    # ragged: 1000 queries in ceil(1000 / 128) = 8 groups, each loading all of K and V
    ragged = rule_of("attention", sets={"q": 1000, "x": 3000})
    assert ragged.transfer_bytes == 2 * (2 * 1000 * 128 + 2 * 3000 * 128 * 8)


def test_optimum_is_the_largest_feasible_query_group_under_the_divisors():
    # napkin's memory in bytes: 4 d g_q + 2 d s_x + 2 g_q s_x + 4 g_q; at s_x = 16 (wgmma k) and g_q a
    # multiple of 64 (wgmma m), 548 g_q + 4096 <= 232448 gives g_q = 384
    r = rule_of("attention", "h100")
    assert r.optimal_tiles == {"g_q": 384, "s_x": 16}
    assert r.optimal_transfer_bytes == 2 * (2 * 16384 * 128 + 2 * 16384 * 128 * 43)   # ceil(16384/384)
    assert r.ratio == pytest.approx(r.transfer_bytes / r.optimal_transfer_bytes)
    assert r.ratio == pytest.approx((1 + 128) / (1 + 43))


@pytest.mark.parametrize("gpu", SHIPPED_GPUS)
def test_rule_fits_and_is_never_better_than_the_optimum_on_shipped_gpus(gpu):
    a = analyze("attention", gpu)
    r = a.kernels[0].classic_rule
    assert r.fits and r.memory_bytes <= r.memory_limit_bytes
    assert r.memory_limit_bytes == a.kernels[0].levels[-1].memory_limit_bytes
    assert r.ratio >= 1 and r.optimal_transfer_bytes <= r.transfer_bytes
    assert r.predicted_time_s >= a.kernels[0].predicted_time_s * (1 - 1e-9)


def test_rule_that_overflows_napkins_memory_says_so():
    # d = 170: B_c = ceil(116224 / 680) = 171, B_r = 170; 2 (2*170*170 + 2*170*171 + 2*170) = 232560 B
    r = rule_of("attention", sets={"d": 170})
    assert (r.b_c, r.b_r) == (171, 170)
    assert r.memory_bytes == 232560 and not r.fits


def test_mha_and_gqa_apply_with_one_head_per_block():
    mha = rule_of("mha")
    assert mha.tiles == {"g_h": 1, "g_q": 128, "s_x": 227}
    gqa = rule_of("gqa")
    assert gqa.tiles == {"g_h": 1, "g_g": 1, "g_q": 128, "s_x": 227}
    assert (gqa.query_axis, gqa.key_axis, gqa.head_axis) == ("q", "x", "d")
    assert mha.ratio >= 1 and gqa.ratio >= 1


def test_rule_breaks_divisors_it_does_not_know_about():
    assert rule_of("attention").breaks == ["s_x multiple of 8: wgmma n of S",
                                          "s_x multiple of 16: wgmma k of O"]
    assert rule_of("attention", "t4").breaks == []


@pytest.mark.parametrize("diagram", ["matmul", "mlp2", "attention_unfused", "softmax_contraction"])
def test_kernels_not_shaped_like_attention_get_none(diagram):
    a = analyze(diagram, "h100")
    assert all(k.classic_rule is None for k in a.kernels)


def test_applicability_comes_from_the_schedule_not_the_names():
    d = load("attention")
    axes = rule_axes(schedule(d, d.kernels[0], "smem"))
    assert (axes.contraction, axes.query, axes.key, axes.head) == ("S", "q", "x", "d")
    mlp = load("mlp2")   # streams the first contraction's n axis, but W2 is not a block of width i
    assert rule_axes(schedule(mlp, mlp.kernels[0], "smem")) is None
    unfused = load("attention_unfused")
    assert all(rule_axes(schedule(unfused, k, "smem")) is None for k in unfused.kernels)


def test_json_has_the_field():
    result = runner.invoke(app, ["analyze", "attention", "--gpu", "h100", "--json"])
    assert result.exit_code == 0, result.output
    rule = json.loads(result.output)["kernels"][0]["classic_rule"]
    assert (rule["b_c"], rule["b_r"], rule["memory_elements"]) == (227, 128, 116224)
    assert rule["tiles"] == {"g_q": 128, "s_x": 227} and rule["fits"] is True
    matmul = runner.invoke(app, ["analyze", "matmul", "--json"])
    assert json.loads(matmul.output)["kernels"][0]["classic_rule"] is None


def test_terminal_report_has_the_line():
    result = runner.invoke(app, ["analyze", "attention", "--gpu", "h100"], env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    assert ("classic FlashAttention rule (B_c = ceil(M/4d) = 227, B_r = min(B_c, d) = 128; "
            "M = 116224 values, d = 128): smem transfers 2.93x the optimum") in result.output
    assert "rule tiles g_q=128, s_x=227" in result.output
    matmul = runner.invoke(app, ["analyze", "matmul"], env={"COLUMNS": "200"})
    assert "classic FlashAttention" not in matmul.output
