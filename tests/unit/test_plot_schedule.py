"""`napkin plot schedule`: the Figures 34-37 picture, rendered headless and read back."""

from __future__ import annotations

import subprocess
import sys

import pytest
from matplotlib.collections import PolyCollection

from analyzer.plot.output import save
from analyzer.plot.schedule import figure


def bars(fig):
    """(lane y centre, x start, width, hatched) of every bar drawn."""
    ax = fig.axes[0]
    out = []
    for coll in ax.collections:
        if not isinstance(coll, PolyCollection):   # broken_barh draws PolyCollections
            continue
        for path in coll.get_paths():
            xs, ys = path.vertices[:, 0], path.vertices[:, 1]
            out.append(((ys.min() + ys.max()) / 2, xs.min(), xs.max() - xs.min(),
                        bool(coll.get_hatch())))
    return out


@pytest.fixture(scope="module")
def fp16_intra():
    return figure("attention", "h100", config="fa3_fp16_intra", overhead=0.66)


def test_lanes_and_title(fp16_intra):
    ax = fp16_intra.axes[0]
    assert [t.get_text() for t in ax.get_yticklabels()] == ["tensor cores", "special function unit"]
    assert "75%" in ax.get_title() and "intra-warpgroup" in ax.get_title()
    assert "clock cycles per row" in ax.get_xlabel()


def test_widths_are_the_compute_tables_clocks(fp16_intra):
    """Tensor blocks are 8 clk/row (2 d s_x / 4096 with s_x = d = 128); the softmax block is
    (s_x + 1)/16 wide and its 66% overhead follows it, hatched."""
    found = bars(fp16_intra)
    tensor = [b for b in found if b[0] > 0.5 and not b[3]]
    softmax = [b for b in found if b[0] < 0.5 and not b[3]]
    hatched = [b for b in found if b[3]]
    assert tensor and softmax and hatched
    assert all(w == pytest.approx(8.0, rel=1e-3) for _, _, w, _ in tensor)
    assert all(w == pytest.approx(129 / 16, rel=1e-3) for _, _, w, _ in softmax)
    assert all(w == pytest.approx(0.66 * 129 / 16, rel=1e-3) for _, _, w, _ in hatched)


def test_bars_on_one_lane_do_not_overlap():
    fig = figure("attention", "h100", config="napkin_hopper", overhead=0.5)
    found = bars(fig)
    for lane in {round(b[0]) for b in found}:
        spans = sorted((x, x + w) for y, x, w, _ in found if round(y) == lane)
        assert all(a1 <= b0 + 1e-6 for (_, a1), (b0, _) in zip(spans, spans[1:], strict=False))
    legend = [t.get_text() for t in fig.axes[0].get_legend().get_texts()]
    assert legend == ["warpgroup 0", "warpgroup 1", "warpgroup 2", "overhead"]


@pytest.mark.parametrize(("config", "overhead"), [(None, 0.0), ("fa3_fp8_inter", 0.66),
                                                  ("fa3_fp16_intra", 0.66), ("napkin_hopper", 0.5)])
def test_block_labels_lie_whole_inside_their_bars_in_the_window(config, overhead):
    """No label is cut: each lies inside the axes and inside the shown part of a bar on its lane.
    The FP8 window starts inside warpgroup 1's softmax of chunk 0, whose label, centred on the whole
    bar, was clipped at the axes' left edge to 'p0'; it is now centred on what the window shows."""
    fig = figure("attention", "h100", config=config, overhead=overhead)
    fig.draw_without_rendering()
    ax = fig.axes[0]
    box = ax.get_window_extent()
    shown = []   # every solid bar's part in the window, in display coordinates
    for lane, x, width, hatched in bars(fig):
        if not hatched:
            (x0, y0), (x1, y1) = ax.transData.transform([(x, lane - 0.35), (x + width, lane + 0.35)])
            shown.append((max(x0, box.x0), y0, min(x1, box.x1), y1))
    assert ax.texts
    for text in ax.texts:
        e = text.get_window_extent()
        assert box.x0 <= e.x0 and e.x1 <= box.x1, text.get_text()
        assert any(x0 <= e.x0 and e.x1 <= x1 and y0 <= e.y0 and e.y1 <= y1 for x0, y0, x1, y1 in shown), \
            text.get_text()
    if config == "fa3_fp8_inter":   # both softmax blocks the window's edges cut keep a whole label
        sfu = sorted((t.get_position()[0], t.get_text()) for t in ax.texts if t.get_text().startswith("exp"))
        assert sfu[0][1] == "exp0" and sfu[-1][1] == "exp3"


def test_no_overhead_no_hatching():
    fig = figure("attention", "h100", config="fa3_fp8_inter")
    assert not any(hatched for *_, hatched in bars(fig))


@pytest.mark.parametrize(("suffix", "magic"), [(".png", b"\x89PNG"), (".svg", b"<?xml"),
                                               (".pdf", b"%PDF")])
def test_formats(fp16_intra, tmp_path, suffix, magic):
    path = save(fp16_intra, tmp_path / f"s{suffix}")
    assert path.read_bytes().startswith(magic)


def test_cli(tmp_path):
    out = tmp_path / "s.svg"
    done = subprocess.run([sys.executable, "-m", "analyzer", "plot", "schedule", "attention",
                           "--config", "fa3_fp8_inter", "--overhead", "0.66", "-o", str(out)],
                          capture_output=True, text=True)
    assert done.returncode == 0 and out.exists() and "wrote" in done.stdout
    bad = subprocess.run([sys.executable, "-m", "analyzer", "plot", "schedule", "attention",
                          "-o", str(tmp_path / "s.gif")], capture_output=True, text=True)
    assert bad.returncode == 1 and bad.stderr.startswith("error:") and ".png" in bad.stderr
    assert len(bad.stderr.strip().splitlines()) == 1


@pytest.mark.parametrize("overhead", [0.0, 0.66])
def test_the_title_says_the_schedule_is_the_idealised_model(overhead):
    """The busy share is the paper's idealised model with an assumed overhead, not a measurement: the
    title says so (regression: it read as a prediction of its own)."""
    fig = figure("attention", "h100-calibrated", config="fa3_fp16_intra", overhead=overhead)
    second = fig.axes[0].get_title().splitlines()[1]
    assert second.startswith("the paper's idealised model (Table 3's clock cycles at the datasheet's rates), "
                             "not calibrated")
    assert ("the overhead is assumed (--overhead)" in second) == bool(overhead)
