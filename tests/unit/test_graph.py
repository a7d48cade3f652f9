"""Section 2.1: weaves, broadcast inputs, composition and concatenation, compiled into a graph."""

import copy

import networkx as nx
import pytest

from analyzer.common import resources
from analyzer.common.errors import NapkinError
from analyzer.common.yamlio import load_file
from analyzer.diagram.graph import compile_data
from analyzer.model.analysis import load


def attention_data():
    return copy.deepcopy(load_file(resources.shipped("diagrams")["attention"]))


def test_weaves_and_broadcast_inputs_are_derived_from_shapes():
    d = load("attention")
    scores, out = d.ops
    assert scores.weave == ("q", "x") and out.weave == ("q", "d")
    # Figure 5: an input not weaved by an axis is copied along it
    assert scores.broadcast(d.axes_of()) == {"Q": ("x",), "K": ("q",)}
    assert out.broadcast(d.axes_of()) == {"S": ("d",), "V": ("q",)}


def test_arrays_take_their_levels_from_the_kernels():
    d = load("attention_unfused")
    assert d.arrays["Q"].level == "gmem" and d.arrays["O"].role == "output"
    assert d.arrays["S"].level == "gmem" and d.arrays["P"].level == "gmem"   # between kernels
    fused = load("attention")
    assert fused.arrays["S"].level == "smem"                                 # inside the kernel


def test_graph_is_bipartite_and_acyclic():
    d = load("gqa")
    assert nx.is_directed_acyclic_graph(d.graph)
    assert set(d.graph.successors(("array", "Q"))) == {("op", "S")}
    assert list(d.graph.successors(("op", "S"))) == [("array", "S")]


def test_concatenated_ops_share_a_column_and_columns_are_reordered_topologically():
    data = attention_data()
    data["inputs"]["W"] = ["q", "d"]
    # O listed before S; a concat column holds two independent ops
    data["ops"] = [
        data["ops"][1],
        {"concat": [data["ops"][0],
                    {"name": "Qs", "primitive": "scale", "inputs": ["W"], "scale": 2,
                     "output": ["q", "d"]}]},
    ]
    data["outputs"] = ["O", "Qs"]
    data["kernels"] = None
    d = compile_data(data, source="t.yaml")
    assert [(o.name, o.column) for o in d.ops] == [("S", 0), ("Qs", 0), ("O", 1)]


def test_concatenated_ops_must_not_feed_each_other():
    data = attention_data()
    data["ops"] = [{"concat": data["ops"]}]
    with pytest.raises(NapkinError, match="depend on each other"):
        compile_data(data, source="t.yaml")


def test_a_kernel_cannot_fuse_around_an_op_outside_it():
    d = load_file(resources.shipped("diagrams")["attention_unfused"])
    d["kernels"] = [{"name": "outer", "ops": ["S", "O"]}, {"name": "mid", "ops": ["P"]}]
    with pytest.raises(NapkinError, match="cannot fuse around op 'P'"):
        compile_data(d, source="t.yaml")


def test_axis_size_expressions_and_defaults():
    d = load("causal_attention")
    q = next(s for s in d.size_symbols if s.name == "q")
    assert d.size("x") == q and d.defaults == {q: 16384, next(s for s in d.size_symbols
                                                                if s.name == "d"): 128}
