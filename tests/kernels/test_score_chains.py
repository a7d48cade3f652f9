"""The chain of scores the Hopper kernel reads off a diagram (analyzer.config.scores): which chains it
takes and why it refuses the others, what the model counts for each, and the Gluon it renders for them.
The kernels themselves run against float64 on an H100 in bench/hopper_family.py; here they compile for
sm_90a (tests/kernels/test_allocation.py compiles every shipped diagram's default file)."""

from __future__ import annotations

import math
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
import sympy

from analyzer import hardware
from analyzer.codegen import generate
from analyzer.codegen.hopper.kernel import SCORE_OPS, score_function
from analyzer.common.errors import NapkinError
from analyzer.config import hopper
from analyzer.config.kernels import configure_kernels
from analyzer.config.scores import REGISTERS_PER_OP, SFU_PER_SCORE, SOFTMAX, ScoreOp, Scores
from tests.kernels.hopper_build import compiled

H100 = hardware.load("h100")

HEAD = """\
name: chain
title: a chain of scores
dtype: fp16
levels: [gmem, smem]
axes:
  q: {default: 4096}
  x: {default: 4096}
  d: {default: 128}
inputs:
  Q: [q, d]
  K: [x, d]
  V: [x, d]
ops:
  - {name: S, primitive: dot, inputs: [Q, K], over: d, output: [q, x]}
"""
TAIL = """\
outputs: [O]
kernels:
  - name: flash
    partition:
      smem: {group: {q: g_q}, stream: {x: s_x}}
"""


def chain_file(tmp_path: Path, ops: list[str], last: str = "dot") -> str:
    """A diagram S = Q K^T, then `ops` (YAML flow mappings taking the previous op), then `last` with V."""
    lines = [f"  - {op}" for op in ops]
    prev = ops[-1].split("name: ")[1].split(",")[0] if ops else "S"
    lines.append(f"  - {{name: O, primitive: {last}, inputs: [{prev}, V], over: x, output: [q, d]"
                 + (", scale: d**-0.5}" if last == "softmax_dot" else "}"))
    path = tmp_path / "chain.yaml"
    path.write_text(HEAD + "\n".join(lines) + "\n" + TAIL)
    return str(path)


def scores_of_file(path: str) -> Scores | str:
    return hopper.scores(configure_kernels(path, H100, sized=False))


@pytest.mark.parametrize("diagram, expected", [
    ("attention", SOFTMAX),
    ("mha", SOFTMAX),
    ("causal_attention", Scores((ScoreOp("Sm", "causal_mask"),))),
    ("sigmoid_attention", Scores((ScoreOp("Ss", "scale"), ScoreOp("P", "sigmoid")), softmax=False)),
    ("softcap_attention", Scores((ScoreOp("Ss", "scale"), ScoreOp("C", "softcap"))))])
def test_the_shipped_diagrams_chains(diagram, expected):
    found = hopper.scores(configure_kernels(diagram, H100, sized=False))
    assert [(o.name, o.primitive) for o in found.ops] == [(o.name, o.primitive) for o in expected.ops]
    assert (found.softmax, found.causal) == (expected.softmax, expected.causal)


@pytest.mark.parametrize("ops, last, message", [
    (["{name: P, primitive: sigmoid, inputs: [S], output: [q, x]}",
      "{name: G, primitive: gelu, inputs: [P], output: [q, x]}"], "dot", "G is gelu between the contractions"),
    (["{name: A, primitive: scale, inputs: [S], scale: 2, output: [q, x]}",
      "{name: B, primitive: scale, inputs: [A], scale: 3, output: [q, x]}",
      "{name: P, primitive: sigmoid, inputs: [B], output: [q, x]}"], "dot", "scaled twice"),
    (["{name: Mk, primitive: causal_mask, inputs: [S], query: q, key: x, output: [q, x]}",
      "{name: C, primitive: softcap, inputs: [Mk], cap: 50, output: [q, x]}"], "softmax_dot",
     "comes before ops that turn a masked score into -50"),
    (["{name: Mk, primitive: window_mask, inputs: [S], query: q, key: x, window: 8, output: [q, x]}",
      "{name: P, primitive: relu, inputs: [Mk], output: [q, x]}"], "softmax_dot",
     "turn a masked score into 0, which the softmax weighs")])
def test_chains_the_kernel_does_not_render_are_refused_with_the_reason(tmp_path, ops, last, message):
    path = chain_file(tmp_path, ops, last)
    assert message in scores_of_file(path)
    with pytest.raises(NapkinError, match=message):
        generate(path, "h100", backend="hopper")
    assert generate(path, "h100").backend == "triton"      # the portable module takes it instead


def test_every_elementwise_op_the_chain_takes_has_a_lowering_and_a_cost():
    """A lowering per op (ALiBi's two: whole, and shifted under a causal mask), and an SFU count per op."""
    assert {p.split()[0] for p in SCORE_OPS} == set(SFU_PER_SCORE)


def test_sigmoid_as_tanh_is_the_logistic_function():
    """The lowering sigmoid(v) = tanh(v/2)/2 + 1/2, and that -inf (a causal mask's) gives 0 through it."""
    v = np.concatenate([np.linspace(-30, 30, 2001), [-np.inf, np.inf]])
    with np.errstate(over="ignore"):
        logistic = 1 / (1 + np.exp(-v))
    np.testing.assert_allclose(0.5 * np.tanh(0.5 * v) + 0.5, logistic, rtol=1e-12, atol=1e-15)


@pytest.mark.parametrize("d, chunk", [(64, 128), (128, 128), (256, 64)])
def test_the_model_counts_the_chains_special_function_work(d, chunk):
    """Softmax: an exp2 a score and a rescale a row (s_x + 1 a row and chunk); sigmoid: one tanh a score
    (s_x), and nothing a row. With the tensor cores the same, sigmoid is never predicted slower."""
    sigmoid = Scores((ScoreOp("Ss", "scale"), ScoreOp("P", "sigmoid")), softmax=False)
    softcap = Scores((ScoreOp("Ss", "scale"), ScoreOp("C", "softcap", cap=sympy.Integer(50))))
    c = hopper.configuration(H100, d, "fp16", warpgroups=2, chunk=chunk, stages=2, overlap="intra")
    lanes = H100.per_sm_per_clock.sfu_ops
    for scores, per_row in ((SOFTMAX, chunk + 1), (sigmoid, chunk), (softcap, 2 * chunk + 1)):
        (sfu,) = [s for s in hopper._body(H100, c, d, "fp16", hopper.HopperParams(), scores=scores) if s.lane == "sfu"]
        assert math.isclose(sfu.clocks, per_row / lanes)
    times = [hopper.predicted_time(H100, c, d, "fp16", seq_q=4096, seq_k=4096, instances=32, scores=s)
             for s in (sigmoid, SOFTMAX)]
    assert times[0] <= times[1]


def test_the_rendered_chain_is_the_diagrams_order_and_its_names_stay_comments():
    scores = Scores((ScoreOp("x\nimport os", "scale"), ScoreOp("P", "relu"), ScoreOp("Q", "sigmoid"),
                     ScoreOp("R", "exp")), softmax=False)
    text = score_function(scores, "d.yaml")
    body = [line.split("#")[0].strip() for line in text.splitlines() if line.startswith("    s = ")]
    assert body == [SCORE_OPS[p][0] for p in ("scale", "relu", "sigmoid", "exp")]
    assert "\nimport os" not in text and "def _attn_tanh" in text
    assert "_attn_tanh" not in score_function(SOFTMAX, "d.yaml")


@pytest.mark.parametrize("cap", [50, 30, sympy.Rational(5, 2)])
def test_softcap_is_rendered_with_its_cap_as_a_number(cap):
    """cap tanh(v / cap) as cap * tanh(v * (1 / cap)), both numbers literals of the diagram's cap (no
    argument), and equal to it in float64 over scores far beyond the cap."""
    text = score_function(Scores((ScoreOp("C", "softcap", cap=sympy.sympify(cap)),)), "d.yaml")
    (line,) = [line.split("#")[0].strip() for line in text.splitlines() if line.startswith("    s = ")]
    assert line == f"s = {float(cap)!r} * _attn_tanh(s * {1 / float(cap)!r})" and "def _attn_tanh" in text
    v = np.linspace(-1000, 1000, 4001)
    c = float(cap)
    np.testing.assert_allclose(c * np.tanh(v * (1 / c)), c * np.tanh(v / c), rtol=1e-14, atol=1e-14)


@pytest.mark.slow(seconds=7)
def test_a_chain_of_every_op_compiles_for_sm90a(tmp_path):
    """relu, exp, scale, tanh and softcap in one chain, then a sliding-window mask, a sigmoid (which
    turns the masked -inf into the 0 a plain sum ignores) and the plain sum, through Triton's compiler for
    sm_90a (the shipped sigmoid_attention and softcap_attention
    compile in test_allocation)."""
    path = chain_file(tmp_path, [
        "{name: A, primitive: scale, inputs: [S], scale: d**-0.5, output: [q, x]}",
        "{name: B, primitive: exp, inputs: [A], output: [q, x]}",
        "{name: C, primitive: relu, inputs: [B], output: [q, x]}",
        "{name: T, primitive: tanh, inputs: [C], output: [q, x]}",
        "{name: Cap, primitive: softcap, inputs: [T], cap: 2.5, output: [q, x]}",
        "{name: Mk, primitive: window_mask, inputs: [Cap], query: q, key: x, window: 100, output: [q, x]}",
        "{name: P, primitive: sigmoid, inputs: [Mk], output: [q, x]}"])
    g = generate(path, "h100")
    assert g.backend == "hopper" and g.hopper.scores.causal and not g.hopper.scores.softmax
    module = tmp_path / "chain_hopper.py"
    g.write(module)
    (result,) = compiled(module, [{"entry": {"WARPGROUPS": 2, "BLOCK_X": 128, "STAGES": 2, "OVERLAP": "intra",
                                             "SCHEDULE": "tiles"}, "head_dim": 128, "dtype": "fp16"}])
    assert result["spills"] == 0 and "wgmma.mma_async" in result["instructions"]


# -- V's head dim apart from the queries' (MLA) ---------------------------------------------------------

@pytest.mark.parametrize("head_dim, blocks", [(64, (64, 0)), (128, (128, 0)), (192, (128, 64)), (96, (64, 32)),
                                              (256, (256, 0)), (224, (0, 0))])
def test_a_head_dim_loads_in_column_blocks_of_powers_of_two(head_dim, blocks):
    assert hopper.head_blocks(head_dim) == blocks
    assert bool(hopper.candidates(H100, head_dim, "fp16")) == bool(blocks[0])


def test_mla_counts_its_value_dim_and_the_output_over_the_query_tile():
    """At d = 192, e = 128: N query tiles of d, `stages` chunks of K (d) and V (e); the output leaves
    through the query tile's first column block (128 of 192 = 128 + 64), where at d = e = 192 it needs a
    tile of its own (the query tile's blocks are 128 and 64 wide); registers for an output accumulator
    of e columns. The model's loop body: QK^T 2 d s_x, PV 2 e s_x a row."""
    c = hopper.configuration(H100, 192, "fp16", warpgroups=2, chunk=64, stages=2, overlap="intra", value_dim=128)
    same = hopper.configuration(H100, 192, "fp16", warpgroups=2, chunk=64, stages=2, overlap="intra")
    tiles = (2 * 64 * 192 + 2 * 64 * (192 + 128)) * 2
    assert c.smem_bytes - tiles == same.smem_bytes - (2 * 64 * 192 + 2 * 64 * 384 + 2 * 64 * 192) * 2 > 0
    # FlashAttention-3's hdim-192 tile: two consumers of 64 rows against 128-key chunks at two stages
    fa3 = hopper.configuration(H100, 192, "bf16", warpgroups=2, chunk=128, stages=2, overlap="intra", value_dim=128)
    assert hopper.legal(H100, fa3) and 213392 <= fa3.smem_bytes <= 213392 + 512   # Triton's allocation of it
    assert c.registers_needed == same.registers_needed - 64 * 64 // 128
    tensor = [s.clocks for s in hopper._body(H100, c, 192, "fp16", hopper.HopperParams(), value_dim=128) if s.lane == "tensor"]
    assert tensor[1] / tensor[0] == pytest.approx(128 / 192)


def test_mla_generates_the_hopper_kernel_for_its_value_dim():
    g = generate("mla_attention", "h100")
    assert g.backend == "hopper" and g.hopper.value_dim == 128 and 192 in g.hopper.tables
    assert "VALUE_DIM = 128" in g.source


@pytest.mark.parametrize("diagram", ["mha", "sigmoid_attention", "softcap_attention", "mla_attention"])
def test_the_launcher_reads_only_the_scales_the_diagram_gives(diagram):
    """regression: softcap_attention's softmax_dot has no `scale` (its scale op precedes the cap), and the
    launcher read scale['O'] for the softmax: a KeyError at every call on the GPU."""
    import re
    g = generate(diagram, "h100")
    assert g.backend == "hopper"
    scaled = {o.name for o in g.diagram.ops if o.applied.scale is not None}
    read = set(re.findall(r"scale\[\"([^\"]+)\"\]", g.source)) | set(re.findall(r"scale\['([^']+)'\]", g.source))
    assert read and read <= scaled, (read, scaled)


@pytest.mark.parametrize("cap, message", [("0", "a positive number"), ("-3", "a positive number"),
                                          ("1e-320", "at least 2**-126")])
def test_a_cap_no_fp32_kernel_can_compute_is_refused(tmp_path, cap, message):
    """regression: a cap of 1e-320 wrote `s * inf` (a name Gluon does not know) into the kernel, and one of
    1e-300 constants that fp32 rounds to 0 and infinity."""
    path = chain_file(tmp_path, [f"{{name: C, primitive: softcap, inputs: [S], cap: {cap}, output: [q, x]}}"],
                      "softmax_dot")
    with pytest.raises(NapkinError) as refused:
        generate(path, "h100")
    assert message in str(refused.value)


# -- the registers the ops hold (bench/register_scan.py: every variant near the rule's edge against ptxas) -----

@pytest.mark.parametrize("diagram, head_dim, groups, chunk", [("sigmoid_attention", 64, 1, 256),
                                                              ("softcap_attention", 64, 1, 256),
                                                              ("bias_attention", 128, 3, 64)])
def test_a_configuration_whose_score_ops_spilled_is_refused(diagram, head_dim, groups, chunk):
    """ptxas for sm_90a spilled 384-492 bytes a thread building sigmoid's and softcap's one consumer of
    256-key chunks at head dim 64, and 92 the bias's three consumers of 64-key chunks at 128, which the
    rule admitted while it counted nothing for the ops (bench/results/register_scan_h100.md)."""
    chain = generate(diagram, H100).hopper.scores

    def config(scores):
        return hopper.configuration(H100, head_dim, "fp16", warpgroups=groups, chunk=chunk, stages=2,
                                    overlap="intra", causal=chain.causal, scores=scores)
    without = replace(config(SOFTMAX), smem_bytes=config(chain).smem_bytes)     # the same SMEM: registers alone
    assert hopper.legal(H100, without) and not hopper.legal(H100, config(chain))


def test_alibis_vector_is_held_where_it_fits_and_recomputed_a_chunk_where_it_does_not(tmp_path):
    """ALiBi's m (j - r) held through the chunks costs 3/4 of a chunk's scores a thread, recomputed from
    the keys half, and 8 of its own either way (analyzer.config.scores); at head dim 128 with two consumers
    of 128-key chunks (the long-sequence choice) only the recomputed one fits, and both build without a
    spill."""
    g = generate("alibi_attention", H100)
    chain = g.hopper.scores

    def config(head_dim, scores=chain):
        return hopper.configuration(H100, head_dim, "fp16", warpgroups=2, chunk=128, stages=2, overlap="intra",
                                    causal=True, scores=scores)
    low, high = config(64), config(128)
    scores_a_thread = 64 * 128 // 128
    own = REGISTERS_PER_OP["alibi"]      # its slope and rows, whether the vector is held or not
    assert low.held and low.registers_needed - config(64, SOFTMAX).registers_needed == 3 * scores_a_thread // 4 + own
    assert not high.held and high.registers_needed - config(128, SOFTMAX).registers_needed == \
        scores_a_thread // 2 + own
    assert hopper.legal(H100, low) and hopper.legal(H100, high)
    assert (128, 2, 128) in g.hopper.recomputed and (64, 2, 128) not in g.hopper.recomputed
    module = tmp_path / "alibi_hopper.py"
    g.write(module)
    entry = {"WARPGROUPS": 2, "BLOCK_X": 128, "STAGES": 2, "OVERLAP": "intra", "SCHEDULE": "tiles"}
    built = compiled(module, [{"entry": entry, "head_dim": d, "dtype": "fp16"} for d in (64, 128)])
    assert [r["spills"] for r in built] == [0, 0]
