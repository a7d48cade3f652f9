"""napkin analyze --plot: the expected time per size, per GPU. A calibrated model and the idealised one
are told apart by the legend's words and by their line style, and a plot that draws both says which
curves compare like with like (regression: an A100 timed by the idealised model was drawn solid, as the
H100's calibrated model is, and looked 6x faster at q = 1024)."""

from __future__ import annotations

from functools import cache

from analyzer.model.analysis import analyze
from analyzer.model.result import Analysis, Comparison, ExpectedOut, SizeOut
from analyzer.plot import sizes

QS = (1024, 2048, 4096)
MEASURED = "the Hopper kernel's model calibrated on h100-calibrated"
IDEALISED = "the paper's idealised model with napkin sweep's terms: no one has fitted the portable kernel's model on a100"


@cache
def base(gpu: str) -> Analysis:
    return analyze("attention", gpu)


def at(gpu: str, q: int, *, calibrated: bool | None, fitted_profile: bool = False) -> Analysis:
    """napkin analyze's analysis on `gpu`, said to be at q (the plot reads only the sizes, the times and
    how they were modelled): expected by a calibrated model, by the idealised one, or none (None)."""
    a = base(gpu)
    expected = None if calibrated is None else ExpectedOut(
        backend="hopper", configuration="c", time_s=q * 1e-9 * (3 if calibrated else 1),
        throughput_flops_per_s=1.0, bound="tensor", model=MEASURED if calibrated else IDEALISED,
        calibrated=calibrated, sizes={"q": q})
    gpu_out = a.gpu.model_copy(update={"calibration": {"level_overlap": 0.5} if fitted_profile else None})
    return a.model_copy(update={"sizes": [SizeOut(axis="q", expression="q", value=q)], "expected": expected,
                                "gpu": gpu_out})


def comparison(*per_gpu: tuple[str, dict]) -> Comparison:
    return Comparison(napkin_version="0", varied=["q"],
                      analyses=[at(gpu, q, **kind) for gpu, kind in per_gpu for q in QS])


def lines(fig) -> dict[str, object]:
    (ax,) = fig.axes
    return {line.get_gid(): line for line in ax.lines if line.get_gid()}


def legend(fig) -> dict[str, object]:
    (ax,) = fig.axes
    leg = ax.get_legend()
    return {t.get_text(): h for t, h in zip(leg.get_texts(), leg.legend_handles, strict=True)}


def test_a_calibrated_and_an_idealised_gpu_are_drawn_and_named_apart():
    fig = sizes.figure(comparison(("h100-sxm5", {"calibrated": True}), ("a100", {"calibrated": False})))
    drawn = lines(fig)
    measured, idealised = drawn["expected:h100-sxm5:calibrated"], drawn["expected:a100:idealised"]
    assert measured.get_linestyle() == "-" and idealised.get_linestyle() == "-."
    names = legend(fig)
    assert names["h100-sxm5: expected, calibrated model"].get_linestyle() == "-"
    assert names["a100: expected, idealised model (not calibrated)"].get_linestyle() == "-."
    bound = names["napkin analyze: idealised bound (datasheet rates)"]
    assert bound.get_linestyle() == "--" and drawn["beside:a100"].get_linestyle() == "--"
    assert len({measured.get_linestyle(), idealised.get_linestyle(), bound.get_linestyle()}) == 3
    # the idealised GPU's points are hollow, the calibrated one's filled
    (ax,) = fig.axes
    points = [line for line in ax.lines if not line.get_gid() and line.get_marker() not in ("None", None)]
    faces = {line.get_color(): line.get_markerfacecolor() for line in points}
    assert faces[measured.get_color()] == measured.get_color() and faces[idealised.get_color()] == "white"
    # the footnote names each model (where the calibrated one was measured) and says what compares
    note = fig.get_supxlabel()
    assert f"h100-sxm5: {MEASURED}" in note and f"a100: {IDEALISED}" in note
    assert "compare it with h100-sxm5's dashed idealised bound, not the solid calibrated line" in note


def test_gpus_of_one_kind_need_no_warning_and_a_fitted_profile_says_so():
    fig = sizes.figure(comparison(("h100-sxm5", {"calibrated": True}),
                                  ("h200", {"calibrated": True, "fitted_profile": True})))
    names = legend(fig)
    assert names["napkin analyze with the profile's fitted parameters"].get_linestyle() == ":"
    assert lines(fig)["beside:h200"].get_linestyle() == ":"
    assert "compare" not in fig.get_supxlabel()
    assert not any("idealised model" in text for text in names)


def test_a_gpu_without_a_generated_kernel_draws_napkin_analyze_alone():
    fig = sizes.figure(comparison(("a100", {"calibrated": None})))
    assert set(lines(fig)) == {"beside:a100"}
    assert "a100: no generated kernel" in fig.get_supxlabel()
