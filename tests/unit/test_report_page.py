"""`napkin report`'s page (analyzer/report/page.py): one self-contained HTML file with every section, the
same bytes for the same inputs, nothing fetched, every user's string escaped, the mathematics MathML.
tests/unit/test_report_browser.py renders it in a real browser."""

from __future__ import annotations

import re
from html.parser import HTMLParser

import pytest
import sympy
from helpers_report import SAMPLE, SCRIPT, adversarial

from analyzer import hardware
from analyzer.common import resources
from analyzer.common.errors import NapkinError
from analyzer.model.analysis import analyze
from analyzer.model.result import ExpectedOut
from analyzer.report.html import MATHML_CORE, esc, linked, math
from analyzer.report.page import SECTIONS, accuracy, doc_links, page


@pytest.fixture(scope="module")
def sample() -> str:
    return page(*SAMPLE)


class Elements(HTMLParser):
    """Every start tag with its attributes, and the text of <title>, <h1>-<h3> and <code>."""

    def __init__(self, text: str) -> None:
        super().__init__(convert_charrefs=True)
        self.tags: list[tuple[str, dict[str, str | None]]] = []
        self.text: dict[str, list[str]] = {}
        self._open: list[str] = []
        self.feed(text)

    def handle_starttag(self, tag, attrs):
        self.tags.append((tag, dict(attrs)))
        self._open.append(tag)

    def handle_endtag(self, tag):
        if tag in self._open:
            del self._open[len(self._open) - 1 - self._open[::-1].index(tag):]

    def handle_data(self, data):
        if self._open and self._open[-1] in ("title", "h1", "h2", "h3", "code"):
            self.text.setdefault(self._open[-1], []).append(data)


def test_the_page_has_every_section(sample):
    found = Elements(sample)
    ids = {attrs.get("id") for tag, attrs in found.tags if tag == "section"}
    # measured: with --measurement; devices: with --devices
    shown = [(key, title) for key, title in SECTIONS if key not in ("measured", "devices")]
    assert ids == {key for key, _ in shown} and 'href="#measured"' not in sample
    assert [h for h in found.text["h2"]] == [title for _, title in shown]
    assert found.text["title"] == ["napkin report: attention on h100-sxm5, h200"]
    assert found.text["h1"] == ["napkin report: attention"]
    head = sample[:sample.index("</header>")]
    for needed in ("diagrams/attention.yaml", "h100-sxm5", "h200", "q=16384", "napkin</dt><dd>0.1.0",
                   "napkin report attention --gpu h100 --gpu h200"):
        assert needed in head, needed
    # the prediction leads with the generated kernel's expected time, the idealised bound beside it
    prediction = sample[sample.index('id="prediction"'):sample.index('id="diagram"')]
    assert prediction.index("expected 234.7 us, 586 TFLOP/s: the Hopper kernel") < prediction.index(
        "beside it 143.3 us, 959 TFLOP/s: the paper&#x27;s idealised bound")
    assert prediction.count("tensor-bound") >= 2
    # one drawing, two schedules, the curves and the roofline: five figures
    assert sum(tag == "svg" for tag, _ in found.tags) == 5
    for key in ("diagram", "transfers", "roofline"):
        part = sample[sample.index(f'id="{key}"'):]
        assert part.index("<svg") < part.index("</section>"), key
    configuration = sample[sample.index('id="configuration"'):sample.index('id="transfers"')]
    for title in ("Configuration (Table 1)", "Maximum analysis (Table 2", "Compute analysis (Table 3)",
                  "Throughput analysis (Appendix B.0.1)", "Overlap (Section 6)"):
        assert configuration.count(title) == 2, title         # once per GPU
    assert configuration.count("<caption>") == 8 and configuration.count("<svg") == 2
    tiles = sample[sample.index('id="tiles"'):sample.index('id="configuration"')]
    assert tiles.count("g_q=128, s_x=16") == 2 and "311 MB" in tiles     # chosen tiles; H*(M_l)
    assumptions = sample[sample.index('id="assumptions"'):sample.index('id="analysis"')]
    assert "Kernels run one after another." in assumptions and "h100-calibrated" in assumptions
    kernel = sample[sample.index('id="kernel"'):]
    assert kernel.count('<pre><code class="language-python">') == 2
    assert "napkin kernel attention --gpu h100-sxm5 --backend hopper --dtype fp16" in kernel
    assert "@gluon.jit" in kernel


def test_the_same_inputs_give_the_same_page(sample):
    assert page(*SAMPLE) == sample


def test_nothing_is_fetched(sample):
    """The only references are fragments of the page itself and links to napkin's documents, which a
    browser opens only when they are clicked; no script, stylesheet or image element."""
    refs = re.findall(r"""\b(?:src|href|xlink:href|action|poster|srcset)\s*=\s*["']?([^"'\s>]*)""", sample, re.I)
    refs += re.findall(r"""url\(\s*["']?([^"')]*)""", sample, re.I)
    docs = set(re.findall(r'<a href="([^"]+)" class="doc">', sample))
    assert refs and docs and all(r.startswith("#") or r in docs for r in refs), \
        sorted({r for r in refs if not r.startswith("#")} - docs)
    assert "@import" not in sample
    tags = {tag for tag, _ in Elements(sample).tags}
    assert not tags & {"script", "link", "img", "iframe", "object", "embed", "base", "audio", "video",
                       "source", "form"}
    assert not any(name.startswith("on") for _, attrs in Elements(sample).tags for name in attrs)
    assert "<?xml" not in sample and "<!DOCTYPE svg" not in sample and "<metadata>" not in sample


def test_figures_keep_their_ids_apart(sample):
    ids = re.findall(r'\bid="([^"]+)"', sample)
    assert len(ids) == len(set(ids))
    defined = set(ids)
    used = re.findall(r'(?:href="#|url\(#)([^")]+)', sample)
    assert used and set(used) <= defined


def test_the_mathematics_is_mathml(sample):
    symbolic = sample[sample.index('id="symbolic"'):sample.index('id="tiles"')]
    maths = re.findall(r"<math\b.*?</math>", symbolic, re.S)
    assert len(maths) == 2 * 6          # H, H_g, N_g, M, H* and g*(M) at l2 and smem, one kernel
    for m in maths:
        assert set(re.findall(r"<([a-z]+)\b", m)) <= MATHML_CORE, m
        assert "\\frac" not in m and "$" not in m       # no LaTeX for a script to typeset
    assert "<mfrac><mrow><mn>4</mn><mo>&InvisibleTimes;</mo><msup><mi>d</mi><mn>2</mn></msup>" in symbolic
    assert '<annotation encoding="text/plain">2*d*q + 4*d**2*q*x/M</annotation>' in symbolic   # H*(a, M)
    assert '<annotation encoding="text/plain">g_q = M/(2*d)</annotation>' in symbolic
    # the implied l2 level's group sizes are its own, their subscript the level upright (<mi>l2</mi> read 12)
    assert '<annotation encoding="text/plain">g_q_l2 = M/(2*d)</annotation>' in symbolic
    assert '<msub><mi>g</mi><mrow><mi>q</mi><mo>,</mo><mtext class="level">L2</mtext></mrow></msub>' in symbolic
    assert "<mi>l2</mi>" not in symbolic


def test_doc_references_link_the_documents(sample, tmp_path):
    """Every mention of one of napkin's documents is a link to it (regression: bare paths): relative to
    the folder the page is written in, so docs/report-sample.html links `model.md`; absolute without a
    place (page's default); in napkin analyze's text and the assumptions as in the page's own notes."""
    docs = resources.data_dir("docs")
    mentioned = re.findall(r"docs/[\w-]+\.md", re.sub(r"<pre>.*?</pre>|<a [^>]*>[^<]*</a>", "", sample, flags=re.DOTALL))
    assert not mentioned, mentioned                       # none left as text
    links = dict(re.findall(r'<a href="([^"]+)" class="doc">docs/([\w-]+\.md)</a>', sample))
    assert {"model.md", "validation-summary.md"} <= set(links.values())
    assert all(href == (docs / name).resolve().as_uri() for href, name in links.items())
    for where in (docs / "report-sample.html", tmp_path / "a" / "b" / "report.html"):
        hrefs = doc_links(where)
        assert set(hrefs) == {p.name for p in docs.glob("*.md")}
        assert (where.parent / hrefs["model.md"]).resolve() == (docs / "model.md").resolve()
    assert doc_links(docs / "report-sample.html")["model.md"] == "model.md"
    assert linked("see docs/model.md & docs/nosuch.md", {"model.md": "m.md"}) == \
        'see <a href="m.md" class="doc">docs/model.md</a> &amp; docs/nosuch.md'


def expected(calibrated: bool, backend: str) -> ExpectedOut:
    return ExpectedOut(backend=backend, configuration="c", time_s=1e-4, throughput_flops_per_s=1.0,
                       bound="tensor", model="m", calibrated=calibrated, sizes={})


def test_each_gpu_says_how_accurate_its_prediction_is(sample):
    """A line per GPU gives the held-out error of the fit that timed its expected time, as the calibrated
    profile carrying the fit says (the Hopper kernel's on the H100 and H200, the portable kernels' per
    family), or that the time is the idealised model, which nothing validates."""
    for gpu in ("h100", "h200"):
        fit, carrier = hardware.hopper_fit(hardware.load(gpu))
        held = fit.held_out()
        line = (f"accuracy: on records held out of its fit, the Hopper kernel&#x27;s model, fitted on {carrier}, "
                f"was off by a median {100 * held['the held-out size'].median:.1f} % on the held-out size and "
                f"{100 * held['shapes beyond the grid'].median:.1f} % on shapes beyond the grid")
        assert line in sample
    h100 = hardware.load("h100")
    a = analyze("attention", h100)
    portable = accuracy(h100, a.model_copy(update={"expected": expected(True, "triton")}))
    held = hardware.load("h100-calibrated").calibration.held_out()
    assert set(held) == {"attention", "matmul"}
    for family, h in held.items():
        assert f"{100 * h.median:.1f} % (90th percentile {100 * h.p90:.1f} %) on {family}" in portable
    assert "the portable kernel's model, fitted on h100-calibrated" in portable
    idealised = accuracy(hardware.load("a100"), a.model_copy(update={"expected": expected(False, "triton")}))
    assert idealised.startswith("accuracy: not validated. Nobody measured this kernel on a100")
    assert "idealised" in idealised and "docs/validation-summary.md" in idealised
    # a calibrated profile written before napkin calibrate recorded its held-out error says so
    old = hardware.load("h100-calibrated")
    old = old.model_copy(update={"calibration": old.calibration.model_copy(update={"fit": {}})})
    assert "does not say its error on records held out of the fit" in accuracy(
        old, a.model_copy(update={"expected": expected(True, "triton")}))


def test_math_falls_back_to_code_outside_mathml_core(monkeypatch):
    q = sympy.Symbol("q")
    assert math(q / 2).startswith('<math displaystyle="true"><semantics><mrow><mfrac>')
    monkeypatch.setattr("analyzer.report.html.presentation", lambda expr, levels: "<mfenced><mi>q</mi></mfenced>")
    assert math(q) == "<code>q</code>"       # Chromium does not render mfenced (not MathML Core)
    assert esc("<b>") == "&lt;b&gt;" and esc(esc("<b>")) == "&lt;b&gt;"     # markup is escaped once


def test_every_user_string_is_escaped(tmp_path):
    """Markup in the diagram's title, paper and docs, the profile's name and description, and both
    paths shows as text; nothing of it becomes an element or an attribute."""
    diagram, gpu = adversarial(tmp_path)
    text = page(str(diagram), [str(gpu), "h200"])
    assert not re.search(r"<script|<img|<b>|<i>|<style>body", text, re.I)
    found = Elements(text)
    assert not {tag for tag, _ in found.tags} & {"script", "img", "b", "i"}
    assert not any(name.startswith("on") for _, attrs in found.tags for name in attrs)
    assert found.text["h1"] == ["napkin report: attention"]
    title = "".join(found.text["title"])
    assert "<script>alert(3)</script>" in title           # the profile's name, as text
    shown = " ".join(sum(found.text.values(), []))
    for payload in (SCRIPT, "<img src=x onerror=alert(2)>", "<b>bold</b>"):
        assert esc(payload) in text
    assert esc(str(diagram)) in text and str(diagram).endswith(f"{SCRIPT}.yaml")
    assert "<script>alert(1)</script>.yaml" in shown      # the path, as the reader sees it
    # the kernel's source (the title is in its docstring) stays text inside <pre><code>
    assert re.search(r"<pre><code[^>]*>[^<]*&lt;script&gt;alert\(1\)&lt;/script&gt;", text)


def test_what_does_not_apply_is_said(tmp_path):
    text = page("linear_attention", ["h100"])
    assert "no Section 5 configuration: kernel &#x27;linear&#x27;" in text
    assert "no H*(M) curves: diagram linear_attention: kernel linear has no closed-form H*(M)" in text
    assert "no closed form (the memory has no single leading term)" in text
    text = page("matmul", ["h200"], dtype="fp8")
    assert "no kernel generated: &#x27;fp8&#x27;: this kernel takes fp16 or bf16" in text
    # a GPU the diagram cannot run on is named; the others are reported
    text = page("matmul", ["h200", "t4"], dtype="fp8")
    assert "t4: not analysed: t4 has no fp8 tensor cores" in text and "<svg" in text


def test_bad_input_is_an_error():
    with pytest.raises(NapkinError, match="no size or tile size 'qq'"):
        page("attention", ["h100"], sets={"qq": 1})
    with pytest.raises(NapkinError, match="t4 has no fp8 tensor cores"):
        page("attention", ["t4"], dtype="fp8")
    with pytest.raises(NapkinError, match="unknown GPU"):
        page("attention", ["h1000"])


def test_sizes_and_the_default_gpu():
    text = page("matmul", [], sets={"a": 2048, "g_a": 128})
    head = text[:text.index("</header>")]
    assert "h100-sxm5" in head and "a=2048" in head and "set</dt><dd>a=2048, g_a=128" in head
    assert "napkin report matmul --gpu h100 --set a=2048 --set g_a=128" in head
    assert "g_a=128" in text[text.index('id="tiles"'):]

