"""Golden files pin the generated source; bad input fails before launch with a clear message."""

from __future__ import annotations

import importlib.util
import os
import sys
from pathlib import Path

import pytest

from analyzer.codegen import generate
from analyzer.codegen.triton import kernel as triton_backend
from analyzer.common.errors import NapkinError

GOLDEN = Path(__file__).resolve().parent.parent / "golden"
CASES = ["attention", "mha", "gqa", "causal_attention", "sigmoid_attention", "softcap_attention",
         "gemma2_local_attention", "band_attention", "alibi_attention", "attention_unfused", "matmul",
         "rmsnorm_matmul", "mla_attention", "linear_attention", "sink_attention"]


@pytest.mark.parametrize("diagram", CASES)
def test_golden_source(diagram):
    """Regenerate with NAPKIN_REGOLD=1 after a deliberate change, and review the diff."""
    source = generated(diagram).source          # the file the kernel tests run (helpers_kernel)
    path = GOLDEN / f"{diagram}_h200_fp16.py"
    if os.environ.get("NAPKIN_REGOLD") == "1":
        path.write_text(source)
    assert path.exists(), f"no golden file {path.name}: run with NAPKIN_REGOLD=1"
    assert source == path.read_text()


def test_deterministic():
    a = generate("gqa", "h100", dtype="bf16").source
    b = generate("gqa", "h100", dtype="bf16").source
    assert a == b


def test_header_names_diagram_and_configuration():
    source = generated("causal_attention").source
    head = source[:source.index("import math")]
    assert "diagrams/causal_attention.yaml" in head
    assert "napkin kernel causal_attention --gpu h200 --backend triton --dtype fp16" in head
    assert "d=128: by problem size" in head and "warps" in head and "stages" in head
    assert "at the diagram's default sizes: g_q=" in head
    assert "Predicted (h200, batch=1, heads=1" in head
    # the alias reaches the portable kernels' fit measured on the H200 (hardware.portable_model)
    assert "GPU profile: h200-calibrated" in head and "the portable kernel's model calibrated on h200-calibrated" in head
    pinned = generate("causal_attention", "h200", backend="triton", sets={"q": 4096}).source   # one size: no table
    head = pinned[:pinned.index("import math")]
    assert "d=128: g_q=" in head and "by problem size" not in head and "'by_size'" not in pinned


def test_primitive_without_renderer(monkeypatch):
    monkeypatch.setattr(triton_backend, "RENDERED", triton_backend.RENDERED - {"sigmoid"})
    with pytest.raises(NapkinError, match="primitive 'sigmoid' \\(op 'P'\\) has no Triton renderer"):
        generate("sigmoid_attention", "h200", backend="triton")


@pytest.mark.parametrize("backend, dtype, message", [("metal", "fp16", "expected hopper or hopper-contraction or triton or cuda"),
                                                     ("triton", "fp8", "takes fp16 or bf16")])
def test_bad_options(backend, dtype, message):
    with pytest.raises(NapkinError, match=message):
        generate("attention", "h200", backend=backend, dtype=dtype)


def test_named_configuration_sets_the_tiles():
    g = generate("attention", "h100", backend="triton", config="fa3_fp16_intra")
    (k,) = g.kernels
    choice = k.choices[128]
    assert choice.tiles["g_q"] == 128 and choice.tiles["s_x"] == 128
    assert choice.num_warps == 4 and choice.num_stages == 2      # one warpgroup, two buffers


def test_model_choice_fits_the_registers_of_a_thread():
    """The chosen configuration leaves every thread registers of its own (choose.RESERVE_REGISTERS)."""
    g = generated("matmul")
    (k,) = g.kernels
    (choice,) = k.choices.values()
    regs = next(c for c in choice.report.capacity if c.storage == "registers")
    assert regs.excess_thread_bytes >= 16 * 4


# -- a module imported where torch is not installed --------------------------------------------------

def _cuda_loader() -> str:
    return generate("matmul", "h200", backend="cuda", sets={"a": 512, "b": 512, "c": 512}).extra[".py"]


@pytest.mark.parametrize("source, needs, missing", [
    (lambda: (GOLDEN / "matmul_h200_fp16.py").read_text(), "torch and Triton", "torch"),
    (lambda: (GOLDEN / "matmul_h200_fp16.py").read_text(), "torch and Triton", "triton"),
    (lambda: (GOLDEN / "mha_h100_hopper_fp16.py").read_text(), "torch and Triton with Gluon", "triton"),
    (_cuda_loader, "torch", "torch"),
], ids=["triton", "triton-without-triton", "hopper", "cuda-loader"])
def test_a_module_imported_without_torch_says_how_to_install_it(tmp_path, monkeypatch, source, needs, missing):
    """regression: README's environment (pip install .) has no torch, and importing a generated kernel
    there failed with a bare ModuleNotFoundError; it names the `kernels` extra, in one line."""
    text = source()
    path = tmp_path / "generated.py"
    path.write_text(text)
    monkeypatch.setitem(sys.modules, missing, None)        # `import torch` fails as if not installed
    spec = importlib.util.spec_from_file_location("generated", path)
    with pytest.raises(ImportError) as info:
        spec.loader.exec_module(importlib.util.module_from_spec(spec))
    message = str(info.value)
    assert "\n" not in message and info.value.__suppress_context__
    assert message.startswith(f"import of {missing} halted")              # the missing module, named
    assert f"needs {needs}: pip install 'napkin[kernels]'" in message


# -- the wrapper's checks, before any launch ----------------------------------------------------------

torch = pytest.importorskip("torch")
pytest.importorskip("triton")
from helpers_kernel import generated, module  # noqa: E402


@pytest.fixture(scope="module")
def attention(tmp_path_factory):
    return module("attention", tmp_path_factory.mktemp("k"))


def _qkv(*shape, dtype=torch.float16):
    return tuple(torch.randn(*shape).to(dtype) for _ in range(3))


def test_wrong_dtype(attention):
    q, k, v = _qkv(1, 1, 8, 64, dtype=torch.float32)
    with pytest.raises(TypeError, match="float16 or torch.bfloat16"):
        attention.attention(q, k, v)


def test_mixed_dtypes(attention):
    q, k, v = _qkv(1, 1, 8, 64)
    with pytest.raises(TypeError, match="but q has"):
        attention.attention(q, k.bfloat16(), v)


def test_head_dims_differ(attention):
    q = torch.randn(1, 1, 8, 64).half()
    k, v = torch.randn(1, 1, 8, 128).half(), torch.randn(1, 1, 8, 128).half()
    with pytest.raises(ValueError, match="head dims differ"):
        attention.attention(q, k, v)


def test_unsupported_head_dim(attention):
    with pytest.raises(ValueError, match="head_dim 96 is not supported"):
        attention.attention(*_qkv(1, 1, 8, 96))


def test_causal_flag_must_match_the_diagram(attention):
    with pytest.raises(ValueError, match="not causal; generate the causal diagram"):
        attention.attention(*_qkv(1, 1, 8, 64), causal=True)


def test_fewer_kv_heads_need_the_gqa_diagram(attention):
    q = torch.randn(1, 4, 8, 64).half()
    k, v = torch.randn(1, 2, 8, 64).half(), torch.randn(1, 2, 8, 64).half()
    with pytest.raises(ValueError, match="grouped-query diagram"):
        attention.attention(q, k, v)


def test_wrong_rank(attention):
    with pytest.raises(ValueError, match="must be 4-D"):
        attention.attention(*_qkv(8, 64))


def test_cpu_tensors_without_the_interpreter(attention, monkeypatch):
    monkeypatch.setenv("TRITON_INTERPRET", "0")
    with pytest.raises(ValueError, match="runs on a CUDA GPU"):
        attention.attention(*_qkv(1, 1, 8, 64))


def test_causal_self_attention_needs_equal_lengths(tmp_path):
    m = module("causal_attention", tmp_path)
    q = torch.randn(1, 1, 8, 64).half()
    k, v = torch.randn(1, 1, 9, 64).half(), torch.randn(1, 1, 9, 64).half()
    with pytest.raises(ValueError, match="axis x must be q"):
        m.attention(q, k, v, causal=True)


def test_causal_must_be_a_bool(attention):
    """causal=0 or "yes" used to be compared with the diagram's flag (0 == False passed)."""
    for flag in (0, 1, "yes", None):
        with pytest.raises(TypeError, match="causal must be True or False"):
            attention.attention(*_qkv(1, 1, 8, 64), causal=flag)


def test_meta_tensors_are_refused(attention):
    q, k, v = (torch.empty(1, 1, 8, 64, dtype=torch.float16, device="meta") for _ in range(3))
    with pytest.raises(ValueError, match="not meta or sparse"):
        attention.attention(q, k, v)


def test_out_that_aliases_an_input_or_itself_is_refused(attention):
    """Writing an out that shares memory with q, k or v changes what the kernel reads; an out with a
    zero stride has elements that alias each other: both gave wrong results without an error."""
    q, k, v = _qkv(1, 2, 8, 64)
    for out in (q, v[:, :, :, :], torch.empty(64, dtype=torch.float16).expand(1, 2, 8, 64),
                torch.empty(1, 2, 1, 64, dtype=torch.float16).expand(1, 2, 8, 64)):
        with pytest.raises(ValueError, match="shares memory"):
            attention.attention(q, k, v, out=out)
    separate = torch.empty(2, 1, 8, 64, dtype=torch.float16).transpose(0, 1)   # strided, its own memory
    assert attention.attention(q, k, v, out=separate) is separate
    ref = torch.softmax(q.double() @ k.double().transpose(-1, -2) / 8, -1) @ v.double()
    assert ((separate.double() - ref).norm() / ref.norm()).item() < 1e-2
