"""docs/diagram-format.md says what napkin does today: its tables of keys are the schema's fields, its
table of primitives is the registry, the files it shows are the shipped files, and every command output
and error line it shows is what napkin prints now.

Outputs are marked in the page by an HTML comment on the line before their block (markdown shows
nothing of it): `<!-- output: napkin ARGS -->` for a whole output, `<!-- lines of: napkin ARGS -->` for
chosen lines of one (`...` stands for those left out); a `console` block's `$ napkin ARGS` lines are
followed by their output. Every `error:` line of a `text` block is one of ERRORS below, run on the
broken copy of a shipped diagram the page describes beside it.

After a change to what napkin prints, `NAPKIN_REGEN_DOCS=1 python -m pytest -p no:xdist
tests/unit/test_diagram_format_doc.py` writes the new outputs and error lines into the page. A chosen line
no longer printed is replaced by the nearest line that is, and the test fails naming it: check those,
and read the diff (the page's prose quotes numbers of the outputs).
"""

from __future__ import annotations

import difflib
import os
import re
import shlex
import sys
from dataclasses import dataclass, field
from functools import cache
from itertools import pairwise
from pathlib import Path

import pytest
import typer.main

from analyzer.cli import main
from analyzer.diagram import schema
from analyzer.diagram.primitives import REGISTRY

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "diagram-format.md"
REGEN = os.environ.get("NAPKIN_REGEN_DOCS") == "1"


# -- the page ------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Block:
    """A fenced block: its language, its lines (without the fences), where they start in the page (index
    of the first line), and the comment that marks it (`output: ...`, `lines of: ...`), if any."""

    language: str
    lines: list[str]
    start: int
    mark: str | None


def blocks(text: str) -> list[Block]:
    lines = text.split("\n")
    found, i = [], 0
    while i < len(lines):
        if lines[i].startswith("```") and lines[i] != "```":
            end = lines.index("```", i + 1)
            mark = re.fullmatch(r"<!-- (.*) -->", lines[i - 1]) if i else None
            found.append(Block(lines[i][3:], lines[i + 1:end], i + 1, mark[1] if mark else None))
            i = end
        i += 1
    return found


def section(text: str, heading: str) -> str:
    """The text of the section whose heading starts with `heading`, up to the next heading."""
    start = text.index(f"\n{heading}")
    following = re.search(r"\n#{2,3} ", text[start + 1:])
    return text[start:start + 1 + following.start()] if following else text[start:]


def keys_of_table(text: str) -> set[str]:
    """The keys of the first `| key | type | default | meaning |` table in `text`: the names in
    backticks of its first column."""
    rows = text[text.index("| key | type | default | meaning |"):].split("\n")[2:]
    keys = set()
    for row in rows:
        if not row.startswith("|"):
            break
        keys |= set(re.findall(r"`([a-z_]+)`", row.split("|")[1]))
    return keys


def rewrite(replaced: dict[int, list[str]], lengths: dict[int, int]) -> None:
    """Write the page with the lines from index i (lengths[i] of them) replaced by replaced[i]."""
    lines = DOC.read_text().split("\n")
    for i in sorted(replaced, reverse=True):
        lines[i:i + lengths[i]] = replaced[i]
    DOC.write_text("\n".join(lines))


# -- running napkin ------------------------------------------------------------------------------------

def run(args: list[str], folder: Path, monkeypatch, capsys) -> list[str]:
    """What `napkin ARGS` prints in `folder`, stdout then stderr, as lines without trailing spaces, as a
    pipe gets them (whole lines, no terminal width)."""
    monkeypatch.chdir(folder)
    monkeypatch.delenv("COLUMNS", raising=False)
    monkeypatch.delenv("NAPKIN_DEBUG", raising=False)
    monkeypatch.setattr(sys, "argv", ["napkin", *args])
    try:
        main()
    except SystemExit:
        pass
    out = capsys.readouterr()
    return [line.rstrip() for line in (out.out + out.err).rstrip("\n").split("\n")]


def edited(base: str, *edits: tuple[str, str]) -> str:
    """A copy of the shipped diagram `base` with each (old, new) replaced; old occurs once."""
    text = (ROOT / "diagrams" / f"{base}.yaml").read_text()
    for old, new in edits:
        assert text.count(old) == 1, f"{base}.yaml: {old!r} occurs {text.count(old)} times"
        text = text.replace(old, new)
    return text


@dataclass(frozen=True)
class Case:
    """napkin's arguments, run in a folder holding `files` (name -> text)."""

    args: str
    files: dict[str, str] = field(default_factory=dict)


def check_file(name: str, base: str, *edits: tuple[str, str]) -> Case:
    return Case(f"diagrams check {name}", {name: edited(base, *edits)})


def analyze_file(name: str, base: str, *edits: tuple[str, str], options: str = "") -> Case:
    return Case(f"analyze {name} --gpu h100 {options}".strip(), {name: edited(base, *edits)})


ATTENTION_SMEM = "smem: {group: {q: g_q}, stream: {x: s_x}}"
SOFTMAX_SMEM = "smem: {group: {q: g_q2}}"
MINIMAL = """\
name: minimal
axes:
  a: {default: 1024}
  b: {default: 1024}
inputs:
  A: [a, b]
ops:
  - {name: B, primitive: exp, inputs: [A], output: [a, b]}
outputs: [B]
"""
CHAIN = """\
name: chain
axes:
  a: {default: 1024}
inputs:
  X: [a]
ops:
  - {name: A, primitive: exp, inputs: [X], output: [a]}
  - {name: B, primitive: relu, inputs: [A], output: [a]}
  - {name: C, primitive: add, inputs: [A, B], output: [a]}
outputs: [C]
"""

# the broken copies of section 16 (and the other error lines of the page), in its order
ERRORS = [
    Case("analyze attention --cluster x"),
    Case("analyze"),
    check_file("unknown_axis.yaml", "attention", ("K: [x, d]", "K: [k, d]")),
    check_file("wrong_output.yaml", "attention", ("(Table 4)\n    output: [q, d]", "(Table 4)\n    output: [q, x]")),
    check_file("group_reduced.yaml", "attention", (ATTENTION_SMEM, "smem: {group: {q: g_q, d: g_d}, stream: {x: s_x}}")),
    check_file("group_x.yaml", "attention", (ATTENTION_SMEM, "smem: {group: {q: g_q, x: g_x}}")),
    check_file("softmax_stream.yaml", "attention_unfused", (SOFTMAX_SMEM, "smem: {group: {q: g_q2}, stream: {x: s_x2}}")),
    check_file("stream_d.yaml", "attention", (ATTENTION_SMEM, "smem: {group: {q: g_q}, stream: {d: s_d}}")),
    check_file("stream_q.yaml", "attention", (ATTENTION_SMEM, "smem: {stream: {q: s_q}}")),
    check_file("size_call.yaml", "attention", ("  x: {default: 16384, doc: key and value positions}",
                                               '  x: {size: "max(q, 1024)"}')),
    check_file("scale_call.yaml", "attention", ("scale: d**-0.5", "scale: sqrt(d)")),
    check_file("bad_exponent.yaml", "attention", ("scale: d**-0.5", "scale: d**q")),
    check_file("bigexp.yaml", "attention", ("scale: d**-0.5", "scale: d**32")),
    check_file("derived_default.yaml", "attention", ("  x: {default: 16384, doc: key and value positions}",
                                                     "  x: {size: q, default: 4096}")),
    check_file("sizes2.yaml", "mha", ("  d: {default: 128, doc: head dimension}",
                                      "  d: {default: 128, doc: head dimension}\n  e: {size: h*d}\n  k: {size: e}")),
    check_file("big_size.yaml", "attention", ("  d: {default: 128, doc: head dimension}", "  d: {size: 2199023255552}")),
    check_file("big_default.yaml", "attention", ("q: {default: 16384,", "q: {default: 2199023255552,")),
    check_file("sizes3.yaml", "attention", ("  d: {default: 128, doc: head dimension}",
                                            "  d: {default: 128, doc: head dimension}\n  k: {size: 0.5}")),
    check_file("frac_default.yaml", "attention", ("d: {default: 128,", "d: {default: 128.5,")),
    check_file("typo_key.yaml", "attention", ("    over: d\n", "    ovr: d\n")),
    check_file("unknown_prim.yaml", "attention", ("primitive: softmax_dot ", "primitive: softmax_dott ")),
    check_file("no_over.yaml", "attention", ("    over: d\n", "")),
    check_file("relu_scale.yaml", "attention_unfused", ("primitive: softmax\n", "primitive: exp\n")),
    check_file("mask_noquery.yaml", "causal_attention", ("    query: q\n", "")),
    check_file("mask_same.yaml", "causal_attention", ("    key: x\n", "    key: q\n")),
    check_file("weave_bad.yaml", "attention", ("    over: d\n", "    over: d\n    weave: [q]\n")),
    check_file("unknown_array.yaml", "attention_unfused", ("inputs: [P, V]", "inputs: [Pr, V]")),
    check_file("unused_in.yaml", "attention", ("  V: [x, d]\n", "  V: [x, d]\n  W: [q, d]\n")),
    check_file("not_output.yaml", "attention_unfused", ("outputs: [O]", "outputs: [P]")),
    Case("diagrams check cyc.yaml", {"cyc.yaml": CHAIN.replace("inputs: [X]", "inputs: [B]")}),
    Case("diagrams check conc.yaml", {"conc.yaml": CHAIN.replace(
        "  - {name: A, primitive: exp, inputs: [X], output: [a]}\n  - {name: B",
        "  - concat:\n    - {name: A, primitive: exp, inputs: [X], output: [a]}\n    - {name: B")}),
    check_file("missing_kernel_op.yaml", "attention_unfused", ("ops: [O]", "ops: [S]")),
    Case("diagrams check nonconvex.yaml", {"nonconvex.yaml": CHAIN + """\
kernels:
  - {name: k1, ops: [A, C]}
  - {name: k2, ops: [B]}
"""}),
    check_file("sym_reuse.yaml", "attention_unfused", ("g_q3", "g_q1")),
    check_file("sym_axis.yaml", "attention_unfused", (SOFTMAX_SMEM, "smem: {group: {q: d}}")),
    check_file("two_streams.yaml", "attention", (ATTENTION_SMEM, "smem: {group: {q: g_q}, stream: {x: s_x, d: s_d}}")),
    check_file("group_stream_same.yaml", "attention", (ATTENTION_SMEM, "smem: {group: {q: g_q, d: g_d}, stream: {d: s_d}}")),
    check_file("top_level.yaml", "attention_unfused", (SOFTMAX_SMEM, "gmem: {group: {q: h_q2}}\n      " + SOFTMAX_SMEM)),
    # what napkin analyze alone finds
    analyze_file("nodefault.yaml", "attention", ("q: {default: 16384, doc", "q: {doc")),
    analyze_file("badlevel.yaml", "attention", ("levels: [gmem, smem]", "levels: [gmem, shared]"),
                 (ATTENTION_SMEM, ATTENTION_SMEM.replace("smem", "shared"))),
    Case("analyze causal_attention --gpu h100 --set x=4096"),
    Case("analyze attention --gpu h100 --set q=1099511627777"),
    analyze_file("sizes4.yaml", "mha", ("  h: {default: 16, doc: heads}", "  h: {default: 48, doc: heads}\n  k: {size: h/3}"),
                 options="--set h=16"),
    Case("analyze attention --gpu h100 --set g_q=3"),
    Case("analyze minimal.yaml --gpu h100", {"minimal.yaml": MINIMAL}),
    # sections 9 and 15
    analyze_file("m3b.yaml", "matmul", ("levels: [gmem, smem]", "levels: [gmem, l2, smem]")),
    check_file("mlp_group_i.yaml", "mlp2", ("smem: {group: {n: g_n}, stream: {f: s_f}}",
                                            "smem: {group: {n: g_n, i: g_i}, stream: {f: s_f}}")),
    check_file("sig_noscale.yaml", "sigmoid_attention", ("    scale: d**-0.5\n", "")),
    check_file("sig_over.yaml", "sigmoid_attention", ("    inputs: [Ss]\n", "    inputs: [Ss]\n    over: x\n")),
]

# the copies of shipped diagrams whose outputs the page shows, beside the broken ones
CONCAT = edited("attention", ("  V: [x, d]\n", "  V: [x, d]\n  B: [q, x]\n"), ("""\
ops:
  - name: S
    primitive: dot            # E: scores S = Q K^T, contracting d; weaved by q and x
    inputs: [Q, K]
    over: d
    output: [q, x]
  - name: O
    primitive: softmax_dot    # F: softmax over x, contracted with V over x; weaved by q and d
    inputs: [S, V]
""", """\
ops:
  - name: O                   # listed first, reads T: napkin moves it after T
    primitive: softmax_dot
    inputs: [T, V]
"""), ("""\
outputs: [O]""", """\
  - concat:
    - {name: S, primitive: dot, inputs: [Q, K], over: d, output: [q, x]}
    - {name: Bs, primitive: scale, inputs: [B], scale: 0.5, output: [q, x]}
  - {name: T, primitive: add, inputs: [S, Bs], output: [q, x]}
outputs: [O]"""), ("ops: [S, O]", "ops: [S, Bs, T, O]"))
SIGMOID_SOFTMAX = edited("sigmoid_attention", ("""\
  - name: Ss
    primitive: scale          # S * d^-0.5, item by item
    inputs: [S]
    scale: d**-0.5
    output: [q, x]
  - name: P
    primitive: sigmoid        # 1/(1+exp(-v)), item by item: keeps x
    inputs: [Ss]
    output: [q, x]
""", """\
  - name: P
    primitive: softmax
    inputs: [S]
    over: x
    scale: d**-0.5
    output: [q, x]
"""), ("ops: [S, Ss, P, O]", "ops: [S, P, O]"))
FILES = {"concat.yaml": CONCAT, "sigmoid_softmax.yaml": SIGMOID_SOFTMAX}


@pytest.fixture
def napkin(tmp_path, monkeypatch, capsys):
    """napkin ARGS (a string) -> what it prints, in a folder holding FILES and the cases' files. Typer
    builds its click command once here rather than on every call (a tenth of a second each)."""
    monkeypatch.setattr(typer.main, "get_command", cache(typer.main.get_command))
    (tmp_path / "diagrams").symlink_to(ROOT / "diagrams")        # the page's commands run in a checkout
    for name, text in FILES.items():
        (tmp_path / name).write_text(text)

    def napkin_(args: str, files: dict[str, str] | None = None) -> list[str]:
        for name, text in (files or {}).items():
            (tmp_path / name).write_text(text)
        return run(shlex.split(args), tmp_path, monkeypatch, capsys)
    return napkin_


# -- what the page says of the format ------------------------------------------------------------------

@pytest.mark.parametrize("heading, model, after", [
    ("## 3. Top-level keys", schema.DiagramSpec, ""),
    ("## 4. Axes", schema.AxisSpec, ""),
    ("## 5. Inputs", schema.ArraySpec, ""),
    ("### 6.1 A function entry", schema.OpSpec, ""),
    ("## 10. Kernels and partitions", schema.KernelSpec, ""),
    ("## 10. Kernels and partitions", schema.PartitionSpec, "A partition at one level:"),
], ids=lambda v: v if isinstance(v, str) and v.startswith("#") else None)
def test_key_tables_are_the_schema(heading, model, after):
    """regression: the top-level table lacked `configurations` (a key since the Section 5 work)."""
    text = section(DOC.read_text(), heading)
    assert keys_of_table(text[text.index(after):]) == set(model.model_fields)


def test_primitive_table_is_the_registry():
    text = section(DOC.read_text(), "## 7. Primitives")
    rows = text[text.index("| primitive | arity |"):].split("\n")[2:]
    shown = [re.fullmatch(r"\| `(\w+)` \| (\d)(?: or (\d) \(the last a sink\))? \|.*", row)
             for row in rows if row.startswith("|")]
    assert {m[1]: tuple(int(n) for n in m.groups()[1:] if n) for m in shown if m} == \
        {name: p.arities for name, p in REGISTRY.items()}


def test_shown_diagram_files_are_the_shipped_files():
    """A file shown whole is the shipped file; one whose last line is `  ...` is its first lines."""
    shown = [b for b in blocks(DOC.read_text()) if b.language == "yaml" and b.lines[0].startswith("# yaml-language")]
    assert len(shown) >= 4
    for b in shown:
        name = next(line.removeprefix("name: ") for line in b.lines if line.startswith("name: "))
        lines = (ROOT / "diagrams" / f"{name}.yaml").read_text().split("\n")
        if b.lines[-1].strip() == "...":
            assert b.lines[:-1] == lines[:len(b.lines) - 1], name
        else:
            assert b.lines == lines[:-1] and lines[-1] == "", name


# -- what the page shows napkin print ------------------------------------------------------------------

def test_every_mark_is_one_the_page_test_reads():
    """A misspelt mark would leave its block unchecked."""
    marks = [b.mark for b in blocks(DOC.read_text()) if b.mark is not None]
    assert len(marks) >= 10
    assert all(re.fullmatch(r"(output|lines of): napkin \S.*", mark) for mark in marks), marks


def key(line: str) -> str:
    """What an error line is about: its file, or the option or argument it names."""
    return line.removeprefix("error: ").split(": ")[0].split(" (hint")[0].lower()


def test_error_lines_are_what_napkin_prints(napkin):
    """Every `error:` line of the page's text blocks is what napkin prints on the case it describes
    (regression: section 16 said a misspelt op key lists the allowed keys without `offset`, a missing
    argument was `'diagram'`, and that usage errors exit 1)."""
    page = DOC.read_text()
    shown = {}
    for b in blocks(page):
        if b.language == "text" and b.mark is None:
            for i, line in enumerate(b.lines):
                if line.startswith("error: "):
                    assert key(line) not in shown, f"two lines on {key(line)}"
                    shown[key(line)] = (b.start + i, line)
    printed = {}
    for case in ERRORS:
        lines = napkin(case.args, case.files)
        assert len(lines) == 1 and lines[0].startswith("error: "), (case.args, lines)
        printed[key(lines[0])] = lines[0]
    assert set(shown) == set(printed), "cases the page shows without a case here, or the other way round"
    stale = {k: line for k, line in printed.items() if shown[k][1] != line}
    if REGEN:
        rewrite({shown[k][0]: [line] for k, line in stale.items()}, {shown[k][0]: 1 for k in stale})
        return
    assert not stale, "\n".join(stale.values())


@pytest.mark.slow
def test_shown_outputs_are_what_napkin_prints(napkin):
    """Each output the page shows, whole or in chosen lines, is what the command prints today
    (regression: the analyze outputs were those of an older napkin: no expected time, `pipeline`
    where the table now says `term`, and a verdict line since reworded)."""
    page = DOC.read_text()
    replaced, lengths, stale, missing = {}, {}, [], []
    printed: dict[str, list[str]] = {}      # a command the page shows twice runs once

    def output(command: str) -> list[str]:
        if command not in printed:
            printed[command] = napkin(command)
        return printed[command]

    def compare(command: str, start: int, shown: list[str]) -> None:
        got = output(command)
        if got != shown:
            replaced[start], lengths[start] = got, len(shown)
            stale.append(f"napkin {command}")

    for b in blocks(page):
        if b.mark and b.mark.startswith("output: napkin "):
            compare(b.mark.removeprefix("output: napkin "), b.start, b.lines)
        elif b.mark and b.mark.startswith("lines of: napkin "):
            command = b.mark.removeprefix("lines of: napkin ")
            got = output(command)
            remaining = iter(got)
            for i, line in enumerate(b.lines):
                if line != "..." and not any(line == g for g in remaining):
                    near = difflib.get_close_matches(line, got, n=1, cutoff=0.3)
                    missing.append(f"napkin {command}: {line!r} (nearest printed: {near[0] if near else '-'!r})")
                    if near:                 # NAPKIN_REGEN_DOCS: the nearest line, for a reader to judge
                        replaced[b.start + i], lengths[b.start + i] = near, 1
                    remaining = iter(got)
        elif b.language == "console":
            commands = [i for i, line in enumerate(b.lines) if line.startswith("$ napkin ")] + [len(b.lines)]
            for i, j in pairwise(commands):
                if j > i + 1:            # a command shown with its output
                    compare(re.sub(r"\s+#.*", "", b.lines[i].removeprefix("$ napkin ")), b.start + i + 1,
                            b.lines[i + 1:j])
    if REGEN:
        rewrite(replaced, lengths)
        assert not missing, "replaced by the nearest line printed; check them:\n" + "\n".join(missing)
    assert not stale and not missing, "\n".join([*(f"stale: {s}" for s in stale), *missing])
