"""The model's choice per problem size: the table a generated attention kernel takes its configuration
from at each call.

Which configuration runs fastest depends on the problem, not only on the head dim: how long each
block streams (the sequence length: Section 6.3's per-chunk overheads are amortised over it) and how
many blocks fill the SMs (batch x heads x query tiles: waves, their tails and causal imbalance). So
for each head dim the generator ranks the legal configurations, as `napkin sweep` does, on the weaved
diagram at a grid of problem sizes: sequence lengths SEQLENS (queries = keys) times instances
INSTANCES (batch x query heads, the independent attention problems of a call). The generated wrapper
takes the grid point nearest its call (in log2, ties to the smaller) and launches that point's first
choice; `KernelConfigs.choice_for` does the same lookup in Python, for the prediction of a call. Where
candidates tie (within the ranking's TIE), a point takes one the table already holds: one kernel fewer
to compile.

A head dim whose grid points all rank the same configuration first gets that one configuration, as
does a kernel whose problem sizes are pinned (`--set q=4096`): then one size is all there is to rank.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from analyzer.analysis import TermModel
from analyzer.diagram.compiled import Diagram
from analyzer.hardware import Profile
from analyzer.kernel.choose import TIE, Choice, rank_at, same_config
from analyzer.kernel.interface import Attention

SEQLENS = tuple(2 ** i for i in range(8, 16))    # 256 .. 32768 positions, the range models train at
INSTANCES = tuple(2 ** i for i in range(0, 11))  # batch x query heads: 1 .. 1024


@dataclass(frozen=True)
class SizeTable:
    """One kernel's first choice at each grid point, for one head dim."""

    seqlens: tuple[int, ...]
    instances: tuple[int, ...]
    configs: tuple[Choice, ...]                 # the distinct first choices, in grid order
    cells: tuple[tuple[int, ...], ...]          # [seqlen][instances] -> index into configs

    def at(self, seqlen: float, instances: float) -> Choice:
        """The configuration the generated wrapper launches for a call of these sizes."""
        return self.configs[self.cells[nearest(self.seqlens, seqlen)][nearest(self.instances, instances)]]


def nearest(grid: tuple[int, ...], value: float) -> int:
    """Index of the grid point nearest `value` in log2; ties go to the smaller point. The generated
    wrapper has the same function (analyzer.kernel.module)."""
    x = math.log2(max(value, 1))
    return min(range(len(grid)), key=lambda i: (abs(math.log2(grid[i]) - x), i))


def call_sizes(woven: Diagram, roles: Attention, seqlen: int, instances: int,
               sets: dict[str, int]) -> dict[str, int]:
    """Sizes of the weaved diagram for `instances` problems of `seqlen` queries and keys: the head
    axis takes the instances (over the query group's default size, for grouped-query), batch one."""
    names = {s.name for s in woven.size_symbols}
    defaults = {s.name: int(v) for s, v in woven.defaults.items()}
    sizes = {k: v for k, v in {**defaults, **sets}.items() if k in names}

    def put(axis: str, value: int) -> None:
        size = woven.size(axis)
        if size.is_Symbol and size.name in names:
            sizes[size.name] = value

    group = int(woven.size(roles.group).subs(woven.defaults)) if roles.group else 1
    put("batch", 1)
    put(roles.heads or "heads", max(1, instances // group))
    put(roles.seq_q, seqlen)
    put(roles.seq_k, seqlen)
    return sizes


def size_table(woven: Diagram, roles: Attention, profile: Profile, kernel: str, choices: list[Choice],
               ones: dict[str, int], sets: dict[str, int]) -> SizeTable | None:
    """The first of `choices` (one head dim's legal configurations) at every grid point, or None where
    one configuration is first at all of them."""
    model = TermModel(woven, profile, kernel)
    configs: list[Choice] = []
    cells = []
    for seqlen in SEQLENS:
        row = []
        for n in INSTANCES:
            ranked, _ = rank_at(model, profile, call_sizes(woven, roles, seqlen, n, sets), choices, ones)
            fastest = ranked[0][1]
            tied = [c for c, t, _ in ranked if t <= fastest * (1 + TIE)]
            # among the tied, one the table already launches: one kernel fewer to compile
            first = next((c for c in tied if any(same_config(c, k) for k in configs)), tied[0])
            index = next((i for i, c in enumerate(configs) if same_config(c, first)), None)
            if index is None:
                index = len(configs)
                configs.append(first)
            row.append(index)
        cells.append(tuple(row))
    if len(configs) == 1:
        return None
    return SizeTable(SEQLENS, INSTANCES, tuple(configs), tuple(cells))


def instance_axes(roles: Attention) -> tuple[str, ...]:
    """The weaved diagram's axes whose product is a call's instances (batch x query heads)."""
    return ("batch", roles.heads or "heads", *((roles.group,) if roles.group else ()))


__all__ = ["SEQLENS", "INSTANCES", "SizeTable", "nearest", "call_sizes", "size_table", "instance_axes"]
