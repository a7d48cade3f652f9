"""Shared pieces of the kernel tests: generating and importing a module, and a float64 reference."""

from __future__ import annotations

import importlib.util
import itertools
from functools import cache
from pathlib import Path

import torch

from analyzer.codegen import generate

GPU = "h200"


def generated(diagram: str, backend: str = "triton", dtype: str = "fp16"):
    """The generated file of a shipped diagram for GPU, made once a process however the call spells its
    arguments (functools.cache keys `generated(d)` and `generated(d, dtype="fp16")` apart)."""
    return _generated(diagram, backend, dtype)


@cache
def _generated(diagram: str, backend: str, dtype: str):
    return generate(diagram, GPU, backend=backend, dtype=dtype)


def module(diagram: str, tmp: Path, dtype: str = "fp16"):
    return written(generated(diagram, dtype=dtype), tmp / f"{diagram}_{dtype}.py")


_written = itertools.count()


def written(g, path: Path):
    """Generated module `g` written at `path` (a fresh name if it is a folder) and imported."""
    if path.is_dir():
        path = path / f"generated_{next(_written)}.py"
    g.write(path)
    spec = importlib.util.spec_from_file_location(path.stem, path)
    m = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(m)
    return m


def reference(q, k, v, *, causal=False, sigmoid=False, softcap=None, window=None, band=None):
    """Attention in float64, heads of k and v repeated for grouped-query (torch's enable_gqa); `softcap`:
    the scores bounded to softcap tanh(s / softcap) before the softmax (Gemma 2); `window` (causal):
    query i sees keys i - window + 1 .. i only; `band` (before, after): query i sees keys
    i - before .. i + after only (None: every key on that side), top-left aligned."""
    q, k, v = (x.double() for x in (q, k, v))
    if k.shape[1] != q.shape[1]:
        r = q.shape[1] // k.shape[1]
        k, v = k.repeat_interleave(r, 1), v.repeat_interleave(r, 1)
    s = q @ k.transpose(-1, -2) * q.shape[-1] ** -0.5
    if softcap is not None:
        s = softcap * torch.tanh(s / softcap)
    if causal:
        lq, lk = s.shape[-2:]
        hidden = torch.ones(lq, lk, dtype=torch.bool).triu(1)
        if window is not None:
            hidden |= torch.ones(lq, lk, dtype=torch.bool).tril(-window)
        s = s.masked_fill(hidden, float("-inf"))
    if band is not None:
        lq, lk = s.shape[-2:]
        i, j = torch.arange(lq)[:, None], torch.arange(lk)[None, :]
        hidden = torch.zeros(lq, lk, dtype=torch.bool)
        hidden |= (j < i - band[0]) if band[0] is not None else hidden
        hidden |= (j > i + band[1]) if band[1] is not None else hidden
        s = s.masked_fill(hidden, float("-inf"))
    return (torch.sigmoid(s) if sigmoid else torch.softmax(s, -1)) @ v


def outliers(*shape, generator):
    """FlashAttention-3's outlier distribution: N(0, 1) + N(0, 100) * Bernoulli(0.001)."""
    base = torch.randn(*shape, generator=generator)
    spikes = torch.randn(*shape, generator=generator) * 10
    return base + spikes * (torch.rand(*shape, generator=generator) < 0.001)


def rel_err(out, ref) -> float:
    return ((out.double() - ref).norm() / ref.norm()).item()
