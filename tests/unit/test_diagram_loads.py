"""One command reads its diagram file once (analyzer.diagram.graph.load) and compiles each document once:
the diagram, and its weave over batch and heads. Every stage after the first takes the compiled diagram."""

from __future__ import annotations

import shutil

import pytest
from typer.testing import CliRunner

import analyzer.diagram.graph as graph
from analyzer.cli import app
from analyzer.common import resources
from analyzer.config import predict
from analyzer.diagram.interface import interface
from analyzer.diagram.weave import weave, weave_diagram
from analyzer.model.analysis import load

runner = CliRunner()


@pytest.fixture
def counted(monkeypatch):
    """The diagram files read and the documents compiled while a command runs, by source, with the
    compile cache empty (so that each distinct document compiles once, and no more, in the count)."""
    reads: list[str] = []
    compiled: list[str] = []
    real_read, real_compile = graph.load_file, graph._compile

    def read(path):
        reads.append(str(path))
        return real_read(path)

    def compile_(data, source):
        compiled.append(source)
        return real_compile(data, source)
    monkeypatch.setattr(graph, "load_file", read)
    monkeypatch.setattr(graph, "_compile", compile_)
    monkeypatch.setattr(graph, "_COMPILED", {})
    return reads, compiled


@pytest.mark.slow(seconds=3)
@pytest.mark.parametrize("args", [
    ("kernel", "attention", "--gpu", "h100", "-o", "{tmp}/attention.py"),
    ("kernel", "attention", "--gpu", "h100", "--backend", "triton", "-o", "{tmp}/attention.py"),
    ("analyze", "attention", "--gpu", "h100"),
    ("kernel", "sigmoid_attention", "--gpu", "h100", "-o", "{tmp}/sigmoid.py"),
    ("configure", "attention", "--gpu", "h100"),
    ("sweep", "attention", "--gpu", "h100", "--top", "2"),
], ids=lambda a: " ".join(a[:2]) + (" triton" if "triton" in a else ""))
def test_a_command_reads_and_compiles_its_diagram_once(counted, tmp_path, args):
    reads, compiled = counted
    result = runner.invoke(app, [a.format(tmp=tmp_path) for a in args])
    assert result.exit_code == 0, result.output
    path = resources.resolve("diagrams", args[1], what="diagram")
    assert reads == [str(path)], reads          # six reads, once, for napkin kernel attention --gpu h100
    shown = resources.display("diagrams", path)
    assert compiled == [shown, shown], compiled     # the diagram, then its weave over batch and heads


def test_a_diagram_file_given_by_path_is_read_once_and_named_in_errors(counted, tmp_path):
    reads, _ = counted
    fp32 = tmp_path / "attention32.yaml"
    fp32.write_text(resources.shipped("diagrams")["attention"].read_text().replace("dtype: fp16", "dtype: fp32"))
    result = runner.invoke(app, ["kernel", str(fp32), "--gpu", "h100", "-o", str(tmp_path / "k.py")])
    assert result.exit_code == 1
    assert f"{fp32}: dtype: the diagram's element type is fp32" in str(result.exception or result.output)
    assert reads == [str(fp32)], reads


def test_load_passes_a_compiled_diagram_through_and_retypes_it_without_reading():
    d = load("attention")
    assert load(d) is d and load(d, dtype=d.dtype) is d
    bf16 = load(d, dtype="bf16")
    assert bf16.dtype == "bf16" and bf16.source == d.source == "diagrams/attention.yaml"
    assert bf16 is load("attention", dtype="bf16")      # the same document as read from the file so
    assert d.document["dtype"] == "fp16"                # retyping copies the document, never changes it


def test_the_weave_of_a_compiled_diagram_is_the_weave_of_its_file():
    d = load("attention")
    outer = interface(d).outer
    assert outer
    from_file = graph.compile_data(weave(graph.load_file(resources.shipped("diagrams")["attention"]), outer),
                                   source=d.source)
    assert weave_diagram(d, outer) is from_file
    assert weave_diagram(d, ()) is d


def test_a_prediction_reconfigures_a_file_edited_between_two_calls(tmp_path):
    """The configurations are kept per compiled diagram: an edited file is a new document."""
    path = tmp_path / "mine.yaml"
    shutil.copy(resources.shipped("diagrams")["attention"], path)
    first = predict._configured(load(str(path)), "h100", False, "fp16")
    assert predict._configured(load(str(path)), "h100", False, "fp16") is first
    path.write_text(path.read_text().replace("name: attention", "name: edited"))
    again = predict._configured(load(str(path)), "h100", False, "fp16")
    assert again is not first and again.diagram.name == "edited"
