"""Bad diagrams: unknown keys, names, shapes and graphs as one-line errors, and odd valid diagrams analysed."""

from __future__ import annotations

import json

import pytest
from helpers_bad_input import SOURCE, check, compile_error, shipped

from analyzer.common.errors import NapkinError
from analyzer.diagram.graph import compile_data
from analyzer.model.analysis import analyze

# -- form: unknown keys --------------------------------------------------------------------------------

def _set(data: dict, path: tuple, key: str, value: object) -> None:
    node = data
    for part in path:
        node = node[part]
    node[key] = value


@pytest.mark.parametrize("path, field, allowed", [
    ((), "(top level)", "axes"),
    (("axes", "q"), "axes.q", "default"),
    (("ops", 0), "ops[0]", "primitive"),
    (("kernels", 0), "kernels[0]", "partition"),
    (("kernels", 0, "partition", "smem"), "kernels[0].partition.smem", "stream"),
])
def test_unknown_key_at_any_depth(path, field, allowed):
    data = shipped("attention")
    _set(data, path, "bogus", 1)
    err = compile_error(data)
    check(err, field=field, says=("unknown key 'bogus'", "allowed keys", allowed))


def test_unknown_key_inside_a_concatenation():
    data = shipped("matmul")
    data["ops"] = [{"concat": [{**data["ops"][0], "bogus": 1}]}]
    err = compile_error(data)
    check(err, field="ops[0].concat[0]", says=("unknown key 'bogus'",))


# regression: field paths dropped any part named "function" or "concatenation" (pydantic union tags),
# so this error said `axes` instead of `axes.function`.
def test_unknown_key_under_an_axis_named_like_a_union_tag():
    data = shipped("attention")
    data["axes"]["function"] = {"bogus": 1}
    err = compile_error(data)
    check(err, field="axes.function", says=("unknown key 'bogus'",))


# -- meaning: names ------------------------------------------------------------------------------------

@pytest.mark.parametrize("edit, fields", [
    (lambda d: d["inputs"].__setitem__("Q", ["q", "zz"]), ("inputs.Q[1]", "inputs.Q.axes[1]")),
    (lambda d: d["inputs"].__setitem__("Q", {"axes": ["q", "zz"]}), ("inputs.Q.axes[1]",)),
    (lambda d: d["ops"][0].__setitem__("output", ["q", "zz"]), ("ops[0].output[1]",)),
    (lambda d: d["ops"][0].__setitem__("over", "zz"), ("ops[0].over",)),
    (lambda d: d["kernels"][0]["partition"]["smem"]["group"].__setitem__("zz", "g_z"),
     ("kernels[0].partition.smem.group.zz",)),
    (lambda d: d["kernels"][0]["partition"]["smem"].__setitem__("stream", {"zz": "s_z"}),
     ("kernels[0].partition.smem.stream.zz",)),
], ids=["input", "input-long-form", "op-output", "over", "group-partition", "stream-partition"])
def test_unknown_axis(edit, fields):
    data = shipped("attention")
    edit(data)
    err = compile_error(data)
    check(err, field=None, says=("unknown axis 'zz'",), hint="q, x, d")
    assert err.field in fields, err.one_line()


def test_unknown_axis_in_causal_mask_parameters():
    data = shipped("causal_attention")
    data["ops"][1]["key"] = "zz"
    check(compile_error(data), field="ops[1].key", says=("unknown axis 'zz'",))


def test_unknown_primitive_suggests_the_closest_name():
    data = shipped("attention")
    data["ops"][0]["primitive"] = "dott"
    check(compile_error(data), field="ops[0].primitive", says=("unknown primitive 'dott'",),
          hint="did you mean dot?")
    data["ops"][1]["primitive"] = "softmax_dott"
    data["ops"][0]["primitive"] = "dot"
    check(compile_error(data), field="ops[1].primitive", says=("unknown primitive 'softmax_dott'",),
          hint="did you mean softmax_dot?")


@pytest.mark.parametrize("op, param, value", [
    (0, "scale", 2),          # dot takes no scale
    (0, "query", "q"),        # only causal_mask takes query/key
    (1, "key", "x"),
])
def test_parameter_a_primitive_does_not_take(op, param, value):
    data = shipped("attention")
    data["ops"][op][param] = value
    prim = data["ops"][op]["primitive"]
    check(compile_error(data), field=f"ops[{op}].{param}",
          says=(f"primitive {prim} takes no `{param}`",), hint="over")


def test_parameter_over_on_an_elementwise_primitive():
    data = shipped("causal_attention")
    data["ops"][1]["over"] = "x"
    check(compile_error(data), field="ops[1].over", says=("takes no `over`",))


def test_unknown_input_array():
    data = shipped("attention")
    data["ops"][1]["inputs"] = ["S", "W"]
    check(compile_error(data), field="ops[1].inputs[1]", says=("unknown array 'W'",))


# -- meaning: shapes -----------------------------------------------------------------------------------

@pytest.mark.parametrize("output", [["q", "d"], ["q"], ["q", "x", "d"]])
def test_output_axes_disagree_with_the_shape_rule(output):
    data = shipped("attention")
    data["ops"][0]["output"] = output
    check(compile_error(data), field="ops[0].output", says=("op 'S' (dot)", "does not match"),
          hint="the shape rule of dot gives axes")


# regression: the hint said "the shape rule of dot gives axes {q, q, x}".
def test_shape_rule_hint_lists_each_axis_once():
    data = shipped("attention")
    data["ops"][0]["output"] = ["q", "d"]
    err = compile_error(data)
    check(err, field="ops[0].output", hint="the shape rule of dot gives axes {q, x}")


def test_dot_whose_input_lacks_the_over_axis():
    data = shipped("attention")
    data["ops"][0]["over"] = "q"                 # K is [x, d]: it has no q to contract
    err = compile_error(data)
    line = check(err, field=None, says=("dot acts on axis 'q'", "[x, d]"))
    assert err.field in ("ops[0]", "ops[0].over", "ops[0].inputs[1]"), line


def test_softmax_dot_whose_input_lacks_the_over_axis():
    data = shipped("mha")
    data["inputs"]["V"] = ["h", "q", "d"]        # softmax_dot over x needs x in V
    data["ops"][1]["output"] = ["h", "q", "d"]
    err = compile_error(data)
    line = check(err, field=None, says=("acts on axis 'x'",))
    assert err.field.startswith("ops[1]"), line


# -- meaning: graph ------------------------------------------------------------------------------------

def test_cycle_between_ops():
    data = shipped("matmul")
    data["ops"] += [{"name": "P", "primitive": "relu", "inputs": ["R"], "output": ["a", "c"]},
                    {"name": "R", "primitive": "add", "inputs": ["C", "P"], "output": ["a", "c"]}]
    data["outputs"] = ["R"]
    del data["kernels"]
    line = check(compile_error(data), field="ops", says=("cycle",))
    assert "P" in line and "R" in line


def test_op_using_its_own_output():
    data = shipped("matmul")
    data["ops"][0]["inputs"] = ["A", "C"]
    check(compile_error(data), field="ops[0].inputs[1]", says=("its own output",))


def test_weave_naming_a_missing_axis():
    data = shipped("attention")
    data["ops"][0]["weave"] = ["q", "zz"]
    check(compile_error(data), field="ops[0].weave[1]", says=("unknown axis 'zz'",))


def test_weave_differing_from_the_derived_one():
    data = shipped("attention")
    data["ops"][0]["weave"] = ["q"]               # S = Q K^T is weaved by q and x
    check(compile_error(data), field="ops[0].weave", says=("weave [q] differs", "[q, x]"))


def test_weave_matching_the_derived_one_is_accepted():
    data = shipped("attention")
    data["ops"][0]["weave"] = ["x", "q"]
    compile_data(data, source=SOURCE)


def test_unused_input():
    data = shipped("attention")
    data["inputs"]["Z"] = ["q", "d"]
    check(compile_error(data), field="inputs.Z", says=("input 'Z' is never used",))


def test_op_whose_output_is_unused():
    data = shipped("attention")
    data["ops"].append({"name": "E", "primitive": "exp", "inputs": ["S"], "output": ["q", "x"]})
    check(compile_error(data), field="ops[2]", says=("op 'E'", "neither used nor listed in outputs"))


# -- valid diagrams that used to crash (found by fuzzing) ----------------------------------------------

# regression: ValueError "H* term ... is not a power of M" from optimize.standard_form.
@pytest.mark.parametrize("x", [{"default": 16384}, {"default": 4096}, {"size": "d"}, {"size": "d+d"}])
def test_causal_mask_with_a_separate_key_axis(x):
    """A valid diagram (causal cross-attention): it must be analysed, not crash."""
    data = shipped("causal_attention")
    data["axes"]["x"] = x
    result = analyze(compile_data(data, source=SOURCE), "h100")
    assert 0 < result.totals.predicted_time_s < float("inf")


# regression: IndexError in hierarchy.model_levels.
@pytest.mark.parametrize("name, gpu", [("attention", "h100"), ("matmul", "t4")])
def test_diagram_whose_lowest_level_is_a_cache(name, gpu):
    data = shipped(name)
    data["levels"] = ["gmem", "l2"]
    del data["kernels"]
    diagram = compile_data(data, source=SOURCE)
    try:
        analyze(diagram, gpu)
    except NapkinError as exc:
        assert "l2" in exc.one_line()


# regression: `ops: []` on a diagram's one kernel said "a kernel needs its list of ops when there are
# several kernels".
def test_kernel_that_lists_no_ops():
    data = shipped("attention")
    data["kernels"][0]["ops"] = []
    err = check(compile_error(data), field="kernels[0].ops", says=("kernel 'flash' lists no ops",))
    assert "several" not in err


def test_kernel_without_ops_beside_another():
    data = shipped("attention")
    data["kernels"].append({"name": "other", "partition": {}})
    check(compile_error(data), field="kernels[1].ops",
          says=("kernel 'other' does not list its ops", "2 kernels"))


# regression: a mapping key that is not text gave the field path `axes.None.[key]`.
@pytest.mark.parametrize("section, key", [("axes", None), ("inputs", 5)])
def test_mapping_key_that_is_not_a_name(section, key):
    data = shipped("attention")
    data[section][key] = {"default": 3} if section == "axes" else ["q"]
    line = check(compile_error(data), field=section, says=("the key", "is not valid", str(key)))
    assert "[key]" not in line and "None." not in line


def test_error_lines_are_json_safe():
    """one_line() is plain text: printing it as JSON and back gives the same line."""
    data = shipped("attention")
    data["ops"][0]["primitive"] = "dott\n\ttab"
    line = compile_error(data).one_line()
    assert "\n" not in line and json.loads(json.dumps(line)) == line
