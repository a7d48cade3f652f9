"""napkin sweep's tables: one a kernel, its legal configurations fastest first (analyzer.config.sweep).

Apart from napkin analyze's text (analyzer.report.analysis), which a cached answer prints without
loading the model: these tables read the rankings' own values (analyzer.config.ranking).
"""

from __future__ import annotations

from rich.console import Group
from rich.text import Text

from analyzer.common.units import seconds, si
from analyzer.config.ranking import ContractionRow, HopperRow
from analyzer.report.tables import row, titled_table


def _hopper_sweep_text(s, top: int) -> list:
    """The Hopper kernel's configurations (analyzer.config.hopper), the model's choice first."""
    sizes = ", ".join(f"{k}={v}" for k, v in s.sizes.items())
    rows = s.rows[:top] if top else s.rows
    table = titled_table(f"{len(s.rows)} legal configurations of the Hopper kernel, the model's choice first"
                   + (f" (the first {len(rows)})" if len(rows) < len(s.rows) else ""),
                   "rank", "warpgroups", "s_x", "stages", "overlap", "schedule", "predicted", "throughput",
                   "bound")
    for i, r in enumerate(rows, 1):
        c = r.config
        row(table, _rank(s, i), str(c.warpgroups), str(c.chunk), str(c.stages), c.overlap, c.schedule,
            seconds(r.time_s), si(r.throughput_flops_per_s, "FLOP/s"), r.bound)
    return [Text(f"{s.diagram} kernel {s.kernel} on {s.gpu} (Hopper kernel, {s.model}), {s.dtype}; {sizes}",
                 style="bold"), table,
            Text(f"ranked in {s.seconds:.2f} s; predictions within {s.tie:.0%} of the fastest are alike and the tie "
                 f"rule orders them (docs/kernels.md), the rest follow fastest first; {_launched(s)}\n")]


def _contraction_sweep_text(s, top: int) -> list:
    """The Hopper contraction kernel's configurations (analyzer.config.contraction), the model's choice
    first."""
    sizes = ", ".join(f"{k}={v}" for k, v in s.sizes.items())
    rows = s.rows[:top] if top else s.rows
    if rows and hasattr(rows[0].config, "block_f"):
        return _chain_sweep_text(s, rows, sizes)
    table = titled_table(f"{len(s.rows)} legal configurations of the Hopper contraction kernel, the model's choice "
                         f"first; within {s.tie:.1%} a tie, ordered by the larger tile, more stages, fewer warpgroups"
                         + (f" (the first {len(rows)})" if len(rows) < len(s.rows) else ""),
                         "rank", "BLOCK_M", "BLOCK_N", "BLOCK_K", "consumers", "stages", "predicted", "throughput",
                         "bound")
    for i, r in enumerate(rows, 1):
        c = r.config
        row(table, _rank(s, i), str(c.block_m), str(c.block_n), str(c.block_k), str(c.warpgroups), str(c.stages),
            seconds(r.time_s), si(r.throughput_flops_per_s, "FLOP/s"), r.bound)
    return [Text(f"{s.diagram} kernel {s.kernel} on {s.gpu} (Hopper contraction kernel, {s.model}), {s.dtype}; "
                 f"{sizes}", style="bold"), table, Text(f"ranked in {s.seconds:.2f} s; {_launched(s)}\n")]


def _chain_sweep_text(s, rows: list, sizes: str) -> list:
    """The Hopper chain kernel's configurations (analyzer.config.chain), the model's choice first."""
    table = titled_table(f"{len(s.rows)} legal configurations of the Hopper chain kernel, the model's choice first; "
                         f"within {s.tie:.1%} a tie, ordered by more rows, more stages, fewer warpgroups"
                         + (f" (the first {len(rows)})" if len(rows) < len(s.rows) else ""),
                         "rank", "BLOCK_M", "BLOCK_F", "consumers", "stages", "predicted", "throughput", "bound")
    for i, r in enumerate(rows, 1):
        c = r.config
        row(table, _rank(s, i), str(c.block_m), str(c.block_f), str(c.warpgroups), str(c.stages), seconds(r.time_s),
            si(r.throughput_flops_per_s, "FLOP/s"), r.bound)
    return [Text(f"{s.diagram} kernel {s.kernel} on {s.gpu} (Hopper chain kernel, {s.model}), {s.dtype}; {sizes}",
                 style="bold"), table, Text(f"ranked in {s.seconds:.2f} s; {_launched(s)}\n")]


def _rank(s, i: int) -> str:
    return f"{i} *" if s.launched == i - 1 else str(i)


def _launched(s) -> str:
    """Which row napkin kernel's module launches at these sizes, and its expected time."""
    e = s.expected
    if e is None:
        return "the first is the model's choice at these sizes"
    where = (f"* marks it: rank {s.launched + 1}" if s.launched is not None else
             "not among these rows")
    return (f"napkin kernel's module launches {e.configuration} at these sizes (its by-size table's nearest "
            f"grid point; {where}): expected {seconds(e.time_s)}")


def sweep_text(sweeps, top: int = 0) -> Group:
    """napkin sweep: one table per kernel, fastest first (analyzer.config.sweep.Sweep)."""
    parts: list = []
    for s in sweeps:
        if isinstance(s.rows[0], HopperRow):        # the Hopper kernel's rows: whole configurations
            parts += _hopper_sweep_text(s, top)
            continue
        if isinstance(s.rows[0], ContractionRow):   # the Hopper contraction kernel's
            parts += _contraction_sweep_text(s, top)
            continue
        sizes = ", ".join(f"{k}={v}" for k, v in s.sizes.items())
        model = s.model or ("calibrated model" if s.calibrated else "datasheet model")
        parts.append(Text(f"{s.diagram} kernel {s.kernel} on {s.gpu} ({model}), {s.dtype}; {sizes}",
                          style="bold"))
        rows = s.rows[:top] if top else s.rows
        table = titled_table(f"{len(s.rows)} legal configurations, fastest first; within {s.tie:.1%} a tie, ordered by "
                       "more stages, more rows, the larger chunk, more warps"
                       + (f" (the first {len(rows)})" if len(rows) < len(s.rows) else ""),
                       "rank", *s.rows[0].tiles, "warps", "stages", "predicted", "throughput", "bound")
        for i, r in enumerate(rows, 1):
            row(table, _rank(s, i), *(str(v) for v in r.tiles.values()), str(r.num_warps),
                str(r.num_stages), seconds(r.time_s), si(r.throughput_flops_per_s, "FLOP/s"), r.bound)
        parts += [table, Text(f"ranked in {s.seconds:.2f} s; {_launched(s)}\n")]
    return Group(*parts)


__all__ = ["sweep_text"]
