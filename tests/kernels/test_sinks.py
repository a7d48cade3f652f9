"""Attention sinks (softmax and softmax_dot's optional last input, diagrams/sink_attention.yaml): what the
diagram means, what the model counts for the sink, the primitive's refusals, the Hopper family's refusal
and the portable kernels against float64 under Triton's interpreter (the fused online softmax, the pair
softmax -> dot and the whole-row softmax of three kernels). On a GPU: bench/sink_attention.py."""

from __future__ import annotations

import copy
import shutil
import subprocess
from pathlib import Path

import pytest
import sympy
import yaml

from analyzer import hardware
from analyzer.codegen import generate
from analyzer.common import resources
from analyzer.common.errors import NapkinError
from analyzer.common.expr import symbol
from analyzer.config import hopper
from analyzer.config.kernels import configure_kernels
from analyzer.diagram.graph import compile_data
from analyzer.model.analysis import load
from analyzer.model.cost import level_cost
from analyzer.model.fusion import schedule

H100 = hardware.load("h100")


def _data(name: str = "sink_attention") -> dict:
    return yaml.safe_load(resources.shipped("diagrams")[name].read_text())


def _write(tmp_path: Path, data: dict, name: str = "sinks.yaml") -> str:
    path = tmp_path / name
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return str(path)


def _without_sink(data: dict) -> dict:
    """The same diagram without its sink: plain causal attention."""
    data = copy.deepcopy(data)
    del data["inputs"]["sinks"]
    for op in data["ops"]:
        op["inputs"] = [i for i in op["inputs"] if i != "sinks"]
    return data


def _pair(data: dict) -> dict:
    """The sink on an unfused softmax, then a dot over the keys, in one streamed kernel (A.3.2's pair)."""
    data = copy.deepcopy(data)
    o = data["ops"].pop()
    data["ops"] += [{"name": "P", "primitive": "softmax", "inputs": ["Sm", "sinks"], "over": "x",
                     "scale": o["scale"], "output": ["q", "x"]},
                    {"name": "O", "primitive": "dot", "inputs": ["P", "V"], "over": "x", "output": ["q", "d"]}]
    return data


def _unfused() -> dict:
    """attention_unfused (three kernels: S, a whole-row softmax, O) with a sink a head on its softmax."""
    data = _data("attention_unfused")
    data["inputs"]["sinks"] = []
    (softmax,) = [o for o in data["ops"] if o["primitive"] == "softmax"]
    softmax["inputs"].append("sinks")
    return data


# -- the diagram and the model ----------------------------------------------------------------------------

def test_the_sinks_are_an_input_of_the_call_after_v():
    c = configure_kernels("sink_attention", H100, sized=False, ranked=False)
    r = c.roles
    assert (r.query, r.key, r.value, r.extras, r.causal) == ("Q", "K", "V", ("sinks",), True)
    assert c.diagram.arrays["sinks"].axes == ("batch", "heads")     # woven: a sink a batch entry and head
    assert c.diagram.op("O").sink == "sinks" and c.diagram.op("O").operands == ("Sm", "V")


def test_the_model_counts_the_sinks_transfers_and_their_exp_once_a_row(tmp_path):
    """Derived from the inputs, not tabulated: beside the same diagram without the sink, one value a group
    of queries to load (q/g_q), one value more held (the sink), and an exp and an add a row."""
    with_sink = level_cost(schedule(d := load("sink_attention"), d.kernels[0], "smem"))
    plain = load(_write(tmp_path, _without_sink(_data())))
    without = level_cost(schedule(plain, plain.kernels[0], "smem"))
    q, g_q = symbol("q"), symbol("g_q")
    assert sympy.simplify(with_sink.transfers - without.transfers - q / g_q) == 0
    assert sympy.simplify(with_sink.memory - without.memory - 1) == 0
    assert sympy.simplify(with_sink.flops["sfu"] - without.flops["sfu"] - q) == 0
    assert sympy.simplify(with_sink.flops["vector"] - without.flops["vector"] - q) == 0
    assert with_sink.flops["tensor"] == without.flops["tensor"]


def test_the_pair_softmax_then_dot_counts_the_sink_as_softmax_dot_does(tmp_path):
    fused = level_cost(schedule(d := load("sink_attention"), d.kernels[0], "smem"))
    paired = load(_write(tmp_path, _pair(_data())))
    pair = level_cost(schedule(paired, paired.kernels[0], "smem"))
    assert pair.schedule.reducers[0].softmax is not None
    assert {p: sympy.simplify(v - fused.flops[p]) for p, v in pair.flops.items()} == dict.fromkeys(fused.flops, 0)
    assert sympy.simplify(pair.transfers - fused.transfers) == 0


# -- refusals -----------------------------------------------------------------------------------------------

@pytest.mark.parametrize("change, field, message", [
    ("along over", "ops[2]", "softmax_dot's sink (its third input) varies along its `over` axis 'x'"),
    ("other axes", "ops[2]", "softmax_dot's sink (its third input) has axes [d] its scores lack"),
    ("four inputs", "ops[2].inputs", "primitive softmax_dot takes 2 or 3 input(s), got 4"),
    ("unfused, three", "ops[1].inputs", "primitive softmax takes 1 or 2 input(s), got 3"),
], ids=["along-over", "other-axes", "four-inputs", "softmax-three-inputs"])
def test_a_sink_the_primitive_cannot_mean_is_one_line(change, field, message):
    data = _unfused() if change.startswith("unfused") else _data()
    op = data["ops"][-1] if not change.startswith("unfused") else data["ops"][1]
    if change == "along over":
        data["inputs"]["sinks"] = ["x"]
    elif change == "other axes":
        data["inputs"]["sinks"] = ["d"]
    else:
        op["inputs"] = [*op["inputs"], "Q"]
    with pytest.raises(NapkinError) as info:
        compile_data(data, source="x.yaml")
    line = info.value.one_line()
    assert "\n" not in line and line.startswith(f"x.yaml: {field}: "), line
    assert message in line, line


@pytest.mark.slow(seconds=4)
def test_the_hopper_kernel_adds_a_sink_a_head_to_its_sum():
    """The chain reads the sink (Scores.sink); the kernel loads the head's sink once a tile and adds
    exp(sink - m) to the row's sum before it divides (exp2 of log2 e times the sink, less the running
    max, which the kernel keeps in exp2's units)."""
    c = configure_kernels("sink_attention", H100, sized=False, ranked=False)
    assert hopper.scores(c).sink and not hopper.scores(configure_kernels("causal_attention", H100, sized=False,
                                                                           ranked=False)).sink
    assert hopper.realisable(c) is None
    g = generate("sink_attention", H100)
    assert g.backend == "hopper" and "\nSINK = True  #" in g.source
    assert "l_i = l_i + gl.exp2(sink * 1.4426950408889634 - m_i)" in g.source
    assert "\nSINK = False  #" in generate("causal_attention", H100).source


# -- the portable kernels under Triton's interpreter ---------------------------------------------------------

torch = pytest.importorskip("torch")


def _reference(q, k, v, sinks, causal=True):
    """float64: softmax over the keys and one more column, the sink's, which weighs no value."""
    q, k, v = (x.double() for x in (q, k, v))
    s = q @ k.transpose(-1, -2) * q.shape[-1] ** -0.5
    if causal:
        n = s.shape[-1]
        s = s.masked_fill(torch.ones(n, n, dtype=torch.bool).triu(1), float("-inf"))
    column = sinks.double().broadcast_to(q.shape[:2])[:, :, None, None].expand(*s.shape[:-1], 1)
    return torch.softmax(torch.cat([s, column], -1), -1)[..., :-1] @ v


SINKS = {"finite": [0.5, -1.0, 3.0], "large": [12.0, 14.0, 16.0], "-inf": [float("-inf")] * 3}


@pytest.fixture(scope="module")
def sink_module(tmp_path_factory):
    pytest.importorskip("triton")
    from helpers_kernel import written
    return written(generate("sink_attention", "a100", backend="triton"), tmp_path_factory.mktemp("sinks"))


@pytest.mark.slow(seconds=2)
@pytest.mark.parametrize("n", [1, 17, 130])
@pytest.mark.parametrize("sinks", list(SINKS))
def test_the_fused_kernel_matches_float64(sink_module, n, sinks):
    """The online softmax adds exp(sink - m) to its sum after the last chunk: 1 key (the sink then weighs
    as much as a key can), 17 (a partial chunk), 130 (several chunks and a partial one); sinks a little
    below the scores, far above them (the output a small multiple of plain attention's), and -inf."""
    g = torch.Generator().manual_seed(n)
    q, k, v = (torch.randn(1, 3, n, 64, generator=g).half() for _ in range(3))
    s = torch.tensor(SINKS[sinks]).half()
    out = sink_module.attention(q, k, v, s, causal=True)
    ref = _reference(q, k, v, s)
    assert not out.isnan().any()
    err = ((out.double() - ref).norm() / ref.norm()).item()
    assert err < 1e-2, err
    if sinks != "-inf":         # the sink matters at these sizes
        plain = _reference(q, k, v, torch.full((3,), float("-inf")))
        assert ((plain - ref).norm() / ref.norm()).item() > 0.1


@pytest.mark.parametrize("name", ["torch", "causal", "sink_ptr"])
def test_a_sink_named_like_the_generated_codes_own_names_stays_data(name, tmp_path):
    """The sink input named like the wrapper's module, its causal flag and the Hopper kernel's pointer: the
    portable module still matches float64, and the Hopper module's wrapper takes it under a name of its own."""
    from helpers_kernel import written
    data = _data()
    data["inputs"][name] = data["inputs"].pop("sinks")
    data["ops"][-1]["inputs"] = [name if i == "sinks" else i for i in data["ops"][-1]["inputs"]]
    source = _write(tmp_path, data)
    portable = written(generate(source, "a100", backend="triton"), tmp_path)
    g = torch.Generator().manual_seed(7)
    q, k, v = (torch.randn(1, 3, 37, 64, generator=g).half() for _ in range(3))
    s = (torch.randn(3, generator=g) * 2).half()
    ref = _reference(q, k, v, s)
    assert ((portable.attention(q, k, v, s).double() - ref).norm() / ref.norm()).item() < 1e-2
    hopper_source = generate(source, "h100").source
    assert "def attention(q, k, v, " in hopper_source
    compile(hopper_source, "hopper.py", "exec")          # the module parses whatever the name


@pytest.mark.slow(seconds=4)
def test_sinks_of_minus_inf_give_exactly_plain_attention(sink_module, tmp_path):
    """The same configuration of the diagram without the sink: bit for bit the same output."""
    from helpers_kernel import written
    plain = written(generate(_write(tmp_path, _without_sink(_data())), "a100", backend="triton"), tmp_path)
    g = torch.Generator().manual_seed(5)
    q, k, v = (torch.randn(2, 2, 70, 64, generator=g).half() for _ in range(3))
    config = {"TILE_Q": 32, "BLOCK_X": 32, "num_warps": 4, "num_stages": 2}
    out = sink_module.attention(q, k, v, torch.full((2,), float("-inf")).half(), causal=True, config=config)
    assert torch.equal(out, plain.attention(q, k, v, causal=True, config=config))


def test_a_huge_sink_gives_zeros_and_sinks_per_batch_entry(sink_module):
    """A sink of 60000 (fp16's range) takes all the weight: exactly zero, no NaN; sinks given as (batch,
    heads) apply to their own batch entry."""
    g = torch.Generator().manual_seed(7)
    q, k, v = (torch.randn(2, 2, 20, 64, generator=g).half() for _ in range(3))
    huge = sink_module.attention(q, k, v, torch.full((2,), 60000.0).half(), causal=True)
    assert torch.equal(huge, torch.zeros_like(huge))
    per = torch.tensor([[0.0, 2.0], [-3.0, float("-inf")]]).half()
    out = sink_module.attention(q, k, v, per, causal=True)
    ref = _reference(q, k, v, per)
    assert ((out.double() - ref).norm() / ref.norm()).item() < 1e-2


@pytest.mark.slow(seconds=8)
@pytest.mark.parametrize("shape", ["pair", "unfused"])
def test_the_softmax_with_a_sink_matches_float64(tmp_path, shape):
    """The sink on the softmax itself: folded into the contraction after it (one streamed kernel), and a
    softmax of whole rows between two matmuls (three kernels, the scores and probabilities in memory)."""
    pytest.importorskip("triton")
    from helpers_kernel import written
    data, causal = (_pair(_data()), True) if shape == "pair" else (_unfused(), False)
    m = written(generate(_write(tmp_path, data), "a100", backend="triton"), tmp_path)
    g = torch.Generator().manual_seed(11)
    q, k, v = (torch.randn(1, 2, 37, 64, generator=g).half() for _ in range(3))
    s = torch.tensor([0.5, 3.0]).half()
    out = m.attention(q, k, v, s, causal=causal)
    ref = _reference(q, k, v, s, causal)
    assert ((out.double() - ref).norm() / ref.norm()).item() < 1e-2


# -- the CUDA backend's text: the sink in its three softmaxes --------------------------------------------

@pytest.mark.slow(seconds=5)
@pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc is not on PATH")
def test_the_cuda_softmaxes_with_a_sink_compile(tmp_path):
    """The online softmax's finish (sink_attention), the whole-row softmax of a kernel without
    contractions (the unfused diagram's) and of one with them (an unstreamed softmax_dot) hold the sink;
    nvcc's front end, NVVM and ptxas take them (sm_80, -O0: the same text, a sixth of the time)."""
    whole = _data()
    whole["kernels"] = [{"name": "flash", "partition": {"smem": {"group": {"q": "g_q"}}}}]
    files = {"fused": ("sink_attention", {}), "unfused": (_write(tmp_path, _unfused(), "unfused.yaml"), {}),
             "whole": (_write(tmp_path, whole, "whole.yaml"), {"q": 32, "d": 64})}
    for name, (diagram, sets) in files.items():
        g = generate(diagram, "a100", backend="cuda", sets=sets)
        finish = {"fused": "napkin::quad_sum(l_O[mi][h]) + napkin::ex2(v_sinks * ",
                  "unfused": "napkin_red) + napkin::ex2(c_sinks * ",
                  "whole": "napkin::quad_sum(sm_O_p[mi][h]) + napkin::ex2(v_sinks * "}[name]
        assert finish in g.source, name
        path = tmp_path / f"{name}.cu"
        path.write_text(g.source)
        proc = subprocess.run(["nvcc", "-O0", "-Xcicc", "-O0", "-Xptxas", "-O0", "-std=c++17",
                               "-gencode=arch=compute_80,code=sm_80", "-cubin", "-o", str(path.with_suffix(".cubin")),
                               str(path)], capture_output=True, text=True, check=False)
        assert proc.returncode == 0, f"{name}: {proc.stderr[-3000:]}"


def grouped(data: dict) -> dict:
    """sink_attention with grouped-query heads (as gpt-oss): h key/value heads, g query heads each, a sink
    a query head (sinks: [h, g])."""
    data = copy.deepcopy(data)
    data["axes"] = {"h": {"default": 2, "doc": "key/value heads"},
                    "g": {"default": 4, "doc": "query heads a key/value head"}, **data["axes"]}
    data["inputs"] = {"Q": ["h", "g", "q", "d"], "K": ["h", "x", "d"], "V": ["h", "x", "d"], "sinks": ["h", "g"]}
    for op in data["ops"]:
        op["output"] = ["h", "g", *op["output"]] if op["name"] != "S" else ["h", "g", "q", "x"]
    data["kernels"] = [{"name": "flash", "partition": {"smem": {"group": {"h": "g_h", "g": "g_g", "q": "g_q"},
                                                               "stream": {"x": "s_x"}}}}]
    return data


@pytest.mark.slow(seconds=12)
@pytest.mark.parametrize("pin", [{}, {"g_g": 2}])
def test_grouped_query_heads_take_a_sink_a_query_head(tmp_path, pin):
    """k and v with fewer heads, a sink for each query head: one head a block (the sink a scalar), and two
    query heads a block (g_g = 2: the sink a vector along the block's rows g q, read by g alone)."""
    pytest.importorskip("triton")
    from helpers_kernel import written
    m = written(generate(_write(tmp_path, grouped(_data())), "a100", backend="triton", sets=pin), tmp_path)
    g = torch.Generator().manual_seed(13)
    q = torch.randn(1, 8, 45, 64, generator=g).half()
    k, v = (torch.randn(1, 2, 45, 64, generator=g).half() for _ in range(2))
    s = torch.linspace(-2, 3, 8).half()
    out = m.attention(q, k, v, s, causal=True)
    ref = _reference(q, k.repeat_interleave(4, 1), v.repeat_interleave(4, 1), s)
    assert ((out.double() - ref).norm() / ref.norm()).item() < 1e-2
