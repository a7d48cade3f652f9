"""The Hopper contraction family (analyzer.config.contraction, analyzer.codegen.hopper.contraction_module):
which diagrams it realises and why not, the engine's counts it times against brute-force counting, the
model's wave quantisation, each generated tail against float64 (its Python text run on numpy arrays with
numpy standing in for Gluon), and the kernels compiled for sm_90a with no more SMEM than legality counts.
On the GPU the modules are checked against float64 and timed beside torch by bench/hopper_contraction.py."""

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
from analyzer.config.contraction import (
    ContractionParams,
    Counts,
    candidates,
    configuration,
    counted,
    predicted_time,
)
from analyzer.config.family.hopper_contraction import launched_contraction
from analyzer.config.launch import launch
from tests.kernels.numpy_gluon import Array as _Array
from tests.kernels.numpy_gluon import Pointer as _Pointer
from tests.kernels.numpy_gluon import function

H100 = hardware.load("h100")


@pytest.mark.parametrize("diagram, accumulators, prologue, tail", [
    ("matmul", 1, [], []), ("matmul_bias_gelu", 1, [], ["add", "gelu"]),
    ("swiglu_mlp", 2, [], ["sigmoid", "mul", "mul"]), ("rmsnorm_matmul", 1, ["mul", "mul", "sum"],
                                                       ["scale", "shift", "rsqrt", "mul"])])
def test_the_contraction_diagrams_get_the_hopper_contraction_kernel_on_a_hopper_gpu(diagram, accumulators, prologue,
                                                                                    tail):
    launched = launch(diagram, H100, tables=False)
    assert launched.backend == "hopper-contraction"
    first = launched.contraction.tables[0].structure
    assert len(first.bs) == accumulators
    assert [op.primitive.name for op in (*first.prologue, *first.sums)] == prologue
    assert [op.primitive.name for op in first.tail] == tail


@pytest.mark.parametrize("diagram, why", [
    ("linear_attention", "the keys-first order builds a state")])
def test_what_it_does_not_realise_goes_to_the_portable_module_with_the_reason(diagram, why):
    launched = launch(diagram, H100, tables=False)
    assert launched.backend == "triton"
    assert why in launched.portable_why


def test_a_gpu_without_wgmma_gets_the_portable_module():
    assert launch("matmul", "a100", tables=False).backend == "triton"


@settings(max_examples=12, deadline=None)
@given(m=st.integers(1, 9000), n=st.integers(1, 9000), k=st.integers(1, 9000),
       shape=st.sampled_from([(128, 256, 64, 3, 2), (64, 64, 64, 6, 1), (128, 128, 64, 4, 2)]))
def test_the_engine_counts_what_the_kernel_does(m, n, k, shape):
    """Tiles, chunks, tensor FLOPs and H into SMEM, from the diagram's symbolic model, against counting
    the kernel's loops: every tile loads each chunk of its A rows and B columns, whole boxes."""
    (structure, plan, model), = launched_contraction("matmul", H100, "fp16")
    bm, bn, bk, stages, groups = shape
    c = configuration(H100, structure, "fp16", block_m=bm, block_n=bn, block_k=bk, stages=stages, warpgroups=groups)
    (counts,) = counted(model, plan, structure, {"a": m, "b": k, "c": n}, [c])
    tiles = math.ceil(m / bm) * math.ceil(n / bn)
    assert counts.tiles == tiles
    assert counts.chunks == math.ceil(k / bk)
    assert counts.tensor_flops == pytest.approx(2 * m * n * k, rel=1e-12)
    # H into SMEM: every tile loads its rows of A and its columns of B for each chunk, clipped at the
    # edges (the TMA engine reads nothing out of bounds), and the output is stored once
    loaded = sum(min(bm, m - i * bm) for i in range(math.ceil(m / bm))) * k * math.ceil(n / bn) \
        + sum(min(bn, n - j * bn) for j in range(math.ceil(n / bn))) * k * math.ceil(m / bm) + m * n
    assert counts.loads_s * H100.level("l2").bandwidth_bytes_per_s == pytest.approx(2 * loaded, rel=1e-12)


def test_one_tile_more_than_the_sms_costs_a_wave():
    """Wave quantisation: the busiest SM takes ceil(tiles / SMs) tiles."""
    (structure, plan, model), = launched_contraction("matmul", H100, "fp16")
    c = configuration(H100, structure, "fp16", block_m=128, block_n=128, block_k=64, stages=4, warpgroups=2)
    params = ContractionParams()
    one_wave = Counts(tiles=H100.sm_count, chunks=64, operands=1, tensor_flops=H100.sm_count * 2 * 128 * 128 * 4096,
                      thread_flops={}, loads_s=1e-9, gmem_s=1e-9)
    more = Counts(**{**one_wave.__dict__, "tiles": H100.sm_count + 1,
                     "tensor_flops": (H100.sm_count + 1) * 2 * 128 * 128 * 4096})
    t1, t2 = (predicted_time(H100, c, x, "fp16", params)[0] for x in (one_wave, more))
    assert t2 == pytest.approx(2 * t1, rel=1e-9)


def test_every_candidate_is_legal_and_fits_the_smem_and_registers():
    (structure, _, _), (dual, _, _) = launched_contraction("swiglu_mlp", H100, "bf16")
    for st_ in (structure, dual):
        for c in candidates(H100, st_, "bf16"):
            assert c.smem_bytes <= H100.level("smem").block_capacity_bytes
            assert c.registers_needed <= c.registers
    assert not any(c.block_n == 256 and c.rows == 64 and c.warpgroups == 2 for c in candidates(H100, structure, "bf16"))


@pytest.mark.slow(seconds=10)
def test_the_kernels_compile_for_sm90a_within_what_legality_counts(tmp_path: Path):
    """Each kernel's configuration at the largest sizes, compiled for sm_90a: no more SMEM than napkin
    counts for legality, wgmma kept asynchronous (no note of ptxas's that it serialised it: C7512, C7514,
    C7515), TMA and setmaxnreg used, nothing spilled."""
    from contraction_build import compiled_each
    from hopper_build import INSTRUCTIONS
    jobs, counted_smem = [], []
    # with the chain kernels' (tests/kernels/test_chain.py): one start-up of the compiler for them all
    # rmsnorm_matmul is not among them: with two consumers ptxas serialises its wgmma (C7512, too few
    # registers for A's chunk from registers beside the accumulators), and the form that avoids it (A written
    # back to SMEM) ran slower (bench/results/rmsnorm_smem_h200.md)
    for diagram, dtype in (("matmul_bias_gelu", "fp16"), ("swiglu_mlp", "bf16"), ("mlp2", "fp16"),
                           ("linear_attention_queries", "bf16")):
        g = generate(diagram, H100, dtype=dtype)
        path = tmp_path / f"{diagram}.py"
        g.write(path)
        for t in g.contraction.tables:
            c = t.configs[t.cells[-1]]
            jobs.append({"module": str(path), "kernel": t.kernel, "entry": c.entry(), "dtype": dtype})
            counted_smem.append(c.smem_bytes)
    for job, smem, r in zip(jobs, counted_smem, compiled_each(jobs), strict=True):
        assert r["shared"] <= smem, job
        assert r["spills"] == 0 and not r["local"] and not r["serialised"], (job, r)
        assert set(r["instructions"]) == set(INSTRUCTIONS), (job, r)


# --- the tails, run on numpy -----------------------------------------------------------------------------

def _function(source: str, name: str = "_mm_tail"):
    """The module's _mm_tail (or _mm_prologue) as a numpy function (its decorator dropped, numpy for Gluon)."""
    return function(source, name, "return out" if name == "_mm_tail" else "return a_op, stat", "TAIL")


_tail = _function


def test_the_bias_gelu_tail_is_gelu_of_the_accumulator_plus_the_bias():
    tail = _tail(generate("matmul_bias_gelu", H100).source)
    rng = np.random.default_rng(0)
    rows, cols = np.arange(64), 1000 + np.arange(128)      # a tile at the last columns: 1000..1127 of 1100
    acc = rng.standard_normal((64, 128)).view(_Array)
    bias = rng.standard_normal(1100)
    out = tail(acc, 0.0, 0.0, rows, cols, 64, 1100, (_Pointer(bias), 1), 0)
    z = acc + np.where(cols < 1100, bias[np.minimum(cols, 1099)], 0.0)[None, :]
    expect = 0.5 * z * (1 + np.tanh(math.sqrt(2 / math.pi) * (z + 0.044715 * z ** 3)))
    assert np.allclose(out, expect, rtol=1e-12, atol=1e-12)


def test_the_swiglu_tail_gates_the_up_projection_with_silu_of_the_gate():
    tail = _tail(generate("swiglu_mlp", H100).source)
    rng = np.random.default_rng(1)
    acc, acc2 = rng.standard_normal((2, 64, 128)) * 4
    out = tail(acc.view(_Array), acc2.view(_Array), 0.0, np.arange(64), np.arange(128), 64, 128, (64,), 0)
    assert np.allclose(out, acc / (1 + np.exp(-acc)) * acc2, rtol=1e-12, atol=1e-12)
    down = tail(acc.view(_Array), 0.0, 0.0, np.arange(64), np.arange(128), 64, 128, (64,), 1)
    assert np.array_equal(down, acc)


def test_the_rmsnorm_prologue_and_tail_are_the_normalised_rows_times_the_gain_contracted():
    """The prologue on each chunk of X (its gain's chunk riding the ring as `kvec`), the squares summed
    item by item and across once (as the consumer does), the contraction of the prologue's operand, then
    the tail: Y = r (X g) W, r = rsqrt(mean(X^2) + 1e-6)."""
    source = generate("rmsnorm_matmul", H100).source
    prologue, tail = _function(source, "_mm_prologue"), _function(source)
    rng = np.random.default_rng(3)
    n, i, o, bk = 64, 192, 32, 64
    x, w, g = rng.standard_normal((n, i)), rng.standard_normal((i, o)), rng.random(i) + 0.5
    stat, acc = np.zeros((n, bk)), np.zeros((n, o))
    for j in range(0, i, bk):
        a_op, stat = prologue(x[:, j:j + bk].view(_Array), np.arange(n), j + np.arange(bk), g[None, j:j + bk],
                              stat, n, i, (1 / i,), 0)
        acc += np.asarray(a_op) @ w[j:j + bk]
    out = tail(acc.view(_Array), 0.0, stat.sum(1), np.arange(n), np.arange(o), n, o, (1 / i,), 0)
    expect = (x * g / np.sqrt((x ** 2).mean(1, keepdims=True) + 1e-6)) @ w
    assert np.allclose(out, expect, rtol=1e-12, atol=1e-12)


def test_a_diagram_naming_its_arrays_like_the_kernels_locals_keeps_its_tail(tmp_path: Path):
    """Arrays called acc, out and extras, an op called rows: claimed names, the same numbers."""
    text = Path("diagrams/matmul_bias_gelu.yaml").read_text()
    for old, new in (("X", "acc"), ("W", "out"), ("B", "extras"), ("name: Z", "name: rows"), ("[Z]", "[rows]")):
        text = re.sub(rf"\b{re.escape(old)}\b", new, text) if old.isalpha() else text.replace(old, new)
    path = tmp_path / "renamed.yaml"
    path.write_text(text.replace("name: matmul_bias_gelu", "name: renamed"))
    tail = _tail(generate(str(path), H100).source)
    rng = np.random.default_rng(2)
    acc = rng.standard_normal((64, 64)).view(_Array)
    bias = rng.standard_normal(64)
    out = tail(acc, 0.0, 0.0, np.arange(64), np.arange(64), 64, 64, (_Pointer(bias), 1), 0)
    z = acc + bias[None, :]
    assert np.allclose(out, 0.5 * z * (1 + np.tanh(math.sqrt(2 / math.pi) * (z + 0.044715 * z ** 3))))
