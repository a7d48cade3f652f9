"""Predicted time against one size (napkin analyze --set q=1024..32768 --plot FILE), log-log, so that a
slope reads as the algorithm's order in that size. Per GPU, in its colour:

- the generated kernel's expected time, a marker per bottleneck: solid with filled markers where a
  calibrated model timed it (fitted to measurements of that kernel, on the profile the footnote names),
  dash-dotted with hollow markers where the paper's idealised model did (nobody measured the kernel on
  that GPU);
- napkin analyze's own time beside it, thin: dashed for the idealised bound on a datasheet profile,
  dotted where the profile itself carries fitted parameters.

The legend says which is which; where calibrated and idealised GPUs are drawn together, the footnote
says to set an idealised GPU against the others' dashed bounds (like with like), not their solid lines.
"""

from __future__ import annotations

from matplotlib.figure import Figure
from matplotlib.lines import Line2D

from analyzer.common.errors import NapkinError
from analyzer.common.units import seconds
from analyzer.model.result import Analysis, Comparison
from analyzer.plot import style

BOUND_MARKERS = {"tensor": "o", "compute": "o", "threads": "s", "sfu": "s", "loads": "^", "transfers": "^",
                 "power": "D"}
# the generated kernel's expected time: by whether a calibrated model timed it
EXPECTED_STYLE = {True: "-", False: "-."}
EXPECTED_LABEL = {True: "expected, calibrated model", False: "expected, idealised model (not calibrated)"}
# napkin analyze's time beside it: by whether the profile carries fitted parameters
BESIDE_STYLE = {False: "--", True: ":"}
BESIDE_LABEL = {False: "napkin analyze: idealised bound (datasheet rates)",
                True: "napkin analyze with the profile's fitted parameters"}
GREY = "#555555"


def figure(c: Comparison) -> Figure:
    if len(c.varied) != 1:
        raise NapkinError(f"--plot draws time against one size; {len(c.varied)} vary",
                          field="--plot", hint="give one --set NAME=A..B")
    axis = c.varied[0]
    fig = style.new_figure(7.6, 5.0)
    ax = fig.add_subplot()
    style.log_axes(ax, base=2)
    ax.set_yscale("log", base=10)
    bounds: set[str] = set()
    beside: set[bool] = set()
    models: dict[str, list[str]] = {}       # GPU -> the models that timed its generated kernel
    calibrated: dict[str, set[bool]] = {}
    for gpu in dict.fromkeys(a.gpu.name for a in c.analyses):
        mine = [a for a in c.analyses if a.gpu.name == gpu]
        x = [a.value(axis) for a in mine]
        color = style.gpu_color(gpu)
        fitted = mine[0].gpu.calibration is not None
        beside.add(fitted)
        ax.plot(x, [a.totals.predicted_time_s for a in mine], linestyle=BESIDE_STYLE[fitted], color=color,
                linewidth=1, alpha=0.8, gid=f"beside:{gpu}")
        for kind in (True, False):
            timed = [(xi, a.expected) for xi, a in zip(x, mine, strict=True)
                     if a.expected and a.expected.calibrated is kind]
            if not timed:
                continue
            calibrated.setdefault(gpu, set()).add(kind)
            models.setdefault(gpu, []).extend(e.model for _, e in timed if e.model not in models.get(gpu, []))
            ax.plot([xi for xi, _ in timed], [e.time_s for _, e in timed], color=color,
                    linestyle=EXPECTED_STYLE[kind], linewidth=1.6 if kind else 1.3,
                    label=f"{gpu}: {EXPECTED_LABEL[kind]}", gid=f"expected:{gpu}:{_word(kind)}")
            for xi, e in timed:
                bounds.add(e.bound)
                ax.plot([xi], [e.time_s], linestyle="none", marker=BOUND_MARKERS.get(e.bound, "x"),
                        color=color, markerfacecolor=color if kind else "white", markeredgewidth=1.3,
                        markersize=6)
    ax.set_xlabel(axis)
    ax.set_ylabel("predicted time")
    ax.yaxis.set_major_formatter(lambda v, _: seconds(v))
    ax.set_xticks(sorted({a.value(axis) for a in c.analyses}))
    ax.xaxis.set_major_formatter(lambda v, _: f"{int(v)}")
    ax.tick_params(axis="x", labelrotation=45)
    handles = ax.get_legend_handles_labels()[0]
    handles += [Line2D([], [], color=GREY, linestyle=BESIDE_STYLE[f], linewidth=1, label=BESIDE_LABEL[f])
                for f in sorted(beside)]
    by_marker: dict[str, list[str]] = {}       # tensor and compute share a marker: one entry
    for b in sorted(bounds):
        by_marker.setdefault(BOUND_MARKERS.get(b, "x"), []).append(b)
    handles += [Line2D([], [], color=GREY, linestyle="none", marker=marker,
                       label=f"{' / '.join(names)}-bound") for marker, names in by_marker.items()]
    ax.legend(handles=handles, fontsize=style.FONT_SIZE - 1, loc="upper left")
    first = c.analyses[0]
    ax.set_title(f"{first.diagram.name}: expected time of the generated kernel per {axis}",
                 fontsize=style.FONT_SIZE + 1)
    style.footnote(fig, _notes(models, calibrated, c.analyses))
    return fig


def _word(calibrated: bool) -> str:
    return "calibrated" if calibrated else "idealised"


def _notes(models: dict[str, list[str]], calibrated: dict[str, set[bool]], analyses: list[Analysis]) -> list[str]:
    """Which model timed each GPU's kernel (where its parameters were measured), and, where calibrated
    and idealised GPUs share the plot, which curves compare like with like."""
    lines = [f"{gpu}: {'; '.join(found)}" for gpu, found in models.items()]
    idealised = [gpu for gpu, kinds in calibrated.items() if kinds == {False}]
    measured = [gpu for gpu, kinds in calibrated.items() if True in kinds]
    if idealised and measured:
        lines.append(f"{', '.join(idealised)}: no calibrated model, its expected time is fitted to no "
                     f"measurement: compare it with {', '.join(measured)}'s dashed idealised bound, not the "
                     "solid calibrated line")
    absent = dict.fromkeys(a.gpu.name for a in analyses if a.expected is None and a.gpu.name not in models)
    lines += [f"{gpu}: no generated kernel (napkin analyze's time alone)" for gpu in absent]
    return lines
