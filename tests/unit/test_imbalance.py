"""The tail of unequal blocks (analyzer.model.imbalance) against a brute-force block scheduler, and the
ramp of work the model derives from a causal diagram."""

from __future__ import annotations

import heapq

import numpy as np
import pytest

from analyzer import hardware
from analyzer.calibrate.components import model_of
from analyzer.model import imbalance as im
from analyzer.model.predict import utilization

SM = 132


def scheduled(work: list[float], slots: int) -> float:
    """Brute force: each block, in launch order, goes to the slot that frees first."""
    free = [0.0] * slots
    for w in work:
        heapq.heappush(free, heapq.heappop(free) + w)
    return max(free)


@pytest.mark.parametrize("groups, ramp, slots", [(1024, 4, 132), (8192, 8, 264), (2048, 32, 132),
                                                 (10, 4, 132), (133, 2, 132), (5000, 7, 396)])
def test_makespan_is_the_greedy_schedule(groups, ramp, slots):
    work = [j % ramp + 1 for j in range(groups)]
    assert im._makespan(groups, ramp, slots) == scheduled(work, slots)


def test_large_grids_schedule_only_their_last_blocks_and_stay_within_a_block_of_exact():
    groups, ramp, slots = im.EXACT * 3 + 17, 16, 132
    exact = scheduled([j % ramp + 1 for j in range(groups)], slots)
    assert abs(im._makespan(groups, ramp, slots) - exact) <= ramp


def test_equal_blocks_have_no_imbalance_and_unequal_ones_end_later():
    groups = np.array([2048.0, 2048.0, 1024.0, 4.0])
    ramp = np.array([1.0, 32.0, 4.0, 4.0])
    resident = np.array([1.0, 1.0, 2.0, 1.0])
    out = im.imbalance(groups, ramp, resident, SM)
    assert out[0] == 1.0
    assert out[1] == pytest.approx(scheduled([j % 32 + 1 for j in range(2048)], SM) / (16 * 16.5))
    assert out[2] == pytest.approx(scheduled([j % 4 + 1 for j in range(1024)], 2 * SM) / (4 * 2.5))
    assert out[3] == pytest.approx(4 / 2.5)          # one wave: the longest block over the mean
    # wave quantization and imbalance together
    assert utilization(groups, SM, ramp, resident) == pytest.approx(
        groups / (SM * np.ceil(groups / SM)) / out)


def test_a_causal_diagram_ramps_its_query_groups_and_their_mean_is_the_counted_steps():
    profile = hardware.load("h200")
    sizes = {"batch": 2, "heads": 32, "q": 8192, "d": 64}
    tiles = [{"g_q": g, "s_x": s, "g_batch": 1, "g_heads": 1} for g, s in ((256, 128), (128, 64), (64, 16))]
    _, _, causal = model_of("causal_attention", "fp16", "flash", profile)
    v = causal.terms(sizes, tiles).values
    g_q = np.array([t["g_q"] for t in tiles], float)
    s_x = np.array([t["s_x"] for t in tiles], float)
    assert v["ramp"].tolist() == (8192 / g_q).tolist()
    # group i streams (i + 1) g_q / s_x chunks: the mean over the ramp is the model's steps per group
    assert v["steps"].tolist() == pytest.approx((v["groups"] * (v["ramp"] + 1) / 2 * g_q / s_x).tolist())
    _, _, full = model_of("attention", "fp16", "flash", profile)
    assert full.terms({**sizes, "x": 8192}, tiles).values["ramp"].tolist() == [1.0, 1.0, 1.0]
