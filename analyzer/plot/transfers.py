"""Transfers against memory: the optimum H*(a, M) of each kernel at the diagram's lowest level.

Section 4 (Equation 1): a two-level model gives the fewest transfers H*(a, M) a kernel needs when the
lower level holds M bytes per group, a sum of power functions sum_t alpha_t(a) M^-beta_t. On log-log
axes each term is a straight line of slope -beta_t; the curve follows the steepest term at small M and
flattens to the floor (beta = 0: loading the inputs and saving the outputs once) at large M. With q
bytes per value the terms scale by q^(1 + beta_t) (Equation 3), so each element type has its own curve.

Over the curves: each GPU's memory limit M_l for that level (a vertical line in the GPU's colour),
and the tiles napkin analyze chooses for each GPU and element type (a marker at their memory and
transfers, in the GPU's shape and colour, edged in the element type's colour). The chosen
tiles minimise the predicted time, not the transfers, so they need not sit at the limit; they lie on or
above the curve, which is the continuous optimum for the leading memory term.

One panel per kernel. A GPU without tensor cores for an element type (fp8 on A100) is skipped for that
type, with a note under the plot.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import sympy
from matplotlib.axes import Axes
from matplotlib.figure import Figure
from matplotlib.lines import Line2D

from analyzer.common.errors import NapkinError
from analyzer.common.expr import MEMORY, at
from analyzer.common.numpy_code import numpy_function
from analyzer.common.units import binary
from analyzer.diagram.compiled import Diagram, Kernel
from analyzer.hardware import Profile
from analyzer.model.analysis import analyze, level_models, load, resolve_sizes
from analyzer.model.hierarchy import model_levels
from analyzer.model.optimize import ClosedForm
from analyzer.model.result import LevelOut
from analyzer.plot import style

POINTS = 400       # samples of each curve
MARGIN = 8.0       # the M range extends this factor past the limits, markers and crossovers
MARKER = 9.0       # points: a chosen configuration's marker (larger where markers nest)
LIMIT_DASHES = (4, 2)   # points: dash and gap of a memory limit line


@dataclass(frozen=True)
class Panel:
    """What one kernel's panel shows, all numbers in bytes."""

    kernel: str
    level: str                                   # the diagram's lowest level
    optima: dict[str, tuple[ClosedForm, ClosedForm]]   # dtype -> H* in values and in bytes
    terms: dict[str, list[tuple[float, sympy.Expr]]]   # dtype -> (alpha in bytes, beta) of Equation 1
    sizes: dict[sympy.Symbol, int]
    limits: dict[str, float]                     # GPU -> M_l
    chosen: dict[tuple[str, str], LevelOut]      # (GPU, dtype) -> the chosen tiles at the level


def figure(diagram: str | Diagram, gpus: list[str], *, dtypes: list[str], sets: dict[str, int]) -> Figure:
    """H*(M) in bytes per element type, one panel per kernel, with limits and chosen tiles per GPU."""
    profiles = style.profiles(gpus)
    base = load(diagram)
    dtypes = list(dict.fromkeys(dtypes or [base.dtype]))
    loaded = {dt: load(base, dtype=dt) for dt in dtypes}     # the file read once, in each type
    sizes, _ = resolve_sizes(base, sets)
    level = base.levels[-1]
    limits = {p.name: model_levels(base, p)[-1].memory_bytes for p in profiles}
    analyses, skipped = {}, []
    for dt, d in loaded.items():
        lacking = [p.name for p in profiles if not _has(p, dt)]
        analyses.update({(p.name, dt): analyze(d, p, sets=sets) for p in profiles if _has(p, dt)})
        if lacking:
            skipped.append(f"skipped {', '.join(lacking)} for {dt}: no {dt} tensor cores, so no chosen tiles")

    fig = style.new_figure(10.5, 1.0 + 4.6 * len(base.kernels))
    axes = fig.subplots(len(base.kernels), 1, squeeze=False)[:, 0]
    for i, (kernel, ax) in enumerate(zip(base.kernels, axes, strict=True)):
        optima = {dt: _optimum(d, d.kernels[i], profiles[0], level) for dt, d in loaded.items()}
        panel = Panel(kernel.name, level, optima,
                      {dt: [(float(at(t.alpha, sizes)), t.beta) for t in o[1].terms]
                       for dt, o in optima.items()},
                      sizes, limits, {key: a.kernels[i].levels[-1] for key, a in analyses.items()})
        _draw(ax, panel, dtypes, [p.name for p in profiles])
    size_text = ", ".join(f"{s}={v}" for s, v in sizes.items())
    fig.suptitle(f"{base.name}: fewest transfers H*(M) into {level} (Section 4, Equation 1)\n"
                 f"{style.plain(base.title)}; {size_text}", fontsize=style.FONT_SIZE + 2)
    style.footnote(fig, skipped)
    return fig


def _has(profile: Profile, dtype: str) -> bool:
    try:
        profile.check_dtype(dtype)
    except NapkinError:
        return False
    return True


def _optimum(d: Diagram, kernel: Kernel, profile: Profile, level: str) -> tuple[ClosedForm, ClosedForm]:
    """The closed forms in values and in bytes of a kernel at the lowest level, or a NapkinError."""
    lowest = level_models(d, kernel, model_levels(d, profile))[-1]
    if lowest.optimum is None or lowest.optimum_bytes is None:
        raise NapkinError(f"diagram {d.name}: kernel {kernel.name} has no closed-form H*(M) at {level}, "
                          "so there is no transfers curve to plot", file=d.source,
                          hint="napkin analyze still picks its tiles and reports their transfers")
    return lowest.optimum, lowest.optimum_bytes


def _draw(ax: Axes, panel: Panel, dtypes: list[str], gpus: list[str]) -> None:
    style.log_axes(ax, base=2)
    # the M range: every limit and marker and every crossover between terms, with a margin
    points = [*panel.limits.values(), *(c.memory_bytes_value for c in panel.chosen.values())]
    crossings = [m for dt in dtypes for a, b in zip(panel.terms[dt], panel.terms[dt][1:], strict=False)
                 if (m := _crossing(a, b))]
    low, high = min(points + crossings) / MARGIN, max(points + crossings) * MARGIN
    memory = np.geomspace(low, high, POINTS)

    curves = {}
    for dt in dtypes:   # one curve per element type
        h_star = at(panel.optima[dt][1].h_star, panel.sizes)
        curves[dt] = np.broadcast_to(np.asarray(numpy_function([MEMORY], h_star)(memory), float),
                                     memory.shape)
        ax.plot(memory, curves[dt], color=style.dtype_color(dt), linestyle=style.dtype_linestyle(dt),
                linewidth=2, label=f"H*(M), {dt}: {style.math(standard_form(panel.optima[dt][1]))}",
                gid=f"curve:{panel.kernel}:{dt}")
    ys = [float(v) for c in curves.values() for v in (c.min(), c.max())]
    ys += [c.transfers_bytes_value for c in panel.chosen.values()]
    ax.set_xlim(low, high)
    ax.set_ylim(min(ys) / 2, max(ys) * 2)

    lowest = min(dtypes, key=lambda dt: float(curves[dt].sum()))   # slopes are labelled under it
    _slope_labels(ax, panel, lowest, memory, curves[lowest], avoid=points)
    _limits(ax, panel, gpus, memory, list(curves.values()))
    _markers(ax, panel, [(g, dt) for dt in dtypes for g in gpus if (g, dt) in panel.chosen])

    style.bytes_axis(ax.xaxis)
    style.bytes_axis(ax.yaxis)
    ax.set_xlabel(f"M: {panel.level} memory per group (bytes)", fontsize=style.FONT_SIZE + 1)
    ax.set_ylabel(f"H*(M): transfers into {panel.level} (bytes)", fontsize=style.FONT_SIZE + 1)
    ax.set_title(f"kernel {panel.kernel}", fontsize=style.FONT_SIZE + 1, loc="left")
    legend = ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=style.FONT_SIZE - 1,
                       frameon=False)
    for handle in legend.legend_handles:   # in the legend: markers unnested, limits' dashes unshared
        if isinstance(handle, Line2D):
            handle.set_markersize(MARKER)
            if handle.get_label().startswith("limit M:"):
                handle.set_linestyle((0, LIMIT_DASHES))


def standard_form(optimum: ClosedForm) -> sympy.Expr:
    """H*(a, M) as the sum of Equation 1, unevaluated so that it prints term by term."""
    return sympy.Add(*(t.alpha * MEMORY ** -t.beta for t in optimum.terms), evaluate=False)


def _crossing(a: tuple[float, sympy.Expr], b: tuple[float, sympy.Expr]) -> float | None:
    """The M where two terms alpha M^-beta are equal."""
    (alpha_a, beta_a), (alpha_b, beta_b) = a, b
    if beta_a == beta_b or alpha_a <= 0 or alpha_b <= 0:
        return None
    return (alpha_a / alpha_b) ** (1 / float(beta_a - beta_b))


def _fraction(ax: Axes, value: float, axis: str) -> float:
    """Where `value` sits along a log axis: 0 at the low end, 1 at the high end."""
    low, high = ax.get_xlim() if axis == "x" else ax.get_ylim()
    return (math.log(value) - math.log(low)) / (math.log(high) - math.log(low))


def _slope_labels(ax: Axes, panel: Panel, dtype: str, memory: np.ndarray, curve: np.ndarray, *,
                  avoid: list[float]) -> None:
    """Label each standard-form term where it leads the curve: its slope M^-beta, or the floor.

    A sloped term's label goes below-left of the curve (markers and their labels are above the
    curves), where the term leads and as far as it can (up to half a decade) from the memories in
    `avoid` (limit lines, markers). The floor (beta = 0) is the curve's asymptote as M grows: a dotted
    line, labelled under its right end, below every curve.
    """
    terms = panel.terms[dtype]
    leading = np.argmax(np.array([alpha * memory ** -float(beta) for alpha, beta in terms]), axis=0)
    obstacles = np.log10(np.array(avoid))
    box = {"boxstyle": "round,pad=0.2", "facecolor": "white", "edgecolor": "none", "alpha": 0.8}
    for t, (alpha_bytes, beta) in enumerate(terms):
        where = np.flatnonzero(leading == t)
        if not len(where):
            continue
        gid = f"slope:{panel.kernel}:{beta}"
        if beta == 0:
            alpha = next(u.alpha for u in panel.optima[dtype][0].terms if u.beta == 0)
            ax.axhline(alpha_bytes, color=style.dtype_color(dtype), linewidth=0.8, linestyle=":",
                       gid=f"floor:{panel.kernel}")
            low, high = (math.log(v) for v in ax.get_ylim())
            room = 0.07   # of the axis height under the floor, for its label
            if (math.log(alpha_bytes) - low) / (high - low) < room:
                ax.set_ylim(math.exp((math.log(alpha_bytes) - room * high) / (1 - room)), math.exp(high))
            ax.annotate(f"floor {style.math(alpha)} values = {binary(alpha_bytes)} in {dtype}",
                        xy=(1.0, alpha_bytes), xycoords=("axes fraction", "data"), xytext=(-4, -3),
                        textcoords="offset points", ha="right", va="top", fontsize=style.FONT_SIZE + 1,
                        gid=gid, bbox=box)
            continue
        trim = len(where) // 8
        inner = where[trim:len(where) - trim]
        fits = inner[inner > 0.2 * len(memory)]   # leave room for the text on the left
        inner = fits if len(fits) else inner
        distance = np.min(np.abs(np.log10(memory[inner])[:, None] - obstacles[None, :]), axis=1)
        off_middle = np.abs(np.arange(len(inner)) - len(inner) / 2) / len(inner)
        at = inner[int(np.argmax(np.minimum(distance, 0.5) - 0.05 * off_middle))]
        ax.annotate(style.power_label(beta), xy=(memory[at], curve[at]), xytext=(-5, -6),
                    textcoords="offset points", ha="right", va="top", fontsize=style.FONT_SIZE + 1,
                    gid=gid, bbox=box)


def _limits(ax: Axes, panel: Panel, gpus: list[str], memory: np.ndarray, curves: list[np.ndarray]) -> None:
    """A vertical line per GPU at its memory limit M_l, in its colour: GPUs that share a limit take
    turns along one line, dash by dash, and one label names every GPU that has it.

    Its label goes to the top or the bottom of the axes, whichever is farther from the curves and the
    markers at that memory.
    """
    by_limit: dict[float, list[str]] = {}
    for gpu in gpus:
        by_limit.setdefault(panel.limits[gpu], []).append(gpu)
    for limit, names in sorted(by_limit.items()):
        text = f"{', '.join(names)} {panel.level} {binary(limit)}"
        color = style.gpu_color(names[0]) if len(names) == 1 else "#444444"
        dash, gap = LIMIT_DASHES   # GPUs that share the limit take turns, each dash in its colour
        period = (dash + gap) * len(names)
        for i, gpu in enumerate(names):
            ax.axvline(limit, color=style.gpu_color(gpu), linewidth=1.2,
                       linestyle=((dash + gap) * i, (dash, period - dash)),
                       label=f"limit M: {gpu} {panel.level} {binary(limit)}",
                       gid=f"limit:{panel.kernel}:{gpu}")
        near = [float(np.exp(np.interp(np.log(limit), np.log(memory), np.log(c)))) for c in curves]
        near += [c.transfers_bytes_value for c in panel.chosen.values()
                 if abs(math.log(c.memory_bytes_value / limit)) < 0.7]
        taken = [_fraction(ax, y, "y") for y in near]
        at_top = 1 - max(taken) > min(taken) + 0.05   # ties go below: marker labels sit above
        ax.annotate(text, xy=(limit, 1.0 if at_top else 0.0), xycoords=("data", "axes fraction"),
                    xytext=(-3, -4 if at_top else 4), textcoords="offset points", rotation=90, ha="right",
                    va="top" if at_top else "bottom", fontsize=style.FONT_SIZE - 1, color=color)


def _markers(ax: Axes, panel: Panel, keys: list[tuple[str, str]]) -> None:
    """A marker per GPU and element type at the chosen tiles' (memory, transfers): the GPU's shape,
    filled in its colour (that of its memory limit line), edged in the element type's (its curve's);
    markers at one place nest, the first drawn largest.

    Markers at one place with the same tiles share a label; labels sit in a column right of the
    markers, spread apart vertically, with a leader line to their marker.
    """
    groups: dict[tuple, list[tuple[str, str]]] = {}
    places = [(panel.chosen[key].memory_bytes_value, panel.chosen[key].transfers_bytes_value) for key in keys]
    sizes = style.nested_sizes(places, MARKER)   # GPUs that chose the same tiles nest their markers
    for (gpu, dt), size in zip(keys, sizes, strict=True):
        c = panel.chosen[gpu, dt]
        tiles = style.tiles_label(c.chosen)
        ax.plot([c.memory_bytes_value], [c.transfers_bytes_value], linestyle="none",
                marker=style.gpu_marker(gpu), markersize=size, markerfacecolor=style.gpu_color(gpu),
                markeredgecolor=style.dtype_color(dt), markeredgewidth=2.0, zorder=5,
                label=f"chosen, {gpu} {dt}: {tiles}", gid=f"chosen:{panel.kernel}:{gpu}:{dt}")
        where = (round(math.log2(c.memory_bytes_value), 2), round(math.log2(c.transfers_bytes_value), 2))
        groups.setdefault((*where, dt, tiles), []).append((gpu, dt))
    if not groups:
        return
    firsts = [panel.chosen[members[0]] for members in groups.values()]
    # a little above their markers: a curve may be flat there
    wanted = [_fraction(ax, c.transfers_bytes_value, "y") + 0.03 for c in firsts]
    placed = style.spread(wanted, 0.05)
    column = min(max(_fraction(ax, c.memory_bytes_value, "x") for c in firsts) + 0.07, 0.6)
    for (*_, dt, tiles), members, c, y in zip(groups, groups.values(), firsts, placed, strict=True):
        ax.annotate(f"{', '.join(gpu for gpu, _ in members)} {dt}: {tiles}",
                    xy=(c.memory_bytes_value, c.transfers_bytes_value), xytext=(column, y),
                    textcoords="axes fraction", va="center", fontsize=style.FONT_SIZE - 1,
                    arrowprops={"arrowstyle": "-", "color": "#888888", "linewidth": 0.6})
