"""The Hopper chain kernel (analyzer.config.chain, analyzer.codegen.hopper.chain_module): which kernels it
realises and why not, the engine's counts it times against brute-force counting, its ops between the
contractions against float64 (their Python text run on numpy, numpy standing in for Gluon); its kernels
compile for sm_90a in test_contraction.py's job, with the contraction kernels'. On the GPU the modules are checked
against float64 and timed beside torch by bench/hopper_chain.py."""

from __future__ import annotations

import math
import re
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from analyzer import hardware
from analyzer.codegen import generate
from analyzer.config.chain import candidates, chunk_times, configuration, counted, predicted_time, widths_of
from analyzer.config.contraction import ContractionParams
from analyzer.config.family.hopper_contraction import launched_contraction
from analyzer.config.launch import launch
from bench.hopper_chain import MLP_BIAS as BIASED
from tests.kernels.numpy_gluon import Array as _Array
from tests.kernels.numpy_gluon import Pointer as _Pointer
from tests.kernels.numpy_gluon import function

H100 = hardware.load("h100")

@pytest.mark.parametrize("diagram, b1_t, mid", [("mlp2", False, ["relu"]), ("linear_attention_queries", True, [])])
def test_the_chains_get_the_hopper_chain_kernel_on_a_hopper_gpu(diagram, b1_t, mid):
    launched = launch(diagram, H100, tables=False)
    assert launched.backend == "hopper-contraction"
    (t,) = launched.contraction.tables
    ch = t.structure
    assert (ch.b1_t, ch.b2_t, [op.primitive.name for op in ch.mid]) == (b1_t, False, mid)


def test_the_keys_first_order_and_a_tail_after_the_chain_go_to_the_portable_module_with_the_reason(tmp_path):
    launched = launch("linear_attention", H100, tables=False)
    assert launched.backend == "triton" and "the keys-first order builds a state" in launched.portable_why
    tailed = tmp_path / "mlp_tail.yaml"
    text = Path("diagrams/mlp2.yaml").read_text().replace(
        "outputs: [Y]", "  - {name: Z, primitive: relu, inputs: [Y], output: [n, o]}\noutputs: [Z]").replace(
        "ops: [H, A, Y]", "ops: [H, A, Y, Z]")
    tailed.write_text(text)
    launched = launch(str(tailed), H100, tables=False)
    assert launched.backend == "triton" and "after the second are not the chain kernel's" in launched.portable_why


@settings(max_examples=10, deadline=None)
@given(n=st.integers(1, 9000), f=st.integers(1, 9000), i=st.sampled_from([16, 100, 256]),
       o=st.sampled_from([16, 72, 256]), shape=st.sampled_from([(128, 64), (64, 128), (192, 64)]))
def test_the_engine_counts_what_the_chain_kernel_does(n, f, i, o, shape):
    """Tiles, chunks, tensor FLOPs and H into SMEM, from the diagram's symbolic model, against counting the
    kernel's loops: every tile loads its rows of X whole, each chunk of W1 and W2, and stores its rows of Y."""
    (ch, plan, model), = launched_contraction("mlp2", H100, "fp16")
    bm, bf = shape
    sizes = {"n": n, "i": i, "f": f, "o": o}
    c = configuration(H100, ch, "fp16", widths_of(plan, ch, sizes), block_m=bm, block_f=bf, stages=2,
                      warpgroups=bm // 64)
    (counts,) = counted(model, plan, ch, sizes, [c])
    tiles, chunks = math.ceil(n / bm), math.ceil(f / bf)
    assert (counts.tiles, counts.chunks) == (tiles, chunks)
    assert counts.tensor_flops == pytest.approx(2 * n * f * (i + o), rel=1e-12)
    weights = sum(min(bf, f - j * bf) for j in range(chunks)) * (i + o) * tiles
    loaded = n * i + weights + n * o
    assert counts.loads_s * H100.level("l2").bandwidth_bytes_per_s == pytest.approx(2 * loaded, rel=1e-12)


def test_every_candidate_fits_and_the_widest_axes_leave_one_warpgroup_per_64_rows():
    (ch, plan, _), = launched_contraction("mlp2", H100, "fp16")
    wide = candidates(H100, ch, "fp16", (256, 256))
    assert wide and all(c.smem_bytes <= H100.level("smem").block_capacity_bytes and c.registers_needed <= c.registers
                        for c in wide)
    assert max(c.warpgroups for c in wide) == 2         # 3 x 64 rows of a 256-wide output: past the registers
    (plain, _, _), = launched_contraction("linear_attention_queries", H100, "fp16")     # no ops between
    assert max(c.warpgroups for c in candidates(H100, plain, "fp16", (128, 128))) == 3
    assert max(c.warpgroups for c in candidates(H100, ch, "fp16", (128, 128))) == 2       # relu's value beside H
    assert candidates(H100, ch, "fp16", (512, 256)) == []     # wider than a TMA box and a wgmma's n


def _mid(source: str):
    """The module's _ch_mid as a numpy function (its decorator dropped, numpy for Gluon)."""
    return function(source, "_ch_mid", "return out", "MID")


def test_mlp2s_ops_between_the_layers_are_relu_and_leave_zero_past_the_hidden_features():
    """Past the stream's end H is the TMA engine's zeros (B1's chunk was filled with them), and relu keeps
    them 0: no select (one would serialise the wgmma, C7514); B2's zero rows make them weigh nothing."""
    source = generate("mlp2", H100).source
    mid = _mid(source)
    cols = 1000 + np.arange(64)                             # the last chunk of f = 1030
    h = np.where(cols[None, :] < 1030, np.random.default_rng(0).standard_normal((64, 64)), 0.0).view(_Array)
    out = mid(h, np.arange(64), cols[None, :][0], 0.0, 64, 1030, (64,), 0)
    assert np.array_equal(out, np.maximum(h, 0)) and not out[:, 30:].any()
    assert "gl.where(cols" not in source


def test_an_op_that_makes_an_infinity_of_zero_is_selected_away_past_the_stream(tmp_path):
    """1 / H past the stream's end is 1 / 0: inf, and inf x B2's zero rows is nan; the columns are selected
    away after the ops."""
    path = tmp_path / "mlp_reciprocal.yaml"
    path.write_text(Path("diagrams/mlp2.yaml").read_text().replace("primitive: relu", "primitive: reciprocal"))
    mid = _mid(generate(str(path), H100).source)
    cols = 1000 + np.arange(64)
    h = np.where(cols[None, :] < 1030, 1.0 + np.random.default_rng(1).random((64, 64)), 0.0).view(_Array)
    with np.errstate(divide="ignore"):
        out = mid(h, np.arange(64), cols[None, :][0], 0.0, 64, 1030, (64,), 0)
    assert np.isfinite(out).all() and not out[:, 30:].any()
    assert np.allclose(out[:, :30], 1 / h[:, :30])


def test_a_loaded_bias_and_gelu_between_the_layers(tmp_path):
    path = tmp_path / "mlp_bias.yaml"
    path.write_text(BIASED)
    g = generate(str(path), H100)
    assert g.backend == "hopper-contraction"
    (t,) = g.contraction.tables
    assert (t.structure.fvec, t.structure.reads) == ("bias", ())     # the bias rides the ring with W1
    assert "def _mm_tanh(" in g.source          # GELU's tanh on the SFU, which no contraction tail brought here
    mid = _mid(g.source)
    rng = np.random.default_rng(1)
    h, bias = rng.standard_normal((64, 128)).view(_Array), rng.standard_normal(1100)
    cols = 1024 + np.arange(128)                            # a last chunk that runs past f = 1100
    h = np.where(cols[None, :] < 1100, h, 0.0).view(_Array)    # H past the end: B1's chunk was TMA's zeros
    landed = np.where(cols < 1100, bias[np.minimum(cols, 1099)], 0.0)[None, :]     # TMA's zeros past the end
    out = mid(h, np.arange(64), cols, landed, 64, 1100, (64,), 0)
    z = h + np.where(cols < 1100, bias[np.minimum(cols, 1099)], 0.0)[None, :]
    gelu = 0.5 * z * (1 + np.tanh(math.sqrt(2 / math.pi) * (z + 0.044715 * z ** 3)))
    assert np.allclose(out, np.where(cols[None, :] < 1100, gelu, 0.0), rtol=1e-12, atol=1e-12)


def test_the_ops_stay_right_whatever_the_diagram_names_its_arrays(tmp_path):
    """The biased MLP with its arrays and ops named as the kernel's own locals (h, rows, cols, out, extras,
    MID, size_f, a_desc): the module's scope renames what would clash, and the ops compute the same."""
    names = {"X": "h", "W1": "rows", "bias": "cols", "W2": "out", "H": "extras", "Z": "MID", "A": "size_f",
             "Y": "a_desc"}
    text = BIASED
    for old, new in names.items():
        text = re.sub(rf"\b{old}\b", new, text)
    path = tmp_path / "renamed.yaml"
    path.write_text(text)
    g = generate(str(path), H100)
    assert g.backend == "hopper-contraction"
    compile(g.source, "renamed.py", "exec")
    mid = _mid(g.source)
    rng = np.random.default_rng(2)
    h, bias = rng.standard_normal((64, 64)).view(_Array), rng.standard_normal(1000)
    cols = 960 + np.arange(64)
    h = np.where(cols[None, :] < 1000, h, 0.0).view(_Array)
    landed = np.where(cols < 1000, bias[np.minimum(cols, 999)], 0.0)[None, :]
    out = mid(h, np.arange(64), cols, landed, 64, 1000, (64,), 0)
    z = h + np.where(cols < 1000, bias[np.minimum(cols, 999)], 0.0)[None, :]
    gelu = 0.5 * z * (1 + np.tanh(math.sqrt(2 / math.pi) * (z + 0.044715 * z ** 3)))
    assert np.allclose(out, np.where(cols[None, :] < 1000, gelu, 0.0), rtol=1e-12, atol=1e-12)


def test_a_vector_along_the_rows_is_loaded_where_the_streams_rides_the_ring(tmp_path):
    """A second read between the contractions, one value a row (r, along n): loaded by the consumer with
    gl.load at the tile's rows, masked past the last; the bias along f rides the ring as before."""
    text = BIASED.replace("  bias: [f]\n", "  bias: [f]\n  r: [n]\n").replace(
        "  - {name: A, primitive: gelu, inputs: [Z], output: [n, f]}",
        "  - {name: R, primitive: mul, inputs: [Z, r], output: [n, f]}\n"
        "  - {name: A, primitive: gelu, inputs: [R], output: [n, f]}")
    path = tmp_path / "rowscaled.yaml"
    path.write_text(text)
    g = generate(str(path), H100)
    (t,) = g.contraction.tables
    assert (t.structure.fvec, t.structure.reads) == ("bias", ("r",))
    mid = _mid(g.source)
    rng = np.random.default_rng(4)
    h, bias, r = rng.standard_normal((64, 64)).view(_Array), rng.standard_normal(1000), rng.standard_normal(8000)
    rows, cols = 7950 + np.arange(64), 960 + np.arange(64)   # the last rows of n = 8000, past it by 14
    h = np.where(cols[None, :] < 1000, h, 0.0).view(_Array)
    landed = np.where(cols < 1000, bias[np.minimum(cols, 999)], 0.0)[None, :]
    out = mid(h, rows, cols, landed, 8000, 1000, (_Pointer(r), 1), 0)
    z = (h + landed) * np.where(rows < 8000, r[np.minimum(rows, 7999)], 0.0)[:, None]
    gelu = 0.5 * z * (1 + np.tanh(math.sqrt(2 / math.pi) * (z + 0.044715 * z ** 3)))
    assert np.allclose(out, np.where(cols[None, :] < 1000, gelu, 0.0), rtol=1e-12, atol=1e-12)


def test_a_consumers_chain_and_the_power_limit_bound_the_chain_kernels_time():
    """The chain's two terms of its own (analyzer.config.chain): one consumer's chain a chunk (its share of
    the wgmmas, the ops of every consumer, its wait) and the whole GPU's tensor work at the power limit's
    share of the datasheet rate. The ops add to the chain at the lanes' rate over thread_efficiency; the
    power bound takes the time once it exceeds the busiest SM's."""
    (ch, plan, model), = launched_contraction("mlp_gelu", H100, "fp16")
    sizes = {"n": 16384, "i": 256, "f": 4096, "o": 128}
    one, two = (configuration(H100, ch, "fp16", widths_of(plan, ch, sizes), block_m=64 * w, block_f=64, stages=2,
                              warpgroups=w) for w in (1, 2))
    c1, c2 = counted(model, plan, ch, sizes, [one, two])
    p = ContractionParams(wait_s=1e-6)
    t1, t2 = chunk_times(H100, one, c1, "fp16", p), chunk_times(H100, two, c2, "fp16", p)
    assert c1.thread_flops and t1["threads"] > 0        # the bias and GELU: work on the lanes and the SFU
    assert t1["wait"] == pytest.approx(t1["tensor"] + t1["threads"] + 1e-6)
    assert t2["wait"] == pytest.approx(t2["tensor"] / 2 + t2["threads"] + 1e-6)
    slower = chunk_times(H100, two, c2, "fp16", ContractionParams(wait_s=1e-6, thread_efficiency=0.5))
    assert slower["wait"] - t2["wait"] == pytest.approx(t2["threads"])
    time_s, bound = predicted_time(H100, two, c2, "fp16", ContractionParams(power_efficiency=0.05))
    assert bound == "power" and time_s == pytest.approx(c2.tensor_flops / (H100.rate("tensor", "fp16") * 0.05))
