"""Diagram names that would collide or become code in the CUDA backend's .cu (issue 19): C++ keywords,
CUDA builtins, names the prelude defines, names that differ only in case, names with `__`, Python
keywords for the loader, and names that two of the generator's templates make into one identifier.

Each case renames a shipped diagram (its text, written to tmp_path) and is generated beside a plain twin:
the same diagram with its own names. Names change no code, so the two .cu files, comments and strings
left out, have the same tokens in the same order, and aligning them maps each plain identifier to the
adversarial one in its place. Within a kernel's functions (with the prelude, which they may call) that map
must be one-to-one: two things sharing an identifier (`m_new` of an op `new` and of the online softmax),
or one thing named two ways, break it; so must two kernels' functions at file level. nvcc then compiles
the adversarial files (marked slow)."""

from __future__ import annotations

import ast
import keyword
import re
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
import yaml
from test_kernel_cuda import NVCC, _compile, _import

from analyzer.codegen import generate
from analyzer.common import resources
from analyzer.common.yamlio import load_file

# A title and paper that would be code if the header did not escape them: a new line, a trigraph
# backslash, a line splice
TITLE = "adversarial\n#error the title became a line of code ??/\n*/ \\"
PAPER = "x\r\nint oops = 1; \u2028 \\"


def _whole_x(data: dict) -> None:
    """softmax_contraction with x whole in every block (no stream): its softmax and the register copy
    of its loaded scores are written as such (softmax_rows, `v_ld_<n>`), as no shipped kernel has them."""
    data["axes"]["x"]["default"] = 128
    data["kernels"][0]["partition"] = {"smem": {"group": {"q": "g_q", "d": "g_d"}}}


# case -> (shipped diagram, its names -> adversarial names, an edit of both twins)
CASES = {
    # the prelude's extern "C" napkin_set_device; stride_{q_k}_{d} and stride_{q}_{k_d}; size_{t}: size_t
    "matmul_templates": ("matmul", {"matmul": "set", "gemm": "device", "A": "q_k", "B": "q", "C": "float",
                                    "a": "d", "b": "k_d", "c": "t"}, None),
    # keywords of C++ (class, template, delete) and Python (class, lambda, None), a CUDA builtin, and
    # names with `__` whose C++ spellings meet once the `__` goes (EXT_X__ and EXT_X__ -> EXT_X_)
    "matmul_keywords": ("matmul", {"matmul": "class", "gemm": "template", "A": "lambda", "B": "None",
                                   "C": "delete", "a": "threadIdx", "b": "x__", "c": "X__"}, None),
    # napkin_error_string (the .cu's own); arrays whose tiles would be the kernel's sm_head and sm_stage;
    # the online softmax's running maximum m_{new} and its step's m_new; axes q and Q (EXT_Q); size_t
    "attention": ("attention", {"attention": "error", "flash": "string", "Q": "head", "K": "stage",
                                "O": "new", "x": "Q", "d": "t"}, None),
    # kernels k, k_cfg, k_kernel beside k's own _cfg and _kernel; arrays Q and Q__ (Q_ptr twice once the
    # `__` goes); axes q and Q grouped together (TILE_Q); a kernel without contractions
    "attention_unfused": ("attention_unfused", {"attention_unfused": "template", "scores": "k",
                                                "softmax": "k_cfg", "values": "k_kernel", "K": "Q__",
                                                "x": "Q", "d": "delete"}, None),
    # an op ld_1 beside the register copy v_ld_1; an array ld_1_p beside the op's probabilities
    # (sm_{ld_1_p} and sm_{ld_1}_p); axes d and D whole and grouped (EXT_D)
    "softmax_rows": ("softmax_contraction", {"softmax_contraction": "napkin", "online_softmax": "napkin_error",
                                             "O": "ld_1", "S": "ld_1_p", "V": "this", "x": "D"}, _whole_x),
}


def renamed(data: dict, names: dict[str, str]) -> dict:
    """`data` (a diagram file's text as data) with each name n of the diagram, its arrays, ops, axes and
    kernels written names.get(n, n); its named configurations (which name arrays) left out."""
    def r(n):
        return names.get(n, n)

    def expr(e):
        return re.sub(r"[A-Za-z_]\w*", lambda m: r(m.group()), e) if isinstance(e, str) else e

    out = {k: v for k, v in data.items() if k != "configurations"}
    out["name"] = r(data["name"])
    out["axes"] = {r(a): spec for a, spec in data["axes"].items()}
    out["inputs"] = {r(a): [r(x) for x in axes] for a, axes in data["inputs"].items()}
    out["ops"] = []
    for op in data["ops"]:
        op = {**op, "name": r(op["name"]), "inputs": [r(i) for i in op["inputs"]],
              "output": [r(x) for x in op["output"]]}
        op.update({key: r(op[key]) for key in ("over", "query", "key") if key in op})
        if "scale" in op:
            op["scale"] = expr(op["scale"])
        out["ops"].append(op)
    out["outputs"] = [r(o) for o in data["outputs"]]
    out["kernels"] = []
    for k in data["kernels"]:
        partition = {level: {kind: {r(a): size for a, size in part.items()} for kind, part in spec.items()}
                     for level, spec in k["partition"].items()}
        k = {**k, "name": r(k["name"]), "partition": partition}
        if "ops" in k:
            k["ops"] = [r(o) for o in k["ops"]]
        out["kernels"].append(k)
    return out


_GENERATED: dict[str, tuple] = {}


def twins(case: str, folder: Path):
    """The plain and the adversarial generation of `case` (CUDA backend, h200)."""
    if case not in _GENERATED:
        diagram, names, edit = CASES[case]
        data = load_file(resources.shipped("diagrams")[diagram])
        if edit is not None:
            edit(data)
        out = []
        for tag, mapping in (("plain", {}), ("adversarial", names)):
            text = renamed(data, mapping)
            if mapping:
                text.update(title=TITLE, paper=PAPER)
            path = folder / f"{case}_{tag}.yaml"
            path.write_text(yaml.safe_dump(text, sort_keys=False, allow_unicode=True))
            out.append(generate(str(path), "h200", backend="cuda"))
        _GENERATED[case] = tuple(out)
    return _GENERATED[case]


_COMMENT = re.compile(r"//[^\n]*")
_STRING = re.compile(r'"(?:[^"\\\n]|\\.)*"')
_TOKEN = re.compile(r"[A-Za-z_]\w*|\d[\w.]*|\S")
_IDENT = re.compile(r"[A-Za-z_]\w*")
# a function or struct a kernel defines at file level: at the start of a line, before ( < or ;
_FILE_LEVEL = re.compile(r'^(?:template <[^>\n]*> )?(?:extern "" int |static int |struct )?'
                         r"([A-Za-z_]\w*)[(<;]", re.M)


def _code(source: str) -> str:
    return _STRING.sub('""', _COMMENT.sub("", source))


def _parts(source: str) -> tuple[str, list[str]]:
    """The file's own part (header, prelude, helpers) and each kernel's functions."""
    first, *kernels = re.split(r"^// ---- kernel .*$", source, flags=re.M)
    return _code(first), [_code(k) for k in kernels]


def _one_to_one(plain: list[str], adversarial: list[str], where: str) -> dict[str, str]:
    """The map of aligned identifiers, checked to be one-to-one; every other token must be equal."""
    assert len(plain) == len(adversarial), f"{where}: the code differs beyond its names"
    forward: dict[str, str] = {}
    backward: dict[str, str] = {}
    for x, y in zip(plain, adversarial, strict=True):
        if not _IDENT.fullmatch(x):
            assert x == y, f"{where}: the code differs beyond its names ({x!r} -> {y!r})"
            continue
        assert forward.setdefault(x, y) == y, f"{where}: {x!r} is named both {forward[x]!r} and {y!r}"
        assert backward.setdefault(y, x) == x, f"{where}: {y!r} names both {backward[y]!r} and {x!r}"
    return forward


@pytest.mark.parametrize("case", sorted(CASES))
def test_adversarial_names_get_one_identifier_each(tmp_path, case):
    plain, adv = twins(case, tmp_path)
    (p_file, p_kernels), (a_file, a_kernels) = _parts(plain.source), _parts(adv.source)
    assert len(p_kernels) == len(a_kernels) == len(adv.kernels)
    names: dict[str, str] = {}
    for i, (p, a) in enumerate(zip(p_kernels, a_kernels, strict=True)):
        tokens = (_TOKEN.findall(p_file + p), _TOKEN.findall(a_file + a))
        names.update(_one_to_one(*tokens, f"kernel {adv.kernels[i].plan.name!r}"))
    # the kernels' file-level functions and structs: none shares a name with another kernel's
    declared = [(x, names[x]) for p in p_kernels for x in dict.fromkeys(_FILE_LEVEL.findall(p))]
    _one_to_one([x for x, _ in declared], [y for _, y in declared], "the file")
    # no name becomes one C++ keeps for itself (`__` anywhere, `_` first): those are all the plain file's
    plain_ids = set(_IDENT.findall(_code(plain.source)))
    reserved = {y for y in _IDENT.findall(_code(adv.source)) if "__" in y or y.startswith("_")}
    assert reserved <= plain_ids, sorted(reserved - plain_ids)
    # the title and paper stay comments: the header is comment lines up to the prelude
    header = adv.source.split("\n\n", 1)[0].splitlines()
    assert header and all(line.startswith("//") for line in header)
    assert any("#error" in line for line in header)


@pytest.mark.parametrize("case", sorted(CASES))
def test_adversarial_loader_imports_and_calls_the_cu_by_its_names(tmp_path, case):
    _, adv = twins(case, tmp_path)
    tree = ast.parse(adv.extra[".py"])
    adv.write(tmp_path / f"{case}.cu")
    m = _import(tmp_path / f"{case}.py", f"napkin_test_names_{case}")
    signatures = m._SIGNATURES
    assert set(m.CONFIGS) == {k.plan.name for k in adv.kernels}
    entries = set(re.findall(r'^extern "C" int (\w+)\(', adv.source, re.M))
    assert set(signatures) == entries - {"napkin_set_device"}
    assert len(signatures) == len(adv.kernels)
    for fn in signatures:
        assert fn.isidentifier() and not keyword.iskeyword(fn) and not fn.startswith("_")
    called = {node.attr for node in ast.walk(tree) if isinstance(node, ast.Attribute)
              and isinstance(node.value, ast.Name) and node.value.id == "lib"}
    assert called - {"napkin_error_string", "napkin_set_device"} == set(signatures)


@pytest.mark.slow
@pytest.mark.skipif(NVCC is None, reason="nvcc is not on PATH")
def test_nvcc_compiles_adversarial_names_for_sm80(tmp_path):
    """Each case's .cu compiles for sm_80 (one nvcc call a file, two at a time) through nvcc's C++ front
    end, where a name is a C++ identifier (host code too); ptxas, which sees only mangled symbols and
    takes twice as long again, assembles the shipped diagrams in test_kernel_cuda."""
    files = []
    for case in sorted(CASES):
        path = tmp_path / f"{case}.cu"
        path.write_text(twins(case, tmp_path)[1].source)
        files.append(path)
    with ThreadPoolExecutor(max_workers=2) as pool:
        results = list(pool.map(lambda p: _compile(p, ("80",), ptx=True, optimise=False), files))
    failures = [f"{path.name}:\n{err}" for path, rc, err in results if rc != 0]
    assert not failures, "\n\n".join(failures)
