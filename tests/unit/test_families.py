"""The kernel families are one registry: every family has a generator and a fit, the commands ask the
family rather than a backend's name, and a family's answer is the one napkin kernel, analyze and sweep
give (analyzer.config.family)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from analyzer.calibrate.fits import FITS
from analyzer.cli.calibration import REPORTED
from analyzer.codegen.files import SUFFIX
from analyzer.codegen.generator import GENERATORS
from analyzer.common.errors import NapkinError
from analyzer.config.family import FAMILIES, PORTABLE, family, tried
from analyzer.config.launch import expected, launch, sizes_of
from analyzer.hardware import load

ROOT = Path(__file__).resolve().parents[2] / "analyzer"


def test_every_family_has_a_generator_a_fit_and_a_file_name():
    names = [f.name for f in FAMILIES]
    assert len(set(names)) == len(names)
    assert set(GENERATORS) == set(names)
    assert {f.fit for f in FAMILIES} | {x for f in FAMILIES for x in f.other_fits} == set(FITS) == set(REPORTED)
    assert set(SUFFIX) == set(names)


def test_no_module_outside_the_registry_branches_on_a_backends_name():
    """REVIEW's first finding: `backend == "hopper"` decided things in six modules. A comparison of a
    backend, family or kernel word with a family's name may sit in the registries alone."""
    allowed = {ROOT / "config" / "family", ROOT / "codegen" / "generator.py", ROOT / "calibrate" / "fits.py"}
    names = {f.name for f in FAMILIES} | set(FITS)
    found = []
    for path in ROOT.rglob("*.py"):
        if any(path == a or a in path.parents for a in allowed):
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if not isinstance(node, ast.Compare):
                continue
            sides = [node.left, *node.comparators]
            words = {s.value for s in sides if isinstance(s, ast.Constant) and isinstance(s.value, str)}
            subjects = {ast.unparse(s) for s in sides if not isinstance(s, ast.Constant)}
            if words & names and any(w in s for s in subjects for w in ("backend", "family", "kernel")):
                found.append(f"{path.relative_to(ROOT)}:{node.lineno}: {ast.unparse(node)}")
    assert not found, "\n".join(found)


def test_a_hopper_gpu_tries_the_hopper_family_first_and_every_gpu_ends_with_the_portable_one():
    assert [f.name for f in tried(load("h100"), None)] == ["hopper", "hopper-contraction", "triton"]
    assert tried(load("a100"), None) == [PORTABLE]
    assert [f.name for f in tried(load("a100"), "cuda")] == ["cuda"]
    with pytest.raises(NapkinError, match="expected hopper or hopper-contraction or triton or cuda"):
        family("tpu")


@pytest.mark.parametrize(("diagram", "gpu", "backend"), [
    ("attention", "h100", "hopper"), ("matmul", "h100", "hopper-contraction"), ("mlp2", "h100", "hopper-contraction"),
    ("linear_attention", "h100", "triton"),
    ("attention", "a100", "triton")])
def test_the_launch_names_the_family_that_times_it(diagram, gpu, backend):
    profile = load(gpu)
    launched = launch(diagram, profile, tables=False)
    assert launched.family is family(backend) and launched.backend == backend
    e = expected(launched, profile, sizes_of(launched.configured, None))
    assert e.backend == backend and e.time_s > 0
    assert (e.hopper is not None) == (backend == "hopper")
    assert bool(e.contraction) == (backend == "hopper-contraction")


def test_a_refusing_family_says_why_the_portable_one_runs():
    launched = launch("linear_attention", load("h100"), tables=False)
    assert launched.portable_why and "the keys-first order builds a state" in launched.portable_why
    with pytest.raises(NapkinError, match="attention"):
        launch("matmul", load("h100"), backend="hopper", tables=False)
