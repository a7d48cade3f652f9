"""The classic FlashAttention block-size rule, as a baseline for napkin's optimum.

FlashAttention (Dao et al. 2022, Algorithm 1 line 1; restated in papers/flashattention-cuda-t4.txt,
Section IV and Section VIII.B) sets its block sizes from the on-chip memory M, in elements, and the
head dimension d:

    B_c = ceil(M / (4d))          rows of the key/value blocks K_j, V_j   (napkin: the stream size)
    B_r = min(ceil(M / (4d)), d)  rows of the query/output blocks Q_i, O_i (napkin: the group size)

so that the four blocks of d columns fit in M (4 B_c d <= M when B_r <= B_c). napkin's counting
(Section 2 of "FlashAttention on a Napkin") holds more than those four blocks (the score tile, an fp32
accumulator, the online softmax's running maximum and sum), so the rule's tiles need not fit.

Where the rule applies is read from the schedule, never from axis names: the lowest level streams the
n axis of the kernel's first contraction (the keys), groups its innermost m axis (the queries), and
every array the kernel transfers is a block of the contracted k axis (d) and either the query or the
key axis, once the other grouped axes (heads) are set to 1: one head per block, as in FlashAttention.
"""

from __future__ import annotations

from dataclasses import dataclass

import sympy

from analyzer.common.dtypes import bytes_per_value
from analyzer.common.expr import at
from analyzer.model.cost import LevelCost
from analyzer.model.fusion import Schedule
from analyzer.model.optimize import Choice, Divides, Divisible, search


@dataclass(frozen=True)
class RuleAxes:
    """The axes the rule sizes, in one schedule."""

    contraction: str    # the kernel's first contraction (the scores S = Q K^T)
    query: str          # its innermost m axis, grouped: B_r
    key: str            # its n axis, streamed: B_c
    head: str           # its contracted k axis: d


@dataclass(frozen=True)
class ClassicRule:
    """The rule's tiles, their exact costs, and the transfer-optimal tiles under the same limit."""

    axes: RuleAxes
    head_dim: int                         # d
    memory_elements: int                  # M of Algorithm 1: the level's limit in elements
    b_c: int                              # ceil(M / 4d), before clamping to the key axis
    b_r: int                              # min(ceil(M / 4d), d), before clamping to the query axis
    tiles: dict[sympy.Symbol, int]        # partition symbol -> size at the rule (other groups 1)
    metrics: dict[str, float]             # LevelCost.evaluate at the rule's tiles
    limit_bytes: float
    breaks: tuple[str, ...]               # divisor constraints the rule's tiles do not obey
    optimum: Choice                       # least transfer bytes over feasible, legal tiles

    @property
    def fits(self) -> bool:
        return self.metrics["memory_bytes"] <= self.limit_bytes * (1 + 1e-12)

    @property
    def ratio(self) -> float:
        """Rule transfers over optimal transfers (>= 1 whenever the rule's tiles are feasible)."""
        return self.metrics["transfer_bytes"] / self.optimum.metrics["transfer_bytes"]


def rule_axes(schedule: Schedule) -> RuleAxes | None:
    """The query, key and head axes where the rule applies to this schedule, else None."""
    part = schedule.partition
    if part.stream is None:
        return None
    key = part.stream[0]
    first = next((op for op in schedule.ops if op.primitive.tensor_roles(op.applied)), None)
    if first is None:
        return None
    roles = first.primitive.tensor_roles(first.applied)
    groups = part.group_sizes
    if key not in roles["n"] or not roles["m"] or roles["m"][-1] not in groups:
        return None
    query, head = roles["m"][-1], roles["k"][0]
    others = set(groups) - {query}
    blocks = ({query, head}, {key, head})   # Q_i, O_i: B_r x d; K_j, V_j: B_c x d
    for name in schedule.loads + schedule.saves:
        if set(schedule.diagram.arrays[name].axes) - others not in blocks:
            return None
    return RuleAxes(first.name, query, key, head)


def block_sizes(memory_elements: int, head_dim: int) -> tuple[int, int]:
    """(B_c, B_r) of Algorithm 1, line 1: ceil(M / 4d) and min(ceil(M / 4d), d)."""
    b_c = -(-memory_elements // (4 * head_dim))
    return b_c, min(b_c, head_dim)


def classic_rule(cost: LevelCost, sizes: dict[sympy.Symbol, int], *, limit_bytes: float, dtype: str,
                 divisible: tuple[Divisible, ...] = (), divides: tuple[Divides, ...] = ()
                 ) -> ClassicRule | None:
    """The rule at this level (memory M = limit_bytes / bytes per value of `dtype`), or None.

    The rule's tiles are evaluated exactly (a last partial tile where they do not divide their axis);
    the optimum is napkin's integer search with the same memory limit and divisor constraints, ranked
    by transfer bytes alone.
    """
    schedule = cost.schedule
    axes = rule_axes(schedule)
    if axes is None:
        return None
    d = schedule.diagram
    part = schedule.partition
    head_dim = int(at(d.size(axes.head), sizes))
    memory_elements = int(limit_bytes // bytes_per_value(dtype))
    b_c, b_r = block_sizes(memory_elements, head_dim)
    tiles = {s: 1 for s in part.symbols}
    tiles[part.group_sizes[axes.query]] = min(b_r, int(at(d.size(axes.query), sizes)))
    tiles[part.stream[1]] = min(b_c, int(at(d.size(axes.key), sizes)))
    metrics = cost.evaluate({**sizes, **tiles})
    optimum = search(cost, sizes, limit_bytes=limit_bytes, exprs={},
                     objective=lambda v: v["transfer_bytes"], divisible=divisible, divides=divides)
    return ClassicRule(axes, head_dim, memory_elements, b_c, b_r, tiles, metrics, limit_bytes,
                       broken(tiles, sizes, divisible, divides), optimum)


def broken(tiles: dict[sympy.Symbol, int], sizes: dict[sympy.Symbol, int],
           divisible: tuple[Divisible, ...], divides: tuple[Divides, ...]) -> tuple[str, ...]:
    """The reasons of the constraints that these tiles break."""
    out = []
    for rule in divisible:
        product = int(sympy.Mul(*(tiles[s] for s in rule.symbols)) * at(rule.factor, sizes))
        if product % rule.divisor:
            out.append(rule.reason)
    for rule in divides:
        if int(at(rule.big.subs(tiles), sizes)) % tiles[rule.small]:
            out.append(rule.reason)
    return tuple(dict.fromkeys(out))
