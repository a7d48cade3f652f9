"""No time, transfer or memory of any level comes out negative, with or without thread block clusters.

Theorem 3 rearranges a cross-transfer level's transfers into the standard form (Equation 12), whose weight
for the cross level, Hdot_h->c^-1 - Hdot_x->c^-1, is negative wherever cross transfers are slower than
direct ones (3.27 TB/s against an H100's 12 TB/s L2). A level's time is what it receives over its feed
(Equation 11): the cross level's H*(a, N M_c) from h, the child's remaining transfers across the cluster.

Sizes, cluster sizes 1..16 (1: no cluster) and the cluster's bandwidth (either side of the direct one) are
drawn; every profile with a cross level, datasheet and calibrated, and several diagrams.
"""

from __future__ import annotations

import math

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from analyzer import hardware
from analyzer.model.analysis import analyze, load

DIAGRAMS = ("attention", "matmul", "gqa", "causal_attention", "mlp2")
GPUS = ("h100", "h200", "h100-pcie", "h100-calibrated")
SETTINGS = settings(max_examples=10, deadline=None, derandomize=True, database=None,
                    suppress_health_check=list(HealthCheck))


def with_cluster(gpu: str, n: int, bandwidth: float) -> hardware.Profile:
    """The profile with one measured cluster size: n members at `bandwidth` between them."""
    profile = hardware.load(gpu)
    levels = [lv.model_copy(update={"bandwidth_bytes_per_s_by_cluster": {n: bandwidth}})
              if lv.kind == "cross" else lv for lv in profile.levels]
    return profile.model_copy(update={"levels": levels})


@st.composite
def problems(draw):
    diagram = draw(st.sampled_from(DIAGRAMS))
    d = load(diagram)
    sizes = {}
    for s, v in d.defaults.items():   # head dims as kernels take them; rows at least a wgmma's 64
        if s.name in ("d", "e"):
            sizes[s.name] = draw(st.sampled_from((16, 32, 64, 128)))
        elif diagram == "causal_attention":   # whole query groups of 64 rows divide q
            sizes[s.name] = 64 * draw(st.integers(1, 2 * v // 64))
        else:
            sizes[s.name] = draw(st.integers(1 if v <= 64 else 64, 2 * v))
    return diagram, sizes


@SETTINGS
@given(problems(), st.sampled_from(GPUS), st.integers(1, 16), st.floats(1e11, 1e14))
def test_every_level_time_transfer_and_memory_is_non_negative(problem, gpu, cluster, bandwidth):
    diagram, sizes = problem
    profile = with_cluster(gpu, max(cluster, 2), bandwidth)
    a = analyze(diagram, profile, sets=sizes, cluster=cluster if cluster > 1 else None)
    for k in a.kernels:
        for lv in k.levels:
            values = {"time": lv.transfer_time_s, "received": lv.received_bytes_value,
                      "transfers": lv.transfers_bytes_value, "memory": lv.memory_bytes_value}
            assert all(v >= 0 for v in values.values()), (k.name, lv.level, values)
            assert lv.received_bytes_value <= lv.transfers_bytes_value
        assert k.transfer_time_s >= 0 and k.predicted_time_s > 0
        if cluster > 1 and not profile.calibration:
            # the levels' times add up to Theorem 3's weighted total (Equation 12) wherever the cluster
            # moves no more than its members would alone, and to more only where it would
            theorem_3 = sum(lv.weight_s_per_byte * lv.transfers_bytes_value for lv in k.levels)
            levels = sum(lv.transfer_time_s for lv in k.levels)
            i = next(i for i, lv in enumerate(k.levels) if lv.role == "cross")
            if k.levels[i].transfers_bytes_value <= k.levels[i + 1].transfers_bytes_value:
                assert math.isclose(levels, theorem_3, rel_tol=1e-9)
            else:
                assert levels >= theorem_3 * (1 - 1e-9)
