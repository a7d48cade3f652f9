"""A configuration per call: `attention(q, k, v, config=...)` and `matmul(a, b, config=...)` launch the
configuration given instead of the CONFIGS table's choice, after the wrapper checks it against
CONFIG_KEYS (a ValueError that names what is wrong, never a Triton error); the module's globals are
left as they are. On the CPU under TRITON_INTERPRET=1, against float64."""

from __future__ import annotations

import inspect
import re
from functools import partial

import pytest
import yaml

from analyzer.codegen import generate
from analyzer.codegen.pymodule import wrapper
from analyzer.codegen.triton import config_keys, triton_ids
from bench import common

torch = pytest.importorskip("torch")
pytest.importorskip("triton")

from helpers_kernel import GPU, generated, module, reference, rel_err, written  # noqa: E402

# differs from every configuration of the shipped tables (tiles of 64 and up, 4 or more warps)
MATMUL = {"TILE_A": 32, "TILE_C": 16, "BLOCK_B": 16, "num_warps": 2, "num_stages": 2}
FLASH = {"TILE_Q": 32, "BLOCK_X": 16, "num_warps": 2, "num_stages": 2}


class Launches:
    """Stands in for a @triton.jit function: records each launch's grid and keywords, then launches."""

    def __init__(self, fn) -> None:
        self.fn, self.seen = fn, []

    def __getitem__(self, grid):
        def launch(*args, **kwargs):
            self.seen.append((grid, kwargs))
            return self.fn[grid](*args, **kwargs)
        return launch


def spied(m, diagram: str, kernel: str) -> Launches:
    g = generated(diagram)
    name = triton_ids(g).jit[kernel]
    spy = Launches(getattr(m, name))
    setattr(m, name, spy)
    return spy


def matmul_inputs(m=70, k=50, n=40, seed=0):
    gen = torch.Generator().manual_seed(seed)
    a, b = torch.randn(m, k, generator=gen).half(), torch.randn(k, n, generator=gen).half()
    return a, b, a.double() @ b.double()


@pytest.mark.parametrize("form", ["one configuration", "by kernel"])
def test_matmul_launches_the_configuration_it_is_given(form, tmp_path):
    m = module("matmul", tmp_path)
    spy = spied(m, "matmul", "gemm")
    a, b, ref = matmul_inputs()
    before = repr(m.CONFIGS)
    out = m.matmul(a, b, config=dict(MATMUL) if form == "one configuration" else {"gemm": dict(MATMUL)})
    assert rel_err(out, ref) < 1e-2
    ((grid, launched),) = spy.seen
    assert {key: launched[key] for key in MATMUL} == MATMUL
    assert launched["BLOCK_A"] == 32 and launched["BLOCK_C"] == 16
    assert grid == ((70 + 31) // 32 * ((40 + 15) // 16), 1)
    assert repr(m.CONFIGS) == before                      # nothing global changed
    m.matmul(a, b)                                        # and the next call chooses as before
    default = m._sized(m.CONFIGS["gemm"][None], {"a": 70, "b": 50, "c": 40})
    assert {key: spy.seen[-1][1][key] for key in default} == default != MATMUL


def test_attention_launches_the_configuration_it_is_given(tmp_path):
    g = generated("causal_attention")
    m = module("causal_attention", tmp_path)
    spy = spied(m, "causal_attention", "flash")
    gen = torch.Generator().manual_seed(3)
    q, k, v = (torch.randn(1, 2, 75, 64, generator=gen).half() for _ in range(3))
    out = m.attention(q, k, v, causal=True, config=FLASH)
    assert rel_err(out, reference(q, k, v, causal=True)) < 1e-2
    ((grid, launched),) = spy.seen
    assert {key: launched[key] for key in FLASH} == FLASH and grid == ((75 + 31) // 32, 2)
    assert set(m.CONFIG_KEYS) == {"flash"} and m.CONFIG_KEYS["flash"] == config_keys(g, g.kernels[0])


def test_a_module_of_several_kernels_takes_a_configuration_per_kernel(tmp_path):
    """attention_unfused launches three kernels: config= may give any of them; the rest keep CONFIGS'."""
    m = module("attention_unfused", tmp_path)
    spies = {name: spied(m, "attention_unfused", name) for name in ("scores", "softmax", "values")}
    gen = torch.Generator().manual_seed(4)
    q, k, v = (torch.randn(1, 2, 40, 64, generator=gen).half() for _ in range(3))
    values = {"TILE_Q": 16, "TILE_D": 32, "BLOCK_X": 16, "num_warps": 1, "num_stages": 1}
    # the softmax kernel's keys: its row tile where the profile's tiles give it one (napkin analyze's)
    softmax = {**{key: 2 for key in m.CONFIG_KEYS["softmax"] if key.startswith("TILE")},
               "num_warps": 2, "num_stages": 1}
    out = m.attention(q, k, v, config={"values": values, "softmax": softmax})
    assert rel_err(out, reference(q, k, v)) < 1e-2
    assert {key: spies["values"].seen[0][1][key] for key in values} == values
    assert {key: spies["softmax"].seen[0][1][key] for key in softmax} == softmax
    chosen = m._sized(m.CONFIGS["scores"][None], {"q": 40, "x": 40, "batch": 1, "heads": 2})
    assert {key: spies["scores"].seen[0][1][key] for key in chosen} == chosen
    with pytest.raises(ValueError, match="config names kernel 'TILE_Q'; this module's kernels are "
                                         "'scores', 'softmax', 'values'"):
        m.attention(q, k, v, config=values)               # one configuration: for one kernel only


def test_a_padded_tile_may_be_any_positive_size(tmp_path):
    """A file whose kernel pads a dimension (a 192-wide tile) takes tiles that are no power of two."""
    g = generate("matmul", GPU, sets={"g_a": 64, "g_c": 192, "s_b": 64})
    m = written(g, tmp_path)
    assert m.CONFIG_KEYS["gemm"] == {"TILE_A": True, "TILE_C": False, "BLOCK_B": True, "num_warps": True,
                                     "num_stages": False}
    a, b, ref = matmul_inputs(33, 20, 100)
    out = m.matmul(a, b, config={**MATMUL, "TILE_C": 48})
    assert rel_err(out, ref) < 1e-2
    with pytest.raises(ValueError, match=r"config\['gemm'\]\['TILE_A'\] must be a power of two, not 48"):
        m.matmul(a, b, config={**MATMUL, "TILE_A": 48})


@pytest.mark.parametrize("config, message", [
    ([64, 64], "config must be a dict, not list"),
    ({"gem": MATMUL}, "config names kernel 'gem'; this module's kernels are 'gemm'"),
    ({"gemm": 64}, r"config\['gemm'\] must be a dict with the keys \['TILE_A', 'TILE_C', 'BLOCK_B', "
                   r"'num_warps', 'num_stages'\], not int"),
    ({k: v for k, v in MATMUL.items() if k != "num_stages"},
     r"config\['gemm'\] must have the keys .*: missing 'num_stages'$"),
    ({**MATMUL, "TILE_B": 16}, r"config\['gemm'\] must have the keys .*: unknown 'TILE_B'$"),
    ({**MATMUL, "TILE_A": 0}, r"config\['gemm'\]\['TILE_A'\] must be a positive int, not 0"),
    ({**MATMUL, "num_stages": -1}, r"\['num_stages'\] must be a positive int, not -1"),
    ({**MATMUL, "BLOCK_B": 24}, r"config\['gemm'\]\['BLOCK_B'\] must be a power of two, not 24"),
    ({**MATMUL, "num_warps": 3}, r"\['num_warps'\] must be a power of two, not 3"),
    ({**MATMUL, "TILE_C": 16.0}, r"\['TILE_C'\] must be a positive int, not 16.0"),
    ({**MATMUL, "TILE_C": True}, r"\['TILE_C'\] must be a positive int, not True"),
    ({**MATMUL, "TILE_C": "16"}, r"\['TILE_C'\] must be a positive int, not '16'"),
])
def test_a_bad_configuration_is_a_value_error_before_any_launch(config, message, tmp_path):
    m = module("matmul", tmp_path)
    spy = spied(m, "matmul", "gemm")
    a, b, _ = matmul_inputs(8, 8, 8)
    with pytest.raises(ValueError, match=message):
        m.matmul(a, b, config=config)
    assert not spy.seen


def test_attention_checks_its_configuration_too(tmp_path):
    m = module("attention", tmp_path)
    q = torch.randn(1, 1, 8, 64).half()
    with pytest.raises(ValueError, match=r"config\['flash'\]\['TILE_Q'\] must be a power of two, not 96"):
        m.attention(q, q, q, config={**FLASH, "TILE_Q": 96})


def test_an_input_named_config_keeps_its_name_and_the_configuration_takes_another(tmp_path):
    data = {"name": "mm", "axes": {a: {"default": 256} for a in "abc"},
            "inputs": {"config": ["a", "b"], "B": ["b", "c"]},
            "ops": [{"name": "C", "primitive": "dot", "inputs": ["config", "B"], "over": "b",
                     "output": ["a", "c"]}],
            "outputs": ["C"],
            "kernels": [{"name": "gemm", "partition": {"smem": {"group": {"a": "g_a", "c": "g_c"},
                                                                "stream": {"b": "s_b"}}}}]}
    source = tmp_path / "d.yaml"
    source.write_text(yaml.safe_dump(data, sort_keys=False))
    g = generate(str(source), GPU, backend="triton", sets={"a": 256, "b": 256, "c": 256})
    m = written(g, tmp_path)
    assert list(inspect.signature(m.mm).parameters) == ["config", "b", "config_2"]
    assert "`config_2`, if given, is the configuration to launch" in m.mm.__doc__
    a, b, ref = matmul_inputs(20, 30, 10)
    assert rel_err(m.mm(a, b, config_2=MATMUL), ref) < 1e-2
    with pytest.raises(ValueError, match=r"config_2\['gemm'\]\['num_warps'\] must be a power of two"):
        m.mm(a, b, config_2={**MATMUL, "num_warps": 6})


def test_a_backend_may_leave_the_configuration_out():
    """The CUDA loader reuses the wrapper with launchers of four arguments: by default it has no config."""
    g = generated("attention_unfused")
    ids = triton_ids(g)
    plain, configured = wrapper(g, ids), wrapper(g, ids, config="tiles, num_warps, num_stages")
    assert "def attention(q, k, v, causal=False, out=None):" in plain
    assert "def attention(q, k, v, causal=False, out=None, config=None):" in configured
    assert not any(re.search(r"\bconfig\b", line) for line in plain)
    assert "    _launch_values(t, size, stride, scale)" in plain
    assert "    _launch_values(t, size, stride, scale, config['values'])" in configured


def test_the_benchmarks_check_each_candidate_through_config(tmp_path):
    """bench.common times a recording's candidates by passing each to the call: one the wrapper
    refuses is recorded with its ValueError and not timed; the others match the reference."""
    loaded = common.load_kernel("matmul", tmp_path)
    a, b, ref = matmul_inputs(40, 30, 20)
    problem = common.Problem("gemm", partial(loaded.module.matmul, a, b), ref, graph=True)
    size = {"candidates": [{"key": "good", "config": dict(MATMUL)},
                           {"key": "bad", "config": {**MATMUL, "BLOCK_B": 24}}]}
    live = common.checked(size, problem)
    assert [c["key"] for c in live] == ["good"] and live[0]["rel_err"] < 1e-2
    assert size["candidates"][1]["error"].startswith("ValueError: config['gemm']['BLOCK_B'] must be a power")
    sizes = {"a": 40, "b": 30, "c": 20}
    assert common.launched(loaded.module, "gemm", None, sizes) == \
        loaded.module._sized(loaded.module.CONFIGS["gemm"][None], sizes)
