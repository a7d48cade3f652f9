"""A matmul with its bias and GELU in the tail, and Llama's SwiGLU MLP as two streamed kernels: their
transfers and FLOPs as the paper counts them, and the generated modules against float64 under
TRITON_INTERPRET=1, at sizes with edge chunks and at sizes whose streams are whole chunks (the
launcher then compiles the edge loop out: EVEN_<stream>)."""

from __future__ import annotations

import pytest
import sympy

from analyzer.common.expr import symbol
from analyzer.model.analysis import load
from analyzer.model.cost import level_cost
from analyzer.model.fusion import schedule

torch = pytest.importorskip("torch")
pytest.importorskip("triton")

from helpers_kernel import generated, written  # noqa: E402

# fp16 inputs and outputs, fp32 sums over at most a few hundred terms: about 1e-3 relative on the norm.
# The diagrams' bf16 runs on the GPU only (bench/contractions.py): Triton 3.6's interpreter multiplies
# bf16 tiles as raw 16-bit integers in tl.dot (tests/kernels/test_triton_attention.py)
TOLERANCE = 1e-2


def _rel(out, ref) -> float:
    return ((out.double() - ref).norm() / ref.norm()).item()


def _cost(diagram: str, k: int = 0):
    d = load(diagram)
    return level_cost(schedule(d, d.kernels[k], d.levels[-1]))


def test_matmul_bias_gelu_moves_what_the_matmul_moves_and_the_bias_once_a_row_tile():
    """H: X by every tile of o, W by every tile of n, the bias by every tile of n, Y saved once; the
    bias add and the GELU run once per output item, in the tail."""
    cost = _cost("matmul_bias_gelu")
    n, i, o, g_n, g_o = (symbol(x) for x in ("n", "i", "o", "g_n", "g_o"))
    assert sympy.simplify(cost.transfers - ((o / g_o) * n * i + (n / g_n) * i * o + (n / g_n) * o + n * o)) == 0
    assert sympy.simplify(cost.flops["tensor"] - 2 * n * i * o) == 0


def test_swiglu_gate_up_streams_i_with_two_accumulators():
    """The gate-up kernel loads X once a tile of f for both contractions, W1 and W3 once a tile of n,
    and saves A only: H1 and H3 never reach GMEM; the down kernel is a matmul over f."""
    up, down = _cost("swiglu_mlp", 0), _cost("swiglu_mlp", 1)
    n, i, f, o = (symbol(x) for x in ("n", "i", "f", "o"))
    g_n1, g_f1, g_n2, g_o2 = (symbol(x) for x in ("g_n1", "g_f1", "g_n2", "g_o2"))
    assert sympy.simplify(up.transfers - ((f / g_f1) * n * i + 2 * (n / g_n1) * i * f + n * f)) == 0
    assert sympy.simplify(down.transfers - ((o / g_o2) * n * f + (n / g_n2) * f * o + n * o)) == 0
    assert sympy.simplify(up.flops["tensor"] - 4 * n * i * f) == 0


@pytest.mark.parametrize("n, i, o", [(1, 1, 1), (37, 70, 45), (64, 128, 96)])
def test_matmul_bias_gelu_matches_float64(n, i, o, tmp_path):
    m = written(generated("matmul_bias_gelu"), tmp_path)
    gen = torch.Generator().manual_seed(n * i * o)
    x = torch.randn(n, i, generator=gen).half()
    w = (torch.randn(i, o, generator=gen) / i ** 0.5).half()
    b = torch.randn(o, generator=gen).half()
    ref = torch.nn.functional.gelu(x.double() @ w.double() + b.double(), approximate="tanh")
    assert _rel(m.matmul_bias_gelu(x, w, b), ref) < TOLERANCE


@pytest.mark.parametrize("n, i, f, o", [(1, 1, 1, 1), (37, 70, 45, 33), (64, 128, 128, 64)])
def test_swiglu_mlp_matches_float64(n, i, f, o, tmp_path):
    m = written(generated("swiglu_mlp", dtype="fp16"), tmp_path)
    gen = torch.Generator().manual_seed(n * i * f * o)
    x = torch.randn(n, i, generator=gen).half()
    w1, w3 = ((torch.randn(i, f, generator=gen) / i ** 0.5).half() for _ in range(2))
    w2 = (torch.randn(f, o, generator=gen) / f ** 0.5).half()
    xd = x.double()
    ref = (torch.nn.functional.silu(xd @ w1.double()) * (xd @ w3.double())) @ w2.double()
    assert _rel(m.swiglu_mlp(x, w1, w3, w2), ref) < TOLERANCE
