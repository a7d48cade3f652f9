"""`napkin expand` and `napkin configure` on the command line (Sections 5-6, Appendix B).

The commands run in-process through `analyzer.cli.main`, the console script's entry point, so a
NapkinError becomes the one `error: ...` line and exit code 1 exactly as in a shell; one test runs a
real process for `--strict`. tests/paper/test_section5_configuration.py and test_section6_overlap.py
check the numbers against the paper; these tests check what a user sees.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from dataclasses import dataclass

import jsonschema
import pytest

import analyzer.config.overlap as overlap_module
from analyzer import cli
from analyzer.common import resources
from analyzer.config.result import ConfigurationReport
from analyzer.model.analysis import load

DIAGRAMS = tuple(resources.shipped("diagrams"))
GPUS = ("h100", "h100-pcie", "a100", "t4", "h200")
PROFILE = {"h100": "h100-sxm5"}                   # alias -> profile name in the report
ATTENTION_CONFIGS = ("napkin_hopper", "fa3_fp8_inter", "fa3_fp8_intra", "fa3_fp16_intra")
TABLES = ("Configuration (Table 1)", "Maximum analysis (Table 2", "Compute analysis (Table 3)",
          "Throughput analysis (Appendix B.0.1)", "Overlap (Section 6)")


@dataclass(frozen=True)
class Run:
    code: int
    out: str
    err: str


@pytest.fixture
def napkin(monkeypatch, capsys):
    """Run `napkin ARGS...` in-process; return its exit code, stdout and stderr."""
    monkeypatch.setenv("COLUMNS", "200")
    monkeypatch.delenv("NAPKIN_DEBUG", raising=False)

    def run(*args: str) -> Run:
        monkeypatch.setattr(sys, "argv", ["napkin", *args])
        with pytest.raises(SystemExit) as exit_:
            cli.main()
        out, err = capsys.readouterr()
        return Run(exit_.value.code, out, err)

    return run


def ok(r: Run) -> str:
    assert r.code == 0 and not r.err, f"exit {r.code}\n{r.out}\n{r.err}"
    return r.out


def one_line_error(r: Run, *fragments: str, code: int = 1) -> str:
    """One error line; exit 1 where the input or the model refuses, 2 where the command line is wrong."""
    where = f"exit {r.code}\nstdout:\n{r.out}\nstderr:\n{r.err}"
    assert "Traceback" not in r.out + r.err, where
    assert r.code == code and not r.out, where
    lines = r.err.splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), where
    for fragment in fragments:
        assert fragment in lines[0], where
    return lines[0]


def cells(line: str) -> list[str]:
    """The cells of one row of a terminal table."""
    return [c.strip() for c in line.split("│")]


def diagram_file(tmp_path, name: str, configurations: str, *, base: str = "attention") -> str:
    """A copy of a shipped diagram in tmp_path with its `configurations:` section replaced."""
    text = resources.shipped("diagrams")[base].read_text(encoding="utf-8").split("configurations:")[0]
    (tmp_path / name).write_text(text + configurations, encoding="utf-8")
    return name


# -- napkin expand (Sections 5.1-5.2) --------------------------------------------------------------

def test_expand_attention_is_a_loop_with_head_body_and_tail(napkin):
    lines = ok(napkin("expand", "attention")).splitlines()
    assert lines[0] == "# attention, kernel flash, relabelled at smem: q -> g_q, x -> s_x (stream)"
    code = [ln.split("#")[0].rstrip() for ln in lines]

    def at(statement: str, depth: int) -> int:
        """Index of the one line with this statement, checking its loop depth (4 spaces each)."""
        found = [i for i, c in enumerate(code) if c.strip() == statement]
        assert len(found) == 1, statement
        assert code[found[0]] == "    " * depth + statement, code[found[0]]
        return found[0]

    block = at("for each block of g_q of q:", 0)
    load_q = at("load Q[g_q, d]", 1)
    head = at("O[g_q, d] <- 0; mu[g_q] <- -inf; z[g_q] <- 0", 1)
    loop = at("for each chunk of s_x of x:", 1)
    body = [at(s, 2) for s in ("load K[s_x, d]", "load V[s_x, d]", "S[g_q, s_x] <- dot(Q, K) over d",
                                "mu_new[g_q] <- max(mu, max over s_x of 1/sqrt(d) * S)",
                                "delta[g_q] <- exp(mu - mu_new); mu <- mu_new",
                                "P <- exp(1/sqrt(d) * S - mu)", "z <- delta * z + sum over s_x of P",
                                "O[g_q, d] <- delta * O + dot(P, V) over s_x")]
    normalise = at("O[g_q, d] <- O / z", 1)
    save = at("save O[g_q, d]", 1)
    assert block < load_q < head < loop < body[0] and body == sorted(body)
    assert body[-1] < normalise < save                     # after the loop, not in it
    assert "head: state after a stream of size 0" in lines[head]
    assert "tail: normalise once" in lines[normalise]
    freedoms = lines[lines.index("# degrees of freedom") + 1:]
    assert freedoms == [
        "#   subloop: the accumulator of O is streamable: each chunk of s_x may be folded in as "
        "subloops of u_x (Section 5.2)",
        "#   split: the contraction S splits along any of g_q, s_x, d and adds up linearly (dotted box)",
        "#   split: the contraction O splits along any of g_q, d, s_x and adds up linearly (dotted box)"]
    assert save < lines.index("# degrees of freedom")


@pytest.mark.parametrize("diagram", DIAGRAMS)
def test_expand_every_shipped_diagram(napkin, diagram):
    out = ok(napkin("expand", diagram))
    d = load(diagram)
    headers = [ln for ln in out.splitlines() if ln.startswith(f"# {diagram}, kernel ")]
    assert [h.split(",")[1].split()[1] for h in headers] == [k.name for k in d.kernels]
    streamed = [k for k in d.kernels if k.partitions[d.levels[-1]].stream]
    assert out.count("for each chunk of ") == len(streamed)
    assert out.count("# degrees of freedom") == len(streamed)
    assert out.count("    save ") >= len(d.kernels)


def test_expand_one_kernel_without_a_stream(napkin):
    """The softmax kernel of unfused attention groups q only: no loop and nothing to subloop."""
    out = ok(napkin("expand", "attention_unfused", "--kernel", "softmax", "--level", "smem"))
    assert out.splitlines() == [
        "# attention_unfused, kernel softmax, relabelled at smem: q -> g_q2",
        "for each block of g_q2 of q:                          # in parallel, q/g_q2 blocks "
        "(group partition, Section 2.3)",
        "    load S[g_q2, x]                                   # gmem -> smem",
        "    P[g_q2, x] <- softmax(S) over x, scale 1/sqrt(d)  # head",
        "    save P[g_q2, x]                                   # smem -> gmem"]


@pytest.mark.parametrize(("args", "fragments"), [
    (["--kernel", "nope"], ["--kernel 'nope': attention has no such kernel", "kernels: flash"]),
    (["--level", "nope"], ["--level 'nope': attention relabels its kernels at smem"]),
    (["--level", "gmem"], ["--level 'gmem'"]),                 # the top level is not relabelled
], ids=["kernel", "level", "top-level"])
def test_expand_bad_kernel_or_level(napkin, args, fragments):
    one_line_error(napkin("expand", "attention", *args), *fragments)


# -- napkin configure: every shipped diagram on every shipped GPU ----------------------------------

KERNEL = {   # the kernel configure picks: the first that streams an axis into a contraction
    "attention": "flash", "attention_unfused": "scores", "causal_attention": "flash", "gqa": "flash",
    "causal_gqa": "flash",
    "matmul": "gemm", "mha": "flash", "mlp2": "mlp", "mlp_gelu": "mlp", "sigmoid_attention": "flash",
    "softcap_attention": "flash",
    "softmax_contraction": "online_softmax", "rmsnorm_matmul": "rmsnorm_mm", "mla_attention": "flash",
    "linear_attention": "linear", "linear_attention_queries": "linear", "linear_attention_split": "pieces",
    "gemma2_local_attention": "flash", "alibi_attention": "flash",
    "bias_attention": "flash", "sink_attention": "flash", "band_attention": "flash",
    "matmul_bias_gelu": "gemm_gelu", "swiglu_mlp": "gate_up"}
# analyze's tiles for mlp2 hold one chunk of W1 and W2 (200 KiB on H100); configure double-buffers
# streamed loads (stages: 2), so the same tiles need 320 KiB and do not fit SMEM.
# With one buffer per load, analyze's tiles fit everywhere but mlp2 on the T4: analyze's tiles fill the
# 64 KiB a block may use, and the configuration adds 8 KiB per warp (Table 2's per-warp memory).
# mlp_gelu alike: its bias's chunk (128 B) takes analyze's tiles past the 64 KiB.
SMEM_DOES_NOT_FIT = {("mlp2", "t4"), ("mlp_gelu", "t4")}
# Without options napkin configure analyses what napkin kernel launches (analyzer.config.screen), and where
# it generates no kernel (no configuration of mlp2's fits the T4), the configuration derived from analyze.
# bias_attention on the T4: with its head dim pinned, as configure asks napkin kernel's launch, no tile of the
# portable module passes both the 128-byte rule for the bias's rows (s_x >= 64) and the causal alignment
# (s_x divides g_q) within the T4's SMEM, while napkin kernel, unpinned, launches g_q = s_x = 64: the two
# paths disagree there (open: the configure screen then shows the derived configuration).
NO_KERNEL = {("mlp2", "t4"), ("mlp_gelu", "t4"), ("bias_attention", "t4")}
# mlp2 at i = o = 512 found no tiles on the T4; at its default 256 it does. Linear attention's first
# contraction has no grouped rows (its state K^T V is d x e): no block owns rows to split over warps.
FAILS = {("linear_attention", gpu): ["diagrams/linear_attention.yaml", "kernels[0].partition.smem",
                                     "the rows of its first contraction 'KV' are not grouped"]
         for gpu in GPUS}
# Llama's SwiGLU MLP is bf16, which the T4's tensor cores do not take (--dtype fp16 does)
FAILS["swiglu_mlp", "t4"] = ["--dtype", "t4 has no bf16 tensor cores", "t4 takes: fp16"]


def test_the_matrix_covers_every_shipped_diagram():
    assert set(DIAGRAMS) == set(KERNEL)


@pytest.mark.parametrize("gpu", GPUS)
@pytest.mark.parametrize("diagram", DIAGRAMS)
def test_configure_prints_the_tables_or_one_error_line(napkin, monkeypatch, diagram, gpu):
    # The accommodation bisection reruns the schedule about 30 times, most of this test's time with
    # 10 or more warps (A100, T4); tests/paper/test_section6_overlap.py covers it.
    monkeypatch.setattr(overlap_module, "accommodation", lambda body, **_: 0.0)
    r = napkin("configure", diagram, "--gpu", gpu)
    if (diagram, gpu) in FAILS:
        one_line_error(r, *FAILS[diagram, gpu])
        return
    out = ok(r)
    lines = out.splitlines()
    launched = (diagram, gpu) not in NO_KERNEL
    name = ("launched (what napkin kernel launches at these sizes)" if launched else
            "derived (from --set and napkin analyze's tiles)")
    assert lines[0] == f"{diagram} on {PROFILE.get(gpu, gpu)}: configuration {name}"
    unit = "warpgroup" if gpu.startswith("h") else "warp"
    threads = 128 if unit == "warpgroup" else 32
    assert f"  kernel {KERNEL[diagram]}; fragment strategy, " in out and f"-{unit} overlap; N = " in out
    if launched:
        assert " ".join(out.split()).endswith("the tables above are Section 5's analysis of it; their "
                                              "throughput is the paper's idealised bound")
    else:
        assert f" of {threads} threads; 1 buffer per streamed load" in out   # as analyze counts memory
    positions = [out.index(title) for title in TABLES]
    assert positions == sorted(positions)
    if (diagram, gpu) in SMEM_DOES_NOT_FIT:
        verdict = out[out.index("does not fit:"):].splitlines()
        assert verdict[1].startswith("  - smem: ") and "(largest: W1 " in verdict[1]
    else:
        assert "fits: every excess is non-negative" in out and "does not fit" not in out
    # the launched portable module's SMEM verdict is its own allocation, the legality it was chosen by;
    # Table 2's excess, where it has one, stays on the screen as a note
    allocated = re.search(r"note: smem: a block of the portable module allocates (\d+) B of the (\d+) B", out)
    assert (allocated is not None) == (launched and "the portable " in out)
    if allocated:
        assert int(allocated[1]) <= int(allocated[2])


# -- the text report ---------------------------------------------------------------------------------

def test_configure_napkin_hopper_text(napkin):
    out = ok(napkin("configure", "attention", "--gpu", "h100", "--config", "napkin_hopper"))
    assert out.startswith("attention on h100-sxm5: configuration napkin_hopper (The paper's derived "
                          "Hopper attention (Figure 33))\n")
    assert "  kernel flash; staged strategy, inter-warpgroup overlap; N = 3 warpgroups" in out
    assert "  c_d=32, c_x=32, d=128, e_d=8, g_q=384, q=16384, s_x=64, u_x=64, w_q=128, x=16384\n" in out
    rows: dict[str, list[str]] = {}
    for ln in out.splitlines():
        rows.setdefault(cells(ln)[0], cells(ln))
    assert rows["S.reg"][1:] == ["w_q*u_x", "fp16", "threads", "regs", "1", "", "16384"]
    assert rows["P.smem"][1:] == ["w_q*c_x", "fp16", "tensor", "smem", "1", "", "8192"]
    assert rows["K"][1:] == ["s_x*d", "fp8", "tensor", "smem", "2", "16384", ""]
    assert rows["O.aux"][1:] == ["w_q*3", "fp16", "threads", "regs", "1", "", "768"]
    assert rows["smem"][1:] == ["227.00", "48.00", "48.00", "3.73", "35.00", "11.67", "", ""]
    assert rows["regs"][1:] == ["256.00", "0.00", "74.75", "3.42", "31.75", "10.58", "85", "422"]
    assert "throughput K N_SM / max(T_K, T_H) │ 1.32 PFLOP/s" in out
    # 4 per score (max, subtract, sum, scale) and d + 2 per chunk, less the d multiplies of the FMA
    assert "not in the table (the paper's overhead): vector 258 ops / row" in out
    assert "fits: every excess is non-negative" in out


# -- --json and --list ----------------------------------------------------------------------------

@pytest.fixture(scope="module")
def schema() -> dict:
    from typer.testing import CliRunner
    result = CliRunner().invoke(cli.app, ["schema", "configuration"])
    assert result.exit_code == 0, result.output
    return json.loads(result.output)


@pytest.mark.parametrize("args", [
    ["attention", "--gpu", "h100", "--config", "napkin_hopper"],
    ["matmul", "--gpu", "a100", "--set", "g_a=128", "--set", "g_c=128", "--set", "s_b=64"],
], ids=["attention-napkin_hopper", "matmul-a100-pinned"])
def test_json_follows_the_printed_schema(napkin, schema, args):
    text = ok(napkin("configure", *args, "--json"))
    doc = json.loads(text)
    jsonschema.validate(doc, schema, cls=jsonschema.Draft202012Validator)
    report = ConfigurationReport.model_validate_json(text)
    assert set(doc) == {"schema_version", "napkin_version", "diagram", "source", "gpu", "gpu_source",
                        "configuration", "values", "divisors", "variables", "capacity", "compute",
                        "throughput", "overlap", "fits", "problems", "notes", "expected", "expected_absent",
                        "launched", "other"}
    assert report.schema_version == 1 and report.fits and report.problems == []
    assert [c.storage for c in report.capacity] == ["smem", "registers"]
    assert report.throughput.throughput_flops_per_s > 0 and report.overlap.period_clocks_per_row > 0


def test_json_of_napkin_hopper(napkin):
    doc = json.loads(ok(napkin("configure", "attention", "--config", "napkin_hopper", "--json")))
    assert doc["configuration"] | {"title": ""} == {
        "name": "napkin_hopper", "title": "", "paper": "Section 5.6, Tables 1-2; Appendix B.2.1",
        "kernel": "flash", "strategy": "staged", "overlap": "inter", "unit": "warpgroup",
        "threads_per_group": 128, "groups": 3, "stages": 2,
        "derived_from": "attention's configuration 'napkin_hopper'"}
    assert doc["values"] == {"c_d": 32, "c_x": 32, "d": 128, "e_d": 8, "g_q": 384, "q": 16384,
                             "s_x": 64, "u_x": 64, "w_q": 128, "x": 16384}
    assert [v["name"] for v in doc["variables"]] == ["Q", "K", "V", "S", "S.smem", "S.reg", "P.smem",
                                                    "O.reg", "O.tc", "O.smem", "O.chunk", "O.aux"]
    assert [c["label"] for c in doc["compute"]["columns"]] == [
        "S (dot)", "softmax (exp)", "O (contraction)", "accumulate (FMA)"]
    assert doc["compute"]["limiting_pipeline"] == "tensor"
    assert doc["throughput"]["bound"] == "tensor cores"


def test_json_of_a_derived_configuration(napkin):
    # stages, Section 5's own variable, asks for another configuration than napkin kernel's launched one
    doc = json.loads(ok(napkin("configure", "matmul", "--gpu", "a100", "--set", "g_a=128",
                               "--set", "g_c=128", "--set", "s_b=64", "--set", "stages=2", "--json")))
    assert doc["configuration"]["name"] == "derived" and doc["configuration"]["unit"] == "warp"
    assert doc["launched"] is False and doc["other"] == "--set stages asked for it"
    assert doc["values"] | {"a": 0, "b": 0, "c": 0} == {"a": 0, "b": 0, "c": 0, "g_a": 128,
                                                       "g_c": 128, "s_b": 64, "u_b": 64, "w_a": 16}
    assert doc["configuration"]["groups"] == 8                 # g_a = N w_a


def test_list_names_the_four_attention_configurations(napkin):
    out = ok(napkin("configure", "attention", "--list"))
    rows = [cells(ln) for ln in out.splitlines() if cells(ln)[0] in ATTENTION_CONFIGS]
    assert [(r[0], r[2], r[3], r[4]) for r in rows] == [
        ("napkin_hopper", "Section 5.6, Tables 1-2; Appendix B.2.1", "staged", "inter"),
        ("fa3_fp8_inter", "Section 6.2; Appendix B.2.2", "fragment", "inter"),
        ("fa3_fp8_intra", "Section 6.2; Appendix B.2.3", "fragment", "intra"),
        ("fa3_fp16_intra", "Section 6.1; Appendix B.2.4", "fragment", "intra")]


def test_list_of_a_diagram_without_configurations(napkin):
    out = ok(napkin("configure", "softmax_contraction", "--list"))
    assert "(none)" in out and "leave out --config" in out


# -- bad input: one line, exit code 1, naming the variable or field --------------------------------

BAD_REQUESTS = [
    (["--config", "nope"], ["--config 'nope': attention has no such configuration",
                            "its configurations: napkin_hopper, fa3_fp8_inter, fa3_fp8_intra, "
                            "fa3_fp16_intra"]),
    (["--config", "napkin_hoper"], ["--config 'napkin_hoper'", "did you mean napkin_hopper?"]),
    (["--set", "w_q=100"], ["--set w_q", "w_q=100 does not divide the block's 128 rows (g_q)"]),
    (["--set", "w_q=32", "--set", "g_q=128"], ["--set w_q", "w_q=32 breaks a divisor: it must be a "
                                               "multiple of 64 (wgmma m of S)", "try w_q=64"]),
    (["--set", "u_x=48", "--set", "s_x=64"], ["--set u_x", "u_x=48 must divide s_x=64"]),
    (["--config", "napkin_hopper", "--set", "u_x=48"], ["--set u_x",
                                                        "u_x=48 must divide s_x=64"]),
    (["--config", "napkin_hopper", "--set", "c_x=48"], ["--set c_x", "c_x=48 must divide u_x=64"]),
    (["--set", "zz=3"], ["--set", "zz: not a size or configuration variable of attention",
                         "configuration variables: u_x, w_q, N, stages, rows"]),
    (["--set", "w_qq=128"], ["w_qq: not a size or configuration variable", "did you mean w_q?"]),
    (["--config", "napkin_hopper", "--set", "c_xx=32"], ["(staged strategy)", "did you mean c_x?"]),
    (["--config", "fa3_fp8_inter", "--gpu", "a100"], ["configurations[1].dtypes",
                                                      "a100 has no fp8 tensor cores for S (Q, K)",
                                                      "a100 takes: fp16, bf16"]),
    (["--gpu", "t4", "--dtype", "fp8"], ["t4 has no fp8 tensor cores", "t4 takes: fp16"]),
    (["--overhead", "-1"], ["--overhead -1.0", "expected a fraction from 0 to 10"]),
    (["--gpu", "h10"], ["unknown GPU 'h10'", "did you mean h100?"]),
]


@pytest.mark.parametrize(("args", "fragments"), BAD_REQUESTS, ids=[" ".join(a) for a, _ in BAD_REQUESTS])
def test_bad_configure_request(napkin, args, fragments):
    one_line_error(napkin("configure", "attention", *args), *fragments)


USAGE_REQUESTS = [   # the command line itself is wrong: exit 2, and the allowed values named
    (["--strategy", "sideways"], ["--strategy", "'sideways' is not one of 'fragment', 'staged'"]),
    (["--overlap", "sideways"], ["--overlap", "'sideways' is not one of 'inter', 'intra'"]),
    (["--dtype", "fp64"], ["--dtype", "'fp64' is not one of 'fp16', 'bf16', 'fp8', 'fp32'"]),
    (["--set", "s_x=0"], ["s_x=0", "positive"]),          # no size in any diagram
]


@pytest.mark.parametrize(("args", "fragments"), USAGE_REQUESTS, ids=[" ".join(a) for a, _ in USAGE_REQUESTS])
def test_bad_configure_option_value_is_a_usage_error(napkin, args, fragments):
    one_line_error(napkin("configure", "attention", *args), *fragments, code=2)


# regression: u_x, c_x, c_d, e_d and stages = 0 divided by zero (a traceback); N, rows and w_q = 0
# were taken as not given. Zero is no size in any diagram: a wrong command line, as --set q=-5 is.
@pytest.mark.parametrize("name", ["u_x", "c_x", "c_d", "e_d", "stages", "N", "rows", "w_q"])
def test_zero_configuration_variable_is_one_error_line(napkin, name):
    one_line_error(napkin("configure", "attention", "--config", "napkin_hopper", "--set", f"{name}=0"),
                   "--set", f"{name}=0", "positive", code=2)


ROW_SUM = """\
name: row_sum
dtype: fp16
levels: [gmem, smem]
axes:
  q: {default: 4096}
  x: {default: 4096}
inputs:
  S: [q, x]
ops:
  - {name: R, primitive: sum, inputs: [S], over: x, output: [q]}
outputs: [R]
kernels:
  - name: k
    partition:
      smem: {group: {q: g_q}, stream: {x: s_x}}
"""


def test_no_streamed_contraction_is_one_error_line(napkin, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "row_sum.yaml").write_text(ROW_SUM, encoding="utf-8")
    one_line_error(napkin("configure", "row_sum.yaml"), "row_sum.yaml",
                   "row_sum: no kernel streams an axis into a contraction at smem")
    ok(napkin("expand", "row_sum.yaml"))                       # expand takes any kernel
    name = diagram_file(tmp_path, "unfused.yaml", "configurations:\n  - name: rows\n    kernel: softmax\n",
                        base="attention_unfused")
    one_line_error(napkin("configure", name, "--config", "rows"), "unfused.yaml",
                   "configurations[0].kernel", "no kernel streams an axis into a contraction")


@pytest.mark.parametrize(("configurations", "fragments"), [
    ("  - name: a\n  - name: b\n    kernel: nope\n",
     ["configurations[1].kernel", "configuration 'b' names kernel 'nope'", "kernels: flash"]),
    ("  - name: a\n  - name: b\n    dtypes: {Z: fp16}\n",
     ["configurations[1].dtypes.Z", "kernel 'flash' has no array 'Z'"]),
    ("  - name: b\n    dtypes: {Q: fp64}\n", ["configurations[0].dtypes.Q", "fp64"]),
    ("  - name: b\n    dtypes: {aux: fp8}\n", ["configurations[0].dtypes.aux", "at least fp16"]),
    ("  - name: a\n  - name: b\n  - name: a\n", ["configurations[2].name", "'a' is named twice"]),
    ("  - name: b\n    colour: blue\n", ["configurations[0]", "unknown key 'colour'"]),
    ("  - name: b\n    strategy: sideways\n", ["configurations[0].strategy", "sideways"]),
    ("  - name: b\n    sizes: {w_q: 0}\n", ["configurations[0].sizes.w_q", "greater than 0"]),
    ("  - name: b\n    sizes: {zz: 3}\n", ["configurations[0].sizes.zz", "zz: not a size"]),
], ids=["unknown-kernel", "unknown-dtype-key", "unknown-dtype", "fp8-aux", "duplicate-name",
        "unknown-key", "unknown-strategy", "zero-size", "unknown-size"])
def test_bad_configurations_section(napkin, tmp_path, monkeypatch, configurations, fragments):
    monkeypatch.chdir(tmp_path)
    name = diagram_file(tmp_path, "bad.yaml", "configurations:\n" + configurations)
    one_line_error(napkin("configure", name, "--config", "b"), *fragments)


# -- --strict ----------------------------------------------------------------------------------------

def test_strict_fails_a_configuration_that_does_not_fit(tmp_path):
    """A real process: the exit code reaches the shell, and the tables still print."""
    env = {k: v for k, v in os.environ.items() if k != "NAPKIN_DEBUG"} | {"COLUMNS": "200"}
    proc = subprocess.run([sys.executable, "-m", "analyzer", "configure", "attention", "--gpu", "h100",
                           "--config", "fa3_fp16_intra", "--strict"], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 3 and proc.stderr == "", proc.stderr    # 3: the check failed (not 1 or 2)
    verdict = proc.stdout[proc.stdout.index("does not fit:"):].splitlines()
    assert verdict[1] == ("  - registers: each thread needs 1036 B, 16 B more than its 255 registers "
                          "hold: expect spills to local memory (largest: S 65536 B, Q 32768 B, "
                          "O 32768 B)")
    assert all(title in proc.stdout for title in TABLES)


def test_strict_passes_a_configuration_that_fits(napkin):
    assert "fits: every excess is non-negative" in ok(
        napkin("configure", "attention", "--config", "napkin_hopper", "--strict"))


def test_strict_json_still_prints_the_report(napkin):
    r = napkin("configure", "attention", "--config", "fa3_fp16_intra", "--strict", "--json")
    assert r.code == 3 and r.err == ""
    doc = json.loads(r.out)
    assert doc["fits"] is False and doc["problems"][0].startswith("registers: each thread needs")


def test_one_warpgroup_too_many_names_smem_and_the_largest_variables(napkin, monkeypatch):
    monkeypatch.setattr(overlap_module, "accommodation", lambda body, **_: 0.0)
    r = napkin("configure", "attention", "--config", "napkin_hopper", "--set", "N=4", "--strict")
    assert r.code == 3
    problems = r.out[r.out.index("does not fit:"):].splitlines()[1:]
    assert problems[0].startswith("  - smem: 4 x 49152 B per warpgroup + 49152 B per block exceeds")
    assert "(largest: V 32768 B, Q 16384 B, K 16384 B); at most N = 3 fit" in problems[0]
    assert problems[1].startswith("  - registers: 4 x 76544 B per warpgroup")


def test_block_variables_alone_overflowing_is_reported_not_a_crash(napkin):
    """SMEM per block over the limit with nothing per warpgroup (N_max infinite): a verdict."""
    out = napkin("configure", "attention", "--config", "fa3_fp16_intra", "--set", "s_x=512")
    text = ok(out)
    assert "smem:" in text and "the block's own variables alone do not fit" in text


def test_n_from_set_is_named_as_set(napkin):
    one_line_error(napkin("configure", "attention", "--config", "napkin_hopper", "--set", "N=4",
                          "--set", "g_q=384"), "--set N", "N=4")
