"""One diagram, one GPU, one size: napkin analyze, configure, sweep and kernel state the same launched
configuration and the same expected time (analyzer.config.launch)."""

from __future__ import annotations

import html
import json
import re

import pytest
from typer.testing import CliRunner

from analyzer import hardware
from analyzer.cli import app
from analyzer.codegen.generator import generate
from analyzer.common.errors import NapkinError
from analyzer.common.units import seconds
from analyzer.config import screen as screen_module
from analyzer.config.sweep import sweep
from analyzer.model.analysis import load
from analyzer.report import page as page_module

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
    """linear_attention (keys first) gets the portable module on a Hopper GPU (the chain kernel does not
    take its state of the keys): the alias leads with the fit of the shipped calibrated profile (the same
    configuration and time as naming it), and shows the datasheet profile's idealised bound beside it,
    not the calibrated profile's."""
    alias = cli_json("analyze", "linear_attention", "--gpu", gpu)
    named = cli_json("analyze", "linear_attention", "--gpu", f"{gpu}-calibrated")
    assert alias["expected"] == named["expected"] and alias["expected"]["calibrated"] is True
    assert alias["expected"]["model"] == f"the portable kernel's model calibrated on {gpu}-calibrated"
    idealised = alias["totals"]["predicted_time_s"]
    assert idealised < alias["expected"]["time_s"]                 # a bound: the kernel takes longer
    assert named["totals"]["predicted_time_s"] != idealised           # calibrated figures beside it there


def test_the_alias_reaches_the_contraction_kernels_fit():
    """matmul gets the Hopper contraction kernel on an H100, timed by the fit the shipped calibrated
    profile carries, whichever name the command gives the GPU."""
    alias, named = cli_json("analyze", "matmul", "--gpu", "h100"), cli_json("analyze", "matmul", "--gpu", "h100-calibrated")
    assert alias["expected"] == named["expected"] and alias["expected"]["backend"] == "hopper-contraction"
    assert alias["expected"]["model"] == "the Hopper contraction kernel's model calibrated on h100-calibrated"


def test_a_diagram_no_kernel_realises_says_why():
    analysis = cli_json("analyze", "attention", "--gpu", "h100", "--dtype", "fp32")
    assert analysis["expected"] is None and analysis["expected_absent"]


def test_fp8_attention_is_the_hopper_kernels_timed_with_its_e4m3_cost():
    """napkin analyze --dtype fp8 times the Hopper kernel's FP8, with the cost of rounding the probabilities
    to e4m3 that the H200's fit measured and FP8 wgmma's rate, faster than its 16 bits at head dim 256."""
    fp8 = cli_json("analyze", "attention", "--gpu", "h200", "--dtype", "fp8", "--set", "d=256")["expected"]
    fp16 = cli_json("analyze", "attention", "--gpu", "h200", "--set", "d=256")["expected"]
    assert fp8["backend"] == "hopper" and "e4m3 at the costs a sweep of the variants fitted" in fp8["model"]
    assert 1.2 < fp16["time_s"] / fp8["time_s"] < 2


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


SCREENS = [
    ("attention", "h100", {}),                          # the Hopper kernel: N = 2, s_x = 128, intra
    ("attention", "h100", {"q": 4096, "x": 4096}),      # another launched configuration at other sizes
    ("gqa", "h200", {"q": 2048, "x": 2048}),            # more grouped axes than the queries': one head a block
    ("attention", "a100", {}),                          # the portable module
]
HOPPER = re.compile(r"N=(\d+) consumer warpgroups? of (\d+) rows, s_x=(\d+), (\d+) stages, overlap (\S+),")


@pytest.mark.parametrize("diagram, gpu, sets", SCREENS)
def test_one_configuration_per_screen(diagram, gpu, sets):
    """napkin configure's tables, napkin report's Configuration section and napkin analyze are of the
    configuration napkin kernel launches, at the sizes given (regression: configure attention --gpu h100
    analysed s_x = 16, inter, one buffer, and ended with N = 2, s_x = 128, intra). Its expected time is
    napkin analyze's (test_the_four_commands_agree)."""
    r = cli_json("configure", diagram, "--gpu", gpu, *set_args(sets))
    e = r["expected"]
    assert r["launched"] is True and r["other"] is None and e is not None
    c, values = r["configuration"], r["values"]
    assert c["name"] == "launched" and e["configuration"] in c["derived_from"]
    assert all(values[k] == v for k, v in e["sizes"].items() if k in values)    # the same sizes
    if e["backend"] == "hopper":
        n, w, chunk, stages, overlap = HOPPER.match(e["configuration"]).groups()
        assert (c["groups"], values["w_q"], values["s_x"], c["stages"]) == tuple(map(int, (n, w, chunk, stages)))
        assert c["overlap"] == ("intra" if "intra" in overlap else "inter")
        assert r["throughput"]["loads_from"] == "l2"         # as the Hopper kernel's model reads the chunks
    else:
        launched = dict(word.split("=") for word in e["configuration"].split())
        assert c["stages"] == int(launched.pop("stages")) and launched.pop("warps")
        assert {k: values[k] for k in launched} == {k: int(v) for k, v in launched.items()}
        assert r["throughput"]["loads_from"] == "gmem"
    profile = hardware.load(gpu)
    section = page_module._configuration(diagram, load(diagram), [page_module.Gpu(profile)], sets, None)
    text = html.unescape(re.sub(r"<[^>]+>", " ", section))
    assert "configuration launched (what napkin kernel launches at these sizes)" in text
    assert f"napkin kernel launches {e['configuration']} at these sizes, {seconds(e['time_s'])}" in text
    assert "the tables above are Section 5's analysis of it" in text


@pytest.mark.parametrize("args, why", [
    (["--config", "fa3_fp16_intra"], "--config fa3_fp16_intra asked for it"),
    (["--set", "N=3"], "--set N asked for it"),
    (["--overlap", "inter"], "--overlap inter asked for it"),
    (["--dtype", "fp32"], None),                         # no kernel: napkin analyze's tiles, and why
])
def test_a_screen_names_the_other_configuration_it_analyses(args, why):
    r = cli_json("configure", "attention", "--gpu", "h100", *args)
    assert r["launched"] is False and r["configuration"]["name"] != "launched"
    screen = CliRunner().invoke(app, ["configure", "attention", "--gpu", "h100", *args], env={"COLUMNS": "400"}).output
    last = screen.splitlines()[-1]
    if why is None:
        assert r["expected"] is None and last.startswith("expected: no generated kernel to time (")
        assert last.endswith(f"the tables above analyse configuration {r['configuration']['name']}")
    else:
        assert r["other"] == why and r["expected"]["configuration"] in last
        assert f"the tables above analyse configuration {r['configuration']['name']} instead ({why})" in last


def test_what_section_5_cannot_express_is_said(monkeypatch):
    """Where the launched configuration does not go into Section 5's variables, the tables analyse the
    one napkin analyze's tiles give, and the screen says why."""
    def cannot(*_args, **_kwargs):
        raise NapkinError("no such variable")
    monkeypatch.setattr(screen_module, "_launched", cannot)
    r, screen = screen_module.configure_screen("attention", "h100")
    assert r.launched is False and r.configuration.name == "derived" and r.expected is not None
    assert r.other == "Section 5 cannot express the launched one (no such variable)" and screen.sets == {}
