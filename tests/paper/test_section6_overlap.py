"""Section 5.7 and Section 6: overlapping warpgroups, and the 66% SoftMax overhead hypothesis.

"If we assume a 66% overhead in SoftMax, we would expect FP16 intra-warpgroup to take 4/3 as long as
necessary and FP8 inter warpgroup to take 5/3 as long as necessary, explaining both the 75%
utilization for FP16 and the 60% utilization for FP8" (Section 6.3). The clocks come from the
FlashAttention-3 configurations of diagrams/attention.yaml (Appendix B.2.2-B.2.4); the schedule from
list-scheduling the warpgroups on the SM's pipelines.
"""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from analyzer.config.configure import configure
from analyzer.config.overlap import Stage, bound, simulate


def overlap(config: str, overhead: float, **options):
    return configure("attention", "h100", config=config, overhead=overhead, **options).overlap


def test_fp16_intra_warpgroup_at_66_percent_overhead_is_75_percent():
    assert overlap("fa3_fp16_intra", 0.66).utilization == pytest.approx(0.75, abs=0.01)


def test_fp8_inter_warpgroup_at_66_percent_overhead_is_60_percent():
    assert overlap("fa3_fp8_inter", 0.66).utilization == pytest.approx(0.60, abs=0.01)


def test_without_overhead_fp16_and_fp8_inter_saturate_the_tensor_cores():
    # within 1%: napkin also counts the one delta exponential per chunk that the sheets leave out
    assert overlap("fa3_fp16_intra", 0.0).utilization == pytest.approx(1.0, abs=0.01)
    assert overlap("fa3_fp8_inter", 0.0).utilization == pytest.approx(1.0, abs=0.01)


def test_fp8_intra_warpgroup_loses_at_least_a_third():
    """Section 6.2: the special function unit idles for part of the cycle, "reducing performance by
    a minimum of 33%"."""
    assert overlap("fa3_fp8_intra", 0.0).utilization == pytest.approx(2 / 3, abs=0.01)


def test_accommodation():
    """Figure 36: intra accommodates no SoftMax overhead, inter (two warpgroups) 100%;
    Figure 37: FP8 accommodates none, whatever the strategy."""
    assert overlap("fa3_fp16_intra", 0.0).accommodation == pytest.approx(0.0, abs=0.01)
    inter = overlap("fa3_fp16_intra", 0.0, overlap="inter")   # the same tiles, N = 1
    assert inter.accommodation == pytest.approx(0.0, abs=0.01)
    two = configure("attention", "h100", config="fa3_fp16_intra", overlap="inter",
                    sets={"N": 2}).overlap
    assert two.accommodation == pytest.approx(1.0, abs=0.02)
    assert overlap("fa3_fp8_inter", 0.0).accommodation == pytest.approx(0.0, abs=0.01)
    assert overlap("fa3_fp8_intra", 0.0).accommodation == pytest.approx(0.0, abs=0.01)


def test_derived_algorithm_hides_half_its_softmax():
    """Figure 35: three warpgroups accommodate about 50% overhead on the non-tensor blocks."""
    o = overlap("napkin_hopper", 0.0)
    assert o.utilization == pytest.approx(1.0, abs=1e-6)
    assert o.accommodation == pytest.approx(0.5, abs=0.03)


# -- the schedule against its closed forms -------------------------------------------------------------

clocks = st.floats(min_value=0.25, max_value=20, allow_nan=False)


@settings(max_examples=40, deadline=None)
@given(t1=clocks, r=clocks, t2=clocks, o=st.floats(min_value=0, max_value=2), n=st.integers(1, 4))
def test_inter_period(t1, r, t2, o, n):
    """Inter: at least max(N sum T, N R (1 + o), sum T + R (1 + o)) per iteration of every group,
    at most every group's chain one after another; one group runs its chain."""
    body = (Stage("T1", "tensor", t1), Stage("R", "sfu", r), Stage("T2", "tensor", t2))
    _, period = simulate(body, groups=n, strategy="inter", overhead=o, iterations=60)
    expect = max(n * (t1 + t2), n * r * (1 + o), t1 + t2 + r * (1 + o))
    assert bound(body, groups=n, strategy="inter", overhead=o) == pytest.approx(expect)
    # a mean over a window of 37 iterations: within a few percent of steady state, whatever the phase
    # of a schedule that repeats over several iterations
    assert expect * (1 - 3e-2) <= period <= n * (t1 + t2 + r * (1 + o)) * (1 + 3e-2)
    if n == 1 or r * (1 + o) >= t1 + t2 or r * (1 + o) <= min(t1, t2):
        assert period == pytest.approx(expect, rel=3e-2)   # list scheduling reaches the bound


@settings(max_examples=40, deadline=None)
@given(t1=clocks, r=clocks, t2=clocks, o=st.floats(min_value=0, max_value=2))
def test_intra_period(t1, r, t2, o):
    """Intra (one warpgroup): T1 + max(T2, R (1 + o))."""
    body = (Stage("T1", "tensor", t1), Stage("R", "sfu", r), Stage("T2", "tensor", t2))
    _, period = simulate(body, groups=1, strategy="intra", overhead=o, iterations=30)
    assert period == pytest.approx(t1 + max(t2, r * (1 + o)), rel=1e-6)
    assert bound(body, groups=1, strategy="intra", overhead=o) == pytest.approx(period, rel=1e-6)


@settings(max_examples=40, deadline=None)
@given(t=clocks, r=clocks, o=st.floats(min_value=0, max_value=2), n=st.integers(2, 4),
       softness=st.floats(min_value=0.01, max_value=0.7))
def test_a_soft_overlap_lies_between_the_longer_lane_and_their_sum(t, r, o, n, softness):
    """The fitted soft overlap (napkin calibrate --kernel hopper) combines the lanes' work as a p-norm,
    p = 1 / softness: never below the perfect overlap's period (Section 6's max), never above the lanes'
    work end to end, growing with the softness; a quadrature sum at 1/2; the max again as it tends to 0."""
    body = (Stage("T1", "tensor", t / 2), Stage("R", "sfu", r), Stage("T2", "tensor", t / 2))
    sharp = bound(body, groups=n, strategy="inter", overhead=o)
    soft = bound(body, groups=n, strategy="inter", overhead=o, softness=softness)
    lanes = n * t, n * r * (1 + o)
    assert sharp * (1 - 1e-12) <= soft <= max(sum(lanes), sharp) * (1 + 1e-12)
    assert soft <= bound(body, groups=n, strategy="inter", overhead=o, softness=min(softness * 1.5, 0.9)) * (1 + 1e-12)
    assert bound(body, groups=n, strategy="inter", overhead=o, softness=0.5) == pytest.approx(
        max((lanes[0] ** 2 + lanes[1] ** 2) ** 0.5, t + r * (1 + o)))
    assert bound(body, groups=n, strategy="inter", overhead=o, softness=1e-4) == pytest.approx(sharp)


def test_blocks_never_share_a_lane():
    blocks, _ = simulate((Stage("T1", "tensor", 2), Stage("R", "sfu", 4.06), Stage("T2", "tensor", 4),
                          Stage("A", "vector", 0.5)), groups=3, strategy="inter", overhead=0.5)
    for lane in ("tensor", "sfu", "vector"):
        spans = sorted((b.start, b.end) for b in blocks if b.lane == lane)
        pairs = zip(spans, spans[1:], strict=False)
        assert all(a_end <= b_start + 1e-9 for (_, a_end), (b_start, _) in pairs)
