"""The Hopper chain kernel: a kernel of two contractions where the second is fed by the first (a fused
MLP, Y = act(X W1) W2; linear attention with the queries first, O = (Q K^T) V), its configurations and
the model that times and ranks them (analyzer.codegen.hopper.chain renders it).

What it realises, read off the kernel's plan (analyzer.config.plan), not its names: a first contraction
H = A B1 over an axis whole in every block (k), elementwise ops on H (the mid ops: an activation, a
scale, a bias loaded along H's axes), and a second contraction of what they make with B2 over the
streamed axis f (a running sum, Appendix A.3.1), saved as the kernel's one output, whole along its
columns n; the block's rows m are the one grouped axis. This is attention's structure (Section 5) with
the softmax's normalisation replaced by the diagram's ops: the fusion theorem streams the chain along f,
so H never leaves the SM. Anything else is a one-line reason (`realise_chain`).

The kernel: one producer warp loads each consumer's rows of A once a tile and streams B1's and B2's
chunks of BLOCK_F through a ring of STAGES SMEM stages (TMA, mbarriers); WARPGROUPS consumer warpgroups of
wgmma's 64 rows each issue chunk j's H_j before chunk j - 1's acc += P_(j-1) B2_(j-1) and run the mid ops
under it (the intra-warpgroup overlap of Section 6), P in registers as the second wgmma's first operand.
The blocks are persistent, one an SM.

The model (`predicted_time`) is the contraction kernel's (analyzer.config.contraction) over the chain's
chunks, from the engine's counts at the configuration's tiles: a chunk costs the longest of its two
contractions at the tensor cores' rate, wgmma's SMEM reads, its loads at L2's share and the mid ops on
the threads (they run under the second contraction); a tile adds one chunk (its first H and last PV run
alone); the busiest SM takes ceil(tiles / SMs) tiles. Its parameters are the contraction kernel's fit,
carried over: nobody has fitted the chain on its own sweep yet (Expected says so).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from analyzer.common.dtypes import bytes_per_value
from analyzer.config.choose import TIE
from analyzer.config.contraction import ELEMENTWISE, ContractionParams, Counts
from analyzer.config.plan import WHOLE, KernelPlan, next_pow2
from analyzer.config.warp_specialised import (
    MBARRIER_BYTES,
    PARTITION_BYTES,
    REGISTER_RESERVE,
    registers_per_consumer,
)
from analyzer.diagram.compiled import Op
from analyzer.hardware import Profile
from analyzer.model.analysis import TermModel

BLOCKS_F = (64, 128)              # a chunk of the streamed axis: wgmma's n for H, its k for the second
STAGES = (2, 3, 4)
WARPGROUPS = (1, 2, 3)
WIDEST = 256                      # the whole axes k and n: one TMA box and one wgmma's n at most


@dataclass(frozen=True)
class Chain:
    """What the kernel reads off a kernel's plan: its operands, dims and the ops between its contractions."""

    kernel: str
    a: str                        # the first contraction's first operand: rows m, whole along k
    b1: str                       # its second: (k, f), or (f, k) with b1_t
    b2: str                       # the second contraction's second operand: (f, n), or (n, f) with b2_t
    dots: tuple[str, str]         # the two contractions (H, then the output)
    b1_t: bool
    b2_t: bool
    m: str                        # the plan's dims: the rows, the first contraction's axis, the stream, the
    k: str                        # output's columns
    f: str
    n: str
    mid: tuple[Op, ...]           # the elementwise ops from H to the second contraction's first operand
    reads: tuple[str, ...]        # loaded vectors or tiles the mid ops read (along m and f)
    output: str
    fvec: str = ""                # a loaded vector along the stream the mid ops read: rides the ring with B1


def realise_chain(p: KernelPlan) -> Chain | str:
    """The kernel's chain, or why the Hopper chain kernel does not realise it (one line)."""
    s = p.schedule
    dots = [o for o in s.ops if o.primitive.contraction]
    if len(dots) != 2 or any(o.primitive.name != "dot" for o in dots):
        return f"kernel {p.name!r} is no chain of two plain contractions"
    first, second = dots
    if p.grid:
        return f"kernel {p.name!r} has a batch axis ({', '.join(p.grid)}): the chain kernel tiles rows alone"
    stream, groups = p.stream, p.groups
    if stream is None or len(groups) != 1 or len(groups[0].axes) != 1:
        return f"kernel {p.name!r} does not stream one axis and group one (its rows)"
    loaded = set(s.loads) | set(s.resident)
    a, b1 = first.operands
    if a not in loaded or b1 not in loaded:
        return f"kernel {p.name!r}: the chain kernel's first contraction takes two loaded inputs"
    m, f = groups[0].name, stream.name
    k = p.dim_of[first.applied.over]
    if p.dim(k).kind != WHOLE or p.tiles_of[a] != (m, k):
        if p.tiles_of[a] == (k, m):
            return f"kernel {p.name!r}: {a!r} is stored with its contracted axis first; the chain kernel reads its rows"
        return (f"kernel {p.name!r}: the first contraction is not of the block's rows by an axis whole in every "
                "block (the keys-first order builds a state each block would repeat: see docs/kernels.md)")
    if set(p.tiles_of[b1]) != {k, f}:
        return f"kernel {p.name!r}: the first contraction's {b1!r} is not laid out along its axis and the stream"
    ops = list(s.ops)
    if ops[0] is not first or ops[-1] is not second:
        return f"kernel {p.name!r}: ops before the first contraction or after the second are not the chain kernel's"
    mid = tuple(ops[1:-1])
    h_op, b2 = second.operands
    if p.dim_of[second.applied.over] != f or b2 not in loaded or b2 in (a, b1):
        return f"kernel {p.name!r}: the second contraction does not reduce the stream against a loaded input"
    n = next((d for d in p.tiles_of[b2] if d != f), None)
    if n is None or p.dim(n).kind != WHOLE or set(p.tiles_of[b2]) != {f, n}:
        return f"kernel {p.name!r}: the second contraction's columns are not an axis whole in every block"
    values, reads = {first.name}, []
    for op in mid:
        if op.primitive.name not in ELEMENTWISE:
            return (f"kernel {p.name!r}: op {op.name!r} ({op.primitive.name}) between the contractions is not one "
                    f"the chain kernel runs ({', '.join(ELEMENTWISE)})")
        for x in op.inputs:
            if x in values:
                continue
            if x not in loaded or not set(p.tiles_of[x]) <= {m, f}:
                return (f"kernel {p.name!r}: op {op.name!r} reads {x!r}, neither a value of the chain nor a loaded "
                        "vector or tile of its rows and the stream")
            reads.append(x)
        values.add(op.name)
    if h_op not in values or (mid and h_op != mid[-1].name):
        return f"kernel {p.name!r}: the second contraction does not take the value the ops end with"
    if tuple(s.saves) != (second.name,) or p.tiles_of[second.name] != (m, n):
        return f"kernel {p.name!r}: the chain kernel stores the second contraction alone, rows first"
    reads = tuple(dict.fromkeys(reads))
    along_f = [x for x in reads if p.tiles_of[x] == (f,)]     # the first rides the ring; others are loaded
    return Chain(p.name, a, b1, b2, (first.name, second.name), p.tiles_of[b1][0] == f, p.tiles_of[b2][0] == n,
                 m, k, f, n, mid, tuple(x for x in reads if x not in along_f[:1]), second.name,
                 along_f[0] if along_f else "")


@dataclass(frozen=True)
class ChainConfig:
    """One configuration of the chain kernel, with what it needs of the SM."""

    block_m: int                  # rows a tile: WARPGROUPS x 64
    block_f: int                  # a chunk of the stream
    stages: int
    warpgroups: int
    width_k: int                  # the whole axes' boxes (powers of two: TMA and gl.arange)
    width_n: int
    smem_bytes: int
    registers: int
    registers_needed: int

    @property
    def rows(self) -> int:
        return self.block_m // self.warpgroups

    def label(self) -> str:
        return (f"chain {self.block_m} rows, s_f={self.block_f}, {self.warpgroups} consumer"
                f"{'s' if self.warpgroups > 1 else ''}, {self.stages} stages")

    def entry(self) -> dict[str, int]:
        return {"BLOCK_M": self.block_m, "BLOCK_F": self.block_f, "STAGES": self.stages,
                "WARPGROUPS": self.warpgroups}


def parse_chain_label(label: str) -> dict[str, int]:
    """A configuration's keyword arguments from its label ("chain 128 rows, s_f=64, 2 consumers, 2 stages")."""
    rows, chunk, groups, stages = (part.strip() for part in label.split(","))
    return {"block_m": int(rows.split()[1]), "block_f": int(chunk.split("=")[1]),
            "warpgroups": int(groups.split()[0]), "stages": int(stages.split()[0])}


def configuration(profile: Profile, ch: Chain, dtype: str, widths: tuple[int, int], *, block_m: int, block_f: int,
                  stages: int, warpgroups: int) -> ChainConfig:
    """A configuration with its SMEM (each consumer's rows of A, its output's staging where that is not
    as wide, the rings of both B operands and of a vector along the stream, the mbarriers and the
    partitions' reserve) and its registers
    (a consumer thread's share of the output's accumulator, one chunk's H in fp32 and the previous
    chunk's P packed two a register, a chunk-sized value an op between the contractions, and the
    reserve). `widths`: the sizes of k and n."""
    size = bytes_per_value(dtype)
    wk, wn = (next_pow2(w) for w in widths)
    smem = block_m * wk * size + stages * block_f * (wk + wn + (1 if ch.fvec else 0)) * size
    if wn != wk:
        smem += block_m * wn * size
    smem += MBARRIER_BYTES * (2 + 4 * stages) + PARTITION_BYTES
    rows, threads = block_m // warpgroups, profile.divisors.mma_threads
    needed = rows * (wn + block_f) // threads + rows * block_f * size // (4 * threads) + REGISTER_RESERVE
    # each op between the contractions may hold a chunk-sized fp32 value beside H while the second wgmma
    # (its accumulator and the previous P) is in flight: mlp_bias's add and GELU at n = 256 spilled 136
    # bytes when compiled for sm_90a at the 232 registers the rule without them counted (bench/hopper_chain.py)
    needed += len(ch.mid) * rows * block_f // threads
    return ChainConfig(block_m, block_f, stages, warpgroups, wk, wn, smem, registers_per_consumer(profile, warpgroups),
                       needed)


def legal(profile: Profile, c: ChainConfig) -> bool:
    return (c.smem_bytes <= profile.level("smem").block_capacity_bytes and c.registers_needed <= c.registers
            and max(c.width_k, c.width_n) <= WIDEST and c.width_k >= 16 and c.width_n >= 16)


def candidates(profile: Profile, ch: Chain, dtype: str, widths: tuple[int, int]) -> list[ChainConfig]:
    rows = profile.divisors.mma[dtype].m
    out = []
    for warpgroups in WARPGROUPS:
        for block_f in BLOCKS_F:
            for stages in STAGES:
                c = configuration(profile, ch, dtype, widths, block_m=rows * warpgroups, block_f=block_f,
                                  stages=stages, warpgroups=warpgroups)
                if legal(profile, c):
                    out.append(c)
    return out


def widths_of(p: KernelPlan, ch: Chain, sizes: dict[str, int]) -> tuple[int, int]:
    """The sizes of the whole axes k and n at `sizes` (size symbols of the weaved diagram)."""
    d = p.diagram
    at = {**{s.name: int(v) for s, v in d.defaults.items()}, **{str(k): int(v) for k, v in sizes.items()}}

    def size(axis: str) -> int:
        expr = d.size(axis)
        return int(expr.subs({s: at[s.name] for s in expr.free_symbols}))
    k, n = (math.prod(size(x) for x in p.dim(dim).axes) for dim in (ch.k, ch.n))
    return k, n


def tile_names(p: KernelPlan, ch: Chain) -> tuple[str, str]:
    """The partition's symbols of the rows' tile and the chunk (g_n, s_f)."""
    part = p.schedule.partition
    return part.group_sizes[p.dim(ch.m).axes[0]].name, part.stream[1].name


def counted(model: TermModel, p: KernelPlan, ch: Chain, sizes: dict[str, int],
            configs: list[ChainConfig]) -> list[Counts]:
    """The engine's counts of kernel `p` at `sizes` for each configuration's tiles (one evaluation)."""
    gm, sf = tile_names(p, ch)
    t = model.terms(sizes, [{gm: c.block_m, sf: c.block_f} for c in configs])
    v, w = t.values, t.weights
    *above, lowest = list(w)
    out = []
    for i in range(len(configs)):
        tiles = int(v["groups"][i])
        out.append(Counts(tiles=tiles, chunks=round(float(v["steps"][i]) / tiles), operands=2,
                          tensor_flops=float(v["flops_tensor"][i]),
                          thread_flops={q: float(v[f"flops_{q}"][i]) for q in ("sfu", "vector")
                                        if float(v[f"flops_{q}"][i])},
                          loads_s=float(v[f"{lowest}_bytes"][i]) * w[lowest],
                          gmem_s=sum(float(v[f"{level}_bytes"][i]) * w[level] for level in above)))
    return out


def chunk_times(profile: Profile, c: ChainConfig, counts: Counts, dtype: str,
                params: ContractionParams) -> dict[str, float]:
    """Seconds one chunk of a tile costs its SM, by what may bound it (the chunk takes the longest):
    `tensor` (both contractions), `smem` (wgmma's reads: each 64-row instruction reads its rows of A and
    B1's chunk, and B2's chunk; P comes from registers), `l2` (the chunk's loads, the SMs at work sharing
    L2), `latency` (a load's latency and transfer behind the STAGES - 1 chunks ahead), `threads` (the
    mid ops at the lanes and the special function unit, under the second contraction) and `wait` (one
    consumer's own chain: its share of the wgmmas, then the wait for H_j and the second's drain before it
    issues the next chunk, which only the other consumers' wgmmas fill, and the ops between the
    contractions of every consumer: they wait on the same stage of the ring, so they run their ops at
    once, on the SM's shared lanes and special function unit, and each one's chunk takes them all; a
    form fitted against two others on an H200's sweep, docs/kernels.md)."""
    sms = profile.sm_count
    per_chunk = counts.tiles * counts.chunks
    tensor = counts.tensor_flops / per_chunk / (profile.rate("tensor", dtype) / sms * params.tensor_efficiency)
    m = profile.divisors.mma[dtype].m
    read = c.block_m // m * (m * c.width_k + c.block_f * (c.width_k + c.width_n)) * bytes_per_value(dtype)
    smem = read / (profile.level("smem").bandwidth_bytes_per_s / sms * params.smem_efficiency)
    l2 = counts.loads_s / per_chunk * min(sms, counts.tiles) / params.l2_efficiency
    latency = (params.load_latency_s + l2) / max(c.stages - 1, 1)
    threads = sum(f / per_chunk / (profile.rate(q, dtype) / sms * params.thread_efficiency)
                  for q, f in counts.thread_flops.items())
    wait = tensor / c.warpgroups + threads + params.wait_s
    return {"tensor": tensor, "smem": smem, "l2": l2, "latency": latency, "threads": threads, "wait": wait}


def predicted_time(profile: Profile, c: ChainConfig, counts: Counts, dtype: str,
                   params: ContractionParams) -> tuple[float, str]:
    """Seconds for the kernel at `counts`, and what bounds it (module docstring)."""
    chunk = chunk_times(profile, c, counts, dtype, params)
    per_sm = math.ceil(counts.tiles / profile.sm_count)
    sm = per_sm * ((counts.chunks + 1) * (max(chunk.values()) + params.chunk_overhead_s) + params.tile_overhead_s)
    # the whole GPU's tensor work at the rate its power limit sustains: an SM alone runs at the boost
    # clock, every SM at once at a lower one
    power = counts.tensor_flops / (profile.rate("tensor", dtype) * params.power_efficiency)
    bound, t = max((("gmem", counts.gmem_s), ("power", power), (max(chunk, key=chunk.get), sm)), key=lambda x: x[1])
    return params.launch_overhead_s + t, bound


@dataclass(frozen=True)
class RankedChain:
    config: ChainConfig
    time_s: float
    bound: str
    counts: Counts


def ranked(profile: Profile, model: TermModel, p: KernelPlan, ch: Chain, dtype: str, sizes: dict[str, int],
           params: ContractionParams, configs: list[ChainConfig] | None = None) -> list[RankedChain]:
    """Every legal configuration (or `configs`) at `sizes`, fastest first; within TIE of the fastest, the
    larger tile, the more stages, the fewer warpgroups."""
    configs = configs if configs is not None else candidates(profile, ch, dtype, widths_of(p, ch, sizes))
    if not configs:
        return []
    rows = [RankedChain(c, *predicted_time(profile, c, n, dtype, params), n)
            for c, n in zip(configs, counted(model, p, ch, sizes, configs), strict=True)]
    rows.sort(key=lambda r: r.time_s)
    best = rows[0].time_s
    alike = [r for r in rows if r.time_s <= best * (1 + TIE)]
    alike.sort(key=lambda r: (-r.config.block_m, -r.config.stages, r.config.warpgroups))
    return alike + rows[len(alike):]


__all__ = ["BLOCKS_F", "STAGES", "WARPGROUPS", "WIDEST", "Chain", "ChainConfig", "RankedChain", "candidates",
           "chunk_times", "configuration", "counted", "legal", "parse_chain_label", "predicted_time", "ranked",
           "realise_chain", "tile_names", "widths_of"]
