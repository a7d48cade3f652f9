"""Generated Triton attention kernels against a float64 reference, on the CPU (TRITON_INTERPRET=1).

Every shipped attention diagram's kernel must match within 1e-2 relative error on random inputs,
including FlashAttention-3's outlier distribution, sequence lengths that are not multiples of any
block (1, 17, 333: two whole 128-blocks and a part, five 64-blocks and a part), fp16 and bf16,
non-contiguous inputs; and write every output element.
"""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("triton")

from helpers_kernel import module, outliers, reference, rel_err, written  # noqa: E402

from analyzer.codegen import generate  # noqa: E402

DIAGRAMS = {  # diagram -> (causal, sigmoid, grouped-query)
    "attention": (False, False, False),
    "mha": (False, False, False),
    "gqa": (False, False, True),
    "causal_attention": (True, False, False),
    "sigmoid_attention": (False, True, False),
    "attention_unfused": (False, False, False),
    "softcap_attention": (False, False, False),
}
SOFTCAP = {"softcap_attention": 50.0}    # the diagram's cap on its scores (gemma2_local_attention: below)
TOL = 1e-2
LONG = 333    # several blocks of queries and keys along both axes, the last one partial, under the interpreter


def _inputs(shape_q, shape_kv, dtype, dist, seed):
    g = torch.Generator().manual_seed(seed)
    draw = (lambda *s: outliers(*s, generator=g)) if dist == "outliers" else \
        (lambda *s: torch.randn(*s, generator=g))
    return draw(*shape_q).to(dtype), draw(*shape_kv).to(dtype), draw(*shape_kv).to(dtype)


@pytest.mark.parametrize("diagram", list(DIAGRAMS))
@pytest.mark.parametrize("seqlen", [1, 17, pytest.param(LONG, marks=pytest.mark.slow)])
def test_matches_float64(diagram, seqlen, tmp_path):
    causal, sigmoid, gqa = DIAGRAMS[diagram]
    m = module(diagram, tmp_path)
    heads, kv = (4, 2) if gqa else (2, 2)
    batch, hdim = (1, 64) if seqlen == LONG else (2, 128)
    q, k, v = _inputs((batch, heads, seqlen, hdim), (batch, kv, seqlen, hdim), torch.float16, "normal",
                      seed=seqlen)
    out = torch.full_like(q, float("nan"))                       # poison: every element must be written
    m.attention(q, k, v, causal=causal, out=out)
    assert torch.isfinite(out).all()
    assert rel_err(out, reference(q, k, v, causal=causal, sigmoid=sigmoid, softcap=SOFTCAP.get(diagram))) < TOL


@pytest.mark.slow(seconds=4)    # window 1 about 5 s, window 40 about 3 s
@pytest.mark.parametrize("window", [1, 40])
def test_a_sliding_window_matches_float64(window, tmp_path):
    """gemma2_local_attention with a window short enough to bite at 100 tokens (its own, 4096, does so
    only on the GPU: bench/local_attention.py): the blocks before a window skipped, its left edge masked."""
    import yaml

    from analyzer.common import resources
    data = yaml.safe_load(resources.shipped("diagrams")["gemma2_local_attention"].read_text())
    data["ops"] = [dict(o, window=window) if o["primitive"] == "window_mask" else o for o in data["ops"]]
    data["dtype"] = "fp16"      # the interpreter's tl.dot multiplies bf16 as integers (below)
    path = tmp_path / "local.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    m = written(generate(str(path), "a100", backend="triton"), tmp_path)
    q, k, v = _inputs((1, 2, 100, 64), (1, 2, 100, 64), torch.float16, "normal", seed=window)
    q = q * 8                   # scores the cap bends
    out = torch.full_like(q, float("nan"))
    m.attention(q, k, v, causal=True, out=out)
    assert torch.isfinite(out).all()
    ref = reference(q, k, v, causal=True, softcap=50.0, window=window)
    assert rel_err(out, ref) < TOL
    assert rel_err(out, reference(q, k, v, causal=True, softcap=50.0)) > 10 * TOL     # the window bites


_BANDED: dict = {}


def _banded(before, after, rect: bool, tmp_path):
    """band_attention's portable module with another band (None: that bound left out), its keys an axis of
    their own where `rect` (the call's k and v then may be longer or shorter than q); made once a process."""
    import yaml

    from analyzer.common import resources
    key = (before, after, rect)
    if key not in _BANDED:
        data = yaml.safe_load(resources.shipped("diagrams")["band_attention"].read_text())
        mask = next(o for o in data["ops"] if o["primitive"] == "band_mask")
        for side, n in (("before", before), ("after", after)):
            mask.pop(side)
            if n is not None:
                mask[side] = n
        if rect:
            data["axes"]["x"] = {"default": 8192, "doc": "key positions"}
        path = tmp_path / f"band_{before}_{after}_{rect}.yaml"
        path.write_text(yaml.safe_dump(data, sort_keys=False))
        _BANDED[key] = written(generate(str(path), "a100", backend="triton"), tmp_path)
    return _BANDED[key]


@pytest.mark.slow(seconds=8)
@pytest.mark.parametrize("before, after, seq_q, seq_k", [
    (5, 40, 150, 150),       # both edges cut through the blocks: a left pass, interior chunks, edge chunks
    (None, 3, 130, 130),     # no bound before: from the first key to 3 past each row
    (20, None, 130, 130),    # no bound after: from 20 before each row to the last key
    (7, 9, 1, 1),
    (7, 9, 17, 17),
    (30, 10, 70, 140),       # fewer queries than keys (top-left aligned)
    (30, 10, 140, 120),      # more queries than keys, each within the band's reach of one
])
def test_a_band_matches_float64(before, after, seq_q, seq_k, tmp_path):
    """band_attention with bands narrow enough to bite at these lengths (its own, 256 either side, does so
    only past 256 tokens): the blocks outside the band skipped, its two edges masked."""
    m = _banded(before, after, seq_q != seq_k, tmp_path)
    q, k, v = _inputs((1, 2, seq_q, 64), (1, 2, seq_k, 64), torch.float16, "normal", seed=seq_q)
    out = torch.full_like(q, float("nan"))
    m.attention(q, k, v, causal=False, out=out)
    assert torch.isfinite(out).all()
    assert rel_err(out, reference(q, k, v, band=(before, after))) < TOL
    if seq_q > 1:
        assert rel_err(out, reference(q, k, v)) > 10 * TOL          # the band bites


def test_a_query_the_band_gives_no_key_gets_zero(tmp_path):
    """More queries than keys, the last ones past the band's reach of every key (query i sees keys
    i - 30 .. i + 10, and there are 100 keys: queries from 131 on see none): their rows are 0, as
    FlashAttention gives, not 0 / 0; the others match float64."""
    m = _banded(30, 10, True, tmp_path)
    q, k, v = _inputs((1, 2, 200, 64), (1, 2, 100, 64), torch.float16, "normal", seed=5)
    out = torch.full_like(q, float("nan"))
    m.attention(q, k, v, causal=False, out=out)
    seen = 100 + 30                         # queries 0 .. 129 see a key
    assert torch.isfinite(out).all() and not out[:, :, seen:].any()
    assert rel_err(out[:, :, :seen], reference(q, k, v, band=(30, 10))[:, :, :seen]) < TOL


def test_softcap_bounds_the_scores_the_kernel_sees(tmp_path):
    """Scores beyond the cap (inputs scaled so that |q k^T| / sqrt(d) reaches hundreds) are bounded as
    cap tanh(s / cap) bounds them: against the reference without the cap the output differs."""
    m = module("softcap_attention", tmp_path)
    q, k, v = _inputs((1, 2, 17, 128), (1, 2, 17, 128), torch.float16, "normal", seed=3)
    q = q * 40
    out = torch.full_like(q, float("nan"))
    m.attention(q, k, v, out=out)
    assert rel_err(out, reference(q, k, v, softcap=50.0)) < TOL
    assert rel_err(out, reference(q, k, v)) > 10 * TOL


# Triton 3.6's interpreter multiplies bf16 tiles as raw 16-bit integers in tl.dot, so bf16 runs are
# checked on the GPU (bench/attention_h200.py); here bf16 generation is checked to change no kernel.
@pytest.mark.parametrize("diagram", ["attention", "causal_attention", "gqa"])
@pytest.mark.parametrize("dtype", ["fp16"])
def test_outlier_distribution(diagram, dtype, tmp_path):
    causal, sigmoid, gqa = DIAGRAMS[diagram]
    m = module(diagram, tmp_path, dtype=dtype)
    tdtype = torch.float16 if dtype == "fp16" else torch.bfloat16
    heads, kv = (4, 1) if gqa else (2, 2)
    q, k, v = _inputs((1, heads, 300, 64), (1, kv, 300, 64), tdtype, "outliers", seed=7)
    out = torch.full_like(q, float("nan"))
    m.attention(q, k, v, causal=causal, out=out)
    assert torch.isfinite(out).all()
    assert rel_err(out, reference(q, k, v, causal=causal)) < TOL


def test_non_contiguous_inputs(tmp_path):
    m = module("mha", tmp_path)
    g = torch.Generator().manual_seed(3)
    # (batch, seqlen, heads, dim) tensors seen as (batch, heads, seqlen, dim): strided, not copied
    q, k, v = (torch.randn(2, 40, 3, 64, generator=g).half().transpose(1, 2) for _ in range(3))
    assert not q.is_contiguous()
    assert rel_err(m.attention(q, k, v), reference(q, k, v)) < TOL


def test_head_dim_256_where_it_fits(tmp_path):
    m = module("attention", tmp_path)
    assert 256 in m.HEAD_DIMS
    q, k, v = _inputs((1, 1, 33, 256), (1, 1, 33, 256), torch.float16, "normal", seed=5)
    assert rel_err(m.attention(q, k, v), reference(q, k, v)) < TOL


def test_cross_attention_lengths(tmp_path):
    m = module("attention", tmp_path)
    q, k, v = _inputs((1, 2, 50, 64), (1, 2, 70, 64), torch.float16, "normal", seed=9)
    assert rel_err(m.attention(q, k, v), reference(q, k, v)) < TOL


@pytest.mark.parametrize("diagram", ["attention", "causal_attention"])
def test_bf16_generation_same_kernel(diagram):
    from helpers_kernel import generated
    fp16, bf16 = generated(diagram, dtype="fp16").source, generated(diagram, dtype="bf16").source
    body = lambda text: text[text.index("@triton.jit"):text.index("CONFIGS = {")]  # noqa: E731
    assert body(fp16) == body(bf16)
