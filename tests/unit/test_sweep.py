"""napkin sweep: legal configurations ranked by the model, consistent with analyze and the generator."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from analyzer import hardware
from analyzer.cli import app
from analyzer.codegen.generator import generate
from analyzer.config.choose import legal, resident_blocks
from analyzer.config.sweep import sweep
from analyzer.diagram.weave import outer_tiles
from analyzer.model.analysis import TermModel, analyze, load

runner = CliRunner()
ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("diagram, sets", [
    ("attention", {"batch": 2, "heads": 4, "q": 2048, "x": 2048, "d": 128}),
    ("causal_attention", {"batch": 2, "heads": 4, "q": 4096, "d": 64}),
    ("matmul", {"a": 4096, "b": 2048, "c": 1024}),
])
@pytest.mark.parametrize("gpu", ["h200", "h200-calibrated"])
def test_terms_agree_with_analyze_at_every_legal_configuration(diagram, sets, gpu):
    """The vectorised terms give napkin analyze's predicted time, configuration by configuration
    (analyze assumes two stages and one resident block)."""
    profile = hardware.load(gpu)
    g = generate(diagram, profile, backend="triton")
    kernel = g.kernels[0].plan.name
    base = load(diagram)
    pins = {"d": sets["d"]} if "d" in sets else {}
    choices = legal(base, profile, kernel, pins, "fp16")[::5]
    points = [{**c.tiles, **outer_tiles(g.diagram, g.roles.outer)} for c in choices]
    terms = TermModel(g.diagram, profile, kernel).terms(sets, points)
    times = terms.time(profile)
    for i, point in enumerate(points):
        if terms.values["broken"][i]:
            continue
        expected = analyze(g.diagram, profile, sets={**sets, **point}).totals.predicted_time_s
        assert times[i] == pytest.approx(expected, rel=1e-9), point


def test_sweep_ranks_every_legal_configuration_fastest_first():
    sets = {"batch": 4, "heads": 16, "q": 4096, "x": 4096, "d": 128}
    s = sweep("attention", "h200-calibrated", sets=sets, backend="triton")[0]
    profile = hardware.load("h200-calibrated")
    assert len(s.rows) == len(legal(load("attention"), profile, "flash", {"d": 128}, "fp16"))
    times = np.array([r.time_s for r in s.rows])
    assert np.all(times[1:] >= times[:-1] * (1 - 0.006))        # ties within TIE keep their order
    assert len({(tuple(r.tiles.items()), r.num_warps, r.num_stages) for r in s.rows}) == len(s.rows)


def test_the_bound_column_names_the_power_bound_only_where_a_profile_has_one():
    """The calibrated H200 profile's power bound sets the time of some head-dim-128 configurations
    (the tensor cores' work at a lowered clock); the datasheet profile has none, so no row says power.
    The alias a user types ranks with the calibrated sibling's fit, as napkin kernel does."""
    sets = {"batch": 4, "heads": 16, "q": 4096, "x": 4096, "d": 128}
    (fitted,) = sweep("attention", "h200-calibrated", sets=sets, backend="triton")
    calibrated = {r.bound for r in fitted.rows}
    datasheet = {r.bound for r in sweep("attention", "h200", sets=sets, backend="triton",
                                        sibling_fit=False)[0].rows}
    (alias,) = sweep("attention", "h200", sets=sets, backend="triton")
    assert alias.gpu == "h200-calibrated" and alias.calibrated and alias.rows == fitted.rows
    (own,) = sweep("attention", "h200", sets=sets, backend="triton", sibling_fit=False)
    assert not own.calibrated and own.model.endswith("(h200's own figures)") and own.expected == alias.expected
    assert "power" in calibrated and calibrated <= {"power", "compute", "transfers"}
    assert "power" not in datasheet and datasheet <= {"compute", "transfers"}


def test_first_of_the_sweep_is_what_the_generator_chooses():
    g = generate("attention", "h200", backend="triton")
    default = {"batch": 1, "heads": 1, "q": 16384, "x": 16384}
    for hdim in (64, 128):
        top = sweep("attention", "h200", sets={**default, "d": hdim}, backend="triton")[0].rows[0]
        chosen = g.kernels[0].choices[hdim]
        assert (top.tiles, top.num_warps, top.num_stages) == (chosen.tiles, chosen.num_warps,
                                                               chosen.num_stages)


def test_resident_blocks_follow_smem_threads_and_registers():
    profile = hardware.load("h200")
    found: dict[tuple, list[int]] = {}
    for c in legal(load("attention"), profile, "flash", {"d": 128}, "fp16"):
        found.setdefault((c.tiles["g_q"], c.num_warps), []).append(resident_blocks(c, profile))
    assert max(found[(256, 16)]) == 1                  # 512 threads and most of SMEM
    assert max(found[(64, 4)]) > 1                     # small blocks share an SM


def napkin(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(ROOT / "cli.py"), *args], capture_output=True, text=True,
                          cwd=ROOT, timeout=300)


def test_cli_sweep_prints_the_ranking():
    result = runner.invoke(app, ["sweep", "matmul", "--gpu", "h200", "--backend", "triton", "--set", "a=2048",
                                 "--set", "b=2048", "--set", "c=2048", "--top", "3"])
    assert result.exit_code == 0, result.output
    shown = " ".join(result.output.split())      # the title wraps to the table's width
    (ranked,) = sweep("matmul", "h200", sets={"a": 2048, "b": 2048, "c": 2048}, backend="triton")
    assert f"{len(ranked.rows)} legal configurations, fastest first; within 0.5% a tie" in shown
    assert "(the first 3)" in shown and "on h200-calibrated (the portable kernel's model calibrated" in shown


@pytest.mark.parametrize("args, message, code", [
    (("sweep", "attention", "--gpu", "h200", "--set", "zz=3"), "no size or tile size 'zz'", 1),
    (("sweep", "attention_unfused", "--gpu", "h200"),
     "kernel 'softmax' of attention_unfused streams no axis into a contraction: there is nothing to configure "
     "below SMEM (hint: rank the others alone: --kernel scores or --kernel values)", 1),
    (("sweep", "attention_unfused", "--gpu", "h200", "--kernel", "softmax"), "nothing to configure below SMEM", 1),
    (("calibrate", "nosuch.json"), "no such recording", 1),
    (("calibrate", "bench/results/sweep_h200.json", "--held-out", "attention"), "FAMILY=SIZE", 2),
    (("calibrate", "bench/results/sweep_h200.json", "--registers", "nosuch.json"),
     "no such compile recording", 1),
])
def test_cli_errors_are_one_line_and_exit_1_or_2(args, message, code):
    """1: an input or the model refuses; 2: the command line is wrong (a malformed --held-out)."""
    proc = napkin(*args)
    assert proc.returncode == code and message in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1 and "Traceback" not in proc.stderr
