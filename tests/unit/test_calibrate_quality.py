"""napkin calibrate tells how good its fit is: it names the parameters it leaves at a bound of their range
(terminal, report, profile), and every command prints its held-out errors (and, with --across, the carried
fit's); it refuses a recording measured on another GPU than --gpu's, and a --held-out size no record has.

The pipelines run on small parts of the committed recordings (one size of matmul; a quarter of the Hopper
sweep), as tests/unit/test_calibrate_input.py and test_calibrate_hopper.py do.
"""

from __future__ import annotations

import json
import sys
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
import yaml

from analyzer import hardware
from analyzer.calibrate import calibrate as portable
from analyzer.calibrate import hopper as cal
from analyzer.calibrate.fit import Components, fit, reached_bounds
from analyzer.calibrate.record import check_gpu, gpu_model
from analyzer.cli import main
from analyzer.common.errors import NapkinError
from analyzer.config.hopper import HopperParams
from analyzer.report.calibration import profile_yaml, report_markdown, summary

ROOT = Path(__file__).resolve().parents[2]
RESULTS = ROOT / "bench" / "results"


def napkin(monkeypatch, capsys, *args: str) -> tuple[int, str, str]:
    """The command line in process: exit code, stdout, stderr."""
    monkeypatch.setattr(sys, "argv", ["napkin", *args])
    monkeypatch.delenv("NAPKIN_DEBUG", raising=False)
    with pytest.raises(SystemExit) as info:
        main()
    out = capsys.readouterr()
    return info.value.code, out.out, out.err


# -- a recording of another GPU, a held-out size no record has -------------------------------------------

# regression: `napkin calibrate sweep_h200.json --gpu h100` fitted an H100 profile to H200 times silently
@pytest.mark.parametrize("args, says", [
    (["sweep_h200.json", "--gpu", "h100"], "meta.gpu: measured on NVIDIA H200, not on h100-sxm5 (H100) as --gpu"),
    (["hopper_sweep_h200.json", "--gpu", "h100", "--kernel", "hopper"], "(h200) in --gpu"),
    (["sweep_h200.json", "--gpu", "h200", "--across", "bench/results/sweep_h100.json:h200"],
     "sweep_h100.json: meta.gpu: measured on NVIDIA H100 80GB HBM3, not on h200 (H200) as --across says"),
    # the contraction kernel's recording keeps the device's name in env.gpu, and the error says so
    (["hopper_contraction_h100.json", "--gpu", "h200", "--kernel", "contraction"],
     "hopper_contraction_h100.json: env.gpu: measured on NVIDIA H100 80GB HBM3, not on h200 (H200) as --gpu"),
], ids=["portable", "hopper", "across", "contraction"])
def test_a_recording_of_another_gpu_is_refused(monkeypatch, capsys, tmp_path, args, says):
    out = tmp_path / "cal.yaml"
    code, _, err = napkin(monkeypatch, capsys, "calibrate", f"bench/results/{args[0]}", *args[1:], "-o", str(out))
    assert code == 1 and err.count("\n") == 1 and says in err, err
    assert "--allow-gpu-mismatch" in err and not out.exists()


def test_the_gpu_a_recording_names():
    assert gpu_model("NVIDIA H100 80GB HBM3") == gpu_model("NVIDIA H100 SXM5 80GB") == "H100"
    assert gpu_model("NVIDIA Tesla T4 16GB") == "T4" and gpu_model("h200") == "H200"
    h100 = hardware.load("h100")
    check_gpu({"gpu": "NVIDIA H100 PCIe"}, "rec.json", h100)             # the same model
    check_gpu({}, "rec.json", h100)                                        # a recording that says nothing
    check_gpu({"gpu": "NVIDIA H200"}, "rec.json", h100, allowed=True)     # --allow-gpu-mismatch
    with pytest.raises(NapkinError) as info:                              # meta.profile where no meta.gpu
        check_gpu({"profile": "h200"}, "rec.json", h100)
    assert info.value.field == "meta.profile" and "(h200)" in info.value.hint


# regression: `--held-out attention=1234` held nothing out and reported the errors of no record
@pytest.mark.parametrize("held, says", [
    ("attention=1234", ("no measured attention record has size 1234 (hint: its attention sizes: 512, 1024, "
                        "2048, 4096, 8192, 16384)")),
    ("conv=1024", "no measured record is of family 'conv' (hint: its families: attention, matmul)"),
])
def test_a_held_out_size_no_record_has_is_refused(monkeypatch, capsys, held, says):
    code, _, err = napkin(monkeypatch, capsys, "calibrate", "bench/results/sweep_h200.json", "--held-out", held)
    assert code == 1 and err.count("\n") == 1 and f"sweep_h200.json: --held-out {held}: {says}" in err, err


# -- parameters at a bound ----------------------------------------------------------------------------------

def test_the_fit_names_the_parameters_it_leaves_at_a_bound():
    """Times made with a launch overhead of 3 us, fitted with launch_overhead_s capped at 1 us: the fit
    leaves it at the cap (least_squares' active_mask), and reached_bounds, which says the same of given
    parameters, agrees."""
    rng = np.random.default_rng(0)
    n = 120
    tensor = np.exp(rng.uniform(np.log(2e-6), np.log(1e-4), n))
    c = Components({"tensor": tensor}, {"smem": tensor * 0.5}, chunks=np.full(n, 100.0), stages=np.full(n, 2.0),
                   resident=np.ones(n), edge=np.zeros(n), measured=np.ones(n))
    c = replace(c, measured=c.time({"pipeline_efficiency.tensor": 0.7, "launch_overhead_s": 3e-6}))
    names = ("pipeline_efficiency.tensor", "launch_overhead_s")
    bounds = {"pipeline_efficiency.tensor": (0.0, 1.08), "launch_overhead_s": (0.0, 1e-6)}
    f = fit(c, names, bounds=bounds)
    assert f.values["launch_overhead_s"] == pytest.approx(1e-6)
    assert f.at_bounds == {"launch_overhead_s": "upper"} == reached_bounds(f.values, bounds)
    assert reached_bounds({**f.values, "launch_overhead_s": 0.5e-6}, bounds) == {}


@pytest.fixture(scope="module")
def matmul(tmp_path_factory):
    """The portable pipeline on one size of the H200's matmul records, carried to a few of them."""
    doc = json.loads((RESULTS / "sweep_h200.json").read_text())
    records = [r for r in doc["records"] if r["diagram"] == "matmul" and r["seqlen"] == 1024]
    folder = tmp_path_factory.mktemp("matmul")
    (folder / "rec.json").write_text(json.dumps({"meta": doc["meta"], "records": records}))
    (folder / "other.json").write_text(json.dumps({"meta": doc["meta"], "records": records[:12]}))
    return portable.calibrate(str(folder / "rec.json"), "h200", samples=1, other=str(folder / "other.json"),
                              other_gpu="h200"), folder


def at_lower_bound(r: portable.Result) -> portable.Result:
    """r with its fit's launch overhead at the bottom of its range, as a fit that found none leaves it."""
    f = replace(r.fit, values={**r.fit.values, "launch_overhead_s": 0.0},
                at_bounds={"launch_overhead_s": "lower"})
    return replace(r, fit=f, calibrated=portable.calibrated_profile(r.base, f, r.recording, r.source, None, 10))


# regression: a parameter at a bound of its range went unflagged; README's portable command printed no fit
# quality and nothing of --across
def test_portable_calibrate_prints_its_held_out_and_carried_errors(matmul, monkeypatch, capsys):
    result, folder = matmul
    lines = summary(result)
    held = result.validation.errors[("calibrated", "matmul", "held out")]
    assert lines[0] == (f"held out of the fit, calibrated model: matmul median {100 * held.median:.1f} %, "
                        f"90th percentile {100 * held.p90:.1f} % ({held.count} records)")
    assert held.count > 0 and lines[1].startswith(f"carried to NVIDIA H200 ({folder / 'other.json'}): matmul median")
    monkeypatch.setattr(portable, "calibrate", lambda *a, **k: at_lower_bound(result))
    code, out, _ = napkin(monkeypatch, capsys, "calibrate", str(folder / "rec.json"), "--gpu", "h200")
    assert code == 0 and "  launch_overhead_s = 0   at its lower bound" in out, out
    assert lines[0] in out and lines[1] in out
    assert "at a bound of its range (a limit, not a measurement): launch_overhead_s = 0 (lower bound)" in out


def test_portable_report_and_profile_name_the_parameters_at_a_bound(matmul):
    result, _ = matmul
    bound = at_lower_bound(result)
    assert "**At a bound of its range:** launch_overhead_s = 0 (lower bound)." in report_markdown(bound, "c", None)
    assert "At a bound" not in report_markdown(replace(result, fit=replace(result.fit, at_bounds={})), "c", None)
    profile = yaml.safe_load(profile_yaml(bound, "c"))
    assert profile["calibration"]["fit"]["at_bounds"] == "launch_overhead_s = 0 (lower bound)"


def test_hopper_calibrate_names_a_parameter_at_its_cap_and_prints_its_errors(tmp_path, monkeypatch, capsys):
    """Times the Hopper kernel's model makes with a launch overhead of 30 us, beyond the 10 us its range
    allows (the committed fits put it at that cap): the fit stops there and says so everywhere."""
    doc = json.loads((RESULTS / "hopper_sweep_h100.json").read_text())
    profile = hardware.load("h100").model_copy(update={"calibration": None})
    truth = HopperParams(tensor_efficiency=0.8, softmax_overhead=0.5, l2_efficiency=0.9, chunk_overhead_s=1e-7,
                         prologue_chunks=1.5, tile_overhead_s=3e-6, launch_overhead_s=3e-5, lone_overlap=0.6,
                         mask_overhead=0.4)
    rng = np.random.default_rng(1)
    rows = [r for r in doc["records"] if r["status"] == "ok" and r["config"]["SCHEDULE"] == "tiles"
            and rng.random() < 0.3]
    rows = [r for r in rows if cal.legal(profile, cal.config_of(profile, cal.HopperRecord.model_validate(r)))]
    times = cal.predict(profile, [cal.HopperRecord.model_validate(r) for r in rows], truth)
    path = tmp_path / "sweep.json"
    path.write_text(json.dumps({"meta": doc["meta"], "records": [dict(r, time_s=float(t))
                                                                 for r, t in zip(rows, times, strict=True)]}))
    out, report = tmp_path / "cal.yaml", tmp_path / "report.md"
    code, text, err = napkin(monkeypatch, capsys, "calibrate", str(path), "--gpu", "h100", "--kernel", "hopper",
                             "-o", str(out), "--report", str(report), "--across", f"{path}:h100")
    assert code == 0, err
    assert "  launch_overhead_s = 1e-05 ± " in text and "at its upper bound" in text.split("launch_overhead_s")[1]
    assert "held out of the fit, calibrated model: configurations median" in text and "90th percentile" in text
    assert f"carried to {path}: median" in text
    assert "**At a bound of its range:** launch_overhead_s = 1e-05 (upper bound)" in report.read_text()
    assert "launch_overhead_s = 1e-05 (upper bound)" in hardware.load(str(out)).calibration.hopper.fit["at_bounds"]
