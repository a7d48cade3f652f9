"""`napkin report`'s page in a real browser: headless Chromium (Debian's chromium and chromium-driver)
opens the written file, logs no error, lays out every figure and formula with a size, and screenshots it;
the adversarial page runs nothing. Skipped where Chromium is missing, except under CI (CI set), which
installs it: there a missing browser fails."""

from __future__ import annotations

import os

import pytest
from helpers_report import SAMPLE, adversarial, browser, browser_missing

try:
    from selenium.common.exceptions import NoAlertPresentException
except ImportError:          # the tests skip (or fail under CI) below
    NoAlertPresentException = Exception

from typer.testing import CliRunner

from analyzer.cli import app
from analyzer.common.atomic import write_text
from analyzer.report.page import SECTIONS, page

# Every inline figure and formula, with its laid-out size
BOXES = """return [...document.querySelectorAll('svg.figure, math')].map(e => {
    const r = e.getBoundingClientRect(); return [e.tagName.toLowerCase(), r.width, r.height]; });"""
# Every pair of text boxes in a section that overlap (by more than half a pixel each way): the boxes of
# its text nodes as laid out, table cells' and the mathematics' alike (a fraction's numerator and
# denominator, formulas stacked in one cell), a MathML annotation left out (it is not shown)
OVERLAPS = """const boxes = [];
const walk = document.createTreeWalker(document.getElementById(arguments[0]), NodeFilter.SHOW_TEXT);
for (let n = walk.nextNode(); n; n = walk.nextNode()) {
    if (!n.textContent.trim() || n.parentElement.closest('annotation')) continue;
    const range = document.createRange(); range.selectNodeContents(n);
    for (const r of range.getClientRects())
        if (r.width > 0 && r.height > 0) boxes.push([n.textContent.trim(), r.left, r.top, r.right, r.bottom]);
}
const overlaps = [];
for (let i = 0; i < boxes.length; i++) for (let j = i + 1; j < boxes.length; j++) {
    const [a, al, at, ar, ab] = boxes[i], [b, bl, bt, br, bb] = boxes[j];
    const wide = Math.min(ar, br) - Math.max(al, bl), high = Math.min(ab, bb) - Math.max(at, bt);
    if (wide > 0.5 && high > 0.5) overlaps.push([a, b, wide, high]);
}
return [boxes.length, overlaps];"""
# The model section's subscripts that name a memory level, and any token that reads l2 in italics
LEVELS = """const math = '#symbolic math';
return [[...document.querySelectorAll(math + ' mtext')].map(e => [e.textContent, getComputedStyle(e).fontStyle]),
        [...document.querySelectorAll(math + ' mi')].map(e => e.textContent).filter(t => /^[a-z]+[0-9]/.test(t))];"""


@pytest.fixture(scope="module")
def missing() -> None:
    why = browser_missing()
    if why and os.environ.get("CI", "").lower() not in ("", "0", "false"):
        pytest.fail(f"CI has no headless browser: {why}")
    if why:
        pytest.skip(why)


@pytest.mark.slow(seconds=8)    # a headless Chromium drives the page
def test_the_page_renders_in_chromium(missing, tmp_path):
    """The page `napkin report attention --gpu h100 --gpu h200 -o report.html` writes, end to end."""
    path = tmp_path / "report.html"
    diagram, gpus = SAMPLE
    result = CliRunner().invoke(app, ["report", diagram, *(w for g in gpus for w in ("--gpu", g)), "-o", str(path)])
    assert result.exit_code == 0 and path.is_file(), result.output
    shot = tmp_path / "report.png"
    with browser(tmp_path / "chromium") as driver:
        driver.get(path.resolve().as_uri())
        assert driver.title == "napkin report: attention on h100-sxm5, h200"
        headings = driver.execute_script(
            "return [...document.querySelectorAll('h1, h2')].map(h => h.textContent)")
        assert headings == ["napkin report: attention",
                            *(title for key, title in SECTIONS if key not in ("measured", "devices"))]
        boxes = driver.execute_script(BOXES)
        assert [tag for tag, *_ in boxes].count("svg") == 5 and [tag for tag, *_ in boxes].count("math") == 12
        flat = [(tag, w, h) for tag, w, h in boxes if not (w > 0 and h > 0)]
        assert not flat, flat
        # MathML Core lays a fraction out as one: taller than a line of its text
        assert max(h for tag, _, h in boxes if tag == "math") > 25
        # the model section: no two text boxes overlap (regression: H*'s denominator M sat on the M of
        # "at g_q = M/(2d)" below it), and the l2 level's subscripts read L2, upright (they read 12)
        count, overlaps = driver.execute_script(OVERLAPS, "symbolic")
        assert count > 100 and not overlaps, overlaps
        subscripts, italic_levels = driver.execute_script(LEVELS)
        assert subscripts and set(map(tuple, subscripts)) == {("L2", "normal")} and not italic_levels
        assert driver.execute_script("return document.querySelectorAll('script').length") == 0
        driver.save_screenshot(str(shot))
        severe = [e for e in driver.get_log("browser") if e["level"] == "SEVERE"]
    assert not severe, severe
    assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and shot.stat().st_size > 50_000


@pytest.mark.slow(seconds=6)
def test_the_adversarial_page_runs_nothing(missing, tmp_path):
    diagram, gpu = adversarial(tmp_path / "inputs")
    path = write_text(tmp_path / "report.html", page(str(diagram), [str(gpu)]), "--output")
    with browser(tmp_path / "chromium") as driver:
        driver.get(path.resolve().as_uri())
        assert driver.execute_script("return document.querySelectorAll('script, img, b').length") == 0
        assert driver.execute_script("return getComputedStyle(document.body).display") == "block"
        title = driver.execute_script("return document.querySelector('.subtitle').textContent")
        assert title.startswith("<script>alert(1)</script>")
        with pytest.raises(NoAlertPresentException):      # alert(...) never ran
            driver.switch_to.alert
        severe = [e for e in driver.get_log("browser") if e["level"] == "SEVERE"]
    assert not severe, severe
