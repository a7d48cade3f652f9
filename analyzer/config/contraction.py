"""The Hopper contraction kernel: which kernels of a diagram it realises, its configurations, and the
model that times and ranks them (analyzer.codegen.hopper.contraction renders it).

What it realises, read off the kernel's plan (analyzer.config.plan), not its names: one or more
contractions (`dot`) streamed over the same axis, all of one loaded input A and each of its own loaded
input B (a matmul; SwiGLU's gate and up-projection share X), two-dimensional tiles of the block's two
grouped dimensions, followed by elementwise ops on the finished accumulators (the tail: a bias, an
activation, a gate, a scale) whose other inputs are loaded vectors or tiles of those two dimensions, and
one output saved as a tile of them. Anything else is a one-line reason (`realise`), and the portable
module runs it.

The kernel (Sections 5.5-5.7 carried over from attention): one producer warp streams A's and the B's
chunks of BLOCK_K through a ring of STAGES SMEM stages (TMA, mbarriers); WARPGROUPS consumer warpgroups
each contract BLOCK_M / WARPGROUPS rows of a BLOCK_M x BLOCK_N tile on wgmma, accumulators in
registers; the tail runs on the accumulators and the tile leaves by TMA. The blocks are persistent, one
an SM, and walk the tiles in bands of row tiles (plan.band_rows: a wave covers a square of the output,
Theorem 2).

The model (`predicted_time`) times a tile from the engine's counts at the configuration's tiles
(analyzer.model.analysis.TermModel: the tensor FLOPs, the bytes into SMEM and the threads' FLOPs of the
tail, per tile): its contraction at the tensor cores' rate, or its loads at the L2's bandwidth shared by
the SMs, whichever is longer (the ring overlaps them); then the tail on the threads (the consumers run it
after their last chunk; nothing overlaps it in a cooperative tile) and fixed costs per chunk and per
tile. The busiest SM takes ceil(tiles / SMs) tiles (wave quantisation); the whole is at least the
level above's transfers (H into L2) at HBM's bandwidth. Its parameters (ContractionParams) are the idealised model's
until a sweep of the kernel fits them (napkin calibrate --kernel contraction).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, fields

from analyzer.common.dtypes import bytes_per_value
from analyzer.config.by_size import LENGTHS, nearest
from analyzer.config.choose import TIE
from analyzer.config.plan import KernelPlan
from analyzer.config.warp_specialised import (
    MBARRIER_BYTES,
    PARTITION_BYTES,
    REGISTER_RESERVE,
    hopper_capable,
    register_cap,
    registers_per_consumer,
)
from analyzer.diagram.compiled import Op
from analyzer.hardware import Profile, chain_fit, contraction_fit
from analyzer.model.analysis import TermModel

BLOCKS_N = (64, 128, 256)         # a tile's columns: wgmma's n, at most 256
# a chunk of the contracted axis: 64 16-bit values, one 128-byte swizzled row of SMEM (the widest swizzle);
# 128 ran 10-20 % behind 64 at the same tile in every pair measured (bench/results/hopper_contraction_h100.json:
# its rows span two swizzle atoms), which the model has no term for, so it is not offered
BLOCKS_K = (64,)
STAGES = (2, 3, 4, 5, 6)
ROWS = (64, 128)                  # a consumer's rows: one or two of wgmma's 64-row instructions
WARPGROUPS = (1, 2)               # consumers: a third would leave each fewer registers than a tile needs
ELEMENTWISE = ("exp", "sigmoid", "relu", "tanh", "gelu", "reciprocal", "rsqrt", "add", "sub", "mul", "div",
               "scale", "shift")   # the tail ops the kernel renders (analyzer.codegen.hopper.contraction)
LOADS_FROM = "l2"                 # every tile's chunks come through L2: the band order shares them


@dataclass(frozen=True)
class Structure:
    """What the kernel reads off a kernel's plan: its operands, dims, prologue, tail and output."""

    kernel: str
    a: str                        # the streamed input every contraction's first operand comes from
    bs: tuple[str, ...]           # each contraction's second operand
    dots: tuple[str, ...]         # the contractions (their accumulators), in order
    a_t: bool                     # A is stored with its contracted axis first (its box read transposed)
    b_t: tuple[bool, ...]         # per B: stored with its columns first
    m: str                        # the plan's dims: the rows, the columns, the contracted
    n: str
    k: str
    tail: tuple[Op, ...]          # the elementwise ops after the contractions, in order
    reads: tuple[str, ...]        # the arrays the prologue and the tail load (vectors or tiles)
    output: str
    prologue: tuple[Op, ...] = ()     # elementwise ops on A's chunk before the contractions (in registers)
    a_op: str = ""                    # the contractions' first operand: A, or a value of the prologue
    sums: tuple[Op, ...] = ()         # a running sum over the stream of a prologue value: one a row
    kvec: str = ""                    # a loaded vector along the stream the prologue reads: rides the ring

    @property
    def in_registers(self) -> bool:
        """Whether the consumers read A's chunk into registers (a prologue or a row sum runs on it)."""
        return bool(self.prologue or self.sums)


def realise(p: KernelPlan) -> Structure | str:
    """The kernel's structure, or why the Hopper contraction kernel does not realise it (one line)."""
    s = p.schedule
    stream = p.stream
    if stream is None:
        return f"kernel {p.name!r} streams no axis"
    dots = [o for o in s.ops if o.primitive.contraction]
    if not dots or any(o.primitive.name != "dot" for o in dots):
        return f"kernel {p.name!r} has no plain contraction (softmax_dot is attention's)"
    if chained(p):
        return (f"kernel {p.name!r} chains two contractions (the second fed by the first, as mlp2 or linear "
                "attention): the contraction kernel runs contractions side by side only")
    if len(dots) > 2:
        return f"kernel {p.name!r} has {len(dots)} contractions side by side; the kernel holds two accumulators"
    if p.grid:
        return (f"kernel {p.name!r} has a batch axis ({', '.join(p.grid)}): the contraction kernel tiles two "
                "axes and no more")
    groups = p.groups
    if len(groups) != 2 or any(len(d.axes) != 1 for d in groups):
        return f"kernel {p.name!r} does not tile exactly two grouped axes, one each"
    if any(p.dim_of[o.applied.over] != stream.name for o in dots):
        return f"kernel {p.name!r} contracts an axis it does not stream"
    loaded = set(s.loads) | set(s.resident)
    k = stream.name
    a_op = dots[0].operands[0]
    if any(o.operands[0] != a_op for o in dots) or any(o.operands[1] not in loaded for o in dots):
        return (f"kernel {p.name!r}: the contraction kernel takes contractions of one first operand by loaded "
                "inputs")
    first = s.ops.index(dots[0])
    prologue, rest = tuple(s.ops[:first]), [o for o in s.ops[first:] if o not in dots]
    sums = tuple(o for o in rest if o.primitive.name == "sum" and p.dim_of.get(o.applied.over) == k)
    found = _prologue(p, prologue, sums, a_op, loaded, k)
    if isinstance(found, str):
        return found
    a, m = found
    n = next(d for d in p.tiles_of[dots[0].operands[1]] if d != k)
    if {m, n} != {d.name for d in groups}:
        return f"kernel {p.name!r}: its contractions' rows and columns are not its two grouped axes"
    if any(p.tiles_of[o.operands[1]] != p.tiles_of[dots[0].operands[1]] for o in dots):
        return f"kernel {p.name!r}: its contractions' second operands are laid out differently"
    a_t = p.tiles_of[a][0] == k
    if a_t and (prologue or sums):
        return f"kernel {p.name!r}: a prologue runs on A's rows, which {a!r} stores with its contracted axis first"
    tail = tuple(o for o in rest if o not in sums)
    values = {o.name for o in dots} | {o.name for o in sums}
    along_k = tuple(dict.fromkeys(x for o in prologue for x in o.inputs if x in loaded and p.tiles_of[x] == (k,)))
    if len(along_k) > 1:
        return (f"kernel {p.name!r}: its prologue reads {len(along_k)} vectors along the stream; the kernel's "
                "ring carries one")
    reads = [x for o in prologue for x in o.inputs if x in loaded and x != a and x not in along_k]
    for op in tail:
        if op.primitive.name not in ELEMENTWISE:
            return (f"kernel {p.name!r}: op {op.name!r} ({op.primitive.name}) after the contraction is not one "
                    f"the contraction kernel's tail runs ({', '.join(ELEMENTWISE)})")
        for x in op.inputs:
            if x in values:
                continue
            if x not in loaded or not set(p.tiles_of[x]) <= {m, n}:
                return (f"kernel {p.name!r}: op {op.name!r} reads {x!r}, which is neither a value of the tail "
                        "nor a loaded vector or tile of the output's axes")
            reads.append(x)
        values.add(op.name)
    if len(s.saves) != 1:
        return f"kernel {p.name!r} saves {len(s.saves)} arrays; the contraction kernel stores one"
    (output,) = s.saves
    last = tail[-1].name if tail else dots[-1].name
    if output != last or (not tail and len(dots) > 1):
        return f"kernel {p.name!r} saves {output!r}, not the value its ops end with"
    if p.tiles_of[output] != (m, n):
        return f"kernel {p.name!r} saves {output!r} with its columns first; the kernel stores rows first"
    return Structure(p.name, a, tuple(o.operands[1] for o in dots), tuple(o.name for o in dots), a_t,
                     tuple(p.tiles_of[o.operands[1]][0] == n for o in dots), m, n, k, tail,
                     tuple(dict.fromkeys(reads)), output, prologue, a_op, sums, along_k[0] if along_k else "")


def chained(p: KernelPlan) -> bool:
    """Whether a contraction of the kernel takes what an earlier one made (directly or through elementwise
    ops): a chain (analyzer.config.chain), not contractions side by side."""
    s = p.schedule
    dots = [o for o in s.ops if o.primitive.contraction]
    after_first = {o.name for o in s.ops[s.ops.index(dots[0]):]} if dots else set()
    return any(x in after_first for o in dots for x in o.operands)


def _prologue(p: KernelPlan, prologue: tuple[Op, ...], sums: tuple[Op, ...], a_op: str, loaded: set[str],
              k: str) -> tuple[str, str] | str:
    """The streamed input A a prologue and its row sums read, and A's rows dim; or why not (one line).
    A prologue is elementwise ops on A's chunk (and loaded vectors along its rows or the stream) that
    make the contractions' first operand; a row sum, a running sum over the stream of one of its values
    (rmsnorm's sum of squares): one at most, a value a row the tail reads."""
    if len(sums) > 1:
        return f"kernel {p.name!r} has {len(sums)} running sums beside its contractions; the kernel keeps one"
    sources = {x for o in (*prologue, *sums) for x in o.inputs if x in loaded and len(p.tiles_of[x]) == 2}
    a = a_op if not prologue and not sums else (sources.pop() if len(sources) == 1 else None)
    if a is None:
        return (f"kernel {p.name!r}: its prologue reads {len(sources)} streamed tiles; the contraction kernel's "
                "reads one, A")
    if a not in loaded or k not in p.tiles_of[a] or len(p.tiles_of[a]) != 2:
        return f"kernel {p.name!r}: the contractions' first operand is no streamed tile of a loaded input"
    m = next(d for d in p.tiles_of[a] if d != k)
    values = {a}
    for op in prologue:
        if op.primitive.name not in ELEMENTWISE:
            return (f"kernel {p.name!r}: op {op.name!r} ({op.primitive.name}) before the contraction is not one "
                    f"the contraction kernel's prologue runs ({', '.join(ELEMENTWISE)})")
        for x in op.inputs:
            if x not in values and not (x in loaded and len(p.tiles_of[x]) == 1 and p.tiles_of[x][0] in (m, k)):
                return (f"kernel {p.name!r}: op {op.name!r} reads {x!r}, neither A, a value of the prologue nor a "
                        "loaded vector along its rows or the stream")
        values.add(op.name)
    for op in sums:
        if op.inputs[0] not in values or p.tiles_of.get(op.inputs[0]) != (m, k):
            return f"kernel {p.name!r}: running sum {op.name!r} is not of a value of A's chunk"
    if a_op not in values:
        return f"kernel {p.name!r}: the contractions' first operand is not A or a value of its prologue"
    return a, m


@dataclass(frozen=True)
class ContractionConfig:
    """One configuration of the kernel, with what it needs of the SM."""

    block_m: int
    block_n: int
    block_k: int
    stages: int
    warpgroups: int
    smem_bytes: int
    registers: int               # what setmaxnreg gives a consumer thread
    registers_needed: int        # the accumulators' fp32 values a thread, and a reserve

    @property
    def rows(self) -> int:
        return self.block_m // self.warpgroups

    def label(self) -> str:
        return (f"{self.block_m}x{self.block_n}x{self.block_k}, {self.warpgroups} consumer"
                f"{'s' if self.warpgroups > 1 else ''}, {self.stages} stages")

    def entry(self) -> dict[str, int]:
        """As the generated module's CONFIGS hold it (and a call's config= gives it)."""
        return {"BLOCK_M": self.block_m, "BLOCK_N": self.block_n, "BLOCK_K": self.block_k, "STAGES": self.stages,
                "WARPGROUPS": self.warpgroups}


def parse_label(label: str) -> dict[str, int]:
    """A configuration's keyword arguments from its label ("128x256x64, 2 consumers, 3 stages")."""
    shape, groups, stages = (part.strip() for part in label.split(","))
    m, n, k = (int(x) for x in shape.split("x"))
    return {"block_m": m, "block_n": n, "block_k": k, "warpgroups": int(groups.split()[0]),
            "stages": int(stages.split()[0])}


def configuration(profile: Profile, st: Structure, dtype: str, *, block_m: int, block_n: int, block_k: int,
                  stages: int, warpgroups: int) -> ContractionConfig:
    """A configuration with its SMEM (the ring's A and B chunks, each consumer's staging tile of the
    output, the mbarriers and the partitions' reserve) and its registers (each accumulator's fp32 values
    a consumer thread holds, and the reserve)."""
    size = bytes_per_value(dtype)
    rows = block_m // warpgroups
    ring = stages * block_k * (block_m + len(st.bs) * block_n) * size
    staging = block_m * block_n * size
    if st.kvec:                 # the prologue's vector along the stream, a chunk a stage
        ring += stages * block_k * size
    smem = ring + staging + MBARRIER_BYTES * 2 * stages + PARTITION_BYTES
    needed = len(st.bs) * rows * block_n // profile.divisors.mma_threads + REGISTER_RESERVE
    if st.in_registers:         # A's chunk in registers for the prologue (fp32), and the rows' sums item by item
        needed += 2 * rows * block_k // profile.divisors.mma_threads
        smem += 4 * block_m     # the rows' sums change layout through SMEM once a tile
    return ContractionConfig(block_m, block_n, block_k, stages, warpgroups, smem,
                             registers_per_consumer(profile, warpgroups), needed)


def legal(profile: Profile, c: ContractionConfig) -> bool:
    return (c.smem_bytes <= profile.level("smem").block_capacity_bytes and c.registers_needed <= c.registers
            and c.rows in ROWS and c.block_n in BLOCKS_N and c.block_k in BLOCKS_K)


def candidates(profile: Profile, st: Structure, dtype: str) -> list[ContractionConfig]:
    """Every legal configuration."""
    out = []
    for warpgroups in WARPGROUPS:
        for rows in ROWS:
            for block_n in BLOCKS_N:
                for block_k in BLOCKS_K:
                    for stages in STAGES:
                        c = configuration(profile, st, dtype, block_m=rows * warpgroups, block_n=block_n,
                                          block_k=block_k, stages=stages, warpgroups=warpgroups)
                        if legal(profile, c):
                            out.append(c)
    return out


@dataclass(frozen=True)
class ContractionParams:
    """The model's stated assumptions, each a parameter a sweep of the kernel fits (napkin calibrate
    --kernel contraction; hardware.ContractionFit says what each means). The defaults are the idealised
    model: the datasheet's rates, no fixed costs."""

    tensor_efficiency: float = 1.0
    l2_efficiency: float = 1.0
    smem_efficiency: float = 1.0
    load_latency_s: float = 0.0
    chunk_overhead_s: float = 0.0
    tile_overhead_s: float = 0.0
    launch_overhead_s: float = 0.0
    wait_s: float = 0.0          # the chain kernel's alone (analyzer.config.chain): a consumer's wait a chunk
    power_efficiency: float = 1.0    # the chain kernel's alone: the tensor rate every SM at once sustains
    thread_efficiency: float = 1.0   # the chain kernel's alone: the ops' counted FLOPs at this share of the lanes'
    source: str = "the idealised model"
    own: bool = True             # fitted on a sweep of the kernel it times (False: the contraction's, carried)

    @classmethod
    def of(cls, profile: Profile, *, chain: bool = False) -> ContractionParams:
        """The profile's fitted parameters (its own, or its GPU's shipped calibration), else the defaults.
        `chain`: the chain kernel's fit (napkin calibrate --kernel chain), else the contraction kernel's
        carried over (`own` False)."""
        found = chain_fit(profile) if chain else None
        own = found is not None or not chain
        found = found or contraction_fit(profile)
        if found is None:
            return cls()
        fit, name = found
        given = {f.name: getattr(fit, f.name).value for f in fields(cls)
                 if f.name not in ("source", "own") and getattr(fit, f.name) is not None}
        return cls(**given, source=f"calibrated on {name}", own=own)

    @property
    def calibrated(self) -> bool:
        return self.source != ContractionParams.source


@dataclass(frozen=True)
class Counts:
    """The engine's counts for one kernel at one configuration's tiles and one problem size."""

    tiles: int                   # blocks of the output: the tiles the persistent blocks share
    chunks: int                  # chunks a tile streams
    operands: int                # B operands a chunk (contractions side by side)
    tensor_flops: float
    thread_flops: dict[str, float]   # per pipeline besides the tensor cores: the prologue's and the tail's work
    loads_s: float               # H into SMEM at the bandwidth that feeds it (L2's), all tiles
    gmem_s: float                # H into L2 at HBM's bandwidth (the level above, at its own optimal tiles)
    prologue_flops: float = 0.0  # of the vector pipeline's: the prologue's and row sum's, on A's chunks


def chunk_times(profile: Profile, c: ContractionConfig, counts: Counts, dtype: str,
                params: ContractionParams) -> dict[str, float]:
    """Seconds one chunk of a tile costs its SM, by what may bound it (the ring overlaps them; the chunk
    takes the longest): `tensor` (the chunk's contractions at the tensor cores' rate), `smem` (wgmma
    reading its operands from SMEM: each instruction, 64 rows, its rows of A and the whole of each B, at
    the SM's SMEM bandwidth), `l2` (the chunk's loads, the SMs at work sharing L2's bandwidth), `latency` (a
    load's latency and transfer, hidden behind the STAGES - 1 chunks loaded ahead)."""
    sms = profile.sm_count
    per_chunk = counts.tiles * counts.chunks
    tensor = counts.tensor_flops / per_chunk / (profile.rate("tensor", dtype) / sms * params.tensor_efficiency)
    # each wgmma instruction (m = 64 rows: the profile's mma m) reads its rows of A and its whole B from
    # SMEM, so a consumer of 128 rows reads each B twice
    m = profile.divisors.mma[dtype].m
    read = c.block_m // m * c.block_k * (m + counts.operands * c.block_n) * bytes_per_value(dtype)
    smem = read / (profile.level("smem").bandwidth_bytes_per_s / sms * params.smem_efficiency)
    l2 = counts.loads_s / per_chunk * min(sms, counts.tiles) / params.l2_efficiency
    # a chunk lands a latency and its own transfer after its load is issued, STAGES - 1 chunks ahead
    latency = (params.load_latency_s + l2) / max(c.stages - 1, 1)
    return {"tensor": tensor, "smem": smem, "l2": l2, "latency": latency}


def prologue_s(profile: Profile, counts: Counts, dtype: str) -> float:
    """Seconds a chunk's prologue keeps a consumer from issuing the chunk's wgmma: its ops on A's chunk
    at the SM's lanes (the consumers share them). Measured, it does not run under the previous chunk's
    wgmma as a second warpgroup's work would (bench/results/rmsnorm_prologue_probe_h100.md: reading the
    chunk into registers alone cost 17 % of the matmul), so the model adds it to the chunk."""
    return counts.prologue_flops / (counts.tiles * counts.chunks) / (profile.rate("vector", dtype) / profile.sm_count)


def parts(profile: Profile, c: ContractionConfig, counts: Counts, dtype: str,
          params: ContractionParams) -> dict[str, float]:
    """Seconds the busiest SM spends on its tiles' `ring` (every chunk at its bound, chunk_times, and its
    fixed cost), their `tail` (the threads' ops after it) and `fixed` costs, and `gmem`: the level
    above's transfers at HBM's bandwidth, a floor for the whole kernel."""
    sms = profile.sm_count
    per_sm = math.ceil(counts.tiles / sms)          # wave quantisation: the busiest SM's tiles
    chunk = max(chunk_times(profile, c, counts, dtype, params).values()) + params.chunk_overhead_s + \
        prologue_s(profile, counts, dtype)
    tail_flops = {**counts.thread_flops,
                  "vector": max(counts.thread_flops.get("vector", 0.0) - counts.prologue_flops, 0.0)}
    tail = sum(f / counts.tiles / (profile.rate(p, dtype) / sms) for p, f in tail_flops.items())
    return {"ring": per_sm * counts.chunks * chunk, "tail": per_sm * tail, "fixed": per_sm * params.tile_overhead_s,
            "gmem": counts.gmem_s}


def predicted_time(profile: Profile, c: ContractionConfig, counts: Counts, dtype: str,
                   params: ContractionParams) -> tuple[float, str]:
    """Seconds for the kernel at `counts`, and what bounds it (module docstring)."""
    p = parts(profile, c, counts, dtype, params)
    sm = p["ring"] + p["tail"] + p["fixed"]
    if p["gmem"] > sm:
        return params.launch_overhead_s + p["gmem"], "gmem"
    chunk = chunk_times(profile, c, counts, dtype, params)
    return params.launch_overhead_s + sm, max(chunk, key=chunk.get)


def tile_names(p: KernelPlan, st: Structure) -> tuple[str, str, str]:
    """The partition's symbols of the rows' tile, the columns' tile and the chunk (g_n, g_o, s_i)."""
    part = p.schedule.partition
    return (part.group_sizes[p.dim(st.m).axes[0]].name, part.group_sizes[p.dim(st.n).axes[0]].name,
            part.stream[1].name)


def counted(model: TermModel, p: KernelPlan, st: Structure, sizes: dict[str, int],
            configs: list[ContractionConfig]) -> list[Counts]:
    """The engine's counts of kernel `p` at `sizes` (size symbols of the weaved diagram) for each
    configuration's tiles: one evaluation of the symbolic model for them all."""
    gm, gn, sk = tile_names(p, st)
    t = model.terms(sizes, [{gm: c.block_m, gn: c.block_n, sk: c.block_k} for c in configs])
    v, w = t.values, t.weights
    *above, lowest = list(w)            # the levels, outermost first: L2, then SMEM
    out = []
    for i in range(len(configs)):
        tiles = int(v["groups"][i])
        out.append(Counts(tiles=tiles, chunks=round(float(v["steps"][i]) / tiles), operands=len(st.bs),
                          tensor_flops=float(v["flops_tensor"][i]),
                          thread_flops={q: float(v[f"flops_{q}"][i]) for q in ("sfu", "vector")
                                        if float(v[f"flops_{q}"][i])},
                          loads_s=float(v[f"{lowest}_bytes"][i]) * w[lowest],
                          gmem_s=sum(float(v[f"{level}_bytes"][i]) * w[level] for level in above),
                          # one operation an element of every tile's chunks of A, per op (the engine counts
                          # these among the vector pipeline's; they run per chunk, not in the tail)
                          prologue_flops=float(len(st.prologue) + len(st.sums)) * tiles * round(
                              float(v["steps"][i]) / tiles) * configs[i].block_m * configs[i].block_k))
    return out


@dataclass(frozen=True)
class Ranked:
    """One configuration at one size: the model's time, what bounds it, the engine's counts."""

    config: ContractionConfig
    time_s: float
    bound: str
    counts: Counts


def ranked(profile: Profile, model: TermModel, p: KernelPlan, st: Structure, dtype: str, sizes: dict[str, int],
           params: ContractionParams, configs: list[ContractionConfig] | None = None) -> list[Ranked]:
    """Every legal configuration (or `configs`) at `sizes`, fastest first; within TIE of the fastest,
    the fewer warpgroups, the more stages, the larger tile (one kernel fewer differs between sizes)."""
    configs = configs if configs is not None else candidates(profile, st, dtype)
    rows = [Ranked(c, *predicted_time(profile, c, n, dtype, params), n)
            for c, n in zip(configs, counted(model, p, st, sizes, configs), strict=True)]
    rows.sort(key=lambda r: r.time_s)
    if not rows:
        return rows
    best = rows[0].time_s
    alike = [r for r in rows if r.time_s <= best * (1 + TIE)]
    alike.sort(key=lambda r: (r.time_s > best * (1 + TIE), -r.config.block_m * r.config.block_n,
                              -r.config.stages, r.config.warpgroups))
    return alike + rows[len(alike):]


@dataclass(frozen=True)
class Table:
    """One kernel's configurations by problem size: by_size's grid, the diagram's defaults scaled alike
    (a call takes the nearest length, the geometric mean of its sizes), or one configuration where --set
    pins the sizes."""

    kernel: str
    structure: Structure
    lengths: tuple[int, ...]
    configs: tuple[ContractionConfig, ...]
    cells: tuple[int, ...]          # per length: an index into configs

    def at(self, length: float) -> ContractionConfig:
        return self.configs[self.cells[nearest(self.lengths, length)]]


@dataclass(frozen=True)
class Tables:
    """What the generated module carries: a table a kernel, and the register split per warpgroup count."""

    tables: tuple[Table, ...]
    register_cap: dict[int, int]              # warpgroups -> maxnreg at launch
    consumer_registers: dict[int, int]        # warpgroups -> what setmaxnreg gives a consumer

    def table(self, kernel: str) -> Table:
        return next(t for t in self.tables if t.kernel == kernel)


def size_table(profile: Profile, model: TermModel, p: KernelPlan, st: Structure, dtype: str,
               grid: tuple[tuple[int, ...], tuple[dict[str, int], ...]], pinned: dict[str, int],
               params: ContractionParams) -> Table:
    """The model's first choice at each point of `grid` (its lengths, and the sizes at each: the
    diagram's shape scaled, analyzer.config.by_size.shaped_grid), or at the pinned sizes alone."""
    if pinned:
        first = ranked(profile, model, p, st, dtype, pinned, params)
        if not first:
            raise ValueError("no legal configuration")
        return Table(p.name, st, (LENGTHS[0],), (first[0].config,), (0,))
    configs: list[ContractionConfig] = []
    cells = []
    lengths, points = grid
    for sizes in points:
        rows = ranked(profile, model, p, st, dtype, sizes, params)
        if not rows:
            raise ValueError("no legal configuration")
        best = rows[0].time_s
        # a configuration the table already holds, where it ties the first: one kernel fewer to compile
        held = next((r.config for r in rows if r.time_s <= best * (1 + TIE) and r.config in configs), rows[0].config)
        if held not in configs:
            configs.append(held)
        cells.append(configs.index(held))
    return Table(p.name, st, lengths, tuple(configs), tuple(cells))


__all__ = ["chained", "parse_label", "LENGTHS", "Ranked", "Table", "Tables", "counted", "ranked", "size_table", "tile_names", "BLOCKS_K", "BLOCKS_N", "ELEMENTWISE", "STAGES", "WARPGROUPS", "ContractionConfig", "ContractionParams",
           "Counts", "Structure", "candidates", "configuration", "hopper_capable", "legal", "parts",
           "predicted_time", "realise", "register_cap"]
