"""napkin analyze with several GPUs or a size range: one row per GPU and size, the expected time of the
generated kernel first and the paper's idealised bound beside it (as the one-GPU headline has them)."""

from __future__ import annotations

from rich.console import Group
from rich.table import Table
from rich.text import Text

from analyzer.common.units import seconds, si
from analyzer.model.result import Comparison


def comparison_text(c: Comparison) -> Group:
    first = c.analyses[0]
    gpus = list(dict.fromkeys(a.gpu.name for a in c.analyses))
    # a size tied to a varied one (causal attention's x = q) varies with it: a column too
    varies = [s.axis for s in first.sizes if s.axis in c.varied
              or len({a.size(s.axis) for a in c.analyses}) > 1]
    varies += [name for name in c.varied if name not in varies]     # a tile (g_q), a size symbol
    fixed = ", ".join(f"{s.axis}={s.value}" for s in first.sizes if s.axis not in varies)
    title = Text(f"{first.diagram.name}: {first.diagram.title}; {first.dtype}; {fixed}", style="bold")
    table = Table(title=f"{len(gpus)} GPU(s) x {len(c.analyses) // max(1, len(gpus))} size(s): the generated "
                        "kernel's expected time, and the idealised bound beside it",
                  title_justify="left", title_style="bold", header_style="bold", show_edge=False, pad_edge=False)
    # with --devices: each GPU count's time and efficiency (napkin analyze --devices; docs/scale.md)
    split = first.context_parallel
    counts = [n.devices for n in split.counts] if split else []
    split_columns = [f"{n} GPU{'s' if n > 1 else ''}" for n in counts]
    for column in ("GPU", *varies, "expected", "throughput", "bound", "model", "idealised", "ideal bound",
                   *split_columns):
        table.add_column(column, overflow="fold", justify="right" if column in (
            *varies, "expected", "throughput", "idealised", *split_columns) else "left")
    for a in c.analyses:
        e, t = a.expected, a.totals
        by_count = {n.devices: n for n in a.context_parallel.counts} if a.context_parallel else {}
        table.add_row(*(Text(cell) for cell in (
            a.gpu.name, *(str(a.value(name)) for name in varies),
            seconds(e.time_s) if e else "-", si(e.throughput_flops_per_s, "FLOP/s") if e else "-",
            e.bound if e else "-", ("calibrated" if e.calibrated else "idealised") if e else "no kernel",
            seconds(t.predicted_time_s), t.bound,
            *(_split(by_count.get(n)) for n in counts))))
    notes = sorted({f"{a.gpu.name}: {a.expected.model}" for a in c.analyses if a.expected}
                   | {f"{a.gpu.name}: no generated kernel ({a.expected_absent})" for a in c.analyses
                      if a.expected is None})
    parts = [title, table, Text("models: " + "; ".join(notes))]
    if split:
        weave = ", ".join(f"{k}={v}" for k, v in split.sizes.items() if k in ("batch", "heads"))
        parts.append(Text(f"N GPUs: the attention ({weave}) split by context parallelism ({split.rotation} "
                          f"rotation over {split.link}, {split.merge}'s merge): the time, its efficiency against "
                          "one GPU, and where the link bounds it (docs/scale.md)"))
    return Group(*parts)


def _split(n) -> str:
    """One GPU count's cell: its time and efficiency, and a mark where the link bounds it."""
    if n is None:
        return "-"
    return f"{seconds(n.time_s)} ({n.efficiency:.0%}{', link' if n.bound == 'communication' else ''})"
