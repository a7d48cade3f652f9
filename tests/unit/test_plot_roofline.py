"""`napkin plot roofline`: roofs min(peak, intensity x bandwidth) per GPU, ridges, and the chosen point.

Roofs come from the profiles (tensor peak for the dtype, GMEM bandwidth), points from `analyze`: the
level fed from GMEM gives the bytes of the intensity, the predicted time the throughput.
"""

from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import pytest
from typer.testing import CliRunner

import analyzer.plot.roofline as roofline
from analyzer import hardware
from analyzer.cli import app
from analyzer.common.errors import NapkinError
from analyzer.model.analysis import analyze
from analyzer.plot.output import save

GPUS = ("h100-sxm5", "a100", "t4")
MAGIC = {".png": b"\x89PNG\r\n\x1a\n", ".svg": b"<?xml", ".pdf": b"%PDF-"}


@pytest.fixture(scope="module")
def fig():
    return roofline.figure("attention", list(GPUS), dtype=None, sets={})


@pytest.fixture(scope="module")
def analyses():
    return {gpu: analyze("attention", gpu) for gpu in GPUS}


def artists(fig) -> dict[str, object]:
    (ax,) = fig.axes
    return {a.get_gid(): a for a in [*ax.lines, *ax.texts] if a.get_gid()}


def peak_and_gmem(gpu: str, dtype: str = "fp16") -> tuple[float, float]:
    profile = hardware.load(gpu)
    return profile.rate("tensor", dtype), profile.levels[0].bandwidth_bytes_per_s


def test_axes_are_log_log_with_labels(fig):
    (ax,) = fig.axes
    assert ax.get_xscale() == "log" and ax.get_yscale() == "log"
    assert "intensity" in ax.get_xlabel() and "FLOP/B" in ax.get_xlabel() and "gmem" in ax.get_xlabel()
    assert "FLOP/s" in ax.get_ylabel()
    assert "attention" in fig.get_suptitle() and "q=16384" in fig.get_suptitle()
    assert fig.get_supxlabel() == ""   # nothing skipped


def test_one_roof_per_gpu_at_min_of_peak_and_bandwidth(fig):
    found = artists(fig)
    assert sorted(g for g in found if g.startswith("roof:")) == sorted(f"roof:{g}" for g in GPUS)
    for gpu in GPUS:
        peak, bandwidth = peak_and_gmem(gpu)
        roof = found[f"roof:{gpu}"]
        x, y = np.asarray(roof.get_xdata()), np.asarray(roof.get_ydata())
        np.testing.assert_allclose(y, np.minimum(peak, x * bandwidth), rtol=1e-12)
        assert x.min() < peak / bandwidth < x.max()   # the range shows both sides of the ridge
        assert gpu in roof.get_label()


def test_ridge_at_peak_over_bandwidth(fig):
    found = artists(fig)
    for gpu in GPUS:
        peak, bandwidth = peak_and_gmem(gpu)
        ridge = found[f"ridge:{gpu}"]
        assert ridge.get_xdata()[0] == pytest.approx(peak / bandwidth, rel=1e-12)
        assert ridge.get_ydata()[0] == pytest.approx(peak, rel=1e-12)


def test_algorithm_point_from_analyze_lies_under_its_roof(fig, analyses):
    found = artists(fig)
    for gpu, a in analyses.items():
        peak, bandwidth = peak_and_gmem(gpu)
        (from_gmem,) = [lv for lv in a.kernels[0].levels if lv.source == "gmem"]
        point = found[f"point:{gpu}"]
        (x,), (y,) = point.get_xdata(), point.get_ydata()
        assert x == pytest.approx(a.totals.tensor_flops / from_gmem.transfers_bytes_value, rel=1e-12)
        assert y == pytest.approx(a.totals.throughput_flops_per_s, rel=1e-12)
        assert y <= min(peak, x * bandwidth) * (1 + 1e-12)


def test_lower_level_ceiling_and_point(fig, analyses):
    """The l2 -> smem traffic gets a thinner ceiling at l2's bandwidth and a hollow point under it."""
    found = artists(fig)
    for gpu, a in analyses.items():
        smem = a.kernels[0].levels[-1]
        assert smem.source == "l2"
        peak, _ = peak_and_gmem(gpu)
        ceiling = found[f"ceiling:{gpu}:smem"]
        x = np.asarray(ceiling.get_xdata())
        np.testing.assert_allclose(ceiling.get_ydata(), np.minimum(peak, x * smem.bandwidth_bytes_per_s))
        point = found[f"point:{gpu}:smem"]
        (px,), (py,) = point.get_xdata(), point.get_ydata()
        assert px == pytest.approx(a.totals.tensor_flops / smem.transfers_bytes_value)
        assert py <= min(peak, px * smem.bandwidth_bytes_per_s) * (1 + 1e-12)


def test_point_labels_name_tiles_and_bound(fig, analyses):
    found = artists(fig)
    for gpu, a in analyses.items():
        tiles = ", ".join(f"{k}={v}" for k, v in a.kernels[0].levels[-1].chosen.items())
        text = found[f"label:{gpu}"].get_text()
        assert tiles in text and a.totals.bound in text and gpu in text


def test_gpus_with_the_same_point_share_one_label():
    fig = roofline.figure("attention", ["h100", "h200"], dtype=None, sets={})
    found = artists(fig)
    assert "label:h100-sxm5,h200" in found
    assert found["label:h100-sxm5,h200"].get_text().startswith("h100-sxm5, h200: ")


def visible_y_tick_labels(ax):
    low, high = ax.get_ylim()
    return [t for minor in (False, True) for t in ax.get_yticklabels(minor=minor)
            if t.get_visible() and t.get_text() and low <= t.get_position()[1] <= high]


@pytest.mark.parametrize("gpus", [["h100", "h200"], ["h100", "a100", "t4", "h200"]])
def test_y_tick_labels_do_not_overlap(gpus):
    """Enough labels to read a point by (regression: H100 beside H200 spans under two decades, and only
    100 T and 1 P were labelled), each once, and no two labels touch."""
    fig = roofline.figure("attention", gpus, dtype=None, sets={})
    fig.canvas.draw()
    labels = visible_y_tick_labels(fig.axes[0])
    texts = [t.get_text() for t in labels]
    assert len(texts) >= 3 and len(set(texts)) == len(texts), texts
    boxes = [t.get_window_extent() for t in labels]
    assert not any(a.overlaps(b) for i, a in enumerate(boxes) for b in boxes[i + 1:]), texts


@pytest.mark.parametrize("gpus", [["h100", "h200"], ["h100", "h100-calibrated", "h200"]])
def test_coincident_points_of_different_gpus_stay_distinguishable(gpus):
    """H100 and H200 choose the same tiles and are both compute bound at one peak, so their points
    (and their hollow SMEM points) fall on one place. Each GPU keeps its marker shape and colour, and
    at a shared place the marker drawn first is the larger, so it shows as a rim around the next; the
    legend shows each GPU's shape on its roof."""
    fig = roofline.figure("attention", gpus, dtype="fp8", sets={})
    ax = fig.axes[0]
    points = [line for line in ax.lines if (line.get_gid() or "").startswith("point:")]
    shared = 0
    for i, a in enumerate(points):
        for b in points[i + 1:]:   # a is drawn before b (same zorder)
            if np.allclose([a.get_xdata()[0], a.get_ydata()[0]], [b.get_xdata()[0], b.get_ydata()[0]],
                           rtol=1e-9):
                shared += 1
                assert a.get_zorder() == b.get_zorder()
                look = [(m.get_marker(), m.get_markerfacecolor(), m.get_markeredgecolor()) for m in (a, b)]
                assert look[0] != look[1]
                assert a.get_markersize() >= b.get_markersize() + 4, (a.get_gid(), b.get_gid())
    assert shared >= 2   # the GMEM points and the SMEM points
    handles = {h.get_label(): h for h in ax.get_legend().legend_handles}
    for gpu in {p.get_gid().split(":")[1] for p in points}:
        (roof,) = [h for label, h in handles.items() if label.startswith(f"{gpu}: peak")]
        assert roof.get_marker() == artists(fig)[f"point:{gpu}"].get_marker()


def test_ridge_labels_do_not_overlap():
    """Ridges near or equal on one peak (a profile and its calibrated copy share theirs): the labels
    are lifted apart, none overlaps another."""
    fig = roofline.figure("attention", ["h100", "h100-calibrated", "h200"], dtype="fp8", sets={})
    fig.canvas.draw()
    labels = [t for t in fig.axes[0].texts if t.get_text().isdigit()]   # peak / bandwidth in FLOP/B
    assert [t.get_text() for t in labels] == ["591", "591", "412"]
    boxes = [t.get_window_extent() for t in labels]
    assert not any(a.overlaps(b) for i, a in enumerate(boxes) for b in boxes[i + 1:])


def test_dtype_picks_the_peak_and_skips_gpus_without_it():
    fig = roofline.figure("attention", ["h100", "a100"], dtype="fp8", sets={})
    found = artists(fig)
    peak, _ = peak_and_gmem("h100-sxm5", "fp8")
    assert found["ridge:h100-sxm5"].get_ydata()[0] == pytest.approx(peak)
    assert "roof:a100" not in found
    assert "a100" in fig.get_supxlabel() and "fp8" in fig.get_supxlabel()


def test_no_gpu_with_the_dtype_is_a_napkin_error():
    with pytest.raises(NapkinError, match="fp8"):
        roofline.figure("attention", ["a100"], dtype="fp8", sets={})


def test_several_kernels_add_up():
    a = analyze("attention_unfused", "h100", sets={"q": 1024, "x": 1024})
    fig = roofline.figure("attention_unfused", ["h100"], dtype=None, sets={"q": 1024, "x": 1024})
    point = artists(fig)["point:h100-sxm5"]
    moved = sum(lv.transfers_bytes_value for k in a.kernels for lv in k.levels if lv.source == "gmem")
    assert point.get_xdata()[0] == pytest.approx(a.totals.tensor_flops / moved)
    text = artists(fig)["label:h100-sxm5"].get_text()
    assert all(f"{k.name}: " in text for k in a.kernels)


@pytest.mark.parametrize("ext", [".png", ".svg", ".pdf"])
def test_saves_headless_in_each_format(fig, tmp_path, ext):
    path = save(fig, tmp_path / f"roofline{ext}")
    assert path.read_bytes().startswith(MAGIC[ext])


def test_cli_writes_the_plot(tmp_path):
    out = tmp_path / "r.svg"
    result = CliRunner().invoke(app, ["plot", "roofline", "attention", "--gpu", "h100", "-o", str(out)])
    assert result.exit_code == 0, result.output
    assert result.output.strip() == f"wrote {out}"
    assert out.read_bytes().startswith(MAGIC[".svg"])


def test_cli_bad_extension_is_one_error_line(tmp_path):
    env = {k: v for k, v in os.environ.items() if k != "NAPKIN_DEBUG"}
    proc = subprocess.run([sys.executable, "-m", "analyzer", "plot", "roofline", "attention",
                           "-o", "x.txt"], cwd=tmp_path, env=env, capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 1
    assert proc.stderr.count("\n") == 1 and proc.stderr.startswith("error: ")
    assert "x.txt" in proc.stderr


def test_points_say_they_are_the_idealised_bound_or_the_fitted_model():
    """napkin analyze's point is the paper's idealised bound on a datasheet profile and its time with
    fitted parameters on a calibrated one: the point's label, its edge and the legend tell them apart
    (regression: both were 'chosen tiles', unmarked)."""
    fig = roofline.figure("attention", ["h100", "h100-calibrated"], dtype=None, sets={})
    found = artists(fig)
    assert found["label:h100-sxm5"].get_text().splitlines()[0].endswith(" idealised")
    assert found["label:h100-calibrated"].get_text().splitlines()[0].endswith(" fitted")
    idealised, fitted = found["point:h100-sxm5"], found["point:h100-calibrated"]
    assert fitted.get_markeredgewidth() > idealised.get_markeredgewidth()
    handles = {h.get_label(): h for h in fig.axes[0].get_legend().legend_handles}
    assert handles["chosen tiles, idealised bound (datasheet rates)"].get_markeredgewidth() == \
        idealised.get_markeredgewidth()
    assert handles["chosen tiles, with the profile's fitted parameters"].get_markeredgewidth() == \
        fitted.get_markeredgewidth()


def test_datasheet_profiles_alone_name_only_the_idealised_bound(fig):
    labels = {h.get_label() for h in fig.axes[0].get_legend().legend_handles}
    assert "chosen tiles, idealised bound (datasheet rates)" in labels
    assert not any("fitted" in label for label in labels)
