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
    for scale, name in ((1.0, "s"), (1e-3, "ms"), (1e-6, "us")):
        if t >= scale:
            return f"{t / scale:.4g} {name}"
    return f"{t * 1e9:.4g} ns"
