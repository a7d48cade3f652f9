"""The Triton kernels of the diagrams issue 19 added, compiled for a real GPU (not the interpreter) and
checked against float64 in fp16 and bf16 (the interpreter multiplies bf16 tiles as raw integers, so
bf16 is only checked here). Marked gpu: CI has no GPU;
`TRITON_INTERPRET=0 python -m pytest -m gpu tests` runs them."""

from __future__ import annotations

import os

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("triton")

from helpers_kernel import generated, written  # noqa: E402

needs_gpu = [pytest.mark.gpu,
             pytest.mark.skipif(not torch.cuda.is_available() or os.environ.get("TRITON_INTERPRET") == "1",
                                reason="needs a CUDA GPU and Triton's compiler (TRITON_INTERPRET=0)")]
DTYPES = (torch.float16, torch.bfloat16)


def _module(diagram: str, tmp, dtype: torch.dtype):
    return written(generated(diagram, "triton", "bf16" if dtype == torch.bfloat16 else "fp16"), tmp)


def _rel(out, ref) -> float:
    return ((out.double() - ref).norm() / ref.norm()).item()


TOLERANCE = {torch.float16: 1e-2, torch.bfloat16: 3e-2}   # bf16 keeps 8 bits: 2**-8 per rounding


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("rows, inner, cols", [(1, 1, 1), (777, 333, 1500), (300, 4096, 640)])
def test_rmsnorm_matmul(rows, inner, cols, dtype, tmp_path):
    m = _module("rmsnorm_matmul", tmp_path, dtype)
    x = torch.randn(rows, inner, device="cuda").to(dtype)
    g = (torch.rand(inner, device="cuda") + 0.5).to(dtype)
    w = (torch.randn(inner, cols, device="cuda") / inner ** 0.5).to(dtype)
    xd = x.double()
    ref = (xd * torch.rsqrt(xd.pow(2).mean(-1, keepdim=True) + 1e-6) * g.double()) @ w.double()
    assert _rel(m.rmsnorm_matmul(x, g, w), ref) < TOLERANCE[dtype]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("head, value, seq", [(192, 128, 1), (192, 128, 1000), (192, 128, 4099), (64, 64, 17)])
def test_mla_attention(head, value, seq, dtype, tmp_path):
    m = _module("mla_attention", tmp_path, dtype)
    q, k = (torch.randn(2, 4, seq, head, device="cuda").to(dtype) for _ in range(2))
    v = torch.randn(2, 4, seq, value, device="cuda").to(dtype)
    ref = torch.softmax(q.double() @ k.double().transpose(-1, -2) * head ** -0.5, -1) @ v.double()
    assert _rel(m.attention(q, k, v), ref) < TOLERANCE[dtype]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("seq_q, seq_k, dim, value", [(1, 1, 64, 64), (1000, 3000, 128, 128), (4096, 777, 64, 32)])
def test_linear_attention(seq_q, seq_k, dim, value, dtype, tmp_path):
    m = _module("linear_attention", tmp_path, dtype)
    q = torch.randn(seq_q, dim, device="cuda").to(dtype)
    k = (torch.randn(seq_k, dim, device="cuda") / seq_k ** 0.5).to(dtype)
    v = torch.randn(seq_k, value, device="cuda").to(dtype)
    ref = q.double() @ (k.double().T @ v.double())
    assert _rel(m.linear_attention(q, k, v), ref) < TOLERANCE[dtype]


for _test in (test_rmsnorm_matmul, test_mla_attention, test_linear_attention):
    for _mark in needs_gpu:
        _mark(_test)
