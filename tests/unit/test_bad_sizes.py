"""Bad sizes: defaults, --set and size expressions that are no positive whole number, hang or try to run code."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import time

import pytest
import yaml
from helpers_bad_input import ROOT, analyze_error, check, compile_error, shipped

from analyzer.cli import main
from analyzer.common.errors import NapkinError
from analyzer.common.expr import parse_expr
from analyzer.model.analysis import analyze


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
