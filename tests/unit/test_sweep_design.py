"""napkin measure --sweep's design (analyzer.measure.sweep.sampled): the configurations a length times are
those bench/hopper_sweep.py timed for the recordings the shipped fits were fitted on, so that a user's fit
is held against the shipped one on the same design (docs/measure.md)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from analyzer import hardware
from analyzer.config import hopper
from analyzer.config.hopper_params import HopperParams, ranked_schedules
from analyzer.measure.sweep import ALL_STAGES_AT, PERSISTENT_TOP, PREFETCH_AT, Grid, json_key, sampled
from bench.hopper_sweep import Shape, candidates

GRID = Grid()


def _key(c) -> str:
    return json_key(c.entry())


@pytest.mark.parametrize("gpu", ["h100", "h200"])
@pytest.mark.parametrize("causal", [False, True])
def test_the_sampled_design_is_the_bench_sweeps(gpu, causal):
    """At every length and head dim of the grid: the tiles configurations of a sweep of every one
    (`--schedules tiles`) and the persistent ones of a sweep of the model's first six (`--schedules
    tiles,persistent --top 6`, and on the H200 `tiles,persistent,prefetch` at PREFETCH_AT, its prefetch
    records where the model ranks them: no mask), the runs the shipped recordings join."""
    profile = hardware.load(gpu)
    for d in GRID.head_dims:
        for length in GRID.lengths:
            shape = Shape("grid", "causal_attention" if causal else "mha", GRID.tokens // length, GRID.hidden // d,
                          GRID.hidden // d, length, length, d)
            every = candidates(SimpleNamespace(profile=profile, args=SimpleNamespace(top=0, schedules="tiles",
                                                                                     overlaps="")), shape)
            prefetch = length in PREFETCH_AT and "prefetch" in ranked_schedules(HopperParams.of(profile), causal)
            firsts = candidates(SimpleNamespace(profile=profile, args=SimpleNamespace(
                top=PERSISTENT_TOP, overlaps="", schedules="tiles,persistent" + ",prefetch" * prefetch)), shape)
            bench = {_key(c) for c in every} | {_key(c) for c in firsts if c.schedule != "tiles"}
            ranked = hopper.ranked(profile, d, "fp16", seq_q=length, seq_k=length,
                                   instances=shape.batch * shape.heads_q, causal=causal)
            ours = [c for _, c in sampled(ranked, length)]
            assert {_key(c) for c in ours} == bench, (d, length)
            assert len(ours) == len(bench)


def test_the_sampled_design_keeps_the_models_order_every_group_and_its_first_choice():
    profile = hardware.load("h200")
    for length in (1024, ALL_STAGES_AT[0]):
        ranked = hopper.ranked(profile, 128, "fp16", seq_q=length, seq_k=length, instances=128, causal=False)
        ours = sampled(ranked, length)
        order = [id(c) for _, c in ranked]
        assert [order.index(id(c)) for _, c in ours] == sorted(order.index(id(c)) for _, c in ours)
        assert ours[0][1] is ranked[0][1]          # the model's first choice is timed
        tiles = [c for _, c in ranked if c.schedule == "tiles"]
        kept = [c for _, c in ours if c.schedule == "tiles"]
        assert {(c.warpgroups, c.chunk, c.overlap) for c in kept} == {(c.warpgroups, c.chunk, c.overlap) for c in tiles}
        assert (kept == tiles) == (length in ALL_STAGES_AT)
        others = {(c.warpgroups, c.chunk, c.stages, c.overlap) for _, c in ours if c.schedule != "tiles"}
        assert 0 < len(others) <= PERSISTENT_TOP
