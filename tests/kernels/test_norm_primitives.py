"""div, reciprocal, rsqrt and shift: RMSNorm and LayerNorm feeding a matmul, generated and run against
float64 under TRITON_INTERPRET=1 (issue 19, item 4)."""

from __future__ import annotations

import pytest
import sympy

from analyzer.codegen import generate
from analyzer.common.errors import NapkinError
from analyzer.common.expr import symbol
from analyzer.model.analysis import load
from analyzer.model.cost import level_cost
from analyzer.model.fusion import schedule
from analyzer.model.simulate import simulate

torch = pytest.importorskip("torch")
pytest.importorskip("triton")

from helpers_kernel import generated, written  # noqa: E402

# LayerNorm as it reads, with i whole in a block (normalised rows need all of i before the contraction):
# the standard deviation through rsqrt, reciprocal and div, so every new primitive is on the path.
LAYERNORM = """\
name: layernorm_matmul
title: LayerNorm feeding a matmul, the rows of X whole
dtype: fp16
axes: {n: {default: 4096}, i: {default: 128}, o: {default: 4096}}
inputs: {X: [n, i], G: [i], B: [i], W: [i, o]}
ops:
  - {name: S1, primitive: sum, inputs: [X], over: i, output: [n]}
  - {name: MU, primitive: scale, inputs: [S1], scale: i**-1, output: [n]}
  - {name: XC, primitive: sub, inputs: [X, MU], output: [n, i]}
  - {name: SQ, primitive: mul, inputs: [XC, XC], output: [n, i]}
  - {name: S2, primitive: sum, inputs: [SQ], over: i, output: [n]}
  - {name: VAR, primitive: scale, inputs: [S2], scale: i**-1, output: [n]}
  - {name: VE, primitive: shift, inputs: [VAR], offset: 1e-5, output: [n]}
  - {name: RSTD, primitive: rsqrt, inputs: [VE], output: [n]}
  - {name: STD, primitive: reciprocal, inputs: [RSTD], output: [n]}
  - {name: XN, primitive: div, inputs: [XC, STD], output: [n, i]}
  - {name: XG, primitive: mul, inputs: [XN, G], output: [n, i]}
  - {name: XB, primitive: add, inputs: [XG, B], output: [n, i]}
  - {name: Y, primitive: dot, inputs: [XB, W], over: i, output: [n, o]}
outputs: [Y]
kernels:
  - {name: ln_mm, partition: {smem: {group: {n: g_n, o: g_o}}}}
"""


def _rel(out, ref) -> float:
    return ((out.double() - ref).norm() / ref.norm()).item()


@pytest.mark.parametrize("n, i, o", [(1, 1, 1), (37, 70, 45), (130, 300, 200)])
def test_rmsnorm_matmul_matches_the_natural_form_in_float64(n, i, o, tmp_path):
    """The shipped diagram computes r (X g) W with r = rsqrt(mean(x^2) + eps) accumulated over the
    streamed i; the reference normalises first, as RMSNorm is written. Edges of every size are masked
    (1, 37, 70 ... are no tile's multiple)."""
    m = written(generated("rmsnorm_matmul"), tmp_path)
    gen = torch.Generator().manual_seed(n * i * o)
    x = torch.randn(n, i, generator=gen).half()
    g = (torch.rand(i, generator=gen) + 0.5).half()
    w = (torch.randn(i, o, generator=gen) / i ** 0.5).half()
    xd = x.double()
    ref = (xd * torch.rsqrt(xd.pow(2).mean(-1, keepdim=True) + 1e-6) * g.double()) @ w.double()
    # fp16 inputs and output, fp32 sums over at most 300 terms: about 1e-3 relative on the norm
    assert _rel(m.rmsnorm_matmul(x, g, w), ref) < 1e-2


def _cost(diagram: str):
    d = load(diagram)
    return d, level_cost(schedule(d, d.kernels[0], d.levels[-1]))


def test_rmsnorm_matmul_transfers_memory_and_flops():
    """H: X is loaded by every tile of o, W by every tile of n, the gain by every group; Y saved once.
    M: the accumulators P (g_n g_o) and SS (g_n) beside a chunk of X (g_n s_i) and of the gain (s_i);
    at the contraction, the chunk's X and X g (2 g_n s_i) and a chunk of W (g_o s_i). FLOPs: one rsqrt
    per row per tile of o on the special function unit; the shift, scale and three multiplies on the
    vector pipeline (the oracle in tests/property simulates the same schedule element by element)."""
    _, cost = _cost("rmsnorm_matmul")
    n, i, o, g_n, g_o, s_i = (symbol(x) for x in ("n", "i", "o", "g_n", "g_o", "s_i"))
    assert sympy.simplify(cost.transfers - ((o / g_o) * n * i + (n / g_n) * i * o
                                            + (n / g_n) * (o / g_o) * i + n * o)) == 0
    assert sympy.simplify(cost.memory - sympy.Max(g_n * g_o + g_n * s_i + g_n + s_i,
                                                  g_n * g_o + 2 * g_n * s_i + g_n + g_o * s_i)) == 0
    assert sympy.simplify(cost.flops["sfu"] - n * o / g_o) == 0
    assert sympy.simplify(cost.flops["vector"] - (3 * i * n * o / g_o + 2 * n * o / g_o + n * o)) == 0


def test_layernorm_counts_equal_a_brute_force_simulation(tmp_path):
    """The element-by-element simulation (analyzer.model.simulate) of the LayerNorm kernel loads, holds
    and computes what the symbolic counts say, div, reciprocal, rsqrt and shift included."""
    path = tmp_path / "layernorm_matmul.yaml"
    path.write_text(LAYERNORM)
    d, cost = _cost(str(path))
    sizes = {symbol("n"): 6, symbol("i"): 5, symbol("o"): 4}
    tiles = {symbol("g_n"): 3, symbol("g_o"): 2}
    sim = simulate(cost.schedule, sizes, tiles)
    values = {**sizes, **tiles}
    assert cost.transfers.subs(values) == sim.transfers
    assert cost.memory.subs(values) == sim.peak
    assert {p: v.subs(values) for p, v in cost.flops.items()} == sim.flops
    n, i, o, g_o = (symbol(x) for x in ("n", "i", "o", "g_o"))
    # per tile of o: div, rsqrt and reciprocal on the special function unit (n i + 2 n)
    assert sympy.simplify(cost.flops["sfu"] - (o / g_o) * (n * i + 2 * n)) == 0


@pytest.mark.parametrize("n, i, o", [(1, 1, 1), (33, 100, 20), (70, 128, 90)])
def test_layernorm_matmul_matches_float64(n, i, o, tmp_path):
    path = tmp_path / "layernorm_matmul.yaml"
    path.write_text(LAYERNORM)
    m = written(generate(str(path), "h200", sets={"n": 4096, "i": 128, "o": 4096}), tmp_path)
    gen = torch.Generator().manual_seed(n + i + o)
    x = (torch.randn(n, i, generator=gen) * 2 + 1).half()
    g, b = (torch.rand(i, generator=gen) + 0.5).half(), (torch.randn(i, generator=gen) * 0.1).half()
    w = (torch.randn(i, o, generator=gen) / i ** 0.5).half()
    ref = torch.nn.functional.layer_norm(x.double(), (i,), g.double(), b.double(), eps=1e-5) @ w.double()
    if i == 1:      # one feature: every row is its mean, the normalised row is 0 and Y is b W
        ref = b.double()[None, :].expand(n, 1) @ w.double()
    assert _rel(m.layernorm_matmul(x, g, b, w), ref) < 1e-2


def test_shift_takes_a_number_not_a_size(tmp_path):
    path = tmp_path / "bad.yaml"
    path.write_text(LAYERNORM.replace("offset: 1e-5", "offset: i"))
    with pytest.raises(NapkinError, match="unknown name 'i'"):
        generate(str(path), "h200")
    path.write_text(LAYERNORM.replace(", offset: 1e-5", ""))
    with pytest.raises(NapkinError, match="shift needs an `offset`"):
        generate(str(path), "h200")
