"""Piped or redirected, the commands print whole lines (rich would cut them to 80 columns): the names
one has to type appear whole, and no verdict wraps mid-sentence. COLUMNS, where set, still rules."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def piped(*args: str, columns: str | None = None) -> str:
    env = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "LINES")}
    if columns:
        env["COLUMNS"] = columns
    proc = subprocess.run([sys.executable, "-m", "analyzer", *args], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


def test_names_one_types_appear_whole():
    listing = piped("hardware", "list")
    assert "h200-calibrated " in listing and "h100-calibrated " in listing and "…" not in listing
    assert "softmax_contraction " in piped("diagrams", "list")


def test_a_verdict_is_one_line():
    lines = piped("analyze", "attention", "--gpu", "h100").splitlines()
    (expected,) = [line for line in lines if line.startswith("expected ")]
    assert expected.rstrip().endswith("calibrated on h100-calibrated")
    (bound,) = [line for line in lines if line.startswith("idealised bound: ")]
    assert "SM utilisation" in bound and bound.rstrip().endswith("groups)")


def test_columns_still_rule_where_set():
    listing = piped("hardware", "list", columns="60")
    assert max(len(line) for line in listing.splitlines()) <= 60
