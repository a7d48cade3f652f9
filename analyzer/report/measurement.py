"""napkin measure's screen: what ran where, whether it was right, how long it took and what the model said."""

from __future__ import annotations

from rich.table import Table

from analyzer.common.units import seconds, si
from analyzer.measure.result import Measurement


def measurement_table(m: Measurement) -> Table:
    """Two columns: what, and its value; the measured time beside the predicted one."""
    table = Table(show_header=False, show_edge=False, box=None, padding=(0, 2))
    table.add_column(style="bold")
    table.add_column()
    d, p, c = m.device, m.predicted, m.check
    table.add_row("device", f"{d.name} ({d.sm_count} SMs, compute capability {d.compute_capability})")
    table.add_row("profile", f"{d.profile} ({d.profile_found})")
    table.add_row("kernel", f"{m.diagram}, {p.kernel or p.backend}, {m.dtype}: {p.configuration}")
    table.add_row("sizes", ", ".join(f"{k}={v}" for k, v in sorted(m.sizes.items())))
    table.add_row("check", f"{'passed' if c.passed else 'FAILED'}: largest error {c.max_error:.3g} of the largest "
                           f"float64 value (at most {c.tolerance:.3g})")
    if m.timing is not None:
        t = m.timing
        table.add_row("measured", f"{seconds(t.time_s)} (20th-80th percentile {seconds(t.time_s_p20)} to "
                                  f"{seconds(t.time_s_p80)}; {t.method}, {t.repetitions_ms:g} ms a repetition)")
        if m.throughput_flops_per_s:
            table.add_row("throughput", si(m.throughput_flops_per_s, "FLOP/s") + " of the tensor FLOPs the model "
                          "counts")
    table.add_row("predicted", f"{seconds(p.time_s)}, {p.bound}-bound; {p.model}")
    if m.measured_over_predicted is not None:
        table.add_row("measured / predicted", f"{m.measured_over_predicted:.3f}")
    return table


__all__ = ["measurement_table"]
