"""Render an Analysis: terminal tables (rich), LaTeX, and small number formatting helpers."""

from __future__ import annotations

import math

from rich.console import Group
from rich.text import Text

from analyzer.common.units import binary, seconds, si
from analyzer.model.result import Analysis, ClassicRuleOut, KernelOut, LevelOut
from analyzer.report.devices import context_parallel_parts
from analyzer.report.tables import row, titled_table


def render(a: Analysis) -> Group:
    parts: list = []
    paper = f" [{a.diagram.paper}]" if a.diagram.paper else ""
    parts.append(Text(f"{a.diagram.name}: {a.diagram.title}{paper}", style="bold"))
    sizes = ", ".join(f"{s.axis}={s.value}" + (f" (= {s.expression})" if s.expression != s.axis else "")
                      for s in a.sizes)
    cluster = f", clusters of {a.cluster}" if a.cluster else ""
    parts.append(Text(f"GPU {a.gpu.name} ({a.gpu.description}), {a.dtype}{cluster}; {sizes}"))
    parts += [*headline(a), Text("")]

    ops = titled_table("Diagram", "col", "op", "primitive", "inputs", "output", "over", "weave", "copied",
                 "kernel")
    for o in a.ops:
        copied = "; ".join(f"{k} along {', '.join(v)}" for k, v in o.broadcast.items())
        row(ops, str(o.column), o.name, o.primitive, ", ".join(o.inputs),
             f"[{', '.join(o.output_axes)}]", o.over or "", ", ".join(o.weave), copied, o.kernel)
    parts += [ops, Text("")]
    for k in a.kernels:
        parts += _kernel(a, k)
    if len(a.kernels) > 1:
        t = a.totals
        total = titled_table("All kernels, one after another", "compute", "transfers", "predicted",
                       "throughput", "bound")
        row(total, seconds(t.compute_time_s), seconds(t.transfer_time_s), seconds(t.predicted_time_s),
                      si(t.throughput_flops_per_s, "FLOP/s"), t.bound)
        parts.append(total)
    if a.context_parallel is not None:
        parts += [Text(""), *context_parallel_parts(a.context_parallel)]
    return Group(*parts)


def _analysis_model(a: Analysis) -> str:
    """What napkin analyze's own time is: the paper's idealised bound, or its terms with a calibrated
    profile's parameters."""
    if a.gpu.calibration:
        return f"napkin analyze's model with {a.gpu.name}'s fitted parameters, at the tiles below"
    return ("the paper's idealised bound at the tiles below (datasheet rates, transfers and pipelines "
            "perfectly overlapped)")


def headline(a: Analysis) -> list[Text]:
    """The expected time of the kernel napkin kernel generates first, the analysis' own time beside it."""
    t = a.totals
    rate = f", {si(t.throughput_flops_per_s, 'FLOP/s')}" if t.throughput_flops_per_s else ""
    bound = Text(f"{seconds(t.predicted_time_s)}{rate}: {_analysis_model(a)}")
    e = a.expected
    if e is None:
        why = f" ({a.expected_absent})" if a.expected_absent else ""
        return [Text(f"expected: no generated kernel to time{why}", style="bold"), bound]
    kernel = e.kernel.removeprefix("the ") or f"{e.backend} kernel"
    share = f"; the expected time is {e.time_s / t.predicted_time_s:.2f}x this" if t.predicted_time_s else ""
    return [Text(f"expected {seconds(e.time_s)}, {si(e.throughput_flops_per_s, 'FLOP/s')}: the {kernel} "
                 f"napkin kernel generates, launching {e.configuration}; {e.bound}-bound; {e.model}",
                 style="bold"),
            Text(f"beside it {bound.plain}{share}")]


def _transfers(lv: LevelOut) -> str:
    """A level's transfers; below a cross level, the share it receives over its own feed (Theorem 3)."""
    if math.isclose(lv.received_bytes_value, lv.transfers_bytes_value, rel_tol=1e-12):
        return si(lv.transfers_bytes_value, "B")
    return f"{si(lv.received_bytes_value, 'B')} of {si(lv.transfers_bytes_value, 'B')}"


def _kernel(a: Analysis, k: KernelOut) -> list:
    parts: list = []
    loop = ""
    if k.body:
        stream = next(iter(k.levels[-1].stream), "")
        loop = f"; loop over {stream}: {', '.join(k.body)}"
        if k.head:
            loop = f"; before the loop: {', '.join(k.head)}" + loop
        if k.tail:
            loop += f"; after it: {', '.join(k.tail)}"
    parts.append(Text(f"Kernel {k.name}: {', '.join(k.ops)}{loop}", style="bold"))
    if k.block_skipping:
        parts.append(Text(f"block skipping: {k.block_skipping}"))
    for note in k.notes:
        parts.append(Text(f"note: {note}"))

    sym = titled_table("Symbolic model per level (values)", "level", "", "")
    for lv in k.levels:
        relabel = ", ".join([f"group {ax} -> {s}" for ax, s in lv.group.items()]
                            + [f"stream {ax} -> {s}" for ax, s in lv.stream.items()])
        role = lv.role if lv.drawn else f"{lv.role}, implied by {k.levels[-1].level}"
        row(sym, lv.level, "", f"{role}; fed by {lv.source}; {relabel or 'not partitioned'}")
        for name, expr in (("H", lv.transfers), ("H_g", lv.per_group), ("N_g", lv.groups),
                           ("M", lv.memory)):
            row(sym, "", name, expr)
    parts.append(sym)
    seen = set()
    for lv in k.levels:
        if lv.optimum is None or lv.optimum.h_star in seen:
            continue
        seen.add(lv.optimum.h_star)
        if all(t.beta == "0" for t in lv.optimum.standard_form):
            parts.append(Text(f"optimum H*(a, M) = {lv.optimum.h_star}   [independent of M: tile "
                              "sizes do not change these transfers]"))
            continue
        terms = " + ".join(f"({t.alpha})*M**-{t.beta}" if t.beta != "0" else f"({t.alpha})"
                           for t in lv.optimum.standard_form)
        sizes = ", ".join(f"{s} = {v}" for s, v in lv.optimum.group_sizes.items())
        parts.append(Text(f"optimum H*(a, M) = {lv.optimum.h_star}   [standard form: {terms}; "
                          f"at {sizes}; leading memory {lv.optimum.memory_lead} = M]"))
    if all(lv.optimum is None for lv in k.levels):
        parts.append(Text("optimum H*(a, M): no closed form (the memory has no single leading term); "
                          "the integer search below still applies"))

    conf = titled_table(f"Tiles on {a.gpu.name}: napkin analyze's optimum, the idealised bound's (the expected time "
                  "is the launched configuration's)", "level", "tiles", "N_g", "memory (limit)",
                  "transfers", "Hdot", "time")
    for lv in k.levels:
        tiles = ", ".join(f"{s}={v}" for s, v in lv.chosen.items()) or "-"
        row(conf, lv.level, tiles, f"{lv.groups_value:.0f}",
                     f"{binary(lv.memory_bytes_value)} ({binary(lv.memory_limit_bytes)})",
                     _transfers(lv), f"{si(lv.bandwidth_bytes_per_s, 'B/s')} from {lv.source}",
                     seconds(lv.transfer_time_s))
    parts.append(conf)
    rules = [r for lv in k.levels for r in lv.constraints]
    if rules:
        parts.append(Text("constraints: " + "; ".join(dict.fromkeys(rules))))
    if k.classic_rule is not None:
        parts += _classic(k.classic_rule, k.predicted_time_s)

    limits = [lv for lv in k.levels if lv.bandwidth_limit is not None]
    if limits:
        table = titled_table("Bandwidth limits (Appendix B.1): compute bound once H*/K < Hdot/Kdot",
                       "level", "Kdot/Hdot", "min memory", "min sizes (M -> inf)",
                       "tiles at level memory", "min sizes at level memory")
        for lv in limits:
            b = lv.bandwidth_limit
            row(table, lv.level, f"{b.compute_per_transfer:.4g}",
                 binary(b.min_memory_bytes) if b.min_memory_bytes is not None else "-",
                 ", ".join(f"{s} >= {v:.4g}" for s, v in b.min_sizes.items()) or "-",
                 ", ".join(f"{s} = {v:.4g}" for s, v in b.tile_sizes.items()) or "-",
                 ", ".join(f"{s} >= {v:.4g}" for s, v in b.min_sizes_at_memory.items()) or "-")
        parts.append(table)

    time = titled_table("FLOPs and predicted time", "term", "FLOPs (symbolic)", "FLOPs", "time")
    for pipe, expr in k.flops.items():
        row(time, pipe, expr, si(k.flops_value[pipe]), seconds(k.compute_time_s[pipe]))
    if _latency_shown(k):
        row(time, "loads in flight", "(lambda C + transfers) / ((stages - 1) k), 5.6", "",
            seconds(k.latency_time_s))
    if k.overhead_time_s:
        row(time, "+ overheads", "sigma k^-beta (sfu + vector) + t_step C / k (calibrated)", "",
            "+" + seconds(k.overhead_time_s))
    omega = (a.gpu.calibration or {}).get("level_overlap", 0.0)
    rule = f"Equation 2, levels overlapping (omega {omega:.2f})" if omega else "Equation 2: sum over levels"
    row(time, "transfers", rule, "", seconds(k.transfer_time_s))
    if k.power_time_s:
        row(time, "power", "sum a_p T_p: the clock the work allows (calibrated)", "", seconds(k.power_time_s))
    if k.exposed_time_s:
        row(time, "+ exposed", "prologue/epilogue transfers, block start, launch (calibrated)", "",
            "+" + seconds(k.exposed_time_s))
    parts.append(time)
    if k.cluster_trade_off_s:
        gains = ", ".join(f"N={n}: {seconds(v)}"
                          for n, v in k.cluster_trade_off_s.items())
        parts.append(Text(f"cluster-size trade-off Delta H*(N) (Appendix A.2.3; positive saves "
                          f"time): {gains}"))
    tensor = k.flops_value.get("tensor", 0.0)
    rate = f", {si(tensor / k.predicted_time_s, 'FLOP/s')}" if tensor and k.predicted_time_s else ""
    what = "analysis" if a.gpu.calibration else "idealised bound"
    parts.append(Text(f"{what}: {_sum(k)}: {k.bound}-bound{rate} (SM utilisation {k.utilization:.0%} "
                      f"from {k.levels[-1].groups_value:.0f} groups)", style="bold"))
    if a.expected is not None and len(a.kernels) == 1:
        e = a.expected
        parts.append(Text(f"expected: {seconds(e.time_s)}, {e.bound}-bound, the generated kernel "
                          f"({e.configuration}; {e.model})", style="bold"))
    parts.append(Text(""))
    return parts


def _latency_shown(k: KernelOut) -> bool:
    """Whether the loads in flight get a row: where they outlast every pipeline, and are not just the
    transfers again (one load in flight with no load latency takes the transfers' time)."""
    return k.latency_time_s > max(k.compute_time_s.values(), default=0.0) and \
        not math.isclose(k.latency_time_s, k.transfer_time_s, rel_tol=1e-9)


def shown_compute_s(k: KernelOut) -> float:
    """The compute term as the rows show it: the slowest pipeline, or the loads in flight where they
    have a row (or carry overheads), plus the overheads."""
    latency = k.latency_time_s if _latency_shown(k) or k.overhead_time_s else 0.0
    return max(max(k.compute_time_s.values(), default=0.0), latency) + k.overhead_time_s


def _sum(k: KernelOut) -> str:
    """How the rows above make the predicted time: the largest of compute, power and transfers, plus
    what is exposed."""
    compute = shown_compute_s(k)
    terms = [f"compute {seconds(compute)}", f"transfers {seconds(k.transfer_time_s)}"]
    if k.power_time_s:
        terms.insert(1, f"power {seconds(k.power_time_s)}")
    exposed = f" + exposed {seconds(k.exposed_time_s)}" if k.exposed_time_s else ""
    return f"predicted {seconds(k.predicted_time_s)} = max({', '.join(terms)}){exposed}"


def _classic(r: ClassicRuleOut, chosen_s: float) -> list[Text]:
    """Two lines: the rule's transfers against the optimum, then what its tiles need and break."""
    optimum = ", ".join(f"{s}={v}" for s, v in r.optimal_tiles.items())
    tiles = ", ".join(f"{s}={v}" for s, v in r.tiles.items())
    fits = "fits" if r.fits else "does NOT fit"
    breaks = f"; breaks {'; '.join(r.breaks)}" if r.breaks else ""
    return [Text(f"classic FlashAttention rule (B_c = ceil(M/4d) = {r.b_c}, B_r = min(B_c, d) = {r.b_r}; "
                 f"M = {r.memory_elements} values, d = {r.head_dim}): {r.level} transfers "
                 f"{r.ratio:.3g}x the optimum {si(r.optimal_transfer_bytes, 'B')} ({optimum})"),
            Text(f"  rule tiles {tiles}: {si(r.transfer_bytes, 'B')}, {binary(r.memory_bytes)} of "
                 f"{binary(r.memory_limit_bytes)} ({fits}), predicted {seconds(r.predicted_time_s)} "
                 f"(chosen tiles {seconds(chosen_s)}){breaks}")]


def latex(a: Analysis) -> str:
    """The symbolic model as LaTeX, one align block per kernel."""
    lines = [f"% napkin {a.napkin_version}: {a.diagram.name} ({a.diagram.source})"]
    for k in a.kernels:
        lines.append(f"% kernel {k.name}")
        lines.append("\\begin{align}")
        rows = []
        for lv in k.levels:
            tag = f"\\mathrm{{{lv.level}}}"
            rows.append(f"H_{{{tag}}} &= {lv.latex['transfers']}")
            rows.append(f"H_{{{tag},g}} &= {lv.latex['per_group']}")
            rows.append(f"N_{{{tag},g}} &= {lv.latex['groups']}")
            rows.append(f"M_{{{tag}}} &= {lv.latex['memory']}")
            if "h_star" in lv.latex:
                rows.append(f"H^*_{{{tag}}}(\\vec a, M) &= {lv.latex['h_star']}")
        lines.append(" \\\\\n".join(rows))
        lines.append("\\end{align}")
    return "\n".join(lines)
