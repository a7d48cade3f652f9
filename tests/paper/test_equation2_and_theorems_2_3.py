"""Equation 2 (weighted multi-level totals), Theorem 2 (caching levels), Theorem 3 and Appendix A.2.3
(cross-transfer levels and the cluster-size trade-off)."""

import itertools

import sympy
from helpers import S, cost_of, models_of, same

from analyzer import hardware
from analyzer.model.hierarchy import cluster_gain, weighted_total


def smem_optimum(diagram):
    return next(m.optimum for m in models_of(diagram) if m.level.name == "smem")


def test_equation_2_is_the_weighted_sum_of_per_level_optima():
    w1, w2, m1, m2 = sympy.symbols("w1 w2 M1 M2", positive=True)
    for diagram in ("attention", "matmul", "gqa"):
        optimum = smem_optimum(diagram)
        direct = w1 * optimum.at(m1) + w2 * optimum.at(m2)
        assert same(weighted_total(optimum.terms, [(w1, m1), (w2, m2)]), direct)


def test_levels_between_gmem_and_smem_on_h100():
    l2, smem = (m.level for m in models_of("attention"))
    profile = hardware.load("h100")
    assert (l2.name, l2.role, l2.source) == ("l2", "cache", "gmem")
    assert l2.weight_s_per_byte == 1 / profile.level("gmem").bandwidth_bytes_per_s
    assert smem.weight_s_per_byte == 1 / profile.level("l2").bandwidth_bytes_per_s
    # Theorem 2: a caching level uses the memory of the children it serves, N_c M_c.
    assert l2.children == 66 and l2.memory_bytes == 66 * smem.memory_bytes


def test_theorem_2_caching_level_needs_h_star_at_n_times_child_memory():
    """Brute force of Equations 6-9 on matmul: min over tiles of both levels with the number
    restriction prod g_l1 / prod g_l2 <= N equals H*(a, N M_l2) under the leading memory terms."""
    a, b, c, g_a, g_c = S("a b c g_a g_c")
    transfers = cost_of("matmul").transfers.subs({a: 64, b: 64, c: 64})
    n_max, m_child = 4, 16
    tiles = [t for t in (1, 2, 4, 8, 16, 32, 64)]
    best = min(float(transfers.subs({g_a: ga, g_c: gc}))
               for ga, gc, ha, hc in itertools.product(tiles, repeat=4)
               if ha * hc <= m_child and ga * gc <= n_max * ha * hc)
    h_star = smem_optimum("matmul").at(n_max * m_child).subs({a: 64, b: 64, c: 64})
    assert best == float(h_star)


def test_theorem_3_cross_level_weights_and_memory():
    levels = [m.level for m in models_of("attention", cluster=2)]
    assert [lv.name for lv in levels] == ["l2", "dsmem", "smem"]
    _, x, c = levels
    profile = hardware.load("h100")
    bw_hc = profile.level("l2").bandwidth_bytes_per_s
    bw_xc = profile.level("dsmem").bandwidth_bytes_per_s_by_cluster[2]
    assert x.role == "cross" and x.children == 2
    assert x.weight_s_per_byte == 1 / bw_hc - 1 / bw_xc
    assert x.memory_bytes == 2 * c.memory_bytes
    assert c.weight_s_per_byte == 1 / bw_xc


def test_appendix_a23_delta_h_star():
    w_hc, w_xc, m_c, n = sympy.symbols("w_hc w_xc M_c N", positive=True)
    for diagram in ("attention", "matmul"):
        terms = smem_optimum(diagram).terms
        expected = (w_hc - w_xc) * sum(t.alpha * m_c ** -t.beta * (1 - n ** -t.beta) for t in terms)
        assert same(cluster_gain(terms, w_hc, w_xc, m_c, n), expected)


def test_cluster_size_trade_off_depends_on_beta():
    """Luo et al.'s H800 figures (A.2.3): SM-to-SM 3.27 TB/s with clusters of 2, 2.65 TB/s with 4,
    against 2.04 TB/s GMEM -> SMEM. Attention (beta = 1) prefers clusters of 2, large matmul
    (beta = 1/2) clusters of 4."""
    m_c = 228 * 1024 / 2
    bandwidth = {2: 3.27e12, 4: 2.65e12}

    def gain(diagram, n):
        terms = smem_optimum(diagram).terms
        sizes = {s: 16384 for t in terms for s in t.alpha.free_symbols}
        return float(cluster_gain(terms, 1 / 2.04e12, 1 / bandwidth[n], m_c, n).subs(sizes))

    assert gain("attention", 2) > gain("attention", 4) > 0
    assert gain("matmul", 4) > gain("matmul", 2) > 0
