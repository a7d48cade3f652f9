"""napkin analyze's results and napkin kernel's files on disk (analyzer.common.cache): a repeated command
reads its answer, any change to what the answer depends on computes it again, and the cache never
changes an answer."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

import analyzer.codegen as codegen
import analyzer.model.analysis as analysis
from analyzer.cli import app
from analyzer.common import resources

runner = CliRunner()


def _counting(monkeypatch, tmp_path, owner, name: str) -> list[str]:
    """The cache on, in a folder of this test's; the list of diagrams `owner.name` computed for (what
    the cache did not answer)."""
    monkeypatch.setenv("NAPKIN_CACHE", "on")
    monkeypatch.setenv("NAPKIN_CACHE_DIR", str(tmp_path / "cache"))
    calls: list[str] = []
    real = getattr(owner, name)

    def counted(diagram, *args, **kwargs):
        calls.append(str(diagram))
        return real(diagram, *args, **kwargs)
    monkeypatch.setattr(owner, name, counted)
    return calls


@pytest.fixture
def computed(monkeypatch, tmp_path):
    """The analyses computed (not read)."""
    return _counting(monkeypatch, tmp_path, analysis, "analyze")


@pytest.fixture
def generated(monkeypatch, tmp_path):
    """The kernel files generated (not read)."""
    return _counting(monkeypatch, tmp_path, codegen, "generate")


def analyze(*args: str) -> str:
    result = runner.invoke(app, ["analyze", *args], env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    return result.output


def test_a_repeated_command_reads_its_answer(computed, tmp_path):
    first = analyze("attention", "--gpu", "h100", "--json")
    assert analyze("attention", "--gpu", "h100", "--json") == first and len(computed) == 1
    assert analyze("attention", "--gpu", "h100") and len(computed) == 1      # the table from the same entry
    analyze("attention", "--gpu", "h100", "--set", "q=4096")                  # other options: computed
    analyze("attention", "--gpu", "h200")                                     # another GPU: computed
    assert len(computed) == 3 and len(list((tmp_path / "cache" / "analyze").glob("*.json"))) == 3


def test_an_edited_diagram_is_computed_again(computed, tmp_path):
    path = tmp_path / "mine.yaml"
    shutil.copy(resources.shipped("diagrams")["attention"], path)
    first = analyze(str(path), "--gpu", "h100", "--json")
    path.write_text(path.read_text().replace("16384", "8192"))
    second = analyze(str(path), "--gpu", "h100", "--json")
    assert len(computed) == 2 and first != second


def test_a_damaged_entry_is_a_miss(computed, tmp_path):
    first = analyze("matmul", "--gpu", "a100", "--json")
    (entry,) = (tmp_path / "cache" / "analyze").glob("*.json")
    entry.write_text(entry.read_text()[:100])
    assert analyze("matmul", "--gpu", "a100", "--json") == first and len(computed) == 2


def test_a_profile_of_the_users_is_not_cached(computed, tmp_path):
    path = tmp_path / "gpu.yaml"
    shutil.copy(resources.shipped("hardware")["a100"], path)
    analyze("matmul", "--gpu", str(path))
    analyze("matmul", "--gpu", str(path))
    assert len(computed) == 2 and not (tmp_path / "cache").exists()


def test_off_writes_nothing(monkeypatch, tmp_path):
    monkeypatch.setenv("NAPKIN_CACHE", "off")
    monkeypatch.setenv("NAPKIN_CACHE_DIR", str(tmp_path / "cache"))
    analyze("matmul", "--gpu", "a100")
    assert not Path(tmp_path / "cache").exists()


@pytest.mark.parametrize("command", [["analyze", "attention", "--gpu", "h100"],
                                     ["kernel", "attention", "--gpu", "h100", "-o", "kernel.py"]],
                         ids=["analyze", "kernel"])
def test_a_repeated_command_imports_no_model(tmp_path, command):
    """The point of the cache is speed: a repeated napkin analyze or napkin kernel reads its answer and
    shows or writes it without importing sympy or networkx (a stray import in the alias lookup or the
    report made analyze 3x slower)."""
    env = {**os.environ, "NAPKIN_CACHE": "on", "NAPKIN_CACHE_DIR": str(tmp_path / "cache")}
    argv = [sys.executable, "-X", "importtime", "-m", "analyzer",
            *[str(tmp_path / word) if word == "kernel.py" else word for word in command]]
    first = subprocess.run(argv, env=env, capture_output=True, text=True, check=True)
    second = subprocess.run(argv, env=env, capture_output=True, text=True, check=True)
    imported = {line.rsplit("|", 1)[-1].strip() for line in second.stderr.splitlines() if "|" in line}
    assert second.stdout == first.stdout
    assert "sympy" in {line.rsplit("|", 1)[-1].strip() for line in first.stderr.splitlines() if "|" in line}
    assert not {"sympy", "networkx", "matplotlib"} & imported


def kernel(*args: str) -> str:
    result = runner.invoke(app, ["kernel", *args], env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    return result.output


def test_a_repeated_kernel_writes_the_files_it_generated(generated, tmp_path):
    """napkin kernel ranks configurations by size, most of its time: a repeated one writes the same
    files from the cache, wherever -o points; other options, or a GPU file of the user's, generate."""
    kernel("matmul", "--gpu", "a100", "--backend", "cuda", "-o", str(tmp_path / "one.cu"))
    kernel("matmul", "--gpu", "a100", "--backend", "cuda", "-o", str(tmp_path / "two.cu"))
    assert len(generated) == 1
    for suffix in (".cu", ".py"):
        assert (tmp_path / f"one{suffix}").read_text() == (tmp_path / f"two{suffix}").read_text()
    kernel("matmul", "--gpu", "a100", "--backend", "triton", "-o", str(tmp_path / "three.py"))
    kernel("matmul", "--gpu", "a100", "--set", "a=512", "-o", str(tmp_path / "four.py"))
    assert len(generated) == 3
    profile = tmp_path / "gpu.yaml"
    shutil.copy(resources.shipped("hardware")["a100"], profile)
    kernel("matmul", "--gpu", str(profile), "-o", str(tmp_path / "five.py"))
    kernel("matmul", "--gpu", str(profile), "-o", str(tmp_path / "six.py"))
    assert len(generated) == 5 and len(list((tmp_path / "cache" / "kernel").glob("*.json"))) == 3


def test_a_damaged_kernel_entry_is_generated_again(generated, tmp_path):
    kernel("matmul", "--gpu", "a100", "-o", str(tmp_path / "one.py"))
    (entry,) = (tmp_path / "cache" / "kernel").glob("*.json")
    for damage in (entry.read_text()[:100], '{"source": 1}', "[]"):
        entry.write_text(damage)
        kernel("matmul", "--gpu", "a100", "-o", str(tmp_path / "two.py"))
        assert (tmp_path / "one.py").read_text() == (tmp_path / "two.py").read_text()
    assert len(generated) == 4
