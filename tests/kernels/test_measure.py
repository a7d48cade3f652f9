"""napkin measure's pipeline (analyzer.measure) on the CPU: the generated module run under Triton's
interpreter at small sizes, checked against float64, its timer replaced by one that says what it was
asked; and the command's screens, JSON and exit codes around it."""

from __future__ import annotations

import json

import pytest
from run_napkin import in_process

from analyzer import measure as measure_pkg
from analyzer.codegen import generate
from analyzer.measure import reference
from analyzer.measure.device import Device
from analyzer.measure.result import Measurement, TimingOut

torch = pytest.importorskip("torch")

H100 = Device(0, "NVIDIA H100 80GB HBM3", "9.0", 132, 85_029_158_912)
SMALL = {"attention": {"q": 100, "x": 70, "d": 64}, "matmul": {"a": 48, "b": 80, "c": 40},
         "mlp2": {"n": 40, "i": 32, "f": 64, "o": 48}}


def clock(seconds: float, calls: list):
    """A timer that records the call it was given (and calls it once) and answers `seconds`."""
    def timer(fn, rep_ms):
        fn()
        calls.append(rep_ms)
        return TimingOut(method="a test's clock", repetitions_ms=rep_ms, time_s=seconds, time_s_p20=seconds * 0.99,
                         time_s_p80=seconds * 1.01)
    return timer


@pytest.mark.parametrize("diagram", sorted(SMALL))
def test_a_measurement_checks_the_kernel_then_times_it_beside_the_prediction(diagram):
    calls: list = []
    m = measure_pkg.measure(diagram, sets=SMALL[diagram], backend="triton", device=H100, tensors_on="cpu",
                            timer=clock(2e-3, calls), rep_ms=7.0)
    g = generate(diagram, "h100-sxm5", backend="triton", sets=SMALL[diagram])
    assert m.device.profile == "h100-sxm5" and "found from the device" in m.device.profile_found
    assert m.check.passed and 0 <= m.check.max_error <= m.check.tolerance and calls == [7.0]
    assert m.predicted.time_s == pytest.approx(g.expected.time_s)
    assert m.predicted.configuration == g.expected.configuration
    assert m.measured_over_predicted == pytest.approx(2e-3 / g.expected.time_s)
    assert m.throughput_flops_per_s == pytest.approx(g.expected.tensor_flops / 2e-3)
    assert all(m.sizes[k] == v for k, v in SMALL[diagram].items())
    assert Measurement.model_validate_json(m.model_dump_json()) == m


def test_a_wrong_kernel_is_not_timed(monkeypatch):
    """The check compares against the float64 reference: a reference moved by 1 % of its largest value
    fails it, and the timer is never asked."""
    real = reference.reference

    def moved(torch_, g, xs, sizes=None):
        want = real(torch_, g, xs, sizes)
        return want + 0.01 * want.abs().max()

    monkeypatch.setattr("analyzer.measure.run.reference", moved)
    calls: list = []
    m = measure_pkg.measure("matmul", sets=SMALL["matmul"], backend="triton", device=H100, tensors_on="cpu",
                            timer=clock(1.0, calls))
    assert not m.check.passed and m.check.max_error > m.check.tolerance
    assert m.timing is None and m.measured_over_predicted is None and calls == []


def test_a_given_profile_is_used_and_said_so():
    m = measure_pkg.measure("matmul", "a100", sets=SMALL["matmul"], device=H100, tensors_on="cpu",
                            timer=clock(1e-3, []))
    assert m.device.profile == "a100" and m.device.profile_found == "given with --gpu"
    assert m.predicted.backend == "triton"


@pytest.mark.parametrize("passed", [True, False])
def test_the_command_prints_writes_and_exits_as_the_check_says(passed, tmp_path, monkeypatch):
    """The screen, --json and -o carry the same measurement; a failed check exits 3 with one line."""
    m = measure_pkg.measure("matmul", sets=SMALL["matmul"], backend="triton", device=H100, tensors_on="cpu",
                            timer=clock(1e-3, []))
    if not passed:
        m = m.model_copy(update={"check": m.check.model_copy(update={"passed": False, "max_error": 1.0}),
                                 "timing": None, "measured_over_predicted": None, "throughput_flops_per_s": None})
    monkeypatch.setattr(measure_pkg, "measure", lambda *a, **k: m)
    screen = in_process(tmp_path, "measure", "matmul")
    shown = in_process(tmp_path, "measure", "matmul", "--json", "-o", "m.json")
    assert screen.returncode == shown.returncode == (0 if passed else 3)
    assert "h100-sxm5" in screen.stdout and ("passed" if passed else "FAILED") in screen.stdout
    assert Measurement.model_validate_json(shown.stdout) == m
    assert json.loads((tmp_path / "m.json").read_text()) == json.loads(shown.stdout)
    if not passed:
        assert screen.stderr.count("\n") == 1 and "wrong on this GPU" in screen.stderr


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has a CUDA device")
def test_without_a_cuda_device_it_says_so_in_one_line(tmp_path):
    r = in_process(tmp_path, "measure", "attention")
    assert r.returncode == 1 and r.stdout == "" and r.stderr.count("\n") == 1
    assert r.stderr.startswith("error: no CUDA device")


def test_the_json_follows_napkin_schema_measurement(tmp_path):
    jsonschema = pytest.importorskip("jsonschema")
    schema = json.loads(in_process(tmp_path, "schema", "measurement").stdout)
    m = measure_pkg.measure("mlp2", sets=SMALL["mlp2"], backend="triton", device=H100, tensors_on="cpu",
                            timer=clock(1e-3, []))
    jsonschema.Draft202012Validator(schema).validate(json.loads(m.model_dump_json()))


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has a CUDA device")
def test_a_draft_without_a_cuda_device_says_so_and_writes_nothing(tmp_path):
    r = in_process(tmp_path, "hardware", "draft", "-o", "gpu.yaml")
    assert r.returncode == 1 and r.stderr.count("\n") == 1 and "no CUDA device" in r.stderr
    assert not (tmp_path / "gpu.yaml").exists()
