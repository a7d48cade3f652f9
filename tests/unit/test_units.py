"""Times as the reports print them (analyzer.common.units.seconds)."""

from __future__ import annotations

import re

from hypothesis import given
from hypothesis import strategies as st

from analyzer.common.units import seconds
from analyzer.model.analysis import analyze
from analyzer.report.analysis import render

FORMAT = re.compile(r"-?[0-9.]+(e[+-]?[0-9]+)? (s|ms|us|ns)")


@given(st.floats(min_value=1e-12, max_value=1e4, allow_nan=False))
def test_a_negative_time_keeps_its_unit_and_sign(t):
    assert seconds(-t) == "-" + seconds(t)
    assert FORMAT.fullmatch(seconds(t))


@given(st.floats(min_value=1e-9, max_value=999.0))
def test_the_unit_keeps_one_to_999_of_it(t):
    value = float(seconds(t).split()[0])
    assert 1 <= value < 1000 or t < 1e-9


def test_a_cluster_level_prints_its_time_in_microseconds():
    """regression: --cluster 2 printed the dsmem level's time as -3.733e+04 ns, and then as -37.33 us: a
    time is never negative (the level's transfers from l2, Theorem 3's Equation 11)."""
    from rich.console import Console
    console = Console(width=300, record=True)
    console.print(render(analyze("attention", "h100", cluster=2)))
    text = console.export_text()
    assert "e+04 ns" not in text and re.search(r"dsmem .*│ [0-9.]+ us", text)
    assert not re.search(r"│ -[0-9.]+ [mun]?s\b", text)


def test_a_remembered_substitution_is_sympys():
    """expr.at remembers substitutions; whatever it serves is what subs gives, for any values."""
    import sympy

    from analyzer.common.expr import at, symbol
    q, x = symbol("q"), symbol("x")
    e = 2 * q * x + q ** 2 / x
    for values in ({"q": 3, "x": 5}, {q: 3, "x": 5}, {"q": sympy.Rational(1, 3), "x": 7}, {"q": 3, "x": 5}):
        expected = e.subs({q: values.get(q, values.get("q")), x: values["x"]})
        assert at(e, values) == expected
