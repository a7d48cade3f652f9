"""What a GPU engineer expects of a command line: choices in the help, shell completion, the command
line's own mistakes exiting 2, and comparisons across GPUs and sizes (napkin analyze with several
--gpu or a size range)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from analyzer.cli import app
from analyzer.cli.app import parse_size_ranges
from analyzer.common.errors import NapkinError

runner = CliRunner()


def invoke(*args: str) -> str:
    result = runner.invoke(app, list(args), env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    return result.output


@pytest.mark.parametrize("command, shown", [
    (["configure"], ["--dtype [fp16|bf16|fp8|fp32]".replace("[", "<").replace("]", ">"),
                     "<fragment|staged>", "<inter|intra>"]),
    (["kernel"], ["<hopper|triton|cuda>", "<fp16|bf16>"]),
    (["sweep"], ["<hopper|triton>"]),
    (["schema"], ["<diagram|profile|report|comparison|configuration|sweep>"]),
    (["analyze"], ["--gpu GPU", "--set NAME=VALUE", "q=1024..32768"]),
])
def test_help_names_the_allowed_values(command, shown):
    """regression: help showed <str>, <bool> and <list[str]> instead of what an option takes."""
    text = " ".join(invoke(*command, "--help").split())
    for fragment in shown:
        assert fragment in text
    options = text[text.index("Options:"):]
    assert "<bool>" not in options and "<str>" not in options and "<list[str]>" not in options


def test_shell_completion_offers_commands_diagrams_gpus_and_choices():
    def complete(words: str, cword: int) -> list[str]:
        env = {**os.environ, "COMP_WORDS": words, "COMP_CWORD": str(cword), "_NAPKIN_COMPLETE": "complete_bash"}
        napkin = Path(sys.executable).with_name("napkin")       # the console script the shell completes
        proc = subprocess.run([str(napkin)], env=env, capture_output=True, text=True, timeout=60)
        return proc.stdout.split()
    assert "analyze" in complete("napkin ana", 1)
    assert {"attention", "attention_unfused"} <= set(complete("napkin analyze att", 2))
    assert {"h100", "h100-calibrated", "h200"} <= set(complete("napkin analyze attention --gpu h", 4))
    assert complete("napkin configure attention --overlap ", 4) == ["inter", "intra"]
    # the script `napkin --show-completion` prints for bash (it detects the shell it runs in)
    shown = subprocess.run([str(Path(sys.executable).with_name("napkin"))], capture_output=True, text=True,
                           timeout=60, env={**os.environ, "_NAPKIN_COMPLETE": "source_bash"})
    assert "complete -o default -F _napkin_completion napkin" in shown.stdout, shown.stderr


@pytest.mark.parametrize("items, single, ranged", [
    (["q=1024..32768"], {}, {"q": [1024, 2048, 4096, 8192, 16384, 32768]}),
    (["q=1000..5000", "d=64"], {"d": 64}, {"q": [1000, 2000, 4000]}),
    (["q=1000,3000,5000"], {}, {"q": [1000, 3000, 5000]}),
    (["q=4096"], {"q": 4096}, {}),
])
def test_size_ranges(items, single, ranged):
    assert parse_size_ranges(items) == (single, ranged)


@pytest.mark.parametrize("item", ["q=4096..1024", "q=0..8", "q=1..", "q=1,,2"])
def test_a_malformed_range_is_a_usage_error(item):
    with pytest.raises(NapkinError):
        parse_size_ranges([item])


def test_several_gpus_side_by_side_are_their_own_analyses():
    """The comparison's rows are the single-GPU analyses, not another computation."""
    doc = json.loads(invoke("analyze", "attention", "--gpu", "h100", "--gpu", "a100", "--gpu", "h200", "--json"))
    assert [a["gpu"]["name"] for a in doc["analyses"]] == ["h100-sxm5", "a100", "h200"] and doc["varied"] == []
    for a in doc["analyses"]:
        alone = json.loads(invoke("analyze", "attention", "--gpu", a["gpu"]["name"], "--json"))
        assert a == alone
    table = invoke("analyze", "attention", "--gpu", "h100", "--gpu", "a100")
    rows = {line.split()[0]: line for line in table.splitlines() if line.split() and line.split()[0] in
            ("h100-sxm5", "a100")}
    assert set(rows) == {"h100-sxm5", "a100"}
    assert "calibrated" in rows["h100-sxm5"] and "idealised" in rows["a100"]


def test_a_size_range_gives_one_row_and_point_per_size(tmp_path):
    plot = tmp_path / "sizes.png"
    result = runner.invoke(app, ["analyze", "causal_attention", "--gpu", "h100", "--set", "q=1024..8192",
                                 "--json", "--plot", str(plot)])
    assert result.exit_code == 0, result.output
    doc = json.loads(result.stdout)
    sizes = [next(s["value"] for s in a["sizes"] if s["axis"] == "q") for a in doc["analyses"]]
    assert sizes == [1024, 2048, 4096, 8192] and doc["varied"] == ["q"]
    times = [a["expected"]["time_s"] for a in doc["analyses"]]
    assert times == sorted(times)                        # more queries take longer
    assert plot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_the_size_plot_draws_each_gpu_and_bound():
    from analyzer.model.result import Comparison
    from analyzer.plot.sizes import figure
    doc = json.loads(invoke("analyze", "attention", "--gpu", "h100", "--gpu", "a100", "--set", "q=2048..8192",
                            "--json"))
    fig = figure(Comparison.model_validate(doc))
    labels = fig.axes[0].get_legend().get_texts()
    assert {"h100-sxm5", "a100", "idealised bound"} <= {t.get_text() for t in labels}
    assert any(t.get_text().endswith("-bound") and t.get_text() != "idealised bound" for t in labels)


@pytest.mark.parametrize("args, fragment", [
    (["analyze", "attention", "--plot", "x.png"], "--plot: --plot draws a size range"),
    (["analyze", "attention", "--gpu", "h100", "--gpu", "a100", "--latex"], "--latex prints one analysis"),
    (["analyze", "attention", "--set", "q=2..1048576", "--gpu", "h100", "--gpu", "h200", "--gpu", "a100",
      "--gpu", "t4"], "at most 64 analyses"),
])
def test_comparison_misuse_exits_2(tmp_path, args, fragment):
    proc = subprocess.run([sys.executable, "-m", "analyzer", *args], cwd=tmp_path, capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 2 and fragment in proc.stderr and len(proc.stderr.splitlines()) == 1, proc.stderr
    assert not list(tmp_path.iterdir())              # no partial output file


def test_strict_exits_3_so_a_script_tells_it_from_a_usage_error(tmp_path):
    run = [sys.executable, "-m", "analyzer", "configure", "attention", "--config", "fa3_fp16_intra"]
    assert subprocess.run([*run, "--strict"], cwd=tmp_path, capture_output=True, timeout=120).returncode == 3
    assert subprocess.run([*run, "--strict", "--overlap", "over"], cwd=tmp_path, capture_output=True,
                          timeout=120).returncode == 2


def test_sweep_json_has_a_schema_and_a_version():
    """regression: sweep --json was a bare list, with no schema and no version."""
    from analyzer.config.sweep_result import SweepReport
    text = invoke("sweep", "attention", "--gpu", "h100", "--json")
    doc = SweepReport.model_validate_json(text)             # extra or missing keys fail here
    schema = json.loads(invoke("schema", "sweep"))
    assert schema["$schema"].endswith("2020-12/schema") and "schema_version" in schema["properties"]
    assert set(json.loads(text)) == set(schema["properties"])
    assert doc.schema_version == 1 and doc.sweeps[0].rows and doc.sweeps[0].tie == 0.05


def test_report_refuses_a_file_that_is_not_html(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "analyzer", "report", "attention", "-o", "report.txt"],
                          cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2 and "writes one HTML page" in proc.stderr and not list(tmp_path.iterdir())


def test_readme_calibrate_commands_run_from_any_folder(tmp_path):
    """regression: `napkin calibrate bench/results/sweep_h200.json ...` worked only inside a checkout, and
    its error's hint repeated the path that failed.

    From an empty folder, the napkin that is installed runs README's Hopper command; for the portable
    one (a minute of fitting, which tests/unit/test_calibrate.py runs on the same files in-process), its
    interpreter loads each recording the command names as the command does."""
    napkin = str(Path(sys.executable).with_name("napkin"))
    proc = subprocess.run([napkin, "calibrate", "bench/results/hopper_sweep_h100.json", "--gpu", "h100",
                           "--kernel", "hopper", "-o", "mine.yaml"], cwd=tmp_path, capture_output=True,
                          text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert (tmp_path / "mine.yaml").read_text().startswith("#")
    # the portable kernels' command: its compile recording and the other GPU's recording are shipped too
    # (napkin calibrate bench/results/sweep_h200.json --gpu h200 -o my-h200.yaml
    #  --registers bench/results/compiled_h200.json --across bench/results/sweep_h100.json:h100)
    loads = ("from analyzer.calibrate.record import load_recording\n"
             "from analyzer.calibrate.registers import load_compiled\n"
             "for r in (load_recording('bench/results/sweep_h200.json'), load_compiled('bench/results/compiled_h200.json'),\n"
             "          load_recording('bench/results/sweep_h100.json')):\n"
             "    print(type(r).__name__)\n")
    proc = subprocess.run([sys.executable, "-c", loads], cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0 and proc.stdout.split() == ["Recording", "CompiledRecording", "Recording"], proc.stderr
    missing = subprocess.run([napkin, "calibrate", "elsewhere/sweep.json"], cwd=tmp_path, capture_output=True,
                             text=True, timeout=120)
    hint = missing.stderr[missing.stderr.index("(hint:"):]
    assert missing.returncode == 1 and "elsewhere/sweep.json" not in hint and "bench/sweep_h200.py" in hint
