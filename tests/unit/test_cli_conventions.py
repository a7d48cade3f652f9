"""What a GPU engineer expects of a command line: choices in the help, shell completion, the command
line's own mistakes exiting 2, and comparisons across GPUs and sizes (napkin analyze with several
--gpu or a size range)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import typer
import yaml
from typer.testing import CliRunner

from analyzer.cli import app, main
from analyzer.cli.app import (
    CHECK_FAILED,
    DONE,
    EXIT_CODES,
    INTERRUPTED,
    OUTPUT_CLOSED,
    REFUSED,
    USAGE,
    parse_size_ranges,
)
from analyzer.common.errors import NapkinError
from tests.run_napkin import in_process

runner = CliRunner()


def invoke(*args: str) -> str:
    result = runner.invoke(app, list(args), env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    return result.output


@pytest.mark.parametrize("command, shown", [
    (["configure"], ["--dtype [fp16|bf16|fp8|fp32]".replace("[", "<").replace("]", ">"),
                     "<fragment|staged>", "<inter|intra>"]),
    (["kernel"], ["<hopper|hopper-contraction|triton|cuda>", "<fp16|bf16|fp8>"]),
    (["sweep"], ["<hopper|triton>"]),
    (["schema"], ["<diagram|profile|report|comparison|configuration|sweep|measurement>"]),
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


# every command that takes --set, with the diagram it runs on; {out} is a file it would write
SET_COMMANDS = {
    "analyze": ["analyze", "attention"],
    "configure": ["configure", "attention"],
    "sweep": ["sweep", "attention"],
    "kernel": ["kernel", "attention", "-o", "{out}.py"],
    "plot transfers": ["plot", "transfers", "attention", "-o", "{out}.png"],
    "plot roofline": ["plot", "roofline", "attention", "-o", "{out}.png"],
    "plot schedule": ["plot", "schedule", "attention", "-o", "{out}.png"],
    "report": ["report", "attention", "-o", "{out}.html"],
}


@pytest.mark.parametrize("item, code", [
    # not a size: the command line is wrong, whatever the diagram (exit 2)
    ("q=-5", 2), ("q=0", 2), ("q=1.5", 2), ("q=abc", 2), ("q=", 2), ("q=1099511627777", 2), ("g_q=0", 2),
    ("q=0..256", 2), ("q=0,256", 2), ("q=256..2199023255552", 2),
    # a size the diagram does not have: the input refuses it, as an unknown GPU (exit 1)
    ("zz=5", 1), ("zz=1..4", None),
], ids=str)
@pytest.mark.parametrize("command", sorted(SET_COMMANDS))
def test_every_set_form_exits_alike_in_every_command(tmp_path, monkeypatch, capsys, command, item, code):
    """regression: --set q=-5 exited 2 (a usage error) and q=0 exited 1 (a refused input), and a list
    q=0,256 exited 1 in napkin analyze but 2 elsewhere: each is a value that is no size. A range or a
    list is napkin analyze's alone; elsewhere it is a malformed --set (exit 2)."""
    if code is None:
        code = 1 if command == "analyze" else 2
    args = [a.format(out=tmp_path / "out") for a in SET_COMMANDS[command]]
    monkeypatch.setattr(sys, "argv", ["napkin", *args, "--set", item])
    monkeypatch.delenv("NAPKIN_DEBUG", raising=False)
    with pytest.raises(SystemExit) as info:
        main()
    err = capsys.readouterr().err
    assert info.value.code == code and err.count("\n") == 1 and err.startswith("error: --set"), err
    assert item.partition("=")[0] in err and not list(tmp_path.iterdir()), err


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


@pytest.mark.parametrize("gpus", [["h100", "h100-sxm5"], ["h100", "h100"], ["h100-sxm5", "h100-sxm"]])
def test_one_gpu_named_twice_is_compared_once_with_a_note(gpus):
    """An alias and the profile it names (or one name twice) are one GPU: napkin analyze keeps the first
    and says on stderr which it dropped, as napkin plot and napkin report do through the same
    cli.app.compared_gpus (regression: --gpu h100 --gpu h100-sxm5 compared the H100 with itself)."""
    args = [w for g in gpus for w in ("--gpu", g)]
    result = runner.invoke(app, ["analyze", "attention", *args, "--json"])
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout) == json.loads(invoke("analyze", "attention", "--gpu", gpus[0], "--json"))
    assert result.stderr.strip() == f"note: --gpu {gpus[1]} names {gpus[0]}'s profile again " \
                                    "(hardware/h100-sxm5.yaml): it is compared once"


def test_a_distinct_gpu_list_keeps_its_order_and_an_unknown_name_is_refused():
    from analyzer.cli.app import distinct_gpus
    names, notes = distinct_gpus(["a100", "h100", "h200", "h100-sxm", "a100"])
    assert names == ["a100", "h100", "h200"] and len(notes) == 2
    assert distinct_gpus(None) == (["h100"], [])
    with pytest.raises(NapkinError, match="no-such-gpu"):
        distinct_gpus(["h100", "no-such-gpu"])


@pytest.mark.parametrize("ranged", ["g_q=64..256", "s_x=32,64"])
def test_a_swept_tile_is_a_column_of_the_comparison(ranged):
    """regression: --set g_q=64..256 printed three rows without a g_q column."""
    name, _ = ranged.split("=")
    doc = json.loads(invoke("analyze", "attention", "--gpu", "h100", "--set", ranged, "--json"))
    values = [a["kernels"][0]["levels"][-1]["chosen"][name] for a in doc["analyses"]]
    table = invoke("analyze", "attention", "--gpu", "h100", "--set", ranged)
    header = next(line for line in table.splitlines() if line.split()[:1] == ["GPU"])
    assert [c.strip() for c in header.split("┃")][:2] == ["GPU", name]
    rows = [[c.strip() for c in line.split("│")] for line in table.splitlines() if line.split()[:1] == ["h100-sxm5"]]
    assert [int(r[1]) for r in rows] == values and len(set(values)) == len(values) > 1


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
    labels = {t.get_text() for t in fig.axes[0].get_legend().get_texts()}
    assert {"h100-sxm5: expected, calibrated model", "a100: expected, idealised model (not calibrated)",
            "napkin analyze: idealised bound (datasheet rates)"} <= labels
    assert any(t.endswith("-bound") and "idealised" not in t for t in labels)


@pytest.mark.parametrize("args, fragment", [
    (["analyze", "attention", "--plot", "x.png"], "--plot: --plot draws a size range"),
    (["analyze", "attention", "--gpu", "h100", "--gpu", "a100", "--latex"], "--latex prints one analysis"),
    (["analyze", "attention", "--set", "q=2..1048576", "--gpu", "h100", "--gpu", "h200", "--gpu", "a100",
      "--gpu", "t4"], "at most 64 analyses"),
])
def test_comparison_misuse_exits_2(tmp_path, args, fragment):
    proc = in_process(tmp_path, *args)
    assert proc.returncode == 2 and fragment in proc.stderr and len(proc.stderr.splitlines()) == 1, proc.stderr
    assert not list(tmp_path.iterdir())              # no partial output file


def test_strict_exits_3_so_a_script_tells_it_from_a_usage_error(tmp_path):
    run = ["configure", "attention", "--config", "fa3_fp16_intra"]
    assert in_process(tmp_path, *run, "--strict").returncode == 3
    assert in_process(tmp_path, *run, "--strict", "--overlap", "over").returncode == 2


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
    proc = in_process(tmp_path, "report", "attention", "-o", "report.txt")
    assert proc.returncode == 2 and "writes one HTML page" in proc.stderr and not list(tmp_path.iterdir())


@pytest.mark.slow(seconds=5)
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


def _shipped_gpu_names() -> set[str]:
    """Every shipped profile's name and alias, read here from hardware/*.yaml."""
    names = set()
    for path in (Path(__file__).resolve().parents[2] / "hardware").glob("*.yaml"):
        names |= {path.stem, *yaml.safe_load(path.read_text()).get("aliases", [])}
    return names


def _commands_taking_a_gpu(command, path=()):
    """(words, param) of every command whose option or argument takes a GPU name."""
    for name, sub in getattr(command, "commands", {}).items():
        yield from _commands_taking_a_gpu(sub, (*path, name))
    for param in command.params:
        if "--gpu" in param.opts or param.metavar == "GPU":
            yield path, param


def test_every_gpu_option_lists_the_shipped_profiles_and_aliases():
    """regression: no command's help listed the GPU names; they come from hardware/ when the help is
    shown (napkin hardware list's profiles and their aliases)."""
    takers = list(_commands_taking_a_gpu(typer.main.get_command(app)))
    assert {words[0] for words, _ in takers} >= {"analyze", "configure", "sweep", "kernel", "plot", "report",
                                                 "calibrate", "hardware"}
    for words, _ in takers:
        text = re.sub(r"-\n\s+", "-", invoke(*words, "--help"))             # click wraps at hyphens too
        shown = " ".join(text.split()).split("Shipped: ")
        assert len(shown) == 2, f"napkin {' '.join(words)} --help: {text}"
        names = set(re.split(r"[,() ]+", shown[1][:shown[1].index(".")])) - {""}
        assert names == _shipped_gpu_names(), f"napkin {' '.join(words)} --help"


def test_help_reads_the_gpu_names_without_the_model():
    """The names come from the profiles' files, not the profile schema: a command's --help imports no
    sympy (napkin --help and a usage error stay fast, analyzer/cli/__init__.py)."""
    proc = subprocess.run([sys.executable, "-X", "importtime", "-m", "analyzer", "kernel", "--help"],
                          capture_output=True, text=True, timeout=120, check=True)
    assert "h100-sxm5 (h100, h100-sxm)" in " ".join(re.sub(r"-\n\s+", "-", proc.stdout).split())
    imported = {line.rsplit("|", 1)[-1].strip() for line in proc.stderr.splitlines() if "|" in line}
    assert not {"sympy", "networkx", "matplotlib"} & imported


# -- the exit codes the docs state are the command's ----------------------------------------------------

ROOT = Path(__file__).resolve().parents[2]
EXIT = re.compile(r"\bexit(?:s|ing)?(?: with)?(?: code)? (\d+)\b", re.IGNORECASE)
# what a clause must be about for its "exits N" to be a given code
ABOUT = {"--strict": CHECK_FAILED, "command line": USAGE}


def _clauses(text: str):
    """A markdown file's clauses: each line of a code block or table, and the prose's sentences and
    semicolon-separated parts, a paragraph's lines joined."""
    fenced = False
    paragraph: list[str] = []
    for line in [*text.splitlines(), ""]:
        if line.startswith("```"):
            fenced = not fenced
            continue
        if fenced or line.startswith("|"):
            yield line
        elif line.strip():
            paragraph.append(line.strip())
            continue
        yield from re.split(r"(?<=[.;])\s+", " ".join(paragraph))
        paragraph = []


def test_the_exit_codes_table_is_the_commands():
    """docs/cli.md's table lists every exit code analyzer/cli/app.py has, each with what it means."""
    text = (ROOT / "docs" / "cli.md").read_text()
    errors = text[text.index("## Errors"):]
    rows = dict(re.findall(r"^\| (\d+) \| (.+) \|$", errors[:errors.index("\n\n", errors.index("| code |"))],
                           re.MULTILINE))
    assert [int(code) for code in rows] == list(EXIT_CODES)
    meaning = {DONE: "done", REFUSED: "refused", USAGE: "command line",
               CHECK_FAILED: "--strict", INTERRUPTED: "SIGINT",
               OUTPUT_CLOSED: "SIGPIPE"}
    for code, words in meaning.items():
        assert words in rows[str(code)], (code, rows[str(code)])


def test_every_exit_code_the_docs_state_is_the_commands():
    """regression: docs/configure.md said `--strict` exits 1 (it exits 3, CHECK_FAILED) and
    docs/diagram-format.md that the command line's own errors exit 1 (2, USAGE). Every "exit(s) (with)
    (code) N" in docs/ and README is a code napkin has, the right one where the clause is about
    --strict or the command line; each list of the exit codes lists them all."""
    stated = 0
    for path in [*sorted((ROOT / "docs").glob("*.md")), ROOT / "README.md"]:
        for clause in _clauses(path.read_text()):
            for number in EXIT.findall(clause):
                stated += 1
                assert int(number) in EXIT_CODES, f"{path.name}: {clause}"
                for topic, code in ABOUT.items():
                    if topic in clause:
                        assert int(number) == code, f"{path.name}: {clause}"
            for listed in re.findall(r"exit codes (\d+(?:/\d+)+)", clause):
                assert tuple(int(n) for n in listed.split("/")) == EXIT_CODES, f"{path.name}: {clause}"
            if clause.startswith("Exit codes: "):
                items = dict(re.findall(r"(?:: |, )(\d+) ([^,]+)", clause))
                assert tuple(int(n) for n in items) == EXIT_CODES, f"{path.name}: {clause}"
                for topic, code in ABOUT.items():
                    assert [int(n) for n, words in items.items() if topic in words] == [code], clause
    assert stated >= 5          # the phrases this test reads are there to read
