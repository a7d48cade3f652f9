"""A kernel plan: how a scheduled kernel of a diagram maps onto a grid of blocks and two-dimensional tiles.

Read off the diagram's structure at its lowest level (Sections 2.3-2.4, 5.1):

- grid axes: grouped axes whose blocks take one index (the weaved batch and heads, a contraction's
  batch axes); each block of the grid owns one index of each and a tile of every other grouped axis;
- tile dimensions: the other axes, gathered by where they occur. Grouped axes that occur in exactly the
  same arrays form one dimension (grouped-query attention's g and q: the rows of one block; a softmax's
  sink is not counted, a logit a row that a sink a query head gives the rows g q by its g alone); the
  streamed axis is a dimension of its own, walked by the loop (Figure 27); an axis neither grouped nor
  streamed is whole in every block (the head dimension d);
- every array is a tile of at most two dimensions, which is what a tensor-core matrix multiply takes.

A backend renders a plan: it never looks at the diagram file again.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from analyzer.common.errors import NapkinError
from analyzer.config.choice import Choice, batch_axes
from analyzer.diagram.compiled import Diagram, Op
from analyzer.model.fusion import Reducer, Schedule

GROUP, STREAM, WHOLE = "group", "stream", "whole"


def next_pow2(n: int) -> int:
    return 1 << max(0, (int(n) - 1).bit_length())


def prev_pow2(n: int) -> int:
    """The largest power of two not above n (1 for n < 2)."""
    return 1 << max(0, int(n).bit_length() - 1)


@dataclass(frozen=True)
class Dim:
    """One dimension of the block's tiles: diagram axes flattened together, outermost first."""

    name: str
    axes: tuple[str, ...]
    kind: str                       # GROUP, STREAM or WHOLE
    tiles: tuple[int, ...] = ()     # GROUP: tile of each axis; STREAM: the chunk; WHOLE: none (runtime)


@dataclass(frozen=True)
class KernelPlan:
    diagram: Diagram
    schedule: Schedule
    choice: Choice
    grid: tuple[str, ...]                   # axes with one index per block, outermost first
    dims: tuple[Dim, ...]
    dim_of: dict[str, str]                  # non-grid axis -> dim name
    tiles_of: dict[str, tuple[str, ...]]    # array -> its dims, in the array's axis order
    notes: tuple[str, ...] = ()

    @property
    def name(self) -> str:
        return self.schedule.kernel.name

    def dim(self, name: str) -> Dim:
        return next(d for d in self.dims if d.name == name)

    @property
    def stream(self) -> Dim | None:
        return next((d for d in self.dims if d.kind == STREAM), None)

    @property
    def groups(self) -> tuple[Dim, ...]:
        return tuple(d for d in self.dims if d.kind == GROUP)

    @property
    def wholes(self) -> tuple[Dim, ...]:
        return tuple(d for d in self.dims if d.kind == WHOLE)

    def axes_of(self, array: str) -> tuple[str, ...]:
        return self.diagram.arrays[array].axes

    @property
    def banded(self) -> tuple[str, str] | None:
        """(rows, columns) when the blocks tile two dimensions of one axis each (a matmul's output):
        the block order then walks bands of row tiles (band_rows)."""
        groups = self.groups
        if len(groups) == 2 and all(len(d.axes) == 1 for d in groups):
            return groups[0].axes[0], groups[1].axes[0]
        return None


def band_rows(tile_rows: int, tile_cols: int, sm_count: int) -> int:
    """Row tiles per band of a banded block order. Blocks run in waves of one per SM; walking a band
    down its rows first, one wave covers about band x (sm_count / band) tiles, a square of the output
    when band = sqrt(sm_count tile_cols / tile_rows). Its inputs' rows and columns are then shared in L2
    by the whole wave: the cache level's optimal tile is square (Theorem 2, Equation 1)."""
    return max(1, round(math.sqrt(sm_count * tile_cols / tile_rows)))


def plan(d: Diagram, s: Schedule, choice: Choice) -> KernelPlan:
    """The plan of scheduled kernel `s` with the tiles of `choice`."""
    where = f"{s.kernel.path}.partition.{s.level}"
    tiles = {sym.name: v for sym, v in ((sym, choice.tiles.get(sym.name)) for sym in s.partition.symbols)
             if v is not None}
    groups = s.partition.group_sizes
    stream = s.stream_axis
    batch = batch_axes(s)
    arrays = s.arrays
    axes_of = d.axes_of()
    used = list(dict.fromkeys(a for name in arrays for a in axes_of[name]))
    notes = []
    grid = []
    for axis in used:
        if axis in groups and (axis in batch or tiles.get(groups[axis].name) == 1):
            grid.append(axis)
            if axis in batch and tiles.get(groups[axis].name, 1) != 1:
                notes.append(f"{groups[axis].name} = 1: {axis!r} is a batch axis of a contraction, "
                             "and a tensor-core tile is two-dimensional")
    sinks = {o.sink for o in s.ops if o.sink is not None}
    signature = {a: frozenset(n for n in arrays if a in axes_of[n] and n not in sinks) for a in used if a not in grid}
    dims: list[Dim] = []
    dim_of: dict[str, str] = {}
    for axis in signature:
        if axis in dim_of:
            continue
        if axis == stream:
            dims.append(Dim(axis, (axis,), STREAM, (tiles[s.partition.stream[1].name],)))
        elif axis in groups:
            members = tuple(a for a in signature if a in groups and a != stream
                            and signature[a] == signature[axis] and a not in dim_of)
            dims.append(Dim(_dim_name(members, used, dims), members, GROUP,
                            tuple(tiles[groups[a].name] for a in members)))
        else:
            dims.append(Dim(axis, (axis,), WHOLE))
        for a in dims[-1].axes:
            dim_of[a] = dims[-1].name
    tiles_of = {}
    for name in arrays:
        own = tuple(dict.fromkeys(dim_of[a] for a in axes_of[name] if a not in grid))
        if len(own) > 2:
            raise NapkinError(f"kernel {s.kernel.name!r}: array {name!r} spans {len(own)} tile "
                              f"dimensions ({', '.join(own)}); a generated kernel's tiles have at most "
                              "two", file=d.source, field=where,
                              hint="group all but two of its axes with size 1, or split the kernel")
        tiles_of[name] = own
    for op in s.ops:
        _check_op(d, op, tiles_of, dim_of, where)
    return KernelPlan(d, s, choice, tuple(grid), tuple(dims), dim_of, tiles_of, tuple(notes))


def streamed_operands(r: Reducer) -> tuple[str, str, Op]:
    """A streamed contraction's operands and the op whose scale its online softmax applies: a softmax
    paired with the contraction (softmax -> dot) is folded in, so its input is streamed instead."""
    first, second = r.op.operands
    if r.softmax is None:
        return first, second, r.op
    src = r.softmax
    first = src.inputs[0] if first == src.name else first
    second = src.inputs[0] if second == src.name else second
    return first, second, src


def _dim_name(members: tuple[str, ...], axes: list[str], dims: list[Dim]) -> str:
    """A dimension's name: its axis, or its axes joined (grouped-query's g and q: `gq`), made unique
    against every axis and earlier dimension (axes `g`, `q` and `gq` in one kernel)."""
    name = "".join(members)
    if len(members) == 1:
        return name
    taken = set(axes) | {d.name for d in dims}
    base, n = name, 1
    while name in taken:
        n += 1
        name = f"{base}{n}"
    return name


def _check_op(d: Diagram, op: Op, tiles_of: dict, dim_of: dict, where: str) -> None:
    if op.primitive.contraction:
        a, b = (tiles_of[i] for i in op.operands)
        k = dim_of[op.applied.over]
        if len(a) != 2 or len(b) != 2 or k not in a or k not in b:
            raise NapkinError(f"op {op.name!r} ({op.primitive.name}): a generated kernel contracts "
                              f"two-dimensional tiles over one shared dimension; its inputs have "
                              f"[{', '.join(a)}] and [{', '.join(b)}]", file=d.source, field=where)
