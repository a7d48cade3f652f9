"""A GPU profile with a missing bandwidth, a bool, text or an absurd number where a number belongs: every
command that takes a profile (`analyze`, `configure`, `kernel`, `sweep`, the plots, `calibrate`) gives
the same one-line error naming the profile file and the field, at load time; and a profile at the edges
of the plausible ranges (docs/hardware-profiles.md) never yields a prediction of nan or inf. Each bad
field's line names the field and what is wrong with it (a missing key, a bandwidth that is no positive
finite number, a file that is no mapping).
"""

from __future__ import annotations

import copy
import math
from pathlib import Path

import pytest
import yaml
from helpers_bad_input import check

from analyzer import hardware
from analyzer.codegen import generate
from analyzer.common import resources
from analyzer.common.errors import NapkinError
from analyzer.common.yamlio import load_file
from analyzer.config.configure import configure
from analyzer.config.sweep import sweep
from analyzer.model.analysis import analyze

ROOT = Path(__file__).resolve().parents[2]


def h100() -> dict:
    return copy.deepcopy(load_file(resources.shipped("hardware")["h100-sxm5"]))


def written(tmp_path: Path, edit) -> str:
    data = h100()
    edit(data)
    path = tmp_path / "gpu.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False), encoding="utf-8")
    return str(path)


def _roofline(gpu):
    from analyzer.plot.roofline import figure
    return figure("attention", [gpu], dtype=None, sets={})


def _calibrate(gpu):
    from analyzer.calibrate.calibrate import calibrate
    return calibrate(str(ROOT / "bench" / "results" / "sweep_h200.json"), gpu, samples=2)


COMMANDS = {
    "analyze": lambda gpu: analyze("attention", gpu),
    "configure": lambda gpu: configure("attention", gpu),
    "kernel": lambda gpu: generate("attention", gpu),
    "sweep": lambda gpu: sweep("attention", gpu),
    "plot": _roofline,
    "calibrate": _calibrate,
}

BAD = {
    # regression: kernel and sweep traced back (TypeError: int / None) where analyze named the field
    "missing-bandwidth": (lambda p: p["levels"][0].pop("bandwidth_bytes_per_s"),
                          "levels[0].bandwidth_bytes_per_s", "level gmem has no bandwidth"),
    # regression: true was read as 1 SM, and every command answered
    "bool-sm-count": (lambda p: p.__setitem__("sm_count", True), "sm_count", "valid integer"),
    "text-sm-count": (lambda p: p.__setitem__("sm_count", "132"), "sm_count", "valid integer"),
    "float-sm-count": (lambda p: p.__setitem__("sm_count", 132.5), "sm_count", "valid integer"),
    # regression: kernel and sweep traced back (ZeroDivisionError: mma_threads // warp_size)
    "huge-warp-size": (lambda p: p["threads"].__setitem__("warp_size", 1e15), "threads.warp_size",
                       "valid integer"),
    "big-warp-size": (lambda p: p["threads"].__setitem__("warp_size", 4096), "threads.warp_size",
                      "less than or equal to 1024"),
    "warp-size-not-dividing": (lambda p: p["threads"].__setitem__("warp_size", 48), "(top level)",
                               "not a whole number of warps"),
    "bool-bandwidth": (lambda p: p["levels"][3].__setitem__("bandwidth_bytes_per_s", True),
                       "levels[3].bandwidth_bytes_per_s", "valid number"),
    "absurd-clock": (lambda p: p["clocks"].__setitem__("tensor_hz", 1e300), "clocks.tensor_hz",
                     "less than or equal to"),
    "tiny-capacity": (lambda p: p["levels"][3].update(capacity_bytes=1e-300, capacity_bytes_per_block=1e-300),
                      "levels[3].capacity_bytes", "greater than or equal to 1"),
    "huge-mma-threads": (lambda p: p["divisors"].__setitem__("mma_threads", 10**15),
                         "divisors.mma_threads", "less than or equal to 1024"),
    "bool-mma-tile": (lambda p: p["divisors"]["mma"]["fp16"].__setitem__("k", True),
                      "divisors.mma.fp16.k", "valid integer"),
}


@pytest.mark.parametrize("command", COMMANDS)
@pytest.mark.parametrize("bad", BAD)
def test_bad_profile_is_the_same_error_for_every_command(tmp_path, bad, command):
    edit, field, says = BAD[bad]
    path = written(tmp_path, edit)
    with pytest.raises(NapkinError) as info:
        COMMANDS[command](path)
    err = info.value
    line = err.one_line()
    assert err.file == path and err.field == field, line
    assert says in err.message, line


EDGES = {
    "slow": lambda p: (p["clocks"].__setitem__("tensor_hz", 1e7), p.__setitem__("sm_count", 1),
                       p["levels"][0].__setitem__("bandwidth_bytes_per_s", 1e6)),
    "fast": lambda p: (p["clocks"].__setitem__("tensor_hz", 1e11),
                       p["tensor_flops_per_s"].__setitem__("fp16", 1e18),
                       [lv.__setitem__("bandwidth_bytes_per_s", 1e16) for lv in p["levels"][:2]]),
}


@pytest.mark.parametrize("edge", EDGES)
@pytest.mark.parametrize("diagram", ["attention", "matmul"])
def test_a_profile_at_the_edges_of_its_ranges_predicts_finite_times(tmp_path, edge, diagram):
    result = analyze(diagram, written(tmp_path, EDGES[edge]))
    assert 0 < result.totals.predicted_time_s < math.inf
    assert all(0 < k.predicted_time_s < math.inf for k in result.kernels)
    assert "nan" not in result.model_dump_json().lower().replace("nanos", "")


# -- each bad field's own line -------------------------------------------------------------------------

def profile_error(tmp_path: Path, edit) -> tuple[NapkinError, str]:
    path = written(tmp_path, edit)
    with pytest.raises(NapkinError) as info:
        analyze("attention", path)
    return info.value, path


@pytest.mark.parametrize("edit, field, key", [
    (lambda p: p.pop("sm_count"), "(top level)", "sm_count"),
    (lambda p: p["clocks"].pop("tensor_hz"), "clocks", "tensor_hz"),
    (lambda p: p["levels"][0].pop("kind"), "levels[0]", "kind"),
    (lambda p: p["divisors"].pop("mma"), "divisors", "mma"),
])
def test_profile_with_a_missing_key(tmp_path, edit, field, key):
    err, path = profile_error(tmp_path, edit)
    check(err, file=path, field=field, says=(f"missing required key {key!r}",))


@pytest.mark.parametrize("value", [-3.35e12, 0])
def test_profile_with_a_negative_or_zero_bandwidth(tmp_path, value):
    err, path = profile_error(tmp_path, lambda p: p["levels"][0].__setitem__("bandwidth_bytes_per_s",
                                                                              value))
    check(err, file=path, field="levels[0].bandwidth_bytes_per_s", says=("greater than or equal to 1000000",))


def test_profile_with_a_negative_cluster_bandwidth(tmp_path):
    err, path = profile_error(
        tmp_path, lambda p: p["levels"][2]["bandwidth_bytes_per_s_by_cluster"].__setitem__(2, -1.0))
    check(err, file=path, field="levels[2].bandwidth_bytes_per_s_by_cluster[2]")


@pytest.mark.parametrize("value", [float("inf"), float("nan")])
def test_profile_with_a_bandwidth_that_is_not_finite(tmp_path, value):
    # regression: .inf passed PositiveFloat and was used (transfers then cost nothing).
    err, path = profile_error(tmp_path, lambda p: p["levels"][0].__setitem__("bandwidth_bytes_per_s",
                                                                              value))
    check(err, file=path, field="levels[0].bandwidth_bytes_per_s")


def test_profile_that_is_not_a_mapping(tmp_path):
    path = tmp_path / "gpu.yaml"
    path.write_text("- 1\n- 2\n", encoding="utf-8")
    with pytest.raises(NapkinError) as info:
        hardware.load(str(path))
    check(info.value, file=str(path), field="(top level)", says=("expected a mapping",))


def test_profile_with_a_bad_value_type(tmp_path):
    err, path = profile_error(tmp_path, lambda p: p.__setitem__("sm_count", "many"))
    check(err, file=path, field="sm_count", says=("many",))


# regression: the error named neither the profile file nor the field.
def test_profile_level_without_bandwidth_names_the_file(tmp_path):
    err, path = profile_error(tmp_path, lambda p: p["levels"][0].pop("bandwidth_bytes_per_s"))
    check(err, file=path, field="levels[0].bandwidth_bytes_per_s", says=("bandwidth",))
