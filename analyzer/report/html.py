"""HTML fragments of napkin's values, for `napkin report`'s page (analyzer.report.page).

Everything a fragment shows passes through `esc` unless it is `Markup`: HTML this module built itself
from escaped text, MathML from sympy's printer (whose elements are checked against MathML Core's) or
SVG from matplotlib (which escapes its text). A diagram's title, a file path, a profile's name or a
kernel's source can then hold `<script>` and still show as text.

The page works offline: the only references in it are fragment links (`#id`, `url(#id)`) and links
to napkin's own documents (`linked`), which a browser follows only when clicked; each inline SVG's ids
carry a prefix of its own, so that the figures of one page do not share ids.
"""

from __future__ import annotations

import html
import re
from collections.abc import Collection, Iterable, Mapping, Sequence

import sympy
from matplotlib.figure import Figure
from rich.console import Group
from rich.style import Style
from rich.table import Table
from rich.text import Text
from sympy.printing.mathml import MathMLPresentationPrinter

from analyzer.plot.output import render


class Markup(str):
    """HTML to insert as it is: built here from escaped text, never from a user's string."""


def esc(value: object) -> Markup:
    """`value` as HTML text: markup in it shows as characters."""
    return value if isinstance(value, Markup) else Markup(html.escape(str(value), quote=True))


def join(parts: Iterable[object], sep: str = "") -> Markup:
    return Markup(esc(sep).join(esc(p) for p in parts))


def tag(name: str, body: object = "", **attrs: object) -> Markup:
    """<name attrs>body</name>; `class_` names the class attribute; None leaves an attribute out."""
    shown = "".join(f' {k.rstrip("_").replace("_", "-")}="{esc(v)}"' for k, v in attrs.items()
                    if v is not None)
    return Markup(f"<{name}{shown}>{esc(body)}</{name}>")


DOC = re.compile(r"\bdocs/([A-Za-z0-9_-]+\.md)\b")     # a mention of one of napkin's documents


def linked(value: object, docs: Mapping[str, str]) -> Markup:
    """`value` as HTML text, each mention of a document in `docs` (`docs/model.md`: file name -> href) a
    link to it; markup in the text still shows as characters."""
    if isinstance(value, Markup):
        return value
    text, out, last = str(value), [], 0
    for m in DOC.finditer(text):
        if m[1] in docs:
            out += [esc(text[last:m.start()]), tag("a", m[0], href=docs[m[1]], class_="doc")]
            last = m.end()
    return join([*out, esc(text[last:])])


def table(headers: Sequence[object], rows: Iterable[Sequence[object]], *, caption: object = None,
          numeric: Sequence[int] = ()) -> Markup:
    """A table; the columns at `numeric` (indexes) are right-aligned."""
    def cells(kind: str, values: Sequence[object]) -> Markup:
        return join(tag(kind, v, class_="num" if i in numeric else None) for i, v in enumerate(values))
    head = tag("thead", tag("tr", cells("th", headers)))
    body = tag("tbody", join(tag("tr", cells("td", r)) for r in rows))
    return tag("table", join([tag("caption", caption) if caption else "", head, body]))


def bullets(items: Iterable[object]) -> Markup:
    return tag("ul", join(tag("li", i) for i in items))


# -- rich renderables (what napkin analyze and configure print) as HTML --------------------------------

def rich(renderable: object, docs: Mapping[str, str] | None = None) -> Markup:
    """A rich Group, Table or Text as HTML: tables as tables, lines as paragraphs, bold as bold; the
    documents it mentions linked (`docs`, as `linked` takes them)."""
    docs = docs or {}
    if isinstance(renderable, Group):
        return join(rich(r, docs) for r in renderable.renderables)
    if isinstance(renderable, Table):
        return _rich_table(renderable, docs)
    if isinstance(renderable, Text):
        return tag("p", _styled(renderable, docs), class_="line") if renderable.plain.strip() else Markup()
    return tag("p", linked(str(renderable), docs), class_="line")


def _rich_table(t: Table, docs: Mapping[str, str]) -> Markup:
    columns = [list(c.cells) for c in t.columns]
    rows = [[_cell(col[i], docs) for col in columns] for i in range(t.row_count)]
    numeric = [i for i, c in enumerate(t.columns) if c.justify == "right"]
    return table([_cell(c.header, docs) for c in t.columns], rows,
                 caption=_cell(t.title, docs) if t.title else None, numeric=numeric)


def _cell(value: object, docs: Mapping[str, str]) -> Markup:
    return _styled(value, docs) if isinstance(value, Text) else linked(value, docs)


def _styled(text: Text, docs: Mapping[str, str]) -> Markup:
    """Text with its bold and coloured spans (green: fits, red: does not)."""
    cuts = sorted({0, len(text.plain), *(s.start for s in text.spans), *(s.end for s in text.spans)})
    out = []
    for start, end in zip(cuts, cuts[1:]):
        style = Style.combine([_style(text.style), *(_style(s.style) for s in text.spans
                                                      if s.start <= start and end <= s.end)])
        piece = linked(text.plain[start:end], docs)
        if style.color is not None and style.color.name in ("red", "green"):
            piece = tag("span", piece, class_="bad" if style.color.name == "red" else "good")
        out.append(tag("strong", piece) if style.bold else piece)
    return join(out)


def _style(style: str | Style) -> Style:
    return Style.parse(style) if isinstance(style, str) else style


# -- mathematics: sympy's presentation MathML, which Chromium renders natively (MathML Core) -----------

MATHML_CORE = {"math", "semantics", "annotation", "mrow", "mi", "mn", "mo", "ms", "mtext", "mspace",
               "mfrac", "msqrt", "mroot", "msub", "msup", "msubsup", "munder", "mover", "munderover",
               "mmultiscripts", "mprescripts", "none", "mtable", "mtr", "mtd", "mstyle", "mpadded",
               "mphantom", "merror"}
_TAGS = re.compile(r"</?([A-Za-z][A-Za-z0-9:-]*)")


class _Presentation(MathMLPresentationPrinter):
    """sympy's presentation MathML, but for a symbol whose last subscript names a memory level (g_q_l2:
    the group size of q at level l2): that subscript shows upright in capitals after a comma, g_{q,L2}.
    As sympy writes it, <mi>l2</mi> in a subscript reads as 12."""

    def __init__(self, levels: Collection[str]):
        super().__init__({})
        self.levels = frozenset(levels)

    def _print_Symbol(self, sym: sympy.Symbol, style: str = "plain"):
        x = super()._print_Symbol(sym, style)
        name, _, level = sym.name.rpartition("_")
        if level not in self.levels or "_" not in name or x.tagName not in ("msub", "msubsup"):
            return x
        subscripts = x.childNodes[1]              # an <mrow> of <mi> joined by <mo> (two or more of them)
        for node in subscripts.childNodes:
            if node.tagName == "mo":
                node.firstChild.data = ","
        last = subscripts.lastChild
        upright = self.dom.createElement("mtext")
        upright.setAttribute("class", "level")
        upright.appendChild(self.dom.createTextNode(level.upper()))
        subscripts.replaceChild(upright, last)
        return x


def presentation(expr: sympy.Basic, levels: Collection[str] = ()) -> str:
    """`expr` as presentation MathML (the body of a <math> element), the subscripts naming `levels` upright."""
    return _Presentation(levels).doprint(expr)


def math(expr: sympy.Basic, text: str | None = None, *, levels: Collection[str] = ()) -> Markup:
    """`expr` as a <math> element, its plain text (`text`, default sympy's) as the annotation (what a
    copy takes); an expression sympy prints with an element outside MathML Core shows as code instead.
    A symbol's last subscript that names one of `levels` shows as that level, upright in capitals."""
    text = str(expr) if text is None else text
    body = presentation(expr, levels)
    if not set(_TAGS.findall(body)) <= MATHML_CORE:
        return tag("code", text)
    return Markup(f'<math displaystyle="true"><semantics>{body}'
                  f'{tag("annotation", text, encoding="text/plain")}</semantics></math>')


# -- figures: matplotlib's SVG, inline ----------------------------------------------------------------

_PROLOG = re.compile(r"\A.*?(?=<svg\b)", re.S)             # the XML declaration and the DOCTYPE
_METADATA = re.compile(r"<metadata>.*?</metadata>\s*", re.S)
_ID = re.compile(r'\bid="([^"]*)"')
_REF = re.compile(r'(\bhref="#|url\(#)([^")]*)')


def svg(figure: Figure, prefix: str, label: str) -> Markup:
    """The figure as an inline <svg> element: matplotlib's deterministic SVG (analyzer.plot.output),
    without its prolog and metadata, its ids and references prefixed with `prefix` (one per figure of
    a page), labelled for screen readers."""
    text = render(figure, "figure.svg").decode("utf-8")
    text = _METADATA.sub("", _PROLOG.sub("", text, count=1), count=1)
    text = _ID.sub(lambda m: f'id="{prefix}-{m[1]}"', text)
    text = _REF.sub(lambda m: f"{m[1]}{prefix}-{m[2]}", text)
    return Markup(text.replace("<svg ", f'<svg class="figure" role="img" aria-label="{esc(label)}" ', 1))


# -- the document --------------------------------------------------------------------------------------

CSS = """
body { font: 15px/1.45 system-ui, -apple-system, "Segoe UI", sans-serif; color: #1a1a1a;
       max-width: 1180px; margin: 0 auto; padding: 0 1.5em 3em; }
header { border-bottom: 2px solid #1f5fbf; margin-bottom: 1em; }
h1 { margin: 0.8em 0 0.1em; font-size: 1.7em; }
h2 { margin-top: 2em; border-bottom: 1px solid #ccc; font-size: 1.35em; }
h3 { margin: 1.4em 0 0.4em; font-size: 1.1em; }
.subtitle { margin: 0 0 0.8em; color: #555; }
dl.meta { display: grid; grid-template-columns: max-content 1fr; gap: 0.15em 1em; margin: 0 0 1em; }
dl.meta dt { font-weight: 600; } dl.meta dd { margin: 0; }
nav ol { columns: 2; margin: 0 0 1em; }
table { border-collapse: collapse; margin: 0.6em 0 1em; font-size: 0.88em; }
caption { text-align: left; font-weight: 600; padding: 0.3em 0; }
th, td { border: 1px solid #d4d4d4; padding: 0.25em 0.55em; text-align: left; vertical-align: top; }
th { background: #f0f3f8; } tbody tr:nth-child(even) { background: #fafafa; }
td.num, th.num { text-align: right; font-variant-numeric: tabular-nums; }
p.line { margin: 0.25em 0; white-space: pre-wrap; }
.lead { font-size: 1.05em; } .note { color: #555; } .absent { color: #8a4b00; font-style: italic; }
.good { color: #1d7a33; } .bad { color: #b3261e; }
svg.figure { display: block; max-width: 100%; height: auto; margin: 0.6em 0; }
math { font-size: 1.1em; padding: 0.2em 0; }
mfrac > * { padding: 0.12em 0; }
td .at { margin-top: 0.3em; }
a.doc { color: #1f5fbf; }
pre { background: #f6f8fa; border: 1px solid #d4d4d4; padding: 0.8em; overflow: auto; max-height: 42em;
      font-size: 0.8em; line-height: 1.35; }
code { font-family: ui-monospace, "DejaVu Sans Mono", Menlo, Consolas, monospace; }
details { margin: 0.5em 0; } summary { cursor: pointer; font-weight: 600; }
footer { margin-top: 3em; color: #555; font-size: 0.85em; border-top: 1px solid #ccc; }
@media print { pre { max-height: none; } details { display: block; } }
"""


def document(title: object, body: Markup, *, generator: str) -> str:
    """A whole page: its CSS inline, no script, nothing fetched."""
    head = join([Markup('<meta charset="utf-8">'),
                 Markup('<meta name="viewport" content="width=device-width, initial-scale=1">'),
                 Markup(f'<meta name="generator" content="{esc(generator)}">'),
                 tag("title", title), Markup(f"<style>{CSS}</style>")])
    return f'<!DOCTYPE html>\n<html lang="en">\n<head>\n{head}\n</head>\n<body>\n{body}\n</body>\n</html>\n'
