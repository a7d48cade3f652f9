"""`napkin plot schedule`: the clock-cycle overlap picture of Figures 34-37.

The SM's pipelines are lanes (tensor cores, special function unit, FMA lanes); every block of the loop
body is a bar on its lane, as wide as its clock cycles per row from the compute analysis (Table 3),
coloured by warpgroup and labelled with its stage and chunk (centred on the part of the bar the window
shows, where the label fits whole); the assumed overhead of a non-tensor block is the hatched part
after it. The x axis is the paper's ruler: clock cycles per active row (thread).
The title gives the strategy, the number of warpgroups, the overhead and the tensor cores' busy share,
and says what the picture is: the paper's idealised model (Table 3's cycles at the datasheet's rates),
with the overhead an assumption of the command's, not a measurement; no calibration enters it.
"""

from __future__ import annotations

from matplotlib.axes import Axes
from matplotlib.figure import Figure
from matplotlib.patches import Patch
from matplotlib.text import Text

from analyzer.config.configure import configure

LANE_NAMES = {"tensor": "tensor cores", "sfu": "special function unit", "vector": "FMA lanes"}
GROUP_COLORS = ("#4c72b0", "#dd8452", "#55a868", "#c44e52", "#8172b3", "#937860", "#da8bc3",
                "#8c8c8c")
SHOWN_PERIODS = 3
IDEALISED = "the paper's idealised model (Table 3's clock cycles at the datasheet's rates), not calibrated"


def figure(diagram: str, gpu: str, *, config: str | None = None, sets: dict[str, int] | None = None,
           overhead: float = 0.0, overlap: str | None = None) -> Figure:
    report = configure(diagram, gpu, config=config, sets=sets, overhead=overhead, overlap=overlap)
    o = report.overlap
    unit = report.configuration.unit
    lanes = [lane for lane in LANE_NAMES if any(b.lane == lane for b in o.blocks)]
    row = {lane: len(lanes) - 1 - i for i, lane in enumerate(lanes)}   # tensor cores on top
    # the steady state: start at the second iteration of group 0, show a few periods
    start = min((b.start for b in o.blocks if b.iteration == 1 and b.group == 0), default=0.0)
    end = start + SHOWN_PERIODS * o.period_clocks_per_row
    fig = Figure(figsize=(10, 1.2 + 0.7 * len(lanes)))
    ax = fig.add_subplot()
    labels: list[tuple[Text, float, float]] = []   # a block's label, and its bar's part in the window
    for b in o.blocks:
        if b.start + b.work + b.overhead <= start or b.start >= end:
            continue
        y = row[b.lane]
        color = GROUP_COLORS[b.group % len(GROUP_COLORS)]
        ax.broken_barh([(b.start, b.work)], (y - 0.35, 0.7), facecolors=color, edgecolors="black",
                       linewidth=0.6, label=f"{b.stage} [{unit} {b.group}, chunk {b.iteration}]")
        if b.overhead > 0:
            ax.broken_barh([(b.start + b.work, b.overhead)], (y - 0.35, 0.7), facecolors="white",
                           edgecolors=color, hatch="///", linewidth=0.6,
                           label=f"overhead [{unit} {b.group}, chunk {b.iteration}]")
        left, right = max(b.start, start), min(b.start + b.work, end)
        if right > left:
            text = ax.text((left + right) / 2, y, f"{_short(b.stage)}{b.iteration}", ha="center",
                           va="center", fontsize=7, color="white", clip_on=True,
                           gid=f"block:{b.group}:{b.iteration}:{b.stage}")
            labels.append((text, left, right))
    ax.set_xlim(start, end)
    ax.set_ylim(-0.6, len(lanes) - 0.4)
    ax.set_yticks([row[lane] for lane in lanes], [LANE_NAMES[lane] for lane in lanes])
    ax.set_xlabel("clock cycles per row (the paper's ruler: one cycle per active thread)")
    ax.grid(axis="x", linestyle=":", linewidth=0.5)
    c = report.configuration
    ax.set_title(f"{report.diagram} on {report.gpu}, {c.name}: {o.strategy}-{unit} overlap, "
                 f"N = {o.groups}, overhead {o.overhead:.0%} -> tensor cores busy "
                 f"{o.utilization:.0%} (period {o.period_clocks_per_row:.3g} clk/row)\n{IDEALISED}"
                 + ("; the overhead is assumed (--overhead)" if o.overhead else ""),
                 fontsize=9)
    handles = [Patch(facecolor=GROUP_COLORS[g % len(GROUP_COLORS)], edgecolor="black",
                     label=f"{unit} {g}") for g in range(o.groups)]
    if o.overhead > 0:
        handles.append(Patch(facecolor="white", edgecolor="black", hatch="///", label="overhead"))
    ax.legend(handles=handles, loc="upper left", bbox_to_anchor=(1.0, 1.0), fontsize=8, frameon=False)
    fig.tight_layout()
    _fit_labels(ax, labels)
    return fig


def _fit_labels(ax: Axes, labels: list[tuple[Text, float, float]]) -> None:
    """Keep a block's label only where it fits, whole, inside the part of its bar in the window (a
    bar cut by the window's edge is labelled at the middle of what is shown, or not at all)."""
    pad = 1.5 * ax.figure.dpi / 72   # 1.5 pt between a label and its bar's edges, in pixels
    for text, left, right in labels:
        (x0, _), (x1, _) = ax.transData.transform([(left, 0.0), (right, 0.0)])
        extent = text.get_window_extent()
        if extent.width + 2 * pad > x1 - x0:
            text.remove()


def _short(stage: str) -> str:
    """A block's label: the op name of a contraction, 'exp' for softmax, 'acc' for the FMA column."""
    if stage.startswith("softmax"):
        return "exp"
    if stage.startswith("accumulate"):
        return "acc"
    return stage.split(" ")[0]
