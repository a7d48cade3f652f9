"""napkin sweep's order is the one its title states: fastest first, with predictions within TIE of a
group's fastest ordered by the tie rule (regression: "fastest first" above 42.55 us then 42.38 us,
the tie rule said only in the docs)."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from analyzer.cli import app
from analyzer.config.choose import TIE
from analyzer.config.sweep import sweep


@pytest.mark.parametrize("diagram, gpu", [("matmul", "h200"), ("attention", "a100"), ("mlp2", "h100")])
def test_a_slower_row_above_a_faster_one_is_a_tie(diagram, gpu):
    for s in sweep(diagram, gpu):
        times = [r.time_s for r in s.rows]
        group_fastest = times[0]
        for before, after in zip(times, times[1:]):
            if after > group_fastest * (1 + TIE):      # a new group starts no faster than the last
                assert after >= before * (1 - 1e-12)
                group_fastest = after
            else:
                assert after <= group_fastest * (1 + TIE)


def test_the_title_states_the_tie_rule():
    out = CliRunner().invoke(app, ["sweep", "matmul", "--gpu", "h200", "--top", "3"], env={"COLUMNS": "300"}).output
    out = " ".join(out.split())       # the title wraps to the table's width
    assert f"within {TIE:.1%} a tie" in out and "more stages, more rows" in out
