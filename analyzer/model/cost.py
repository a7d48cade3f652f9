"""The counting rules of Section 2: transfers H, groups N_g, memory M and FLOPs of one kernel at one level.

- Transfers (2.2): the size of every array changing level, loaded into the level or saved out of it.
  Under a group partition (2.3) an array is transferred in full along the grouped axes it has and once
  per group along those it lacks: H = sum_A |A| prod_{a grouped, a not in A} (a / g_a) = N_g H_g.
  Under a stream partition (2.4) the streamed axis counts in full.
- Memory (2.2-2.4): the largest total size resident at the level in any data-type column, with group
  and stream sizes in place of the partitioned axes, maintained outputs (accumulators) and the
  auxiliary values of online softmax included. See `columns` for the liveness rule.
- FLOPs (2.2): each primitive's FLOPs per item times the axes it is weaved over; an op that a group
  does not split is recomputed by every group.

Everything is a sympy expression in the diagram's size symbols and the partition's size symbols.
Group counts are kept as placeholders `_n_<axis>` in `counted`, so that a numeric evaluation can use
ceiling(a / g_a) for tiles that do not divide their axis.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

import sympy

from analyzer.common.dtypes import bytes_per_value
from analyzer.common.expr import at, symbol
from analyzer.diagram.primitives import PIPELINES
from analyzer.model.fusion import Schedule, ragged_exact, ragged_sums, skip_extent


@dataclass(frozen=True)
class Item:
    """Something held at the level: an array tile, an accumulator, or auxiliary values."""

    name: str
    axes: tuple[str, ...]
    dtype: str
    per_row: int = 1       # auxiliary values per row (online softmax keeps 2)


@dataclass(frozen=True)
class Column:
    """A data-type column (a gap between two function steps) and what it holds."""

    label: str
    items: tuple[str, ...]
    values: sympy.Expr
    bytes: sympy.Expr


@dataclass(frozen=True)
class LevelCost:
    """Costs of one kernel at one level (the paper's per-level H, H_g, N_g, M and FLOPs)."""

    schedule: Schedule
    group_counts: dict[sympy.Symbol, sympy.Expr]   # placeholder _n_a -> a / g_a
    counted: dict[str, sympy.Expr]                 # in the placeholders: loads, saves, ..., flops
    transfers_by_array: tuple[tuple[str, str, sympy.Expr], ...]   # (array, "load"/"save", values)
    columns: tuple[Column, ...]
    memory: sympy.Expr                             # M, values
    memory_bytes: sympy.Expr
    flops: dict[str, sympy.Expr] = field(default_factory=dict)   # pipeline -> FLOPs
    # the counts in the paper's whole tiles where `counted` counts ragged ones exactly (ragged_exact); None:
    # the paper's forms are `counted`'s
    whole: dict[str, sympy.Expr] | None = None

    @property
    def kernel(self) -> str:
        return self.schedule.kernel.name

    @property
    def level(self) -> str:
        return self.schedule.level

    def _paper(self, key: str) -> sympy.Expr:
        return sympy.expand((self.whole or self.counted)[key].subs(self.group_counts))

    @property
    def transfers(self) -> sympy.Expr:
        """H: values loaded into and saved out of the level."""
        return self._paper("transfers")

    @property
    def transfer_bytes(self) -> sympy.Expr:
        return self._paper("transfer_bytes")

    @property
    def groups(self) -> sympy.Expr:
        """N_g = prod_a a / g_a."""
        return self._paper("groups")

    @property
    def per_group(self) -> sympy.Expr:
        """H_g = H / N_g: transfers of one group (the mean over groups under block skipping)."""
        return sympy.expand(self.transfers / self.groups)   # N_g is a product: exact

    @property
    def total_flops(self) -> sympy.Expr:
        return sympy.Add(*self.flops.values())

    def evaluate(self, values: dict[sympy.Symbol, int]) -> dict[str, float]:
        """Numbers for concrete sizes and tile sizes, with ceiling(a / g_a) groups along each axis.

        Exact also for tiles that do not divide their axis (the last tile is partial), and for a causal
        mask over one sequence (ragged_exact); other block skipping (a window, a band, a causal mask
        across two sequences) assumes whole tiles (analyzer.model.constraints.skip_divides).
        """
        counts = {n: sympy.ceiling(at(expr, values)) for n, expr in self.group_counts.items()}
        out = {key: float(at(expr.subs(counts), values)) for key, expr in self.counted.items()}
        out["memory"] = float(at(self.memory, values))
        out["memory_bytes"] = float(at(self.memory_bytes, values))
        return out


def level_cost(schedule: Schedule) -> LevelCost:
    """The level's counts, derived once per schedule (analyzer.model.fusion.schedule remembers the
    schedules of a diagram object, so a diagram analysed at many sizes counts each level once)."""
    cost = schedule.__dict__.get("_cost")
    if cost is None:
        cost = _level_cost(schedule)
        if ragged_exact(schedule):     # the paper's forms count whole tiles, which the exact counts reduce to
            paper = _level_cost(schedule, ragged=False)
            cost = replace(cost, whole=paper.counted, flops=paper.flops)
        object.__setattr__(schedule, "_cost", cost)    # a frozen dataclass: the memo is no field
    return cost


def _level_cost(schedule: Schedule, ragged: bool = True) -> LevelCost:
    """The counts; `ragged`: a mask over one sequence counted exactly for a ragged last query group
    (ragged_exact), else in whole tiles."""
    d = schedule.diagram
    part = schedule.partition
    groups = part.group_sizes
    b, s = part.stream if part.stream else (None, None)
    counts = {a: symbol(f"_n_{a}") for a in groups}
    group_counts = {counts[a]: d.size(a) / g for a, g in groups.items()}
    ragged = ragged and ragged_exact(schedule)
    streamed_length = skip_extent(schedule, ragged=ragged) if schedule.skip else (d.size(b) if b else None)

    def run_extent(axis: str) -> sympy.Expr:      # over a whole run: all groups, all chunks
        return streamed_length if axis == b else d.size(axis)

    # a ragged count: what has both the query axis and the streamed key axis (the scores, a bias)
    # spans sum_i rows_i x keys_i over the groups (g a group, the last one fewer), not a x the mean keys:
    # the query axis is weighted so that the product is that sum
    query = schedule.skip.query if ragged else None
    if query is not None:
        g, a, sums = groups[query], d.size(query), ragged_sums(schedule)
        short = g - (a - (sums.n - 1) * g)             # the rows the ragged last group lacks
        rows = (g * sums.keys - short * (a - sums.last_start)) / streamed_length
        # chunks: group i streams (end_i - start_i) / s of them, but a group that ends at a ceiling(a / s) -
        # start_i / s (a partial last chunk)
        last_chunks = sympy.ceiling(a / s) - sums.last_start / s
        chunks_total = (sums.keys - sums.at_end * a) / s + sums.at_end * sympy.ceiling(a / s)
        chunks_mean = chunks_total / sums.n
        rows_by_chunks = (g * chunks_total - short * last_chunks) / chunks_mean

    def extent_of(axes: tuple[str, ...]):
        if query is not None and query in axes and b in axes:
            return lambda axis: rows if axis == query else run_extent(axis)
        return run_extent

    def replication(axes: tuple[str, ...]) -> sympy.Expr:   # once per group along missing axes
        return sympy.Mul(*(n for a, n in counts.items() if a not in axes))

    def transferred(name: str) -> sympy.Expr:
        axes = d.arrays[name].axes
        extent = extent_of(axes)
        return sympy.Mul(*(extent(a) for a in axes)) * replication(axes)

    by_array = tuple([(n, "load", transferred(n)) for n in schedule.loads]
                     + [(n, "save", transferred(n)) for n in schedule.saves])
    counted: dict[str, sympy.Expr] = {}
    for key, direction in (("loads", "load"), ("saves", "save")):
        counted[key] = sympy.Add(*(v for n, dirn, v in by_array if dirn == direction))
        counted[key + "_bytes"] = sympy.Add(*(v * d.arrays[n].bytes_per_value
                                              for n, dirn, v in by_array if dirn == direction))
    counted["transfers"] = counted["loads"] + counted["saves"]
    counted["transfer_bytes"] = counted["loads_bytes"] + counted["saves_bytes"]
    counted["groups"] = sympy.Mul(*counts.values())
    # a block's prologue and epilogue: arrays outside the streamed loop (attention's Q in, O out),
    # the transfers that stream pipelining (5.6) does not overlap
    counted["edge_bytes"] = sympy.Add(*(v * d.arrays[n].bytes_per_value for n, _, v in by_array
                                        if b is None or b not in d.arrays[n].axes))
    # under block skipping, the query groups of one grid index carry work 1 .. n (their number, n);
    # 1: every group streams as much (analyzer.model.imbalance). Under a sliding window or a band the work
    # rises to the band's and stays there: the ramp 1 .. n overstates the tail's imbalance (an upper bound)
    skipped = schedule.skip.query if schedule.skip else None
    counted["ramp"] = counts.get(skipped, sympy.Integer(1))
    # chunks streamed, summed over the groups (their mean length under block skipping)
    counted["steps"] = counted["groups"] * (
        1 if b is None else chunks_mean if query is not None else streamed_length / s if schedule.skip
        else sympy.ceiling(d.size(b) / s))

    flops = {p: sympy.Integer(0) for p in PIPELINES}
    for op in schedule.ops:
        for pipe, n in schedule.step_flops(op, extent_of(op.applied.domain)).items():
            flops[pipe] += n * replication(op.applied.domain)
        for pipe, n in schedule.final_flops(op, extent_of(op.applied.output)).items():
            flops[pipe] += n * replication(op.applied.output)
    if b is not None:
        chunks = streamed_length / s   # chunks per group (their mean under block skipping)
        size = d.size
        if query is not None:         # a ragged count: the rows weighted by their groups' chunks
            chunks = chunks_mean
            size = lambda axis: rows_by_chunks if axis == query else d.size(axis)     # noqa: E731
        for r in schedule.reducers:
            for pipe, n in schedule.chunk_flops(r, size).items():
                flops[pipe] += n * replication(r.op.applied.output) * chunks
    for pipe in PIPELINES:
        counted[f"flops_{pipe}"] = flops[pipe]

    columns = _columns(schedule, groups, b, s)
    memory = _max(tuple(c.values for c in columns))
    memory_bytes = _max(tuple(c.bytes for c in columns))
    paper_flops = {p: sympy.expand(flops[p].subs(group_counts)) for p in PIPELINES}
    return LevelCost(schedule, group_counts, counted, by_array, columns, memory, memory_bytes,
                     {p: v for p, v in paper_flops.items() if v != 0})


# -- memory ------------------------------------------------------------------------------------------

def _columns(schedule: Schedule, groups: dict[str, sympy.Symbol], b: str | None,
             s: sympy.Symbol | None) -> tuple[Column, ...]:
    """What each data-type column of one group holds.

    The rule, per group (one thread block): an input is loaded just before the first function that
    reads it and dropped after the last one; a computed array is held from the function that makes
    it until its last reader, and an output until it is saved, right after it is complete. When
    streaming, the loop body runs once per chunk: inputs that do not have the streamed axis are
    loaded before the loop and held across it, accumulators and the auxiliary values of online
    softmax are held across it (Figure 16: the maintained output), and the column between two
    chunks holds what the last function of one chunk saves and what the first of the next loads.
    The columns returned are those of a steady-state chunk; with a single chunk the true peak can
    only be lower.
    """
    d = schedule.diagram
    steps = list(schedule.ops)
    h, m, n = len(schedule.head), len(schedule.body), len(steps)
    pos = {op.name: i + 1 for i, op in enumerate(steps)}
    reads: dict[str, list[int]] = {}
    for op in steps:
        for name in op.inputs:
            reads.setdefault(name, []).append(pos[op.name])

    items: dict[str, Item] = {}
    life: dict[str, tuple[int, int]] = {}
    reducer_of = {r.op.name: r for r in schedule.reducers}
    for name in schedule.arrays:
        arr = d.arrays[name]
        dtype = reducer_of[name].op.accumulate if name in reducer_of else arr.dtype
        items[name] = Item(name, arr.axes, dtype)
        if name in schedule.resident:
            life[name] = (0, n)
        elif name in pos:                      # computed here
            later = [r for r in reads.get(name, []) if r > pos[name]]
            death = max(later) - 1 if later else pos[name]
            if name in schedule.saves:
                death = max(death, pos[name])
            life[name] = (pos[name], death)
        else:                                  # loaded
            life[name] = (min(reads[name]) - 1, max(reads[name]) - 1)
    if b is not None:
        body = {op.name for op in schedule.body}
        for name in items:
            if b not in items[name].axes and any(pos[c] > h and c in body for c in _readers(name, steps)):
                birth, death = life[name]
                life[name] = (min(birth, h), max(death, h + m - 1))   # held across the loop
        for r in schedule.reducers:
            name = r.op.name
            tail_reads = [p for p in reads.get(name, []) if p > h + m]
            death = max([h + m - 1] + [p - 1 for p in tail_reads]
                        + ([h + m] if name in schedule.saves else []))
            life[name] = (h, death)                 # initialised before the loop (Figure 27 head)
            if r.accumulator.aux_per_row:
                aux = f"{name}.aux"
                items[aux] = Item(aux, r.rows, r.op.accumulate, r.accumulator.aux_per_row)
                life[aux] = (h, h + m - 1)

    def tile(axis: str) -> sympy.Expr:
        if axis in groups:
            return groups[axis]
        if axis == b:
            return s
        return d.size(axis)

    def size(item: Item) -> sympy.Expr:
        return item.per_row * sympy.Mul(*(tile(a) for a in item.axes))

    def label(gap: int) -> str:
        if b is not None and gap == h:
            return "loop: between chunks" if m else "loop"
        phase = "head" if gap < h else ("loop" if gap < h + m else ("after loop" if b else ""))
        where = f"before {steps[gap].name}" if gap < n else f"after {steps[-1].name}"
        if b is not None and gap == h + m:
            where = "after the last chunk"
        return f"{phase}: {where}" if phase else where

    columns = []
    for gap in range(n + 1):
        live = [k for k, (birth, death) in life.items() if birth <= gap <= death]
        if b is not None and gap == h:   # steady state: also what the previous chunk's end holds
            live += [k for k, (birth, death) in life.items()
                     if b in items[k].axes and birth <= h + m <= death and k not in live]
        if not live:
            continue
        values = sympy.Add(*(size(items[k]) for k in live))
        nbytes = sympy.Add(*(size(items[k]) * bytes_per_value(items[k].dtype) for k in live))
        columns.append(Column(label(gap), tuple(live), values, nbytes))
    return tuple(columns)


def _readers(name: str, steps: list) -> list[str]:
    return [op.name for op in steps if name in op.inputs]


def dominates(big: sympy.Expr, small: sympy.Expr) -> bool:
    """big >= small for every positive value of the symbols (their difference has no negative term)."""
    diff = sympy.expand(big - small)
    if diff == 0:
        return True
    terms = sympy.Add.make_args(diff)
    return all(t.as_coeff_Mul()[0] > 0 for t in terms)


def _max(candidates: tuple[sympy.Expr, ...]) -> sympy.Expr:
    """The maximum of column sizes, dropping those another column always exceeds."""
    kept: list[sympy.Expr] = []
    for i, c in enumerate(candidates):
        if any(dominates(o, c) and (not dominates(c, o) or j < i)
               for j, o in enumerate(candidates) if j != i):
            continue
        kept.append(c)
    return kept[0] if len(kept) == 1 else sympy.Max(*kept)
