"""A resolved configuration: every configuration variable with its number (Sections 5.3-5.5).

The names follow the paper's relabellings below SMEM, derived from the kernel's schedule: the rows of a
block (the grouped m axes of its first contraction, e.g. q with g_q) are split over N tensor-core
thread groups of w_q rows each (warpgroups on Hopper, warps on Ampere and Turing), so g_q = N w_q; the
streamed axis x keeps its chunk s_x; the register subloop of the accumulator takes u_x of it (Section
5.2); the staged strategy feeds the tensor cores chunks of c_x and takes their output in chunks of c_d,
which the threads read in chunks of e_d (the paper's d' and d'').
"""

from __future__ import annotations

from dataclasses import dataclass, field

from analyzer.common.dtypes import bytes_per_value
from analyzer.diagram.compiled import Op
from analyzer.diagram.spec import ConfigurationSpec
from analyzer.hardware import Profile
from analyzer.model.fusion import Schedule


def contraction_dtype(schedule: Schedule, op: Op, dtypes: dict[str, str]) -> str:
    """The element type a contraction runs in: its widest loaded operand's (a computed operand, the
    probabilities, is converted to it, as FlashAttention-3 does for FP8)."""
    d = schedule.diagram
    loaded = [i for i in op.inputs if i in schedule.loads or i in schedule.resident]
    types = [dtypes.get(i, d.arrays[i].dtype) for i in (loaded or op.inputs)]
    return max(types, key=lambda t: (bytes_per_value(t), t))


@dataclass(frozen=True)
class Names:
    """The configuration variables of one kernel, named from its axes."""

    rows: tuple[str, ...]          # grouped m axes of the first contraction (merged into one row dim)
    row_groups: tuple[str, ...]    # their group-size symbols, e.g. (g_q,)
    w: str                         # rows per tensor-core thread group, e.g. w_q
    stream: str | None             # streamed axis, e.g. x
    s: str | None                  # its chunk, e.g. s_x
    u: str | None                  # register subloop of the chunk, e.g. u_x
    c_stream: str | None           # staged: tensor-core chunk of the streamed contraction, e.g. c_x
    out: str | None                # the last non-row output axis of the reducer, e.g. d
    c_out: str | None              # staged: tensor-core chunk of it (the paper's d')
    e_out: str | None              # staged: register chunk of it (the paper's d'')

    def variables(self, strategy: str) -> tuple[str, ...]:
        names = [self.w, self.u]                  # s is a tile size of the diagram
        if strategy == "staged":
            names += [self.c_stream, self.c_out, self.e_out]
        return tuple(n for n in names if n)


@dataclass(frozen=True)
class Setting:
    """Numbers for one configuration of one kernel on one GPU."""

    spec: ConfigurationSpec
    schedule: Schedule
    profile: Profile
    names: Names
    values: dict[str, int]                 # diagram sizes, tile sizes and configuration variables
    dtypes: dict[str, str]                 # array (or "aux") -> element type
    warpgroups: int                        # N
    rows_per_load: int                     # rows sharing one loaded chunk (throughput analysis)
    derived_from: str = ""                 # where the tiles came from (e.g. napkin analyze's choice)
    notes: tuple[str, ...] = field(default_factory=tuple)
    loads_from: str | None = None          # the level the streamed chunks come from (None: the top, GMEM)

    @property
    def strategy(self) -> str:
        return self.spec.strategy

    @property
    def overlap(self) -> str:
        return self.spec.overlap

    @property
    def threads_per_group(self) -> int:
        return self.profile.divisors.mma_threads

    @property
    def unit(self) -> str:
        return "warpgroup" if self.threads_per_group > self.profile.threads.warp_size else "warp"

    def value(self, name: str | None) -> int:
        return self.values[name] if name else 1

    @property
    def w(self) -> int:
        return self.values[self.names.w]

    @property
    def chunk(self) -> int:
        return self.value(self.names.s)

    @property
    def subloop(self) -> int:
        """u: register subloop of the stream chunk (u = s: no subloop)."""
        return self.values.get(self.names.u, self.chunk) if self.names.u else 1

    def dtype(self, array: str, default: str) -> str:
        return self.dtypes.get(array, default)

    def contraction_dtype(self, op: Op) -> str:
        return contraction_dtype(self.schedule, op, self.dtypes)
