"""Bad input, category by category: every malformed diagram, profile or request is a NapkinError.

The project's rule: bad input gives one line, `<file>: <field path>: <message> (hint: <hint>)`, never a
traceback, a hang or a wrong answer. These tests check it at the library level: each builds a bad
diagram by deep-copying a shipped one and editing the dict, then asserts that compiling (or analysing)
it raises a NapkinError whose one_line() names the file, the right field path and a useful message.

Tests commented "regression" cover napkin bugs found while writing these tests (a traceback, a hang or a
wrong message before the fix); should one come back, mark its test
`@pytest.mark.xfail(reason="napkin bug: ...", strict=True)` rather than weakening it.
"""

from __future__ import annotations

import copy
import json
import re
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
import yaml

from analyzer import hardware
from analyzer.cli import main
from analyzer.common import resources
from analyzer.common.errors import NapkinError
from analyzer.common.expr import parse_expr
from analyzer.common.yamlio import load_file, load_text
from analyzer.diagram.graph import compile_data
from analyzer.model.analysis import analyze, load

SOURCE = "x.yaml"
ROOT = Path(__file__).resolve().parents[2]


# -- helpers -------------------------------------------------------------------------------------------

def shipped(name: str) -> dict:
    """A deep copy of a shipped diagram's data, ready to be edited."""
    return copy.deepcopy(load_file(resources.shipped("diagrams")[name]))


def shipped_profile(name: str) -> dict:
    return copy.deepcopy(load_file(resources.shipped("hardware")[name]))


def compile_error(data: dict) -> NapkinError:
    with pytest.raises(NapkinError) as info:
        compile_data(data, source=SOURCE)
    return info.value


def analyze_error(data: dict, gpu: str = "h100", **options) -> NapkinError:
    """The error of compiling and analysing `data` (compiling must succeed)."""
    diagram = compile_data(data, source=SOURCE)
    with pytest.raises(NapkinError) as info:
        analyze(diagram, gpu, **options)
    return info.value


def check(err: NapkinError, *, field: str | None, says: tuple[str, ...] = (), hint: str | None = None,
          file: str | None = SOURCE) -> str:
    """The error names `file` and `field` and its message says every fragment in `says`."""
    line = err.one_line()
    assert "\n" not in line and "Traceback" not in line, line
    if file is not None:
        assert err.file == file, line
        assert line.startswith(f"{file}: "), line
    if field is not None:
        assert err.field == field, line
        if file is not None:
            assert line.startswith(f"{file}: {field}: "), line
        else:
            assert f"{field}: " in line, line
    for fragment in says:
        assert fragment in err.message, line
    if hint is not None:
        assert err.hint is not None and hint in err.hint, line
    return line


def run_isolated(script: str, payload: str = "", timeout: float = 8.0) -> str:
    """Run `script` in a fresh interpreter with `payload` on stdin; its last stdout line, or 'hang'.

    For inputs that might hang napkin in C code (big-integer powers), which no signal can interrupt.
    """
    try:
        proc = subprocess.run([sys.executable, "-c", textwrap.dedent(script)], input=payload,
                              capture_output=True, text=True, timeout=timeout, cwd=ROOT)
    except subprocess.TimeoutExpired:
        return "hang"
    lines = proc.stdout.strip().splitlines()
    if proc.returncode != 0 or not lines:
        return "crash: " + (proc.stderr.strip().splitlines() or ["?"])[-1]
    return lines[-1]


PIPELINE = """
    import sys, yaml
    from analyzer.model.analysis import analyze
    from analyzer.diagram.graph import compile_data
    from analyzer.common.errors import NapkinError
    try:
        analyze(compile_data(yaml.safe_load(sys.stdin.read()), source="x.yaml"), "h100")
        print("ok")
    except NapkinError as exc:
        print("napkin: " + exc.one_line())
"""


# -- YAML ----------------------------------------------------------------------------------------------

@pytest.mark.parametrize("text", [
    "name: attention\nlevels: [gmem, smem\naxes: {}\n",      # unclosed flow sequence
    "name: attention\n  levels: [gmem]\n axes: {}\n",         # bad indentation
    "name: 'attention\n",                                     # unclosed quote
    "name: attention\n\tlevels: [gmem, smem]\n",              # tab indentation
])
def test_invalid_yaml_names_file_and_line(text):
    with pytest.raises(NapkinError) as info:
        load_text(text, source=SOURCE)
    err = info.value
    line = check(err, field=None, says=("invalid YAML",))
    assert err.field is not None and err.field.startswith("line "), line
    assert "column" in err.field, line


def test_yaml_aliases_are_rejected():
    text = "axes:\n  q: &size {default: 16}\n  x: *size\n"
    with pytest.raises(NapkinError) as info:
        load_text(text, source=SOURCE)
    err = info.value
    check(err, field="line 2, column 6", says=("invalid YAML", "aliases", "&size"))   # the anchor, first


def test_yaml_alias_bomb_is_rejected_quickly():
    rows = ["a: &a [x, x, x, x, x, x, x, x, x]"]
    rows += [f"{chr(98 + i)}: &{chr(98 + i)} [{', '.join(['*' + chr(97 + i)] * 9)}]" for i in range(8)]
    start = time.perf_counter()
    with pytest.raises(NapkinError) as info:
        load_text("\n".join(rows) + "\n", source=SOURCE)
    assert time.perf_counter() - start < 1.0
    check(info.value, field="line 1, column 4", says=("aliases",))


@pytest.mark.parametrize("text, field, key", [
    ("name: a\nlevels: [gmem, smem]\nname: b\n", "line 3, column 1", "name"),
    ("axes:\n  q: {default: 16}\n  d: {}\n  q: {default: 32}\n", "line 4, column 3", "q"),
    ("ops:\n  - name: S\n    over: d\n    over: x\n", "line 4, column 5", "over"),
])
def test_duplicate_keys_are_rejected(text, field, key):
    with pytest.raises(NapkinError) as info:
        load_text(text, source=SOURCE)
    check(info.value, field=field, says=("invalid YAML", f"duplicate key {key!r}"))


def test_yaml_integer_too_long_to_convert():
    with pytest.raises(NapkinError) as info:
        load_text("axes:\n  q: {default: " + "9" * 5000 + "}\n", source=SOURCE)
    check(info.value, field=None, says=("invalid YAML",))


def test_yaml_nested_too_deeply():
    with pytest.raises(NapkinError) as info:
        load_text("[" * 5000 + "]" * 5000, source=SOURCE)
    check(info.value, field=None, says=("nested too deeply",))


@pytest.mark.parametrize("text", ["? [a, b]\n: 1\n", "? {a: 1}\n: 1\n"])
def test_yaml_mapping_key_that_is_not_plain(text):
    with pytest.raises(NapkinError) as info:
        load_text(text, source=SOURCE)
    check(info.value, field="line 1, column 3", says=("not a plain value",))


# regression: YAML 1.1 read `0100` as 64 (octal) and `1:30` as 90 (sexagesimal); an anchor with no
# alias, !!set (its order follows the hash seed), !!binary and every other tag were taken.
@pytest.mark.parametrize("text, value", [
    ("0100", 100), ("1:30", "1:30"), ("12:30:00", "12:30:00"), ("yes", "yes"), ("no", "no"),
    ("on", "on"), ("off", "off"), ("Yes", "Yes"), ("2026-11-24", "2026-11-24"), ("1_000", "1_000"),
    ("0b101", "0b101"), ("=", "="), ("0o17", 15), ("0x1F", 31), ("1.98e9", 1.98e9), ("2e12", 2e12),
    ("-0.5", -0.5), (".5", 0.5), ("+3", 3), ("true", True), ("FALSE", False), ("~", None), ("null", None),
    ("'0100'", "0100"), ("!!str 0100", "0100"), ("!!int '12'", 12), ("!!float 3", 3.0),
])
def test_yaml_values_are_read_by_the_yaml_1_2_core_schema(text, value):
    assert load_text(f"a: {text}\n", source=SOURCE) == {"a": value}


def test_yaml_merge_key_is_a_plain_key():
    assert load_text("<<: {b: 1}\n", source=SOURCE) == {"<<": {"b": 1}}


@pytest.mark.parametrize("text, field, tag", [
    ("a: !!set {x, y}\n", "line 1, column 4", "!!set"),
    ("a: !!binary aGk=\n", "line 1, column 4", "!!binary"),
    ("a: !!timestamp 2026-11-24\n", "line 1, column 4", "!!timestamp"),
    ("a: !!omap [b: 1]\n", "line 1, column 4", "!!omap"),
    ("a: !custom 3\n", "line 1, column 4", "!custom"),
    ("a:\n  - 1\n  - !!python/tuple [1, 2]\n", "line 3, column 5", "!!python/tuple"),
    ("? !!set {x}\n: 1\n", "line 1, column 3", "!!set"),
])
def test_yaml_tags_other_than_the_core_ones_are_rejected(text, field, tag):
    with pytest.raises(NapkinError) as info:
        load_text(text, source=SOURCE)
    check(info.value, field=field, says=("invalid YAML", f"the tag {tag} is not supported"),
          hint="YAML 1.2")


@pytest.mark.parametrize("text", ["a: &x 3\n", "a: &x {b: 1}\n", "a: [&x 1]\n"])
def test_yaml_anchor_without_alias_is_rejected(text):
    with pytest.raises(NapkinError) as info:
        load_text(text, source=SOURCE)
    check(info.value, field=None, says=("anchors and aliases (&x)",))


@pytest.mark.parametrize("text, says", [("!!bool yes", "'yes' is not a bool"),
                                        ("!!int 1.5", "'1.5' is not an int"),
                                        ("!!null 0", "'0' is not a null")])
def test_yaml_core_tag_on_a_value_it_does_not_fit(text, says):
    with pytest.raises(NapkinError) as info:
        load_text(f"a: {text}\n", source=SOURCE)
    check(info.value, field="line 1, column 4", says=(says,))


def test_yaml_sizes_in_a_diagram_are_what_they_look_like():
    """A default of 0100 is 100 values, not 64 (YAML 1.1's octal): the analysis sees the size as written."""
    text = (ROOT / "diagrams" / "matmul.yaml").read_text()
    data = load_text(text.replace("default: 8192", "default: 0100", 1), source=SOURCE)
    assert data["axes"]["a"]["default"] == 100
    diagram = compile_data(data, source=SOURCE)
    assert {s.name: v for s, v in diagram.defaults.items()}["a"] == 100


def test_yaml_python_tags_are_rejected():
    with pytest.raises(NapkinError) as info:
        load_text("name: !!python/object/apply:os.system ['echo hi']\n", source=SOURCE)
    check(info.value, field="line 1, column 7", says=("invalid YAML",))


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


# -- legality of partitions (the fusion theorem) -------------------------------------------------------

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


# -- sizes ---------------------------------------------------------------------------------------------

@pytest.mark.parametrize("value", [0, -5])
def test_zero_or_negative_default(value):
    data = shipped("attention")
    data["axes"]["q"]["default"] = value
    check(compile_error(data), field="axes.q.default", says=("positive",))


@pytest.mark.parametrize("value", [0, -1])
def test_zero_or_negative_set(value):
    with pytest.raises(NapkinError) as info:
        analyze("attention", "h100", sets={"q": value})
    line = info.value.one_line()
    assert f"--set q={value}" in line and "positive" in line, line


@pytest.mark.parametrize("size", ["q-q", "0*q", "2-2", 0, -3, "1/2", "-q", "-2*q*d"])
def test_size_expression_that_is_not_a_positive_whole_number(size):
    data = shipped("causal_attention")
    data["axes"]["x"]["size"] = size
    check(compile_error(data), field="axes.x.size", says=("not a positive whole number",))


@pytest.mark.parametrize("size, sets, value", [
    ("q-d", {"q": 128}, "0"),              # 128 - 128
    ("d-q", {}, "-16256"),                 # 128 - 16384
    ("q/3", {"q": 128}, "128/3"),
])
def test_size_expression_evaluating_to_a_bad_size(size, sets, value):
    data = shipped("causal_attention")
    data["axes"]["x"]["size"] = size
    err = analyze_error(data, sets=sets)
    check(err, field="axes.x", says=("axis 'x'", value, "not a positive whole number"))


@pytest.mark.parametrize("size", ["-q", "d-q", "q/3"])
def test_diagrams_check_refuses_the_sizes_analyze_refuses(tmp_path, monkeypatch, capsys, size):
    """regression: napkin diagrams check passed `size: -q` and sizes that are no whole number at the
    file's defaults (d - q = -16256, q/3), which napkin analyze refused: check now says the same line."""
    data = shipped("causal_attention")
    data["axes"]["x"]["size"] = size
    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump(data))
    monkeypatch.delenv("NAPKIN_DEBUG", raising=False)
    lines = []
    for command in (["diagrams", "check"], ["analyze"]):
        monkeypatch.setattr(sys, "argv", ["napkin", *command, str(path)])
        with pytest.raises(SystemExit) as info:
            main()
        err = capsys.readouterr().err
        assert info.value.code == 1 and err.count("\n") == 1, err
        lines.append(err)
    assert lines[0] == lines[1] and f"{path}: axes.x" in lines[0] and "not a positive whole number" in lines[0]


def test_diagrams_check_passes_a_size_left_to_the_command_line(tmp_path, monkeypatch, capsys):
    """A size symbol without a default is given with --set: check evaluates the sizes the file fixes."""
    data = shipped("causal_attention")
    data["axes"]["q"].pop("default")          # x's size is q: neither has a number in the file
    path = tmp_path / "open.yaml"
    path.write_text(yaml.safe_dump(data))
    monkeypatch.setattr(sys, "argv", ["napkin", "diagrams", "check", str(path)])
    with pytest.raises(SystemExit) as info:
        main()
    assert info.value.code == 0 and capsys.readouterr().out.startswith(f"{path}: ok")


def test_unknown_name_in_a_size_expression():
    data = shipped("causal_attention")
    data["axes"]["x"]["size"] = "q*k"
    check(compile_error(data), field="axes.x.size", says=("unknown name 'k'",), hint="q")


# -- expressions that try to run code ------------------------------------------------------------------

CODE = [
    "__import__('os').system('echo hi')",
    "q.__class__",
    "q.__class__.__mro__",
    "lambda: 0",
    "(lambda: 1)()",
    "[1,2]",
    "{'a': 1}",
    "q if d else x",
    "q; import os",
    "open('/etc/passwd')",
    "q[0]",
    "q < d",
    "not q",
    "q and d",
    "f'{q}'",
    "'q'",
    "True",
    "None",
    "1j",
    "q @ d",
    "q // 2",
    "q % 2",
    "q << 2",
    "q\x00",
    "9**9**9",
    "2**q",
    "q**d",
    "((q+1)**16)**16",
    "q**17",
    "q**16*q**16",
    "q**1e300",
    "1e400",
    "10**15*q*1e16",
]


@pytest.mark.parametrize("text", CODE)
def test_size_expression_that_tries_to_run_code(text, capfd):
    data = shipped("causal_attention")
    data["axes"]["x"]["size"] = text
    start = time.perf_counter()
    err = compile_error(data)
    assert time.perf_counter() - start < 1.0
    check(err, field="axes.x.size", says=())
    out, errout = capfd.readouterr()
    assert "hi" not in out and "hi" not in errout


@pytest.mark.parametrize("text", CODE)
def test_scale_expression_that_tries_to_run_code(text, capfd):
    data = shipped("attention")
    data["ops"][1]["scale"] = text
    start = time.perf_counter()
    err = compile_error(data)
    assert time.perf_counter() - start < 1.0
    check(err, field="ops[1].scale", says=())
    assert "hi" not in capfd.readouterr().out


@pytest.mark.parametrize("text", ["__import__('os')", "q.real", "(lambda: 1)()", "[1,2]", "9**9**9",
                                  "((q+1)**16)**16"])
def test_parse_expr_rejects_code_directly(text):
    with pytest.raises(NapkinError) as info:
        parse_expr(text, names={"q", "d"}, field="f")
    assert "is not a size expression" in info.value.message or "exponent" in info.value.message


# regression: sympy computed nested constant powers exactly: parse_expr hung on these 43 characters.
def test_nested_constant_powers_do_not_hang():
    script = """
        import sys
        from analyzer.common.expr import parse_expr
        from analyzer.common.errors import NapkinError
        try:
            parse_expr(sys.stdin.read(), field="axes.x.size")
            print("ok")
        except NapkinError as exc:
            print("napkin: " + exc.one_line())
    """
    outcome = run_isolated(script, "((((((9**16)**16)**16)**16)**16)**16)**16", timeout=5)
    assert outcome.startswith("napkin: "), outcome


# regression: `default` had no upper bound (--set has 2**40) and the tile search enumerated divisors up
# to sqrt(size): default 10**18 hung.
def test_huge_default_fails_fast_or_analyses():
    data = shipped("matmul")
    data["axes"]["a"]["default"] = 10**18
    outcome = run_isolated(PIPELINE, yaml.safe_dump(data), timeout=8)
    assert outcome == "ok" or outcome.startswith("napkin: x.yaml: axes.a"), outcome


# regression: a constant size expression was not range-checked after evaluation: 1e30 hung the search.
def test_huge_constant_size_expression_fails_fast():
    data = shipped("matmul")
    data["axes"]["a"] = {"size": "1000000000000000*1000000000000000"}
    outcome = run_isolated(PIPELINE, yaml.safe_dump(data), timeout=8)
    assert outcome.startswith("napkin: x.yaml: axes.a"), outcome


# -- requests: GPU, dtype, --set -----------------------------------------------------------------------

@pytest.mark.parametrize("name, close", [("h10", "h100"), ("a10", "a100"), ("h2000", "h200"),
                                         ("t-4", "t4")])
def test_unknown_gpu_suggests_the_closest_name(name, close):
    with pytest.raises(NapkinError) as info:
        analyze("attention", name)
    err = info.value
    line = err.one_line()
    assert f"unknown GPU {name!r}" in err.message, line
    assert err.hint is not None and f"did you mean {close}?" in err.hint, line
    with pytest.raises(NapkinError):
        hardware.load(name)


def test_unknown_diagram_suggests_the_closest_name():
    with pytest.raises(NapkinError) as info:
        load("attn")
    err = info.value
    assert "unknown diagram 'attn'" in err.message and "attention" in (err.hint or ""), err.one_line()


@pytest.mark.parametrize("gpu, dtype, takes", [("a100", "fp8", "bf16"), ("t4", "bf16", "fp16"),
                                               ("t4", "fp8", "fp16")])
def test_dtype_the_gpu_lacks(gpu, dtype, takes):
    with pytest.raises(NapkinError) as info:
        analyze("attention", gpu, dtype=dtype)
    err = info.value
    line = err.one_line()
    assert gpu in err.message and dtype in err.message, line
    assert err.hint is not None and takes in err.hint and dtype not in err.hint.split(":")[-1], line


def test_dtype_the_gpu_lacks_set_in_the_file():
    data = shipped("attention")
    data["dtype"] = "fp8"
    assert "a100" in analyze_error(data, "a100").message
    data = shipped("attention")
    data["inputs"]["Q"] = {"axes": ["q", "d"], "dtype": "bf16"}
    assert "bf16" in analyze_error(data, "t4").message


def test_dtype_that_does_not_exist():
    with pytest.raises(NapkinError) as info:
        analyze("attention", "h100", dtype="fp64")
    line = check(info.value, field="dtype", file=None, says=("fp64",))
    assert "fp16" in line


@pytest.mark.parametrize("name, hint", [("zz", "known"), ("qq", "did you mean q?"),
                                        ("g_qq", "did you mean g_q?")])
def test_unknown_set_name(name, hint):
    with pytest.raises(NapkinError) as info:
        analyze("attention", "h100", sets={name: 64})
    err = info.value
    line = err.one_line()
    assert f"--set {name}" in line and "no size or tile size" in err.message, line
    assert err.hint is not None and hint in err.hint, line


def test_set_of_an_axis_whose_size_is_an_expression():
    with pytest.raises(NapkinError) as info:
        analyze("causal_attention", "h100", sets={"x": 4096})
    err = info.value
    line = err.one_line()
    assert "--set x" in line and "axis 'x'" in err.message and "q" in err.message, line
    assert err.hint is not None and "set q instead" in err.hint, line


def test_pinned_tile_size_breaking_a_divisor_rule():
    with pytest.raises(NapkinError) as info:
        analyze("attention", "h100", sets={"g_q": 3})      # wgmma needs g_q a multiple of 64
    err = info.value
    line = err.one_line()
    assert "g_q" in line and "64" in line, line
    found = re.search(r"needs ([0-9.]+) KiB, the limit is ([0-9.]+) KiB", err.message)
    assert found is None or float(found[1]) > float(found[2]), f"blames memory that fits: {line}"


def test_set_out_of_range():
    with pytest.raises(NapkinError) as info:
        analyze("attention", "h100", sets={"q": 2**41})
    assert "out of range" in info.value.message


# -- profiles ------------------------------------------------------------------------------------------

def profile_error(tmp_path: Path, edit) -> tuple[NapkinError, str]:
    data = shipped_profile("h100-sxm5")
    edit(data)
    path = tmp_path / "gpu.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False), encoding="utf-8")
    with pytest.raises(NapkinError) as info:
        analyze("attention", str(path))
    return info.value, str(path)


@pytest.mark.parametrize("edit, field, key", [
    (lambda p: p.pop("sm_count"), "(top level)", "sm_count"),
    (lambda p: p["clocks"].pop("tensor_hz"), "clocks", "tensor_hz"),
    (lambda p: p["levels"][0].pop("kind"), "levels[0]", "kind"),
    (lambda p: p["divisors"].pop("mma"), "divisors", "mma"),
])
def test_profile_with_a_missing_key(tmp_path, edit, field, key):
    err, path = profile_error(tmp_path, edit)
    check(err, file=path, field=field, says=(f"missing required key {key!r}",))


@pytest.mark.parametrize("value", [-3.35e12, 0])
def test_profile_with_a_negative_or_zero_bandwidth(tmp_path, value):
    err, path = profile_error(tmp_path, lambda p: p["levels"][0].__setitem__("bandwidth_bytes_per_s",
                                                                              value))
    check(err, file=path, field="levels[0].bandwidth_bytes_per_s", says=("greater than or equal to 1000000",))


def test_profile_with_a_negative_cluster_bandwidth(tmp_path):
    err, path = profile_error(
        tmp_path, lambda p: p["levels"][2]["bandwidth_bytes_per_s_by_cluster"].__setitem__(2, -1.0))
    check(err, file=path, field="levels[2].bandwidth_bytes_per_s_by_cluster[2]")


@pytest.mark.parametrize("value", [float("inf"), float("nan")])
def test_profile_with_a_bandwidth_that_is_not_finite(tmp_path, value):
    # regression: .inf passed PositiveFloat and was used (transfers then cost nothing).
    err, path = profile_error(tmp_path, lambda p: p["levels"][0].__setitem__("bandwidth_bytes_per_s",
                                                                              value))
    check(err, file=path, field="levels[0].bandwidth_bytes_per_s")


def test_profile_that_is_not_a_mapping(tmp_path):
    path = tmp_path / "gpu.yaml"
    path.write_text("- 1\n- 2\n", encoding="utf-8")
    with pytest.raises(NapkinError) as info:
        hardware.load(str(path))
    check(info.value, file=str(path), field="(top level)", says=("expected a mapping",))


def test_profile_with_a_bad_value_type(tmp_path):
    err, path = profile_error(tmp_path, lambda p: p.__setitem__("sm_count", "many"))
    check(err, file=path, field="sm_count", says=("many",))


# regression: the error named neither the profile file nor the field.
def test_profile_level_without_bandwidth_names_the_file(tmp_path):
    err, path = profile_error(tmp_path, lambda p: p["levels"][0].pop("bandwidth_bytes_per_s"))
    check(err, file=path, field="levels[0].bandwidth_bytes_per_s", says=("bandwidth",))


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
