"""One diagram, one GPU, one size: napkin analyze, configure, sweep and kernel state the same launched
configuration and the same expected time (analyzer.config.launch)."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from analyzer.cli import app
from analyzer.codegen.generator import generate
from analyzer.common.units import seconds
from analyzer.config.sweep import sweep

CASES = [
    ("attention", "h100", {}),                                 # the Hopper kernel, calibrated sibling fit
    ("attention", "h100", {"q": 4096, "x": 4096}),             # ... at other sizes than the diagram's
    ("causal_attention", "h200", {"q": 4096}),                 # causal, another size
    ("gqa", "h100-calibrated", {}),
    ("attention", "a100", {}),                                 # the portable module, no calibration
    ("softmax_contraction", "h200-calibrated", {"g_q": 128}),  # a pinned tile: the portable module, calibrated
    ("matmul", "t4", {}),
    ("matmul", "h100", {}),                                    # the portable module, calibrated sibling fit
    ("mlp2", "h200", {}),
]


def cli_json(*args: str) -> dict:
    result = CliRunner().invoke(app, [*args, "--json"])
    assert result.exit_code == 0, result.output
    return json.loads(result.output)


def set_args(sets: dict[str, int]) -> list[str]:
    return [w for k, v in sets.items() for w in ("--set", f"{k}={v}")]


@pytest.mark.parametrize("diagram, gpu, sets", CASES)
def test_the_four_commands_agree(diagram, gpu, sets):
    analysis = cli_json("analyze", diagram, "--gpu", gpu, *set_args(sets))
    e = analysis["expected"]
    assert e is not None, analysis["expected_absent"]
    configured = cli_json("configure", diagram, "--gpu", gpu, *set_args(sets))
    assert configured["expected"] == e

    (s,) = sweep(diagram, gpu, sets=sets)
    mine = s.expected.as_dict()
    assert s.launched is not None and {k: mine[k] for k in e} == e
    launched = s.rows[s.launched]
    assert launched.label.replace(",", "").split() == e["configuration"].replace(",", "").split()
    assert launched.time_s == pytest.approx(e["time_s"], rel=1e-9)
    assert s.model == e["model"] and s.calibrated == e["calibrated"]

    k = generate(diagram, gpu, sets=sets)       # the header predicts at the sizes given (regression: the defaults)
    assert k.prediction.startswith(seconds(e["time_s"])) and e["configuration"] in k.prediction
    assert e["model"] in k.prediction
    assert k.prediction_at.split(", ", 1)[1].startswith(", ".join(f"{n}={v}" for n, v in e["sizes"].items()))
    given = [n for n in sets if n in e["sizes"]]
    assert k.prediction_at.endswith(f"; {', '.join(given)} from --set") if given else "--set" not in k.prediction_at


def test_an_unmeasured_gpu_says_so_on_screen_and_in_json():
    analysis = cli_json("analyze", "attention", "--gpu", "a100")
    assert analysis["expected"]["calibrated"] is False
    assert "no one has fitted" in analysis["expected"]["model"]
    screen = CliRunner().invoke(app, ["analyze", "attention", "--gpu", "a100"], env={"COLUMNS": "300"}).output
    assert "no one has fitted the portable kernel's model on a100" in screen
    assert "the paper's idealised bound" in screen


def test_the_alias_reaches_the_calibrated_model_and_leads_with_it():
    screen = CliRunner().invoke(app, ["analyze", "attention", "--gpu", "h100"], env={"COLUMNS": "300"}).output
    first = screen.splitlines()[2]
    assert first.startswith("expected ") and "calibrated on h100-calibrated" in first
    assert "idealised bound" in screen.splitlines()[3]


@pytest.mark.parametrize("gpu", ["h100", "h200"])
def test_the_alias_reaches_the_portable_kernels_fit_with_the_datasheet_bound_beside_it(gpu):
    """matmul gets the portable module on a Hopper GPU: the alias leads with the fit of the shipped
    calibrated profile (the same configuration and time as naming it), and shows the datasheet
    profile's idealised bound beside it, not the calibrated profile's."""
    alias, named = cli_json("analyze", "matmul", "--gpu", gpu), cli_json("analyze", "matmul", "--gpu", f"{gpu}-calibrated")
    assert alias["expected"] == named["expected"] and alias["expected"]["calibrated"] is True
    assert alias["expected"]["model"] == f"the portable kernel's model calibrated on {gpu}-calibrated"
    idealised = alias["totals"]["predicted_time_s"]
    assert idealised < alias["expected"]["time_s"]                 # a bound: the kernel takes longer
    assert named["totals"]["predicted_time_s"] != idealised           # calibrated figures beside it there


def test_a_diagram_no_kernel_realises_says_why():
    analysis = cli_json("analyze", "attention", "--gpu", "h100", "--dtype", "fp8")
    assert analysis["expected"] is None and analysis["expected_absent"]


@pytest.mark.parametrize("diagram, gpu", [("attention", "h100"), ("mlp2", "a100")])
def test_sweep_reports_its_progress_to_the_end(diagram, gpu):
    heard: list[tuple[str, int, int]] = []
    sweep(diagram, gpu, progress=lambda what, done, total: heard.append((what, done, total)))
    stages = dict.fromkeys(what for what, _, _ in heard)
    assert "configure" in stages
    for what in stages:
        steps = [(done, total) for w, done, total in heard if w == what]
        assert steps[-1][0] == steps[-1][1] and [d for d, _ in steps] == sorted(d for d, _ in steps)


def test_kernel_reports_its_progress_to_the_end():
    heard: list[tuple[str, int, int]] = []
    generate("attention", "h100", progress=lambda what, done, total: heard.append((what, done, total)))
    assert heard[0][1] == 0 and heard[-1][1] == heard[-1][2]
    assert [d for _, d, _ in heard] == sorted(d for _, d, _ in heard)
