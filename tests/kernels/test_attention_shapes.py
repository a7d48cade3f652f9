"""Attention whose values have a head dim of their own (mla_attention) and linear attention computed keys
first (linear_attention): their H and M, and their kernels against float64 (issue 19, item 4)."""

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

q, x, d, e, g_q, s_x = (symbol(n) for n in ("q", "x", "d", "e", "g_q", "s_x"))


def _cost(name: str):
    diagram = load(name)
    return level_cost(schedule(diagram, diagram.kernels[0], diagram.levels[-1]))


def _module(name: str, tmp):
    return written(generated(name), tmp)


def _rel(out, ref) -> float:
    return ((out.double() - ref).norm() / ref.norm()).item()


def test_mla_transfers_and_memory_keep_the_two_head_dims_apart():
    """Figure 21's attention with d + e where it had 2 d: the queries loaded and the output saved once
    (q d + q e), the keys and values once per group ((q/g_q) x (d + e)). A group holds its queries and
    output accumulator (g_q d + g_q e), a chunk of keys or values and of scores, and the online
    softmax's two values per row."""
    cost = _cost("mla_attention")
    assert sympy.simplify(cost.transfers - (q * d + q * e + (q / g_q) * x * (d + e))) == 0
    assert cost.memory.has(e) and cost.memory.subs(e, d) != cost.memory
    assert sympy.simplify(cost.flops["tensor"] - 2 * q * x * (d + e)) == 0


@pytest.mark.parametrize("head, value, seq_q, seq_k", [(192, 128, 70, 90), (64, 32, 1, 17),
                                                       (128, 128, 100, 100), (192, 64, 33, 1)])
def test_mla_attention_matches_float64(head, value, seq_q, seq_k, tmp_path):
    m = _module("mla_attention", tmp_path)
    gen = torch.Generator().manual_seed(head + value + seq_q)
    qt = torch.randn(2, 3, seq_q, head, generator=gen).half()
    kt = torch.randn(2, 3, seq_k, head, generator=gen).half()
    vt = torch.randn(2, 3, seq_k, value, generator=gen).half()
    out = m.attention(qt, kt, vt)
    ref = torch.softmax(qt.double() @ kt.double().transpose(-1, -2) * head ** -0.5, -1) @ vt.double()
    assert out.shape == (2, 3, seq_q, value)
    assert _rel(out, ref) < 1e-2     # fp16 in and out, fp32 accumulation: about 1e-3


def test_mla_wrapper_refuses_what_the_file_is_not_configured_for(tmp_path):
    m = _module("mla_attention", tmp_path)
    qt, kt = torch.randn(1, 1, 8, 192).half(), torch.randn(1, 1, 8, 192).half()
    with pytest.raises(ValueError, match="wider than the 128 this file is configured for"):
        m.attention(qt, kt, torch.randn(1, 1, 8, 256).half())
    with pytest.raises(ValueError, match="q and k head dims differ"):
        m.attention(qt, torch.randn(1, 1, 8, 128).half(), torch.randn(1, 1, 8, 128).half())


def test_one_head_dim_diagrams_still_refuse_a_value_of_another_width(tmp_path):
    m = _module("attention", tmp_path)
    with pytest.raises(ValueError, match="head dims differ"):
        m.attention(*(torch.randn(1, 1, 8, 64).half() for _ in range(2)), torch.randn(1, 1, 8, 128).half())


def test_linear_attention_transfers_memory_and_flops():
    """Keys first, fused: every group of queries builds the d x e state from all keys and values, so K
    and V are loaded once per group and the state's 2 x d e FLOPs are repeated per group; the group
    holds the state, then its queries and output beside it."""
    cost = _cost("linear_attention")
    assert sympy.simplify(cost.transfers - (q * d + q * e + (q / g_q) * x * (d + e))) == 0
    assert sympy.simplify(cost.memory - sympy.Max(e * g_q, d * e + d * g_q, d * e + d * s_x + e * s_x)) == 0
    assert sympy.simplify(cost.flops["tensor"] - (2 * d * e * q + 2 * d * e * x * q / g_q)) == 0


@pytest.mark.parametrize("seq_q, seq_k, dim, value", [(1, 1, 64, 64), (70, 130, 64, 32), (200, 300, 128, 128)])
def test_linear_attention_matches_float64(seq_q, seq_k, dim, value, tmp_path):
    m = _module("linear_attention", tmp_path)
    gen = torch.Generator().manual_seed(seq_q + seq_k)
    qt = torch.randn(seq_q, dim, generator=gen).half()
    kt = (torch.randn(seq_k, dim, generator=gen) / seq_k ** 0.5).half()
    vt = torch.randn(seq_k, value, generator=gen).half()
    ref = qt.double() @ (kt.double().T @ vt.double())
    # the state is rounded to fp16 before the tensor cores take it: about 5e-4 relative
    assert _rel(m.linear_attention(qt, kt, vt), ref) < 1e-2


def test_linear_attention_split_builds_the_state_once():
    """Keys first, the state built once in pieces: the pieces' kernel loads K and V once (c xc (d + e))
    and saves c partial states (c d e) whatever its tiles of d and e; the state's kernel loads those and
    saves one (d e); the queries' kernel is a matmul. The tensor FLOPs are the keys-first order's,
    2 c xc d e + 2 q d e, with no factor of q / g_q: nothing is built twice."""
    diagram = load("linear_attention_split")
    c, xc, g_c, g_d, g_e = (symbol(n) for n in ("c", "xc", "g_c1", "g_d1", "g_e1"))
    pieces, state, apply = (level_cost(schedule(diagram, k, diagram.levels[-1])) for k in diagram.kernels)
    loads = c * xc * d * e / g_e + c * xc * d * e / g_d      # K along each group of e, V along each of d
    assert sympy.simplify(pieces.transfers - (loads + c * d * e)) == 0
    assert sympy.simplify(pieces.transfers.subs({g_d: d, g_e: e}) - (c * xc * (d + e) + c * d * e)) == 0
    assert sympy.simplify(state.transfers - (c * d * e + d * e)) == 0
    tensor = sum((k.flops.get("tensor", 0) for k in (pieces, state, apply)), sympy.Integer(0))
    assert sympy.simplify(tensor - (2 * c * xc * d * e + 2 * q * d * e)) == 0
    assert g_c not in pieces.transfers.free_symbols      # a piece a block or several: the same loads


@pytest.mark.parametrize("seq_q, pieces, each, dim, value", [(1, 1, 1, 64, 64), (70, 4, 33, 64, 32),
                                                             (200, 3, 100, 128, 128)])
def test_linear_attention_split_matches_float64(seq_q, pieces, each, dim, value, tmp_path):
    """The three kernels (the pieces' partial states, their sum, the queries against it) against float64
    on the keys laid out as pieces: a view of (x, d) as (c, xc, d)."""
    m = _module("linear_attention_split", tmp_path)
    gen = torch.Generator().manual_seed(seq_q + pieces * each)
    qt = torch.randn(seq_q, dim, generator=gen).half()
    kt = (torch.randn(pieces * each, dim, generator=gen) / (pieces * each) ** 0.5).half()
    vt = torch.randn(pieces * each, value, generator=gen).half()
    ref = qt.double() @ (kt.double().T @ vt.double())
    out = m.linear_attention_split(qt, kt.view(pieces, each, dim), vt.view(pieces, each, value))
    # the partial states and the state are rounded to fp16 between kernels: about 1e-3 relative
    assert _rel(out, ref) < 1e-2
