"""Bad requests: an unknown GPU or diagram, an element type the GPU lacks, a --set napkin cannot honour."""

from __future__ import annotations

import re

import pytest
from helpers_bad_input import analyze_error, check, shipped

from analyzer import hardware
from analyzer.common.errors import NapkinError
from analyzer.model.analysis import analyze, load


@pytest.mark.parametrize("name, close", [("h10", "h100"), ("a10", "a100"), ("h2000", "h200"),
                                         ("t-4", "t4")])
def test_unknown_gpu_suggests_the_closest_name(name, close):
    with pytest.raises(NapkinError) as info:
        analyze("attention", name)
    err = info.value
    line = err.one_line()
    assert f"unknown GPU {name!r}" in err.message, line
    assert err.hint is not None and f"did you mean {close}?" in err.hint, line
    with pytest.raises(NapkinError):
        hardware.load(name)


def test_unknown_diagram_suggests_the_closest_name():
    with pytest.raises(NapkinError) as info:
        load("attn")
    err = info.value
    assert "unknown diagram 'attn'" in err.message and "attention" in (err.hint or ""), err.one_line()


@pytest.mark.parametrize("gpu, dtype, takes", [("a100", "fp8", "bf16"), ("t4", "bf16", "fp16"),
                                               ("t4", "fp8", "fp16")])
def test_dtype_the_gpu_lacks(gpu, dtype, takes):
    with pytest.raises(NapkinError) as info:
        analyze("attention", gpu, dtype=dtype)
    err = info.value
    line = err.one_line()
    assert gpu in err.message and dtype in err.message, line
    assert err.hint is not None and takes in err.hint and dtype not in err.hint.split(":")[-1], line


def test_dtype_the_gpu_lacks_set_in_the_file():
    data = shipped("attention")
    data["dtype"] = "fp8"
    assert "a100" in analyze_error(data, "a100").message
    data = shipped("attention")
    data["inputs"]["Q"] = {"axes": ["q", "d"], "dtype": "bf16"}
    assert "bf16" in analyze_error(data, "t4").message


def test_dtype_that_does_not_exist():
    with pytest.raises(NapkinError) as info:
        analyze("attention", "h100", dtype="fp64")
    line = check(info.value, field="dtype", file=None, says=("fp64",))
    assert "fp16" in line


@pytest.mark.parametrize("name, hint", [("zz", "known"), ("qq", "did you mean q?"),
                                        ("g_qq", "did you mean g_q?")])
def test_unknown_set_name(name, hint):
    with pytest.raises(NapkinError) as info:
        analyze("attention", "h100", sets={name: 64})
    err = info.value
    line = err.one_line()
    assert f"--set {name}" in line and "no size or tile size" in err.message, line
    assert err.hint is not None and hint in err.hint, line


def test_set_of_an_axis_whose_size_is_an_expression():
    with pytest.raises(NapkinError) as info:
        analyze("causal_attention", "h100", sets={"x": 4096})
    err = info.value
    line = err.one_line()
    assert "--set x" in line and "axis 'x'" in err.message and "q" in err.message, line
    assert err.hint is not None and "set q instead" in err.hint, line


def test_pinned_tile_size_breaking_a_divisor_rule():
    with pytest.raises(NapkinError) as info:
        analyze("attention", "h100", sets={"g_q": 3})      # wgmma needs g_q a multiple of 64
    err = info.value
    line = err.one_line()
    assert "g_q" in line and "64" in line, line
    found = re.search(r"needs ([0-9.]+) KiB, the limit is ([0-9.]+) KiB", err.message)
    assert found is None or float(found[1]) > float(found[2]), f"blames memory that fits: {line}"


def test_set_out_of_range():
    with pytest.raises(NapkinError) as info:
        analyze("attention", "h100", sets={"q": 2**41})
    assert "out of range" in info.value.message
