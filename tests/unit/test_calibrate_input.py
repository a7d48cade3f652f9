"""napkin calibrate on recordings no GPU wrote: one error line naming the file, never a traceback; and a
fit whose parameters leave their documented ranges (docs/model.md) is refused, not written.

The fits here run on 60 records of the committed recording (a few seconds); the committed profile's
own values are checked against the ranges without refitting.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from analyzer import hardware
from analyzer.calibrate.calibrate import calibrate
from analyzer.calibrate.fit import FITTED
from analyzer.calibrate.ranges import check_ranges, parameter_range
from analyzer.calibrate.record import load_recording
from analyzer.cli import main
from analyzer.common.errors import NapkinError

ROOT = Path(__file__).resolve().parents[2]
RECORDING = ROOT / "bench" / "results" / "sweep_h200.json"


@pytest.fixture(scope="module")
def recording() -> dict:
    return json.loads(RECORDING.read_text())


def subset(recording: dict, n: int = 60, **edit) -> dict:
    records = [r for r in recording["records"] if r["diagram"] == "matmul"][:n]
    return {"meta": recording["meta"], "records": [{**r, **edit} for r in records]}


def load_error(tmp_path: Path, text: str) -> str:
    path = tmp_path / "rec.json"
    path.write_text(text)
    with pytest.raises(NapkinError) as info:
        load_recording(path)
    line = info.value.one_line()
    assert line.startswith(f"{path}: "), line
    assert "\n" not in line and len(line) < 400, line
    return line


def dumped(recording: dict, index: int, key: str, raw: str) -> str:
    """The recording as JSON with record `index`'s `key` written as the raw JSON text `raw`."""
    marker = "__RAW__"
    data = subset(recording)
    data["records"][index][key] = marker
    return json.dumps(data).replace(f'"{marker}"', raw)


# regression: each of these traced back (RecursionError, ValueError) or, for Infinity and 1e-300,
# reached the fit (LinAlgError; a tensor-core efficiency of 148 and an overlap of levels of 66).
@pytest.mark.parametrize("key, raw, says", [
    ("time_s", "Infinity", "Infinity is not a JSON number"),
    ("time_s", "-Infinity", "-Infinity is not a JSON number"),
    ("time_s", "NaN", "NaN is not a JSON number"),
    ("time_s", "1e-300", "records[0].time_s"),
    ("time_s", "1e300", "records[0].time_s"),
    ("time_s", "0", "records[0].time_s"),
    ("num_warps", "9" * 5000, "4300 digits"),
    ("num_warps", "9" * 4000, "records[0].num_warps"),
    ("num_warps", "true", "records[0].num_warps"),
    ("sizes", '{"a": -1, "b": 64, "c": 64}', "records[0].sizes.a"),
    ("tiles", '{"g_a": ' + "9" * 30 + "}", "records[0].tiles.g_a"),
    ("flops", "1e400", "records[0].flops"),
], ids=["inf", "-inf", "nan", "1e-300-seconds", "1e300-seconds", "zero-seconds", "5000-digits",
        "4000-digits", "bool-warps", "negative-size", "huge-tile", "flops-overflow"])
def test_recording_with_a_bad_number(tmp_path, recording, key, raw, says):
    assert says in load_error(tmp_path, dumped(recording, 0, key, raw))


@pytest.mark.parametrize("depth, says", [(100_000, "nested too deeply"), (500, "nested deeper than")])
def test_deeply_nested_recording(tmp_path, depth, says):
    assert says in load_error(tmp_path, '{"meta": ' + "[" * depth + "]" * depth + ', "records": []}')


def test_calibrate_command_on_a_nested_recording_is_one_line(tmp_path, monkeypatch, capsys):
    (tmp_path / "deep.json").write_text("[" * 100_000 + "]" * 100_000)
    monkeypatch.setattr(sys, "argv", ["napkin", "calibrate", str(tmp_path / "deep.json")])
    monkeypatch.delenv("NAPKIN_DEBUG", raising=False)
    with pytest.raises(SystemExit) as info:
        main()
    err = capsys.readouterr().err
    assert info.value.code == 1 and err.count("\n") == 1 and err.startswith("error: "), err
    assert "deep.json" in err and "nested too deeply" in err


# -- the fitted parameters' ranges ---------------------------------------------------------------------

def test_every_fitted_parameter_has_a_range():
    for name in FITTED:
        low, high = parameter_range(name, efficiency_max=1.08, longest_s=1e-3)
        assert 0 <= low < high


@pytest.mark.parametrize("name, value", [("level_overlap", 74.0), ("pipeline_efficiency.tensor", 148.4),
                                         ("softmax_overhead", 1.5), ("launch_overhead_s", 2.0),
                                         ("power.tensor", float("nan"))])
def test_a_parameter_outside_its_range_is_refused(name, value):
    with pytest.raises(NapkinError) as info:
        check_ranges({"level_overlap": 0.5, name: value}, efficiency_max=1.08, longest_s=0.02,
                     source="rec.json")
    line = info.value.one_line()
    assert line.startswith("rec.json: records: ") and f"the fit put {name} at" in line, line
    assert "outside its range" in line and "docs/model.md" in line, line


def test_the_committed_calibration_lies_inside_the_ranges():
    """The committed fit (hardware/h200-calibrated.yaml) passes the check calibrate now makes."""
    profile = hardware.load("h200-calibrated")
    longest = max(r["time_s"] for r in json.loads(RECORDING.read_text())["records"] if r["status"] == "ok")
    values = profile.calibration.as_params()
    assert set(FITTED) <= set(values)
    check_ranges({n: values[n] for n in FITTED}, efficiency_max=profile.clocks.boost_hz /
                 profile.clocks.tensor_hz, longest_s=longest, source="x")


@pytest.mark.parametrize("scale", [None, (1e-3, 1.0, 1e3)], ids=["60-records", "times-scrambled"])
def test_calibrate_never_returns_a_parameter_outside_its_range(tmp_path, recording, scale):
    """On 60 matmul records the overlap of levels came out 1.33 and, with times scaled by a thousand
    either way, 9.9: either calibrate refuses, naming the parameter, or every value is in range."""
    data = subset(recording)
    if scale:
        for i, r in enumerate(data["records"]):
            r["time_s"] = max(r["time_s"] * scale[i % 3], 2e-7)
    path = tmp_path / "rec.json"
    path.write_text(json.dumps(data))
    try:
        result = calibrate(str(path), "h200", samples=2)
    except NapkinError as exc:
        assert "outside its range" in exc.message, exc.one_line()
        return
    base = result.base
    for name in FITTED:
        low, high = parameter_range(name, efficiency_max=base.clocks.boost_hz / base.clocks.tensor_hz,
                                    longest_s=max(r.time_s for r in result.records))
        assert low <= result.fit.values[name] <= high, name


# regression: a recording's sizes were reported as options the user never passed: "--set zz: matmul has no
# size or tile size 'zz'", "--set x: the size of axis 'x' is q".
@pytest.mark.parametrize("diagram, edit, field, says", [
    ("matmul", lambda r: r["sizes"].__setitem__("zz", 5), "records[0].sizes", "size zz: matmul has no size"),
    ("causal_attention", lambda r: r["sizes"].__setitem__("x", 5), "records[0].sizes",
     "size x: the size of axis 'x' is q"),
    ("matmul", lambda r: r.__setitem__("tiles", {"g_zz": 64}), "records[0].tiles", "'g_zz'"),
], ids=["unknown-size", "tied-size", "unknown-tile"])
def test_record_that_does_not_fit_its_diagram(tmp_path, recording, diagram, edit, field, says):
    records = [dict(r, sizes=dict(r["sizes"])) for r in recording["records"] if r["diagram"] == diagram][:30]
    edit(records[0])
    path = tmp_path / "rec.json"
    path.write_text(json.dumps({"meta": recording["meta"], "records": records}))
    with pytest.raises(NapkinError) as info:
        calibrate(str(path), "h200", samples=2)
    err = info.value
    assert err.file == str(path) and err.field == field and says in err.message, err.one_line()
    assert "--set" not in err.one_line()
