"""Partitions the fusion theorem refuses (Appendix A.1): a grouped or streamed axis an op reduces or needs."""

from __future__ import annotations

from helpers_bad_input import analyze_error, check, shipped


def test_grouping_an_axis_an_op_reduces():
    data = shipped("attention")
    data["kernels"][0]["partition"]["smem"] = {"group": {"q": "g_q", "x": "g_x"}}
    check(analyze_error(data), field="kernels[0].partition.smem",
          says=("cannot group axis 'x'", "op 'O'"))


def test_grouping_the_contracted_axis_of_a_matmul():
    data = shipped("matmul")
    data["kernels"][0]["partition"]["smem"] = {"group": {"a": "g_a", "b": "g_b"}}
    check(analyze_error(data), field="kernels[0].partition.smem",
          says=("cannot group axis 'b'", "op 'C'"))


def test_streaming_softmax_with_no_contraction_after_it():
    data = shipped("attention_unfused")
    data["kernels"][1]["partition"]["smem"] = {"group": {"q": "g_q2"}, "stream": {"x": "s_x2"}}
    check(analyze_error(data), field="kernels[1].partition.smem",
          says=("cannot stream axis 'x'", "softmax"))


def test_streaming_an_axis_used_after_its_reduction():
    data = shipped("attention_unfused")           # one kernel; d is reduced by S and used by O
    data["kernels"] = [{"name": "fused",
                        "partition": {"smem": {"group": {"q": "g_q"}, "stream": {"d": "s_d"}}}}]
    check(analyze_error(data), field="kernels[0].partition.smem",
          says=("cannot stream axis 'd'", "after op 'S' has reduced it"))


def test_streaming_an_axis_no_transferred_array_has():
    data = shipped("attention")                    # K and V already live in smem: nothing streams x
    data["inputs"]["K"] = {"axes": ["x", "d"], "level": "smem"}
    data["inputs"]["V"] = {"axes": ["x", "d"], "level": "smem"}
    check(analyze_error(data), field="kernels[0].partition.smem",
          says=("cannot stream axis 'x'", "no array transferred"))
