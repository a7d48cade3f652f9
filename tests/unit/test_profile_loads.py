"""One command reads its GPU profile once (hardware.load), however many stages use it."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

import analyzer.hardware.files as load_module
from analyzer import hardware
from analyzer.cli import app

runner = CliRunner()


@pytest.fixture
def reads(monkeypatch, tmp_path):
    """The profile files read, by path, while a command runs (the alias table is read beforehand)."""
    hardware.aliases()
    seen: list[str] = []
    real = load_module.load_profile_file

    def counted(path):
        seen.append(str(path))
        return real(path)
    monkeypatch.setattr(load_module, "load_profile_file", counted)
    return seen


@pytest.mark.parametrize("args", [
    ("analyze", "attention", "--gpu", "h100"),
    ("configure", "attention", "--gpu", "h100"),
    ("sweep", "matmul", "--gpu", "h200", "--top", "2"),
    ("sweep", "mlp2", "--gpu", "h200", "--top", "2"),
    ("kernel", "matmul", "--gpu", "h200", "-o", "{tmp}/matmul.py"),
    ("kernel", "causal_attention", "--gpu", "h200", "--backend", "cuda", "-o", "{tmp}/causal.cu"),
], ids=lambda a: " ".join(a[:2]) + (" cuda" if "cuda" in a else ""))
def test_a_command_reads_its_profile_once(reads, tmp_path, args):
    result = runner.invoke(app, [a.format(tmp=tmp_path) for a in args])
    assert result.exit_code == 0, result.output
    assert reads and reads[0] == str(hardware.profile_path(args[args.index("--gpu") + 1])), reads
    others = reads[1:]     # a datasheet profile's shipped calibrated sibling (its fits), read once at most
    assert len(set(others)) == len(others) and all(p.endswith("-calibrated.yaml") for p in others), reads


def test_a_profile_passes_through_load_and_keeps_its_file():
    profile = hardware.load("h100")
    assert hardware.load(profile) is profile
    assert profile.source == "hardware/h100-sxm5.yaml"
