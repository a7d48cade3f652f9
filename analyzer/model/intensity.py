"""Arithmetic intensity against bandwidth per level (Appendix B.1).

With FLOPs K and optimal transfers H*(a, M), a level is bandwidth bound unless H*/K < Hdot/Kdot, where
Kdot is the tensor rate and Hdot the level's feeding bandwidth in values per second. For matmul,
H*/K = M^-0.5 + (2b)^-1. From H*/K the paper reads:
- the absolute minimum memory: the M at which the M terms alone reach Hdot/Kdot (axes -> infinity);
- the absolute minimum of an axis: where the M-free terms alone reach Hdot/Kdot (M -> infinity);
- the tile size at the level's (effective) memory, from the optimum's group sizes g*(M);
- the minimum of an axis at that memory, where all of H*/K reaches Hdot/Kdot.
Nothing here knows an algorithm: the ratio comes from the diagram's closed form.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import sympy

from analyzer.common.expr import MEMORY, at
from analyzer.model.optimize import ClosedForm


@dataclass(frozen=True)
class BandwidthLimit:
    compute_per_transfer: float                 # Kdot / Hdot: FLOPs the level's bandwidth allows per value
    min_memory_values: float | None             # absolute minimum memory M (values)
    min_sizes: dict[str, float] = field(default_factory=dict)          # with M -> infinity
    tile_sizes: dict[str, float] = field(default_factory=dict)         # g*(M) at the level's memory
    min_sizes_at_memory: dict[str, float] = field(default_factory=dict)


def useful_flops(flops: sympy.Expr, tile_symbols: set[sympy.Symbol]) -> sympy.Expr:
    """FLOPs without the terms that depend on tile sizes (e.g. the diagonal blocks a causal mask
    computes in full): the work H*/K should be measured against."""
    return sympy.Add(*(t for t in sympy.Add.make_args(sympy.expand(flops))
                       if not t.free_symbols & tile_symbols))


def bandwidth_limit(optimum: ClosedForm, flops: sympy.Expr, sizes: dict[sympy.Symbol, int], *,
                    tensor_rate: float, bandwidth_bytes_per_s: float, bytes_per_value: int,
                    memory_bytes: float) -> BandwidthLimit | None:
    """None when the FLOPs are not a function of the sizes alone."""
    if flops == 0 or flops.free_symbols - set(sizes) - {MEMORY}:
        return None
    ratio_target = bandwidth_bytes_per_s / bytes_per_value / tensor_rate   # Hdot / Kdot
    terms = [(sympy.cancel(t.alpha / flops), t.beta) for t in optimum.terms]
    with_m = [(c, b) for c, b in terms if b > 0]
    free = sympy.Add(*(c for c, b in terms if b == 0))

    def value(expr: sympy.Expr) -> float:
        return float(at(expr, sizes))

    min_memory = None
    if with_m:
        def excess(m: float) -> float:
            return sum(value(c) * m ** -float(b) for c, b in with_m) - ratio_target
        min_memory = _bisect_decreasing(excess)
    memory_values = memory_bytes / bytes_per_value
    ratio = sympy.Add(*(c * MEMORY ** -b for c, b in terms))
    min_sizes, at_memory = {}, {}
    for sym in sorted(free.free_symbols, key=lambda s: s.name):
        others = {s: v for s, v in sizes.items() if s != sym}
        root = _positive_root(at(free, others) - ratio_target, sym)
        if root is not None:
            min_sizes[sym.name] = root
        root = _positive_root(at(ratio, others).subs(MEMORY, memory_values) - ratio_target, sym)
        if root is not None:
            at_memory[sym.name] = root
    tiles = {s.name: float(at(v, sizes).subs(MEMORY, memory_values))
             for s, v in optimum.group_sizes.items() if v.free_symbols <= {MEMORY, *sizes}}
    return BandwidthLimit(1 / ratio_target, min_memory, min_sizes, tiles, at_memory)


def _positive_root(expr: sympy.Expr, sym: sympy.Symbol) -> float | None:
    """The largest positive root of `expr` in `sym`. The expressions here are sums of powers of the one
    size (H*/K against Hdot/Kdot): over a common denominator, a polynomial, whose roots numpy finds in
    microseconds where sympy.solve takes tens of milliseconds; anything else goes to sympy.solve."""
    try:
        poly = sympy.Poly(sympy.numer(sympy.together(expr)), sym)
        coefficients = [float(c) for c in poly.all_coeffs()]
    except (sympy.PolynomialError, TypeError, ValueError):
        poly = None
    if poly is not None and poly.degree() >= 1:
        scale = max(abs(c) for c in coefficients)
        roots = np.roots([c / scale for c in coefficients])
        real = [float(r.real) for r in roots if abs(r.imag) <= 1e-9 * max(1.0, abs(r.real)) and r.real > 0]
        return max(real) if real else None
    try:
        roots = sympy.solve(expr, sym)
    except (NotImplementedError, ValueError):
        return None
    real = [float(r) for r in roots if r.is_real and r > 0]
    return max(real) if real else None


def _bisect_decreasing(f, lo: float = 1e-12, hi: float = 1e30) -> float | None:
    """The root of a decreasing function on (lo, hi), in log space."""
    if f(lo) < 0 or f(hi) > 0:
        return None
    for _ in range(200):
        mid = (lo * hi) ** 0.5
        if f(mid) > 0:
            lo = mid
        else:
            hi = mid
        if hi / lo < 1 + 1e-12:
            break
    return (lo * hi) ** 0.5
