"""napkin calibrate --kernel hopper --variants: the score ops' costs count as before where nothing fitted
them, the fit recovers the costs it generated, and the shipped fit is what the committed recording gives."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
import yaml

from analyzer import hardware
from analyzer.calibrate import hopper as cal
from analyzer.calibrate.hopper_variants import (
    calibrate,
    chain_reader,
    counted,
    fit_variants,
)
from analyzer.config.hopper import HopperParams
from analyzer.config.scores import ScoreOp, Scores

ROOT = Path(__file__).resolve().parents[2]
VARIANTS = ROOT / "bench" / "results" / "hopper_variants_h100.json"
DATASHEET = hardware.load("h100").model_copy(update={"calibration": None})
SOFTMAX_FIT = HopperParams(tensor_efficiency=0.75, softmax_overhead=0.7, l2_efficiency=0.85, chunk_overhead_s=2e-7,
                           tile_overhead_s=1.5e-6, mask_overhead=0.45, overlap_softness=0.43)
# costs the records' bounds see: a cost below what the tensor cores hide moves no prediction, and the fit
# could then stop anywhere under it
TRUTH = replace(SOFTMAX_FIT, score_clocks=(("alibi shifted", 0.02), ("sigmoid", 0.08), ("softcap", 0.09)),
                bias_efficiency=0.6, bias_row_clocks=4.0)


def test_an_op_costs_its_counted_operations_until_a_fit_says_otherwise():
    rate = DATASHEET.per_sm_per_clock
    chain = Scores((ScoreOp("Sc", "softcap", cap=50), ScoreOp("Sa", "alibi", shifted=True)))
    assert chain.costed == ("softcap", "alibi shifted")
    as_counted = 1 / rate.sfu_ops + 1 / rate.fp32_fma
    assert chain.op_clocks(rate.sfu_ops, rate.fp32_fma) == pytest.approx(as_counted)
    assert counted("softcap", DATASHEET) + counted("alibi shifted", DATASHEET) == pytest.approx(as_counted)
    # a fitted op replaces its own count alone
    assert chain.op_clocks(rate.sfu_ops, rate.fp32_fma, {"softcap": 0.2}) == pytest.approx(0.2 + 1 / rate.fp32_fma)


def _synthetic(tmp_path: Path, noise: float, seed: int = 0) -> Path:
    """The committed variants recording's configurations and shapes, timed by the model at TRUTH, times
    log-normal noise."""
    doc = json.loads(VARIANTS.read_text())
    rows = [r for r in doc["records"] if r["status"] == "ok"]
    records = [cal.HopperRecord.model_validate(r) for r in rows]
    chain_of = chain_reader(DATASHEET, str(VARIANTS))
    rng = np.random.default_rng(seed)
    times = cal.predict(DATASHEET, records, TRUTH, [chain_of(r) for r in records]) * \
        np.exp(rng.normal(0, noise, len(records)))
    for row, t in zip(rows, times, strict=True):
        row["time_s"] = float(t)
    path = tmp_path / "variants.json"
    path.write_text(json.dumps({"meta": doc["meta"], "records": rows}))
    return path


@pytest.mark.parametrize("noise", [0.0, 0.02])
def test_the_variants_fit_recovers_the_costs_it_was_made_with(tmp_path, noise):
    v = fit_variants(str(_synthetic(tmp_path, noise)), DATASHEET, SOFTMAX_FIT, held_out=4096)
    truth = {**dict(TRUTH.score_clocks), **{name: getattr(TRUTH, name) for name in cal.BIAS_TERMS}}
    for name, error in v.uncertainty.items():
        if not np.isfinite(error):        # an op no record's bound moves (the bias's add, under its loads)
            assert v.value(name) == pytest.approx(counted(name, DATASHEET))
            continue
        got, want = v.value(name), truth[name]
        assert got == pytest.approx(want, rel=2e-2) if noise == 0 else abs(got - want) <= 4 * error + 1e-9
    held = v.errors["calibrated"]["all variants"]["held-out size"]
    assert held.median <= (1e-3 if noise == 0 else 2.5 * noise)
    assert v.errors["carried from softmax"]["all variants"]["held-out size"].median > held.median
    # the softmax records move nothing here: both models predict them alike
    assert v.errors["calibrated"]["mha"]["softmax"] == v.errors["carried from softmax"]["mha"]["softmax"]


def test_the_shipped_variants_fit_is_what_the_committed_recording_gives():
    r = calibrate(str(ROOT / "bench" / "results" / "hopper_sweep_h100.json"), "h100", variants=str(VARIANTS))
    shipped = yaml.safe_load((ROOT / "hardware" / "h100-calibrated.yaml").read_text())["calibration"]["hopper"]
    for name, estimate in shipped["score_clocks"].items():
        assert r.variants.value(name) == pytest.approx(estimate["value"], rel=1e-3)
    fitted = [name for name in cal.BIAS_TERMS if name in r.variants.uncertainty]   # the H100's has no FP8 sweep
    assert fitted == [name for name in cal.BIAS_TERMS if name in shipped]
    for name in fitted:
        assert getattr(r.variants.params, name) == pytest.approx(shipped[name]["value"], rel=1e-3)
    # and the profile's model uses them: a datasheet profile of the GPU ranks with its calibrated sibling's
    params = HopperParams.of(hardware.load("h100"))
    assert dict(params.score_clocks) == pytest.approx({k: e["value"] for k, e in shipped["score_clocks"].items()})


def test_a_recording_of_a_diagram_napkin_does_not_ship_is_refused_by_name(tmp_path):
    doc = json.loads(VARIANTS.read_text())
    doc["records"] = [dict(r, diagram="no_such_diagram") for r in doc["records"][:30]]
    path = tmp_path / "odd.json"
    path.write_text(json.dumps(doc))
    with pytest.raises(cal.NapkinError, match="no_such_diagram"):
        fit_variants(str(path), DATASHEET, SOFTMAX_FIT, held_out=4096)


def test_a_variants_recording_of_another_gpu_is_refused_before_any_fit():
    with pytest.raises(cal.NapkinError, match="measured on NVIDIA H100.*as --gpu says"):
        calibrate(str(ROOT / "bench" / "results" / "hopper_sweep_h200.json"), "h200", variants=str(VARIANTS))


@pytest.mark.slow(seconds=20)     # the H200's softmax fit, then its variants', FP8's among them
def test_the_h200s_fp8_terms_are_what_its_committed_recordings_give():
    """The H200's shipped fit prices FP8 (rounding the probabilities to e4m3 a score, FP8 wgmma's rate)
    as its committed recordings give it, and the FP8 kernel's records held out of it are predicted within
    the accuracy docs/section6.md states (median within the issue's 5 %, causal or not: the causal ones
    timed again on the kernel of the masked walk and the pair compare, 2026-11-29)."""
    results = ROOT / "bench" / "results"
    r = calibrate(str(results / "hopper_sweep_h200.json"), "h200", variants=str(results / "hopper_variants_h200.json"))
    shipped = yaml.safe_load((ROOT / "hardware" / "h200-calibrated.yaml").read_text())["calibration"]["hopper"]
    assert r.variants.value("e4m3") == pytest.approx(shipped["score_clocks"]["e4m3"]["value"], rel=1e-3)
    assert r.variants.params.fp8_tensor_efficiency == pytest.approx(shipped["fp8_tensor_efficiency"]["value"],
                                                                    rel=1e-3)
    v = r.variants
    fp8 = [i for i, rec in enumerate(v.records) if rec.dtype == "fp8"]
    held = [i for i in fp8 if v.split[i] != "train"]
    predicted = cal.predict(v.profile, [v.records[i] for i in held], v.params, [v.chains[i] for i in held])
    errors = np.abs(predicted / np.array([v.records[i].time_s for i in held]) - 1)
    causal = np.array([v.records[i].causal for i in held])
    assert len(fp8) == 144 and len(held) == 53 and causal.sum() == 31
    # 1.7 % and 1.2 % median (bench/results/hopper_variants_fp8_causal_h200.md for the causal records; on
    # the records before, timed on the kernel that masked every tile's first chunk, the causal median was 6-8 %)
    assert np.median(errors[~causal]) < 0.05 and np.median(errors[causal]) < 0.05
