"""Shared by the bad-input tests (tests/unit/test_bad_*.py): shipped data to edit, and what its error line says."""

# The project's rule: bad input gives one line, `<file>: <field path>: <message> (hint: <hint>)`, never a
# traceback, a hang or a wrong answer. The tests check it at the library level: each builds a bad
# diagram by deep-copying a shipped one and editing the dict, then asserts that compiling (or analysing)
# it raises a NapkinError whose one_line() names the file, the right field path and a useful message.
#
# Tests commented "regression" cover napkin bugs found while writing these tests (a traceback, a hang or a
# wrong message before the fix); should one come back, mark its test
# `@pytest.mark.xfail(reason="napkin bug: ...", strict=True)` rather than weakening it.

from __future__ import annotations

import copy
from pathlib import Path

import pytest

from analyzer.common import resources
from analyzer.common.errors import NapkinError
from analyzer.common.yamlio import load_file
from analyzer.diagram.graph import compile_data
from analyzer.model.analysis import analyze

SOURCE = "x.yaml"
ROOT = Path(__file__).resolve().parents[1]


def shipped(name: str) -> dict:
    """A deep copy of a shipped diagram's data, ready to be edited."""
    return copy.deepcopy(load_file(resources.shipped("diagrams")[name]))



def compile_error(data: dict) -> NapkinError:
    with pytest.raises(NapkinError) as info:
        compile_data(data, source=SOURCE)
    return info.value


def analyze_error(data: dict, gpu: str = "h100", **options) -> NapkinError:
    """The error of compiling and analysing `data` (compiling must succeed)."""
    diagram = compile_data(data, source=SOURCE)
    with pytest.raises(NapkinError) as info:
        analyze(diagram, gpu, **options)
    return info.value


def check(err: NapkinError, *, field: str | None, says: tuple[str, ...] = (), hint: str | None = None,
          file: str | None = SOURCE) -> str:
    """The error names `file` and `field` and its message says every fragment in `says`."""
    line = err.one_line()
    assert "\n" not in line and "Traceback" not in line, line
    if file is not None:
        assert err.file == file, line
        assert line.startswith(f"{file}: "), line
    if field is not None:
        assert err.field == field, line
        if file is not None:
            assert line.startswith(f"{file}: {field}: "), line
        else:
            assert f"{field}: " in line, line
    for fragment in says:
        assert fragment in err.message, line
    if hint is not None:
        assert err.hint is not None and hint in err.hint, line
    return line
