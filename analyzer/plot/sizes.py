"""Predicted time against one size (napkin analyze --set q=1024..32768 --plot FILE): per GPU the
generated kernel's expected time (solid, a marker per bottleneck) and the paper's idealised bound
(dashed), log-log, so that a slope reads as the algorithm's order in that size."""

from __future__ import annotations

from matplotlib.figure import Figure
from matplotlib.lines import Line2D

from analyzer.common.errors import NapkinError
from analyzer.common.units import seconds
from analyzer.model.result import Comparison
from analyzer.plot import style

BOUND_MARKERS = {"tensor": "o", "compute": "o", "threads": "s", "sfu": "s", "loads": "^", "transfers": "^",
                 "power": "D"}


def figure(c: Comparison) -> Figure:
    if len(c.varied) != 1:
        raise NapkinError(f"--plot draws time against one size; {len(c.varied)} vary",
                          field="--plot", hint="give one --set NAME=A..B")
    axis = c.varied[0]
    fig = style.new_figure(7.0, 4.4)
    ax = fig.add_subplot()
    style.log_axes(ax, base=2)
    ax.set_yscale("log", base=10)
    bounds: set[str] = set()
    for gpu in dict.fromkeys(a.gpu.name for a in c.analyses):
        mine = [a for a in c.analyses if a.gpu.name == gpu]
        x = [a.value(axis) for a in mine]
        color = style.gpu_color(gpu)
        ax.plot(x, [a.totals.predicted_time_s for a in mine], linestyle="--", color=color, linewidth=1,
                alpha=0.7)
        timed = [(xi, a.expected) for xi, a in zip(x, mine, strict=True) if a.expected]
        if timed:
            ax.plot([xi for xi, _ in timed], [e.time_s for _, e in timed], color=color, linewidth=1.6,
                    label=gpu)
            for xi, e in timed:
                bounds.add(e.bound)
                ax.plot([xi], [e.time_s], linestyle="none", marker=BOUND_MARKERS.get(e.bound, "x"),
                        color=color, markersize=6)
    ax.set_xlabel(axis)
    ax.set_ylabel("predicted time")
    ax.yaxis.set_major_formatter(lambda v, _: seconds(v))
    ax.set_xticks(sorted({a.value(axis) for a in c.analyses}))
    ax.xaxis.set_major_formatter(lambda v, _: f"{int(v)}")
    ax.tick_params(axis="x", labelrotation=45)
    handles = ax.get_legend_handles_labels()[0]
    handles += [Line2D([], [], color="#555555", linestyle="--", label="idealised bound")]
    by_marker: dict[str, list[str]] = {}       # tensor and compute share a marker: one entry
    for b in sorted(bounds):
        by_marker.setdefault(BOUND_MARKERS.get(b, "x"), []).append(b)
    handles += [Line2D([], [], color="#555555", linestyle="none", marker=marker,
                       label=f"{' / '.join(names)}-bound") for marker, names in by_marker.items()]
    ax.legend(handles=handles, fontsize=style.FONT_SIZE, loc="upper left")
    first = c.analyses[0]
    ax.set_title(f"{first.diagram.name}: expected time of the generated kernel per {axis}",
                 fontsize=style.FONT_SIZE + 1)
    return fig
