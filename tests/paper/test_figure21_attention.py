"""Figure 21: attention, streamed along x and grouped along q, is FlashAttention."""

import yaml
from helpers import M, S, cost_of, models_of, same

from analyzer.common import resources
from analyzer.common.yamlio import load_file
from analyzer.diagram.graph import compile_data
from analyzer.model.cost import level_cost
from analyzer.model.fusion import schedule


def test_transfers_per_group_and_groups():
    q, x, d, g_q = S("q x d g_q")
    cost = cost_of("attention")
    assert same(cost.per_group, 2 * g_q * d + 2 * x * d)
    assert same(cost.groups, q / g_q)
    assert same(cost.transfers, 2 * q * d + 2 * q * x * d / g_q)


def test_optimal_transfers_are_2qd_plus_4qxd2_over_m():
    q, x, d, g_q = S("q x d g_q")
    optimum = next(m.optimum for m in models_of("attention") if m.level.name == "smem")
    assert same(optimum.h_star, 2 * q * d + 4 * q * x * d**2 / M)
    assert optimum.memory_lead == 2 * d * g_q     # Q and the maintained output O (Figure 16)
    # Section 4.1: the M^-1 term says keys and values are broadcast to every group.
    assert [t.beta for t in optimum.terms] == [1, 0]


def test_streamed_memory_holds_queries_chunks_and_the_maintained_output():
    d, g_q, s_x = S("d g_q s_x")
    cost = cost_of("attention")
    # Q [g_q, d] + O [g_q, d] + running max and sum [g_q] x 2 + a V chunk and the S chunk in flight
    assert same(cost.memory, 2 * g_q * d + s_x * d + g_q * s_x + 2 * g_q)


def test_softmax_then_contraction_streams_like_softmax_contraction():
    """Appendix A.3.2: softmax followed by a contraction over the same axis is streamable."""
    data = load_file(resources.shipped("diagrams")["attention"])
    data["ops"] = [
        data["ops"][0],
        {"name": "P", "primitive": "softmax", "inputs": ["S"], "over": "x", "scale": "d**-0.5",
         "output": ["q", "x"]},
        {"name": "O", "primitive": "dot", "inputs": ["P", "V"], "over": "x", "output": ["q", "d"]},
    ]
    data["kernels"][0]["ops"] = ["S", "P", "O"]
    diagram = compile_data(yaml.safe_load(yaml.safe_dump(data)), source="pair.yaml")
    pair = level_cost(schedule(diagram, diagram.kernels[0], "smem"))
    fused = cost_of("attention")
    assert same(pair.transfers, fused.transfers)
    assert same(pair.memory, fused.memory)
    assert pair.flops.keys() == fused.flops.keys()
    for pipeline in fused.flops:     # the same online softmax: one division per output, after the loop
        assert same(pair.flops[pipeline], fused.flops[pipeline]), pipeline
