"""Overlap of warpgroups (Section 5.7, Section 6, Figures 34-37): a clock-cycle schedule per SM.

Each tensor-core thread group (warpgroup) runs the loop body of Table 3: the first contraction, the
threads' work (softmax on the special function unit, the rescale on the FMA lanes), the second
contraction. Its blocks take the clock cycles per row of Table 3 (times the group's rows); the SM's
tensor cores, special function units and FMA lanes are each one lane that one block uses at a time.
Work the table leaves out is overhead: an assumed fraction o of a non-tensor block's clocks, drawn
hatched. Two strategies (FlashAttention-3):

- inter: each group runs its iteration in order (contraction, softmax, contraction); N groups share the
  lanes, so one group's softmax hides under another's contractions (ping-pong). Per iteration of every
  group: period = max(N sum T, N R_sfu (1 + o), N R_fma (1 + o), sum T + R (1 + o)).
- intra: one group issues the next chunk's first contraction and this chunk's second contraction
  together, then does this chunk's softmax while they run: period = T_1 + max(T_2, R (1 + o)),
  holding two score tiles.

`simulate` places every block by list scheduling (a block starts when its inputs are ready and its
lane is free, in program order), which gives the pictures and the steady-state period; utilisation is
the tensor cores' busy share of it. The closed forms are lower bounds (`bound`): list scheduling
reaches them for the paper's configurations, but for some ratios of clocks only an order enforced by
barriers does, so the report gives both. Section 6.3's hypothesis, a 66% softmax overhead, gives 75% for
FlashAttention-3 FP16 (intra) and 60% for FP8 (inter).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from analyzer.config.compute import Compute

LANES = ("tensor", "sfu", "vector")


@dataclass(frozen=True)
class Stage:
    """One block of the loop body: a column of Table 3 (clocks for one group)."""

    name: str
    lane: str
    clocks: float


@dataclass(frozen=True)
class Block:
    """A placed block: a stage of one group's iteration on a lane."""

    group: int
    iteration: int
    stage: str
    lane: str
    start: float
    work: float        # clocks of Table 3
    overhead: float    # assumed extra clocks (hatched)

    @property
    def end(self) -> float:
        return self.start + self.work + self.overhead


@dataclass(frozen=True)
class Overlap:
    strategy: str
    groups: int
    overhead: float
    stages: tuple[Stage, ...]
    blocks: tuple[Block, ...]
    period: float                 # clocks per iteration of every group, steady state
    utilization: float            # tensor cores busy / period
    accommodation: float          # largest overhead that keeps the tensor cores saturated
    bound: float                  # the closed-form period, a lower bound on `period`

    @property
    def tensor_clocks(self) -> float:
        return self.groups * sum(s.clocks for s in self.stages if s.lane == "tensor")


def stages(compute: Compute, rows: int = 1) -> tuple[Stage, ...]:
    """The body's columns as blocks for one group of `rows` rows (rows = 1: clocks per row)."""
    return tuple(Stage(c.label, c.pipeline, c.clocks_per_row * rows) for c in compute.columns)


def simulate(body: tuple[Stage, ...], *, groups: int, strategy: str, overhead: float,
             iterations: int = 24) -> tuple[tuple[Block, ...], float]:
    """List-schedule `iterations` iterations of every group; return the blocks and the period.

    The period is the steady state's: how often the last of the groups starts an iteration, between
    the first third (past the ramp-up) and the last few (before the ragged end). A schedule that
    repeats over several iterations averages out to within a period over the window.
    """
    blocks = _place(body, groups, strategy, overhead, iterations)
    first = body[0].name
    starts = [max(b.start for b in blocks if b.iteration == j and b.stage == first)
              for j in range(iterations)]
    j1, j2 = iterations // 3, iterations - 3
    return blocks, (starts[j2] - starts[j1]) / (j2 - j1)


def _place(body: tuple[Stage, ...], groups: int, strategy: str, overhead: float,
           iterations: int) -> tuple[Block, ...]:
    """A block starts at the earliest time its dependencies are done and its lane is free; among
    blocks that could start at the same time, the one issued first goes first."""
    tensor = [i for i, st in enumerate(body) if st.lane == "tensor"]
    if not tensor:
        raise ValueError("a loop body without tensor-core work has nothing to overlap")
    if strategy == "intra" and len(tensor) > 1 and tensor[1] != len(body) - 1:
        raise ValueError("intra-group overlap needs the second contraction last in the loop body")
    deps = _inter_deps if strategy == "inter" or len(tensor) == 1 else _intra_deps
    order = _issue_order(body, groups, iterations, strategy)
    done: dict[tuple[int, int, int], float] = {}
    free = dict.fromkeys(LANES, 0.0)
    blocks: list[Block] = []
    # each group's blocks in issue order; only the next few of each can be ready
    pending = {g: [(pos, key) for pos, key in enumerate(order) if key[0] == g] for g in range(groups)}
    window = len(body) + 1
    while any(pending.values()):
        best = None
        for g, queue in pending.items():
            for n, (pos, key) in enumerate(queue[:window]):
                needs = [x for x in deps(body, *key) if x[1] >= 0]
                if any(x not in done for x in needs):
                    continue
                start = max([done[x] for x in needs] + [free[body[key[2]].lane]])
                if best is None or (start, pos) < best[:2]:
                    best = (start, pos, g, n)
        assert best is not None, "schedule deadlock"
        start, _, g, n = best
        _, (g, j, i) = pending[g].pop(n)
        stage = body[i]
        extra = 0.0 if stage.lane == "tensor" else stage.clocks * overhead
        block = Block(g, j, stage.name, stage.lane, start, stage.clocks, extra)
        blocks.append(block)
        done[(g, j, i)] = block.end
        free[stage.lane] = block.end
    return tuple(blocks)


def _issue_order(body: tuple[Stage, ...], groups: int, iterations: int,
                 strategy: str) -> list[tuple[int, int, int]]:
    """Program order. intra issues chunk j's first contraction, then chunk j-1's second, then chunk
    j's threads' work (FlashAttention-3, Algorithm 2)."""
    tensor = [i for i, st in enumerate(body) if st.lane == "tensor"]
    if strategy == "inter" or len(tensor) == 1:
        return [(g, j, i) for j in range(iterations) for g in range(groups) for i in range(len(body))]
    first, second = tensor[0], tensor[1]
    order = []
    for j in range(iterations + 1):
        for g in range(groups):
            if j < iterations:
                order.append((g, j, first))
            if j > 0:
                order.append((g, j - 1, second))
            if j < iterations:
                order += [(g, j, i) for i in range(len(body)) if i not in (first, second)]
    return order


def _inter_deps(body, g: int, j: int, i: int) -> list[tuple[int, int, int]]:
    """In order within a group: each stage after the previous one, across iterations."""
    return [(g, j, i - 1)] if i > 0 else [(g, j - 1, len(body) - 1)]


def _intra_deps(body, g: int, j: int, i: int) -> list[tuple[int, int, int]]:
    """Body [T1, R_1 .. R_k, T2]. Iteration j of the group's code ends when R_k(j) and T2(j-1) are
    done; T1(j+1) and T2(j) are issued then, and R_1(j) also waits for T1(j)."""
    first, second = 0, len(body) - 1
    end_of_previous = [(g, j - 1, second - 1), (g, j - 2, second)]
    if i == first:
        return end_of_previous
    if i == second:
        return [(g, j, second - 1), (g, j - 1, second)]
    if i == first + 1:
        return [(g, j, first)] + end_of_previous
    return [(g, j, i - 1)]


def overlap(compute: Compute, *, groups: int, strategy: str, overhead: float = 0.0) -> Overlap:
    body = stages(compute)
    blocks, period = simulate(body, groups=groups, strategy=strategy, overhead=overhead)
    busy = groups * sum(s.clocks for s in body if s.lane == "tensor")
    return Overlap(strategy, groups, overhead, body, blocks, period, min(1.0, busy / period),
                   accommodation(body, groups=groups, strategy=strategy),
                   bound(body, groups=groups, strategy=strategy, overhead=overhead))


SHARP = 1e-3            # a softness below this is Section 6's max (a p-norm of p > 1000 is one)


def bound(body: tuple[Stage, ...], *, groups: int, strategy: str, overhead: float,
          softness: float = 0.0) -> float:
    """The closed-form period: each lane's work, and one group's chain of dependent blocks. `softness`
    (1/p, 0 by default) replaces the largest lane's work by the p-norm of the lanes' (their work summed
    as p-th powers): 0 is Section 6's perfect overlap, the longest lane alone; a measured softness says
    how much of the shorter lanes' work the hardware fails to hide under the longest (analyzer.config
    .hopper fits it on the Hopper kernel)."""
    work = {lane: sum(s.clocks * (1 if lane == "tensor" else 1 + overhead)
                      for s in body if s.lane == lane) for lane in LANES}
    tensor = [s.clocks for s in body if s.lane == "tensor"]
    threads = sum(work[lane] for lane in LANES if lane != "tensor")
    if strategy == "intra" and len(tensor) > 1:   # T1 + max(T2, R (1 + o)) per group
        chain = tensor[0] + max(sum(tensor[1:]), threads)
    else:
        chain = sum(tensor) + threads
    lanes = [groups * w for w in work.values()]
    longest = max(lanes)
    if softness > SHARP and longest > 0:     # the p-norm, scaled by the longest lane so no power overflows
        return max(longest * sum((w / longest) ** (1 / softness) for w in lanes) ** softness, chain)
    return max(longest, chain)


def accommodation(body: tuple[Stage, ...], *, groups: int, strategy: str) -> float:
    """The largest overhead o for which the tensor cores stay saturated (bisection on `simulate`)."""
    busy = groups * sum(s.clocks for s in body if s.lane == "tensor")

    def saturated(o: float) -> bool:
        return simulate(body, groups=groups, strategy=strategy, overhead=o,
                        iterations=9)[1] <= busy * (1 + 1e-6)

    if not any(s.lane != "tensor" and s.clocks > 0 for s in body):
        return math.inf                     # nothing but tensor-core work: any overhead is hidden
    if not saturated(0.0):
        return 0.0
    lo, hi = 0.0, 1.0
    while saturated(hi):
        lo, hi = hi, hi * 2
        if hi > 64:
            return 64.0                     # hides at least 6400%: as good as any
    for _ in range(16):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if saturated(mid) else (lo, mid)
    return lo
