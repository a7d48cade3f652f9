"""Legality of relabellings (the fusion theorem, Appendix A.1), and the schedule they imply.

A group partition is legal only along an axis every op of the kernel weaves (Section 2.3: a mapped
function can be split along the axis it is mapped over). A stream partition of axis b is legal only
when b comes from a transfer, some op reduces b with an accumulator (Appendix A.3), and every other op
that touches b keeps it as a weaved axis and comes before the reductions (Theorem 1: composing and
weaving a streamable algorithm without removing the streamed axis keeps it streamable). SoftMax along b
is streamable only fused with the contraction over b that follows it (A.3.2).

A legal relabelling is turned into a Schedule: per group, the head ops run once, the body ops once per
chunk of b, the tail ops once after the loop (Figure 27).
"""

from __future__ import annotations

from dataclasses import dataclass

import networkx as nx
import sympy

from analyzer.common.errors import NapkinError
from analyzer.common.expr import symbol
from analyzer.diagram.compiled import Diagram, Kernel, Op, Partition
from analyzer.diagram.primitives import (
    REGISTRY,
    Accumulator,
    Extent,
    Mask,
    narrower,
    pair_chunk_flops,
    pair_final_flops,
)


@dataclass(frozen=True)
class Reducer:
    """A streamed reduction of b and what it keeps on chip between chunks."""

    op: Op
    accumulator: Accumulator
    rows: tuple[str, ...]            # axes of the auxiliary values (empty: none)
    softmax: Op | None = None        # the softmax fused into this contraction, if any (A.3.2)


@dataclass(frozen=True)
class Skip:
    """Block skipping under a mask: group i of `query` streams `key` only from the chunk where its first
    row's band begins (a sliding window, a band) to the chunk where its last row's ends (its diagonal
    under a causal mask). The band is the narrowest every mask along `key` leaves (`mask`: one of them)."""

    mask: Op
    query: str
    key: str
    before: sympy.Expr | None = None    # keys before its own a query sees (window - 1); None: all
    after: sympy.Expr | None = sympy.Integer(0)     # keys after its own a query sees (0: causal); None: all


@dataclass(frozen=True)
class Schedule:
    diagram: Diagram
    kernel: Kernel
    level: str
    partition: Partition
    head: tuple[Op, ...]
    body: tuple[Op, ...]
    tail: tuple[Op, ...]
    loads: tuple[str, ...]       # arrays transferred into this level
    saves: tuple[str, ...]       # arrays transferred out of this level
    resident: tuple[str, ...]    # inputs already at this level: held, never transferred
    reducers: tuple[Reducer, ...]
    skip: Skip | None
    notes: tuple[str, ...] = ()

    @property
    def ops(self) -> tuple[Op, ...]:
        return self.head + self.body + self.tail

    @property
    def stream_axis(self) -> str | None:
        return self.partition.stream[0] if self.partition.stream else None

    # -- what each scheduled op costs per tile; `extent` gives the tile's axis sizes ---------------
    def step_flops(self, op: Op, extent: Extent) -> dict[str, sympy.Expr]:
        """Work of one execution of `op` (per chunk, in the loop body)."""
        if any(r.softmax is op for r in self.reducers):
            return op.primitive.online_flops(op.applied, extent)
        return op.primitive.flops(op.applied, extent)

    def final_flops(self, op: Op, extent: Extent) -> dict[str, sympy.Expr]:
        """Work done once when `op`'s output is complete (dividing by z, a sink's exp added to it)."""
        reducer = next((r for r in self.reducers if r.op is op), None)
        if reducer is not None and reducer.softmax is not None:
            return pair_final_flops(reducer.softmax.applied, op.applied, extent)
        return op.primitive.final_flops(op.applied, extent)

    def chunk_flops(self, reducer: Reducer, extent: Extent) -> dict[str, sympy.Expr]:
        """The accumulator's extra work each time it folds in one more chunk."""
        if reducer.softmax is not None:
            return pair_chunk_flops(reducer.softmax.applied, reducer.op.applied, extent)
        return reducer.op.primitive.chunk_flops(reducer.op.applied, extent)

    @property
    def arrays(self) -> tuple[str, ...]:
        """Every array the kernel holds at this level."""
        seen: dict[str, None] = {}
        for op in self.ops:
            seen.update(dict.fromkeys(op.inputs))
            seen[op.name] = None
        return tuple(seen)


def schedule(diagram: Diagram, kernel: Kernel, level: str, partition: Partition | None = None) -> Schedule:
    """Check the kernel's relabelling at `level` and return its schedule (or raise NapkinError).

    Remembered per diagram object (a sweep configures one kernel at the same level for every candidate:
    a calibration asked 32 000 times for a few dozen schedules); a relabelling that raises is not."""
    partition = partition if partition is not None else kernel.partitions.get(level, Partition())
    memo = _memo(diagram)
    key = (kernel.name, kernel.ops, kernel.path, level, partition)
    if key not in memo:
        try:
            memo[key] = _schedule(diagram, kernel, level, partition)
        except NapkinError as exc:
            raise exc.located(file=diagram.source) from None
    return memo[key]


def _memo(diagram: Diagram) -> dict:
    """The schedules of one diagram object, kept on it (a frozen dataclass's own attribute, as its op
    index is): they go with it, where a table keyed by the diagram would keep it alive."""
    memo = diagram.__dict__.get("_schedules")
    if memo is None:
        memo = {}
        object.__setattr__(diagram, "_schedules", memo)
    return memo


def _schedule(diagram: Diagram, kernel: Kernel, level: str, partition: Partition | None) -> Schedule:
    partition = partition if partition is not None else kernel.partitions.get(level, Partition())
    ops = [diagram.op(name) for name in kernel.ops]
    where = f"{kernel.path}.partition.{level}"
    _check_groups(ops, partition, kernel, where)
    members = {o.name for o in ops}
    kernel_inputs = [n for n in dict.fromkeys(i for o in ops for i in o.inputs) if n not in members]
    depth = diagram.levels.index(level)
    loads, resident = [], []
    for name in kernel_inputs:
        array_depth = diagram.levels.index(diagram.arrays[name].level)
        if array_depth < depth:
            loads.append(name)
        elif array_depth == depth:
            resident.append(name)
    saves = [o.name for o in ops
             if o.name in diagram.outputs or any(c.name not in members for c in diagram.consumers(o.name))]

    if partition.stream is None:
        return Schedule(diagram, kernel, level, partition, tuple(ops), (), (), tuple(loads),
                        tuple(saves), tuple(resident), (), None)

    b = partition.stream[0]
    graph = diagram.graph
    sub = graph.subgraph([("op", o.name) for o in ops] + [("array", n) for n in
                                                          {*members, *kernel_inputs}])
    if not any(b in diagram.arrays[n].axes for n in loads):
        raise NapkinError(f"cannot stream axis {b!r} in kernel {kernel.name!r}: no array "
                          f"transferred into {level} has it", field=where,
                          hint="a stream partition splits an axis as it is transferred (Section 2.4)")
    reducers: list[Reducer] = []
    paired: set[str] = set()
    for op in ops:
        if b not in op.applied.domain or b in op.weave:
            continue
        prim = op.primitive
        if prim.reduces and op.applied.over == b and prim.accumulator is not None:
            softmax = _paired_softmax(diagram, op, b, members)
            if softmax is not None:
                paired.add(softmax.name)
                acc = REGISTRY["softmax"].pair_accumulator
                reducers.append(Reducer(op, acc, softmax.primitive.rows(softmax.applied), softmax))
            else:
                rows = prim.rows(op.applied) if prim.accumulator.aux_per_row else ()
                reducers.append(Reducer(op, prim.accumulator, rows))
            continue
        if prim.name == "softmax" and op.applied.over == b:
            continue  # checked below: it must feed a contraction over b
        raise NapkinError(f"cannot stream axis {b!r} in kernel {kernel.name!r}: op {op.name!r} "
                          f"({prim.name}) acts on {b!r} and has no accumulator for it", field=where,
                          hint="only functions with an accumulator (dot, softmax_dot, sum, max) can "
                               "take a streamed axis apart (Appendix A.3)")
    for op in ops:
        if op.primitive.name == "softmax" and op.applied.over == b and op.name not in paired:
            raise NapkinError(f"cannot stream axis {b!r} in kernel {kernel.name!r}: op {op.name!r} "
                              f"(softmax) needs the whole of {b!r}, and no contraction over {b!r} "
                              "consumes it", field=where,
                              hint="softmax streams only fused with the contraction that follows it "
                                   "(Appendix A.3.2): feed it to one dot over the same axis, or use "
                                   "softmax_dot")
    if not reducers:
        raise NapkinError(f"cannot stream axis {b!r} in kernel {kernel.name!r}: no op reduces it",
                          field=where, hint="stream an axis that a dot, softmax_dot, sum or max "
                                            "reduces; a weaved axis can be grouped instead")

    after_reduction = set()
    for r in reducers:
        after_reduction |= {n[1] for n in nx.descendants(sub, ("op", r.op.name)) if n[0] == "op"}
    for op in ops:
        if b in op.applied.domain and op.name in after_reduction:
            culprit = next(r.op.name for r in reducers
                           if nx.has_path(sub, ("op", r.op.name), ("op", op.name)))
            raise NapkinError(f"cannot stream axis {b!r} in kernel {kernel.name!r}: op {op.name!r} "
                              f"uses {b!r} after op {culprit!r} has reduced it", field=where,
                              hint="the fusion theorem (Appendix A.1) needs every op before the "
                                   "reduction to keep the streamed axis and none after it to use it")
    body = tuple(o for o in ops if b in o.applied.domain)
    in_body = {o.name for o in body}          # by name: comparing Ops whole made this quadratic and slow
    tail = tuple(o for o in ops if o.name not in in_body and o.name in after_reduction)
    in_tail = {o.name for o in tail}
    head = tuple(o for o in ops if o.name not in in_body and o.name not in in_tail)
    skip, notes = _skip(diagram, body, reducers, saves, partition, sub)
    return Schedule(diagram, kernel, level, partition, head, body, tail, tuple(loads), tuple(saves),
                    tuple(resident), tuple(reducers), skip, notes)


def _check_groups(ops: list[Op], partition: Partition, kernel: Kernel, where: str) -> None:
    for axis, _ in partition.group:
        for op in ops:
            if axis in op.applied.domain and axis not in op.weave:
                raise NapkinError(
                    f"cannot group axis {axis!r} in kernel {kernel.name!r}: op {op.name!r} "
                    f"({op.primitive.name}) acts on {axis!r} rather than being weaved over it",
                    field=where, hint="group partitions split weaved axes only (Section 2.3); "
                                      "an axis a function reduces can be streamed instead")


def _paired_softmax(diagram: Diagram, op: Op, b: str, members: set[str]) -> Op | None:
    """The softmax along b whose only use is this contraction over b, if there is one."""
    if op.primitive.name != "dot":
        return None
    for name in op.inputs:
        producer = diagram.arrays[name].producer
        if producer is None or producer not in members:
            continue
        src = diagram.op(producer)
        if src.primitive.name == "softmax" and src.applied.over == b:
            uses = diagram.consumers(name)
            if len(uses) == 1 and name not in diagram.outputs:
                return src
    return None


def _skip(diagram: Diagram, body: tuple[Op, ...], reducers: list[Reducer], saves: list[str],
          partition: Partition, sub: nx.DiGraph) -> tuple[Skip | None, tuple[str, ...]]:
    """Whether a mask lets group i of the query axis stop streaming where its last row's band ends (its
    diagonal under a causal mask) and start where its first row's begins (a sliding window, a band): where
    every reducer ignores what is masked. Masks along the same axes narrow each other's band."""
    b = partition.stream[0]
    masks = [o for o in body if isinstance(o.primitive, Mask) and o.applied.key == b]
    if not masks:
        return None, ()
    masks = [o for o in masks if o.applied.query == masks[0].applied.query]
    # the narrowest first: before, then after (the one a kernel's unmasked chunks pass through)
    masks.sort(key=lambda o: tuple((e is None, e or 0) for e in (o.primitive.keys_before(o.applied),
                                                                o.primitive.keys_after(o.applied))))
    kept = [o for o in masks if not _why_not_skip(diagram, body, reducers, saves, b, o, sub)]
    if not kept:
        mask = masks[0]
        return None, (f"{mask.primitive.name} {mask.name!r} does not skip blocks: "
                      + "; ".join(_why_not_skip(diagram, body, reducers, saves, b, mask, sub)),)
    before = after = None
    for o in kept:          # both masks applied: the narrower bound on each side
        before = narrower(before, o.primitive.keys_before(o.applied))
        after = narrower(after, o.primitive.keys_after(o.applied))
    return Skip(kept[0], kept[0].applied.query, b, before, after), ()


def _why_not_skip(diagram: Diagram, body: tuple[Op, ...], reducers: list[Reducer], saves: list[str], b: str,
                  mask: Op, sub: nx.DiGraph) -> list[str]:
    """Why the blocks outside `mask` cannot be dropped (none: they can)."""
    reasons = []
    for r in reducers:
        neutral = (r.softmax or r.op).primitive.mask_neutral
        if not neutral:
            reasons.append(f"{r.op.name} ({r.op.primitive.name}) is changed by masked items")
        elif not nx.has_path(sub, ("op", mask.name), ("op", r.op.name)):
            reasons.append(f"{r.op.name} does not read the masked scores")
        else:
            between = [o for o in body if o not in (mask, r.op, r.softmax)
                       and nx.has_path(sub, ("op", mask.name), ("op", o.name))
                       and nx.has_path(sub, ("op", o.name), ("op", r.op.name))]
            turned = [o for o in between if not o.primitive.keeps_neg_inf(o.applied)]
            if turned:
                reasons.append(f"{turned[0].name} ({turned[0].primitive.name}) turns masked scores into "
                               f"numbers {r.op.name} counts (mask after it to skip blocks)")
    if any(b in diagram.arrays[s].axes for s in saves):
        reasons.append(f"an output keeps axis {b!r}, so every block must be written")
    return reasons


def ragged_exact(schedule: Schedule) -> bool:
    """Whether block skipping is over one sequence (the key axis the query axis's size) with a bound past
    the diagonal (a causal mask, a sliding window, a band): then the count is exact for query tiles that
    do not divide the sequence (ragged_sums), and no whole-tile rule binds the tile search
    (analyzer.model.constraints.skip_divides)."""
    skip = schedule.skip
    d = schedule.diagram
    return (skip is not None and skip.after is not None and skip.query in schedule.partition.group_sizes
            and d.size(skip.query) == d.size(skip.key))


@dataclass(frozen=True)
class RaggedSums:
    """A ragged count (ragged_exact) over n = ceiling(a / g) query groups, the last one ragged: group i
    streams keys from start_i = max(0, i g - W') to end_i = min(a, (i + 1) g + A'), the last one to a.
    `n` is the group count's placeholder (ceiling(a / g) where counted); `keys`, sum_i (end_i - start_i);
    `last_start`, start_{n-1}; `at_end`, the groups that end at a (their last chunk partial where a is no
    multiple of the chunk). With n = a / g these are the whole tiles' sums."""

    n: sympy.Expr
    keys: sympy.Expr
    last_start: sympy.Expr
    at_end: sympy.Expr


def ragged_sums(schedule: Schedule) -> RaggedSums:
    skip = schedule.skip
    a = schedule.diagram.size(skip.query)
    g = schedule.partition.group_sizes[skip.query]
    s = schedule.partition.stream[1]
    n = symbol(f"_n_{skip.query}")
    if skip.after == 0:     # causal: group i < n - 1 ends at (i + 1) g, the last at a
        ends, at_end = g * n * (n - 1) / 2 + a, sympy.Integer(1)
    else:                   # a band: the m groups before the last that end before a end A' past it
        after = s * sympy.ceiling(skip.after / s)
        m = sympy.Min(n - 1, sympy.Max(0, sympy.floor((a - after) / g)))
        ends, at_end = g * m * (m + 1) / 2 + after * m + a * (n - m), n - m
    if skip.before is None:
        return RaggedSums(n, ends, sympy.Integer(0), at_end)
    w = s * sympy.ceiling(skip.before / s)      # W': the keys before a group's first row it streams
    k = sympy.ceiling(w / g)                    # the first group that starts past key 0
    starts = sympy.Piecewise((g * (n * (n - 1) - k * (k - 1)) / 2 - w * (n - k), sympy.Lt(k, n)), (0, True))
    last = sympy.Piecewise(((n - 1) * g - w, sympy.Le(k, n - 1)), (0, True))
    return RaggedSums(n, ends - starts, last, at_end)


def skip_extent(schedule: Schedule, *, ragged: bool = True) -> sympy.Expr:
    """Mean streamed length of the key axis per group of the query axis under block skipping.

    A mask over one sequence (ragged_exact) is counted for n = ceiling(a / g) groups of which the last
    may be ragged (ragged_sums): under a causal mask group i streams to (i + 1) g, the last to a, so the
    mean is (g n (n - 1) / 2 + a) / n, less a window's starts, in terms of the group count's placeholder;
    with n = a / g it is (a + g)/2, the whole tiles' count, which `ragged=False` gives.

    Group i of the query axis (rows [i g, (i+1) g)) needs keys [0, min(b, (i+1) g)); averaged over the
    a/g groups this is (a + g)/2 when a <= b. Exact when the stream size divides g and g divides a
    (and b); analyzer.model.optimize enforces that.

    Under a band a query also sees A keys after its own (band_mask's `after`), so group i ends at the
    chunk holding key (i+1) g - 1 + A: at (i+1) g + A' with A' = s ceil(A / s), A rounded up to whole
    chunks of s, or at b. The first m = min(n, max(0, floor((b - A') / g))) groups end before b, so the
    mean end is (g m (m + 1) / 2 + A' m + b (n - m)) / n over the n = a/g groups; b where A is unbounded.

    Under a sliding window a query sees W = window - 1 keys before its own, so group i starts at the
    chunk holding key i g - W: at i g - W' with W' = s ceil(W / s), W rounded up to whole chunks of s.
    The groups from k = ceil(W' / g) on start there, so the mean drops by
    (g (n (n - 1) - k (k - 1)) / 2 - W' (n - k)) / n over the n = a/g groups (0 when k >= n). Exact
    under the same divisors, for queries that are not more than W' + g past the last key (every group
    then starts before its end).
    """
    skip = schedule.skip
    assert skip is not None
    d = schedule.diagram
    a, b = d.size(skip.query), d.size(skip.key)
    g = schedule.partition.group_sizes.get(skip.query)
    s = schedule.partition.stream[1]
    after = None if skip.after is None else s * sympy.ceiling(skip.after / s)    # A'
    if g is None:           # one group of every query: from the first key to its last row's band
        return sympy.Min(a, b) if skip.after == 0 else b if after is None else sympy.Min(b, a + after)
    if ragged and ragged_exact(schedule):   # group i ends at its diagonal, (i + 1) g, the last at a, however ragged
        sums = ragged_sums(schedule)
        return sums.keys / sums.n
    n = a / g
    if skip.after == 0:     # causal: group i ends at its diagonal
        ends = sympy.Piecewise(((a + g) / 2, sympy.Le(a, b)), ((b * (b + g) / 2 + b * (a - b)) / a, True))
    elif after is None:     # every group streams to the last key
        ends = b
    else:
        m = sympy.Min(n, sympy.Max(0, sympy.floor((b - after) / g)))
        ends = (g * m * (m + 1) / 2 + after * m + b * (n - m)) / n
    if skip.before is None:
        return ends
    w = s * sympy.ceiling(skip.before / s)      # W': the keys before a group's first row it streams
    k = sympy.ceiling(w / g)
    before = sympy.Piecewise(((g * (n * (n - 1) - k * (k - 1)) / 2 - w * (n - k)) / n, sympy.Lt(k, n)),
                             (0, True))
    return ends - before
