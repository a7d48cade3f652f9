"""The persistent schedule's blocks under a mask, as the model hands them the tiles
(analyzer.config.band_walk.persistent_loads), against the kernel's turns walked one tile at a time
(attention.gluon: _attn_turns, _attn_turn and _attn_tile with ROTATE, written again here)."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from analyzer.config.band_walk import _walk, persistent_loads


def kernel_turns(tiles: int, blocks: int, pid: int) -> list[int]:
    """The tiles block `pid` takes, as _attn_turns and _attn_turn (ROTATE) give them."""
    rounds = -(-tiles // blocks)
    taken = rounds - 1 + int((pid + rounds - 1) % blocks < tiles - (rounds - 1) * blocks)
    return [k * blocks + (pid + k) % blocks for k in range(taken)]


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
        blk = [t % blocks_q for t in kernel_turns(tiles, blocks, pid)]
        blk = [blocks_q - 1 - b for b in blk] if right >= 0 else blk
        walked.append((sum(chunks[b] for b in blk), sum(masked[b] for b in blk), len(blk)))
    got = persistent_loads(rows, chunk, seq, seq, left, right, instances, blocks)
    assert [tuple(int(x[i]) for x in got) for i in range(blocks)] == walked
    assert got[2].sum() == tiles and got[0].sum() == instances * chunks.sum()


def test_the_busiest_block_at_16k_causal_tokens():
    """docs/section6.md's case: 16 heads of 16384 causal tokens, 128-row tiles of 128-key chunks, on 132
    SMs: the busiest block streams 1.49-1.50x the mean block's chunks."""
    b_chunks, _, _ = persistent_loads(128, 128, 16384, 16384, -1, 0, 16, 132)
    assert 1.49 <= b_chunks.max() / b_chunks.mean() <= 1.50
