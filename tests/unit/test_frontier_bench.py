"""bench/frontier.py's report: speeds are the peer's time over napkin's, a target is met only at or above
its bound (to three decimals, so 0.996 is not shown as a met 1.00), and a run without FlashAttention-4
or cut short still reports what it measured."""

from __future__ import annotations

import pytest

from bench import frontier

CONFIG = {"WARPGROUPS": 2, "BLOCK_X": 128, "STAGES": 2, "OVERLAP": "intra", "SCHEDULE": "persistent"}


def _row(napkin_s: float, cudnn_s: float, fa4_s: float | None, **extra) -> dict:
    row = {"d": 128, "seq_q": 512, "seq_k": 512, "causal": False, "dtype": "fp16", "config": CONFIG,
           "predicted_s": napkin_s * 1.02, "napkin_s": napkin_s, "cudnn_s": cudnn_s, "napkin_tflops": 1.0,
           "cudnn_tflops": 1.0, **extra}
    if fa4_s is not None:
        row.update(fa4_s=fa4_s, fa4_tflops=1.0)
    return row


def _doc(grid: list[dict], shapes: list[dict] = (), **meta) -> dict:
    return {"meta": {"gpu": "GPU", "command": "python bench/frontier.py", "date": "2026-11-28", "timer": "t", **meta},
            "checks": [{"ok": True, "rel_err": 1e-3}], "grid": grid, "shapes": list(shapes), "skipped": []}


def test_speed_is_the_peers_time_over_napkins_and_the_target_needs_the_bound():
    faster, slower = _row(1.0, 1.1, 0.9), _row(1.0, 0.996, 1.0)
    assert frontier._speed(faster, "cudnn") == pytest.approx(1.1)
    assert frontier._speed(faster, "fa4") == pytest.approx(0.9)
    text = frontier.markdown(_doc([faster, slower]))
    first, second = (line for line in text.splitlines() if line.startswith("| 128 | 512"))
    assert "| 1.100 | 0.900 | yes | no |" in first
    assert "| 0.996 | 1.000 | no | yes |" in second        # not rounded up to a met 1.00
    assert "Over cuDNN: median 1.048, 1 of 2 rows at >= 1.0." in text
    assert "Over FlashAttention-4: median 0.950 (target >= 1.0), 1 of 2 rows at >= 0.95." in text
    assert "median 2.0 %, 0 rows beyond 10 %" in text


def test_a_run_without_flashattention_4_or_cut_short_reports_what_it_measured():
    doc = _doc([_row(1.0, 1.2, None)], [{"shape": "BERT", **_row(2e-5, 2.5e-5, None, seq_q=512, heads=16, d=64)}],
               fa4="not installed: No module named 'flash_attn'")
    doc["skipped"] = ["grid d=64 L=512 causal=False fp16"]
    text = frontier.markdown(doc)
    assert "FlashAttention-4: not installed" in text
    assert "Over FlashAttention-4" not in text                 # no row has a FlashAttention-4 time
    assert "| BERT (512 x 512, 16 heads, d 64) | 20.0 |" in text and "| 25.0 | - | 1.250 | - | yes |" in text
    assert "Skipped for the time budget: grid d=64 L=512 causal=False fp16." in text
