"""Regressions of issue 19's first two findings: text from a diagram ran as code, and array names
collided with the generated code's own (tests/property/test_generated_names.py draws many more)."""

from __future__ import annotations

import ast
import builtins

import pytest
import yaml

from analyzer.codegen import generate
from analyzer.codegen.escape import cpp_comment, cpp_str, py_comment, py_doc, py_str
from analyzer.codegen.names import Scope
from analyzer.common.errors import NapkinError

torch = pytest.importorskip("torch")
pytest.importorskip("triton")

from helpers_kernel import written  # noqa: E402

CANARY = "NAPKIN_CANARY"
RUN = f"__import__('builtins').__setattr__('{CANARY}', 1)"


def matmul_yaml(x="A", w="B", out="C", *, name="mm", axes=("a", "b", "c"), **text) -> dict:
    a, b, c = axes
    return {"name": name, **text, "axes": {a: {"default": 256}, b: {"default": 256}, c: {"default": 256}},
            "inputs": {x: [a, b], w: [b, c]},
            "ops": [{"name": out, "primitive": "dot", "inputs": [x, w], "over": b, "output": [a, c]}],
            "outputs": [out],
            "kernels": [{"name": "gemm", "partition": {"smem": {"group": {a: "g_a", c: "g_c"},
                                                                "stream": {b: "s_b"}}}}]}


def load(data: dict, tmp, filename: str = "d"):
    """Write `data` as a diagram file, generate its Triton module, write and import it."""
    source = tmp / f"{filename}.yaml"
    source.write_text(yaml.safe_dump(data, sort_keys=False))
    g = generate(str(source), "h200", backend="triton", sets={a: 256 for a in data["axes"]})
    return g, written(g, tmp)


def check_matmul(module, m=33, k=20, n=17):
    gen = torch.Generator().manual_seed(m * k * n)
    x = torch.randn(m, k, generator=gen).half()
    w = torch.randn(k, n, generator=gen).half()
    (name,) = module.__all__
    out = getattr(module, name)(x, w)
    ref = x.double() @ w.double()
    # fp16 in and out, fp32 accumulation over k = 20: about 1e-3 relative; a mix-up is of order 1
    assert ((out.double() - ref).norm() / ref.norm()).item() < 1e-2


@pytest.mark.parametrize("x, w", [("X", "W"), ("A", "a"), ("out", "t"), ("torch", "triton"), ("N", "Size"),
                                  ("In", "Lambda"), ("tensor", "name"), ("size", "stride"),
                                  ("config", "Config")])
def test_inputs_named_like_the_generated_code_compute_the_product(x, w, tmp_path):
    """X and W returned W @ W (the wrapper's loop variable was x); out, t, torch, triton, N, Size failed
    at call time; A and a, In and Lambda (in, lambda once lower-cased) gave modules that did not parse."""
    _, module = load(matmul_yaml(x, w), tmp_path)
    check_matmul(module)


def test_diagram_named_like_a_keyword_or_a_module_global(tmp_path):
    for name in ("class", "torch", "CONFIGS", "math", "print"):
        _, module = load(matmul_yaml(name=name), tmp_path)
        (wrapper,) = module.__all__
        assert wrapper.startswith(name) and wrapper != name     # a spelling of its own: class_2
        check_matmul(module)


def test_axes_that_differ_only_in_case_get_a_tile_each(tmp_path):
    g, module = load(matmul_yaml("A", "B", axes=("q", "Q", "d")), tmp_path)
    check_matmul(module)
    # rows q and the streamed Q both want BLOCK_Q: the second claim gets a spelling of its own
    assert "BLOCK_Q: tl.constexpr" in g.source and "BLOCK_Q_2: tl.constexpr" in g.source


def test_mlp2_with_input_x_matches_float64(tmp_path):
    """The shipped mlp2 (input X) returned relative errors of 0.96 at 64^3."""
    g = generate("mlp2", "h200", sets={"n": 4096, "i": 64, "f": 2048, "o": 64}, backend="triton")
    m = written(g, tmp_path)
    gen = torch.Generator().manual_seed(2)
    x, w1, w2 = (torch.randn(*s, generator=gen).half() * 0.3 for s in ((64, 64), (64, 96), (96, 64)))
    out = m.mlp2(x, w1, w2)
    ref = torch.relu(x.double() @ w1.double()) @ w2.double()
    assert ((out.double() - ref).norm() / ref.norm()).item() < 1e-2


@pytest.mark.parametrize("field", ["title", "paper", "doc"])
@pytest.mark.parametrize("text", [f"\n{RUN}\n", f'"""\n{RUN}\n"""', f"\r{RUN}", f"\\\n{RUN}",
                                  f"{{{RUN}}}", f"\u2028{RUN}"])
def test_text_of_the_diagram_never_runs(field, text, tmp_path):
    assert not hasattr(builtins, CANARY)
    g, module = load(matmul_yaml(**{field: text}), tmp_path)
    check_matmul(module)
    assert not hasattr(builtins, CANARY)
    cuda = generate(str(tmp_path / "d.yaml"), "h200", backend="cuda", sets={"a": 256, "b": 256, "c": 256})
    ast.parse(cuda.extra[".py"])
    assert all(line.startswith("//") or not line.strip() or RUN not in line for line in cuda.source.splitlines())


@pytest.mark.parametrize("filename", ['quote"d', 'tri"""ple', "new\nline", "back\\slash", f'x"""\n{RUN}\n#'])
def test_a_file_name_with_quotes_or_line_breaks_stays_text(filename, tmp_path):
    _, module = load(matmul_yaml(), tmp_path, filename)
    check_matmul(module)
    assert not hasattr(builtins, CANARY)


@pytest.mark.parametrize("text", [f"\n{RUN}\n", f'"""\n{RUN}\n"""', f"\u2028{RUN}", f"*/\n{RUN}"])
def test_text_of_a_profile_never_runs(text, tmp_path):
    """A profile of one's own names the GPU in the generated header (and, calibrated, the model that
    ranked the configurations): its name and description reach the Python and C++ files as text."""
    from analyzer import hardware
    data = hardware.load("h200").model_dump(exclude={"aliases"})
    data.update(name=f"mine{text}", description=text)
    profile = tmp_path / "mine.yaml"
    profile.write_text(yaml.safe_dump(data, sort_keys=False))
    source = tmp_path / "d.yaml"
    source.write_text(yaml.safe_dump(matmul_yaml(), sort_keys=False))
    sets = {"a": 256, "b": 256, "c": 256}
    g = generate(str(source), str(profile), backend="triton", sets=sets)
    assert f"--gpu {profile}" in g.command             # the file regenerates it, not the name inside
    module = written(g, tmp_path)
    check_matmul(module)
    assert not hasattr(builtins, CANARY)
    cuda = generate(str(source), str(profile), backend="cuda", sets=sets)
    ast.parse(cuda.extra[".py"])
    assert all(line.startswith("//") or not line.strip() or RUN not in line for line in cuda.source.splitlines())


@pytest.mark.parametrize("name", ["a\n", "a b", "1a", "é", "a-b", "_a"])
def test_names_are_checked_as_whole_strings(name, tmp_path):
    """`a\\n` passed a `$`-anchored pattern; every name must be an identifier start to end."""
    with pytest.raises(NapkinError, match="not a valid name"):
        load(matmul_yaml(x=name), tmp_path)


# -- the escapers and the scope themselves -----------------------------------------------------------

WEIRD = ["", "plain", "\n", "\r\n", '"""', "'''", "\\", "a\\", "\u2028\u2029\x85", "\x00\x0c\x1b", "??/",
         "*/", "{x}", "é ü 字", "\ud800"]


@pytest.mark.parametrize("text", WEIRD)
def test_python_escapers_round_trip_and_stay_on_one_line(text):
    assert ast.literal_eval(py_str(text)) == text
    comment = py_comment(text)
    assert len(f"# {comment}\nx = 1".splitlines()) == 2 and ast.parse(f"# {comment}\nx = 1")
    doc = ast.parse(f'"""{py_doc(text)}"""').body[0].value.value
    assert doc == text or not text.isprintable()         # non-printables are shown escaped, one line
    assert "\n" not in py_doc(text) and "\r" not in py_doc(text)


@pytest.mark.parametrize("text", WEIRD)
def test_cpp_escapers_never_end_a_comment_line_or_a_string(text):
    comment = cpp_comment(text)
    assert comment.isprintable() and not comment.endswith("\\") and "??" not in comment
    literal = cpp_str(text)
    inner = literal[1:-1]
    assert literal[0] == literal[-1] == '"' and '"' not in inner.replace('\\"', "")
    assert all(c.isascii() and c.isprintable() for c in literal)


def test_scope_gives_each_thing_its_own_identifier():
    s = Scope(["pid", "t"])
    assert s("{}_val", "acc") == "acc_val"
    assert s("acc_{}", "val") == "acc_val_2"          # the same spelling from another template
    assert s("{}_val", "acc") == "acc_val"            # the same thing: the same identifier
    assert s("TILE_{}", "q", case="upper") == "TILE_Q"
    assert s("TILE_{}", "Q", case="upper") == "TILE_Q_2"
    assert s("{}", "class") == "class_2" and s("{}", "t") == "t_2" and s("{}", "pid") == "pid_2"
    child = Scope([], parent=s)
    assert child("{}", "acc_val") == "acc_val_3"      # never shadows the enclosing scope's names
    cpp = Scope([], cpp=True)
    assert cpp("{}_ptr", "a__b") == "a_b_ptr" and cpp("{}", "_x") == "x"
