"""The model's choice per problem size: the table a generated kernel takes its configuration from at
each call.

Which configuration runs fastest depends on the problem, not only on the head dim: how long each
block streams (Section 6.3's per-chunk overheads are amortised over it) and how many blocks fill the
SMs (waves, their tails and causal imbalance). So the generator ranks the legal configurations, as
`napkin sweep` does, on the weaved diagram at a grid of problem sizes; the generated wrapper takes the
grid point nearest its call (in log2, ties to the smaller) and launches that point's first choice.
`KernelConfigs.choice_for` does the same lookup in Python, for the prediction of a call.

- Attention, per head dim: lengths LENGTHS (queries = keys) times instances INSTANCES (batch x query
  heads, the independent problems of a call). A call whose queries and keys differ takes the square
  problem alike in what the kernel sees (`grid_point`): as many key positions (each tile's chunks) and
  as many query rows (instances x queries / keys), so that 4096 queries against 77 keys read as 64
  keys with 53 times the instances, not as a lone problem of 561. The Hopper kernel's table adds the
  queries a key as a third axis, and ranks a cell over the calls that read it
  (analyzer.config.hopper_table.HopperTable).
- Any other diagram (matmul, an MLP, linear attention): the diagram's default sizes scaled alike by
  powers of two (`shaped_grid`: the shape its file states, larger and smaller, over LENGTHS' span of
  geometric means, and the defaults themselves), one column; a call's length is the geometric mean of
  its sizes. A call at the defaults takes the point ranked at exactly its sizes, so the module launches
  what the model ranks first there (a grid of square problems gave softmax_contraction's defaults
  the choice of a 256^4 problem, 1.9x slower by the model's own count).

Where candidates tie (within the ranking's TIE), a point takes one the table already holds: one kernel
fewer to compile. A key whose grid points all rank the same configuration first gets that one
configuration, as does a kernel whose problem sizes are pinned (`--set q=4096`): then one size is all
there is to rank.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from analyzer.common.errors import NapkinError
from analyzer.config.choose import TIE, Choice, rank_at, same_config
from analyzer.diagram.compiled import Diagram
from analyzer.diagram.interface import Attention, Plain
from analyzer.hardware import Profile
from analyzer.model.analysis import TermModel

LENGTHS = tuple(2 ** i for i in range(8, 16))    # 256 .. 32768: sequence lengths, or matmul sizes
INSTANCES = tuple(2 ** i for i in range(0, 11))  # batch x query heads: 1 .. 1024


@dataclass(frozen=True)
class SizeTable:
    """One kernel's first choice at each grid point, for one head dim."""

    lengths: tuple[int, ...]
    instances: tuple[int, ...]                  # (1,) where the diagram is not attention
    configs: tuple[Choice, ...]                 # the distinct first choices, in grid order
    cells: tuple[tuple[int, ...], ...]          # [length][instances] -> index into configs

    def at(self, length: float, instances: float) -> Choice:
        """The configuration the generated wrapper launches for a call of these sizes."""
        return self.configs[self.cells[nearest(self.lengths, length)][nearest(self.instances, instances)]]


def nearest(grid: tuple[int, ...], value: float) -> int:
    """Index of the grid point nearest `value` in log2; ties go to the smaller point. The generated
    wrapper has the same function (analyzer.codegen.triton.configs)."""
    x = math.log2(max(value, 1))
    return min(range(len(grid)), key=lambda i: (abs(math.log2(grid[i]) - x), i))


def length_axes(woven: Diagram, roles: Attention | Plain) -> tuple[str, ...]:
    """The axes whose geometric mean is a call's length: attention's query and key positions, or one
    axis per free size of any other diagram."""
    if isinstance(roles, Attention):
        return (roles.seq_q, roles.seq_k)
    names = {s.name for s in woven.size_symbols}
    used = {a for array in woven.arrays.values() for a in array.axes}   # an unused axis is no length
    seen: dict[str, str] = {}
    for axis in (a for a in woven.axes if a in used):
        size = woven.size(axis)
        if size.is_Symbol and size.name in names:
            seen.setdefault(size.name, axis)
    return tuple(seen.values())


def grid_point(roles: Attention | Plain, lengths: list[float], instances: float) -> tuple[float, float]:
    """Where a call of these sizes reads the table: attention, the square problem with its keys and its
    query rows (the keys, and the instances times queries over keys); any other diagram, the geometric
    mean of its lengths. `lengths`: the call's sizes of `length_axes` (attention: queries, keys)."""
    if isinstance(roles, Attention):
        queries, keys = lengths[0], max(lengths[1], 1)
        return keys, instances * queries / keys
    return (math.prod(lengths) ** (1 / len(lengths)) if lengths else 1), instances


def instance_axes(roles: Attention | Plain) -> tuple[str, ...]:
    """The weaved diagram's axes whose product is a call's instances (batch x query heads; none for
    other diagrams)."""
    if not isinstance(roles, Attention):
        return ()
    return ("batch", roles.heads or "heads", *((roles.group,) if roles.group else ()))


def shaped_grid(woven: Diagram, roles: Plain) -> tuple[tuple[int, ...], tuple[dict[str, int], ...]]:
    """A diagram that is not attention: the grid's lengths and, at each, the sizes of its length axes,
    the diagram's defaults scaled by one power of two (rounded, at least 1), from LENGTHS[0] to
    LENGTHS[-1] in geometric mean, with the defaults themselves (scale 1) always among them. A point's
    length is its scale times the defaults' geometric mean, the length the wrapper measures a call by."""
    names = list(dict.fromkeys(woven.size(a).name for a in length_axes(woven, roles)))
    base = {s.name: int(v) for s, v in woven.defaults.items() if s.name in names}
    mean = math.prod(base.values()) ** (1 / len(base)) if base else 1.0
    # the scales within LENGTHS' span (a hair of slack: 8192^3's mean is 8192 only to rounding)
    low = math.ceil(math.log2(LENGTHS[0] / mean) - 1e-9)
    high = math.floor(math.log2(LENGTHS[-1] / mean) + 1e-9)
    lengths: list[int] = []
    points: list[dict[str, int]] = []
    for k in sorted({0, *range(low, high + 1)}):
        length = max(1, round(mean * 2.0 ** k))
        if lengths and length <= lengths[-1]:
            continue             # rounding merged two scales of a tiny problem: keep the first
        lengths.append(length)
        points.append({n: max(1, round(v * 2.0 ** k)) for n, v in base.items()})
    return tuple(lengths), tuple(points)


def call_sizes(woven: Diagram, roles: Attention | Plain, length: int | dict[str, int], instances: int,
               sets: dict[str, int]) -> dict[str, int]:
    """Sizes of the weaved diagram at one grid point: attention's length axes `length`, the head axis
    the instances (over the query group's default size, for grouped-query), batch one; any other
    diagram's the point's sizes (`shaped_grid`). Sizes in `sets` (pinned by --set, such as the head
    dim) keep their values."""
    names = {s.name for s in woven.size_symbols}
    sizes = {s.name: int(v) for s, v in woven.defaults.items() if s.name in names}

    def put(axis: str, value: int) -> None:
        size = woven.size(axis)
        if size.is_Symbol and size.name in names:
            sizes[size.name] = value

    if isinstance(roles, Attention):
        for axis in length_axes(woven, roles):
            put(axis, length)
        group = int(woven.size(roles.group).subs(woven.defaults)) if roles.group else 1
        put("batch", 1)
        put(roles.heads or "heads", max(1, instances // group))
    else:
        sizes.update(length)
    sizes.update({k: v for k, v in sets.items() if k in names})
    return sizes


def size_table(woven: Diagram, roles: Attention | Plain, profile: Profile, kernel: str,
               choices: list[Choice], ones: dict[str, int], sets: dict[str, int],
               default: Choice) -> SizeTable | None:
    """The first of `choices` (one key's legal configurations) at every grid point, or None where one
    configuration is first at all of them. A point where every candidate breaks a divisor rule takes
    `default` (the choice at the diagram's default sizes)."""
    model = TermModel(woven, profile, kernel)
    attention = isinstance(roles, Attention)
    columns = INSTANCES if attention else (1,)
    lengths, points = (LENGTHS, LENGTHS) if attention else shaped_grid(woven, roles)
    configs: list[Choice] = []
    cells = []
    for point in points:
        row = []
        for n in columns:
            try:
                ranked, _ = rank_at(model, profile, call_sizes(woven, roles, point, n, sets), choices, ones)
            except NapkinError:      # no candidate obeys the divisor rules at this size
                ranked = [(default, 1.0, 0.0)]
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
    return SizeTable(lengths, columns, tuple(configs), tuple(cells))


__all__ = ["LENGTHS", "INSTANCES", "SizeTable", "nearest", "length_axes", "instance_axes", "grid_point", "call_sizes",
           "shaped_grid", "size_table"]
