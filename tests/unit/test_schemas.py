"""napkin schema's JSON Schemas accept what napkin reads and describe what it writes: every shipped
diagram and profile, the profiles napkin calibrate writes, and the JSON of analyze and sweep, checked with
a JSON Schema validator (the jsonschema package), as an editor or a script consuming them would.
(napkin configure --json is checked in tests/unit/test_configure_cli.py.)"""

from __future__ import annotations

import json
from functools import cache
from pathlib import Path

import jsonschema
import pytest
from typer.testing import CliRunner

from analyzer.calibrate.calibrate import calibrate
from analyzer.calibrate.fit import FITTED, Fit
from analyzer.calibrate.hopper import calibrate as calibrate_hopper
from analyzer.cli import app
from analyzer.common import resources
from analyzer.common.yamlio import load_file
from analyzer.hardware import load_profile_file
from analyzer.report.calibration import write
from analyzer.report.hopper_calibration import write as write_hopper

ROOT = Path(__file__).resolve().parents[2]


def napkin(*args: str) -> str:
    result = CliRunner().invoke(app, list(args))
    assert result.exit_code == 0, result.output
    return result.output


@cache
def validator(kind: str) -> jsonschema.Draft202012Validator:
    schema = json.loads(napkin("schema", kind))
    jsonschema.Draft202012Validator.check_schema(schema)
    return jsonschema.Draft202012Validator(schema)


def problems(kind: str, document) -> list[str]:
    return [f"{'.'.join(map(str, e.absolute_path)) or '$'}: {e.message}"
            for e in validator(kind).iter_errors(document)]


# -- files napkin reads --------------------------------------------------------------------------------

@pytest.mark.parametrize("name", sorted(resources.shipped("diagrams")))
def test_every_shipped_diagram_follows_the_diagram_schema(name):
    """regression: the schema took only the long form of an input ({axes: [q, d]}), so it refused every
    shipped diagram, all of which write the documented shorthand `Q: [q, d]`."""
    assert problems("diagram", load_file(resources.shipped("diagrams")[name])) == []


def test_the_diagram_schema_refuses_what_the_loader_refuses():
    """Not a schema that takes anything: an unknown key, an input that is neither form."""
    data = load_file(resources.shipped("diagrams")["attention"])
    assert problems("diagram", {**data, "colour": "blue"})
    assert problems("diagram", {**data, "inputs": {**data["inputs"], "Q": "q, d"}})
    assert problems("diagram", {**data, "inputs": {**data["inputs"], "Q": {"axes": ["q", "d"], "dtyp": "fp8"}}})


@pytest.mark.parametrize("name", sorted(resources.shipped("hardware")))
def test_every_shipped_profile_follows_the_profile_schema(name):
    """regression: the calibrated profiles extend a datasheet profile (`extends: h200`) and give only
    their calibration; the schema refused `extends` and asked for every key of a whole profile."""
    assert problems("profile", load_file(resources.shipped("hardware")[name])) == []


def test_the_profile_schema_refuses_a_profile_that_neither_extends_nor_is_whole():
    data = load_file(resources.shipped("hardware")["h200-calibrated"])
    assert problems("profile", {k: v for k, v in data.items() if k != "extends"})
    assert problems("profile", {**data, "extends": 5})
    assert problems("profile", {**data, "calibration": {**data["calibration"], "typo": 1}})


def _committed_fit(profile: Path) -> Fit:
    """The parameters of a committed calibration, to write a profile from without fitting them anew (the
    fit takes minutes; what it writes is the same file with other numbers)."""
    cal = load_profile_file(profile).calibration
    groups = {name: name.partition(".") for name in FITTED}
    estimates = {n: getattr(cal, g)[k] if k else getattr(cal, g) for n, (g, _, k) in groups.items()}
    return Fit(FITTED, {n: e.value for n, e in estimates.items()},
               {n: e.uncertainty for n, e in estimates.items()}, samples=40)


def test_the_profiles_calibrate_writes_follow_the_profile_schema(tmp_path):
    """Each form of file napkin calibrate writes (analyzer.report's writers, as the command calls them):
    the portable kernels' fit (with the compiler's register count), the Hopper kernel's fit alone, and
    the Hopper fit added to a portable one (the shipped calibrated profiles' form), each from a slice of
    a shipped recording."""
    recording = json.loads((ROOT / "bench" / "results" / "sweep_h200.json").read_text())
    portable = tmp_path / "portable.json"
    portable.write_text(json.dumps({"meta": recording["meta"], "records": [
        r for r in recording["records"] if r["diagram"] == "matmul"][:30]}))
    result = calibrate(str(portable), "h200", fitted=_committed_fit(ROOT / "hardware" / "h200-calibrated.yaml"),
                       registers=str(ROOT / "bench" / "results" / "compiled_h200.json"))
    out = tmp_path / "h200-mine.yaml"
    write(result, f"napkin calibrate {portable} --gpu h200 -o {out}", str(out), None, None)
    assert problems("profile", load_file(out)) == []
    assert load_profile_file(out).calibration.registers is not None

    hopper = json.loads((ROOT / "bench" / "results" / "hopper_sweep_h200.json").read_text())
    sliced = tmp_path / "hopper.json"
    sliced.write_text(json.dumps({"meta": hopper["meta"], "records": hopper["records"][::12]}))
    fitted = calibrate_hopper(str(sliced), "h200")
    alone, added = tmp_path / "h200-hopper.yaml", out        # a new file; the portable one, completed
    for path in (alone, added):
        write_hopper(fitted, f"napkin calibrate {sliced} --gpu h200 --kernel hopper -o {path}", str(path), None)
        assert problems("profile", load_file(path)) == [], path.name
        assert load_profile_file(path).calibration.hopper is not None
    assert load_profile_file(added).calibration.registers is not None


# -- what napkin writes --------------------------------------------------------------------------------

@pytest.mark.parametrize("kind, args", [
    ("report", ["analyze", "attention", "--gpu", "h100", "--json"]),
    ("report", ["analyze", "causal_attention", "--gpu", "h200-calibrated", "--cluster", "2", "--json"]),
    ("report", ["analyze", "softmax_contraction", "--gpu", "t4", "--json"]),
    ("comparison", ["analyze", "attention", "--gpu", "h100", "--set", "q=2048..4096", "--json"]),
    ("sweep", ["sweep", "softmax_contraction", "--gpu", "h100", "--top", "3", "--json"]),
    ("sweep", ["sweep", "mha", "--gpu", "h100", "--backend", "hopper", "--top", "3", "--json"]),
], ids=lambda v: " ".join(v[:4]) if isinstance(v, list) else v)
def test_json_follows_its_schema(kind, args):
    assert problems(kind, json.loads(napkin(*args))) == []


def test_committed_schemas_are_current():
    """docs/schema/*.schema.json (used by editors: diagrams name it on their first line) are what
    `napkin schema KIND` prints."""
    committed = sorted((ROOT / "docs" / "schema").glob("*.schema.json"))
    assert committed
    for path in committed:
        assert json.loads(path.read_text()) == json.loads(napkin("schema", path.name.removesuffix(".schema.json"))), \
            f"{path.name} is stale: napkin schema {path.name.split('.')[0]} > docs/schema/{path.name}"
