"""Section 4.3 and Equation 3: q bytes per value scale each term by q^(1+beta)."""

import sympy
from helpers import M, S, models_of, same

from analyzer.model.hierarchy import quantized


def optimum(diagram, dtype):
    m = next(m for m in models_of(diagram, dtype=dtype) if m.level.name == "smem")
    return m.optimum, m.optimum_bytes


def test_fp32_to_fp16_speeds_attention_up_to_4x():
    x = S("x")
    (_, fp32), (_, fp16) = optimum("attention", "fp32"), optimum("attention", "fp16")
    ratio = sympy.limit(fp32.h_star / fp16.h_star, x, sympy.oo)   # same bytes of memory M
    assert ratio == 4


def test_fp32_to_fp16_speeds_large_matmul_by_2_83():
    b = S("b")
    (_, fp32), (_, fp16) = optimum("matmul", "fp32"), optimum("matmul", "fp16")
    ratio = sympy.limit(fp32.h_star / fp16.h_star, b, sympy.oo)
    assert ratio == 2 * sympy.sqrt(2) and abs(float(ratio) - 2.83) < 0.005


def test_equation_3_matches_the_bytes_derived_from_the_diagram():
    q = sympy.Symbol("q_bytes", positive=True)
    for diagram in ("attention", "matmul", "mha", "gqa", "causal_attention"):
        values, in_bytes = optimum(diagram, "fp16")
        assert same(quantized(values.terms, 2, [(1, M)]), in_bytes.h_star), diagram
        # and the general form: bytes = sum_t alpha_t q^(1+beta_t) M^-beta_t
        general = quantized(values.terms, q, [(1, M)])
        assert same(general.subs(q, 2), in_bytes.h_star)
