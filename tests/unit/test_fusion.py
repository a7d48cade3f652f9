"""Appendix A.1: which relabellings are legal, and the loop form they imply."""

import copy

import pytest
import yaml

from analyzer.common import resources
from analyzer.common.errors import NapkinError
from analyzer.common.yamlio import load_file
from analyzer.diagram.graph import compile_data
from analyzer.model.fusion import schedule


def compiled(name, **edits):
    data = copy.deepcopy(load_file(resources.shipped("diagrams")[name]))
    for key, value in edits.items():
        data[key] = value
    return compile_data(yaml.safe_load(yaml.safe_dump(data)), source=f"{name}.yaml")


def partitioned(name, partition, ops=None):
    d = compiled(name)
    kernel = {"name": "k", "partition": {"smem": partition}}
    if ops is not None:
        kernel["ops"] = ops
    data = copy.deepcopy(load_file(resources.shipped("diagrams")[name]))
    data["kernels"] = [kernel]
    d = compile_data(data, source=f"{name}.yaml")
    return schedule(d, d.kernels[0], "smem")


def test_attention_loop_form():
    s = partitioned("attention", {"group": {"q": "g_q"}, "stream": {"x": "s_x"}})
    assert [o.name for o in s.body] == ["S", "O"] and not s.head and not s.tail
    assert s.loads == ("Q", "K", "V") and s.saves == ("O",)
    (r,) = s.reducers
    assert r.op.name == "O" and r.accumulator.aux_per_row == 2 and r.rows == ("q",)


def test_a_reduced_axis_cannot_be_grouped():
    with pytest.raises(NapkinError, match="cannot group axis 'd'.*op 'S' \\(dot\\) acts on 'd'"):
        partitioned("attention", {"group": {"d": "g_d"}})


def test_softmax_alone_cannot_be_streamed():
    data = copy.deepcopy(load_file(resources.shipped("diagrams")["attention_unfused"]))
    data["kernels"] = [{"name": "k", "ops": ["S", "P", "O"]}]
    data["outputs"] = ["O", "P"]   # P is saved, so it is no longer the dot's private input
    data["kernels"][0]["partition"] = {"smem": {"group": {"q": "g_q"}, "stream": {"x": "s_x"}}}
    d = compile_data(data, source="t.yaml")
    with pytest.raises(NapkinError, match="softmax\\) needs the whole of 'x'"):
        schedule(d, d.kernels[0], "smem")


def test_softmax_followed_by_a_contraction_streams():
    data = copy.deepcopy(load_file(resources.shipped("diagrams")["attention_unfused"]))
    data["kernels"] = [{"name": "k", "partition": {"smem": {"group": {"q": "g_q"},
                                                            "stream": {"x": "s_x"}}}}]
    d = compile_data(data, source="t.yaml")
    s = schedule(d, d.kernels[0], "smem")
    (r,) = s.reducers
    assert r.op.name == "O" and r.softmax.name == "P" and r.accumulator.aux_per_row == 2


def test_an_axis_used_after_its_reduction_cannot_be_streamed():
    with pytest.raises(NapkinError, match="uses 'd' after op 'S' has reduced it"):
        partitioned("attention", {"group": {"q": "g_q"}, "stream": {"d": "s_d"}})


def test_head_and_tail_around_the_loop():
    data = copy.deepcopy(load_file(resources.shipped("diagrams")["attention"]))
    data["ops"] = [{"name": "Qs", "primitive": "scale", "inputs": ["Q"], "scale": "d**-0.5",
                    "output": ["q", "d"]},
                   {"name": "S", "primitive": "dot", "inputs": ["Qs", "K"], "over": "d",
                    "output": ["q", "x"]},
                   {"name": "Ou", "primitive": "softmax_dot", "inputs": ["S", "V"], "over": "x",
                    "output": ["q", "d"]},
                   {"name": "O", "primitive": "relu", "inputs": ["Ou"], "output": ["q", "d"]}]
    data["kernels"][0]["ops"] = ["Qs", "S", "Ou", "O"]
    d = compile_data(data, source="t.yaml")
    s = schedule(d, d.kernels[0], "smem")
    assert ([o.name for o in s.head], [o.name for o in s.body], [o.name for o in s.tail]) == \
        (["Qs"], ["S", "Ou"], ["O"])


def test_causal_mask_skips_blocks_only_when_every_reduction_ignores_masked_items():
    s = partitioned("causal_attention", {"group": {"q": "g_q"}, "stream": {"x": "s_x"}})
    assert s.skip is not None and (s.skip.query, s.skip.key) == ("q", "x")
    data = copy.deepcopy(load_file(resources.shipped("diagrams")["causal_attention"]))
    data["ops"].append({"name": "T", "primitive": "sum", "inputs": ["S"], "over": "x",
                        "output": ["q"]})
    data["outputs"].append("T")   # a plain sum of the unmasked scores: every block counts
    d = compile_data(data, source="t.yaml")
    s = schedule(d, d.kernels[0], "smem")
    assert s.skip is None and "does not skip blocks" in s.notes[0]


def test_a_schedule_is_remembered_per_diagram_object_and_dropped_with_it():
    """fusion.schedule keeps what it derived on the diagram object (sweeps ask again for every
    candidate); a diagram compiled again is not served another's, and one gone takes its schedules."""
    import gc
    import weakref
    from dataclasses import replace

    from analyzer.model import fusion
    from analyzer.model.analysis import load
    d = replace(load("attention"))          # a copy the loader's cache does not hold
    k = d.kernels[0]
    first = fusion.schedule(d, k, "smem")
    assert fusion.schedule(d, k, "smem") is first
    assert fusion.schedule(d, k, "gmem") is not first
    assert fusion.schedule(replace(d), k, "smem") is not first
    gone = weakref.ref(d)
    del d, k, first
    gc.collect()
    assert gone() is None
