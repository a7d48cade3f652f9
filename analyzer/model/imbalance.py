"""The tail of unequal blocks: how much longer a grid whose blocks carry different work takes than one
whose blocks carry the same work, on the GPU's block scheduler.

Under block skipping (a causal mask, analyzer.model.fusion.Skip) group i of the query axis streams the
keys up to its diagonal only: with whole tiles (analyzer.model.constraints.skip_divides) the n query
groups of one grid index carry work 1, 2, ..., n (in units of g_q / s_x chunks), their mean is what
the model's FLOPs and steps count (a ragged last group of a causal mask over one sequence, counted
exactly there, is taken as a whole one here). Wave quantization (analyzer.model.predict.utilization) assumes
equal blocks; unequal ones end unevenly. Stated assumptions:
- the blocks launch in grid order, the query groups of one grid index one after another (the
  generated kernels put the grouped axes on grid axis 0, which the scheduler walks first);
- each of the N_SM x k slots (k blocks resident per SM) takes the next block when its block ends
  (greedy list scheduling), and a block's time is proportional to its work.
The imbalance is the list schedule's makespan over that of equal blocks with the same total work;
1 when every block carries the same work (ramp 1).
"""

from __future__ import annotations

import heapq
from functools import lru_cache

import numpy as np

# Blocks scheduled one by one; in larger grids only the last ones (see _makespan). Against 65536 the
# imbalance of the size tables' largest grids (up to 2M blocks) moves by 0.24 % at most, at a quarter of
# the time: far inside the model's own error.
EXACT = 1 << 14


def imbalance(groups, ramp, resident, sm_count: int) -> np.ndarray:
    """Elementwise: the list schedule's makespan of `groups` blocks whose work ramps 1 .. `ramp` along
    the launch order, over that of as many equal blocks, on sm_count x `resident` slots."""
    g, r, k = np.broadcast_arrays(*(np.maximum(np.rint(np.asarray(x, dtype=np.float64)), 1.0)
                                    for x in (groups, ramp, resident)))
    out = np.ones(g.shape)
    triples = zip(g.ravel(), r.ravel(), k.ravel(), strict=True)
    for key in {(int(a), int(b), int(c)) for a, b, c in triples if b > 1}:
        mask = (g == key[0]) & (r == key[1]) & (k == key[2])
        out[mask] = _imbalance(key[0], key[1], key[2] * sm_count)
    return out


@lru_cache(maxsize=4096)
def _imbalance(groups: int, ramp: int, slots: int) -> float:
    mean = (ramp + 1) / 2
    equal = -(-groups // slots) * mean            # ceil(N_g / slots) waves of equal blocks
    return _makespan(groups, ramp, slots) / equal


def _makespan(groups: int, ramp: int, slots: int) -> float:
    """Greedy list scheduling of blocks with work j mod ramp + 1 (j: launch order) on `slots` slots.
    Beyond EXACT blocks, the ones before the last EXACT are taken as spread evenly over the slots (the
    greedy schedule keeps the slots within one block's work of each other)."""
    first = max(0, groups - EXACT)
    start = (first // ramp * ramp * (ramp + 1) / 2
             + sum(j % ramp + 1 for j in range(first - first % ramp, first))) / slots
    wave = min(slots, groups - first)              # the first blocks fill empty slots
    busy = [start + j % ramp + 1 for j in range(first, first + wave)]
    heapq.heapify(busy)
    replace = heapq.heapreplace                    # the earliest free slot takes the next block
    w = (first + wave) % ramp + 1
    for _ in range(groups - first - wave):
        replace(busy, busy[0] + w)
        w = w + 1 if w < ramp else 1
    return max(busy)
