"""napkin calibrate --plot: the predicted-against-measured scatter, on a few synthetic records."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest

from analyzer.report.calibration import scatter


@pytest.fixture(scope="module")
def fig():
    """The scatter of six records: only what it reads of napkin calibrate's Result."""
    times = np.array([1e-5, 3e-5, 1e-4, 3e-4, 1e-3, 3e-3])
    records = [SimpleNamespace(time_s=t, family=fam)
               for t, fam in zip(times, ["matmul"] * 3 + ["attention"] * 3, strict=True)]
    result = SimpleNamespace(records=records, splits=np.array(["train", "configs", "train"] * 2),
                             predictions={"datasheet": times * 0.6, "calibrated": times * 1.05},
                             base=SimpleNamespace(name="h200"),
                             calibrated=SimpleNamespace(name="h200-calibrated"))
    return scatter(result)


def test_the_tolerance_band_has_a_legend_entry(fig):
    """Each panel's dotted band (predicted within 10 % of measured) is named in its legend, once."""
    assert len(fig.axes) == 2
    for ax in fig.axes:
        dotted = [line for line in ax.lines if line.get_linestyle() == ":"]
        assert dotted, "no band drawn"
        legend = [t.get_text() for t in ax.get_legend().get_texts()]
        for band in dotted:
            assert legend.count(band.get_label()) == 1, (band.get_label(), legend)
        (band,) = dotted   # both edges, one artist: one legend entry
        assert "\u00b110 %" in band.get_label()
        low, high = ax.get_xlim()
        ys = band.get_ydata()
        np.testing.assert_allclose(ys[~np.isnan(ys)], [low * 0.9, high * 0.9, low * 1.1, high * 1.1])
        assert "predicted = measured" in legend
