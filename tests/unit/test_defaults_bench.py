"""bench/defaults.py without a GPU: its dry run lists a row per diagram and backend with what a GPU run
checks them against, and its float64 evaluation of a diagram is each diagram's reference."""

from __future__ import annotations

import json
import math

import pytest

from analyzer import hardware
from analyzer.config.kernels import configure_kernels
from bench import defaults as D
from bench.common import reference_attention

torch = pytest.importorskip("torch")


def test_a_dry_run_lists_every_backend_with_its_prediction_and_tolerance(tmp_path):
    assert D.main(["--gpu", "h100", "--diagrams", "softmax_contraction,linear_attention", "--dry-run",
                   "--out", str(tmp_path)]) == 0
    doc = json.loads((tmp_path / "defaults_h100.json").read_text())
    rows = {(r["diagram"], r["backend"]): r for r in doc["rows"]}
    assert set(rows) == {("softmax_contraction", "triton"), ("softmax_contraction", "cuda"),
                         ("linear_attention", "triton"), ("linear_attention", "cuda")}
    assert rows["linear_attention", "cuda"]["status"] == "n/a"          # the CUDA backend cannot render it
    assert "cannot render" in rows["linear_attention", "cuda"]["error"]
    limit = hardware.load("h100").level("smem").block_capacity_bytes
    for key in (("softmax_contraction", "triton"), ("linear_attention", "triton")):
        r = rows[key]
        assert r["status"] == "dry run" and r["default"] and r["predicted_s"] > 0 and r["tensor_flops"] > 0
        assert r["tolerance"] == pytest.approx(math.sqrt(16384) * 2 ** -11)    # x = 16384 keys, fp16
        assert all(0 < n <= limit for n in r["smem_counted"])
        assert r["command"].startswith(f"napkin kernel {key[0]} --gpu h100-sxm5 --backend triton")
    assert rows["softmax_contraction", "triton"]["shapes"] == [[16384, 16384], [16384, 128]]
    table = (tmp_path / "defaults_h100.md").read_text()
    assert "| linear_attention | triton (default) | dry run |" in table
    assert "dry run (no GPU)" in table and "Rows: 3 dry run, 1 n/a." in table


def test_an_unknown_diagram_is_a_usage_error(tmp_path, capsys):
    with pytest.raises(SystemExit) as stop:
        D.main(["--diagrams", "attention,nosuch", "--dry-run", "--out", str(tmp_path)])
    assert stop.value.code == 2 and "nosuch not shipped" in capsys.readouterr().err


@pytest.mark.parametrize("diagram", ["causal_attention", "gqa", "mla_attention", "attention_unfused",
                                     "sigmoid_attention", "softcap_attention"])
def test_the_float64_evaluation_is_attention_in_the_calls_layout(diagram):
    """The diagram's ops, evaluated, against SDPA-style attention (heads grouped as SDPA's enable_gqa,
    the causal mask top-left aligned): the call's (batch, heads, seqlen, head_dim) tensors in and out."""
    c = configure_kernels(diagram, "h100", sized=False, ranked=False)
    (q, k, v), kwargs = D.inputs(c)
    seq_k = 24 if kwargs["causal"] else 40
    gen = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(*s[:2], n, s[3], generator=gen, dtype=torch.float64)
               for s, n in ((q, 24), (k, seq_k), (v, seq_k)))
    q = q * (8 if diagram == "softcap_attention" else 1)      # scores beyond the cap of 50
    want = reference_attention(torch, q, k, v, kwargs["causal"], diagram == "sigmoid_attention",
                               50.0 if diagram == "softcap_attention" else None)
    assert torch.allclose(D.reference(torch, c, [q, k, v]), want, rtol=1e-12, atol=1e-12)


def test_the_float64_evaluation_of_a_sliding_window(tmp_path):
    """gemma2_local_attention (cap 50, then causal with a window), its window narrowed to 16 keys so that
    it bites at 40 tokens: its evaluation is attention with the window's mask."""
    import yaml

    from analyzer.common import resources
    data = yaml.safe_load(resources.shipped("diagrams")["gemma2_local_attention"].read_text())
    data["ops"] = [dict(o, window=16) if o["primitive"] == "window_mask" else o for o in data["ops"]]
    path = tmp_path / "local.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    c = configure_kernels(str(path), "h100", sized=False, ranked=False)
    gen = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(1, 1, 40, 128, generator=gen, dtype=torch.float64) for _ in range(3))  # d: its default
    want = reference_attention(torch, q * 8, k, v, True, False, 50.0, 16)
    assert torch.allclose(D.reference(torch, c, [q * 8, k, v]), want, rtol=1e-12, atol=1e-12)
    assert not torch.allclose(want, reference_attention(torch, q * 8, k, v, True, False, 50.0), atol=1e-3)


@pytest.mark.parametrize("before, after", [(5, 9), (None, 3), (12, None)])
def test_the_float64_evaluation_of_a_band(tmp_path, before, after):
    """band_attention, its band narrowed so that it bites at 40 tokens (either bound left out): its
    evaluation is attention with the band's mask, and not the causal one."""
    import yaml

    from analyzer.common import resources
    data = yaml.safe_load(resources.shipped("diagrams")["band_attention"].read_text())
    mask = next(o for o in data["ops"] if o["primitive"] == "band_mask")
    for side, n in (("before", before), ("after", after)):
        mask.pop(side)
        if n is not None:
            mask[side] = n
    path = tmp_path / "band.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    c = configure_kernels(str(path), "h100", sized=False, ranked=False)
    gen = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(1, 1, 40, 128, generator=gen, dtype=torch.float64) for _ in range(3))
    want = reference_attention(torch, q, k, v, False, False, band=(before, after))
    assert torch.allclose(D.reference(torch, c, [q, k, v]), want, rtol=1e-12, atol=1e-12)
    assert not torch.allclose(want, reference_attention(torch, q, k, v, False, False), atol=1e-3)
    assert not torch.allclose(want, reference_attention(torch, q, k, v, True, False), atol=1e-3)


def test_the_float64_evaluation_of_alibi():
    """alibi_attention: its slopes, the call's fourth tensor (batch, heads), broadcast from (heads,), one
    head and batch entry at the defaults; its
    evaluation is attention with - m |i - j| on the scaled scores, under the causal mask."""
    c = configure_kernels("alibi_attention", "h100", sized=False, ranked=False)
    shapes, kwargs = D.inputs(c)
    assert shapes[3] == [1, 1] and kwargs == {"causal": True}
    gen = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(1, 1, 40, 128, generator=gen, dtype=torch.float64) for _ in range(3))  # the defaults
    slopes = torch.tensor([0.25], dtype=torch.float64)
    want = reference_attention(torch, q, k, v, True, False, slopes=slopes)
    assert torch.allclose(D.reference(torch, c, [q, k, v, slopes]), want, rtol=1e-12, atol=1e-12)
    assert not torch.allclose(want, reference_attention(torch, q, k, v, True, False), atol=1e-3)


def test_the_float64_evaluation_of_sinks():
    """sink_attention: its sinks, the call's fourth tensor (batch, heads); its evaluation is causal attention
    with a sink a head in the softmax's denominator, and plain causal attention where the sink is -inf."""
    c = configure_kernels("sink_attention", "h100", sized=False, ranked=False)
    shapes, kwargs = D.inputs(c)
    assert shapes[3] == [1, 1] and kwargs == {"causal": True}
    gen = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(1, 1, 40, 64, generator=gen, dtype=torch.float64) for _ in range(3))  # d: its default
    for sink in (0.7, 5.0):
        sinks = torch.tensor([sink], dtype=torch.float64)
        want = reference_attention(torch, q, k, v, True, False, sinks=sinks)
        assert torch.allclose(D.reference(torch, c, [q, k, v, sinks]), want, rtol=1e-12, atol=1e-12)
        assert not torch.allclose(want, reference_attention(torch, q, k, v, True, False), atol=1e-3)
    none = torch.tensor([float("-inf")], dtype=torch.float64)
    assert torch.allclose(D.reference(torch, c, [q, k, v, none]), reference_attention(torch, q, k, v, True, False),
                          rtol=1e-12, atol=1e-12)


def test_the_float64_evaluation_of_an_additive_bias():
    """bias_attention: its bias, the call's fourth tensor (batch, heads, q, x); its evaluation is
    attention with the bias added to the scaled scores, under the causal mask."""
    c = configure_kernels("bias_attention", "h100", sized=False, ranked=False)
    shapes, _ = D.inputs(c)
    assert shapes[3] == [1, 1, 8192, 8192]
    gen = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(1, 1, 8192, 128, generator=gen, dtype=torch.float64)[:, :, :40] for _ in range(3))
    bias = torch.randn(1, 1, 40, 40, generator=gen, dtype=torch.float64) * 3
    s = q @ k.transpose(-1, -2) * 128 ** -0.5 + bias
    s = s.masked_fill(torch.ones(40, 40, dtype=torch.bool).triu(1), float("-inf"))
    want = torch.softmax(s, -1) @ v
    assert torch.allclose(D.reference(torch, c, [q, k, v, bias]), want, rtol=1e-12, atol=1e-12)


def test_the_float64_evaluation_of_the_other_diagrams():
    gen = torch.Generator().manual_seed(0)

    def r(*shape):
        return torch.randn(*shape, generator=gen, dtype=torch.float64)

    cases = {
        "matmul": ([r(30, 20), r(20, 10)], lambda a, b: a @ b),
        "linear_attention": ([r(30, 128), r(50, 128), r(50, 128)], lambda q, k, v: q @ (k.T @ v)),
        "mlp2": ([r(30, 256), r(256, 64), r(64, 256)], lambda x, w1, w2: torch.relu(x @ w1) @ w2),
        "mlp_gelu": ([r(30, 256), r(256, 64), r(64), r(64, 128)],
                     lambda x, w1, b, w2: torch.nn.functional.gelu(x @ w1 + b, approximate="tanh") @ w2),
        "softmax_contraction": ([r(30, 50), r(50, 128)], lambda s, v: torch.softmax(s, -1) @ v),
        "rmsnorm_matmul": ([r(30, 4096), r(4096).abs() + 0.5, r(4096, 20)],    # i's default: the mean's 1/i
                           lambda x, g, w: x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * g @ w),
    }
    for diagram, (tensors, reference) in cases.items():
        c = configure_kernels(diagram, "h100", sized=False, ranked=False)
        assert torch.allclose(D.reference(torch, c, tensors), reference(*tensors), rtol=1e-10, atol=1e-10), diagram
