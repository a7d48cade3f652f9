"""bench/attention_h200.py without a GPU: its grid, checks, budget, targets and markdown report
(bench/attention_report.py, standard library only), its --help, and its one-line exit without a GPU."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from bench import attention_report as C

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "bench" / "attention_h200.py"


def cell(tflops: float, **extra) -> dict:
    return {"ms": 1.0, "tflops": tflops, **extra}


def row(hdim=128, seqlen=4096, causal=False, dtype="fp16", **cells) -> dict:
    shape = C.Shape(hdim, seqlen, causal, dtype)
    return {**shape.as_dict(), "cells": cells}


# ------------------------------------------------------------------------------ grid and cases

def test_fa3_grid_has_16k_tokens_and_hidden_2048():
    grid = C.fa3_grid()
    assert len(grid) == 2 * 6 * 2 * 2
    for s in grid:
        assert s.batch * s.seqlen == 16384 and s.heads * s.hdim == 2048
    assert {(s.hdim, s.heads) for s in grid} == {(64, 32), (128, 16)}
    assert [(s.hdim, s.seqlen, s.causal, s.dtype) for s in C.fa3_grid(quick=True)] == [
        (128, 4096, False, "fp16"), (128, 4096, True, "fp16")]


def test_flops_are_halved_when_causal():
    assert C.attention_flops(2, 16, 4096, 128, False) == 4 * 2 * 16 * 4096**2 * 128
    assert C.attention_flops(2, 16, 4096, 128, True) == 2 * 2 * 16 * 4096**2 * 128
    assert C.tflops(1e12, 1000.0) == pytest.approx(1.0)
    assert C.Shape(64, 512, True, "bf16").diagram == "causal_attention"


def test_priority_order_puts_fp16_hdim128_first():
    first = C.priority_order(C.fa3_grid())[0]
    assert (first.dtype, first.hdim, first.causal) == ("fp16", 128, False)


def test_check_cases_cover_the_brief():
    cases = C.attention_check_cases("attention", quick=False, head_dims={64, 128})
    assert {c.seqlen for c in cases} >= {1, 17, 1000, 4096}
    assert {c.hdim for c in cases} == {64, 128, 256}
    assert {c.dtype for c in cases} == {"fp16", "bf16"}
    assert {c.dist for c in cases} == {"normal", "outlier"}
    assert any(c.layout == "transposed" for c in cases)
    (refusal,) = [c for c in cases if c.hdim == 256]
    assert refusal.expect_error == "ValueError"
    with_256 = C.attention_check_cases("attention", quick=False, head_dims={64, 128, 256})
    assert all(c.expect_error is None for c in with_256 if c.hdim == 256)
    gqa = C.attention_check_cases("gqa", quick=True, head_dims=set())
    assert {(c.heads, c.kv_heads) for c in gqa} == {(16, 4)}
    causal = C.attention_check_cases("causal_attention", quick=True, head_dims=set())
    assert [c.causal for c in causal if c.expect_error] == [False]
    assert all(c.causal for c in causal if not c.expect_error)
    assert len({c.name for c in cases}) == len(cases)


def test_matmul_cases_include_non_multiples_of_blocks():
    shapes = C.matmul_check_cases(quick=False)
    assert (1000, 1000, 1000, "fp16") in shapes and (4096, 4096, 4096, "bf16") in shapes
    assert C.matmul_check_cases(quick=True) == [(1000, 1000, 1000, "fp16")]


def test_supported_head_dims_reads_config_and_configs():
    configs = [{"kernel": "attn", "head_dim": 64}, {"kernel": "attn", "head_dim": 128}]
    assert C.supported_head_dims(configs, None) == {64, 128}
    assert C.supported_head_dims([], {"head_dims": [64, 128, 256]}) == {64, 128, 256}
    assert C.supported_head_dims([], {64: {"BLOCK_M": 128}, 256: {}}) == {64, 256}
    assert C.supported_head_dims([], {"flash": {64: {"TILE_Q": 256}, 128: {"TILE_Q": 128}}}) == {64, 128}
    assert C.supported_head_dims(None, {"BLOCK_M": 128}, (64, 256)) == {64, 256}
    assert C.supported_head_dims(None, {"BLOCK_M": 128}) == set()


def test_budget_counts_with_an_injected_clock():
    now = [100.0]
    budget = C.Budget(50, clock=lambda: now[0])
    assert budget.allows(50) and budget.before(0.5)
    now[0] = 130.0
    assert budget.left() == 20 and not budget.allows(21) and not budget.before(0.5)
    assert budget.skip("flex d=128") == {"skipped": "over budget"}
    assert budget.skipped[0]["what"] == "flex d=128" and budget.skipped[0]["at_s"] == 30.0


# ----------------------------------------------------------------------------------- targets

def test_strict_target_needs_both_peers():
    strict = row(sdpa_flash=cell(300), sdpa_cudnn=cell(600), triton=cell(560, correct=True))
    assert C.requirement(strict)["vs_flash"] == 1.5
    result = C.evaluate_target(strict, ["triton"])
    assert result["met"] is True and result["backend"] == "triton"
    slow = row(sdpa_flash=cell(300), sdpa_cudnn=cell(700), triton=cell(560, correct=True))
    assert C.evaluate_target(slow, ["triton"])["met"] is False          # 0.8x cuDNN
    no_cudnn = row(sdpa_flash=cell(300), sdpa_cudnn={"error": "x"}, triton=cell(560, correct=True))
    assert C.evaluate_target(no_cudnn, ["triton"])["met"] is None       # undecidable
    short = row(sdpa_flash=cell(400), sdpa_cudnn={"error": "x"}, triton=cell(560, correct=True))
    assert C.evaluate_target(short, ["triton"])["met"] is False         # 1.4x flash fails anyway


def test_other_rows_need_only_flash():
    for r in (row(hdim=64), row(seqlen=2048), row(dtype="bf16"), row(causal=True)):
        assert C.requirement(r)["vs_cudnn"] is None
        r["cells"] = {"sdpa_flash": cell(300), "cuda": cell(300)}
        assert C.evaluate_target(r, ["cuda"])["met"] is True


def test_wrong_or_failed_kernels_do_not_count():
    wrong = row(seqlen=512, sdpa_flash=cell(100), triton=cell(900, correct=False))
    assert C.evaluate_target(wrong, ["triton"])["met"] is False
    broken = row(seqlen=512, sdpa_flash=cell(100), triton={"error": "CompilationError"})
    assert C.evaluate_target(broken, ["triton"])["met"] is False
    skipped = row(seqlen=512, sdpa_flash=cell(100), triton={"skipped": "over budget"})
    assert C.evaluate_target(skipped, ["triton"])["met"] is None


def test_best_and_triton_are_reported_separately():
    r = row(seqlen=512, sdpa_flash=cell(200), triton=cell(150, correct=True),
            cuda=cell(250, correct=True))
    targets = C.evaluate_targets([r], ["triton", "cuda"])
    (entry,) = targets["rows"]
    assert entry["best"]["met"] is True and entry["best"]["backend"] == "cuda"
    assert entry["triton"]["met"] is False
    assert targets["summary"]["best"]["met"] == 1 and targets["summary"]["triton"]["not_met"] == 1


# ---------------------------------------------------------------------------------- markdown

def fake_results() -> dict:
    rows = [
        row(128, 4096, False, "fp16", triton=cell(610, correct=True), cuda=cell(650, correct=True),
            sdpa_flash=cell(380), sdpa_cudnn=cell(700), flex={"skipped": "over budget"}),
        row(64, 512, True, "bf16", triton={"error": "CompilationError: out of resources"},
            cuda=cell(150, correct=False), sdpa_flash=cell(120), sdpa_cudnn=cell(200),
            flex=cell(100)),
        row(128, 512, False, "fp16", triton=cell(300, correct=True), sdpa_flash=cell(200),
            sdpa_cudnn={"error": "CompilationError: out of resources"}),
        row(64, 512, False, "bf16", triton=cell(300, correct=True), sdpa_flash=cell(250)),
    ]
    rows[0]["prediction"] = {"time_s": 1e-3, "tflops": 700.0, "bound": "tensor"}
    rows[1]["prediction"] = {"error": "ValueError: no tiles"}
    return {
        "meta": {"command": "python bench/attention_h200.py", "backends": ["triton", "cuda"],
                 "started_utc": "2026-01-01T00:00:00+00:00", "elapsed_s": 400.0, "budget_s": 520},
        "environment": {"gpu": "NVIDIA H200", "sm_count": 132, "memory_gib": 139.8,
                        "compute_capability": "9.0", "torch": "2.11.0", "triton": "3.6.0",
                        "nvidia_smi": {"driver_version": "580.1", "clocks.sm": "1980"}},
        "ceilings": {"copy": {"tb_per_s": 4.1}, "matmul_fp16": {"n": 8192, "tflops": 750.0},
                     "matmul_bf16": {"error": "RuntimeError: oom"}},
        "checks": [
            {"diagram": "attention", "backend": "triton", "dtype": "fp16", "case": "L=17", "rel_err": 1e-3,
             "passed": True},
            {"diagram": "attention", "backend": "triton", "dtype": "bf16", "case": "L=1000 outlier",
             "rel_err": 0.5, "passed": False},
            {"diagram": "gqa", "backend": "cuda", "dtype": "fp16", "case": "generate fp16",
             "passed": False, "error": "NotImplementedError: gqa"},
            {"diagram": "mha", "backend": "triton", "dtype": "fp16", "case": "L=4096",
             "skipped": "over budget", "passed": None},
        ],
        "timings": rows,
        "skipped": [{"what": "flex d=128 L=4096 full fp16", "reason": "over budget"}],
    }


def table_rows(markdown: str) -> list[list[str]]:
    lines = markdown.split("## Forward attention")[1].splitlines()
    body = [line for line in lines if line.startswith("| ") and not line.startswith("| hdim")]
    return [[c.strip() for c in line.strip("|").split("|")] for line in body]


def test_markdown_table_is_sorted_and_shows_every_cell_state():
    md = C.render_markdown(fake_results())
    rows = table_rows(md)
    assert [(r[0], r[1], r[2], r[3]) for r in rows] == [
        ("64", "512", "no", "bf16"), ("64", "512", "yes", "bf16"),
        ("128", "512", "no", "fp16"), ("128", "4096", "no", "fp16")]
    headline = rows[3]
    assert headline[4:9] == ["610", "650", "380", "700", "skip"]
    assert headline[9] == "700 (0.93)"                     # predicted, predicted/measured of cuda
    assert headline[10] == ">=1.5x flash, >=0.9x cuDNN" and headline[11] == "yes / no"
    causal = rows[1]
    assert causal[4] == "err[1]" and causal[5] == "150 ✗" and causal[9] == "err[2]"
    assert causal[11] == "no / no"
    assert rows[2][7] == "err[1]"                          # identical errors share a footnote
    assert rows[0][5] == "-"                               # cuda not run on that row
    assert "- err[1] CompilationError: out of resources" in md
    assert "- err[2] prediction: ValueError: no tiles" in md


def test_markdown_header_checks_and_footer():
    md = C.render_markdown(fake_results())
    assert md.startswith("# napkin attention kernels on NVIDIA H200")
    assert "132 SMs" in md and "torch 2.11.0" in md and "driver 580.1" in md
    assert "4.10 TB/s" in md and "8192^3 fp16 750 TFLOP/s" in md and "matmul bf16: RuntimeError" in md
    assert "| attention | triton | 1 | 1 | 0 | 5.0e-01 | L=1000 outlier: rel err 0.500 |" in md
    assert "| gqa | cuda | 0 | 1 | 0 | - | generate fp16: NotImplementedError: gqa |" in md
    assert "| mha | triton | 0 | 0 | 1 |" in md
    assert "Targets met: best 3/4 (1 not met, 0 n/a); triton 2/4 (2 not met, 0 n/a)" in md
    assert "Skipped (1, listed in the JSON): flex x1 (over budget)." in md


def test_markdown_survives_partial_results():
    md = C.render_markdown({"fatal": "CUDA context lost"})
    assert "Run stopped early" in md and "| hdim | seqlen |" in md


# --------------------------------------------------------------------------------- the script

def test_script_help_runs_without_torch_or_a_gpu():
    proc = subprocess.run([sys.executable, str(SCRIPT), "--help"], capture_output=True, text=True,
                          check=False, timeout=60)
    assert proc.returncode == 0, proc.stderr
    for flag in ("--out", "--budget-s", "--quick", "--only", "--skip-flex"):
        assert flag in proc.stdout


def test_script_without_a_cuda_device_exits_1_with_one_line():
    torch = pytest.importorskip("torch")
    if torch.cuda.is_available():
        pytest.skip("a CUDA device is present")
    proc = subprocess.run([sys.executable, str(SCRIPT), "--quick"], capture_output=True, text=True,
                          check=False, timeout=120)
    assert proc.returncode == 1
    assert proc.stderr.count("\n") == 1 and proc.stderr.startswith("error: no CUDA device")
