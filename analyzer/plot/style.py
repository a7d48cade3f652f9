"""Shared look of napkin's plots: a colour and marker per GPU, a colour per element type, labels.

Every plot builds a `matplotlib.figure.Figure` directly (never pyplot), so nothing here needs a
display and the same inputs always give the same picture. The same GPU keeps its colour and marker in
every plot; a profile file napkin does not ship gets one from its name, so it is stable too.
"""

from __future__ import annotations

import zlib
from collections.abc import Iterable, Sequence

import numpy as np
import sympy
from matplotlib.axes import Axes
from matplotlib.figure import Figure
from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter

from analyzer import hardware
from analyzer.common.units import binary, si
from analyzer.hardware import Profile

# Tableau 10, the matplotlib default cycle, written out so that no global state picks the colours.
PALETTE = ("#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd",
           "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22", "#17becf")
MARKERS = ("o", "s", "^", "D", "v", "P", "X", "*", "<", ">")

GPU_COLORS = {"h100-sxm5": "#1f77b4", "h100-pcie": "#17becf", "h200": "#9467bd",
              "a100": "#2ca02c", "t4": "#d62728"}
GPU_MARKERS = {"h100-sxm5": "o", "h100-pcie": "P", "h200": "D", "a100": "s", "t4": "^"}
DTYPE_COLORS = {"fp32": "#7f7f7f", "fp16": "#1f77b4", "bf16": "#8c564b", "fp8": "#ff7f0e"}
DTYPE_LINESTYLES = {"fp32": ":", "fp16": "-", "bf16": "-.", "fp8": "--"}

FONT_SIZE = 9


def _pick(name: str, options: Sequence[str]) -> str:
    return options[zlib.crc32(name.encode()) % len(options)]   # stable across runs, unlike hash()


def gpu_color(name: str) -> str:
    return GPU_COLORS.get(name) or _pick(name, PALETTE)


def gpu_marker(name: str) -> str:
    return GPU_MARKERS.get(name) or _pick(name, MARKERS)


def dtype_color(dtype: str) -> str:
    return DTYPE_COLORS.get(dtype) or _pick(dtype, PALETTE)


def dtype_linestyle(dtype: str) -> str:
    return DTYPE_LINESTYLES.get(dtype, "-")


def profiles(gpus: Sequence[str]) -> list[Profile]:
    """The profiles of the GPUs named (default h100), each once: h100 and h100-sxm5 are one GPU."""
    found: dict[str, Profile] = {}
    for name in gpus or ["h100"]:
        profile = hardware.load(name)
        found.setdefault(profile.name, profile)
    return list(found.values())


def new_figure(width: float, height: float) -> Figure:
    """A headless figure with constrained layout (legends outside the axes still fit)."""
    figure = Figure(figsize=(width, height), layout="constrained")
    figure.set_facecolor("white")
    return figure


def log_axes(ax: Axes, *, base: int = 10) -> None:
    """Both axes logarithmic, with a light grid."""
    ax.set_xscale("log", base=base)
    ax.set_yscale("log", base=base)
    ax.grid(True, which="major", color="#dddddd", linewidth=0.6)
    ax.tick_params(labelsize=FONT_SIZE)


def bytes_axis(axis, *, numticks: int = 9) -> None:
    """Binary tick labels (64 KiB, 1 MiB) on a base-2 log axis."""
    axis.set_major_locator(LogLocator(base=2, numticks=numticks))
    axis.set_major_formatter(FuncFormatter(lambda v, _: binary(v)))
    axis.set_minor_formatter(NullFormatter())


def si_axis(axis, unit: str = "") -> None:
    """SI tick labels (100 T, 1 P) on a base-10 log axis."""
    axis.set_major_formatter(FuncFormatter(lambda v, _: si(v, unit)))
    axis.set_minor_formatter(NullFormatter())


def plain(text: str) -> str:
    """A diagram's free text (its title, its paper reference) as matplotlib shows it literally: a `$`
    would otherwise start mathtext, which a title like `$\\frac{a}{$` makes fail to render."""
    return text.replace("$", r"\$")


def tiles_label(chosen: dict[str, int]) -> str:
    """{'g_q': 128, 's_x': 16} -> 'g_q=128, s_x=16'."""
    return ", ".join(f"{name}={value}" for name, value in chosen.items())


def power_label(beta: sympy.Expr) -> str:
    """The slope of a standard-form term alpha M^-beta (Equation 1) as mathtext: $\\propto M^{-1/2}$."""
    return rf"$\propto M^{{-{sympy.nsimplify(beta)}}}$"


def math(expr: sympy.Expr) -> str:
    """A sympy expression as matplotlib mathtext."""
    return f"${sympy.latex(expr)}$"


def spread(values: Iterable[float], gap: float) -> list[float]:
    """Move 1-D label positions apart so that neighbours are at least `gap` apart.

    Labels keep their order; each run of labels that would overlap is centred on the mean of its
    wanted positions. Use it on log10 of data values for a log axis.
    """
    values = [float(v) for v in values]
    order = sorted(range(len(values)), key=values.__getitem__)
    runs: list[list[float]] = []          # each run: the wanted positions of its labels
    starts: list[float] = []
    for i in order:
        runs.append([values[i]])
        starts.append(values[i])
        while len(runs) > 1 and starts[-2] + gap * len(runs[-2]) > starts[-1]:
            merged = runs[-2] + runs.pop()
            starts.pop()
            runs[-1] = merged
            starts[-1] = float(np.mean(merged)) - gap * (len(merged) - 1) / 2
    placed = [start + gap * k for run, start in zip(runs, starts, strict=True) for k in range(len(run))]
    out = [0.0] * len(values)
    for rank, i in enumerate(order):
        out[i] = placed[rank]
    return out


def nested_sizes(points: Sequence[tuple[float, float]], size: float, step: float = 6.0) -> list[float]:
    """Marker sizes (points) for markers drawn in this order at `points` (x, y) on log-log axes.

    Where several sit at one place (equal to three decimals of log10), each is `step` larger than the
    next one drawn there, the last keeps `size`: each shows as a rim, in its own shape and colour,
    around the next, and none hides another (GPUs that reach the same point).
    """
    keys = [(round(float(np.log10(x)), 3), round(float(np.log10(y)), 3)) for x, y in points]
    return [size + step * keys[i + 1:].count(key) for i, key in enumerate(keys)]


def footnote(figure: Figure, lines: Sequence[str]) -> None:
    """Notes under the axes (e.g. what was skipped and why)."""
    if lines:
        figure.supxlabel("\n".join(lines), fontsize=FONT_SIZE - 1, color="#555555", ha="left", x=0.01)
