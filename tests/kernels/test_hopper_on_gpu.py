"""The Hopper kernels (napkin kernel's default on Hopper profiles) on a Hopper GPU against float64: every
warpgroup count, overlap and schedule, causal and grouped heads, odd lengths, strided inputs, fp16 and
bf16. Marked gpu: CI has no GPU (it compiles the kernels for sm_90a instead, tests/kernels/test_hopper.py);
`TRITON_INTERPRET=0 python -m pytest -m gpu tests` runs them on one."""

from __future__ import annotations

import os

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("triton")

from helpers_kernel import written  # noqa: E402

from analyzer.codegen import generate  # noqa: E402

pytestmark = [pytest.mark.gpu,
                pytest.mark.skipif(not torch.cuda.is_available() or os.environ.get("TRITON_INTERPRET") == "1"
                                   or torch.cuda.get_device_capability()[0] != 9,
                                   reason="needs a Hopper GPU (sm_90) and Triton's compiler (TRITON_INTERPRET=0)")]
TOLERANCE = {torch.float16: 1e-2, torch.bfloat16: 3e-2}   # bf16 keeps 8 bits: 2**-8 per rounding


def _module(diagram: str, tmp, dtype: torch.dtype):
    g = generate(diagram, "h100", dtype="bf16" if dtype == torch.bfloat16 else "fp16")
    assert g.backend == "hopper"
    return written(g, tmp)


def _reference(q, k, v, causal):
    q, k, v = q.double(), k.double(), v.double()
    group = q.shape[1] // k.shape[1]
    k, v = k.repeat_interleave(group, 1), v.repeat_interleave(group, 1)
    s = q @ k.transpose(-1, -2) * q.shape[-1] ** -0.5
    if causal:
        s = s.masked_fill(~torch.ones(s.shape[-2:], dtype=torch.bool, device=s.device).tril(), float("-inf"))
    return torch.softmax(s, -1) @ v


def _rel(out, ref) -> float:
    return ((out.double() - ref).norm() / ref.norm()).item()


@pytest.mark.parametrize("dtype", (torch.float16, torch.bfloat16))
@pytest.mark.parametrize("diagram, causal", [("mha", False), ("causal_attention", True)])
@pytest.mark.parametrize("dim", (64, 128, 256))
@pytest.mark.parametrize("seq", (1, 17, 1000))
def test_model_configuration(diagram, causal, dim, seq, dtype, tmp_path):
    m = _module(diagram, tmp_path, dtype)
    q, k, v = (torch.randn(2, 3, seq, dim, device="cuda").to(dtype) for _ in range(3))
    assert _rel(m.attention(q, k, v, causal=causal), _reference(q, k, v, causal)) < TOLERANCE[dtype]


@pytest.mark.parametrize("warpgroups, chunk", [(1, 128), (2, 128), (3, 64)])
@pytest.mark.parametrize("overlap", ("none", "inter", "intra", "inter+intra"))
@pytest.mark.parametrize("schedule", ("tiles", "persistent", "prefetch"))
def test_every_configuration(warpgroups, chunk, overlap, schedule, tmp_path):
    """Causal at 700 keys under every configuration; 96 heads, so that a persistent block takes several tiles
    (4 to 12 where the SMs are 132: prefetch runs each next tile's head under the last P V of the one before)."""
    if warpgroups == 1 and "inter" in overlap:
        pytest.skip("one warpgroup has no turn to pass")
    m = _module("causal_attention", tmp_path, torch.float16)
    q, k, v = (torch.randn(2, 48, 700, 128, device="cuda", dtype=torch.float16) for _ in range(3))
    config = {"WARPGROUPS": warpgroups, "BLOCK_X": chunk, "STAGES": 2, "OVERLAP": overlap, "SCHEDULE": schedule}
    assert _rel(m.attention(q, k, v, causal=True, config=config), _reference(q, k, v, True)) < 1e-2


def test_grouped_heads_and_strided_inputs(tmp_path):
    m = _module("gqa", tmp_path, torch.bfloat16)
    q = torch.randn(2, 333, 8, 128, device="cuda", dtype=torch.bfloat16).transpose(1, 2)    # (b, s, h, d) view
    k, v = (torch.randn(2, 1000, 2, 128, device="cuda", dtype=torch.bfloat16).transpose(1, 2) for _ in range(2))
    out = torch.empty(2, 8, 333, 128, device="cuda", dtype=torch.bfloat16)[:, :, :, :]
    assert m.attention(q, k, v, out=out) is out
    assert _rel(out, _reference(q, k, v, False)) < TOLERANCE[torch.bfloat16]



@pytest.mark.parametrize("schedule", ("tiles", "persistent", "prefetch"))
@pytest.mark.parametrize("diagram", ("mha", "causal_attention", "alibi_attention", "sink_attention"))
def test_the_log_sum_exp_under_every_schedule(diagram, schedule, tmp_path):
    """return_lse=True under each schedule (the log-sum-exp is written in the consumers' epilogue, which
    every schedule runs): the rows' log-sum-exp against float64, and the output the same as without it."""
    from analyzer.measure.reference import inputs, reference_lse
    g = generate(diagram, "h100")
    m = written(g, tmp_path)
    sizes = {g.diagram.size(g.roles.seq_k).name: 1000, g.diagram.size(g.roles.seq_q).name: 1000, "batch": 2}
    shapes, kwargs = inputs(g, sizes)
    xs = [torch.randn(*s, device="cuda").half() for s in shapes]
    config = {"WARPGROUPS": 2, "BLOCK_X": 128, "STAGES": 2, "OVERLAP": "inter+intra", "SCHEDULE": schedule}
    out, lse = m.attention(*xs, **kwargs, config=config, return_lse=True)
    assert torch.equal(out, m.attention(*xs, **kwargs, config=config))
    want = reference_lse(torch, g, xs, sizes)
    seen = torch.isfinite(want)
    assert torch.equal(torch.isfinite(lse), seen)
    assert float((lse.double() - want)[seen].abs().max()) < 1e-3 * max(1.0, float(want[seen].abs().max()))
