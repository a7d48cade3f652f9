"""Numbers as people read them: SI prefixes, binary sizes, seconds."""

from __future__ import annotations


def si(value: float, unit: str = "") -> str:
    """1.37e11 -> '137 G' + unit; keeps three significant digits."""
    prefixes = [(1e15, "P"), (1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k")]
    for scale, prefix in prefixes:
        if abs(value) >= scale:
            return f"{value / scale:.3g} {prefix}{unit}"
    return f"{value:.3g} {unit}".rstrip()


def binary(nbytes: float) -> str:
    for scale, name in ((2**30, "GiB"), (2**20, "MiB"), (2**10, "KiB")):
        if nbytes >= scale:
            return f"{nbytes / scale:.4g} {name}"
    return f"{nbytes:.0f} B"


def seconds(t: float) -> str:
    """`t` seconds in the unit that keeps 1 to 999 of it; a negative time (a cross level's term in
    Equation 2, Theorem 3, where its weight is negative) keeps its sign before the same unit."""
    if t < 0:
        return "-" + seconds(-t)
    for scale, name in ((1.0, "s"), (1e-3, "ms"), (1e-6, "us")):
        shown = f"{t / scale:.4g}"
        if float(shown) >= 1:           # after rounding: 0.99999 s is 1 s, not 1000 ms
            return f"{shown} {name}"
    return f"{t * 1e9:.4g} ns"
