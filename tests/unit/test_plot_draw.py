"""`napkin draw`: every shipped diagram as a neural circuit diagram (analyzer/plot/draw.py).

The drawing tags its artists with gids (op:S, label:S:1:q, out:S:x, reduced:S:d, tag:Q:q, relabel:...),
so these tests read what is drawn, and where, from the Figure itself, without rendering pixels.
"""

from __future__ import annotations

import io
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from matplotlib.colors import to_hex
from matplotlib.figure import Figure

from analyzer import cli
from analyzer.common import resources
from analyzer.common.errors import NapkinError
from analyzer.common.expr import to_text
from analyzer.model.analysis import load
from analyzer.plot import roofline, transfers
from analyzer.plot.draw import LEVEL_COLORS, figure
from analyzer.plot.output import render, save

SHIPPED = sorted(resources.shipped("diagrams"))
BLACK, ORANGE = LEVEL_COLORS[0], LEVEL_COLORS[1]


def artists(fig: Figure) -> dict[str, list]:
    """gid -> the artists (texts, lines, patches) drawn with it."""
    ax = fig.axes[0]
    found: dict[str, list] = {}
    for artist in [*ax.texts, *ax.lines, *ax.patches]:
        if artist.get_gid():
            found.setdefault(artist.get_gid(), []).append(artist)
    return found


def text(found: dict[str, list], gid: str) -> str:
    (artist,) = found[gid]
    return artist.get_text()


def prefixed(found: dict[str, list], prefix: str) -> dict[str, list]:
    return {gid: a for gid, a in found.items() if gid.startswith(prefix)}


def box_x(found: dict[str, list], op: str) -> tuple[float, float]:
    (box,) = found[f"box:{op}"]
    return box.get_x(), box.get_x() + box.get_width()


def path_ys(patch) -> set[float]:
    return {round(float(y), 6) for y in patch.get_path().vertices[:, 1]}


@pytest.mark.parametrize("name", SHIPPED)
def test_every_shipped_diagram_draws_its_ops_arrays_and_levels(name):
    d = load(name)
    fig = figure(name)
    found = artists(fig)
    # one text per op, naming it and its primitive; boxes left to right in column order
    assert len(prefixed(found, "op:")) == len(d.ops)
    for op in d.ops:
        assert text(found, f"op:{op.name}") == f"{op.name} = {op.primitive.name}"
    for a, b in zip(d.ops, d.ops[1:], strict=False):
        if b.column > a.column:
            assert box_x(found, a.name)[1] < box_x(found, b.name)[0]
    # every array's wires carry exactly its axes; inputs (left) and outputs (right) show their sizes
    last = max(o.column for o in d.ops) + 1
    for array in d.arrays.values():
        labels = prefixed(found, f"label:{array.name}:")
        # (a scalar, ALiBi's slope a head, is one wire without an axis)
        assert {gid.split(":")[3] for gid in labels} == (set(array.axes) or {""}), array.name
        column = 0 if array.role == "input" else last if array.role == "output" else None
        for axis in array.axes if column is not None else ():
            size = to_text(d.size(axis))
            expected = axis if size == axis else f"{axis}: {size}"
            # an array two functions of a column take forks there: each branch is labelled alike
            assert {a.get_text() for a in found[f"label:{array.name}:{column}:{axis}"]} == {expected}
            assert to_hex(found[f"label:{array.name}:{column}:{axis}"][0].get_color()) == BLACK
    first_box = min(box_x(found, o.name)[0] for o in d.ops)
    last_box = max(box_x(found, o.name)[1] for o in d.ops)
    for gid, labels in prefixed(found, "label:").items():
        for label in labels:
            x = label.get_position()[0]
            array, column = gid.split(":")[1], int(gid.split(":")[2])
            assert (x < first_box) == (column == 0) and (x > last_box) == (column == last), gid
            assert column != last or array in d.outputs
    legend = [t.get_text() for t in fig.axes[0].get_legend().get_texts()]
    assert legend[:len(d.levels)] == list(d.levels)
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=40)
    assert buffer.getvalue().startswith(b"\x89PNG\r\n\x1a\n")


def test_attention_relabels_reduces_and_colours_like_figure_21():
    found = artists(figure("attention"))
    assert text(found, "relabel:flash:smem:group:q") == "q \u2192 g_q"
    assert text(found, "relabel:flash:smem:stream:x") == "x \u2192 s_x"
    # S = Q.K over d: its output wires are q and x; d ends in a dot inside the box
    assert sorted(gid.split(":")[2] for gid in prefixed(found, "out:S:")) == ["q", "x"]
    assert not prefixed(found, "label:S:1:d") and not prefixed(found, "out:S:d")
    (dot,) = found["reduced:S:d"]
    left, right = box_x(found, "S")
    assert left < dot.get_xdata()[0] < right
    # inside the kernel S is relabelled and orange (SMEM); Q outside it is black (GMEM)
    assert text(found, "label:S:1:q") == "q: g_q" and text(found, "label:S:1:x") == "x: s_x"
    assert to_hex(found["label:S:1:q"][0].get_color()) == ORANGE
    assert to_hex(found["label:Q:0:q"][0].get_color()) == BLACK
    # V passes by S inside the kernel: loaded there, so orange, and marked where it is loaded
    assert to_hex(found["pass:V:0:x"][0].get_edgecolor()) == ORANGE
    assert to_hex(found["wire:V:0:x"][0].get_edgecolor()) == BLACK
    assert {a.get_text() for a in found["tag:V:x"]} == {"s_x"}
    # distinct marks: a bar on the grouped wire, a double chevron on the streamed one
    (bar,), (chevron,) = found["mark:S:1:q"], found["mark:S:1:x"]
    assert bar.get_marker() == "|" and bar.get_marker() != chevron.get_marker()
    assert bar.get_xdata()[0] > found["label:S:1:q"][0].get_position()[0]   # just after its label
    assert {a.get_text() for a in found["tag:Q:q"]} == {"g_q"}
    assert {a.get_text() for a in found["tag:O:q"]} == {"g_q"}
    assert "tag:Q:d" not in found   # d is not partitioned
    # S's labels sit on the rows where its wires enter O, between the two boxes
    for axis in ("q", "x"):
        (label,) = found[f"label:S:1:{axis}"]
        (wire,) = found[f"in:O:S:{axis}"]
        x, y = label.get_position()
        assert round(y + 0.025, 6) in path_ys(wire)
        assert box_x(found, "S")[1] < x < box_x(found, "O")[0]
    # weaves pass through light, copies start dashed: Q is copied along x, K along q
    assert found["weave:S:Q:q"][0].get_alpha() < 1 and "core:S:Q:q" not in found
    assert {gid.split(":", 2)[2] for gid in prefixed(found, "copy:S:")} == {"Q:x", "K:q"}
    assert found["copy:S:Q:x"][0].get_linestyle() != "-"


def test_gqa_copies_keys_along_query_heads_and_groups_three_axes():
    found = artists(figure("gqa"))
    assert {gid.split(":", 2)[2] for gid in prefixed(found, "copy-label:S:")} == {"Q:x", "K:g", "K:q"}
    relabels = {a[0].get_text() for a in prefixed(found, "relabel:flash:").values()}
    assert relabels == {"h \u2192 g_h", "g \u2192 g_g", "q \u2192 g_q", "x \u2192 s_x"}
    assert [text(found, f"label:S:1:{a}") for a in ("h", "g", "q", "x")] == ["h: g_h", "g: g_g", "q: g_q",
                                                                                "x: s_x"]


def test_softmax_keeps_the_axis_it_acts_on_and_kernel_picks_the_relabelling():
    default = artists(figure("attention_unfused"))
    assert "core:P:S:x" in default and not prefixed(default, "reduced:P")
    assert {a.get_text() for a in default["tag:Q:q"]} == {"g_q1"}
    values = artists(figure("attention_unfused", kernel="values"))
    tags = {a.get_text() for gid, arts in prefixed(values, "tag:").items() for a in arts}
    assert tags == {"g_q3", "g_d3", "s_x3"}
    # S and P go through GMEM between kernels: black, not relabelled
    assert text(values, "label:S:1:q") == "q" and to_hex(values["label:S:1:q"][0].get_color()) == BLACK
    assert values["kernel:values"][0].get_alpha() > values["kernel:scores"][0].get_alpha()


def test_unknown_kernel_names_the_kernels():
    with pytest.raises(NapkinError, match="scores, softmax, values"):
        figure("attention_unfused", kernel="nope")


CONCAT = """\
name: concat
axes: {q: {default: 256}, x: {default: 256}, d: {default: 64}}
inputs: {Q: [q, d], K: [x, d], B: [q, x], V: [x, d]}
ops:
  - concat:
    - {name: S, primitive: dot, inputs: [Q, K], over: d, output: [q, x]}
    - {name: Bs, primitive: scale, inputs: [B], scale: 0.5, output: [q, x]}
  - {name: T, primitive: add, inputs: [S, Bs], output: [q, x]}
  - {name: O, primitive: softmax_dot, inputs: [T, V], over: x, output: [q, d]}
outputs: [O, T]
kernels:
  - {name: flash, partition: {smem: {group: {q: g_q}, stream: {x: s_x}}}}
"""


def test_concatenated_ops_share_a_column_and_a_reused_array_forks(tmp_path):
    path = tmp_path / "concat.yaml"
    path.write_text(CONCAT)
    found = artists(figure(str(path)))
    assert box_x(found, "S") == box_x(found, "Bs")
    (line,) = found["concat:0"]
    (s,), (bs,) = found["box:S"], found["box:Bs"]
    assert s.get_y() + s.get_height() < line.get_ydata()[0] < bs.get_y()
    # T is read by O and is an output: two wires leave it in the next data column
    assert len(found["label:T:2:q"]) == 2 and "pass:T:2:q" in found


def test_an_array_without_axes_is_one_dotted_item_wire(tmp_path):
    path = tmp_path / "total.yaml"
    path.write_text("name: total\naxes: {q: {default: 256}}\ninputs: {A: [q]}\n"
                    "ops: [{name: T, primitive: sum, inputs: [A], over: q, output: []}]\noutputs: [T]\n")
    found = artists(figure(str(path)))
    assert text(found, "label:T:1:") == "item" and "reduced:T:q" in found
    (wire,) = found["wire:T:1:"]
    assert wire.get_linestyle() == ":" and "label:T:1:q" not in found


def test_save_writes_png_svg_and_pdf(tmp_path):
    fig = figure("attention")
    magic = {"png": b"\x89PNG\r\n\x1a\n", "svg": b"<?xml", "pdf": b"%PDF-"}
    for ext, start in magic.items():
        out = save(fig, tmp_path / f"attention.{ext}")
        assert out.read_bytes().startswith(start), ext


# -- the command ---------------------------------------------------------------------------------

def test_cli_draw_writes_the_file(tmp_path):
    env = {k: v for k, v in os.environ.items() if k != "NAPKIN_DEBUG"}
    proc = subprocess.run([sys.executable, "-m", "analyzer", "draw", "attention", "-o", "x.svg"],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "wrote x.svg"
    assert (tmp_path / "x.svg").read_bytes().startswith(b"<?xml")


@pytest.mark.parametrize("args, fragments", [
    (["attention", "-o", "x.bmp"], ["--output 'x.bmp'", ".bmp"]),
    (["nosuchdiagram", "-o", "x.png"], ["nosuchdiagram"]),
    (["attention", "-o", "x.png", "--kernel", "nope"], ["--kernel", "'nope'", "kernels: flash"]),
])
def test_cli_draw_errors_are_one_line(tmp_path, monkeypatch, capsys, args, fragments):
    """Through cli.main, in-process: the same path as `napkin draw`, without a subprocess each."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("NAPKIN_DEBUG", raising=False)
    monkeypatch.setattr(sys, "argv", ["napkin", "draw", *args])
    with pytest.raises(SystemExit) as exit_:
        cli.main()
    out, err = capsys.readouterr()
    assert exit_.value.code == 1 and out == ""
    assert len(err.splitlines()) == 1 and err.startswith("error: ") and "Traceback" not in err
    for fragment in fragments:
        assert fragment in err
    assert not list(Path(tmp_path).iterdir())   # nothing written


@pytest.mark.parametrize("plot", ["draw", "roofline", "transfers"])
def test_a_dollar_in_the_title_is_shown_not_typeset(tmp_path, plot):
    """regression: a title such as `$\\frac{a}{$` started matplotlib's mathtext, which failed with a
    traceback; a diagram's free text is shown as written."""
    data = yaml.safe_load(resources.shipped("diagrams")["attention"].read_text())
    data.update(title=r"costs $\frac{a}{$ and $5", paper="Fig. $1")
    path = tmp_path / "dollars.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    fig = {"draw": lambda: figure(str(path)),
           "roofline": lambda: roofline.figure(str(path), ["h100"], dtype=None, sets={}),
           "transfers": lambda: transfers.figure(str(path), ["h100"], dtypes=[], sets={})}[plot]()
    assert render(fig, tmp_path / "out.png")[:8] == b"\x89PNG\r\n\x1a\n"
    shown = [t.get_text() for t in fig.findobj(lambda a: hasattr(a, "get_text"))]
    assert any(r"\$\frac{a}{\$ and \$5" in t for t in shown)
