"""The portable kernel's SMEM as napkin counts it (analyzer.config.allocation) is what Triton allocated:
every configuration compiled on the H100 and the H200 (bench/results/compiled_*.json, python
bench/sweep_h200.py --compile-only), and the configuration linear_attention launched on the H100 before
legality counted it (issue 31: OutOfResources, 262144 bytes against 232448)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from analyzer import hardware
from analyzer.codegen import generate
from analyzer.config.allocation import allocation
from analyzer.config.choice import Choice
from analyzer.config.choose import kept_dtypes, smem_allocated, smem_limit
from analyzer.config.configure import configure
from analyzer.config.kernels import configure_kernels
from analyzer.config.launch import sizes_of
from analyzer.config.plan import plan
from analyzer.config.predict import predict_configured
from analyzer.diagram.interface import interface
from analyzer.model.analysis import load
from analyzer.model.fusion import schedule

RESULTS = Path(__file__).resolve().parents[2] / "bench" / "results"


@pytest.mark.parametrize("gpu", ["h100", "h200"])
def test_the_count_is_what_triton_allocated_for_every_compiled_configuration(gpu):
    profile = hardware.load(gpu)
    records = json.loads((RESULTS / f"compiled_{gpu}.json").read_text())["records"]
    wrong = []
    for r in records:
        d = load(r["diagram"], dtype="fp16")
        kernel = d.kernels[0].name
        sets = {**r["tiles"], "stages": r["num_stages"]}
        if r["head_dim"]:
            sets.update({str(s): r["head_dim"] for s in d.size(interface(d).head_dim).free_symbols})
        report = configure(d, profile, sets=sets, kernel=kernel, dtypes=kept_dtypes(d, kernel),
                           schedule_overlap_=False)
        c = Choice(kernel, r["tiles"], r["num_warps"], r["num_stages"], "")
        counted = smem_allocated(d, kernel, c, report.values, "fp16", profile)
        if counted != r["shared_bytes"]:
            wrong.append(f"{r['diagram']} d={r['head_dim']} {r['tiles']} {r['num_warps']} warps "
                         f"{r['num_stages']} stages: {counted} counted, {r['shared_bytes']} allocated")
    assert len(records) > 200 and not wrong, "\n".join(wrong)


def test_linear_attention_launches_what_fits_the_h100():
    """The configuration it launched (g_q=512, s_x=256, 4 warps, one stage) counts the 262144 bytes
    Triton allocated (the queries stay in SMEM through the loop beside a chunk of K and of V); the one it
    launches now fits."""
    profile = hardware.load("h100")
    d = load("linear_attention", dtype="fp16")
    s = schedule(d, d.kernels[0], d.levels[-1])
    old = plan(d, s, Choice("linear", {"g_q": 512, "s_x": 256}, 4, 1, ""))
    sizes = {"d": 128, "e": 128}
    assert allocation(old, sizes, stages=1, warps=4, dtype="fp16", profile=profile).smem_bytes == 262144
    g = generate("linear_attention", profile)
    (now,) = g.launched({})
    assert now.smem_bytes == allocation(plan(d, s, now), sizes, stages=now.num_stages, warps=now.num_warps,
                                        dtype="fp16", profile=profile).smem_bytes
    assert 0 < now.smem_bytes <= smem_limit(profile)


def test_a_kernel_outside_section_5_is_timed_beside_tiles_the_papers_count_refuses():
    """On the T4 (no cp.async: the portable kernel stages its dot operands in fp32, one at a time) the
    kernel's own SMEM admits attention_unfused's scores tiles g_q1 = g_x1 = s_d1 = 128, which napkin
    analyze's memory count refuses (96 KiB of 64); the softmax kernel between the two matmuls, outside
    Section 5's model, is still timed by napkin analyze, its own tiles pinned alone."""
    t4 = hardware.load("t4")
    c = configure_kernels("attention_unfused", t4, sized=False)
    scores = c.kernels[0].choice(None)
    assert scores.tiles == {"g_q1": 128, "g_x1": 128, "s_d1": 128}
    assert scores.smem_bytes == smem_limit(t4) == 65536
    assert predict_configured(c, t4, sizes_of(c, None)).time_s > 0
