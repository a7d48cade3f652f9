"""A diagram drawn in the paper's neural-circuit style (Sections 2-3, Figures 1-21).

Left to right, data-type columns alternate with function columns (Figure 2). Each array is a bundle
of horizontal wires, one per axis, labelled with the axis and its size (Figure 1); its colour is the
memory level it sits at (Section 2.2, Figure 8: black for the top level, then orange, green, blue).
An array changes colour where a kernel loads or saves it: that is a transfer (Figure 9). Each op is a
box in its function column; concatenated ops share a column, a dashed line between them (Figure 3).
Inside a box, the axis the op acts on (`over`) ends in a dot when it is reduced; weaved axes pass
through in a lighter line, and an input copied along a weaved axis it lacks starts a dashed wire
(weaving, Figures 5-6). Arrays not used by a column pass by it (identities, Figure 4).

Each kernel is a shaded region over its function columns, headed by its name and its relabellings per
level: a bar marks a group partition a -> g_a (Section 2.3, Figures 11-12), a double chevron a stream
partition a -> s_a (Section 2.4, Figure 15). Inside the chosen kernel the wires carry the relabelled
sizes, and the same marks sit where its arrays are loaded and saved (Figures 17-18, 21).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from statistics import mean

from matplotlib.axes import Axes
from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from matplotlib.patches import Patch, PathPatch, Rectangle
from matplotlib.path import Path

from analyzer.common.errors import NapkinError
from analyzer.common.expr import to_text
from analyzer.diagram.compiled import Diagram, Kernel, Op
from analyzer.model.analysis import load
from analyzer.plot import style

# Geometry in inches: the axes are drawn at one data unit per inch, y growing downwards.
ROW = 0.26         # between the wires of one array
GAP = 0.22         # between stacked slots (boxes, passing arrays) of a function column
INPUT_GAP = 0.12   # between the inputs of one box
HEADER = 0.34      # a box's label, above its first wire
BEND = 0.5         # start of a data column, where wires move to the rows of the next column
MARGIN = 0.6       # function column: between its edge and the box (room for load/save marks)
STUB = 0.16        # where a copied axis starts, inside a box
CHAR = 0.064       # width of one label character (7.5 pt)
LINE = 0.17        # one line of a kernel's header

# Level colours, highest level first: black, orange, green, blue as in the paper, then purple.
LEVEL_COLORS = ("#1a1a1a", "#e07000", "#2a9a3c", "#1f5fbf", "#8e44ad")
BOX_EDGE = "#444444"
FONT = 7.5
ITEM = ""          # the one wire of an array without axes: a thick dotted "item" wire (Figure 5)

# A double chevron, the stream mark (a vertical bar, marker "|", is the group mark).
STREAM_MARK = Path([(-1, -1), (0, 0), (-1, 1), (0.2, -1), (1.2, 0), (0.2, 1)],
                   [Path.MOVETO, Path.LINETO, Path.LINETO, Path.MOVETO, Path.LINETO, Path.LINETO])
MARKS = {"group": "|", "stream": STREAM_MARK}
MAX_COLUMNS = 64     # a drawing wider than this is unreadable, and took 14 s to render at 300 columns


def figure(diagram: str | Diagram, *, kernel: str | None = None) -> Figure:
    """The diagram (a name, a file, or the diagram compiled) as a neural circuit diagram; `kernel`
    (default: the first) is drawn relabelled."""
    d = load(diagram)
    names = [k.name for k in d.kernels]
    if kernel is not None and kernel not in names:
        raise NapkinError(f"unknown kernel {kernel!r} in diagram {d.name!r}", field="--kernel",
                          hint=f"kernels: {', '.join(names)}")
    chosen = d.kernels[names.index(kernel) if kernel else 0]
    columns = len({op.column for op in d.ops})
    if columns > MAX_COLUMNS:
        raise NapkinError(f"diagram {d.name!r} has {columns} function columns; a drawing shows at most "
                          f"{MAX_COLUMNS}", file=d.source, field="ops",
                          hint="wider drawings are unreadable and slow to render; draw a part of it")
    return _Drawing(d, chosen).render()


@dataclass
class _Slot:
    """One thing stacked in a function column: an op's box, or an array passing by."""

    kind: str                 # "box" or "pass"
    name: str                 # the op or the array
    key: float                # mean height of what feeds it: slots are stacked in this order
    top: float = 0.0
    bottom: float = 0.0
    ports: list[tuple[str, list[float]]] = field(default_factory=list)  # (array, y per axis) entering
    stubs: list[dict[str, float]] = field(default_factory=list)         # per input: copied axis -> y
    out: list[float] = field(default_factory=list)                      # y per axis leaving


def _curve(x0: float, y0: float, x1: float, y1: float, x2: float | None = None) -> Path:
    """A wire from (x0, y0) bending to (x1, y1), then straight on to x2."""
    dx = (x1 - x0) / 2
    verts = [(x0, y0), (x0 + dx, y0), (x1 - dx, y1), (x1, y1)]
    codes = [Path.MOVETO, Path.CURVE4, Path.CURVE4, Path.CURVE4]
    if x2 is not None:
        verts.append((x2, y1))
        codes.append(Path.LINETO)
    return Path(verts, codes)


class _Drawing:
    def __init__(self, d: Diagram, chosen: Kernel) -> None:
        self.d, self.chosen = d, chosen
        self.low = d.levels[-1]                       # where kernels compute and keep their arrays
        self.wires = {name: a.axes or (ITEM,) for name, a in d.arrays.items()}   # one wire per axis
        self.ncol = max(o.column for o in d.ops) + 1
        self.cols = [[o for o in d.ops if o.column == k] for k in range(self.ncol)]
        self.span = {k.name: (min(d.op(o).column for o in k.ops), max(d.op(o).column for o in k.ops))
                     for k in d.kernels}
        self.holds = {k.name: {a for o in k.ops for a in (o, *d.op(o).inputs)} for k in d.kernels}
        part = chosen.partitions.get(self.low)
        self.relabel: dict[str, tuple[str, str]] = {}  # axis -> (size symbol, "group" or "stream")
        if part:
            self.relabel = {a: (to_text(s), "group") for a, s in part.group}
            if part.stream:
                self.relabel[part.stream[0]] = (to_text(part.stream[1]), "stream")
        self._stack()

    # -- layout ---------------------------------------------------------------------------------
    def _stack(self) -> None:
        """Stack each function column's slots, in the order of the heights of what feeds them."""
        d = self.d
        last = {a: max((o.column for o in d.ops if a in o.inputs), default=-1) for a in d.arrays}
        last.update({a: self.ncol for a in d.outputs})
        born = {a.name: 0 if a.producer is None else d.op(a.producer).column + 1 for a in d.arrays.values()}
        inputs = [a for a in d.arrays if born[a] == 0]
        feeds = {a: [float(i)] for i, a in enumerate(inputs)}   # ys of the previous column's right side
        self.sources: list[dict[str, list[float]]] = []         # per data column: where wires come from
        self.slots: list[list[_Slot]] = []
        for k, ops in enumerate(self.cols):
            slots = [_Slot("box", o.name, mean(y for a in o.inputs for y in feeds[a])) for o in ops]
            slots += [_Slot("pass", a, mean(feeds[a])) for a in d.arrays if born[a] <= k < last[a]]
            slots.sort(key=lambda s: s.key)                     # stable: ties keep the column order
            y = 0.0
            for slot in slots:
                self._fill(slot, y)
                y = slot.bottom + GAP
            self.sources.append(feeds if k else {})
            self.slots.append(slots)
            feeds = {s.name: s.out for s in slots}
        self.sources.append(feeds)
        self.bottom = max(s.bottom for col in self.slots for s in col)

    def _fill(self, slot: _Slot, top: float) -> None:
        slot.top = top
        if slot.kind == "pass":
            ys = [top + ROW * (0.6 + i) for i in range(len(self.wires[slot.name]))]
            slot.ports, slot.out, slot.bottom = [(slot.name, ys)], ys, ys[-1] + 0.3 * ROW
            return
        op = self.d.op(slot.name)
        copied = op.broadcast(self.d.axes_of())
        y = top + HEADER
        for name in dict.fromkeys(op.inputs):   # an array used twice (X * X) enters once: one wire
            slot.ports.append((name, [y + ROW * i for i in range(len(self.wires[name]))]))
            y += ROW * len(self.wires[name])
            slot.stubs.append({a: y + ROW * i for i, a in enumerate(copied.get(name, ()))})
            y += ROW * len(copied.get(name, ())) + INPUT_GAP
        first, end = top + HEADER, y - INPUT_GAP - ROW
        n = len(self.wires[op.name])
        start = first + max(0.0, (end - first) - ROW * (n - 1)) / 2
        slot.out = [start + ROW * i for i in range(n)]
        slot.bottom = max(end, slot.out[-1]) + 0.6 * ROW

    def _kernels_holding(self, array: str, first: int, last: int) -> list[Kernel]:
        """Kernels that hold `array` at the low level over function columns first..last."""
        return [k for k in self.d.kernels if array in self.holds[k.name]
                and self.span[k.name][0] <= first and last <= self.span[k.name][1]]

    def _color(self, array: str, first: int, last: int) -> str:
        held = self._kernels_holding(array, first, last)
        return self._level_color(self.low if held else self.d.arrays[array].level)

    def _level_color(self, level: str) -> str:
        return LEVEL_COLORS[self.d.levels.index(level) % len(LEVEL_COLORS)]

    def _relabelled(self, array: str, first: int, last: int) -> bool:
        return self.chosen in self._kernels_holding(array, first, last)

    def _label(self, axis: str, relabelled: bool) -> str:
        if axis == ITEM:
            return "item"
        size = self.relabel[axis][0] if relabelled and axis in self.relabel else to_text(self.d.size(axis))
        return axis if size == axis else f"{axis}: {size}"

    def _entries(self, k: int) -> list[tuple[str, list[float]]]:
        """The arrays in data column k and the rows they take there."""
        if k == self.ncol:
            return [(a, self.sources[k][a]) for a in self.d.outputs]
        return [port for slot in self.slots[k] for port in slot.ports]

    def _columns_x(self) -> None:
        """x of each data column and function column, wide enough for their labels."""
        self.xd, self.xf, self.box_w, self.label_x = [], [], [], []
        x = 0.0
        for k in range(self.ncol + 1):
            entries = self._entries(k)
            rel = [self._relabelled(a, k - 1, k) for a, _ in entries]
            names = max(len(a) for a, _ in entries)
            labels = max(len(self._label(ax, r)) for (a, _), r in zip(entries, rel, strict=True)
                         for ax in self.wires[a])
            self.xd.append(x)
            self.label_x.append(x + (BEND if k else 0.0) + 0.12 + CHAR * 1.2 * names)
            x = self.label_x[-1] + 0.08 + CHAR * labels + 0.35
            if k < self.ncol:
                width = max(1.1, max(CHAR * len(self._title(o)) + 0.3 for o in self.cols[k]))
                self.xf.append(x)
                self.box_w.append(width)
                x += width + 2 * MARGIN
        self.right = x

    @staticmethod
    def _title(op: Op) -> str:
        return f"{op.name} = {op.primitive.name}"

    # -- drawing --------------------------------------------------------------------------------
    def render(self) -> Figure:
        self._columns_x()
        lines = max(1 + sum(len(p.group) + bool(p.stream) for p in k.partitions.values())
                    for k in self.d.kernels)
        self.region_top = -(0.2 + LINE * lines)          # kernel regions, with room for their headers
        top = self.region_top - 0.4
        width, height = self.right + 0.2, self.bottom - top + 0.2
        fig = Figure(figsize=(width, height))
        fig.set_facecolor("white")
        ax = fig.add_axes((0, 0, 1, 1))
        ax.set_xlim(-0.1, self.right + 0.1)
        ax.set_ylim(self.bottom + 0.3, top - 0.1)   # y grows downwards
        ax.set_axis_off()
        title = f"{self.d.name}: {style.plain(self.d.title)}" if self.d.title else self.d.name
        ax.text(0, top + 0.05, title + (f"  [{style.plain(self.d.paper)}]" if self.d.paper else ""), fontsize=9.5,
                va="top", ha="left", weight="bold", gid="title")
        for kernel in self.d.kernels:
            self._kernel(ax, kernel)
        for k in range(self.ncol + 1):
            self._data_column(ax, k)
        for k, slots in enumerate(self.slots):
            self._function_column(ax, k, slots)
        self._legend(ax)
        return fig

    def _kernel(self, ax: Axes, kernel: Kernel) -> None:
        first, last = self.span[kernel.name]
        x0, x1 = self.xf[first], self.xf[last] + self.box_w[last] + 2 * MARGIN
        held = [s for k in range(first, last + 1) for s in self.slots[k]   # its boxes and arrays
                if s.name in (kernel.ops if s.kind == "box" else self.holds[kernel.name])]
        y0 = self.region_top
        y1 = max(s.bottom for s in held) + 0.12
        ours = kernel is self.chosen
        color = self._level_color(self.low)
        ax.add_patch(Rectangle((x0, y0), x1 - x0, y1 - y0, facecolor=color if ours else "#888888",
                               alpha=0.09 if ours else 0.06, edgecolor="none", zorder=0,
                               gid=f"kernel:{kernel.name}"))
        ax.add_patch(Rectangle((x0, y0), x1 - x0, y1 - y0, fill=False, zorder=0.5, linewidth=0.9,
                               edgecolor=color if ours else "#999999", linestyle="-" if ours else "--"))
        y = y0 + 0.08
        ax.text(x0 + 0.08, y, kernel.name, fontsize=8.5, weight="bold", va="top", ha="left",
                gid=f"kernel-name:{kernel.name}")
        for level in self.d.levels[1:]:
            part = kernel.partitions.get(level)
            if part is None:
                continue
            items = [(a, s, "group") for a, s in part.group]
            items += [(part.stream[0], part.stream[1], "stream")] if part.stream else []
            for axis, sym, kind in items:
                y += LINE
                c = self._level_color(level)
                self._mark(ax, x0 + 0.16, y + 0.07, kind, c)
                where = f" ({level})" if len(kernel.partitions) > 1 else ""
                ax.text(x0 + 0.3, y, f"{axis} \u2192 {to_text(sym)}{where}", fontsize=FONT, color=c,
                        va="top", ha="left", gid=f"relabel:{kernel.name}:{level}:{kind}:{axis}")

    @staticmethod
    def _mark(ax: Axes, x: float, y: float, kind: str, color: str, gid: str | None = None) -> None:
        ax.add_line(Line2D([x], [y], marker=MARKS[kind], markersize=7 if kind == "group" else 6,
                           markeredgewidth=1.4, markerfacecolor="none", color=color, zorder=6, gid=gid))

    @staticmethod
    def _wire(ax: Axes, path: Path, color: str, gid: str, axis: str) -> None:
        style = {"linewidth": 2.6, "linestyle": ":"} if axis == ITEM else {"linewidth": 1.5}
        ax.add_patch(PathPatch(path, fill=False, edgecolor=color, zorder=2, gid=gid,
                               capstyle="butt", **style))

    def _data_column(self, ax: Axes, k: int) -> None:
        """Wires from the previous function column to this column's rows, each labelled."""
        end = self.xf[k] if k < self.ncol else self.right - 0.1
        lx = self.label_x[k]
        for array, ys in self._entries(k):
            color = self._color(array, k - 1, k)
            relabelled = self._relabelled(array, k - 1, k)
            src = self.sources[k].get(array, ys)
            for axis, y0, y1 in zip(self.wires[array], src, ys, strict=True):
                self._wire(ax, _curve(self.xd[k], y0, self.xd[k] + (BEND if k else 0.0), y1, end), color,
                           f"wire:{array}:{k}:{axis}", axis)
                label = self._label(axis, relabelled)
                ax.text(lx + 0.08, y1 - 0.025, label, fontsize=FONT, color=color, va="bottom", ha="left",
                        gid=f"label:{array}:{k}:{axis}")
                if relabelled and axis in self.relabel:   # the mark just after the label
                    self._mark(ax, lx + 0.16 + CHAR * len(label), y1, self.relabel[axis][1], color,
                               gid=f"mark:{array}:{k}:{axis}")
            ax.add_line(Line2D([lx - 0.06] * 2, [ys[0] - 0.07, ys[-1] + 0.07], color=color, linewidth=1.0,
                               zorder=3))
            n = len(ys)   # the name sits between two wires (above a lone one)
            y = ys[0] - ROW / 2 if n == 1 else (ys[n // 2 - 1] + ys[n // 2]) / 2
            ax.text(lx - 0.1, y, array, fontsize=8.5, weight="bold", color=color, va="center",
                    ha="right", gid=f"array:{array}:{k}")

    def _function_column(self, ax: Axes, k: int, slots: list[_Slot]) -> None:
        x0, x1 = self.xf[k], self.xf[k] + self.box_w[k] + 2 * MARGIN
        prev: _Slot | None = None
        for slot in slots:
            if slot.kind == "pass":
                array, ys = slot.ports[0]
                color = self._color(array, k, k)
                for axis, y in zip(self.wires[array], ys, strict=True):
                    self._wire(ax, Path([(x0, y), (x1, y)]), color, f"pass:{array}:{k}:{axis}", axis)
                if self._relabelled(array, k, k):
                    self._tags(ax, array, ys, x0, entering=True, skip=self._relabelled(array, k - 1, k))
                    self._tags(ax, array, ys, x1, entering=False,
                               skip=self._relabelled(array, k, k + 1))
            else:
                if prev is not None and prev.kind == "box":   # concatenated functions (Figure 3)
                    y = (prev.bottom + slot.top) / 2
                    ax.add_line(Line2D([x0 + MARGIN, x1 - MARGIN], [y, y], color=BOX_EDGE, linewidth=0.8,
                                       linestyle=(0, (4, 3)), zorder=3, gid=f"concat:{k}"))
                self._box(ax, k, slot)
            prev = slot

    def _tags(self, ax: Axes, array: str, ys: list[float], x: float, *, entering: bool,
              skip: bool = False) -> None:
        """Marks and relabelled sizes where the chosen kernel loads (or saves) an array."""
        if skip:
            return
        color = self._level_color(self.low)
        for axis, y in zip(self.wires[array], ys, strict=True):
            if axis not in self.relabel:
                continue
            sym, kind = self.relabel[axis]
            mx = x + 0.13 if entering else x - 0.13
            self._mark(ax, mx, y, kind, color)
            ax.text(mx + (0.1 if entering else -0.1), y - 0.03, sym, fontsize=6.5, color=color,
                    va="bottom", ha="left" if entering else "right", gid=f"tag:{array}:{axis}")

    def _box(self, ax: Axes, k: int, slot: _Slot) -> None:
        op = self.d.op(slot.name)
        ours = op.name in self.chosen.ops
        color = self._level_color(self.low)
        bx0 = self.xf[k] + MARGIN
        bx1 = bx0 + self.box_w[k]
        # margins: input wires from the column's edge to the box, the output from the box onwards
        for name, ys in slot.ports:
            for axis, y in zip(self.wires[name], ys, strict=True):
                self._wire(ax, Path([(self.xf[k], y), (bx0, y)]), color, f"in:{op.name}:{name}:{axis}", axis)
            if ours and not self._relabelled(name, k - 1, k):
                self._tags(ax, name, ys, self.xf[k], entering=True)
        for axis, y in zip(self.wires[op.name], slot.out, strict=True):
            self._wire(ax, Path([(bx1, y), (bx1 + MARGIN, y)]), color, f"out:{op.name}:{axis}", axis)
        if ours:
            self._tags(ax, op.name, slot.out, bx1 + MARGIN, entering=False,
                       skip=self._relabelled(op.name, k, k + 1))
        ax.add_patch(Rectangle((bx0, slot.top + 0.04), bx1 - bx0, slot.bottom - slot.top - 0.04,
                               facecolor="white", edgecolor=BOX_EDGE, linewidth=1.1, zorder=3,
                               gid=f"box:{op.name}"))
        ax.text((bx0 + bx1) / 2, slot.top + 0.1, self._title(op), fontsize=8, va="top", ha="center",
                zorder=7, gid=f"op:{op.name}")
        self._inside(ax, op, slot, bx0, bx1, color)

    def _inside(self, ax: Axes, op: Op, slot: _Slot, bx0: float, bx1: float, color: str) -> None:
        """Weaved axes pass through (light), copies start dashed, the reduced axis ends in a dot."""
        over = op.applied.over
        for axis, y_out in zip(self.wires[op.name], slot.out, strict=True):
            for (name, ys), stubs in zip(slot.ports, slot.stubs, strict=True):
                axes = self.wires[name]
                if axis in axes:
                    woven = axis in op.weave
                    self._inner(ax, _curve(bx0, ys[axes.index(axis)], bx1, y_out), color,
                                f"{'weave' if woven else 'core'}:{op.name}:{name}:{axis}",
                                alpha=0.45 if woven else 1.0, linewidth=1.1 if woven else 1.5)
                elif axis in stubs:
                    y = stubs[axis]
                    self._inner(ax, _curve(bx0 + STUB, y, bx1, y_out), color, f"copy:{op.name}:{name}:{axis}",
                                linestyle=(0, (3, 2)), alpha=0.8, linewidth=1.1)
                    ax.add_line(Line2D([bx0 + STUB], [y], marker="o", markersize=3.5, markerfacecolor="white",
                                       color=color, zorder=5))
                    ax.text(bx0 + STUB - 0.05, y, axis, fontsize=6.5, color=color, va="center", ha="right",
                            style="italic", zorder=5, gid=f"copy-label:{op.name}:{name}:{axis}")
        if over is not None and over not in op.applied.output:
            reduced = [(name, ys[self.wires[name].index(over)]) for name, ys in slot.ports if over in self.wires[name]]
            xc, yc = (bx0 + bx1) / 2, mean(y for _, y in reduced)
            for name, y in reduced:
                self._inner(ax, _curve(bx0, y, xc, yc), color, f"reduce:{op.name}:{name}:{over}",
                            linewidth=1.5)
            for name, ys in slot.ports:     # a softmax's sink joins its sum: dotted into the reduction
                if name == op.sink:
                    self._inner(ax, _curve(bx0, ys[0], xc, yc), color, f"sink:{op.name}:{name}",
                                linestyle=(0, (1, 1.5)), linewidth=1.3)
            ax.add_line(Line2D([xc], [yc], marker="o", markersize=5, color=color, zorder=6,
                               gid=f"reduced:{op.name}:{over}"))

    @staticmethod
    def _inner(ax: Axes, path: Path, color: str, gid: str, **style) -> None:
        ax.add_patch(PathPatch(path, fill=False, edgecolor=color, zorder=4, gid=gid, **style))

    def _legend(self, ax: Axes) -> None:
        level = self._level_color(self.low)
        handles = [Line2D([], [], color=self._level_color(lv), linewidth=2.2, label=lv)
                   for lv in self.d.levels]
        handles += [
            Line2D([], [], color=level, marker="|", markersize=8, markeredgewidth=1.4, linewidth=1.2,
                   label="group partition a \u2192 g_a"),
            Line2D([], [], color=level, marker=STREAM_MARK, markersize=6, markeredgewidth=1.4,
                   markerfacecolor="none", linewidth=1.2, label="stream partition a \u2192 s_a"),
            Line2D([], [], color=level, alpha=0.45, linewidth=1.1, label="weave: op mapped over the axis"),
            Line2D([], [], color=level, linestyle=(0, (3, 2)), marker="o", markersize=3.5,
                   markerfacecolor="white", linewidth=1.1, label="copy along a weaved axis"),
            Line2D([], [], color=level, marker="o", markersize=5, linewidth=1.5,
                   label="axis reduced (over)"),
            Patch(facecolor=level, alpha=0.15, edgecolor=level,
                  label=f"kernel; wires relabelled in {self.chosen.name}"),
        ]
        ax.legend(handles=handles, loc="upper left", bbox_to_anchor=(0.0, 0.0), ncol=min(4, len(handles)),
                  fontsize=FONT, frameon=False, handlelength=2.4, columnspacing=1.4)
