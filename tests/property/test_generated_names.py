"""Generated kernels stay safe and right whatever the diagram names its arrays and axes, and whatever
text its title, docs, file name or GPU profile carry.

Hypothesis draws matmul- and attention-shaped diagrams whose array, op, axis, kernel, partition-symbol
and diagram names come from the identifiers the generated code itself uses (every name token of the
shipped kernels' modules), Python keywords and builtins and a few ordinary names, and whose text fields,
file name and profile name come from an injection corpus: line breaks of every kind, quotes that end a
docstring, f-string braces, a backslash that continues a line, C++ comment ends. Each payload would set
a canary if it ran. The kernel is generated, written, imported and called under TRITON_INTERPRET=1 on
random inputs and compared with float64; the canary must stay unset, and no process, file removal or
network connection may happen while the module is imported and run (an audit hook watches).
"""

from __future__ import annotations

import ast
import builtins
import importlib.util
import inspect
import io
import itertools
import keyword
import os
import re
import sys
import tokenize
from pathlib import Path

import pytest
import yaml
from hypothesis import HealthCheck, Phase, assume, given, note, settings
from hypothesis import strategies as st

from analyzer.common import resources
from analyzer.common.errors import NapkinError
from analyzer.common.expr import NAME, RESERVED
from analyzer.diagram.graph import WEAVE_NAMES

os.environ.setdefault("TRITON_INTERPRET", "1")     # before Triton is imported: it reads it then
torch = pytest.importorskip("torch")
pytest.importorskip("triton")
import triton.language  # noqa: E402,F401  (imported before the audit window: its own start-up is not the kernel's)

from analyzer.codegen import generate  # noqa: E402

GOLDEN = Path(__file__).resolve().parent.parent / "golden"
CANARY = "NAPKIN_CANARY"


def _generated_names() -> set[str]:
    """Every name token of the shipped kernels' generated modules (locals, parameters, globals)."""
    names = set()
    for path in sorted(GOLDEN.glob("*.py")):
        tokens = tokenize.generate_tokens(io.StringIO(path.read_text()).readline)
        names |= {t.string for t in tokens if t.type == tokenize.NAME}
    return names


def _valid(name: str) -> bool:
    return bool(NAME.fullmatch(name)) and name not in RESERVED


POOL = sorted(n for n in (_generated_names() | set(keyword.kwlist) | set(keyword.softkwlist)
                          | set(dir(builtins)) | {"A", "a", "X", "x", "W", "w", "Q", "q", "K", "k", "V",
                                                  "v", "O", "o", "out", "t", "In", "Lambda", "N", "Size",
                                                  "acc", "val", "acc_val", "S", "s", "e", "p"})
              if _valid(n))

# Each payload sets the canary if any part of it runs as Python (or breaks out of a C++ comment)
RUN = f"__import__('builtins').__setattr__('{CANARY}', 1)"
INJECTIONS = [
    f"\n{RUN}\n",
    f'"""\n{RUN}\n"""',
    f"'''\n{RUN}\n'''",
    f"\r{RUN}\r",
    f"\r\n{RUN}  # ",
    f"\x0c\n{RUN}",
    f"\u2028{RUN}\u2029",
    f"\x85{RUN}",
    f"\\\n{RUN}",
    f"{{{RUN}}}",
    f'" + str({RUN}) + "',
    f"' + str({RUN}) + '",
    "*/ int napkin_canary = 1; /*",
    "trailing backslash \\",
    "??/",
    "\x00\x1b[2J",
    "\u202e bidirectional \u202c",
    "%s %d {} {{}}",
    "plain text, nothing to see",
]
TEXT = st.one_of(st.sampled_from(INJECTIONS), st.text(max_size=40))
FILE = st.sampled_from([
    "plain", 'quote"d', "single'quote", 'tri"""ple', "new\nline", "back\\slash", "brace{}", "space d",
    f'x"""\n{RUN}\n#',
])


def distinct(n: int):
    return st.lists(st.sampled_from(POOL), min_size=n, max_size=n, unique=True)


@st.composite
def diagrams(draw):
    """(yaml data, shape) of a matmul- or attention-shaped diagram with drawn names and texts."""
    shape = draw(st.sampled_from(["matmul", "attention"]))
    names = draw(distinct(5 if shape == "attention" else 6))     # axes and partition symbols share a
    axes, symbols = names[:3], names[3:]                       # namespace: size symbols
    arrays = draw(distinct(5 if shape == "attention" else 3))
    name, kernel = draw(st.sampled_from(POOL)), draw(st.sampled_from(POOL))
    text = {field: draw(TEXT) for field in ("title", "paper", "doc")}
    docs = [draw(TEXT) for _ in range(6)]
    if shape == "matmul":
        a, b, c = axes
        x, y, z = arrays
        data = {"name": name, **text, "dtype": "fp16", "levels": ["gmem", "smem"],
                "axes": {a: {"default": 512, "doc": docs[0]}, b: {"default": 512, "doc": docs[1]},
                         c: {"default": 512, "doc": docs[2]}},
                "inputs": {x: [a, b], y: [b, c]},
                "ops": [{"name": z, "primitive": "dot", "inputs": [x, y], "over": b, "output": [a, c],
                         "doc": docs[3]}],
                "outputs": [z],
                "kernels": [{"name": kernel, "doc": docs[4], "partition": {"smem": {
                    "group": {a: symbols[0], c: symbols[1]}, "stream": {b: symbols[2]}}}}]}
    else:
        q, x, d = axes
        Q, K, V, S, O = arrays
        # a keyword cannot be written in a size expression: such a head dim takes a number instead
        scale = f"{d}**-0.5" if not keyword.iskeyword(d) else 0.125
        data = {"name": name, **text, "dtype": "fp16", "levels": ["gmem", "smem"],
                "axes": {q: {"default": 1024, "doc": docs[0]}, x: {"default": 1024, "doc": docs[1]},
                         d: {"default": 64, "doc": docs[2]}},
                "inputs": {Q: [q, d], K: [x, d], V: [x, d]},
                "ops": [{"name": S, "primitive": "dot", "inputs": [Q, K], "over": d, "output": [q, x],
                         "doc": docs[3]},
                        {"name": O, "primitive": "softmax_dot", "inputs": [S, V], "over": x,
                         "scale": scale, "output": [q, d], "doc": docs[4]}],
                "outputs": [O],
                "kernels": [{"name": kernel, "doc": docs[5], "partition": {"smem": {
                    "group": {q: symbols[0]}, "stream": {x: symbols[1]}}}}]}
    return data, shape


class Watch:
    """Audit events that a kernel module never needs: starting processes, removing files, sockets."""

    EVENTS = ("os.system", "subprocess.Popen", "os.exec", "os.spawn", "os.posix_spawn", "os.fork",
              "os.remove", "os.unlink", "os.rmdir", "shutil.rmtree", "socket.connect", "socket.bind",
              "ctypes.dlopen", "webbrowser.open")
    active = False
    seen: list[str] = []

    @classmethod
    def hook(cls, event, args):
        if cls.active and event.startswith(cls.EVENTS):
            cls.seen.append(event)


sys.addaudithook(Watch.hook)       # process-wide and permanent; it only records while `active`


def _profile(tmp: Path, name_text: str) -> Path:
    """The H200 profile with injected text in its description (a profile's text reaches the header)."""
    data = yaml.safe_load(resources.shipped("hardware")["h200"].read_text())
    data["description"] = name_text
    path = tmp / "profile.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def _import(path: Path, name: str):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


COUNTER = itertools.count()


@pytest.mark.slow(seconds=10)    # 15 kernels generated, imported and run under the interpreter
@settings(max_examples=15, deadline=None, derandomize=True, database=None,
          phases=(Phase.explicit, Phase.generate), suppress_health_check=list(HealthCheck))
@given(case=diagrams(), file=FILE, gpu_text=TEXT, pinned=st.booleans(), seed=st.integers(0, 2**16))
def test_generated_kernel_runs_only_what_it_asks_for_and_matches_float64(tmp_path_factory, case, file,
                                                                       gpu_text, pinned, seed):
    data, shape = case
    tmp = tmp_path_factory.mktemp("names")
    source = tmp / f"{file}.yaml"
    source.write_text(yaml.safe_dump(data, sort_keys=False, allow_unicode=False))
    note(source.read_text())
    axes = list(data["axes"])
    sets = {a: data["axes"][a]["default"] for a in axes} if pinned else None
    try:
        g = generate(str(source), str(_profile(tmp, gpu_text)), backend="triton", sets=sets)
    except NapkinError as exc:
        # the refusals a drawn diagram may meet: no configuration of its tiles fits, or (attention) an
        # axis or op named like an axis the call weaves the diagram over (batch, heads: WEAVE_NAMES),
        # which the weave refuses in one line naming the field (renaming them is not built)
        woven = any(f"cannot weave over {n!r}" in str(exc) for n in WEAVE_NAMES)
        assert "no configuration" in str(exc) or "fits" in str(exc) or woven, str(exc)
        assume(False)
    assert not hasattr(builtins, CANARY)
    assert _called(g.source) in _defined(g.source)
    _check_cuda(source, tmp, sets)
    target = tmp / f"kernel_{next(COUNTER)}.py"
    g.write(target)
    Watch.seen.clear()
    Watch.active = True
    try:
        module = _import(target, target.stem)
        rng = torch.Generator().manual_seed(seed)
        if shape == "matmul":
            m, k, n = (int(x) for x in torch.randint(1, 70, (3,), generator=rng))
            a = torch.randn(m, k, generator=rng).half()
            b = torch.randn(k, n, generator=rng).half()
            (wrapper,) = module.__all__      # the diagram's name, or a free spelling of it
            out = getattr(module, wrapper)(a, b, **given(module, getattr(module, wrapper), seed))
            ref = a.double() @ b.double()
        else:
            batch, heads = (int(x) for x in torch.randint(1, 3, (2,), generator=rng))
            lq, lk = (int(x) for x in torch.randint(1, 90, (2,), generator=rng))
            q, k, v = (torch.randn(batch, heads, length, 64, generator=rng).half()
                       for length in (lq, lk, lk))
            out = module.attention(q, k, v, **given(module, module.attention, seed))
            scale = data["ops"][1]["scale"]
            scale = 64 ** -0.5 if isinstance(scale, str) else scale
            ref = torch.softmax(q.double() @ k.double().transpose(-1, -2) * scale, -1) @ v.double()
    finally:
        Watch.active = False
    assert not hasattr(builtins, CANARY), "text from the diagram, file name or profile ran as code"
    assert not Watch.seen, f"the generated module did {Watch.seen}"
    assert out.shape == ref.shape
    # fp16 inputs and outputs with fp32 accumulation: about 2**-11 relative error per element, far
    # below 1e-2 on a norm; a collision of names gives errors of order 1
    assert ((out.double() - ref).norm() / ref.norm()).item() < 1e-2


def given(module, wrapper, seed: int) -> dict:
    """For odd seeds, the keyword that gives the call a configuration of the file's own (its smallest),
    by the spelling the configuration's parameter got (the attention wrapper's after `out`, before
    `return_lse`; any other wrapper's last); for even ones none (CONFIGS' choice)."""
    if seed % 2 == 0:
        return {}
    (kernel,) = module.CONFIGS
    slot = next(iter(module.CONFIGS[kernel].values()))
    config = slot["configs"][0] if "by_size" in slot else slot
    names = list(inspect.signature(wrapper).parameters)
    parameter = names[names.index("out") + 1] if "causal" in names else names[-1]
    return {parameter: {kernel: config}}


def _check_cuda(source: Path, tmp: Path, sets) -> None:
    """The CUDA backend's files of the same diagram: the loader parses, and the .cu carries the text
    only inside comments and string literals (tests/kernels/test_cuda_names.py compiles such files)."""
    g = generate(str(source), str(_profile(tmp, "plain")), backend="cuda",
                 sets=sets or {a: 256 for a in yaml.safe_load(source.read_text())["axes"]})
    ast.parse(g.extra[".py"])
    assert _called(g.source) == _called(g.extra[".py"]) in _defined(g.extra[".py"])
    for line in g.source.splitlines():
        code = line.split("//", 1)[0]
        assert "NAPKIN_CANARY" not in code and "napkin_canary" not in code, line
        assert not line.rstrip().endswith("\\") or not line.lstrip().startswith("//"), line


CALL = re.compile(r"^(?:#|//) Call: (\w+)\(", re.MULTILINE)


def _called(source: str) -> str:
    """The function a generated file's header says to call (`# Call: name(...)`, `// Call: ...`)."""
    (name,) = CALL.findall(source)
    return name


def _defined(module: str) -> set[str]:
    """The functions a generated Python module defines at its top level."""
    return {node.name for node in ast.parse(module).body if isinstance(node, ast.FunctionDef)}


@pytest.mark.parametrize("name", ["torch", "triton", "math"])
def test_the_call_line_names_the_function_the_module_defines(tmp_path, name):
    """regression: a diagram named `torch` got the function `torch_2` (its name is the imported module's),
    and the header's `# Call:` line named `torch`, which the module does not define."""
    data = yaml.safe_load(resources.shipped("diagrams")["matmul"].read_text())
    data["name"] = name
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    sets = {axis: 512 for axis in data["axes"]}            # one size: no by-size ranking, quick
    g = generate(str(path), "h200", backend="triton", sets=sets)
    assert _called(g.source) in _defined(g.source) and _called(g.source) != name
    if name == "torch":
        cuda = generate(str(path), "h200", backend="cuda", sets=sets)
        loader = cuda.extra[".py"]
        assert _called(cuda.source) == _called(loader) in _defined(loader)
