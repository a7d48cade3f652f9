"""The optimum H*(a, M) (Equation 4) in closed form, and an integer search for concrete sizes.

Closed form. Following Appendix A.2, memory is taken in the limit of large M and group sizes, where the
term with the most group-size factors dominates (y prod_i g_i); among such terms the one with the highest
degree in the axis sizes is kept (the paper's d >> 1), and stream sizes are set to 1 (Section 2.4:
streaming costs no transfers, so the smallest stream is best). H = N_g H_g is then minimised subject to
that leading memory term being M, by Lagrange's method: group sizes that H does not depend on stay at 1
(they only cost memory); one group size is eliminated through the constraint and H is made stationary in
the others. The result is rewritten in the standard form sum_t alpha_t(a) M^-beta_t (Equation 1).

Integer search. For concrete sizes, every candidate tile size of every partition symbol is evaluated
with numpy: exact transfers (ceiling(a / g_a) groups for tiles that do not divide their axis), exact
memory in bytes (every column, not only the leading term), divisor constraints (tensor-core tile and
128-byte coalescing multiples) and a memory limit. The caller supplies the objective.
"""

from __future__ import annotations

import math

from collections.abc import Callable
from dataclasses import dataclass, field
from functools import lru_cache

import numpy as np
import sympy

from analyzer.common.errors import NapkinError
from analyzer.common.expr import MEMORY, at
from analyzer.common.numpy_code import numpy_function
from analyzer.model.cost import LevelCost


@dataclass(frozen=True)
class StandardTerm:
    alpha: sympy.Expr      # coefficient in the axis sizes
    beta: sympy.Rational   # exponent of M^-1


@dataclass(frozen=True)
class ClosedForm:
    """H*(a, M) and how it is reached."""

    h_star: sympy.Expr                        # in the axis sizes and M
    terms: tuple[StandardTerm, ...]           # Equation 1
    memory_lead: sympy.Expr                   # the leading memory term set equal to M
    group_sizes: dict[sympy.Symbol, sympy.Expr]   # g*(M); symbols H does not depend on stay 1
    free: tuple[sympy.Symbol, ...] = ()       # group sizes only their product matters for

    def at(self, memory: sympy.Expr) -> sympy.Expr:
        return self.h_star.subs(MEMORY, memory)


@lru_cache(maxsize=1024)
def closed_form(transfers: sympy.Expr, memory: sympy.Expr, group: tuple[sympy.Symbol, ...],
                stream: tuple[sympy.Symbol, ...]) -> ClosedForm | None:
    """Minimise transfers over the group sizes with the leading memory term equal to M.

    A function of its expressions alone, remembered by them (sympy's expressions are immutable and
    hash by structure): every analysis of a diagram asks again for each level's optimum, and one
    `sympy.solve` costs tens of milliseconds; a process that analyses one diagram at many sizes or on
    many GPUs (napkin calibrate's sweeps, a report, the test suite) solved the same system hundreds of
    times. Callers read the result; none changes it."""
    lead = _leading_memory(memory, group, stream)
    if lead is None:
        return None
    free = [g for g in group if transfers.has(g)]
    pinned = {g: sympy.Integer(1) for g in group if g not in free}
    lead = lead.subs(pinned)
    if not free:
        try:
            return ClosedForm(transfers, standard_form(transfers), lead, pinned)
        except ValueError:
            return None
    in_lead = [g for g in free if lead.has(g)]
    if not in_lead:
        return None
    v = in_lead[-1]
    roots = _eliminate(lead, v)
    if len(roots) != 1:
        return None
    reduced = transfers.subs(v, roots[0])
    others = [u for u in free if u != v and reduced.has(u)]
    solution: dict[sympy.Symbol, sympy.Expr] = {}
    if others:
        found = sympy.solve([sympy.diff(reduced, u) for u in others], others, dict=True)
        found = [f for f in found if all(val.is_positive is not False for val in f.values())]
        if len(found) != 1:
            return None
        solution = found[0]
    h_star = sympy.expand(reduced.subs(solution))
    if h_star.free_symbols & set(group):
        return None
    try:
        terms = standard_form(h_star)
    except ValueError:   # not a sum of powers of M (e.g. a Piecewise): no standard form
        return None
    sizes = {**pinned, **solution, v: roots[0].subs(solution)}
    undetermined = tuple(u for u in free if u != v and u not in solution)
    return ClosedForm(h_star, terms, lead, sizes, undetermined)


def _eliminate(lead: sympy.Expr, v: sympy.Symbol) -> list[sympy.Expr]:
    """Positive solutions of lead = M for v; a monomial c v^k inverts directly."""
    coeff, part = lead.as_independent(v, as_Add=False)
    base, k = part.as_base_exp()
    if base == v and k.is_number and k > 0:
        return [(MEMORY / coeff) ** (1 / k)]
    return [r for r in sympy.solve(sympy.Eq(lead, MEMORY), v) if r.is_positive is not False]


def standard_form(h_star: sympy.Expr) -> tuple[StandardTerm, ...]:
    """sum_t alpha_t(a) M^-beta_t: group the terms of H* by their power of M."""
    by_beta: dict[sympy.Rational, sympy.Expr] = {}
    for term in sympy.Add.make_args(sympy.expand(h_star)):
        alpha, m_part = term.as_independent(MEMORY, as_Add=False)
        base, exponent = m_part.as_base_exp() if m_part != 1 else (MEMORY, sympy.Integer(0))
        if base != MEMORY or not exponent.is_Rational:
            raise ValueError(f"H* term {term} is not a power of M")
        beta = -exponent
        by_beta[beta] = by_beta.get(beta, sympy.Integer(0)) + alpha
    return tuple(StandardTerm(sympy.factor(a), b) for b, a in sorted(by_beta.items(), reverse=True))


def _leading_memory(memory: sympy.Expr, group: tuple[sympy.Symbol, ...],
                    stream: tuple[sympy.Symbol, ...]) -> sympy.Expr | None:
    candidates = memory.args if isinstance(memory, sympy.Max) else (memory,)
    leads = []
    for c in candidates:
        expr = sympy.expand(c.subs({s: 1 for s in stream}))
        terms = sympy.Add.make_args(expr)

        def degree(term: sympy.Expr, syms) -> int:
            powers = term.as_powers_dict()
            return sum(int(powers.get(s, 0)) for s in syms)

        top_g = max(degree(t, group) for t in terms)
        terms = [t for t in terms if degree(t, group) == top_g]
        sizes = set().union(*(t.free_symbols for t in terms)) - set(group)
        top_a = max(degree(t, sizes) for t in terms)
        leads.append((top_g, top_a, sympy.Add(*(t for t in terms if degree(t, sizes) == top_a))))
    best = max((g, a) for g, a, _ in leads)
    tied = [e for g, a, e in leads if (g, a) == best]
    winner = tied[0]
    for other in tied[1:]:
        ratio = sympy.cancel(other / winner)
        if not ratio.is_number:
            return None
        if ratio > 1:
            winner = other
    return winner


# -- integer search ------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Divisible:
    """factor * (the product of these tile sizes) must be a multiple of `divisor` (why: `reason`)."""

    symbols: tuple[sympy.Symbol, ...]
    divisor: int
    reason: str
    factor: sympy.Expr = sympy.Integer(1)   # sizes of the role's axes that are not partitioned


@dataclass(frozen=True)
class Divides:
    """`small` must divide `big` (e.g. block skipping: the stream size divides the group size)."""

    small: sympy.Symbol
    big: sympy.Expr          # a partition symbol or a size expression
    reason: str


@dataclass(frozen=True)
class Choice:
    values: dict[sympy.Symbol, int]
    metrics: dict[str, float]              # every evaluated quantity at the choice
    candidates: int                        # configurations evaluated
    feasible: int                          # configurations within every constraint
    limit_bytes: float
    constraints: tuple[str, ...] = field(default_factory=tuple)


NICE = sorted({*range(16, 257, 16), *range(256, 1025, 64), *(2 ** k for k in range(0, 17))})


def candidates(extent: int, step: int = 1) -> list[int]:
    """Tile sizes worth trying for an axis of `extent`: divisors and round multiples of `step`."""
    values = {v for v in NICE if v % step == 0 and v <= extent}
    values |= {v for v in _divisors(extent) if v % step == 0}
    values.add(-(-extent // step) * step)   # the whole axis, rounded up to a legal tile
    return sorted(values)


def _divisors(n: int) -> list[int]:
    return [int(v) for v in sympy.divisors(n)]   # from the factorisation: fast up to 2**40


MAX_GRID = 2_000_000


def search(cost: LevelCost, sizes: dict[sympy.Symbol, int], *, limit_bytes: float,
           exprs: dict[str, sympy.Expr], objective: Callable[[dict[str, np.ndarray]], np.ndarray],
           divisible: tuple[Divisible, ...] = (), divides: tuple[Divides, ...] = (),
           pinned: dict[sympy.Symbol, int] | None = None, what: str = "") -> Choice:
    """Evaluate every candidate configuration and keep the best feasible one.

    `exprs` are expressions in the partition symbols (group counts as placeholders); each is evaluated
    with concrete sizes and exact (ceiling) group counts. The objective ranks feasible candidates; ties
    go to fewer transfers, then less memory, then larger tiles.
    """
    part = cost.schedule.partition
    pinned = pinned or {}
    symbols = part.symbols
    axis_of = {s: a for a, s in part.group} | ({part.stream[1]: part.stream[0]} if part.stream else {})
    steps = {s: 1 for s in symbols}
    for rule in divisible:
        factor = int(at(rule.factor, sizes))
        if len(rule.symbols) == 1:
            need = rule.divisor // int(np.gcd(rule.divisor, factor))
            steps[rule.symbols[0]] = int(np.lcm(steps[rule.symbols[0]], need))
    axes = []
    for s in symbols:
        extent = int(at(cost.schedule.diagram.size(axis_of[s]), sizes))
        if s in pinned:
            axes.append([pinned[s]])
        else:
            axes.append(candidates(extent, steps[s]))
    total = int(np.prod([len(a) for a in axes])) if axes else 1
    while total > MAX_GRID:   # thin the longest list, keeping its ends
        longest = max(range(len(axes)), key=lambda i: len(axes[i]))
        axes[longest] = axes[longest][::2] + ([axes[longest][-1]] if len(axes[longest]) % 2 == 0 else [])
        total = int(np.prod([len(a) for a in axes]))
    # an open grid (each symbol along an axis of its own): memory and the rules broadcast over it; the
    # other terms are evaluated only where a configuration fits and obeys the rules
    shape = tuple(len(a) for a in axes)
    grid = np.meshgrid(*[np.asarray(a, dtype=np.float64) for a in axes], indexing="ij", sparse=True) if axes else []
    open_ = dict(zip(symbols, grid, strict=True))
    n = total
    counts = tuple(cost.group_counts.items())

    def full(values) -> np.ndarray:
        return np.broadcast_to(values, shape).ravel()

    memory = _evaluate(cost.memory_bytes, counts, sizes, open_, shape).ravel()
    fits = memory <= limit_bytes * (1 + 1e-12)
    legal = np.ones(n, dtype=bool)
    for rule in (*divisible, *divides):
        obeys = full(obeyed(rule, open_, sizes))
        if not obeys.any():   # pinned sizes, or sizes no tile the GPU takes can divide
            if pinned:
                pins = ", ".join(f"{s.name}={v}" for s, v in pinned.items())
                raise NapkinError(f"{pins} {what}breaks a constraint: {rule.reason}",
                                  hint="pin a size that obeys it, or leave it to the search")
            raise NapkinError(f"no tile size {what}obeys a constraint at these sizes: {rule.reason}",
                              hint="choose sizes that the rule allows for some tile the GPU takes")
        legal &= obeys
    ok = fits & legal
    feasible = int(ok.sum())
    rules = tuple(dict.fromkeys(r.reason for r in (*divisible, *divides)))
    if not feasible:
        smallest = float(memory.min()) if n else float("nan")
        rules_text = f"tiles obey: {'; '.join(rules)}; " if rules else ""
        raise NapkinError(f"no tile sizes {what}fit: the smallest configuration needs "
                          f"{smallest / 1024:.1f} KiB, the limit is {limit_bytes / 1024:.1f} KiB",
                          hint=f"{rules_text}pass smaller sizes with --set, unpin tile sizes, or use a "
                               "GPU with more memory")
    index = np.unravel_index(np.flatnonzero(ok), shape) if axes else ()
    flat = {s: np.asarray(a, dtype=np.float64)[i] for s, a, i in zip(symbols, axes, index, strict=True)}
    values = evaluate_points(cost, sizes, flat, exprs)
    score = objective(values)
    # the lowest score first (NaN last), then fewer transfers, less memory, larger tiles: the ties
    # for the lowest score are all that the later keys need to see
    known = ~np.isnan(score)
    top = np.flatnonzero(score == score[known].min()) if known.any() else np.arange(feasible)
    tiles = np.prod([flat[s][top] for s in symbols], axis=0) if symbols else np.ones(len(top))
    best = int(top[np.lexsort((-tiles, values["memory_bytes"][top], values["transfer_bytes"][top]))[0]])
    chosen = {s: int(flat[s][best]) for s in symbols}
    metrics = {k: float(v[best]) for k, v in values.items()}
    return Choice(chosen, metrics, n, feasible, limit_bytes, rules)


def obeyed(rule: Divisible | Divides, flat: dict[sympy.Symbol, np.ndarray],
           sizes: dict[sympy.Symbol, int]) -> np.ndarray:
    """Which configurations (partition symbol -> tile sizes, arrays that broadcast together) obey a
    divisor rule."""
    if isinstance(rule, Divisible):
        product = math.prod((flat[s] for s in rule.symbols), start=float(at(rule.factor, sizes)))
        return np.mod(product, rule.divisor) == 0
    big = flat[rule.big] if rule.big in flat else float(at(rule.big, sizes))
    return np.mod(big, flat[rule.small]) == 0


def evaluate_points(cost: LevelCost, sizes: dict[sympy.Symbol, int], points: dict[sympy.Symbol, np.ndarray],
                    exprs: dict[str, sympy.Expr] | None = None) -> dict[str, np.ndarray]:
    """H, memory, N_g and `exprs` at each configuration of `points` (partition symbol -> one tile size
    per configuration), with exact (ceiling) group counts."""
    counts = tuple(cost.group_counts.items())
    n = len(next(iter(points.values()))) if points else 1
    exprs = {"transfers": cost.counted["transfers"], "transfer_bytes": cost.counted["transfer_bytes"],
             "memory_bytes": cost.memory_bytes, "memory": cost.memory,
             "groups": cost.counted["groups"], **(exprs or {})}
    return {key: _evaluate(expr, counts, sizes, points, (n,)) for key, expr in exprs.items()}


def _evaluate(expr: sympy.Expr, counts: tuple, sizes: dict[sympy.Symbol, int], flat: dict,
              shape: tuple[int, ...]) -> np.ndarray:
    used, fn = _compiled(expr, counts)
    missing = [s for s in used if s not in flat and s not in sizes]
    if missing:
        raise NapkinError(f"no value for {missing[0]} to evaluate {expr}")
    with np.errstate(all="ignore"):
        out = np.asarray(fn(*(flat[s] if s in flat else float(sizes[s]) for s in used)),
                         dtype=np.float64)
    return np.broadcast_to(out, shape).copy()


@lru_cache(maxsize=4096)
def _compiled(expr: sympy.Expr, counts: tuple) -> tuple[list[sympy.Symbol], Callable]:
    """`expr` with each group count placeholder as the exact (ceiling) count, as a numpy function of
    its sizes and tile sizes: compiled once, evaluated at every problem size and configuration."""
    full = expr.subs({placeholder: sympy.ceiling(count) for placeholder, count in counts})
    used = sorted(full.free_symbols, key=str)
    return used, numpy_function(used, full)
