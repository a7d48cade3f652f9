"""ALiBi's linear bias (the `alibi` primitive, diagrams/alibi_attention.yaml): what the diagram means, how
the Hopper kernel rewrites it under a causal mask and what the model counts for it, the call's slopes,
and the portable kernel against float64 under Triton's interpreter. The Hopper module runs against
float64 on an H100 in bench/alibi_attention.py (its kernel compiles for sm_90a in test_allocation)."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
import yaml

from analyzer import hardware
from analyzer.codegen import generate
from analyzer.codegen.hopper.kernel import SCORE_OPS, score_function
from analyzer.common import resources
from analyzer.common.errors import NapkinError
from analyzer.config import hopper
from analyzer.config.kernels import configure_kernels
from analyzer.config.scores import E4M3, SFU_PER_SCORE, VECTOR_PER_SCORE, ScoreOp, Scores
from analyzer.diagram.interface import interface

H100 = hardware.load("h100")


def _data() -> dict:
    return yaml.safe_load(resources.shipped("diagrams")["alibi_attention"].read_text())


def _write(tmp_path: Path, data: dict, name: str = "alibi.yaml") -> str:
    path = tmp_path / name
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return str(path)


def _without_mask(data: dict) -> dict:
    mask = next(o for o in data["ops"] if o["primitive"] == "causal_mask")
    ops = [dict(o, inputs=[mask["inputs"][0] if i == mask["name"] else i for i in o["inputs"]])
           for o in data["ops"] if o is not mask]
    return {**data, "ops": ops}


def _chain(path: str) -> Scores:
    return hopper.scores(configure_kernels(path, H100, sized=False))


def test_the_slopes_are_an_input_of_the_call_after_v():
    c = configure_kernels("alibi_attention", H100, sized=False)
    roles = c.roles
    assert (roles.query, roles.key, roles.value, roles.extras, roles.causal) == ("Q", "K", "V", ("m",), True)
    assert c.diagram.arrays["m"].axes == ("batch", "heads")      # woven: a slope a batch entry and head
    assert interface(configure_kernels("causal_attention", H100, sized=False).diagram).__class__.__name__ == "Plain"


def test_under_a_causal_mask_the_kernel_applies_the_bias_as_a_columns_alone(tmp_path):
    """alibi_attention: the scale folds into exp2's factor and ALiBi is one add a score; without the mask
    (keys on both sides of the diagonal) it is |i - j| and a multiply-add, and the scale stays."""
    causal = _chain("alibi_attention")
    assert [(o.primitive, o.shifted) for o in causal.ops] == [("scale", False), ("alibi", True),
                                                             ("causal_mask", False)]
    assert causal.folded and causal.vector_per_score == 1 and causal.slope.name == "Sa"
    full = _chain(_write(tmp_path, _without_mask(_data())))
    assert [(o.primitive, o.shifted) for o in full.ops] == [("scale", False), ("alibi", False)]
    assert not full.folded and full.vector_per_score == 2
    text = score_function(full, "d.yaml")
    assert SCORE_OPS["alibi"][0] in text and SCORE_OPS["scale"][0] in text


def test_an_op_after_the_bias_that_bends_it_keeps_the_bias_whole(tmp_path):
    """A softcap after ALiBi does not keep a row's constant a row's constant: the kernel must not drop it."""
    data = _data()
    ops = data["ops"]
    i = next(n for n, o in enumerate(ops) if o["primitive"] == "alibi")
    cap = {"name": "Sc", "primitive": "softcap", "inputs": ["Sa"], "cap": 50, "output": ["q", "x"]}
    ops.insert(i + 1, cap)
    ops[i + 2] = dict(ops[i + 2], inputs=["Sc"])
    chain = _chain(_write(tmp_path, data))
    assert not chain.slope.shifted and not chain.folded


@pytest.mark.parametrize("seed", range(5))
def test_the_kernels_rewriting_is_the_diagrams_attention(seed):
    """softmax over j <= i of (s_ij - m |i - j|) equals softmax of (s_ij / c + m (j - r) / c) scaled by c
    in exp's factor, for any row offset r: the shifted, folded form the Hopper kernel renders, in float64."""
    rng = np.random.default_rng(seed)
    n, c, m, r = 50, rng.uniform(0.05, 2), rng.uniform(2 ** -8, 1), int(rng.integers(-100, 100))
    s = rng.normal(size=(n, n)) * 4
    i, j = np.arange(n)[:, None], np.arange(n)[None, :]
    hidden = j > i

    def softmax(x):
        x = np.where(hidden, -np.inf, x)
        e = np.exp(x - x.max(1, keepdims=True))
        return e / e.sum(1, keepdims=True)

    want = softmax(c * s - m * np.abs(i - j))
    got = softmax(c * (s + (m / c) * (j - r)))
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-15)


def test_the_model_counts_the_bias_on_the_lanes():
    """One fp32 add a score (two without the mask) at the lanes' rate, beside the softmax's exp2s."""
    c = hopper.configuration(H100, 128, "fp16", warpgroups=2, chunk=128, stages=2, overlap="intra")
    per_clock = H100.per_sm_per_clock
    for shifted, ops in ((True, 1), (False, 2)):
        scores = Scores((ScoreOp("Sa", "alibi", shifted=shifted),))
        (stage,) = [s for s in hopper._body(H100, c, 128, "fp16", hopper.HopperParams(), scores=scores) if s.lane == "sfu"]
        assert math.isclose(stage.clocks, 129 / per_clock.sfu_ops + 128 * ops / per_clock.fp32_fma)
    # every costed op the kernel renders (FP8's e4m3 rounding is the kernel's own, not a diagram's op)
    assert set(VECTOR_PER_SCORE) - {E4M3} <= set(SCORE_OPS) and {p.split()[0] for p in SCORE_OPS} == set(SFU_PER_SCORE)


@pytest.mark.parametrize("change, message", [
    ({"inputs": {"Q": ["q", "d"], "K": ["x", "d"], "V": ["x", "d"], "m": ["q"]}}, "a slope is one number a head"),
    ("no key", "alibi needs a `key` axis"),
    ("same axes", "two different axes"),
])
def test_a_bias_the_primitive_cannot_mean_is_refused(tmp_path, change, message):
    data = _data()
    sa = next(o for o in data["ops"] if o["primitive"] == "alibi")
    if change == "no key":
        del sa["key"]
    elif change == "same axes":
        sa["key"] = "q"
    else:
        data.update(change)
    with pytest.raises(NapkinError, match=message):
        configure_kernels(_write(tmp_path, data), H100, sized=False)


# -- the portable kernel under Triton's interpreter -------------------------------------------------------

torch = pytest.importorskip("torch")


def _reference(q, k, v, slopes, causal):
    q, k, v = (x.double() for x in (q, k, v))
    n = q.shape[2]
    i = torch.arange(n, dtype=torch.float64)
    s = q @ k.transpose(-1, -2) * q.shape[-1] ** -0.5
    s = s - slopes.double().broadcast_to(q.shape[:2])[:, :, None, None] * (i[:, None] - i[None, :]).abs()
    if causal:
        s = s.masked_fill(torch.ones(n, n, dtype=torch.bool).triu(1), float("-inf"))
    return torch.softmax(s, -1) @ v


@pytest.mark.parametrize("causal, per_batch", [(True, False), (True, True), (False, False)])
def test_the_portable_kernel_matches_float64(tmp_path, causal, per_batch):
    """Slopes 2^(-8 (h + 1) / H) given per head (broadcast over the batch) or per batch entry and head; the
    causal diagram and its copy without the mask; 70 tokens (a partial block), the bias far from negligible."""
    pytest.importorskip("triton")
    from helpers_kernel import written
    path = "alibi_attention" if causal else _write(tmp_path, _without_mask(_data()))
    m = written(generate(path, "a100", backend="triton"), tmp_path)
    g = torch.Generator().manual_seed(3)
    q, k, v = (torch.randn(2, 4, 70, 64, generator=g).half() for _ in range(3))
    slopes = torch.tensor([2.0 ** (-8 * (h + 1) / 4) for h in range(4)]).half()
    if per_batch:
        slopes = torch.stack([slopes, slopes.flip(0)])
    out = m.attention(q, k, v, slopes, causal=causal)
    ref = _reference(q, k, v, slopes, causal)
    err = ((out.double() - ref).norm() / ref.norm()).item()
    assert err < 1e-2
    unbiased = _reference(q, k, v, torch.zeros(4), causal)
    assert ((unbiased - ref).norm() / ref.norm()).item() > 0.1        # the bias matters at these sizes


def test_slopes_that_do_not_broadcast_are_refused(tmp_path):
    pytest.importorskip("triton")
    from helpers_kernel import written
    m = written(generate("alibi_attention", "a100", backend="triton"), tmp_path)
    q = torch.randn(2, 4, 8, 64).half()
    with pytest.raises(ValueError, match=r"m must broadcast to \(batch, heads\) = \(2, 4\); got shape \(3,\)"):
        m.attention(q, q, q, torch.ones(3).half(), causal=True)


@pytest.mark.parametrize("seed", range(3))
def test_the_recomputed_distance_is_exact_below_two_to_the_23(seed):
    """_attn_alibi_cols's recomputed lowering: the bits 0x4B000000 | j are the float 2^23 + j, and less
    the float 2^23 + r they give j - r exactly for keys and rows below 2^23 (what the launcher admits)."""
    rng = np.random.default_rng(seed)
    j = rng.integers(0, 1 << 23, 100_000, dtype=np.uint32)
    r = rng.integers(0, 1 << 23, 100_000)
    got = (j | np.uint32(0x4B000000)).view(np.float32) - (8388608.0 + r).astype(np.float32)
    np.testing.assert_array_equal(got, (j.astype(np.int64) - r).astype(np.float32))
    assert np.array_equal(got.astype(np.int64), j.astype(np.int64) - r)
