"""Fuzzing: mutated shipped diagrams and random size expressions never crash or hang napkin.

Each shipped diagram's data is mutated at random (a key deleted, a value replaced by a random one, an
axis reference renamed, an op duplicated or dropped, two list items swapped, an unknown key added, and a
few edits that keep the diagram well formed so that the later stages get exercised too), written out
with yaml.safe_dump, read back through analyzer.common.yamlio and run through the whole pipeline: compile, and
if that succeeds, analyse on an H100 with the default sizes. Every outcome must be an Analysis or a
NapkinError (one line, naming the file when compiling failed); any other exception, or an example that
runs for more than a few seconds, fails the test.

Runs are reproducible (derandomize=True, no example database). Shrinking is left out: a failing
example is printed whole (as YAML), and shrinking a hang would take minutes.
"""

from __future__ import annotations

import contextlib
import copy
import math
import signal
import time

import pytest
import yaml
from hypothesis import HealthCheck, Phase, given, note, settings
from hypothesis import strategies as st

from analyzer.common import resources
from analyzer.common.errors import NapkinError
from analyzer.common.expr import parse_expr
from analyzer.common.yamlio import load_file, load_text
from analyzer.diagram.graph import compile_data
from analyzer.model.analysis import analyze
from analyzer.model.result import Analysis

SOURCE = "fuzz.yaml"
DIAGRAMS = sorted(resources.shipped("diagrams"))
BASE = {name: load_file(path) for name, path in resources.shipped("diagrams").items()}
EXAMPLES_PER_DIAGRAM = max(15, 240 // len(DIAGRAMS))   # about 240 in all: 15-20 s on 2 cores
EXAMPLE_LIMIT_S = 20.0             # one example running longer than this counts as a hang

FUZZ_SETTINGS = settings(max_examples=EXAMPLES_PER_DIAGRAM, deadline=None, derandomize=True,
                         database=None, phases=(Phase.explicit, Phase.generate),
                         suppress_health_check=list(HealthCheck), print_blob=False)


class Hang(Exception):
    pass


@contextlib.contextmanager
def time_limit(seconds: float):
    """Raise Hang in the main thread after `seconds` (interrupts Python code, not one long C call)."""
    def handler(signum, frame):
        raise Hang(f"took more than {seconds} s")
    previous = signal.signal(signal.SIGALRM, handler)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


# -- paths into nested data ----------------------------------------------------------------------------

def paths(node, prefix=()):
    """Every path (tuple of keys and indices) to a value inside `node`."""
    found = []
    if isinstance(node, dict):
        for key, value in node.items():
            found.append(prefix + (key,))
            found += paths(value, prefix + (key,))
    elif isinstance(node, list):
        for i, value in enumerate(node):
            found.append(prefix + (i,))
            found += paths(value, prefix + (i,))
    return found


def at(node, path):
    for part in path:
        node = node[part]
    return node


def axis_names(data) -> list[str]:
    axes = data.get("axes") if isinstance(data, dict) else None
    return [a for a in axes if isinstance(a, str)] if isinstance(axes, dict) else []


def array_names(data) -> list[str]:
    names = []
    if isinstance(data.get("inputs"), dict):
        names += [n for n in data["inputs"] if isinstance(n, str)]
    if isinstance(data.get("ops"), list):
        names += [op["name"] for op in data["ops"]
                  if isinstance(op, dict) and isinstance(op.get("name"), str)]
    return names


# -- random values -------------------------------------------------------------------------------------

EXPRESSIONS = ["q*2", "d**-0.5", "__import__('os')", "q+x", "q/2", "q-q", "2*q", "q**2", "h*d", "q**0.5",
               "x", "M", "1/0", "q**16", "q**17", "(q)", "-q", "q.__class__", "lambda: 0", "[1, 2]",
               "q if d else x", "9**9**9", "1e400", "0**-1", "(-1)**0.5", "g_q", "s_x"]
GARBAGE = ["", " ", "garbage!", "\t", "é", "a" * 300, "{", "[", "- x", "*", "&a", "null", "~", "0x10",
           "1e3", ".inf", "yes", "fp64", "smem", "gmem", "l2", "registers", "dot", "softmax",
           "concatenation", "function"]
INTS = st.one_of(st.integers(-3, 3), st.sampled_from([0, -1, -128, 7, 64, 100, 128, 4096, 16384,
                                                       2**20, 2**40, 2**41]),
                 st.integers(-2**31, 2**31))
FLOATS = st.one_of(st.sampled_from([0.0, -0.5, 0.5, 1.5, 128.0, 1e300, float("inf"), float("nan")]),
                   st.floats())


def values(data) -> st.SearchStrategy:
    names = axis_names(data) + array_names(data) or ["q"]
    text = st.one_of(st.sampled_from(names), st.sampled_from(EXPRESSIONS), st.sampled_from(GARBAGE),
                     st.text(max_size=12))
    scalars = st.one_of(INTS, FLOATS, text, st.none(), st.booleans())
    return st.one_of(
        scalars,
        st.lists(st.one_of(st.sampled_from(names), scalars), max_size=4),
        st.dictionaries(st.one_of(st.sampled_from(names), st.sampled_from(["size", "default", "group",
                                                                           "stream", "bogus"])),
                        scalars, max_size=3),
    )


# -- mutations -----------------------------------------------------------------------------------------

def delete_key(draw, data):
    ps = paths(data)
    if ps:
        path = draw(st.sampled_from(ps))
        del at(data, path[:-1])[path[-1]]


def replace_value(draw, data):
    ps = paths(data)
    if ps:
        path = draw(st.sampled_from(ps))
        at(data, path[:-1])[path[-1]] = draw(values(data))


def rename_axis_reference(draw, data):
    axes = axis_names(data)
    refs = [p for p in paths(data) if p[:1] != ("axes",) and isinstance(at(data, p), str)
            and at(data, p) in axes]
    keyed = [p for p in paths(data) if p[:1] == ("kernels",) and p[-1] in axes]   # partition keys
    choices = [("value", p) for p in refs] + [("key", p) for p in keyed]
    if not choices:
        return
    kind, path = draw(st.sampled_from(choices))
    new = draw(st.one_of(st.sampled_from(axes), st.sampled_from(["zz", "M", "q2", "Q", "g_q"])))
    parent = at(data, path[:-1])
    if kind == "value":
        parent[path[-1]] = new
    else:
        parent[new] = parent.pop(path[-1])


def op_lists(data):
    """The lists of ops: the top-level list and those of concatenations."""
    lists = [data["ops"]] if isinstance(data.get("ops"), list) else []
    for op in lists[0] if lists else []:
        if isinstance(op, dict) and isinstance(op.get("concat"), list):
            lists.append(op["concat"])
    return [lst for lst in lists if lst]


def duplicate_op(draw, data):
    lists = op_lists(data)
    if lists:
        ops = draw(st.sampled_from(lists))
        op = copy.deepcopy(draw(st.sampled_from(ops)))
        if isinstance(op, dict) and draw(st.booleans()):
            op["name"] = draw(st.sampled_from(["S2", "O2", "C2", "P2"]))
        ops.insert(draw(st.integers(0, len(ops))), op)


def drop_op(draw, data):
    lists = op_lists(data)
    if lists:
        ops = draw(st.sampled_from(lists))
        ops.pop(draw(st.integers(0, len(ops) - 1)))


def swap_items(draw, data):
    lists = [p for p in [()] + paths(data) if isinstance(at(data, p), list) and len(at(data, p)) >= 2]
    if lists:
        items = at(data, draw(st.sampled_from(lists)))
        i, j = draw(st.lists(st.integers(0, len(items) - 1), min_size=2, max_size=2, unique=True))
        items[i], items[j] = items[j], items[i]


def add_unknown_key(draw, data):
    dicts = [()] + [p for p in paths(data) if isinstance(at(data, p), dict)]
    target = at(data, draw(st.sampled_from(dicts)))
    key = draw(st.one_of(st.sampled_from(["bogus", "Size", "sizes", "partitions", "over", "weave",
                                          "concat", "function"]), st.integers(0, 3)))
    target[key] = draw(values(data))


PRIMITIVES = ["dot", "softmax_dot", "softmax", "exp", "sigmoid", "relu", "gelu", "scale", "add", "sub",
              "mul", "sum", "max", "causal_mask", "band_mask"]
LEVELS = [["gmem", "smem"], ["gmem", "l2", "smem"], ["gmem", "registers"], ["gmem", "smem", "registers"],
          ["smem", "gmem"], ["gmem", "l2"], ["l2", "smem"], ["gmem", "dsmem", "smem"], ["gmem"],
          ["gmem", "gmem"], ["gmem", "hbm"]]
DTYPES = ["fp32", "fp16", "bf16", "fp8"]


def well_formed_edit(draw, data):
    """Edits that keep the form valid, so that the graph, fusion and model stages see them."""
    axes = axis_names(data)
    ops = [op for op in (data.get("ops") or []) if isinstance(op, dict)] \
        if isinstance(data.get("ops"), list) else []
    kind = draw(st.sampled_from(["default", "size", "partition", "levels", "dtype", "primitive",
                                 "over", "op-dtype", "input-level", "kernels", "new-op"]))
    if kind == "default" and axes:
        spec = data["axes"][draw(st.sampled_from(axes))]
        if isinstance(spec, dict) and "size" not in spec:
            spec["default"] = draw(st.sampled_from([1, 2, 3, 7, 8, 16, 17, 64, 100, 127, 128, 1000,
                                                    4096, 65536, 2**20, 2**30, 2**40]))
    elif kind == "size" and len(axes) > 1:
        a = draw(st.sampled_from(axes))
        b = draw(st.sampled_from([x for x in axes if x != a]))
        if isinstance(data["axes"].get(b), dict) and data["axes"][b].get("size") is not None:
            return
        data["axes"][a] = {"size": draw(st.sampled_from(
            [b, f"2*{b}", f"{b}/2", f"{b}+{b}", f"{b}**2", f"{b}**0.5", f"{b}-1", f"{b}/{b}",
             f"3*{b}/4", f"{b}-{b}"]))}
        for c in axes:   # sizes may only name axes that have their own size symbol
            spec = data["axes"].get(c)
            if c != a and isinstance(spec, dict) and a in str(spec.get("size", "")):
                data["axes"][c] = {"default": 64}
    elif kind == "partition" and axes and isinstance(data.get("kernels"), list) and data["kernels"]:
        kernel = draw(st.sampled_from(data["kernels"]))
        if not isinstance(kernel, dict):
            return
        part = kernel.setdefault("partition", {})
        if not isinstance(part, dict):
            return
        level = part.setdefault(draw(st.sampled_from(["smem", "smem", "gmem", "l2", "registers"])), {})
        if not isinstance(level, dict):
            return
        mapping = level.setdefault(draw(st.sampled_from(["group", "stream"])), {})
        if isinstance(mapping, dict):
            if mapping and draw(st.booleans()):
                mapping.pop(draw(st.sampled_from(sorted(mapping, key=str))))
            else:
                mapping[draw(st.sampled_from(axes))] = draw(st.sampled_from(
                    ["g_new", "s_new", "g_q", "s_x", "g_z0", "g_z1", "q"]))
    elif kind == "levels":
        data["levels"] = list(draw(st.sampled_from(LEVELS)))   # a copy: later mutations edit it
    elif kind == "dtype":
        data["dtype"] = draw(st.sampled_from(DTYPES))
    elif kind == "primitive" and ops:
        draw(st.sampled_from(ops))["primitive"] = draw(st.sampled_from(PRIMITIVES))
    elif kind == "over" and ops and axes:
        draw(st.sampled_from(ops))[draw(st.sampled_from(["over", "query", "key"]))] = \
            draw(st.sampled_from(axes))
    elif kind == "op-dtype" and ops:
        draw(st.sampled_from(ops))[draw(st.sampled_from(["dtype", "accumulate"]))] = \
            draw(st.sampled_from(DTYPES))
    elif kind == "input-level" and isinstance(data.get("inputs"), dict) and data["inputs"]:
        name = draw(st.sampled_from(sorted(data["inputs"], key=str)))
        data["inputs"][name] = {"axes": data["inputs"][name],
                                "level": draw(st.sampled_from(["gmem", "smem", "l2"])),
                                "dtype": draw(st.sampled_from(DTYPES))}
    elif kind == "kernels" and ops:
        names = [op.get("name") for op in ops]
        if draw(st.booleans()):
            data["kernels"] = None
        else:
            data["kernels"] = [{"name": f"k{i}", "ops": [n]} for i, n in enumerate(names)]
            for i, kernel in enumerate(data["kernels"]):
                if axes and draw(st.booleans()):
                    grouped = draw(st.lists(st.sampled_from(axes), unique=True, max_size=len(axes)))
                    smem = {"group": {a: f"g_{a}{i}" for a in grouped}}
                    if draw(st.booleans()):
                        b = draw(st.sampled_from(axes))
                        smem["group"].pop(b, None)
                        smem["stream"] = {b: f"s_{b}{i}"}
                    kernel["partition"] = {"smem": smem}
    elif kind == "new-op" and axes and isinstance(data.get("ops"), list):
        arrays = array_names(data) or ["Q"]
        prim = draw(st.sampled_from(PRIMITIVES))
        arity = 2 if prim in ("dot", "softmax_dot", "add", "sub", "mul") else 1
        op = {"name": draw(st.sampled_from(["N1", "N2", "N3"])), "primitive": prim,
              "inputs": [draw(st.sampled_from(arrays)) for _ in range(arity)],
              "output": draw(st.lists(st.sampled_from(axes), unique=True, min_size=1, max_size=3))}
        if prim in ("dot", "softmax_dot", "softmax", "sum", "max"):
            op["over"] = draw(st.sampled_from(axes))
        if prim == "scale":
            op["scale"] = draw(st.sampled_from(["d**-0.5", 2, 0.5, "q"]))
        if prim in ("causal_mask", "band_mask"):
            op["query"], op["key"] = draw(st.sampled_from(axes)), draw(st.sampled_from(axes))
        if prim == "band_mask":
            for side in ("before", "after"):
                if draw(st.booleans()):
                    op[side] = draw(st.sampled_from([0, 1, 7, 256, -1, 2.5, "q"]))
        if draw(st.booleans()):
            op = {"concat": [op]}
        data["ops"].append(op)
        if isinstance(data.get("outputs"), list) and draw(st.booleans()):
            data["outputs"].append(op.get("name") or op["concat"][0]["name"])
        if draw(st.booleans()):
            data["kernels"] = None


# Half of the mutations keep the form valid: the other half nearly always stops at validation.
MUTATIONS = [delete_key, replace_value, rename_axis_reference, duplicate_op, drop_op, swap_items,
             add_unknown_key] + [well_formed_edit] * 7


@st.composite
def mutated(draw, name: str):
    data = copy.deepcopy(BASE[name])
    for _ in range(draw(st.integers(1, 3))):
        mutation = draw(st.sampled_from(MUTATIONS))
        mutation(draw, data)
    return data


# -- the property --------------------------------------------------------------------------------------

def run_pipeline(text: str) -> str:
    """'ok' or 'error'; anything but a NapkinError propagates."""
    try:
        diagram = compile_data(load_text(text, source=SOURCE), source=SOURCE)
    except NapkinError as exc:
        line = exc.one_line()
        assert "\n" not in line, line
        assert exc.file == SOURCE, f"a compile error must name the file: {line}"
        return "error"
    try:
        result = analyze(diagram, "h100")
    except NapkinError as exc:
        line = exc.one_line()
        assert "\n" not in line, line
        return "error"
    assert isinstance(result, Analysis)
    result.model_dump_json()
    time_s = result.totals.predicted_time_s
    assert math.isfinite(time_s) and time_s > 0, f"predicted time {time_s}"
    for size in result.sizes:
        assert size.value > 0, f"axis {size.axis} has size {size.value}"
    return "ok"


@pytest.mark.parametrize("name", DIAGRAMS)
@FUZZ_SETTINGS
@given(data=st.data())
def test_mutated_diagram_is_analysed_or_rejected(name, data):
    diagram = data.draw(mutated(name), label="diagram")
    text = yaml.safe_dump(diagram, sort_keys=False, allow_unicode=True)
    note(f"--- {name}, mutated:\n{text}")
    start = time.perf_counter()
    try:
        with time_limit(EXAMPLE_LIMIT_S):
            run_pipeline(text)
    except Hang:
        raise AssertionError(f"napkin hung (> {EXAMPLE_LIMIT_S} s) on:\n{text}") from None
    assert time.perf_counter() - start < EXAMPLE_LIMIT_S


# -- size expressions ----------------------------------------------------------------------------------

ATOM = r"(q|d|x|M|h|__class__|lambda|True|None|[0-9]{1,3}(\.[0-9]{1,2})?(e-?[0-9]{1,2})?)"
OPERATOR = r"(\+|-|\*|/|\*\*|//|%|\.|,|:| if | and |\[|\]|<)"
EXPRESSION_LIKE = rf"[-+( ]{{0,3}}{ATOM}\)?( ?{OPERATOR} ?[-+(]{{0,2}}{ATOM}\)?){{0,6}}"
PARSE_LIMIT_S = 2.0


@settings(max_examples=300, deadline=None, derandomize=True, database=None,
          phases=(Phase.explicit, Phase.generate), suppress_health_check=list(HealthCheck))
@given(text=st.one_of(st.text(max_size=80), st.from_regex(EXPRESSION_LIKE, fullmatch=True),
                      st.text(alphabet="qdx0123456789.e+-*/() ", max_size=40)))
def test_parse_expr_raises_only_napkin_error_and_is_fast(text):
    start = time.perf_counter()
    try:
        with time_limit(PARSE_LIMIT_S * 5):
            parse_expr(text, names={"q", "d", "x"}, field="axes.x.size")
    except NapkinError as exc:
        line = exc.one_line()
        assert "\n" not in line and line.startswith("axes.x.size: "), line
    except Hang:
        raise AssertionError(f"parse_expr hung on {text!r}") from None
    assert time.perf_counter() - start < PARSE_LIMIT_S, f"parse_expr took too long on {text!r}"


@settings(max_examples=150, deadline=None, derandomize=True, database=None,
          phases=(Phase.explicit, Phase.generate), suppress_health_check=list(HealthCheck))
@given(value=st.one_of(st.integers(), st.floats(), st.booleans(), st.none(), st.binary(max_size=8),
                       st.lists(st.integers(), max_size=3), st.dictionaries(st.text(max_size=3),
                                                                            st.integers(), max_size=2)))
def test_parse_expr_of_a_non_text_value(value):
    try:
        parse_expr(value, field="f")
    except NapkinError as exc:
        assert "\n" not in exc.one_line()
