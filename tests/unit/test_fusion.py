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


def _local(window: int | None = 4096, cap_after_mask: bool = False) -> dict:
    """gemma2_local_attention's file, with another window, or with its softcap moved after the mask."""
    data = copy.deepcopy(load_file(resources.shipped("diagrams")["gemma2_local_attention"]))
    by = {o["name"]: o for o in data["ops"]}
    if window is not None:
        by["Cw"]["window"] = window
    if cap_after_mask:      # S -> Ss -> Cw -> C -> O: the mask before the cap
        by["Cw"]["inputs"], by["C"]["inputs"], by["O"]["inputs"] = ["Ss"], ["Cw"], ["C", "V"]
        data["ops"] = [by[n] for n in ("S", "Ss", "Cw", "C", "O")]
    return data


def test_a_window_skips_blocks_before_it_too():
    d = compile_data(_local(100), source="t.yaml")
    s = schedule(d, d.kernels[0], "smem")
    assert s.skip is not None and s.skip.mask.name == "Cw" and s.skip.before == 99


def test_a_mask_before_an_op_that_turns_minus_infinity_into_a_weight_skips_nothing():
    """cap tanh(-inf / cap) = -cap: the softmax weighs what the mask hid, so no block may be dropped."""
    d = compile_data(_local(cap_after_mask=True), source="t.yaml")
    s = schedule(d, d.kernels[0], "smem")
    assert s.skip is None and "C (softcap) turns masked scores into numbers O counts" in s.notes[0]


@pytest.mark.parametrize("window, message", [
    (0, "a whole number of keys, at least 1"), (2.5, "a whole number of keys"), ("q", "unknown name 'q'")])
def test_a_window_is_a_whole_number_of_keys(window, message):
    with pytest.raises(NapkinError, match=message):
        compile_data(_local(window), source="t.yaml")


def test_window_mask_needs_its_window():
    data = _local()
    del data["ops"][3]["window"]
    with pytest.raises(NapkinError, match="window_mask needs a `window`"):
        compile_data(data, source="t.yaml")
