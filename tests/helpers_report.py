"""Shared by the tests of `napkin report`'s page (tests/unit/test_report_page.py, test_report_browser.py):
an adversarial diagram and GPU profile, and a headless Chromium driven by selenium.

Run as a script, it writes the documentation's sample page and its screenshot:

    python tests/helpers_report.py docs      # docs/report-sample.html and docs/report-sample.png
"""

from __future__ import annotations

import contextlib
import os
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import yaml

from analyzer.common import resources

CHROMIUM = Path("/usr/bin/chromium")
CHROMEDRIVER = Path("/usr/bin/chromedriver")
SAMPLE = ("attention", ["h100", "h200"])    # docs/report-sample.html: napkin report attention --gpu h100 --gpu h200

# Markup that would run, load or style something if a page inserted it unescaped
SCRIPT = "<script>alert(1)</script>"
PAYLOADS = {"title": f'{SCRIPT} & "quoted" </style><style>body{{display:none}}</style>',
            "paper": "<img src=x onerror=alert(2)>", "doc": f"--><!-- {SCRIPT}"}


def adversarial(folder: Path) -> tuple[Path, Path]:
    """(diagram, profile): attention and the H100 with markup in every free text napkin shows (title,
    paper, docs, the profile's name and description) and in their paths: the diagram is
    `<script>alert(1)</script>.yaml` across a folder `<script>alert(1)<` and a file `script>.yaml`."""
    data = yaml.safe_load((resources.data_dir("diagrams") / "attention.yaml").read_text())
    data.update(PAYLOADS)
    for axis in data["axes"].values():
        if isinstance(axis, dict):
            axis["doc"] = PAYLOADS["doc"]
    for op in data["ops"]:
        op["doc"] = PAYLOADS["doc"]
    profile = yaml.safe_load((resources.data_dir("hardware") / "h100-sxm5.yaml").read_text())
    profile.update(name="<script>alert(3)</script>", aliases=[],
                   description="<b>bold</b> & <script>alert(4)</script>")
    inner = folder / "<script>alert(1)<"
    inner.mkdir(parents=True, exist_ok=True)
    diagram, gpu = inner / "script>.yaml", inner / "gpu&<i>.yaml"
    diagram.write_text(yaml.safe_dump(data, sort_keys=False))
    gpu.write_text(yaml.safe_dump(profile, sort_keys=False))
    return diagram, gpu


def browser_missing() -> str | None:
    """Why no headless Chromium can run here, or None."""
    for path in (CHROMIUM, CHROMEDRIVER):
        if not path.exists():
            return f"{path} is missing (apt-get install -y chromium chromium-driver)"
    try:
        import selenium  # noqa: F401
    except ImportError:
        return "selenium is not installed (pip install -e '.[test]')"
    return None


@contextlib.contextmanager
def browser(profile_dir: Path, width: int = 1280, height: int = 1000) -> Iterator:
    """A headless Chromium that keeps to itself (no network of its own, no sync, no updates), its
    console log at every level."""
    from selenium import webdriver
    from selenium.webdriver.chrome.options import Options
    from selenium.webdriver.chrome.service import Service
    options = Options()
    options.binary_location = str(CHROMIUM)
    for argument in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                     "--no-first-run", "--disable-background-networking", "--disable-component-update",
                     "--disable-sync", f"--user-data-dir={profile_dir}", f"--window-size={width},{height}"):
        options.add_argument(argument)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver = webdriver.Chrome(service=Service(str(CHROMEDRIVER)), options=options)
    try:
        driver.set_page_load_timeout(20)
        yield driver
    finally:
        driver.quit()


def write_sample(folder: Path) -> tuple[Path, Path]:
    """docs/report-sample.html and a screenshot of its top, report-sample.png."""
    from analyzer.common.atomic import write_text
    from analyzer.report.page import page
    html = folder / "report-sample.html"
    write_text(html, page(*SAMPLE, path=html), "--output")
    png = folder / "report-sample.png"
    with tempfile.TemporaryDirectory() as profile, browser(Path(profile), 1280, 1800) as driver:
        driver.get(html.resolve().as_uri())
        driver.save_screenshot(str(png))
    return html, png


if __name__ == "__main__":
    os.environ.setdefault("NAPKIN_CACHE", "off")
    for written in write_sample(Path(sys.argv[1] if len(sys.argv) > 1 else "docs")):
        print(f"wrote {written}")
