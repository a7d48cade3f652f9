"""Roofline: arithmetic intensity against attainable throughput, with the chosen configuration's point.

A kernel that does K tensor FLOPs while moving H bytes from GMEM runs at most at
min(Kdot, (K / H) Hdot): the tensor-core peak Kdot for the element type, or the GMEM bandwidth Hdot
times the arithmetic intensity K / H (Appendix B.1 compares H*/K with Hdot/Kdot the same way). The
two meet at the ridge, intensity Kdot / Hdot; right of it a kernel can be compute bound.

Per GPU: the GMEM roof (thick), a thinner ceiling for each lower level the transfers pass through
(L2 -> SMEM, with that level's transfers as the intensity's denominator: a hierarchical roofline), the
ridge, and the algorithm at the tiles napkin analyze chooses: x = tensor FLOPs / transfer bytes at
that level, y = tensor FLOPs / predicted time (Equation 2's levels and the compute time; the predicted
time is at least every level's transfer time and the compute time, so each point lies under its roof).
The point is napkin analyze's time, not the generated kernel's: on a datasheet profile the paper's
idealised bound (datasheet rates, perfect overlap), which its label and the legend say; on a profile
that carries fitted parameters (h100-calibrated) that time with them, drawn with a heavier edge.
Kernels run one after another, so a diagram with several kernels gives one point for their sum.
GPUs whose points coincide nest their markers (each in its GPU's shape, the first drawn largest), and
ridge labels that would overlap are stacked.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from matplotlib.artist import Artist
from matplotlib.axes import Axes
from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from matplotlib.text import Annotation
from matplotlib.ticker import LogLocator
from matplotlib.transforms import Bbox

from analyzer.common.errors import NapkinError
from analyzer.common.units import si
from analyzer.diagram.compiled import Diagram
from analyzer.hardware import Profile
from analyzer.model.analysis import analyze, load, resolve_sizes
from analyzer.model.result import Analysis
from analyzer.plot import style

POINTS = 200
MANY_DECADES = 3.0  # a throughput axis spanning fewer decades labels 1, 2 and 5 of each
MARGIN = 8.0        # the intensity range extends this factor past the ridges and points
# what napkin analyze's point is: by whether the profile carries fitted parameters
POINT_LABEL = {False: "idealised bound (datasheet rates)", True: "with the profile's fitted parameters"}
POINT_WORDS = {False: "idealised", True: "fitted"}   # in the point's label
EDGE = {False: 0.9, True: 2.4}   # the point's edge width


def figure(diagram: str | Diagram, gpus: list[str], *, dtype: str | None, sets: dict[str, int]) -> Figure:
    """One roof per GPU for the element type, with its ridge and the chosen configuration's point."""
    d = load(diagram, dtype=dtype)
    rooflines: list[Roofline] = []
    lacking: list[str] = []
    for p in style.profiles(gpus):
        try:
            p.check_dtype(d.dtype)
        except NapkinError:
            lacking.append(p.name)
            continue
        rooflines.append(roofline(analyze(d, p, sets=sets), p))
    if not rooflines:
        raise NapkinError(f"none of the GPUs {', '.join(lacking)} has {d.dtype} tensor cores, so "
                          f"{d.name} has no roofline", hint="choose another --dtype or --gpu")

    fig = style.new_figure(11.0, 6.2)
    ax = fig.subplots()
    style.log_axes(ax)
    xs = [x for r in rooflines for x in (*r.ridges(), *r.intensities())]
    low, high = min(xs) / MARGIN, max(xs) * MARGIN
    peaks = [r.peak for r in rooflines]
    ax.set_xlim(low, high)
    ax.set_ylim(min(min(r.throughput for r in rooflines), min(peaks)) / 30, max(peaks) * 2.5)
    intensity = np.geomspace(low, high, POINTS)
    # GPUs whose points coincide (same tiles, both compute bound at one peak) nest their markers
    filled = style.nested_sizes([(r.intensity, r.throughput) for r in rooflines], 8)
    lower = [(x, r.throughput) for r in rooflines for x in r.intensities()[1:]]
    hollow = iter(style.nested_sizes(lower, 7))   # in the same order: GPU by GPU, level by level
    handles: list[Artist] = []
    ridges: list[Annotation] = []
    for r, size in zip(rooflines, filled, strict=True):
        ours, ridge = _draw(ax, r, intensity, size, [next(hollow) for _ in r.traffic[1:]])
        handles += ours
        ridges.append(ridge)
    _point_labels(ax, rooflines)
    style.si_axis(ax.yaxis)
    bottom, top = ax.get_ylim()
    if math.log10(top / bottom) < MANY_DECADES:     # two decade labels are too few to read a point by
        ax.yaxis.set_major_locator(LogLocator(base=10, subs=(1.0, 2.0, 5.0)))
    ax.set_xlabel(f"arithmetic intensity: tensor FLOPs per byte moved from {rooflines[0].source} "
                  "(FLOP/B)", fontsize=style.FONT_SIZE + 1)
    ax.set_ylabel(f"attainable tensor throughput ({d.dtype}, FLOP/s)", fontsize=style.FONT_SIZE + 1)
    kinds = [Line2D([], [], linestyle="none", marker="o", markerfacecolor="#444444", markeredgecolor="black",
                    markeredgewidth=EDGE[fitted], label=f"chosen tiles, {POINT_LABEL[fitted]}")
             for fitted in sorted({r.fitted for r in rooflines})]
    kinds += [Line2D([], [], linestyle="none", marker="o", markerfacecolor="white",
                     markeredgecolor="black", label="the same, over a lower level's transfers"),
             Line2D([], [], linestyle="none", marker="|", markersize=10, color="black",
                    label="ridge: peak / bandwidth (FLOP/B, written above it)")]
    ax.legend(handles=handles + kinds, loc="upper left", bbox_to_anchor=(1.01, 1.0),
              fontsize=style.FONT_SIZE - 1, frameon=False)
    sizes = ", ".join(f"{s}={v}" for s, v in resolve_sizes(d, sets)[0].items())
    fig.suptitle(f"{d.name}: roofline, {d.dtype} (Appendix B.1)\n{style.plain(d.title)}; {sizes}",
                 fontsize=style.FONT_SIZE + 2)
    if lacking:
        style.footnote(fig, [f"skipped {', '.join(lacking)}: no {d.dtype} tensor cores"])
    fig.draw_without_rendering()   # lay the figure out, to measure the ridge labels
    _lift_apart(ridges)
    return fig


@dataclass(frozen=True)
class Traffic:
    """Bytes one level receives from the level above it, and that level's bandwidth."""

    level: str
    source: str
    bandwidth_bytes_per_s: float     # Hdot of the source
    transfer_bytes: float            # at the chosen tiles, every kernel together


@dataclass(frozen=True)
class Roofline:
    """One GPU's roofs and the algorithm's point, from an Analysis."""

    gpu: str
    peak: float                      # Kdot: tensor FLOP/s for the element type
    tensor_flops: float              # K
    throughput: float                # K over the predicted time
    traffic: tuple[Traffic, ...]     # highest level (fed from GMEM) first
    tiles: tuple[str, ...]           # chosen tiles at the lowest level, one line per kernel
    bound: str
    fitted: bool = False             # the profile carries fitted parameters: the time is not the idealised bound

    @property
    def source(self) -> str:
        return self.traffic[0].source

    @property
    def bandwidth(self) -> float:
        return self.traffic[0].bandwidth_bytes_per_s

    @property
    def ridge(self) -> float:
        """Kdot / Hdot: the intensity where the bandwidth roof meets the peak."""
        return self.peak / self.bandwidth

    @property
    def intensity(self) -> float:
        """Tensor FLOPs per byte moved from the highest level (GMEM) at the chosen tiles."""
        return self.tensor_flops / self.traffic[0].transfer_bytes

    def intensities(self) -> list[float]:
        return [self.tensor_flops / t.transfer_bytes for t in self.traffic]

    def ridges(self) -> list[float]:
        return [self.peak / t.bandwidth_bytes_per_s for t in self.traffic]

    def roof(self, intensity: np.ndarray, bandwidth: float | None = None) -> np.ndarray:
        """min(Kdot, intensity x Hdot), for the highest level's bandwidth unless another is given."""
        return np.minimum(self.peak, intensity * (bandwidth or self.bandwidth))


def roofline(analysis: Analysis, profile: Profile) -> Roofline:
    """The roofline of one analysis: the levels' traffic summed over kernels (they run in turn)."""
    if not analysis.totals.tensor_flops:
        raise NapkinError(f"diagram {analysis.diagram.name} does no tensor-core FLOPs, so it has no "
                          "tensor roofline", file=analysis.diagram.source)
    kernels = analysis.kernels
    traffic = tuple(Traffic(lv.level, lv.source, lv.bandwidth_bytes_per_s,
                            sum(k.levels[i].transfers_bytes_value for k in kernels))
                    for i, lv in enumerate(kernels[0].levels))
    if len(kernels) == 1:
        tiles = (style.tiles_label(kernels[0].levels[-1].chosen),)
    else:
        tiles = tuple(f"{k.name}: {style.tiles_label(k.levels[-1].chosen)}" for k in kernels)
    return Roofline(profile.name, profile.rate("tensor", analysis.dtype), analysis.totals.tensor_flops,
                    analysis.totals.throughput_flops_per_s, traffic, tiles, analysis.totals.bound,
                    analysis.gpu.calibration is not None)


def _draw(ax: Axes, r: Roofline, intensity: np.ndarray, size: float,
          lower_sizes: list[float]) -> tuple[list[Artist], Annotation]:
    """One GPU's roofs, ridge and points (`size`, `lower_sizes`: their markers' sizes); its legend
    entries (the roof with the GPU's marker, then the lower levels' ceilings) and its ridge label."""
    color, marker = style.gpu_color(r.gpu), style.gpu_marker(r.gpu)
    top, *lower = r.traffic
    label = f"{r.gpu}: peak {si(r.peak, 'FLOP/s')}, {top.source} {si(top.bandwidth_bytes_per_s, 'B/s')}"
    ax.plot(intensity, r.roof(intensity), color=color, linewidth=2.2, gid=f"roof:{r.gpu}", label=label)
    handles: list[Artist] = [Line2D([], [], color=color, linewidth=2.2, marker=marker, markersize=7,
                                    markerfacecolor=color, markeredgecolor="black", markeredgewidth=0.9,
                                    label=label)]
    ax.plot([r.ridge], [r.peak], linestyle="none", marker="|", markersize=12, markeredgewidth=2,
            color=color, gid=f"ridge:{r.gpu}")
    ridge = ax.annotate(f"{r.ridge:.0f}", xy=(r.ridge, r.peak), xytext=(0, 7), textcoords="offset points",
                        ha="center", va="bottom", fontsize=style.FONT_SIZE - 2, color=color,
                        gid=f"ridge-label:{r.gpu}")
    for t in lower:   # thinner ceilings: the lower levels of the hierarchy
        handles += ax.plot(intensity, r.roof(intensity, t.bandwidth_bytes_per_s), color=color,
                           linewidth=0.9, linestyle=(0, (3, 2)), gid=f"ceiling:{r.gpu}:{t.level}",
                           label=f"{r.gpu}: {t.source}\u2192{t.level} {si(t.bandwidth_bytes_per_s, 'B/s')}")
    ax.plot([r.intensity], [r.throughput], linestyle="none", marker=marker, markersize=size,
            markerfacecolor=color, markeredgecolor="black", markeredgewidth=EDGE[r.fitted], zorder=5,
            gid=f"point:{r.gpu}")
    # the same point, hollow, per level
    for t, x, s in zip(lower, r.intensities()[1:], lower_sizes, strict=True):
        ax.plot([x], [r.throughput], linestyle="none", marker=marker, markersize=s,
                markerfacecolor="white", markeredgecolor=color, markeredgewidth=1.4, zorder=5,
                gid=f"point:{r.gpu}:{t.level}")
    return handles, ridge


def _lift_apart(labels: list[Annotation]) -> None:
    """Raise each ridge label a line at a time until it overlaps none drawn before it (GPUs whose
    ridges are near, or equal, on one peak). The figure must be laid out."""
    placed: list[Bbox] = []
    for label in labels:
        box = label.get_window_extent()
        while any(box.overlaps(other) for other in placed):
            x, y = label.xyann
            label.xyann = (x, y + label.get_fontsize() + 1)
            box = label.get_window_extent()
        placed.append(box)


def _point_labels(ax: Axes, rooflines: list[Roofline]) -> None:
    """Label the GMEM points with bound, throughput and tiles; GPUs whose points coincide share one.

    A point in the left half gets its label on its right; one in the right half (compute bound,
    usually) gets it centred under it. Labels too close in height are spread apart.
    """
    groups: dict[tuple, list[Roofline]] = {}
    for r in rooflines:
        key = (round(math.log10(r.intensity), 3), round(math.log10(r.throughput), 3), *r.tiles, r.bound,
               r.fitted)
        groups.setdefault(key, []).append(r)
    members = list(groups.values())
    texts = [[_head(group), *group[0].tiles] for group in members]
    low, high = (math.log10(v) for v in ax.get_xlim())
    line = 0.09   # decades of throughput per text line at this figure's size
    placed = style.spread([math.log10(g[0].throughput) for g in members],
                          line * max(len(t) for t in texts) + 0.05)
    for group, text, y_log in zip(members, texts, placed, strict=True):
        r = group[0]
        right = (math.log10(r.intensity) - low) / (high - low) < 0.5
        ax.annotate("\n".join(text), xy=(r.intensity, r.throughput),
                    xytext=(r.intensity * 1.5, 10 ** y_log) if right else
                    (r.intensity, 10 ** (y_log - 0.2)), textcoords="data",
                    ha="left" if right else "center", va="center" if right else "top",
                    fontsize=style.FONT_SIZE - 1, gid=f"label:{','.join(g.gpu for g in group)}")


def _head(group: list[Roofline]) -> str:
    """A point's first label line: its GPUs, its bound and throughput, and which model timed it."""
    r = group[0]
    return f"{', '.join(g.gpu for g in group)}: {r.bound}, {si(r.throughput, 'FLOP/s')} {POINT_WORDS[r.fitted]}"
