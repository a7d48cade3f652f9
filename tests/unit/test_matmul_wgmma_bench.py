"""bench/matmul_wgmma.py without a GPU: the diagnosis it times, and its report of a synthetic run."""

from __future__ import annotations

import pytest

from analyzer.codegen.generator import generate
from bench.matmul_wgmma import KERNELS, markdown, with_edge_loop


def test_the_diagnosis_needs_the_launchers_even_argument():
    with pytest.raises(ValueError, match="no EVEN_"):
        with_edge_loop("def kernel():\n    pass\n")


def test_the_edge_loop_is_compiled_in_only_by_the_launchers_argument():
    source = generate("matmul", "h100", backend="triton").source
    edge = with_edge_loop(source)
    assert "EVEN_B=size['b'] % cfg['BLOCK_B'] == 0," in source and "EVEN_B=False," in edge
    assert edge.replace("EVEN_B=False,", "") == source.replace("EVEN_B=size['b'] % cfg['BLOCK_B'] == 0,", "")


def test_the_report_gives_the_ratio_per_size_and_stage_count():
    config = lambda stages: {"TILE_A": 128, "TILE_C": 128, "BLOCK_B": 64, "num_warps": 4, "num_stages": stages}
    timing = lambda t: {"time_s": t, "rel_err": 1e-3}
    doc = {"meta": {"command": "python bench/matmul_wgmma.py", "gpu": "GPU", "date": "today", "torch": "t",
                    "triton": "t", "rep_ms": 30},
           "peers": [{"size": 1024, "time_s": 1.0}],
           "records": [{"size": 1024, "config": config(2), KERNELS[0]: timing(3.0), KERNELS[1]: timing(2.0)},
                       {"size": 1024, "config": config(3), KERNELS[0]: timing(2.0), KERNELS[1]: timing(2.0)},
                       {"size": 1024, "config": config(3), "error": "RuntimeError: wrong"}]}
    text = markdown(doc)
    row = next(line for line in text.splitlines() if line.startswith("| 1024 |"))
    assert "| 1024 | 2 | 1.25 (1.00-1.50) | 1.50 | 1.00 | 1.50 | 1.00 |" in row     # t2 / t3 per kernel
    assert "`128x128x64 w4 s3`" in row                                  # the best of each kernel
    assert "not timed (an error or a wrong result): 1." in text
