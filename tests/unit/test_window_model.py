"""The Hopper model's walk of a causal tile under a sliding window, and the pairs a window attends,
against brute force: the chunks a query block streams are those holding a key some row of it sees, and
the masked steps those where some row does not see every key, the tile's first chunk included."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from analyzer.config.band_walk import _causal_tiles
from analyzer.config.scores import pairs
from analyzer.diagram.interface import Band


def brute(block_rows: int, chunk: int, seq_q: int, seq_k: int, window: int | None) -> tuple[float, float]:
    rows, keys = np.arange(seq_q)[:, None], np.arange(seq_k)[None, :]
    seen = (keys <= rows) & ((keys > rows - window) if window else True)
    blocks = -(-seq_q // block_rows)
    chunks = masked = 0
    for b in range(blocks):
        block = seen[b * block_rows:(b + 1) * block_rows]
        touched = [c for c in range(-(-seq_k // chunk)) if block[:, c * chunk:(c + 1) * chunk].any()]
        chunks += len(touched)
        # whole: every row of the block (past seq_q too: the kernel computes them) sees every key of it
        full = [c for c in touched if (c + 1) * chunk <= seq_k and all(
            (c + 1) * chunk - 1 <= r and (window is None or c * chunk > r - window)
            for r in range(b * block_rows, (b + 1) * block_rows))]
        masked += sum(1 for c in touched if c not in full)
    return chunks / blocks, masked / blocks


@settings(max_examples=200, deadline=None, derandomize=True)
@given(rows=st.sampled_from([64, 128, 192]), chunk=st.sampled_from([64, 128, 176]), seq=st.integers(1, 1500),
       window=st.one_of(st.none(), st.integers(1, 700)))
def test_the_walk_is_the_chunks_a_block_sees(rows, chunk, seq, window):
    assert _causal_tiles(rows, chunk, seq, seq, -1 if window is None else window - 1, 0) == \
        brute(rows, chunk, seq, seq, window)


@settings(max_examples=100, deadline=None, derandomize=True)
@given(seq_q=st.integers(1, 600), seq_k=st.integers(1, 600), window=st.integers(1, 700))
def test_a_window_attends_the_pairs_it_sees(seq_q, seq_k, window):
    i, j = np.arange(seq_q)[:, None], np.arange(seq_k)[None, :]
    assert pairs(seq_q, seq_k, Band(window - 1, 0)) == float(((j <= i) & (j > i - window)).sum())
    assert pairs(seq_q, seq_k, Band(None, 0)) == seq_q * seq_k / 2      # FlashAttention's count for causal
    assert pairs(seq_q, seq_k, None) == seq_q * seq_k
