"""Terminal rendering of `napkin configure`: the paper's tables, in its order (Section 5.6-5.7, B.0.1)."""

from __future__ import annotations

from rich.console import Group
from rich.table import Table
from rich.text import Text

from analyzer.common.units import seconds, si
from analyzer.config.result import ConfigurationReport
from analyzer.report.tables import row


def _table(title: str, *columns: str) -> Table:
    table = Table(title=title, title_justify="left", title_style="bold", show_edge=False,
                  header_style="bold")
    for i, col in enumerate(columns):
        table.add_column(col, justify="left" if i == 0 else "right")
    return table


def _kb(n: float | None) -> str:
    return "-" if n is None else f"{n / 1024:.2f}"


def render(r: ConfigurationReport) -> Group:
    c = r.configuration
    unit = c.unit
    head = Text()
    head.append(f"{r.diagram}", style="bold")
    head.append(f" on {r.gpu}: configuration {c.name}")
    if c.title:
        head.append(f" ({c.title})")
    plural = "" if c.groups == 1 else "s"
    head.append(f"\n  kernel {c.kernel}; {c.strategy} strategy, {c.overlap}-{unit} overlap; "
                f"N = {c.groups} {unit}{plural} of {c.threads_per_group} threads; {c.stages} "
                f"buffer{'' if c.stages == 1 else 's'} per streamed load; numbers from {c.derived_from}")
    if c.paper:
        head.append(f"\n  paper: {c.paper}")
    head.append("\n  " + ", ".join(f"{k}={v}" for k, v in r.values.items()))

    short = "WG" if unit == "warpgroup" else "warp"
    t1 = _table("Configuration (Table 1): variables to pre-allocate", "variable", "shape", "type",
                "on", "in", "x", "/block B", f"/{short} B")
    for v in r.variables:
        block = str(v.bytes) if v.scope == "block" else ""
        group = str(v.bytes) if v.scope == "group" else ""
        on = "tensor" if v.level == "tensor core" else "threads"
        where = "regs" if v.storage == "registers" else v.storage
        row(t1, v.name, v.shape.replace(" x ", "*"), v.dtype, on, where, str(v.buffers), block, group)
    for cap in r.capacity:
        where = "regs" if cap.storage == "registers" else cap.storage
        row(t1, f"total {where} KB", "", "", "", "", "", _kb(cap.block_bytes), _kb(cap.group_bytes))

    t2 = _table(f"Maximum analysis (Table 2, KB): N_max = (M_max - M_TB) / M_WG; excess at "
                f"N = {c.groups}", "", "M_max", "M_TB", "M_WG", "N_max", "excess/block",
                f"/{short}", "/thread B", "reg cap B")
    for cap in r.capacity:
        row(t2, "regs" if cap.storage == "registers" else cap.storage, _kb(cap.max_bytes),
            _kb(cap.block_bytes), _kb(cap.group_bytes),
            "-" if cap.n_max is None else f"{cap.n_max:.2f}", _kb(cap.excess_block_bytes),
            _kb(cap.excess_group_bytes),
            "" if cap.excess_thread_bytes is None else f"{cap.excess_thread_bytes:.0f}",
            "" if cap.thread_limit_excess_bytes is None else f"{cap.thread_limit_excess_bytes:.0f}")

    t3 = _table("Compute analysis (Table 3): per row, per chunk", "column", "pipe", "type",
                "ops/row", "formula", "ops/clk/SM", "clk/row")
    for col in r.compute.columns:
        row(t3, col.label, col.pipeline, col.dtype, f"{col.ops_per_row:g}", col.formula,
            f"{col.ops_per_clock:.0f}", f"{col.clocks_per_row:.3g}")
    for pipe, clk in r.compute.clocks_per_row.items():
        row(t3, f"total {pipe}", "", "", "", "", "", f"{clk:.3g}")
    over = ", ".join(f"{p} {v:g}" for p, v in r.compute.overhead_ops_per_row.items())

    t = r.throughput
    t4 = _table("Throughput analysis (Appendix B.0.1)", "quantity", "value")
    for name, value in (
            ("k: tensor clk / row", f"{t.tensor_clocks_per_row:.3g}"),
            ("H: bytes loaded per chunk", f"{t.bytes_per_chunk}"),
            ("f_K", si(t.clock_hz, "Hz")), (f"B ({t.loads_from.upper()})", si(t.bandwidth_bytes_per_s, "B/s")),
            ("N_SM", str(t.sm_count)), ("T_H = H N_SM / B", seconds(t.load_time_s)),
            ("g* = T_H f_K / k (min rows)", f"{t.min_rows:.0f}"),
            ("g: rows per load", str(t.rows)), ("T_K = k g / f_K", seconds(t.compute_time_s)),
            ("K = g x tensor ops / row", f"{t.ops_per_chunk:.3g}"),
            ("throughput K N_SM / max(T_K, T_H)", si(t.throughput_flops_per_s, "FLOP/s")),
            ("bound", t.bound)):
        row(t4, name, value)

    o = r.overlap
    t5 = Text()
    t5.append(f"Overlap (Section 6): {o.strategy}-{unit}, N = {o.groups}, overhead "
              f"{o.overhead:.0%}\n", style="bold")
    t5.append("  blocks (clk/row): " + ", ".join(f"{k} {v:.3g}" for k, v in o.stages.items()) + "\n")
    t5.append(f"  period {o.period_clocks_per_row:.3g} clk/row per iteration of every {unit} (lower "
              f"bound {o.bound_clocks_per_row:.3g}); tensor "
              f"cores busy {o.utilization:.0%}; overhead the schedule hides: "
              f"{_accommodation(o.accommodation)}")

    verdict = Text()
    if r.fits:
        verdict.append("fits: every excess is non-negative", style="green")
    else:
        verdict.append("does not fit:\n", style="bold red")
        for p in r.problems:
            verdict.append(f"  - {p}\n")
    parts = [head, Text(), t1, Text(), t2, Text(), t3]
    if over:
        parts.append(Text(f"  not in the table (the paper's overhead): {over} ops / row"))
    parts += [Text(), t4, Text(), t5, Text(), verdict]
    parts += [Text(f"note: {n}") for n in r.notes]
    parts.append(_expected(r))
    return Group(*parts)


def _expected(r: ConfigurationReport) -> Text:
    """What napkin kernel launches, as napkin analyze and sweep state it, and whether the tables above
    analyse it."""
    e = r.expected
    if e is None:
        why = f" ({r.expected_absent})" if r.expected_absent else ""
        return Text(f"expected: no generated kernel to time{why}; the tables above analyse configuration "
                    f"{r.configuration.name}", style="bold")
    tables = ("the tables above are Section 5's analysis of it" if r.launched else
              f"the tables above analyse configuration {r.configuration.name} instead"
              + (f" ({r.other})" if r.other else ""))
    return Text(f"expected: napkin kernel launches {e.configuration} at these sizes, {seconds(e.time_s)}, "
                f"{si(e.throughput_flops_per_s, 'FLOP/s')}, {e.bound}-bound ({e.model}); {tables}; their "
                "throughput is the paper's idealised bound", style="bold")


def _accommodation(value: float | None) -> str:
    if value is None:
        return "any (no non-tensor work)"
    return "none" if value <= 0 else f"{value:.0%}"


def render_list(found) -> Table:
    d, configs = found
    table = _table(f"{d.name}: named configurations (napkin configure {d.name} --config NAME)",
                   "name", "title", "paper", "strategy", "overlap")
    for c in configs:
        row(table, c.name, c.title, c.paper, c.strategy, c.overlap)
    if not configs:
        row(table, "(none)", "leave out --config to derive one from napkin analyze", "", "", "")
    return table

