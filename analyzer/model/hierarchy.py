"""Several levels (Section 4, Appendix A.2): weights, effective memories, caching and cross transfers.

A two-level diagram gives H*(a, M). On a GPU, data reaches the diagram's lowest level through every
profile level in between; each level l moves H*(a, M_l) and costs 1/Hdot_l per byte, where Hdot_l is
the bandwidth of the level that feeds it. The weighted total is Equation 2:

    H* = sum_l Hdot_l^-1 H*(a, M_l) = sum_t alpha_t(a) sum_l Hdot_l^-1 M_l^-beta_t

An intermediate caching level (L2) uses the memory of the children it serves, M_l = N_c M_c
(Theorem 2). A cross-transfer level x between h and c (thread block clusters) adds a level with weight
Hdot_h->c^-1 - Hdot_x->c^-1 and memory N_c M_c, and re-weights c by Hdot_x->c^-1 (Theorem 3).
Quantization with q bytes per value scales each term by q^(1 + beta_t) (Equation 3).

Theorem 3's weights are Equation 12, the sum rearranged into the standard form; the weight of x is
negative wherever cross transfers are slower than direct ones. What each level moves, and so its time,
is Equation 11, every term a transfer that happens: x receives H*(a, N_c M_c) from h at Hdot_h->c (what
the cluster loads once for all its children), and c receives the rest of its H*(a, M_c) across the
cluster at Hdot_x->c (`received`). The two sum to the same total.
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import sympy

from analyzer.common.errors import NapkinError
from analyzer.diagram.compiled import Diagram
from analyzer.hardware import LevelProfile, Profile
from analyzer.model.optimize import StandardTerm


@dataclass(frozen=True)
class ModelLevel:
    """A level of the multi-level model, as it enters Equation 2."""

    name: str
    role: str                  # "memory", "cache" or "cross"
    drawn: bool                # drawn in the diagram; else it takes the next lower drawn relabelling
    partition_level: str       # the diagram level whose relabelling it uses
    source: str                # the level whose bandwidth feeds this one
    bandwidth_bytes_per_s: float
    weight_s_per_byte: float   # Hdot^-1 of Equation 2 (Theorem 3 for cross levels)
    memory_bytes: float        # M_l: capacity per block, or N_c M_c for cache and cross levels
    children: int | None = None   # N_c of Theorems 2 and 3

    @property
    def suffix(self) -> str | None:
        return None if self.drawn else self.name

    @property
    def feed_s_per_byte(self) -> float:
        """Seconds per byte this level receives over its feed (Equation 11's weight): the weight,
        except at a cross level, whose Theorem 3 weight w_hc - w_xc is a rearrangement, not a link."""
        return 1 / self.bandwidth_bytes_per_s


def received(levels: Sequence[ModelLevel], transfer_bytes: Mapping[str, Any]) -> dict[str, Any]:
    """Bytes each level receives over its feed, from each level's H at its tiles (Equation 11), elementwise.

    A cross level x receives from h what its cluster loads once, H*(a, N_c M_c), but never more than its
    child c needs in all (a cluster whose shared tiles move more than its members' own would load them
    directly); c receives the rest of its transfers across the cluster. Every other level receives its H.
    """
    out = dict(transfer_bytes)
    for x, child in itertools.pairwise(levels):
        if x.role == "cross" and x.name in out and child.name in out:
            direct = np.minimum(out[x.name], out[child.name])
            out[x.name], out[child.name] = direct, out[child.name] - direct
    return out


def model_levels(diagram: Diagram, profile: Profile, *, cluster: int | None = None) -> tuple[ModelLevel, ...]:
    """The levels below the diagram's top that its transfers pass through, highest first."""
    names = [lv.name for lv in profile.levels]
    for i, name in enumerate(diagram.levels):
        if name not in names:
            raise NapkinError(f"diagram level {name!r} is not a level of GPU {profile.name}",
                              file=diagram.source, field=f"levels[{i}]",
                              hint=f"{profile.name} has: {', '.join(names)}")
    order = [names.index(n) for n in diagram.levels]
    if order != sorted(order):
        raise NapkinError(f"diagram levels {list(diagram.levels)} are not ordered as in {profile.name} "
                          f"({', '.join(names)})", file=diagram.source, field="levels",
                          hint="list levels from the highest to the lowest")
    top, bottom = order[0], order[-1]
    chain = [lv for lv in profile.levels[top:bottom + 1] if lv.kind != "cross"]
    limits = _memory_limits(chain)
    levels = []
    for parent, level in zip(chain, chain[1:], strict=False):
        if parent.bandwidth_bytes_per_s is None:
            raise NapkinError(f"level {parent.name} has no bandwidth, and {level.name} is fed from it",
                              field=f"levels[{names.index(parent.name)}].bandwidth_bytes_per_s",
                              hint="the transfers it feeds cannot be timed without one")
        drawn = level.name in diagram.levels
        below = [n for n in diagram.levels if names.index(n) >= names.index(level.name)]
        children = None
        if level.kind == "cache" and level is not chain[-1]:
            child = chain[chain.index(level) + 1]
            children = child.instances // level.instances
        bw = parent.bandwidth_bytes_per_s
        levels.append(ModelLevel(level.name, level.kind, drawn, below[0], parent.name, bw, 1 / bw,
                                 limits[level.name], children))
    if cluster is not None:
        levels = _with_cross_level(levels, profile, diagram, cluster, limits)
    return tuple(levels)


def _memory_limits(chain: list[LevelProfile]) -> dict[str, float]:
    """Per-block memory of each level; a caching level uses its children's (Theorem 2)."""
    limits: dict[str, float] = {}
    for i in range(len(chain) - 1, -1, -1):
        level = chain[i]
        if level.kind == "cache" and i + 1 < len(chain):
            child = chain[i + 1]
            limits[level.name] = (child.instances // level.instances) * limits[child.name]
        else:
            limits[level.name] = level.block_capacity_bytes
    return limits


def _with_cross_level(levels: list[ModelLevel], profile: Profile, diagram: Diagram, cluster: int,
                      limits: dict[str, float]) -> list[ModelLevel]:
    """Insert a cross-transfer level x between its neighbours h and c (Theorem 3, Appendix A.2.2).

    c is the level right below x in the profile (the SMs' shared memory for thread block clusters);
    it must be one of the levels the diagram's transfers pass through.
    """
    names = [lv.name for lv in profile.levels]
    lowest = levels[-1]
    modelled = {lv.name for lv in levels}
    crosses = [i for i, lv in enumerate(profile.levels[:names.index(lowest.name)]) if lv.kind == "cross"]
    if not crosses:
        raise NapkinError(f"{profile.name} has no cross-transfer level above {lowest.name}",
                          field="--cluster",
                          hint="thread block clusters need Hopper or newer; drop --cluster")
    index = crosses[-1]
    cross = profile.levels[index]
    child_name = next(lv.name for lv in profile.levels[index + 1:] if lv.kind != "cross")
    if child_name not in modelled:
        raise NapkinError(f"clusters share {child_name}, which this diagram's transfers do not reach",
                          field="--cluster", hint=f"draw the diagram down to {child_name}")
    at = next(i for i, lv in enumerate(levels) if lv.name == child_name)
    below = levels[at]
    table = cross.bandwidth_bytes_per_s_by_cluster or {}
    if cross.cluster_size_max is not None and cluster > cross.cluster_size_max:
        raise NapkinError(f"clusters of {cluster} exceed {profile.name}'s largest, "
                          f"{cross.cluster_size_max}", field="--cluster")
    if cluster not in table:
        raise NapkinError(f"no bandwidth for clusters of {cluster} on {profile.name}", field="--cluster",
                          hint=f"measured cluster sizes: {', '.join(map(str, sorted(table)))}")
    bw_x = table[cluster]
    w_hc, w_xc = below.weight_s_per_byte, 1 / bw_x
    x_level = ModelLevel(cross.name, "cross", False, below.partition_level, below.source,
                         below.bandwidth_bytes_per_s, w_hc - w_xc, cluster * limits[below.name],
                         cluster)
    child = ModelLevel(below.name, below.role, below.drawn, below.partition_level, cross.name,
                       bw_x, w_xc, below.memory_bytes, None)
    return [*levels[:at], x_level, child, *levels[at + 1:]]


# -- symbolic forms of Equations 2 and 3 and of Appendix A.2.3 -------------------------------------------

def weighted_total(terms: tuple[StandardTerm, ...],
                   levels: list[tuple[sympy.Expr, sympy.Expr]]) -> sympy.Expr:
    """Equation 2: sum_t alpha_t sum_l w_l M_l^-beta_t, for (w_l, M_l) pairs."""
    return sympy.Add(*(t.alpha * w * m ** (-t.beta) for t in terms for w, m in levels))


def quantized(terms: tuple[StandardTerm, ...], q: sympy.Expr,
              levels: list[tuple[sympy.Expr, sympy.Expr]]) -> sympy.Expr:
    """Equation 3: transfers in bytes with q bytes per value, for byte weights and byte memories."""
    return sympy.Add(*(t.alpha * w * m ** (-t.beta) * q ** (1 + t.beta)
                       for t in terms for w, m in levels))


def cluster_gain(terms: tuple[StandardTerm, ...], w_hc: sympy.Expr, w_xc: sympy.Expr,
                 m_c: sympy.Expr, n: sympy.Expr) -> sympy.Expr:
    """Delta H*(N) of Appendix A.2.3: weighted transfers saved by clusters of N children.

    Without the cross level the child costs w_hc H*(a, M_c); with it, (w_hc - w_xc) H*(a, N M_c) +
    w_xc H*(a, M_c). Positive means clusters help.
    """
    without = weighted_total(terms, [(w_hc, m_c)])
    with_cross = weighted_total(terms, [(w_hc - w_xc, n * m_c), (w_xc, m_c)])
    return without - with_cross
