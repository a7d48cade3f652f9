"""bench/common.py's Sampler and bench/clocks_h200.py without a GPU: a sampler's window means, and the table
that turns the committed recording's timings into time, clock and cycle ratios."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bench import clocks_h200 as CK
from bench import common

ROOT = Path(__file__).resolve().parents[2]
RECORDING = ROOT / "bench" / "results" / "clocks_h200.json"


def test_window_means_only_the_samples_read_inside_it():
    s = common.Sampler.__new__(common.Sampler)
    s.samples = [(0.0, (1000.0, 100.0, 30.0)), (1.0, (1800.0, 690.0, 40.0)), (2.0, (1900.0, 680.0, 42.0)),
                 (3.0, (500.0, 80.0, 35.0))]
    assert s.window(0.5, 2.5) == {"sm_clock_mhz": 1850.0, "power_w": 685.0, "temperature_c": 41.0}
    assert s.window(5.0, 6.0) == {"sm_clock_mhz": None, "power_w": None, "temperature_c": None}


def test_table_rows_are_the_recordings_medians_and_ratios():
    doc = json.loads(RECORDING.read_text())
    size = next(s for s in doc["sizes"] if s["shape"][1:] == ["causal_attention", 64, 8192])
    rows = CK.table(size)
    timed = [c for c in size["candidates"] if c.get("timings")]
    assert len(rows) == len(CK.TIMERS) * len(timed)
    graph = [r for r in rows if "| cudagraph |" in r]
    cells = [[x.strip() for x in r.strip("|").split("|")] for r in graph]
    times = [float(c[3]) for c in cells]
    assert min(float(c[4]) for c in cells) == 1.0
    for c, t in zip(cells, times, strict=True):
        assert float(c[4]) == pytest.approx(t / min(times), abs=1e-3)
    chosen = [c for c in cells if "(chosen)" in c[2]]
    assert len(chosen) == 1 and size["chosen"].endswith(chosen[0][2].removesuffix(" (chosen)"))
    best = min(timed, key=lambda c: CK.median(t["time_s"] for t in c["timings"] if t["timer"] == "cudagraph"))
    ts = [t for t in best["timings"] if t["timer"] == "cudagraph"]
    assert CK.median(t["sm_clock_mhz"] for t in ts) == pytest.approx(
        float(cells[times.index(min(times))][5]), abs=0.5)


def test_every_timing_after_the_first_round_carries_the_gpu_state_it_ran_in():
    doc = json.loads(RECORDING.read_text())
    timings = [t for s in doc["sizes"] for c in s["candidates"] for t in c.get("timings", [])]
    assert timings and all(t["timer"] in CK.TIMERS and t["time_s"] > 0 for t in timings)
    assert all(t["sm_clock_mhz"] and t["power_w"] for t in timings if t["round"] > 0)
