"""A generated kernel's configuration (`Choice`), and the axes a block takes one index of (`batch_axes`).

Kept apart from analyzer.config.choose, which ranks configurations, so that the plan
(analyzer.config.plan) and the portable kernel's allocation (analyzer.config.allocation), which
legality reads, sit below it.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from analyzer.config.result import ConfigurationReport
from analyzer.model.constraints import one_index_axes


@dataclass(frozen=True)
class Choice:
    """The configuration of one kernel: tile sizes by symbol, warps, stages, and where they came from."""

    kernel: str
    tiles: dict[str, int]                # partition symbols -> tile size (g_q, s_x, ...)
    num_warps: int
    num_stages: int
    source: str                          # a sentence: named configuration, or ranked candidates
    throughput_flops_per_s: float | None = None
    candidates: int = 0
    report: ConfigurationReport | None = field(default=None, repr=False, compare=False)
    tile_elements: int = 0               # row block x stream chunk: the streamed tile of one block
    smem_bytes: int | None = None        # SMEM a block of the kernel allocates (None: not counted)
    analyzed: bool = False               # napkin analyze's tiles: a kernel outside Section 5's model


def batch_axes(s) -> set[str]:
    """Axes a contraction of the kernel keeps in both operands: a block takes one index of each."""
    return one_index_axes(s)
