"""The chunks a block of the Hopper attention kernel walks under a mask (block skipping), and the steps
of them that run the mask: what analyzer.config.hopper's model counts of a causal, windowed or banded
tile, as the kernel walks it (analyzer.codegen.hopper: _attn_tile, _attn_consumer).
"""

from __future__ import annotations

import math
from functools import lru_cache
from typing import Protocol

import numpy as np

from analyzer.config.scores import SOFTMAX, Scores

SHARERS = 4     # a head's tiles a round must hold for the whole grid's longest-first order (the kernel's BALANCE)


class Tiled(Protocol):
    """What the walk reads of a configuration (analyzer.config.hopper.HopperConfig): its block's rows
    and its chunk."""

    block_rows: int
    chunk: int


def band_walk(causal: bool, scores: Scores = SOFTMAX) -> tuple[int, int] | None:
    """The keys a row sees before and after its own as the kernel walks them (LEFT, RIGHT; -1: all), or
    None where it masks nothing: the chain's mask (scores.Scores.window, .right), or `causal` alone."""
    right = scores.right if scores.right is not None else (0 if causal else -1)
    left = -1 if scores.window is None else scores.window - 1
    return None if left < 0 and right < 0 else (left, right)


def causal_tiles(c: Tiled, seq_q: int, seq_k: int, window: int | None = None,
                 right: int | None = 0) -> tuple[float, float]:
    """A masked tile's chunks and masked steps, on average over the query blocks, as the kernel walks them
    (analyzer.codegen.hopper: _attn_tile, _attn_consumer): the block at rows row0.. streams the chunks up
    to its last row's last key, ceil((row0 + g_q + R) / s_x) of them (block skipping; R = `right`, the keys
    after a row's own it sees, 0 under a causal mask, None: all), of which the first
    floor((row0 + 1 + R) / s_x) need no mask; the chunks from there to the last run the masked step (the
    first chunk, the prologue's, where it is one of them). The last block's rows past seq_q are computed and
    clipped. Under a sliding window of `window` keys (W = window - 1 before a row's own) the block starts
    at chunk floor((row0 - W) / s_x), and the chunks before the first that its last row sees whole are
    masked."""
    return _causal_tiles(c.block_rows, c.chunk, seq_q, seq_k, -1 if window is None else window - 1,
                         -1 if right is None else right)


@lru_cache(maxsize=4096)     # a ranking asks it of every configuration; few block shapes share them all
def _causal_tiles(block_rows: int, chunk: int, seq_q: int, seq_k: int, left: int, right: int) -> tuple[float, float]:
    walked = _walk(block_rows, chunk, seq_q, seq_k, left, right)
    return float(walked[0].mean()), float(walked[1].mean())


@lru_cache(maxsize=4096)
def _walk(block_rows: int, chunk: int, seq_q: int, seq_k: int, left: int, right: int) -> tuple[np.ndarray, np.ndarray]:
    """Each query block's chunks and masked steps (causal_tiles' walk), in the order of its rows."""
    whole_chunks = math.ceil(seq_k / chunk)
    blocks = max(math.ceil(seq_q / block_rows), 1)
    chunks, masked = np.zeros(blocks, dtype=np.int64), np.zeros(blocks, dtype=np.int64)
    for b in range(blocks):
        row0 = b * block_rows
        end, unmasked = whole_chunks, seq_k // chunk
        if right >= 0:
            end = min(end, math.ceil((row0 + block_rows + right) / chunk))
            unmasked = min(unmasked, (row0 + 1 + right) // chunk)
        first = whole = 0
        if left >= 0:
            first = min(max(row0 - left, 0) // chunk, end - 1)     # a tile that sees no key streams one
            whole = min(max(first, -(-max(row0 + block_rows - 1 - left, 0) // chunk)), unmasked)
        chunks[b] = end - first
        # the first chunk (the tile's head) where it is not whole, then the left edge's, the diagonal's
        masked[b] = ((first < whole or first >= unmasked) + max(0, whole - first - 1)
                     + max(0, end - max(unmasked, first + 1)))
    return chunks, masked


@lru_cache(maxsize=4096)
def persistent_loads(block_rows: int, chunk: int, seq_q: int, seq_k: int, left: int, right: int, instances: int,
                     blocks: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """What each block of a persistent schedule under a mask takes, as the kernel hands out the tiles
    (analyzer.codegen.hopper: _attn_turns, _attn_place, _attn_turn, _attn_tile with BALANCE): its chunks,
    masked steps and tiles, one of each a block. The tiles come longest first where the mask has a right
    edge (block skipping makes them unequal): over the whole grid where a round holds SHARERS tiles of
    each (batch, head), else a head's consecutive; a block takes its own place in even rounds and its
    mirror in odd ones (a boustrophedon), so that the blocks' sums stay within about a tile of each other."""
    chunks, masked = _walk(block_rows, chunk, seq_q, seq_k, left, right)
    blocks_q = len(chunks)
    tiles = instances * blocks_q
    rounds = -(-tiles // blocks)
    k, pid = np.arange(rounds)[:, None], np.arange(blocks)[None, :]
    t = k * blocks + np.where(k % 2 == 0, pid, blocks - 1 - pid)
    taken = t < tiles
    blk = t // instances if instances * SHARERS <= blocks else t % blocks_q
    if right >= 0:
        blk = blocks_q - 1 - blk
    blk = np.where(taken, blk, 0)
    return ((chunks[blk] * taken).sum(0), (masked[blk] * taken).sum(0), taken.sum(0))


__all__ = ["band_walk", "causal_tiles", "persistent_loads"]
