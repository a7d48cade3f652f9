"""Figure 22: multi-head attention costs grow linearly in h and quadratically in d."""

import sympy
from helpers import M, S, models_of, same


def optimum():
    return next(m.optimum for m in models_of("mha") if m.level.name == "smem")


def test_optimal_transfers():
    h, q, x, d = S("h q x d")
    assert same(optimum().h_star, 2 * h * q * d + 4 * h * q * x * d**2 / M)


def test_linear_in_heads_quadratic_in_head_dim():
    h, d = S("h d")
    h_star = optimum().h_star
    assert sympy.degree(h_star, h) == 1 and same(h_star.subs(h, 2 * h), 2 * h_star)
    memory_term = next(t.alpha for t in optimum().terms if t.beta == 1)
    assert sympy.degree(memory_term, d) == 2


def test_heads_are_not_worth_grouping():
    g_h, g_q = S("g_h g_q")
    sizes = optimum().group_sizes
    assert sizes[g_h] == 1            # grouping heads costs memory and saves no transfers
    assert same(sizes[g_q], M / (2 * S("d")))
