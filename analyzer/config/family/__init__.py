"""The kernel families napkin generates, in the order napkin kernel tries them (analyzer.config.family.base).

A GPU a family prefers (the Hopper attention and contraction kernels: a Hopper GPU) gets it where it
realises the diagram;
every other case gets the portable Triton module, which realises every diagram. The CUDA kernels are
generated when asked for (--backend cuda).
"""

from __future__ import annotations

from analyzer.common.errors import NapkinError
from analyzer.config.family.base import Accuracy, Expected, Family, Launch
from analyzer.config.family.hopper_attention import HopperAttention
from analyzer.config.family.hopper_contraction import HopperContraction
from analyzer.config.family.portable import Cuda, Portable

PORTABLE = Portable()
FAMILIES: tuple[Family, ...] = (HopperAttention(), HopperContraction(), PORTABLE, Cuda())
BACKENDS = tuple(f.name for f in FAMILIES)


def family(name: str, *, field: str = "--backend") -> Family:
    """The family of napkin kernel's --backend word `name`."""
    found = next((f for f in FAMILIES if f.name == name), None)
    if found is None:
        raise NapkinError(f"{name!r}: expected {' or '.join(BACKENDS)}", field=field)
    return found


def tried(profile, backend: str | None) -> list[Family]:
    """The families napkin kernel tries, in order: the one named, or those `profile`'s GPU prefers, then
    the portable module."""
    if backend is not None:
        return [family(backend)]
    return [f for f in FAMILIES if f.preferred_on(profile)] + [PORTABLE]


__all__ = ["BACKENDS", "FAMILIES", "PORTABLE", "Accuracy", "Expected", "Family", "Launch", "family", "tried"]
