"""napkin report --measurement: what napkin measure wrote, in its own section beside the prediction;
a file that is no measurement, or one of another diagram, refused in one line."""

from __future__ import annotations

import pytest
from run_napkin import in_process

from analyzer.codegen import generate
from analyzer.config.launch import expected_out
from analyzer.measure.result import CheckOut, DeviceOut, Measurement, TimingOut


@pytest.fixture(scope="module")
def measured():
    g = generate("attention", "h100-sxm5")
    return Measurement(
        diagram="attention", dtype="fp16", sizes=dict(g.expected.sizes),
        device=DeviceOut(name="NVIDIA H100 80GB HBM3", compute_capability="9.0", sm_count=132,
                         memory_bytes=85_029_158_912, profile="h100-sxm5", profile_found="found from the device"),
        check=CheckOut(max_error=3.9e-4, tolerance=0.0625, passed=True),
        timing=TimingOut(method="CUDA events around repeated calls", repetitions_ms=100.0, time_s=207.1e-6,
                         time_s_p20=206.6e-6, time_s_p80=207.4e-6),
        predicted=expected_out(g.expected), measured_over_predicted=207.1e-6 / g.expected.time_s,
        throughput_flops_per_s=g.expected.tensor_flops / 207.1e-6)


@pytest.mark.slow(seconds=20)
def test_the_page_shows_the_measurement_beside_its_prediction(measured, tmp_path):
    (tmp_path / "m.json").write_text(measured.model_dump_json())
    r = in_process(tmp_path, "report", "attention", "-o", "r.html", "--measurement", "m.json")
    assert r.returncode == 0, r.stderr
    html = (tmp_path / "r.html").read_text()
    assert 'href="#measured"' in html and 'id="measured"' in html
    assert "207.1 us" in html and "NVIDIA H100 80GB HBM3 (h100-sxm5)" in html
    assert f"{measured.measured_over_predicted:.3f}" in html


@pytest.mark.parametrize("content, said", [("{}", "missing required key"), ("[1, 2", "is not JSON"),
                                           (None, "no such measurement")])
def test_a_file_that_is_no_measurement_is_refused_in_one_line(content, said, tmp_path):
    if content is not None:
        (tmp_path / "m.json").write_text(content)
    r = in_process(tmp_path, "report", "attention", "-o", "r.html", "-m", "m.json")
    assert r.returncode == 1 and r.stderr.count("\n") == 1 and said in r.stderr, r.stderr
    assert not (tmp_path / "r.html").exists()


def test_a_measurement_of_another_diagram_is_refused(measured, tmp_path):
    (tmp_path / "m.json").write_text(measured.model_copy(update={"diagram": "mha"}).model_dump_json())
    r = in_process(tmp_path, "report", "attention", "-o", "r.html", "-m", "m.json")
    assert r.returncode == 1 and "a measurement of 'mha'" in r.stderr and r.stderr.count("\n") == 1
    assert not (tmp_path / "r.html").exists()
