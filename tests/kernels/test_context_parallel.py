"""examples/context_parallel.py on the CPU: PyTorch's ring attention (gloo, several processes) with
napkin's portable module as its block attention, run by Triton's interpreter, against float64: the
output and the log-sum-exp gathered from every rank, causal (torch's round-robin load balance) and not,
and a causal length the ranks do not divide."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("torch")
pytest.importorskip("triton")

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "context_parallel.py"


def _ring(tmp_path, ranks: int, *args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "TRITON_INTERPRET": "1", "OMP_NUM_THREADS": "1"}
    return subprocess.run([sys.executable, "-m", "torch.distributed.run", f"--nproc-per-node={ranks}",
                           "--standalone", str(EXAMPLE), "--backend", "triton", "--gpu", "h100", "--heads", "2",
                           "--head-dim", "64", "--dtype", "fp16", "--check", "--json", str(tmp_path / "out.json"),
                           *args], capture_output=True, text=True, env=env, timeout=300)


@pytest.mark.slow(seconds=12)
@pytest.mark.parametrize(("ranks", "length", "causal"), [(2, 64, False), (3, 50, True)])
def test_the_ring_of_napkin_blocks_is_attention_over_the_whole_sequence(tmp_path, ranks, length, causal):
    """Each rank's queries against every rank's keys, merged by the log-sum-exps the blocks return, is
    attention over the whole sequence: the output within sqrt(L) u of float64, the log-sum-exp within a
    score's rounding; 50 tokens on 3 ranks under a causal mask are padded to 54 (6 chunks of 9)."""
    r = _ring(tmp_path, ranks, "--seqlen", str(length), *(["--causal"] if causal else []))
    assert r.returncode == 0, r.stderr[-2000:]
    result = json.loads((tmp_path / "out.json").read_text())
    assert result["ok"] and result["world"] == ranks and result["causal"] == causal
    assert result["out_error"] < 2e-3 and result["lse_error"] < 1e-4       # 2026-11-28: 4e-4 and 6e-7
    assert result["padded"] == (54 if causal else 64)


@pytest.mark.slow(seconds=5)
def test_a_length_the_ranks_do_not_divide_is_refused_without_a_mask(tmp_path):
    r = _ring(tmp_path, 2, "--seqlen", "63")
    assert r.returncode != 0 and "without a causal mask the ranks must divide the length" in r.stderr
    assert not (tmp_path / "out.json").exists()
