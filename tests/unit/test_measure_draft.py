"""napkin hardware draft's profile (analyzer.measure.draft) from a device's reported properties and
measured rates, without a GPU: the file loads as a profile, names a source on every figure's line,
takes the device's figures where it reports them, flags what it assumes from another compute
capability, and predicts the shipped GPU it drafts near that GPU's datasheet profile."""

from __future__ import annotations

import re

import pytest

from analyzer import hardware
from analyzer.common.errors import NapkinError
from analyzer.measure.device import Device
from analyzer.measure.draft import Measured, Properties, draft, reference
from analyzer.model.analysis import analyze

H100 = Device(0, "NVIDIA H100 80GB HBM3", "9.0", 132, 85_029_158_912, 52_428_800)
# what an H100 SXM5's driver reports (clock 1980 MHz; HBM3 at 2619 MHz on a 5120-bit bus)
H100_PROPS = Properties(H100, 233_472, 232_448, 65_536, 2048, 32, 1.98e9, 2.619e9, 5120)
H100_RATES = Measured(3.0e12, {"fp16": 7.4e14, "bf16": 7.5e14}, "a test's rates")
RTX4090 = Device(0, "NVIDIA GeForce RTX 4090", "8.9", 128, 25_393_692_672, 75_497_472)


def _written(tmp_path, text: str):
    path = tmp_path / "drafted.yaml"
    path.write_text(text)
    return hardware.load(str(path))


def test_the_draft_loads_and_every_figure_names_its_source(tmp_path):
    text = draft(H100_PROPS, H100_RATES, "2026-11-28")
    p = _written(tmp_path, text)
    assert p.sm_count == 132 and p.levels[0].capacity_bytes == 85_029_158_912
    assert p.level("smem").capacity_bytes_per_block == 232_448 and p.clocks.boost_hz == 1.98e9
    assert p.levels[0].bandwidth_bytes_per_s == pytest.approx(2 * 2.619e9 * 5120 / 8)      # 3.35 TB/s
    figures = [ln for ln in text.splitlines() if re.match(r"^\s*[a-z_0-9]+: [^\[{]", ln) and
               not ln.lstrip().startswith(("name:", "description:", "kind:", "- name:"))]
    assert figures and all("  # " in ln for ln in figures if not re.match(r"^\s+\d+: ", ln)), \
        [ln for ln in figures if "  # " not in ln]
    assert "ASSUMED," not in text and "hardware/h100-sxm5.yaml" in text    # its own compute capability's


def test_it_predicts_the_h100_within_15_percent_of_the_datasheet_profile(tmp_path):
    drafted = _written(tmp_path, draft(H100_PROPS, H100_RATES, "2026-11-28"))
    for diagram in ("attention", "matmul"):
        ours = analyze(diagram, drafted).totals.predicted_time_s
        sheet = analyze(diagram, "h100-sxm5").totals.predicted_time_s
        assert ours == pytest.approx(sheet, rel=0.15), diagram


def test_without_the_clocks_it_derives_them_from_the_measurements_and_says_so(tmp_path):
    props = Properties(H100)              # a torch that reports nothing beyond the device
    text = draft(props, H100_RATES, "2026-11-28")
    p = _written(tmp_path, text)
    assert p.levels[0].bandwidth_bytes_per_s == 3.0e12 and "measured: a device-to-device copy" in text
    assert p.clocks.boost_hz == pytest.approx(7.4e14 / (4096 * 132), rel=1e-3)
    assert "a lower bound" in text


def test_another_compute_capability_is_assumed_and_flagged(tmp_path):
    name, ref, exact = reference(RTX4090)
    assert (name, exact) == ("a100", False)     # the nearest shipped below cc 8.9
    text = draft(Properties(RTX4090, clock_hz=2.52e9), Measured(1.0e12, {"fp16": 1.6e14}), "2026-11-28")
    p = _written(tmp_path, text)
    assert p.compute_capability == "8.9" and p.sm_count == 128
    assert text.count("ASSUMED") >= 5 and "hardware/a100.yaml (cc 8.0)" in text


def test_a_name_that_is_no_plain_word_stays_text(tmp_path):
    odd = Device(0, 'GPU "x": {y} #z\nnext', "9.0", 132, 85_029_158_912)
    p = _written(tmp_path, draft(Properties(odd, clock_hz=1.98e9), H100_RATES, "2026-11-28"))
    assert p.description == odd.name + " (drafted)"


def test_a_device_below_every_shipped_profile_is_refused():
    with pytest.raises(NapkinError, match="no shipped profile has a compute capability"):
        reference(Device(0, "Tesla P100", "6.0", 56, 17_000_000_000))
