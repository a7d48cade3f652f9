"""The rows of napkin analyze's time table add up to its verdict: every term that sets the time is
shown (regression: softmax_contraction at g_q=128 listed sfu 72.7 us and transfers 252.6 us and called
it sfu-bound, the loads in flight folded into compute unseen)."""

from __future__ import annotations

import math

import pytest

from analyzer.model.analysis import analyze
from analyzer.report.analysis import shown_compute_s

DIAGRAMS = ["attention", "causal_attention", "softmax_contraction", "matmul", "mlp2", "gqa"]
GPUS = ["h100", "a100", "t4", "h200-calibrated"]


CASES = [(d, {}, g) for d in DIAGRAMS for g in GPUS] + \
    [("softmax_contraction", {"g_q": 128}, g) for g in GPUS if g != "t4"]   # the T4's 64 KiB SMEM: no fit


@pytest.mark.parametrize("diagram, sets, gpu", CASES)
def test_rows_make_the_verdict(diagram, sets, gpu):
    for k in analyze(diagram, gpu, sets=sets).kernels:
        terms = {"compute": shown_compute_s(k), "transfers": k.transfer_time_s}
        if k.power_time_s:
            terms["power"] = k.power_time_s
        assert math.isclose(max(terms.values()) + k.exposed_time_s, k.predicted_time_s, rel_tol=1e-9)
        largest = max(terms, key=terms.get)
        word = {"compute": ("compute", "load latency"), "transfers": ("transfers",), "power": ("power",)}[largest]
        if not any(math.isclose(v, terms[largest], rel_tol=1e-9) for n, v in terms.items() if n != largest):
            assert k.bound.startswith(word), (k.bound, terms)


def test_the_regression_case_is_transfer_bound():
    (k,) = analyze("softmax_contraction", "h100", sets={"g_q": 128}).kernels
    assert k.bound.startswith("transfers") and k.predicted_time_s == pytest.approx(k.transfer_time_s)
