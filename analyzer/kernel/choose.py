"""Which configuration a generated kernel realises: tile sizes, warps and pipelining stages.

The numbers come from `napkin configure` (Section 5): a named configuration from the diagram file, or
else the best of the legal configurations the model ranks. A candidate is a block of rows g = N w (N
tensor-core thread groups of w rows, w the tensor cores' m), a stream chunk s and 2 or 3 buffers per
streamed load (stages). Each is configured for the GPU with the element types the generated kernel
keeps: contraction outputs and the softmax auxiliaries in fp32 registers. Those whose variables
overflow SMEM or the registers (Table 2), or leave a thread fewer than 16 registers of its own, are
dropped, and the rest are ranked by the predicted
throughput (Appendix B.0.1 times the overlap of Section 6). Ties go first to more buffers (they hide
load latency, which B.0.1 does not count, and cost only SMEM that is free once the candidate fits),
then to the larger chunk: every chunk pays one accumulator rescale and one synchronisation, the
per-chunk overhead that Section 6 names as the small-tile hypothesis. bench/tiles_h200.py measures
how these rules rank against the alternatives on an H200 (docs/kernels.md).

Triton's tiles are powers of two (`tl.arange`) of at least 16 (`tl.dot`), which bounds the candidates.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass, field

from analyzer.config.configure import configure
from analyzer.config.result import ConfigurationReport
from analyzer.diagram.compiled import Diagram
from analyzer.errors import NapkinError
from analyzer.hardware import Profile

TILE_MIN, TILE_MAX = 16, 256     # Triton: tl.dot needs 16 per dimension; larger tiles spill registers
STAGES = (2, 3)                  # buffers per streamed load: 2 loads chunk j+1 while j computes (5.6)
TIE = 0.005                      # relative throughput within which candidates tie
RESERVE_REGISTERS = 16           # per thread, for addresses, indices and loop state (not in Table 1)


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


def from_report(report: ConfigurationReport, profile: Profile, tiles: set[str], source: str,
                candidates: int = 0) -> Choice:
    warps_per_group = profile.divisors.mma_threads // profile.threads.warp_size
    util = report.overlap.utilization if report.overlap else 1.0
    return Choice(report.configuration.kernel,
                  {k: v for k, v in report.values.items() if k in tiles},
                  report.configuration.groups * warps_per_group, report.configuration.stages, source,
                  report.throughput.throughput_flops_per_s * util, candidates, report)


def choose(d: Diagram, profile: Profile, kernel: str, tiles: set[str], *, config: str | None = None,
           sets: dict[str, int] | None = None, dtype: str | None = None) -> Choice:
    """The configuration of `kernel` of diagram `d` on `profile` (`tiles`: its partition symbols)."""
    sets = dict(sets or {})
    if config is not None:
        report = configure(d, profile, config=config, sets=sets, dtype=dtype, kernel=kernel,
                           dtypes=kept_dtypes(d, kernel))
        return from_report(report, profile, tiles, f"{d.name}'s configuration {config!r}")
    best: tuple[tuple, ConfigurationReport] | None = None
    count = 0
    first_error: NapkinError | None = None
    for candidate in candidates(d, profile, kernel, sets, dtype):
        try:
            report = configure(d, profile, sets=candidate, dtype=dtype, kernel=kernel,
                               dtypes=kept_dtypes(d, kernel))
        except NapkinError as exc:
            first_error = first_error or exc
            continue
        if not report.fits or not _headroom(report):
            continue
        count += 1
        rate = report.throughput.throughput_flops_per_s * report.overlap.utilization
        stream = max((v for k, v in candidate.items() if k.startswith("s_")), default=0)
        key = (rate, candidate["stages"], stream)
        if best is None or _better(key, best[0]):
            best = (key, report)
    if best is None:
        if first_error is not None and sets:
            raise first_error
        raise NapkinError(f"no configuration of kernel {kernel!r} fits {profile.name}",
                          file=d.source, hint="pin smaller tiles with --set, or pick another GPU")
    source = (f"the best of {count} legal configurations ranked by predicted throughput "
              f"(napkin configure, {profile.name})")
    return from_report(best[1], profile, tiles, source, count)


def _headroom(report: ConfigurationReport) -> bool:
    """Table 1 counts the kernel's arrays; a thread also needs registers of its own."""
    for c in report.capacity:
        if c.storage == "registers" and c.excess_thread_bytes is not None:
            return c.excess_thread_bytes >= RESERVE_REGISTERS * 4
    return True


def _better(key: tuple, than: tuple) -> bool:
    rate, *rest = key
    best_rate, *best_rest = than
    if rate > best_rate * (1 + TIE):
        return True
    return rate >= best_rate * (1 - TIE) and tuple(rest) > tuple(best_rest)


def kept_dtypes(d: Diagram, kernel: str) -> dict[str, str]:
    """What the generated kernel keeps in fp32: contraction outputs (the tensor cores accumulate in
    fp32) and the online-softmax auxiliaries."""
    from analyzer.config.configure import schedule_of
    s = schedule_of(d, kernel)
    return {**{o.name: "fp32" for o in s.ops if o.primitive.contraction}, "aux": "fp32"}


def candidates(d: Diagram, profile: Profile, kernel: str, sets: dict[str, int], dtype: str | None):
    """Row blocks g = N w, stream chunks s and stages to try, with what --set pins left as given."""
    from analyzer.config.configure import names_of, schedule_of
    s = schedule_of(d, kernel)
    names = names_of(s)
    mma = profile.divisors.mma.get(dtype or d.dtype)
    w = sets.get(names.w) or (mma.m if mma else profile.threads.warp_size)
    low = max(TILE_MIN, *(getattr(mma, k) for k in ("n", "k"))) if mma else TILE_MIN
    powers = [2 ** i for i in range(int(math.log2(low)), int(math.log2(TILE_MAX)) + 1)]
    row_groups = names.row_groups
    fixed = {sym.name: 1 for axis, sym in s.partition.group if axis in batch_axes(s)}
    rows_options = ([sets[row_groups[-1]]] if row_groups[-1] in sets else
                    [n * w for n in range(1, 5) if n * w <= TILE_MAX and _pow2(n * w)])
    stream_options = [sets[names.s]] if names.s in sets else powers
    stage_options = [sets["stages"]] if "stages" in sets else STAGES
    # other tiled axes (matmul's columns g_c): powers of two, as Triton's tiles are
    others = [sym.name for axis, sym in s.partition.group
              if sym.name not in row_groups and sym.name not in fixed and sym.name not in sets]
    columns = [p for p in powers if p >= 64] if others else [None]
    for rows, chunk, stages, column in itertools.product(rows_options, stream_options, stage_options,
                                                         columns):
        c = {**fixed, **sets, row_groups[-1]: rows, names.w: w, "stages": stages}
        c.update({name: column for name in others if column is not None})
        for extra in row_groups[:-1]:
            c.setdefault(extra, 1)   # outer row axes (GQA's g) take one index per block
        if names.s:
            c[names.s] = chunk
        yield c


def batch_axes(s) -> set[str]:
    """Axes a contraction of the kernel keeps in both operands: a two-dimensional tensor-core tile
    cannot span them, so a block takes one index of each."""
    axes_of = s.diagram.axes_of()
    found: set[str] = set()
    for op in s.ops:
        if op.primitive.contraction:
            first, second = (set(axes_of[i]) for i in op.inputs)
            found |= (first & second & set(op.applied.output))
    return found


def _pow2(n: int) -> bool:
    return n & (n - 1) == 0
