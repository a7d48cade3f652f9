"""Which configuration a generated kernel realises: tile sizes, warps and pipelining stages.

The numbers come from `napkin configure` (Section 5): a named configuration from the diagram file, or
else the fastest of the legal configurations by the model's predicted time. A candidate is a block of
rows g = N w (N tensor-core thread groups of w rows, w one or two of the tensor cores' m), a stream
chunk s and 2 or 3 buffers per streamed load (stages). Each is configured for the GPU with the element
types the generated kernel keeps: contraction outputs and the softmax auxiliaries in fp32 registers.
Those whose variables overflow SMEM or the registers (Table 2), or leave a thread fewer than 16
registers of its own, are dropped; so are those that break a divisor rule (5.4, block skipping), and,
with a profile calibrated against the compiler's register count, those it would cap and spill. The
rest are ranked by the predicted time of napkin analyze's model (analyzer.model.predict, with the
profile's calibration when it has one). Ties go first to more buffers (they hide load latency, which
the datasheet model does not count, and cost only SMEM that is free once the candidate fits), then to
more rows (each streamed chunk serves more of them), then to the larger chunk (fewer per-chunk rescales
and synchronisations: Section 6.3's small-tile overhead), then to more warps (the model's terms do not
depend on them, but more warps hide each other's latency and hold fewer registers each; on the H200
sweep twice the warps ran faster in most pairs, docs/validation.md). `napkin sweep` lists the whole
ranking; bench/sweep_h200.py measures it on an H200.

Triton's tiles are powers of two (`tl.arange`) of at least 16 (`tl.dot`), which bounds the candidates.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import replace

import numpy as np

from analyzer.common.errors import NapkinError
from analyzer.config.allocation import allocation
from analyzer.config.choice import Choice, batch_axes
from analyzer.config.configure import configure, names_of, schedule_of
from analyzer.config.plan import plan
from analyzer.config.result import ConfigurationReport
from analyzer.diagram.compiled import Diagram
from analyzer.hardware import Profile
from analyzer.model.analysis import TermModel
from analyzer.model.fusion import schedule

TILE_MIN, TILE_MAX = 16, 256     # Triton: tl.dot needs 16 per dimension; larger tiles spill registers
STAGES = (2, 3)                  # buffers per streamed load: 2 loads chunk j+1 while j computes (5.6)
TIE = 0.005                      # relative throughput within which candidates tie
RESERVE_REGISTERS = 16           # per thread, for addresses, indices and loop state (not in Table 1)


def from_report(report: ConfigurationReport, profile: Profile, tiles: set[str], source: str,
                candidates: int = 0) -> Choice:
    warps_per_group = profile.divisors.mma_threads // profile.threads.warp_size
    util = report.overlap.utilization if report.overlap else 1.0
    return Choice(report.configuration.kernel,
                  {k: v for k, v in report.values.items() if k in tiles},
                  report.configuration.groups * warps_per_group, report.configuration.stages, source,
                  report.throughput.throughput_flops_per_s * util, candidates, report)


def named(d: Diagram, profile: Profile, kernel: str, tiles: set[str], config: str,
          sets: dict[str, int], dtype: str | None) -> Choice:
    """The configuration `config` of the diagram file, for `kernel` of `d` on `profile` (`tiles`: its
    partition symbols)."""
    report = configure(d, profile, config=config, sets=sets, dtype=dtype, kernel=kernel,
                       dtypes=kept_dtypes(d, kernel))
    c = from_report(report, profile, tiles, f"{d.name}'s configuration {config!r}")
    return replace(c, smem_bytes=smem_allocated(d, kernel, replace(c, tiles={
        k: v for k, v in report.values.items() if k in _partition(d, kernel)}), report.values, dtype, profile))


def first_of(ranked: list[tuple[Choice, float, float]], tiles: set[str], profile: Profile) -> Choice:
    """The first of a ranking (`rank`) as a kernel's configuration, saying where it came from."""
    best, time_s, flops = ranked[0]
    source = (f"the fastest of {len(ranked)} legal configurations by predicted time "
              f"(napkin sweep, {profile.name})")
    return replace(best, tiles={k: v for k, v in best.tiles.items() if k in tiles}, source=source,
                   throughput_flops_per_s=flops / time_s, candidates=len(ranked))


def legal(d: Diagram, profile: Profile, kernel: str, sets: dict[str, int], dtype: str | None) -> list[Choice]:
    """Every candidate that configures and fits (Table 2) with registers to spare; `sets` pins sizes
    and tiles (the head dim, --set g_q=128)."""
    key = (id(d), id(profile), kernel, tuple(sorted(sets.items())), dtype)
    hit = _LEGAL.get(key)
    if hit is None or hit[0] is not d or hit[1] is not profile:   # ids are reused after collection
        if len(_LEGAL) >= 64:
            _LEGAL.clear()
        hit = _LEGAL[key] = (d, profile, _legal(d, profile, kernel, key[3], dtype))
    if isinstance(hit[2], NapkinError):
        raise hit[2]
    return list(hit[2])


_LEGAL: dict[tuple, tuple] = {}     # one configure per candidate, however many shapes rank them


def _legal(d: Diagram, profile: Profile, kernel: str, sets: tuple, dtype: str | None):
    out: list[Choice] = []
    first_error: NapkinError | None = None
    tried = 0
    sets_d = dict(sets)
    for candidate in candidates(d, profile, kernel, sets_d, dtype):
        tried += 1
        try:
            report = configure(d, profile, sets=candidate, dtype=dtype, kernel=kernel,
                               dtypes=kept_dtypes(d, kernel), schedule_overlap_=False)
        except NapkinError as exc:
            first_error = first_error or exc
            continue
        if not _registers_fit(report, profile) or not _headroom(report):
            continue
        tiles = {k: v for k, v in report.values.items() if k in _partition(d, kernel)}
        c = from_report(report, profile, set(tiles), "a legal configuration")
        c = replace(c, tile_elements=stream_tile(d, kernel, report.values),
                    smem_bytes=smem_allocated(d, kernel, c, report.values, dtype, profile))
        if c.smem_bytes > smem_limit(profile) or capped(c, profile):
            continue
        out.append(c)
    if not out:
        # a pinned size or tile that breaks a rule is the user's to change: say which; a candidate's
        # own tiles breaking one is not news (it is why the candidate is not legal)
        if first_error is not None and first_error.field in {f"--set {k}" for k in sets_d}:
            return first_error
        return NapkinError(f"no configuration of kernel {kernel!r} fits {profile.name} "
                           f"({tried} tried)", file=d.source,
                           hint="pin smaller tiles with --set, or pick another GPU")
    return out


def smem_allocated(d: Diagram, kernel: str, c: Choice, values: dict[str, int], dtype: str | None,
                   profile: Profile) -> int:
    """The SMEM a block of the portable kernel allocates in configuration `c` (analyzer.config.allocation:
    counted from the plan the generator renders, as Triton lowers it); `values`: sizes by axis (the
    head dim, padded to the power of two the kernel's tiles take)."""
    k = next(k for k in d.kernels if k.name == kernel)
    p = plan(d, schedule(d, k, d.levels[-1]), c)
    return allocation(p, values, stages=c.num_stages, warps=c.num_warps, dtype=dtype or d.dtype,
                      profile=profile).smem_bytes


def smem_limit(profile: Profile) -> float:
    """The SMEM one block may allocate (the opt-in limit per block)."""
    return profile.level("smem").block_capacity_bytes


def _registers_fit(report: ConfigurationReport, profile: Profile) -> bool:
    """Table 2's registers fit, and the block's threads: its SMEM row is the paper's count, which the
    portable kernel's own allocation replaces (smem_allocated)."""
    threads = report.configuration.groups * report.configuration.threads_per_group
    return threads <= profile.threads.per_block_max and all(
        c.fits for c in report.capacity if c.storage != "smem")


def _partition(d: Diagram, kernel: str) -> set[str]:
    return {s.name for k in d.kernels if k.name == kernel for p in k.partitions.values()
            for s in p.symbols}


def rank(d: Diagram, profile: Profile, kernel: str, sets: dict[str, int], choices: list[Choice],
         terms=None) -> list[tuple[Choice, float, float]]:
    """(configuration, predicted seconds, tensor FLOPs), fastest first, of those that obey the divisor
    rules; `terms` (analyzer.model.analysis.Terms at these configurations) saves evaluating them again."""
    if terms is None:
        terms = TermModel(d, profile, kernel).terms(sets, [c.tiles for c in choices])
    times = timed(terms, choices, profile)
    keep = [i for i in range(len(choices)) if not terms.values["broken"][i]]
    if not keep:
        reason = terms.values["broken"][0] if len(choices) else "no candidates"
        raise NapkinError(f"no legal configuration of kernel {kernel!r} on {profile.name}: {reason}",
                          file=d.source, hint="pin tile sizes that obey it with --set")

    def key(i: int) -> tuple:
        c = choices[i]
        stream = max((v for k, v in c.tiles.items() if k.startswith("s_")), default=0)
        rows = max((v for k, v in c.tiles.items() if k.startswith("g_")), default=0)
        return (-c.num_stages, -rows, -stream, -c.num_warps, float(times[i]))

    # ties: the candidates within TIE of the fastest not yet placed, ordered by the rules above
    order, rest = [], sorted(keep, key=lambda i: float(times[i]))
    while rest:
        tied = [i for i in rest if times[i] <= times[rest[0]] * (1 + TIE)]
        order += sorted(tied, key=key)
        rest = rest[len(tied):]
    flops = terms.values["flops_tensor"]
    return [(choices[i], float(times[i]), float(flops[i])) for i in order]


def timed(terms, choices: list[Choice], profile: Profile) -> np.ndarray:
    """Predicted seconds of each configuration from its terms (analyzer.model.analysis.Terms), with what the
    tiles alone do not say: its stages and the blocks an SM holds at once (5.6)."""
    terms.values["stages"] = np.array([c.num_stages for c in choices], dtype=np.float64)
    terms.values["resident"] = np.array([resident_blocks(c, profile) for c in choices], dtype=np.float64)
    return terms.time(profile)


def rank_at(model, profile: Profile, sizes: dict[str, int], choices: list[Choice],
            ones: dict[str, int]) -> tuple[list[tuple[Choice, float, float]], object]:
    """`rank` on a weaved diagram at one problem size: `model` is its analyzer.model.analysis.TermModel,
    `ones` the weaved axes' tiles (one index a block). Also returns the terms, for their parts."""
    terms = model.terms(sizes, [{**c.tiles, **ones} for c in choices])
    return rank(model.diagram, profile, model.kernel.name, sizes, choices, terms), terms


def same_config(a: Choice, b: Choice) -> bool:
    """The same tiles, warps and stages (whatever each was chosen for)."""
    return (a.tiles, a.num_warps, a.num_stages) == (b.tiles, b.num_warps, b.num_stages)


def resident_blocks(c: Choice, profile: Profile) -> int:
    """Thread blocks of this configuration one SM holds at once: what its SMEM (the kernel's own
    allocation, smem_allocated), its threads and its registers (Table 1's share per thread plus the reserve)
    leave room for."""
    threads = c.num_warps * profile.threads.warp_size
    limits = [profile.threads.per_sm_max // threads, profile.threads.blocks_per_sm_max]
    if c.smem_bytes:
        limits.append(int(profile.level("smem").capacity_bytes // c.smem_bytes))
    registers = registers_per_thread(c, profile)
    if registers is not None:
        per_thread = min(profile.registers.per_thread_max, registers)
        limits.append(int(profile.registers.per_sm // (per_thread * threads)))
    return max(1, min(limits))


def registers_per_thread(c: Choice, profile: Profile) -> float | None:
    """Registers a thread of this configuration uses: its share of the arrays Table 1 keeps in
    registers plus the reserve, or, with a calibrated profile, the compiler's count fitted to it
    (hardware.RegisterRelation; docs/validation.md)."""
    share = table1_registers(c, profile)
    if share is None:
        return None
    relation = profile.calibration.registers if profile.calibration else None
    if relation is None:
        return share + RESERVE_REGISTERS
    threads = c.num_warps * profile.threads.warp_size
    return float(relation.registers(share, c.tile_elements / threads))


def table1_registers(c: Choice, profile: Profile) -> float | None:
    """A thread's share of the arrays Table 1 keeps in registers."""
    threads = c.num_warps * profile.threads.warp_size
    for cap in c.report.capacity if c.report else ():
        if cap.storage == "registers":
            return (cap.block_bytes + cap.n * cap.group_bytes) / threads / 4
    return None


def stream_tile(d: Diagram, kernel: str, values: dict) -> int:
    """Elements of one block's row block x stream chunk (0 for a kernel that does not stream)."""
    names = names_of(schedule_of(d, kernel))
    if not names.s:
        return 0
    return int(values.get(names.row_groups[-1], 0)) * int(values.get(names.s, 0))


def capped(c: Choice, profile: Profile) -> bool:
    """With the compiler's register count (a calibrated profile), a configuration that reaches the
    per-thread cap: the compiler caps it and spills, which the model does not time."""
    if not (profile.calibration and profile.calibration.registers):
        return False
    registers = registers_per_thread(c, profile)
    return registers is not None and registers >= profile.registers.per_thread_max


def _headroom(report: ConfigurationReport) -> bool:
    """Table 1 counts the kernel's arrays; a thread also needs registers of its own."""
    for c in report.capacity:
        if c.storage == "registers" and c.excess_thread_bytes is not None:
            return c.excess_thread_bytes >= RESERVE_REGISTERS * 4
    return True


def kept_dtypes(d: Diagram, kernel: str) -> dict[str, str]:
    """What the generated kernel keeps in fp32: contraction outputs (the tensor cores accumulate in
    fp32) and the online-softmax auxiliaries."""
    s = schedule_of(d, kernel)
    return {**{o.name: "fp32" for o in s.ops if o.primitive.contraction}, "aux": "fp32"}


def candidates(d: Diagram, profile: Profile, kernel: str, sets: dict[str, int], dtype: str | None):
    """Row blocks g = N w, stream chunks s and stages to try, with what --set pins left as given."""
    s = schedule_of(d, kernel)
    names = names_of(s)
    mma = profile.divisors.mma.get(dtype or d.dtype)
    m = mma.m if mma else profile.threads.warp_size
    w_options = [sets[names.w]] if names.w in sets else [m, 2 * m]   # rows per tensor-core group
    low = max(TILE_MIN, *(getattr(mma, k) for k in ("n", "k"))) if mma else TILE_MIN
    powers = [2 ** i for i in range(int(math.log2(low)), int(math.log2(TILE_MAX)) + 1)]
    row_groups = names.row_groups
    fixed = {sym.name: 1 for axis, sym in s.partition.group if axis in batch_axes(s)}
    rows_w = [(n * w, w) for w in w_options for n in range(1, 5)
              if n * w <= TILE_MAX and _pow2(n * w)]
    if row_groups[-1] in sets:
        rows_w = [(r, w) for r, w in rows_w if r == sets[row_groups[-1]]] or \
            [(sets[row_groups[-1]], w_options[0])]
    stream_options = [sets[names.s]] if names.s in sets else powers
    stage_options = [sets["stages"]] if "stages" in sets else STAGES
    # other tiled axes (matmul's columns g_c): powers of two, as Triton's tiles are
    others = [sym.name for axis, sym in s.partition.group
              if sym.name not in row_groups and sym.name not in fixed and sym.name not in sets]
    columns = [p for p in powers if p >= 64] if others else [None]
    for (rows, w), chunk, stages, column in itertools.product(rows_w, stream_options, stage_options,
                                                              columns):
        c = {**fixed, **sets, row_groups[-1]: rows, names.w: w, "stages": stages}
        c.update({name: column for name in others if column is not None})
        for extra in row_groups[:-1]:
            c.setdefault(extra, 1)   # outer row axes (GQA's g) take one index per block
        if names.s:
            c[names.s] = chunk
        yield c


def _pow2(n: int) -> bool:
    return n & (n - 1) == 0
