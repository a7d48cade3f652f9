"""Shared test helpers: shipped diagrams and profiles, and napkin's symbols."""

from __future__ import annotations

import sympy

from analyzer import hardware
from analyzer.common.expr import MEMORY, symbol
from analyzer.model.analysis import level_models, load
from analyzer.model.cost import level_cost
from analyzer.model.fusion import schedule
from analyzer.model.hierarchy import model_levels


def S(names: str):
    """Symbols as napkin makes them: S('q x d') -> (q, x, d)."""
    out = tuple(symbol(n) for n in names.split())
    return out if len(out) > 1 else out[0]


M = MEMORY


def cost_of(diagram: str, kernel: int = 0, level: str = "smem", **load_options):
    d = load(diagram, **load_options)
    return level_cost(schedule(d, d.kernels[kernel], level))


def models_of(diagram: str, gpu: str = "h100", *, profile=None, cluster=None, kernel: int = 0,
              **load_options):
    d = load(diagram, **load_options)
    p = profile or hardware.load(gpu)
    return level_models(d, d.kernels[kernel], model_levels(d, p, cluster=cluster))


def same(a, b) -> bool:
    return sympy.simplify(sympy.expand(a - b)) == 0
