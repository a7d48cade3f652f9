"""The command line: every command runs, and --json is a faithful, parseable document."""

import json

import pytest
import sympy
from typer.testing import CliRunner

from analyzer.cli import app
from analyzer.model.result import Analysis

runner = CliRunner()


def run(*args: str):
    result = runner.invoke(app, list(args))
    assert result.exit_code == 0, result.output
    return result.output


def parse(text: str) -> sympy.Expr:
    """JSON expressions are sympy text; napkin's symbols are positive."""
    expr = sympy.sympify(text)
    return expr.subs({s: sympy.Symbol(s.name, positive=True) for s in expr.free_symbols})


def test_analyze_prints_the_model_configuration_and_prediction():
    out = run("analyze", "attention", "--gpu", "h100")
    for expected in ("2*d*q + 2*d*q*x/g_q", "optimum H*(a, M) = 2*d*q + 4*d**2*q*x/M", "g_q=",
                     "predicted", "Bandwidth limits"):
        assert expected in out


def test_json_follows_the_schema_and_its_expressions_parse_back():
    doc = json.loads(run("analyze", "attention", "--gpu", "h100", "--json"))
    analysis = Analysis.model_validate(doc)
    assert analysis.schema_version == 1 and analysis.gpu.name == "h100-sxm5"
    smem = next(lv for lv in analysis.kernels[0].levels if lv.level == "smem")
    q, x, d, g_q, m = (sympy.Symbol(n, positive=True) for n in ("q", "x", "d", "g_q", "M"))
    assert sympy.expand(parse(smem.transfers) - (2 * q * d + 2 * q * x * d / g_q)) == 0
    assert sympy.expand(parse(smem.optimum.h_star) - (2 * q * d + 4 * q * x * d**2 / m)) == 0
    assert parse(smem.memory).free_symbols == {d, g_q, sympy.Symbol("s_x", positive=True)}
    assert smem.chosen["g_q"] % 64 == 0 and smem.memory_bytes_value <= smem.memory_limit_bytes
    totals = analysis.totals
    assert totals.predicted_time_s == max(totals.compute_time_s, totals.transfer_time_s)


def test_sets_override_sizes_and_pin_tiles():
    doc = json.loads(run("analyze", "matmul", "--gpu", "a100", "--set", "a=4096", "--set", "g_a=128",
                         "--dtype", "bf16", "--json"))
    assert {s["axis"]: s["value"] for s in doc["sizes"]}["a"] == 4096
    smem = doc["kernels"][0]["levels"][-1]
    assert smem["chosen"]["g_a"] == 128 and doc["dtype"] == "bf16"


def test_latex_output():
    out = run("analyze", "gqa", "--latex")
    assert "\\begin{align}" in out and "H^*_{\\mathrm{smem}}" in out


def test_cluster_adds_a_cross_transfer_level_and_reports_the_trade_off():
    doc = json.loads(run("analyze", "attention", "--cluster", "2", "--json"))
    kernel = doc["kernels"][0]
    assert [lv["level"] for lv in kernel["levels"]] == ["l2", "dsmem", "smem"]
    # the profile's SM-to-SM bandwidths (3.27, 2.65 TB/s) are below its L2's (12 TB/s): with
    # w_hc < w_xc every Delta H*(N) is negative, and more so for larger clusters (attention, beta = 1)
    trade = kernel["cluster_trade_off_s"]
    assert list(trade) == ["2", "4"] and trade["4"] < trade["2"] < 0
    assert any("clusters cost time" in note for note in kernel["notes"])


@pytest.mark.parametrize("args", [("hardware", "list"), ("hardware", "show", "h100"),
                                  ("diagrams", "list"), ("diagrams", "show", "mha"),
                                  ("diagrams", "check", "causal_attention"), ("--version",)])
def test_other_commands(args):
    assert run(*args).strip()


@pytest.mark.parametrize("kind", ["diagram", "profile", "report", "configuration"])
def test_schemas_are_json_schema(kind):
    """Each names its dialect (regression: no $schema, so a validator had to guess it)."""
    schema = json.loads(run("schema", kind))
    assert schema["$schema"] == "https://json-schema.org/draft/2020-12/schema"
    assert schema["type"] == "object" and schema["properties"]


@pytest.mark.parametrize("name", ["matmul", "attention", "attention_unfused", "mha", "gqa",
                                  "causal_attention", "softmax_contraction"])
@pytest.mark.parametrize("gpu", ["h100-sxm5", "h100-pcie", "a100", "t4", "h200"])
def test_every_shipped_diagram_on_every_gpu(name, gpu):
    doc = json.loads(run("analyze", name, "--gpu", gpu, "--json"))
    for kernel in doc["kernels"]:
        assert kernel["predicted_time_s"] > 0
        for lv in kernel["levels"]:
            assert lv["memory_bytes_value"] <= lv["memory_limit_bytes"]
