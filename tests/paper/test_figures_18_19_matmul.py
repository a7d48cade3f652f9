"""Figures 18-19: matrix multiplication is streamable along b and tiled along a and c."""

import sympy
from helpers import M, S, cost_of, models_of, same


def test_per_group_transfers_memory_and_groups_of_figure_18():
    a, b, c, g_a, g_c, s_b = S("a b c g_a g_c s_b")
    cost = cost_of("matmul")
    assert same(cost.per_group, g_a * b + b * g_c + g_a * g_c)        # H_g
    assert same(cost.groups, a * c / (g_a * g_c))                    # N_g
    assert same(cost.memory, g_a * s_b + s_b * g_c + g_a * g_c)      # M
    assert same(cost.transfers, a * b * c / g_c + a * b * c / g_a + a * c)


def test_square_tiles_and_optimal_transfers():
    a, b, c, g_a, g_c = S("a b c g_a g_c")
    (model,) = [m for m in models_of("matmul") if m.level.name == "smem"]
    optimum = model.optimum
    assert same(optimum.h_star, 2 * a * b * c * M ** sympy.Rational(-1, 2) + a * c)
    assert optimum.group_sizes[g_a] == optimum.group_sizes[g_c] == sympy.sqrt(M)   # square tiling
    assert [(t.beta, sympy.expand(t.alpha)) for t in optimum.terms] == [
        (sympy.Rational(1, 2), 2 * a * b * c), (0, a * c)]


def test_flops_are_2abc():
    a, b, c = S("a b c")
    assert cost_of("matmul").flops == {"tensor": 2 * a * b * c}
