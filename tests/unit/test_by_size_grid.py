"""The by-size grid of a diagram that is not attention (analyzer.config.by_size.shaped_grid): the
diagram's own shape scaled, its defaults among the points, so that a module called at its defaults
launches what the model ranks first at exactly those sizes."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from analyzer.codegen import generate
from analyzer.config.by_size import LENGTHS, shaped_grid
from analyzer.config.kernels import configure_kernels
from analyzer.model.analysis import load

DIAGRAMS = sorted(p.stem for p in (Path(__file__).resolve().parents[2] / "diagrams").glob("*.yaml"))
PLAIN = ["linear_attention_split", "matmul", "rmsnorm_matmul", "softmax_contraction", "swiglu_mlp"]


@pytest.mark.parametrize("diagram", PLAIN)
def test_the_grid_is_the_defaults_scaled_alike(diagram):
    c = configure_kernels(diagram, "h100", sized=False, ranked=False)
    lengths, points = shaped_grid(c.diagram, c.roles)
    defaults = {s.name: int(v) for s, v in c.diagram.defaults.items()}
    assert list(lengths) == sorted(set(lengths)) and len(lengths) == len(points)
    assert any(p == {n: defaults[n] for n in p} for p in points), "the defaults are a point of the grid"
    for length, point in zip(lengths, points, strict=True):
        scale = {v / defaults[n] for n, v in point.items() if defaults[n] >= 64}   # rounding aside
        assert len(scale) == 1 and math.log2(scale.pop()).is_integer()
        mean = math.prod(point.values()) ** (1 / len(point))
        assert abs(math.log2(mean / length)) < 0.05
    assert lengths[0] <= LENGTHS[0] * 2 ** 0.5 or lengths[0] == min(lengths)
    assert LENGTHS[-1] / 2 < lengths[-1] or lengths[-1] == max(lengths)


@pytest.mark.parametrize("gpu", ["h100", "a100"])
@pytest.mark.parametrize("diagram", DIAGRAMS)
def test_a_module_at_its_defaults_launches_the_models_first_there(diagram, gpu):
    """The file napkin kernel writes and the file it writes with the defaults given as --set launch the
    same configuration at the defaults (before the shaped grid, a table of square problems gave
    softmax_contraction's defaults a configuration the model times 1.9x slower than its first)."""
    defaults = {s.name: int(v) for s, v in load(diagram).defaults.items()}
    free, pinned = generate(diagram, gpu).expected, generate(diagram, gpu, sets=defaults).expected
    assert (free.configuration, free.time_s) == (pinned.configuration, pytest.approx(pinned.time_s, rel=1e-9))
