"""Figure 23: grouped-query attention, H = 2gqd + 4gxqd^2/M for one key/value head."""

from helpers import M, S, cost_of, models_of, same


def test_transfers_before_optimisation():
    h, g, q, x, d, g_g, g_q, g_h = S("h g q x d g_g g_q g_h")
    cost = cost_of("gqa")
    # Figure 23 with h key/value heads: N_g = h g q / (g_h g_g g_q), H_g = 2 g_g g_q g_h d + 2 g_h x d
    assert same(cost.groups, h * g * q / (g_h * g_g * g_q))
    assert same(cost.per_group, 2 * g_h * g_g * g_q * d + 2 * g_h * x * d)
    assert same(cost.transfers.subs(h, 1), 2 * g * q * d + 2 * g * x * q * d / (g_q * g_g))


def test_optimal_transfers_match_figure_23():
    h, g, q, x, d = S("h g q x d")
    h_star = next(m.optimum for m in models_of("gqa") if m.level.name == "smem").h_star
    assert same(h_star.subs(h, 1), 2 * g * q * d + 4 * g * x * q * d**2 / M)
    # the same as multi-head attention with h*g heads
    mha = next(m.optimum for m in models_of("mha") if m.level.name == "smem").h_star
    assert same(h_star, mha.subs(S("h"), h * g))
