"""The persistent schedule's blocks under a mask, as the model hands them the tiles
(analyzer.config.band_walk.persistent_loads), against the kernel's turns walked one tile at a time
(attention.gluon: _attn_turns, _attn_place, _attn_turn and _attn_tile with BALANCE, written again here)."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from analyzer.config.band_walk import SHARERS, _walk, persistent_loads


def kernel_turns(tiles: int, blocks: int, pid: int) -> list[int]:
    """The tiles block `pid` takes, as _attn_turns, _attn_place and _attn_turn (BALANCE) give them."""
    def place(k: int) -> int:                       # even rounds left to right, odd rounds right to left
        return pid if k % 2 == 0 else blocks - 1 - pid

    rounds = -(-tiles // blocks)
    taken = rounds - 1 + int(place(rounds - 1) < tiles - (rounds - 1) * blocks)
    return [k * blocks + place(k) for k in range(taken)]


def kernel_block(t: int, tiles: int, blocks_q: int, blocks: int) -> int:
    """The query block of tile t before the mask's reversal, as _attn_tile (BALANCE) places it."""
    heads_all = tiles // blocks_q
    return t // heads_all if heads_all * SHARERS <= blocks else t % blocks_q   # the module's BALANCE


@settings(max_examples=150, deadline=None, derandomize=True)
@given(rows=st.sampled_from([64, 128, 192]), chunk=st.sampled_from([64, 128]), seq=st.integers(1, 5000),
       instances=st.integers(1, 300), blocks=st.integers(1, 140), left=st.integers(-1, 700),
       right=st.sampled_from([-1, 0, 37]))
def test_each_block_takes_what_the_kernels_turns_give_it(rows, chunk, seq, instances, blocks, left, right):
    if left < 0 and right < 0:
        right = 0
    chunks, masked = _walk(rows, chunk, seq, seq, left, right)
    blocks_q = len(chunks)
    tiles = instances * blocks_q
    blocks = min(blocks, tiles)
    walked = []
    for pid in range(blocks):
        blk = [kernel_block(t, tiles, blocks_q, blocks) for t in kernel_turns(tiles, blocks, pid)]
        blk = [blocks_q - 1 - b for b in blk] if right >= 0 else blk
        walked.append((sum(chunks[b] for b in blk), sum(masked[b] for b in blk), len(blk)))
    got = persistent_loads(rows, chunk, seq, seq, left, right, instances, blocks)
    assert [tuple(int(x[i]) for x in got) for i in range(blocks)] == walked
    assert got[2].sum() == tiles and got[0].sum() == instances * chunks.sum()


@settings(max_examples=200, deadline=None, derandomize=True)
@given(instances=st.integers(1, 132 // SHARERS), seq=st.integers(128, 16384))
def test_the_blocks_causal_loads_stay_within_a_tile(instances, seq):
    """Where a round holds SHARERS tiles of every (batch, head), the blocks' sums of causal tile lengths
    differ by at most the longest tile (the boustrophedon over the tiles longest first)."""
    b_chunks, _, _ = persistent_loads(128, 128, seq, seq, -1, 0, instances, min(132, instances * -(-seq // 128)))
    assert b_chunks.max() - b_chunks.min() <= -(-seq // 128)
