"""The Hopper attention kernel's by-size table (analyzer.config.hopper_table): where a call reads it and
what each cell ranks (tests/kernels/test_hopper.py holds the generated module's _sized to the same cells)."""

from __future__ import annotations

import pytest

from analyzer import hardware
from analyzer.config import hopper as model
from analyzer.config import hopper_table as table
from analyzer.config.by_size import INSTANCES
from analyzer.config.hopper import HopperParams, predicted_time

H200 = hardware.load("h200")


def test_a_call_reads_its_keys_in_whole_chunks_and_its_queries_a_key():
    """SDXL's cross-attention (4096 queries against 77 keys, 20 heads): 77 keys stream as one chunk of 128
    or two of 64, so the call reads 128 keys, queries 32 times the keys, 640 square problems' rows."""
    assert table.table_point(4096, 77, 20) == (128, 640.0, 32.0)
    assert table.table_point(1024, 1024, 8) == (1024, 8.0, 1.0)
    length, rows, ratio = table.table_point(1, 1, 1)            # one query against one key: a chunk
    assert (length, rows * length, ratio * length) == (64, 1, 1)


@pytest.mark.parametrize("length, ratio, instances", [(64, 16, 512), (128, 64, 1024), (512, 4, 2), (1024, 1, 1)])
def test_a_point_ranks_its_rows_over_queries_ratio_times_its_keys(length, ratio, instances):
    seq_q, seq_k, n = table.point_problem(length, ratio, instances)
    assert (seq_q, seq_k) == (length * ratio, length)
    assert n * seq_q == max(instances, ratio) * length        # as many query rows, one instance at least


def _means_over_span(length, ratio, instances, costs):
    """Each configuration's time over the fastest's, averaged over the calls a cell stands for, from
    predicted_time itself (not the table's own parts)."""
    calls = [instances * 2.0 ** x / ratio for x in table.SPAN]
    times = {c: [costs(c, length * ratio, length, n) for n in calls] for c in CONFIGS}
    fastest = [min(ts[i] for ts in times.values()) for i in range(len(calls))]
    return {c: sum(t / f for t, f in zip(ts, fastest, strict=True)) / len(calls) for c, ts in times.items()}


CONFIGS = [c for _, c in model.ranked(H200, 64, "fp16", seq_q=4096, seq_k=4096, instances=16)]


@pytest.mark.parametrize("length, ratio, instances", [(128, 16, 512), (64, 64, 1024), (512, 1, 128), (4096, 4, 8)])
def test_an_unmasked_cell_takes_the_fastest_over_the_calls_it_stands_for(length, ratio, instances):
    """Within ALIKE of the least mean over SPAN of time over the fastest's (the tie rule decides inside)."""
    params = HopperParams.of(H200)

    def costs(c, seq_q, seq_k, n):
        return predicted_time(H200, c, 64, "fp16", seq_q=seq_q, seq_k=seq_k, instances=n, params=params)

    chosen = table.chosen_at(H200, 64, "fp16", causal=False, length=length, instances=instances, ratio=ratio)
    means = _means_over_span(length, ratio, instances, costs)
    assert means[chosen] <= min(means.values()) * (1 + model.ALIKE) + 1e-12


def test_the_cell_of_sdxls_call_launches_blocks_its_rows_fill():
    """On the H200's fit the call 4096 x 77 (20 heads) reads a cell of two consumers (128-row blocks), not
    the square problem's 256-row blocks that ran it 1.5x slower (bench/results/hopper_sweep_h200_real.md)."""
    t = table.hopper_table(H200, 64, "fp16", causal=False)
    length, rows, ratio = table.table_point(4096, 77, 20)
    assert t.at(length, rows, ratio).block_rows == 128
    assert t.ratios == table.RATIOS and t.lengths == table.KEY_LENGTHS and t.instances == INSTANCES
    assert table.hopper_table(H200, 64, "fp16", causal=True).ratios == (1,)     # a mask: the square alone
