"""`napkin plot transfers`: H*(M) per element type, memory limits and chosen tiles (Section 4, Eq. 1).

The figure is checked against the engine: curve points against the closed form H*(a, M) in bytes,
markers against `analyze`, lines against the profiles' memory limits. Nothing here is a paper number.
"""

from __future__ import annotations

import dataclasses
import os
import subprocess
import sys

import numpy as np
import pytest
from matplotlib.colors import to_hex
from matplotlib.lines import Line2D
from typer.testing import CliRunner

import analyzer.plot.transfers as transfers
from analyzer import hardware
from analyzer.cli import app
from analyzer.common.dtypes import bytes_per_value
from analyzer.common.errors import NapkinError
from analyzer.common.expr import MEMORY
from analyzer.common.units import binary
from analyzer.model.analysis import analyze, level_models, load, resolve_sizes
from analyzer.model.hierarchy import model_levels
from analyzer.plot.output import save

MAGIC = {".png": b"\x89PNG\r\n\x1a\n", ".svg": b"<?xml", ".pdf": b"%PDF-"}


@pytest.fixture(scope="module")
def fig():
    return transfers.figure("attention", ["h100", "a100"], dtypes=["fp16", "fp8"], sets={})


@pytest.fixture(scope="module")
def chosen():
    """The engine's choice at the lowest level, per (GPU, dtype) that has tensor cores for it."""
    return {(gpu, dt): analyze("attention", gpu, dtype=dt).kernels[0].levels[-1]
            for gpu, dt in [("h100-sxm5", "fp16"), ("h100-sxm5", "fp8"), ("a100", "fp16")]}


def by_gid(fig, prefix: str) -> dict[str, object]:
    """Artists of every axes whose gid starts with `prefix`, by gid."""
    return {a.get_gid(): a for ax in fig.axes for a in [*ax.lines, *ax.texts]
            if (a.get_gid() or "").startswith(prefix)}


def lowest_model(dtype: str, diagram: str = "attention"):
    d = load(diagram, dtype=dtype)
    return d, level_models(d, d.kernels[0], model_levels(d, hardware.load("h100")))[-1]


def h_star_bytes(dtype: str, memory: np.ndarray, sets: dict | None = None) -> np.ndarray:
    d, lowest = lowest_model(dtype)
    sizes, _ = resolve_sizes(d, sets or {})
    h = lowest.optimum_bytes.h_star.subs(sizes)
    return np.array([float(h.subs(MEMORY, m)) for m in memory])


def test_axes_are_log_log_with_byte_labels_and_a_title_naming_diagram_and_sizes(fig):
    (ax,) = fig.axes
    assert ax.get_xscale() == "log" and ax.get_yscale() == "log"
    assert "memory" in ax.get_xlabel() and "bytes" in ax.get_xlabel()
    assert "transfers" in ax.get_ylabel() and "bytes" in ax.get_ylabel()
    title = fig.get_suptitle()
    assert "attention" in title and "q=16384" in title and "d=128" in title
    assert ax.get_legend() is not None


def test_one_curve_per_dtype_following_the_closed_form_in_bytes(fig):
    curves = by_gid(fig, "curve:")
    assert sorted(curves) == ["curve:flash:fp16", "curve:flash:fp8"]
    for dt in ("fp16", "fp8"):
        line = curves[f"curve:flash:{dt}"]
        memory, values = line.get_xdata()[::50], line.get_ydata()[::50]
        np.testing.assert_allclose(values, h_star_bytes(dt, memory), rtol=1e-9)
        assert dt in line.get_label()


def test_curves_have_the_standard_form_slopes_and_quantization_ratios(fig):
    """Slope -1 where 4d^2qx/M leads, 0 at the floor; fp16/fp8 = (2/1)^(1 + beta) (Equation 3)."""
    curves = by_gid(fig, "curve:")
    fp16, fp8 = curves["curve:flash:fp16"], curves["curve:flash:fp8"]
    x = np.log(fp16.get_xdata())
    slope = np.diff(np.log(fp16.get_ydata())) / np.diff(x)
    assert slope[0] == pytest.approx(-1, abs=0.01)
    assert slope[-1] > -0.2
    q = bytes_per_value("fp16") / bytes_per_value("fp8")
    ratio = fp16.get_ydata() / fp8.get_ydata()
    assert ratio[0] == pytest.approx(q ** 2, rel=0.01)    # beta = 1 term leads
    assert ratio[-1] == pytest.approx(q, rel=0.1)         # approaching the floor, beta = 0


def test_a_memory_limit_line_per_gpu_at_its_lowest_level_capacity(fig):
    limits = {gid: line for gid, line in by_gid(fig, "limit:").items() if isinstance(line, Line2D)}
    assert sorted(limits) == ["limit:flash:a100", "limit:flash:h100-sxm5"]
    d = load("attention")
    for gpu in ("h100-sxm5", "a100"):
        expected = model_levels(d, hardware.load(gpu))[-1].memory_bytes
        line = limits[f"limit:flash:{gpu}"]
        assert set(line.get_xdata()) == {expected}
        assert line.get_label() == f"limit M: {gpu} smem {binary(expected)}"
    texts = [t.get_text() for t in fig.axes[0].texts]
    assert "h100-sxm5 smem 227 KiB" in texts


def test_chosen_markers_sit_where_analyze_puts_them_on_or_above_the_curve(fig, chosen):
    markers = by_gid(fig, "chosen:")
    assert sorted(markers) == sorted(f"chosen:flash:{gpu}:{dt}" for gpu, dt in chosen)
    for (gpu, dt), level in chosen.items():
        marker = markers[f"chosen:flash:{gpu}:{dt}"]
        (x,), (y,) = marker.get_xdata(), marker.get_ydata()
        assert (x, y) == (level.memory_bytes_value, level.transfers_bytes_value)
        tiles = ", ".join(f"{k}={v}" for k, v in level.chosen.items())
        assert tiles in marker.get_label() and "g_q=" in tiles
        assert y >= h_star_bytes(dt, np.array([x]))[0] * (1 - 1e-9)
    texts = [t.get_text() for t in fig.axes[0].texts]
    assert any(t.startswith("h100-sxm5 fp16: g_q=") for t in texts)


def test_each_gpus_marker_has_its_limit_lines_colour():
    """A GPU's markers are filled in the colour of its memory limit line (the A100's were the fp16
    curve's blue beside a green line), edged in their element type's curve colour; H100 and H200
    share a limit, and each has its own line on it in its own colour."""
    gpus = ["h100-sxm5", "a100", "t4", "h200"]
    fig = transfers.figure("attention", gpus, dtypes=["fp16", "fp8"], sets={})
    limits = {gid.split(":")[2]: line for gid, line in by_gid(fig, "limit:").items()
              if isinstance(line, Line2D)}
    curves = {gid.split(":")[2]: line for gid, line in by_gid(fig, "curve:").items()}
    markers = by_gid(fig, "chosen:")
    a100 = markers["chosen:flash:a100:fp16"]   # the reported one
    assert to_hex(a100.get_markerfacecolor()) == to_hex(limits["a100"].get_color())
    assert sorted(limits) == sorted(gpus)
    assert len({to_hex(line.get_color()) for line in limits.values()}) == len(gpus)
    assert {gid.split(":")[2] for gid in markers} == set(gpus)
    for gid, marker in markers.items():
        gpu, dt = gid.split(":")[2:]
        assert to_hex(marker.get_markerfacecolor()) == to_hex(limits[gpu].get_color()), gid
        assert to_hex(marker.get_markeredgecolor()) == to_hex(curves[dt].get_color()), gid


def test_gpu_without_the_dtype_is_skipped_with_a_note(fig):
    assert "chosen:flash:a100:fp8" not in by_gid(fig, "chosen:")
    note = fig.get_supxlabel()
    assert "a100" in note and "fp8" in note and "h100" not in note


def test_slope_labels_name_the_exponents_of_the_standard_form(fig):
    labels = {gid: t.get_text() for gid, t in by_gid(fig, "slope:").items()}
    assert labels["slope:flash:1"] == r"$\propto M^{-1}$"
    assert labels["slope:flash:0"].startswith("floor $2 d q$ values")
    # the floor is drawn under the lowest curve (fp8): the beta = 0 term in values times q (Eq. 3)
    (floor,) = by_gid(fig, "floor:").values()
    d, lowest = lowest_model("fp8")
    sizes, _ = resolve_sizes(d, {})
    (alpha,) = [t.alpha for t in lowest.optimum.terms if t.beta == 0]
    assert set(floor.get_ydata()) == {float(alpha.subs(sizes)) * bytes_per_value("fp8")}
    assert f"{binary(float(alpha.subs(sizes)))} in fp8" in labels["slope:flash:0"]
    # a square-root law (tiled matmul): the exponent is -1/2
    matmul = transfers.figure("matmul", ["h100"], dtypes=[], sets={})
    texts = {gid: t.get_text() for gid, t in by_gid(matmul, "slope:").items()}
    assert texts["slope:gemm:1/2"] == r"$\propto M^{-1/2}$"


def test_one_panel_per_kernel():
    fig = transfers.figure("attention_unfused", ["h100"], dtypes=[], sets={"q": 1024, "x": 1024})
    assert [ax.get_title(loc="left") for ax in fig.axes if ax.get_title(loc="left")] == \
        ["kernel scores", "kernel softmax", "kernel values"]
    assert "q=1024" in fig.get_suptitle()


def test_sets_change_the_sizes():
    small = transfers.figure("attention", ["h100"], dtypes=[], sets={"x": 4096})
    line = by_gid(small, "curve:")["curve:flash:fp16"]
    memory = line.get_xdata()[::100]
    np.testing.assert_allclose(line.get_ydata()[::100], h_star_bytes("fp16", memory, {"x": 4096}), rtol=1e-9)
    assert "x=4096" in small.get_suptitle()


def test_no_closed_form_is_a_napkin_error_naming_the_diagram(monkeypatch):
    def without_optimum(*args, **kwargs):
        return [dataclasses.replace(m, optimum=None, optimum_bytes=None)
                for m in level_models(*args, **kwargs)]
    monkeypatch.setattr(transfers, "level_models", without_optimum)
    with pytest.raises(NapkinError, match="attention.*no closed-form H"):
        transfers.figure("attention", ["h100"], dtypes=[], sets={})


def test_unknown_gpu_is_a_napkin_error():
    with pytest.raises(NapkinError, match="h10"):
        transfers.figure("attention", ["h10"], dtypes=[], sets={})


@pytest.mark.parametrize("ext", [".png", ".svg", ".pdf"])
def test_saves_headless_in_each_format(fig, tmp_path, ext):
    path = save(fig, tmp_path / f"transfers{ext}")
    assert path.read_bytes().startswith(MAGIC[ext])


def test_cli_writes_the_plot(tmp_path):
    out = tmp_path / "x.png"
    result = CliRunner().invoke(app, ["plot", "transfers", "attention", "--gpu", "h100", "--gpu", "a100",
                                      "-o", str(out)])
    assert result.exit_code == 0, result.output
    assert result.output.strip() == f"wrote {out}"
    assert out.read_bytes().startswith(MAGIC[".png"])


def test_cli_bad_extension_is_one_error_line(tmp_path):
    env = {k: v for k, v in os.environ.items() if k != "NAPKIN_DEBUG"}
    proc = subprocess.run([sys.executable, "-m", "analyzer", "plot", "transfers", "attention",
                           "-o", "x.txt"], cwd=tmp_path, env=env, capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 1
    assert proc.stderr.count("\n") == 1 and proc.stderr.startswith("error: ")
    assert "x.txt" in proc.stderr and ".png" in proc.stderr
    assert not (tmp_path / "x.txt").exists()
