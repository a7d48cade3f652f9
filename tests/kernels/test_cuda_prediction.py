"""The CUDA file's header predicts the configuration its kernels run: napkin's choice as the CUDA variant
clamps it (analyzer.codegen.cuda.as_run), not the choice before the clamps (issue 31: on the H100 the
header predicted g_q=128 s_x=128 with 8 warps and 3 stages for a kernel that runs 4 warps, s_x=64 and 2
stages)."""

from __future__ import annotations

from analyzer.codegen import generate
from analyzer.codegen.cuda.source import writers


def test_the_cuda_header_predicts_the_variant_it_runs_at_the_default_sizes():
    g = generate("attention", "h100", backend="cuda")
    ((k, w),) = writers(g)
    key = g.key_at({})
    v = next(v for v in w.variants if v.key == key)
    ran = f"g_q={v.tile('q')} s_x={v.chunk} warps={v.warps} stages={v.stages}"
    chosen = k.choice(key)
    assert v.clamps, "the case this test is for: napkin's choice is clamped on the H100"
    assert (chosen.num_warps, chosen.num_stages) != (v.warps, v.stages)
    assert f"({ran}, as the CUDA kernel runs it)" in g.prediction
    assert g.prediction in g.source
