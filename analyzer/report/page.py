"""`napkin report`: one self-contained HTML page of a diagram on one or more GPUs, to mail or attach.

    load the diagram and check the sizes -> per GPU: napkin analyze's analysis and the generated
    kernel's expected time (analyzer.config.launch), the symbolic models per level, Section 5's
    configuration (napkin configure), the overlap schedule, the kernel napkin kernel writes
    -> the drawing, the H*(M) curves and the roofline of every GPU -> one HTML page

The page leads with the prediction (the expected time of the generated kernel, napkin analyze's own
time beside it, and how accurate the first is: its fit's held-out error as the calibrated profile
carries it, or that it is the idealised model), then the drawing, the symbolic H, M and H* as MathML, the optimum and the chosen tiles,
the tables of Section 5 with the schedule, the curves, the roofline, the assumptions, napkin analyze's
whole text and the kernel's source. Where a part does not apply to the diagram or a GPU (no Section 5
configuration, no kernel generated, no closed form to plot) the page says why instead. A bad diagram or
`--set` is an error, as in napkin analyze; so is a GPU list none of which the diagram can be analysed on.

The same inputs give the same page, byte for byte: nothing in it depends on the time or on chance.
Its mentions of napkin's documents link them, relative to where the page is written (doc_links).
"""

from __future__ import annotations

import os
import shlex
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import quote

import sympy

from analyzer.codegen import generate
from analyzer.common import resources
from analyzer.common.errors import NapkinError
from analyzer.common.expr import MEMORY, at, symbol
from analyzer.common.units import binary, seconds, si
from analyzer.common.version import __version__
from analyzer.config.context_parallel import with_context_parallel
from analyzer.config.family import family
from analyzer.config.launch import with_expected
from analyzer.config.screen import configure_screen
from analyzer.diagram.compiled import Diagram
from analyzer.hardware import Profile
from analyzer.measure.result import Measurement
from analyzer.model.analysis import (
    LevelModel,
    analyze,
    level_models,
    load,
    resolve_sizes,
)
from analyzer.model.hierarchy import model_levels
from analyzer.model.result import Analysis
from analyzer.plot import draw, roofline, schedule, style, transfers
from analyzer.report.analysis import headline
from analyzer.report.analysis import render as analysis_text
from analyzer.report.configure import render as configure_text
from analyzer.report.html import (
    Markup,
    bullets,
    document,
    join,
    linked,
    math,
    rich,
    svg,
    table,
    tag,
)

SECTIONS = (("prediction", "Predicted time"), ("measured", "Measured on a GPU"), ("diagram", "The diagram"),
            ("symbolic", "Symbolic model per level"), ("tiles", "Optimum and chosen tiles"),
            ("configuration", "Configuration (Section 5) and overlap schedule"),
            ("transfers", "Transfers against memory"), ("roofline", "Roofline"),
            ("devices", "Several GPUs: context parallelism"),
            ("assumptions", "Assumptions"), ("analysis", "napkin analyze, as it prints"),
            ("kernel", "Generated kernel"))
MODEL_DOCS = ("docs/model.md states each assumption and the counting rules; docs/validation-summary.md "
              "says how far to trust a prediction, per GPU.")
SUMMARY = "docs/validation-summary.md"


@dataclass(frozen=True)
class Gpu:
    """One GPU of the page: its analysis with the expected time, and the symbolic models per kernel,
    or why the diagram cannot be analysed on it."""

    profile: Profile
    analysis: Analysis | None = None
    models: tuple[tuple[LevelModel, ...], ...] = ()   # per kernel, the levels highest first
    error: NapkinError | None = None                 # why there is no analysis
    split_error: NapkinError | None = None           # why there is no context-parallel time (--devices)


def page(diagram: str, gpus: list[str], *, sets: dict[str, int] | None = None,
         dtype: str | None = None, path: str | Path | None = None,
         measurements: list[Measurement] | None = None, devices: Devices | None = None) -> str:
    """The HTML page of `diagram` on `gpus` (names, aliases or profile files; default h100), with the
    sizes and tile pins of `sets` (as napkin analyze takes them) and the element type `dtype`. `path`:
    where the page will be written, which its links to napkin's documents are relative to (None: they
    are absolute, file:// links). `measurements`: what napkin measure wrote of this diagram's kernel,
    shown beside their predictions. `devices`: the GPUs, heads and batch entries of the context-parallel
    prediction (napkin analyze --devices), or None."""
    sets, gpus = dict(sets or {}), list(gpus or ["h100"])
    docs = doc_links(path)
    file = load(diagram)        # read once: every section is of this one (`diagram` names it in commands)
    d = load(file, dtype=dtype)
    sizes, _ = resolve_sizes(d, sets)           # a bad --set is an error here, as in napkin analyze
    found = [_gpu(d, file, p, sets, dtype, devices) for p in style.profiles(gpus)]   # each GPU once, read once
    if all(g.error is not None for g in found):
        raise found[0].error                        # nothing to report
    if devices is not None and all(g.split_error is not None for g in found if g.error is None):
        raise next(g.split_error for g in found if g.error is None)      # --devices asked of nothing it splits
    analysed = [g for g in found if g.analysis is not None]
    measured = _measured_of(d, measurements or [])
    command = _command(diagram, gpus, sets, dtype, devices)
    shown = [key for key, _ in SECTIONS if (key != "measured" or measured) and (key != "devices" or devices)]
    parts = [_header(d, found, sizes, sets, dtype, command, shown),
             _section("prediction", _prediction(found, docs)),
             _section("measured", measured) if measured else "",
             _section("diagram", _drawing(file, d)),
             _section("symbolic", _symbolic(d, analysed)),
             _section("tiles", _tiles(analysed, sizes)),
             _section("configuration", _configuration(file, d, analysed, sets, dtype)),
             _section("transfers", _figure("transfers", "H*(M) curves", lambda: transfers.figure(
                 file, [g.profile for g in analysed], dtypes=[dtype] if dtype else [], sets=sets))),
             _section("roofline", _figure("roofline", "roofline", lambda: roofline.figure(
                 file, [g.profile for g in analysed], dtype=dtype, sets=sets))),
             _section("devices", _devices(found, docs)) if devices else "",
             _section("assumptions", _assumptions(analysed, docs)),
             _section("analysis", _analyses(diagram, analysed, docs)),
             _section("kernel", _kernels(diagram, analysed, sets, dtype)),
             tag("footer", tag("p", f"napkin {__version__}: {command}. "
                                    "The page holds everything it shows: no script, nothing fetched."))]
    title = f"napkin report: {d.name} on {', '.join(g.profile.name for g in found)}"
    return document(title, join(parts, "\n"), generator=f"napkin {__version__}")


@dataclass(frozen=True)
class Devices:
    """napkin report --devices: up to how many GPUs, and the weave's heads and batch entries."""

    most: int
    heads: int = 1
    batch: int = 1


def _gpu(d: Diagram, file: Diagram, profile: Profile, sets: dict, dtype: str | None,
         devices: Devices | None) -> Gpu:
    """The analysis with its expected time (as napkin analyze leads with it) and, with `devices`, its
    context-parallel times, or why there is none."""
    try:
        a = analyze(d, profile, sets=sets)
        models = tuple(tuple(level_models(d, k, model_levels(d, profile))) for k in d.kernels)
    except NapkinError as exc:
        return Gpu(profile, error=exc)
    a = with_expected(a, file, profile, dtype=dtype, sets=sets)
    if devices is not None:
        weave = {k: v for k, v in (("heads", devices.heads), ("batch", devices.batch)) if v != 1}
        try:
            a = with_context_parallel(a, file, profile, devices.most, dtype=dtype, sets={**sets, **weave})
        except NapkinError as exc:
            return Gpu(profile, a, models, split_error=exc)
    return Gpu(profile, a, models)


def doc_links(path: str | Path | None) -> dict[str, str]:
    """napkin's documents (docs/*.md, shipped with it) by file name, each with the href a page written to
    `path` links it by: the relative path from the page's folder, so that a page kept beside a checkout or
    an installation (docs/report-sample.html: `model.md`) opens the file; absolute (file://) where `path`
    is None or no relative path reaches the documents (another drive). Empty where napkin has no docs."""
    try:
        folder = resources.data_dir("docs").resolve()
    except NapkinError:
        return {}
    base = folder.as_uri() + "/"
    if path is not None:
        try:
            relative = Path(os.path.relpath(folder, Path(path).resolve().parent)).as_posix()
            base = "" if relative == "." else quote(relative) + "/"
        except ValueError:          # another drive: no relative path
            pass
    return {p.name: base + quote(p.name) for p in sorted(folder.glob("*.md"))}


def _section(key: str, body: Markup) -> Markup:
    return tag("section", join([tag("h2", dict(SECTIONS)[key]), body]), id=key)


def _absent(why: str) -> Markup:
    return tag("p", why, class_="absent")


# -- the header -------------------------------------------------------------------------------------

def _header(d: Diagram, found: list[Gpu], sizes: dict, sets: dict, dtype: str | None, command: str,
            shown: list[str]) -> Markup:
    axes = ", ".join(f"{a.name}={at(a.size, sizes)}" + ("" if str(a.size) == a.name else f" (= {a.size})")
                     for a in d.axes.values())
    gpus = join((tag("span", f"{g.profile.name} ({g.profile.description}; {g.profile.source})")
                 for g in found), Markup("<br>"))
    rows = [("diagram", f"{d.name} ({d.source})"), ("paper", d.paper or "-"),
            ("GPUs", gpus), ("element type", d.dtype + (" (--dtype)" if dtype else "")),
            ("sizes", axes), ("set", ", ".join(f"{k}={v}" for k, v in sets.items()) or "-"),
            ("napkin", __version__), ("command", tag("code", command))]
    meta = tag("dl", join(join([tag("dt", k), tag("dd", v)]) for k, v in rows), class_="meta")
    nav = tag("nav", tag("ol", join(tag("li", tag("a", title, href=f"#{key}")) for key, title in SECTIONS
                                    if key in shown)))
    subtitle = tag("p", d.title + (f" [{d.paper}]" if d.paper else ""), class_="subtitle") if d.title else ""
    return tag("header", join([tag("h1", f"napkin report: {d.name}"), subtitle, meta, nav]))


def _command(diagram: str, gpus: list[str], sets: dict, dtype: str | None, devices: Devices | None) -> str:
    """The command that makes the page, as the user named the diagram and the GPUs."""
    words = ["napkin", "report", diagram, *(w for g in gpus for w in ("--gpu", g))]
    words += [w for k, v in sets.items() for w in ("--set", f"{k}={v}")]
    words += ["--dtype", dtype] if dtype else []
    if devices is not None:
        words += ["--devices", str(devices.most)]
        words += [w for k, v in (("--heads", devices.heads), ("--batch", devices.batch)) if v != 1 for w in (k, str(v))]
    return " ".join(shlex.quote(w) for w in words)


# -- several GPUs: the context-parallel time per GPU count --------------------------------------------

def _devices(found: list[Gpu], docs: dict[str, str]) -> Markup:
    parts = [tag("p", linked("The attention split over the GPUs of one host by PyTorch's ring with napkin's kernel "
                             "for each block: each count's slowest rank, its blocks at their kernels' expected "
                             "times, torch's merges and copies, and what crosses the link (scale.md).", docs),
                 class_="note")]
    for g in found:
        cp = g.analysis.context_parallel if g.analysis else None
        if cp is None:
            if g.split_error is not None:
                parts.append(tag("p", f"{g.profile.name}: {g.split_error.one_line()}", class_="absent"))
            continue
        rows = [[str(n.devices), seconds(n.time_s), f"{n.efficiency:.0%}", seconds(n.kernel_s), seconds(n.engine_s),
                 f"{si(n.cross_bytes, 'B')} in {seconds(n.link_s)}" if n.devices > 1 else "",
                 seconds(n.waits_s) if n.devices > 1 else "", n.bound] for n in cp.counts]
        parts += [tag("h3", f"{g.profile.name}: {cp.link} at {si(cp.link_bytes_per_s, 'B/s')} each way, "
                            f"{cp.rotation} rotation, {cp.merge}'s merge"),
                  table(["GPUs", "time", "efficiency", "blocks", "merges, copies", "link", "link exposed", "bound"],
                        rows, numeric=[1, 2, 3, 4, 6]),
                  tag("p", f"each GPU receives {cp.cross_bytes_per_device} bytes over the link", class_="line")]
    return join(parts)


# -- the prediction: the generated kernel's expected time first, napkin analyze's own beside it -------

def _prediction(found: list[Gpu], docs: dict[str, str]) -> Markup:
    rows, lines = [], []
    for g in found:
        a = g.analysis
        if a is None:
            rows.append([g.profile.name, "not analysed", "", "", "", "", ""])
            lines.append(tag("p", f"{g.profile.name}: not analysed: {g.error.one_line()}", class_="absent"))
            continue
        t, e = a.totals, a.expected
        bound_label = "analysis, fitted parameters" if a.gpu.calibration else "idealised bound"
        if e is None:
            expected = ["no generated kernel", "", ""]
        else:
            expected = [f"{seconds(e.time_s)}, {si(e.throughput_flops_per_s, 'FLOP/s')}", f"{e.bound}-bound",
                        f"{e.time_s / t.predicted_time_s:.2f}x" if t.predicted_time_s else "-"]
        rate = f", {si(t.throughput_flops_per_s, 'FLOP/s')}" if t.throughput_flops_per_s else ""
        rows.append([g.profile.name, *expected[:2], f"{seconds(t.predicted_time_s)}{rate}",
                     f"{t.bound}-bound ({bound_label})", expected[2], _tiles_text(a)])
        lines.append(tag("h3", g.profile.name))
        lines += [tag("p", text.plain, class_="line lead" if i == 0 else "line") for i, text in
                  enumerate(headline(a))]
        lines.append(tag("p", linked(accuracy(g.profile, a), docs), class_="line accuracy"))
    summary = table(["GPU", "expected: the generated kernel", "its bound", "beside it: napkin analyze",
                     "its bound", "expected / beside", "tiles (lowest level)"], rows, numeric=[5])
    return join([tag("p", "expected: what the kernel napkin kernel generates takes at these sizes, by that "
                          "kernel's model (calibrated where the GPU has a fit of it). Beside it: napkin "
                          "analyze's time at its own tiles, the paper's idealised bound on a datasheet "
                          "profile (datasheet rates, transfers and pipelines perfectly overlapped).",
                     class_="note"), summary, *lines])


# -- what napkin measure measured of the kernel, beside its prediction ------------------------------

def _measured_of(d: Diagram, measurements: list[Measurement]) -> Markup | None:
    """The measurements' table (None: none given); a measurement of another diagram is an error."""
    if not measurements:
        return None
    rows = []
    for m in measurements:
        if m.diagram != d.name:
            raise NapkinError(f"a measurement of {m.diagram!r} given to the report of {d.name!r}",
                              field="--measurement", hint=f"measure {d.name} (napkin measure {d.name} -o FILE)")
        t, p = m.timing, m.predicted
        measured = f"{seconds(t.time_s)} ({seconds(t.time_s_p20)} to {seconds(t.time_s_p80)})" if t else "not timed"
        rows.append([f"{m.device.name} ({m.device.profile})", f"{p.kernel or p.backend}: {p.configuration}",
                     ", ".join(f"{k}={v}" for k, v in sorted(m.sizes.items())),
                     "passed" if m.check.passed else f"FAILED ({m.check.max_error:.2g} > {m.check.tolerance:.2g})",
                     measured, seconds(p.time_s),
                     f"{m.measured_over_predicted:.3f}" if m.measured_over_predicted else "-"])
    methods = sorted({m.timing.method for m in measurements if m.timing})
    note = ("What napkin measure ran of this diagram's kernel (docs/measure.md): checked against float64, then "
            f"timed ({'; '.join(methods) or 'not timed'}; the median, and the 20th to 80th percentile), beside "
            "the model's time for the same launch. Its sizes are the measurement's, which may differ from "
            "the page's.")
    return join([tag("p", note, class_="note"),
                 table(["GPU (profile)", "kernel", "sizes", "check", "measured", "predicted",
                        "measured / predicted"], rows, numeric=[6])])


def _tiles_text(a: Analysis) -> str:
    return "; ".join((f"{k.name}: " if len(a.kernels) > 1 else "")
                     + (", ".join(f"{s}={v}" for s, v in k.levels[-1].chosen.items()) or "-")
                     for k in a.kernels)


def accuracy(profile: Profile, a: Analysis) -> str:
    """How far to trust the expected time on this GPU: what the fit that timed it was off by on the
    records held out of it, as the calibrated profile that carries the fit says (napkin calibrate writes
    it; docs/validation-summary.md gathers them); or, where no fit timed it, that it is the idealised
    model, which no measurement validates."""
    e = a.expected
    if e is None:
        return f"accuracy: no expected time on {profile.name}, so nothing to validate."
    if not e.calibrated:
        return (f"accuracy: not validated. Nobody measured this kernel on {profile.name}: its expected time is "
                f"the paper's idealised model, and so is napkin analyze's bound beside it ({SUMMARY}).")
    found = family(e.backend).accuracy(profile)
    kernel = found.model if found else f"{family(e.backend).title}'s model"
    carrier = found.carrier if found else profile.name
    held = found.held_out if found else {}
    if not held:
        return (f"accuracy: {kernel}, fitted on {carrier}, does not say its error on records held out of the fit "
                f"(napkin calibrate writes it into the profile; {SUMMARY}).")
    return (f"accuracy: on records held out of its fit, {kernel}, fitted on {carrier}, was off by a median "
            f"{' and '.join(held.values())} ({SUMMARY}).")


# -- the drawing and the figures ---------------------------------------------------------------------

def _figure(key: str, label: str, build: Callable) -> Markup:
    """A figure inline, or why the diagram has none (or why matplotlib could not draw it: mathtext
    refuses a title with unbalanced $ signs)."""
    try:
        return svg(build(), f"fig-{key}", label)
    except NapkinError as exc:
        return _absent(f"no {label}: {exc.message}")
    except ValueError as exc:
        return _absent(f"no {label}: matplotlib could not draw it ({' '.join(str(exc).split())})")


def _drawing(file: Diagram, d: Diagram) -> Markup:
    return join([tag("p", f"{d.name} as napkin draw draws it: data-type columns alternate with function "
                          "columns; the colours are the memory levels; each kernel is a shaded region with "
                          "its relabellings per level.", class_="note"),
                 _figure("diagram", f"drawing of {d.name}", lambda: draw.figure(file))])


# -- the symbolic model: H, H_g, N_g, M and H*(a, M) per level, as MathML -----------------------------

def _symbolic(d: Diagram, analysed: list[Gpu]) -> Markup:
    """One table per kernel and set of levels: GPUs with the same levels share it."""
    groups: dict[tuple, list[Gpu]] = {}
    for g in analysed:
        key = tuple(tuple((m.level.name, m.level.role, str(m.cost.transfers), str(m.cost.memory))
                          for m in models) for models in g.models)
        groups.setdefault(key, []).append(g)
    implied = sorted({m.level.name for g in analysed for models in g.models for m in models if m.level.suffix})
    named = (f" A level the diagram does not draw ({', '.join(implied)}) has group sizes of its own, named "
             f"after it: with a suffix in text (_{implied[0]}), and in the formulas with the level upright "
             f"in capitals after the axis in the subscript ({implied[0].upper()})." if implied else "")
    parts = [tag("p", "Values, not bytes (Section 2's counting rules); M in H*(a, M) is the lower level's "
                      "memory per group, and H* its fewest transfers (Section 4, Equation 1)." + named,
                 class_="note")]
    for same in groups.values():
        names = [g.profile.name for g in same]
        for kernel, models in zip(d.kernels, same[0].models, strict=True):
            levels = {m.level.name for m in models}
            rows = [[m.level.name, _role(m), *(math(e, levels=levels) for e in (
                m.cost.transfers, m.cost.per_group, m.cost.groups, m.cost.memory)), _optimum(m, levels)]
                    for m in models]
            caption = f"kernel {kernel.name}" + (f" on {', '.join(names)}" if len(groups) > 1 else "")
            parts.append(table(["level", "role", "H", "H_g", "N_g", "M", "H*(a, M)"], rows, caption=caption))
    return join(parts)


def _role(m: LevelModel) -> str:
    relabel = ", ".join([f"group {a} -> {s}" for a, s in m.schedule.partition.group]
                        + ([f"stream {m.schedule.partition.stream[0]} -> {m.schedule.partition.stream[1]}"]
                           if m.schedule.partition.stream else []))
    implied = "" if m.level.drawn else ", implied"
    return f"{m.level.role}{implied}; fed by {m.level.source}; {relabel or 'not partitioned'}"


def _optimum(m: LevelModel, levels: set[str]) -> Markup:
    """H*(a, M) and its group sizes g*(M), in the level's own symbols: an implied level shares its drawn
    level's optimum (analyzer.model.analysis.level_models), and its group sizes carry its name."""
    if m.optimum is None:
        return _absent("no closed form (the memory has no single leading term)")
    suffix = m.level.suffix
    own = (lambda s: symbol(f"{s.name}_{suffix}")) if suffix else (lambda s: s)
    sizes = [math(sympy.Eq(own(s), v, evaluate=False), f"{own(s)} = {v}", levels=levels)
             for s, v in m.optimum.group_sizes.items() if v != 1]
    at_sizes = tag("div", join([tag("span", "at ", class_="note"), join(sizes, ", ")]), class_="at") if sizes else ""
    return join([tag("div", math(m.optimum.h_star, levels=levels)), at_sizes])


# -- the optimum and the chosen tiles per GPU ---------------------------------------------------------

def _tiles(analysed: list[Gpu], sizes: dict) -> Markup:
    parts = [tag("p", "H*(M_l): the fewest transfers the closed form allows with the level's memory limit "
                      "M_l; g*: its continuous group sizes there. The chosen tiles are napkin analyze's: the "
                      "least predicted time at the lowest level (the least transfers above it), within the "
                      "divisor constraints, so they need not reach H*.", class_="note")]
    for g in analysed:
        rows = []
        for k, models in zip(g.analysis.kernels, g.models, strict=True):
            for lv, m in zip(k.levels, models, strict=True):
                fewest, continuous = _at_limit(m, sizes, lv.memory_limit_bytes)
                rows.append([k.name, lv.level, fewest, continuous,
                             ", ".join(f"{s}={v}" for s, v in lv.chosen.items()) or "-", f"{lv.groups_value:.0f}",
                             f"{binary(lv.memory_bytes_value)} ({binary(lv.memory_limit_bytes)})",
                             si(lv.transfers_bytes_value, "B"), seconds(lv.transfer_time_s)])
        constraints = list(dict.fromkeys(r for k in g.analysis.kernels for lv in k.levels for r in lv.constraints))
        parts += [table(["kernel", "level", "H*(M_l)", "g*(M_l)", "chosen tiles", "N_g", "memory (limit)",
                         "transfers", "time"], rows, caption=f"{g.profile.name} ({g.analysis.dtype})",
                        numeric=[2, 5, 7, 8]),
                  tag("p", "constraints obeyed: " + "; ".join(constraints), class_="note") if constraints else ""]
    return join(parts)


def _at_limit(m: LevelModel, sizes: dict, limit: float) -> tuple[str, str]:
    """H*(a, M_l) in bytes and the continuous optimum's group sizes there, or dashes without a closed form."""
    o = m.optimum_bytes
    if o is None:
        return "-", "-"
    values = {**sizes, MEMORY: limit}
    group = ", ".join(f"{s} = {_number(at(v, values))}" for s, v in o.group_sizes.items() if v != 1)
    return si(float(at(o.h_star, values)), "B"), group or "-"


def _number(value: sympy.Expr) -> str:
    """A group size at the limit; one that only a product with free group sizes fixes stays in them
    (GQA: g_q = 454/g_g)."""
    return f"{float(value):.4g}" if value.is_Number else str(sympy.N(value, 4))


# -- Section 5: napkin configure's tables and the overlap schedule, per GPU ----------------------------

def _configuration(file: Diagram, d: Diagram, analysed: list[Gpu], sets: dict, dtype: str | None) -> Markup:
    """napkin configure's screen per GPU: the configuration the kernel section's module launches at these
    sizes (analyzer.config.screen), or the one napkin analyze's tiles give where there is none, said so."""
    parts = [tag("p", "As napkin configure prints them: the configuration napkin kernel launches at these sizes "
                      "(Table 1), the maximum analysis (Table 2), the compute analysis (Table 3), the "
                      "throughput (Appendix B.0.1) and the warpgroup overlap (Section 6), then its schedule "
                      "(Figures 34-37). Their throughput is the paper's idealised bound.", class_="note")]
    for i, g in enumerate(analysed):
        parts.append(tag("h3", g.profile.name))
        try:
            r, screen = configure_screen(file, g.profile, sets=sets, dtype=dtype)
        except NapkinError as exc:
            parts.append(_absent(f"no Section 5 configuration: {exc.message}"))
            continue
        parts.append(rich(configure_text(r)))
        if r.overlap is not None:
            parts.append(_figure(f"schedule{i}", f"overlap schedule on {g.profile.name}",
                                 lambda p=g.profile, s=screen: schedule.figure(
                                     d, p, config=s.config, sets=s.sets, overlap=s.overlap)))
    return join(parts)


# -- assumptions, napkin analyze's text, the kernel ------------------------------------------------------

def _assumptions(analysed: list[Gpu], docs: dict[str, str]) -> Markup:
    """The analysis' assumptions, each once, naming the GPUs a calibration line applies to; then the
    model each expected time comes from."""
    said: dict[str, list[str]] = {}
    for g in analysed:
        for line in g.analysis.assumptions:
            said.setdefault(line, []).append(g.profile.name)
    every = len(analysed)
    items = [line if len(names) == every else f"{line} ({', '.join(names)})" for line, names in said.items()]
    models = [f"{g.profile.name}: {g.analysis.expected.model}" if g.analysis.expected else
              f"{g.profile.name}: no expected time ({g.analysis.expected_absent or 'no kernel generated'})"
              for g in analysed]
    return join([tag("p", "napkin analyze's time (beside it) rests on:"), bullets(linked(i, docs) for i in items),
                 tag("p", "The expected time of the generated kernel comes from that kernel's model:"),
                 bullets(models), tag("p", linked(MODEL_DOCS, docs), class_="note")])


def _analyses(diagram: str, analysed: list[Gpu], docs: dict[str, str]) -> Markup:
    return join(tag("details", join([tag("summary", f"napkin analyze {diagram} --gpu {g.profile.name}"),
                                     rich(analysis_text(g.analysis), docs)]))
                for g in analysed)


def _kernels(diagram: str, analysed: list[Gpu], sets: dict, dtype: str | None) -> Markup:
    """The file napkin kernel writes for each GPU (its default backend), the first one open."""
    parts = []
    for i, g in enumerate(analysed):
        try:
            k = generate(diagram, g.profile, dtype=dtype, sets=sets)
        except NapkinError as exc:
            parts.append(join([tag("h3", g.profile.name), _absent(f"no kernel generated: {exc.message}")]))
            continue
        language = k.family.language
        note = tag("p", f"note: {k.note}", class_="note") if k.note else ""
        summary = tag("summary", f"{g.profile.name}: {k.backend} backend, {len(k.source.splitlines())} lines "
                                 f"({k.command})")
        body = tag("pre", tag("code", k.source, class_=f"language-{language}"))
        parts.append(Markup(tag("details", join([summary, note, body]), open="" if i == 0 else None)))
    return join(parts)
