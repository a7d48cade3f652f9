"""Divisor constraints a GPU imposes on tile sizes (Section 5.4), and those exact counting needs.

- Tensor cores multiply tiles of fixed shape (wgmma m64nNk16 on Hopper, mma.sync m16n8k16 on Ampere):
  along each contraction's m, n and k axes the tile must be a multiple of the instruction's size.
- GMEM->SMEM transfers move 128 consecutive bytes: when the contiguous (last) axis of a transferred
  array is partitioned, its tile must span a multiple of 128 bytes (not along an axis a block takes one
  index of, such as the heads: a per-head slope is one value a block; nor for a softmax's sink, a
  logit a row that a block reads once, before its loop).
- Block skipping under a mask (causal, a window, a band) is counted exactly when stream chunks do not
  straddle group boundaries: the stream size divides the group size, which divides the axis.
"""

from __future__ import annotations

import sympy

from analyzer.common.dtypes import bytes_per_value
from analyzer.hardware import Profile
from analyzer.model.fusion import Schedule, ragged_exact
from analyzer.model.optimize import Divides, Divisible


def one_index_axes(schedule: Schedule) -> set[str]:
    """Axes a contraction of the kernel keeps in both operands (batch, heads): a two-dimensional
    tensor-core tile cannot span them, so a block takes one index of each."""
    axes_of = schedule.diagram.axes_of()
    found: set[str] = set()
    for op in schedule.ops:
        if op.primitive.contraction:
            first, second = (set(axes_of[i]) for i in op.operands)
            found |= (first & second & set(op.applied.output))
    return found


def hardware_divisors(schedule: Schedule, profile: Profile) -> tuple[Divisible, ...]:
    part = schedule.partition
    symbol_of = dict(part.group) | ({part.stream[0]: part.stream[1]} if part.stream else {})
    d = schedule.diagram
    rules: list[Divisible] = []
    for op in schedule.ops:
        roles = op.primitive.tensor_roles(op.applied)
        mma = profile.divisors.mma.get(d.arrays[op.inputs[0]].dtype)
        if roles and mma is not None:
            for role, divisor in (("m", mma.m), ("n", mma.n), ("k", mma.k)):
                axes = roles[role]
                syms = tuple(symbol_of[a] for a in axes if a in symbol_of)
                if not syms or divisor == 1:
                    continue
                fixed = [d.size(a) for a in axes if a not in symbol_of]
                factor = sympy.Mul(*fixed)
                reason = (f"{'*'.join(s.name for s in syms)} multiple of {divisor}: "
                          f"{profile.divisors.mma_instruction} {role} of {op.name}")
                rules.append(Divisible(syms, divisor, reason, factor))
    sinks = {op.sink for op in schedule.ops}
    for name in schedule.loads + schedule.saves:
        array = d.arrays[name]
        if not array.axes or array.axes[-1] in one_index_axes(schedule) or name in sinks:
            continue        # a scalar, one value a block (a slope a head) or a sink: no rows to coalesce
        last = array.axes[-1]
        step = profile.divisors.coalesce_bytes // bytes_per_value(array.dtype)
        if last in symbol_of and step > 1:
            sym = symbol_of[last]
            rules.append(Divisible((sym,), step, f"{sym.name} multiple of {step}: "
                                   f"{profile.divisors.coalesce_bytes}-byte rows of {name}"))
    unique: dict[tuple, Divisible] = {}
    for r in rules:
        unique.setdefault((r.symbols, r.divisor, str(r.factor)), r)
    return tuple(unique.values())


def skip_divides(schedule: Schedule) -> tuple[Divides, ...]:
    if schedule.skip is None:
        return ()
    part = schedule.partition
    d = schedule.diagram
    s = part.stream[1]
    g = part.group_sizes.get(schedule.skip.query)
    query, key = d.size(schedule.skip.query), d.size(schedule.skip.key)
    kind = "causal" if schedule.skip.after == 0 else "masked"     # a band's blocks as a causal mask's
    if g is None:
        return (Divides(s, query, f"{s.name} divides {query}: {kind} blocks align with queries"),)
    if ragged_exact(schedule):     # counted exactly for ragged query groups: the chunks align with them
        return (Divides(s, g, f"{s.name} divides {g.name}: {kind} blocks align with query groups"),)
    return (Divides(s, g, f"{s.name} divides {g.name}: {kind} blocks align with query groups"),
            Divides(g, query, f"{g.name} divides {query}: whole query groups"),
            Divides(g, key, f"{g.name} divides {key}: whole key blocks"))
