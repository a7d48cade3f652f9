"""The log-sum-exp a generated attention module returns (`attention(..., return_lse=True)`), what merges
partial attention over parts of the keys: the portable module's run by Triton's interpreter against
float64 (analyzer.measure.reference.reference_lse) for every shipped score chain, and the merge itself;
the Hopper module's text takes the same call (bench/lse_check.py runs it on the GPU)."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("triton")

from helpers_kernel import generated, written  # noqa: E402

from analyzer.measure.reference import inputs, reduction, reference, reference_lse, tolerance  # noqa: E402

# every shipped attention diagram whose output an online softmax normalises: plain, masks, grouped
# heads, MLA's value head dim, ALiBi, an additive bias, softcap with a window, sinks
CHAINS = ("attention", "causal_attention", "gqa", "mla_attention", "alibi_attention", "bias_attention",
          "gemma2_local_attention", "sink_attention", "band_attention", "softcap_attention")


def _call(diagram: str, tmp_path, length_q: int, length_k: int, seed: int = 0):
    g = generated(diagram)
    m = written(g, tmp_path)
    sizes = {g.diagram.size(g.roles.seq_k).name: length_k, g.diagram.size(g.roles.seq_q).name: length_q,
             "batch": 2}       # a causal diagram's keys are its queries: one size, length_q
    shapes, kwargs = inputs(g, sizes)
    gen = torch.Generator().manual_seed(seed)
    xs = [torch.randn(*s, generator=gen).half() for s in shapes]
    return g, m, sizes, xs, kwargs


@pytest.mark.slow(seconds=3)
@pytest.mark.parametrize("diagram", CHAINS)
def test_the_log_sum_exp_is_each_rows_over_its_scores(diagram, tmp_path):
    """At lengths no tile divides (more queries than keys where the diagram gives them sizes of their own),
    the output is what it is without return_lse, and the log-sum-exp is the float64 one of the scores the
    softmax normalises (its sink among them) within a score's rounding: sqrt(L) u of its size; -inf
    exactly where a row sees no key."""
    g, m, sizes, xs, kwargs = _call(diagram, tmp_path, 45, 33)
    length_q = xs[0].shape[2]
    out, lse = m.attention(*xs, **kwargs, return_lse=True)
    assert torch.equal(out, m.attention(*xs, **kwargs))
    want = reference_lse(torch, g, xs, sizes)
    assert lse.dtype == torch.float32 and lse.shape == want.shape == (2, xs[0].shape[1], length_q)
    seen = torch.isfinite(want)
    assert torch.equal(torch.isfinite(lse), seen)
    allowed = tolerance(g.dtype, reduction(g, sizes)) * max(1.0, float(want[seen].abs().max()))
    assert float((lse.double() - want)[seen].abs().max()) <= allowed
    assert float((out.double() - reference(torch, g, xs, sizes)).abs().max()) <= \
        tolerance(g.dtype, reduction(g, sizes)) * float(reference(torch, g, xs, sizes).abs().max())


@pytest.mark.slow(seconds=3)
def test_two_halves_of_the_keys_merge_into_the_whole(tmp_path):
    """What context parallelism does with it: attention over each half of the keys, merged by their
    log-sum-exps (o = sum_i exp(lse_i - lse) o_i, lse = logsumexp_i lse_i), is attention over all of them."""
    g, m, sizes, (q, k, v), kwargs = _call("attention", tmp_path, 40, 64, seed=3)
    whole, lse = m.attention(q, k, v, return_lse=True)
    parts = [m.attention(q, k[:, :, half], v[:, :, half], return_lse=True)
             for half in (slice(0, 32), slice(32, 64))]
    merged_lse = torch.logsumexp(torch.stack([p[1] for p in parts]), 0)
    merged = sum(torch.exp(p[1] - merged_lse)[..., None] * p[0].float() for p in parts)
    assert float((merged_lse - lse).abs().max()) < 1e-3
    assert float((merged - whole.float()).abs().max()) < 2e-3


@pytest.mark.slow(seconds=3)
def test_a_wrong_flag_is_refused_and_a_chain_without_a_softmax_has_none(tmp_path):
    """return_lse takes True or False; a sigmoid chain (no normaliser) or a softmax outside its dot
    (attention_unfused) has no log-sum-exp to return, and its wrapper no such parameter."""
    _, m, _, xs, kwargs = _call("attention", tmp_path, 8, 8)
    with pytest.raises(TypeError, match="return_lse must be True or False"):
        m.attention(*xs, **kwargs, return_lse=1)
    for diagram in ("sigmoid_attention", "attention_unfused"):
        assert "return_lse" not in generated(diagram).source


@pytest.mark.slow(seconds=6)
def test_the_op_with_the_log_sum_exp_stays_one_node_of_a_compiled_graph(tmp_path):
    """attention_op(lse=True) returns what attention(..., return_lse=True) does, inside torch.compile
    (its fake gives both outputs' shapes and types), and is an op of its own beside attention_op()."""
    _, m, _, xs, kwargs = _call("causal_attention", tmp_path, 24, 24)
    op = m.attention_op(lse=True)
    assert op is m.attention_op(lse=True) and op is not m.attention_op()

    @torch.compile(backend="eager", fullgraph=True)
    def run(q, k, v):
        out, lse = op(q, k, v, causal=True)
        return out * 2, lse

    out, lse = run(*xs)
    want_out, want_lse = m.attention(*xs, causal=True, return_lse=True)
    assert torch.equal(out, want_out * 2) and torch.equal(lse, want_lse)


def test_the_hopper_module_takes_the_same_call():
    """The Hopper module's wrapper and op take return_lse and lse as the portable module's do, and its
    kernel writes the rows' log-sum-exp only where the launch asks (a constexpr)."""
    src = generated("alibi_attention", backend="hopper").source
    assert "return_lse=False):" in src and "def attention_op(lse=False):" in src
    assert "LSE: gl.constexpr" in src and "LSE_SHIFT = 1.0" in src       # ALiBi shifted: its row part put back
    assert "LSE_SHIFT = 0.0" in generated("attention", backend="hopper").source


@pytest.mark.slow(seconds=3)
def test_a_score_input_named_lse_keeps_its_name(tmp_path):
    """The diagram's names come first: an ALiBi whose slope input is named `lse` keeps that parameter,
    and the log-sum-exp the call asks for is still the rows' (the wrapper's own tensor gets another name)."""
    import re
    from pathlib import Path

    from analyzer.codegen import generate
    from analyzer.measure.run import wrapper_of
    text = (Path(__file__).resolve().parents[2] / "diagrams" / "alibi_attention.yaml").read_text()
    renamed = re.sub(r"^(\s*)m: \[\]", r"\1lse: []", text, flags=re.M).replace("inputs: [Ss, m]", "inputs: [Ss, lse]")
    assert renamed != text
    (tmp_path / "alibi_lse.yaml").write_text(renamed)
    g = generate(str(tmp_path / "alibi_lse.yaml"), "h200", backend="triton")
    assert "def attention(q, k, v, lse, causal=True" in g.source
    fn = wrapper_of(g, tmp_path)
    sizes = {g.diagram.size(g.roles.seq_q).name: 33, "batch": 2}
    shapes, kwargs = inputs(g, sizes)
    gen = torch.Generator().manual_seed(1)
    xs = [torch.randn(*s, generator=gen).half() for s in shapes]
    _, lse = fn(*xs, **kwargs, return_lse=True)
    want = reference_lse(torch, g, xs, sizes)
    assert float((lse.double() - want).abs().max()) <= tolerance(g.dtype, 33) * float(want.abs().max())
