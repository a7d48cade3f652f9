"""napkin kernel and the diagram's element type: validated as `napkin diagrams check` validates it, and a
type the generator does not take is refused, or, with --dtype, generated as asked with a note.

regression: `dtype: 5` generated a kernel, and an fp8 diagram was silently generated as fp16 (the
command's --dtype default overrode the file).
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from analyzer.cli import main
from analyzer.common.errors import NapkinError
from analyzer.config.element_type import kernel_element_type

ROOT = Path(__file__).resolve().parents[2]
MATMUL = (ROOT / "diagrams" / "matmul.yaml").read_text()


def diagram(tmp_path: Path, text: str) -> str:
    path = tmp_path / "d.yaml"
    path.write_text(text)
    return str(path)


def with_dtype(value: str) -> str:
    assert "\ndtype: fp16\n" in MATMUL
    return MATMUL.replace("\ndtype: fp16\n", f"\ndtype: {value}\n")


@pytest.mark.parametrize("value, requested, field, says", [
    ("5", None, "dtype", "Input should be"),
    ("5", "fp16", "dtype", "Input should be"),            # --dtype does not hide an invalid file
    ("fp8", None, "dtype", "the diagram's element type is fp8"),
    ("fp32", None, "dtype", "the diagram's element type is fp32"),
])
def test_a_diagram_type_the_generator_does_not_take(tmp_path, value, requested, field, says):
    path = diagram(tmp_path, with_dtype(value))
    with pytest.raises(NapkinError) as info:
        kernel_element_type(path, requested)
    err = info.value
    assert err.file == path and err.field == field and says in err.message, err.one_line()
    if value != "5":
        assert "--dtype" in err.hint


def test_an_array_with_a_type_of_its_own(tmp_path):
    path = diagram(tmp_path, MATMUL.replace("  A: [a, b]", "  A: {axes: [a, b], dtype: fp8}"))
    with pytest.raises(NapkinError) as info:
        kernel_element_type(path, None)
    err = info.value
    assert err.field == "inputs.A.dtype" and "array A is fp8" in err.message, err.one_line()


@pytest.mark.parametrize("value, requested, dtype, noted", [
    ("fp16", None, "fp16", False), ("bf16", None, "bf16", False), ("bf16", "bf16", "bf16", False),
    ("fp16", "bf16", "bf16", True), ("fp8", "fp16", "fp16", True),
])
def test_the_kernel_type_is_the_file_s_unless_asked(tmp_path, value, requested, dtype, noted):
    element = kernel_element_type(diagram(tmp_path, with_dtype(value)), requested)
    assert element.dtype == dtype
    assert (element.note is not None) == noted
    if noted:
        assert f"declares dtype {value}" in element.note and f"generated for {dtype}" in element.note


def test_requested_type_the_generator_does_not_take():
    with pytest.raises(NapkinError) as info:
        kernel_element_type("matmul", "fp8")
    assert info.value.field == "--dtype"


def napkin(monkeypatch, capsys, cwd, *args):
    monkeypatch.chdir(cwd)
    monkeypatch.setattr(sys, "argv", ["napkin", *args])
    monkeypatch.delenv("NAPKIN_DEBUG", raising=False)
    with pytest.raises(SystemExit) as info:
        main()
    out, err = capsys.readouterr()
    return info.value.code, out, err


def test_kernel_command_generates_the_file_s_type(tmp_path, monkeypatch, capsys):
    (tmp_path / "d.yaml").write_text(with_dtype("bf16"))
    code, out, err = napkin(monkeypatch, capsys, tmp_path, "kernel", "d.yaml", "-o", "k.py")
    assert code == 0 and err == "", err
    assert "element type bf16" in (tmp_path / "k.py").read_text()


def test_kernel_command_refuses_an_fp8_diagram_and_writes_nothing(tmp_path, monkeypatch, capsys):
    (tmp_path / "d.yaml").write_text(with_dtype("fp8"))
    code, out, err = napkin(monkeypatch, capsys, tmp_path, "kernel", "d.yaml", "-o", "k.py")
    assert code == 1 and err.startswith("error: d.yaml: dtype: ") and err.count("\n") == 1, err
    assert not (tmp_path / "k.py").exists()


def test_kernel_command_notes_a_type_generated_as_another(tmp_path, monkeypatch, capsys):
    (tmp_path / "d.yaml").write_text(with_dtype("fp8"))
    code, out, err = napkin(monkeypatch, capsys, tmp_path, "kernel", "d.yaml", "--dtype", "bf16",
                            "-o", "k.py")
    assert code == 0, err
    assert err == "note: d.yaml declares dtype fp8; the kernel is generated for bf16 (--dtype)\n"
    assert "element type bf16" in (tmp_path / "k.py").read_text()
