"""Render napkin analyze --devices (and napkin sweep --devices): the time on 1 .. N GPUs of one host."""

from __future__ import annotations

from rich.text import Text

from analyzer.common.units import seconds, si
from analyzer.model.result import ContextParallelOut
from analyzer.report.tables import row, titled_table


def context_parallel_parts(cp: ContextParallelOut) -> list:
    """A title, one row per device count, and what crosses the link."""
    sizes = ", ".join(f"{k}={v}" for k, v in cp.sizes.items())
    table = titled_table(f"Context parallelism ({cp.rotation} rotation, {cp.merge}'s merge, {cp.link} at "
                         f"{si(cp.link_bytes_per_s, 'B/s')} each way; {sizes})", "GPUs", "time", "efficiency",
                         "blocks", "merges, copies", "link", "link exposed", "bound", "link bounds up to")
    for n in cp.counts:
        row(table, str(n.devices), seconds(n.time_s), f"{n.efficiency:.0%}", seconds(n.kernel_s),
            seconds(n.engine_s), f"{si(n.cross_bytes, 'B')} in {seconds(n.link_s)}" if n.devices > 1 else "",
            seconds(n.waits_s) if n.devices > 1 else "", n.bound, _up_to(n.link_bound_up_to, n.devices))
    return [table,
            Text(f"each GPU receives {cp.cross_bytes_per_device} bytes over the link (N_c GPUs; Appendix A.2.3 "
                 "with the query axis grouped over the GPUs and the key axis streamed around them); "
                 f"{cp.engine}; the slowest rank's steps, each block its kernel's expected time (docs/scale.md)")]


def _up_to(length: int | None, devices: int) -> str:
    """The longest query sequence at which the link bounds the ring, as a table cell."""
    if devices == 1:
        return ""
    return "no length" if length is None else f"{length} tokens"
