"""The command line on bad input: exit code 1, exactly one `error: ...` line on stderr, no traceback.

Each case runs napkin's main() from an empty temporary folder (tests.run_napkin.in_process), so napkin
must find its shipped diagrams and profiles without relying on the directory it is started from; the
cases that only a process shows (stdout a full device or a closed pipe) and the module's entry point run
`python -m analyzer` itself.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from tests.run_napkin import in_process as napkin
from tests.run_napkin import in_subprocess


def assert_one_line_error(proc: subprocess.CompletedProcess, *fragments: str, code: int = 1) -> str:
    """One line on stderr, starting `error: `, holding each fragment, and exit `code`: 1 where an input
    or the model refuses, 2 where the command line is wrong (analyzer.cli.app, docs/cli.md)."""
    where = f"exit {proc.returncode}\nstdout:\n{proc.stdout}\nstderr:\n{proc.stderr}"
    assert "Traceback" not in proc.stdout and "Traceback" not in proc.stderr, where
    assert proc.returncode == code, where
    lines = proc.stderr.splitlines()
    assert len(lines) == 1, where
    assert proc.stderr.endswith("\n"), where
    line = lines[0]
    assert line.startswith("error: "), where
    for fragment in fragments:
        assert fragment in line, where
    return line


BAD_DIAGRAM = """\
name: broken
axes:
  q: {default: 128}
  x: {default: 128}
  d: {default: 64}
inputs:
  Q: [q, d]
  K: [x, d]
ops:
  - name: S
    primitive: dott
    inputs: [Q, K]
    over: d
    output: [q, x]
outputs: [S]
"""


@pytest.mark.parametrize("args, fragments, code", [
    (["analyze", "attention", "--gpu", "h10"], ["unknown GPU 'h10'", "did you mean h100?"], 1),
    (["analyze", "attn", "--gpu", "h100"], ["unknown diagram 'attn'", "attention"], 1),
    (["analyze", "attention", "--set", "q"], ["--set", "NAME=NUMBER"], 2),
    (["analyze", "attention", "--set", "q=abc"], ["--set", "q=abc"], 2),
    (["analyze", "attention", "--set", "q=-1"], ["--set", "q=-1"], 2),
    (["analyze", "attention", "--set", "q=0"], ["--set q=0", "positive"], 2),
    (["analyze", "attention", "--set", "q=99999999999999999999"], ["--set", "out of range"], 2),
    pytest.param(["analyze", "attention", "--set", "q=" + "9" * 5000], ["--set", "out of range"], 2,
                 id="analyze attention --set q=<5000 digits>"),
    (["analyze", "causal_attention", "--set", "x=64"], ["--set x", "set q instead"], 1),
    (["analyze", "attention", "--dtype", "fp64"], ["--dtype", "fp64"], 2),
    (["analyze", "attention", "--gpu", "a100", "--dtype", "fp8"], ["a100", "fp8"], 1),
    (["analyze", "missing.yaml"], ["no such file", "missing.yaml"], 1),
    (["analyze", "no/such/dir/diagram.yaml"], ["no such file", "no/such/dir/diagram.yaml"], 1),
    (["hardware", "show", "h10"], ["unknown GPU 'h10'", "h100"], 1),
], ids=lambda v: " ".join(v) if isinstance(v, list) and v and v[0] in ("analyze", "diagrams",
                                                                        "hardware") else None)
def test_bad_request_is_one_error_line(tmp_path, args, fragments, code):
    assert_one_line_error(napkin(tmp_path, *args), *fragments, code=code)


@pytest.mark.parametrize("args", [["analyze", "attn", "--gpu", "h100"], ["analyze", "attention", "--set", "q=0"],
                                  ["analyze", "attention", "--bogus"]], ids=["refused", "usage", "click-usage"])
def test_the_module_entry_point_ends_as_main_does(tmp_path, args):
    """`python -m analyzer` (what the `napkin` script runs too) ends as main() does in-process: the same
    exit code and error line, and nothing on stdout."""
    alone, here = in_subprocess(tmp_path, *args), napkin(tmp_path, *args)
    assert (alone.returncode, alone.stdout, alone.stderr) == (here.returncode, here.stdout, here.stderr)
    assert_one_line_error(alone, code=here.returncode)


@pytest.mark.parametrize("args, fragments", [
    (["configure", "attention", "--gpu", "h100", "--gpu", "a100"], ["--gpu given twice", "side by side"]),
    (["kernel", "attention", "-o", "k.py", "--backend", "triton", "--backend", "cuda"], ["--backend given twice"]),
    (["sweep", "attention", "--dtype", "fp16", "--dtype", "bf16"], ["--dtype given twice"]),
    (["configure", "attention", "--strategy", "sideways"], ["--strategy", "'fragment', 'staged'"]),
    (["schema", "sweeps"], ["KIND", "'sweep'"]),
], ids=["gpu", "backend", "dtype", "choice", "schema"])
def test_the_command_line_itself_is_wrong_exit_2(tmp_path, args, fragments):
    """regression: a single-valued option given twice kept the last silently; values outside an
    option's choices exited 1 like a refused diagram, so a script could not tell them apart."""
    assert_one_line_error(napkin(tmp_path, *args), *fragments, code=2)


@pytest.mark.parametrize("text, fragments", [
    ("name: broken\naxes: [\n", ["bad.yaml", "invalid YAML", "line "]),
    ("name: a\nname: b\n", ["bad.yaml", "duplicate key 'name'"]),
    ("a: &x 1\nb: *x\n", ["bad.yaml", "aliases"]),
    ("- just\n- a list\n", ["bad.yaml", "expected a mapping"]),
    (BAD_DIAGRAM, ["bad.yaml", "ops[0].primitive", "unknown primitive 'dott'", "did you mean dot?"]),
    (BAD_DIAGRAM.replace("dott", "dot").replace("{default: 128}", "{default: 0}"),
     ["bad.yaml", "axes.q.default", "positive"]),
    (BAD_DIAGRAM.replace("dott", "dot").replace("d: {default: 64}", "d: {size: \"__import__('os')\"}"),
     ["bad.yaml", "axes.d.size", "not a size expression"]),
], ids=["invalid-yaml", "duplicate-key", "alias", "list", "unknown-primitive", "zero-default",
        "code-in-size"])
def test_malformed_diagram_file_is_one_error_line(tmp_path, text, fragments):
    (tmp_path / "bad.yaml").write_text(text, encoding="utf-8")
    assert_one_line_error(napkin(tmp_path, "analyze", "bad.yaml", "--gpu", "h100"), *fragments)


def test_diagrams_check_of_a_malformed_file_is_one_error_line(tmp_path):
    (tmp_path / "bad.yaml").write_text(BAD_DIAGRAM, encoding="utf-8")
    assert_one_line_error(napkin(tmp_path, "diagrams", "check", "bad.yaml"),
                          "bad.yaml", "ops[0].primitive", "did you mean dot?")


def test_illegal_partition_in_a_file_is_one_error_line(tmp_path):
    text = (Path(__file__).resolve().parents[2] / "diagrams" / "attention.yaml").read_text()
    text = text.replace("{group: {q: g_q}, stream: {x: s_x}}", "{group: {q: g_q, x: g_x}}")
    (tmp_path / "bad.yaml").write_text(text, encoding="utf-8")
    assert_one_line_error(napkin(tmp_path, "analyze", "bad.yaml"),
                          "bad.yaml", "kernels[0].partition.smem", "cannot group axis 'x'")


LONG = "a" * 300       # longer than a file name may be (255 bytes on Linux): stat() fails with ENAMETOOLONG


# regression: each of these traced back with OSError: [Errno 36] File name too long.
@pytest.mark.parametrize("args, fragments", [
    (["analyze", LONG], ["DIAGRAM", "is no diagram name", "File name too long"]),
    (["analyze", LONG + ".yaml"], ["DIAGRAM", "File name too long"]),
    (["analyze", "attention", "--gpu", LONG], ["--gpu", "is no GPU name", "File name too long"]),
    (["kernel", LONG, "-o", "k.py"], ["DIAGRAM", "File name too long"]),
    (["hardware", "show", LONG], ["NAME", "File name too long"]),
    (["calibrate", LONG + ".json"], ["RECORDING", "File name too long"]),
], ids=["diagram", "diagram-file", "gpu", "kernel", "hardware-show", "calibrate"])
def test_argument_longer_than_a_file_name(tmp_path, args, fragments):
    line = assert_one_line_error(napkin(tmp_path, *args), *fragments)
    assert len(line) < 400, "the error line repeats the whole name"


# regression: `napkin diagrams show /etc/passwd` printed the file.
@pytest.mark.parametrize("command", ["diagrams", "hardware"])
@pytest.mark.parametrize("make, fragments", [
    (lambda d: "/etc/passwd", ["NAME", "'/etc/passwd' is not a", "does not end in .yaml"]),
    (lambda d: (d / "notes.txt").write_text("secret: 1\n") and "notes.txt", ["NAME", "is not a"]),
    (lambda d: (d / "notes.yaml").write_text("secret-line-of-text\n") and "notes.yaml",
     ["notes.yaml", "expected a mapping", "got text"]),
    (lambda d: (d / "other.yaml").write_text("secret: 1\n") and "other.yaml",
     ["other.yaml", "unknown key 'secret'"]),
], ids=["etc-passwd", "not-yaml", "yaml-text", "yaml-not-a-diagram"])
def test_show_prints_only_napkin_files(tmp_path, command, make, fragments):
    proc = napkin(tmp_path, command, "show", make(tmp_path))
    line = assert_one_line_error(proc, *fragments)
    assert proc.stdout == "" and "secret-line" not in line and "root:" not in line


def test_diagrams_show_prints_a_diagram_file(tmp_path):
    text = (Path(__file__).resolve().parents[2] / "diagrams" / "gqa.yaml").read_text()
    (tmp_path / "mine.yaml").write_text(text)
    proc = napkin(tmp_path, "diagrams", "show", "mine.yaml")
    assert proc.returncode == 0 and proc.stdout == text.rstrip() + "\n", proc.stderr


# regression: a folder was reported as "no such file".
@pytest.mark.parametrize("args, fragments", [
    (["analyze", "dir.yaml"], ["DIAGRAM", "dir.yaml is a folder, not a diagram file"]),
    (["analyze", "attention", "--gpu", "dir.yaml"], ["--gpu", "dir.yaml is a folder"]),
    (["hardware", "show", "dir.yaml"], ["NAME", "dir.yaml is a folder"]),
    (["calibrate", "dir.yaml"], ["RECORDING", "dir.yaml is a folder, not a recording file"]),
], ids=["analyze", "gpu", "hardware-show", "calibrate"])
def test_directory_instead_of_a_file(tmp_path, args, fragments):
    (tmp_path / "dir.yaml").mkdir()
    line = assert_one_line_error(napkin(tmp_path, *args), *fragments)
    assert "no such" not in line


# regression: typer/click usage errors printed a multi-line box and exited with code 2.
@pytest.mark.parametrize("args", [["analyze", "attention", "--cluster", "abc"],
                                  ["analyze", "attention", "--bogus"]], ids=["bad-int", "unknown-option"])
def test_usage_error_is_one_error_line(tmp_path, args):
    assert_one_line_error(napkin(tmp_path, *args), code=2)


def test_analyze_json_succeeds_from_any_directory(tmp_path):
    proc = napkin(tmp_path, "analyze", "attention", "--gpu", "h100", "--json")
    assert proc.returncode == 0, proc.stderr
    assert "Traceback" not in proc.stderr
    report = json.loads(proc.stdout)
    assert report["diagram"]["name"] == "attention"
    assert report["gpu"]["name"] == "h100-sxm5"
    assert report["totals"]["predicted_time_s"] > 0


def test_json_and_latex_together_are_refused(tmp_path):
    """regression: --json --latex printed the JSON alone, silently."""
    assert_one_line_error(napkin(tmp_path, "analyze", "attention", "--json", "--latex"), "--json and --latex",
                          code=2)


# -- stdout that refuses the output ---------------------------------------------------------------------

STDOUT_WRITERS = [["analyze", "matmul", "--gpu", "a100"], ["hardware", "list"], ["schema", "diagram"],
                  ["analyze", "--help"], ["hardware"]]
STDOUT_IDS = ["analyze", "rich-table", "echo", "help", "no-args-help"]


@pytest.mark.skipif(not Path("/dev/full").exists(), reason="no /dev/full")
@pytest.mark.parametrize("args", STDOUT_WRITERS, ids=STDOUT_IDS)
def test_a_full_stdout_is_one_error_line(tmp_path, args):
    """regression: `napkin analyze attention --gpu h100 > /dev/full` ended in a traceback."""
    with open("/dev/full", "w") as full:
        proc = in_subprocess(tmp_path, *args, stdout=full, stderr=subprocess.PIPE)
    assert proc.returncode == 1, proc.stderr
    assert proc.stderr.count("\n") == 1 and proc.stderr.startswith("error: stdout: "), proc.stderr
    assert "No space left on device" in proc.stderr and "hint:" in proc.stderr


@pytest.mark.parametrize("args", STDOUT_WRITERS[1:], ids=STDOUT_IDS[1:])
def test_a_closed_pipe_ends_quietly_as_other_tools_do(tmp_path, args):
    """`napkin ... | head -1` where head has gone: nothing on stderr and exit 141, what a shell reports of
    a tool that SIGPIPE ended (`yes | head -1`), so that a script tells it from a refusal (1)."""
    read, write = os.pipe()
    os.close(read)
    try:
        proc = in_subprocess(tmp_path, *args, stdout=write, stderr=subprocess.PIPE)
    finally:
        os.close(write)
    assert (proc.returncode, proc.stderr) == (141, "")
