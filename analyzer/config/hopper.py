"""The warp-specialised configurations of a streamed attention kernel on Hopper (Sections 5.5-5.7, 6).

A block of the Hopper kernel (analyzer.codegen.hopper) has one producer warp, which issues the TMA loads
of the block's query tiles and of every chunk of K and V into a ring of `stages` SMEM buffers, and N
consumer warpgroups, each owning w = wgmma's m rows of queries and running both contractions on the
tensor cores with the online softmax between them in registers (the fragment strategy). A
configuration is (N, s_x, stages, overlap): overlap `intra` issues chunk j's QK^T before chunk j-1's PV
and runs the softmax under it; `inter` orders the warpgroups' contractions with mbarriers (ping-pong);
`inter+intra` does both, `none` neither.

Legality is Tables 1 and 2 with the profile's numbers:
- SMEM: N query tiles (w x d) and `stages` chunks of K and V (s_x x d each), plus the mbarriers and
  what Triton adds for the warp-specialised partitions (PARTITION_BYTES): what the kernel allocates;
- registers: setmaxnreg gives the producer warpgroup the minimum (24 a thread) and the N consumers the
  rest of the register file, as FlashAttention-3 does; a consumer thread holds its share of the output
  accumulator (w d fp32), of one chunk's scores (w s_x fp32) and of the previous chunk's probabilities
  (w s_x in 16 bits, packed two a register; in FP8 counted so too, with FP8_RESERVE more), plus
  REGISTER_RESERVE for indices, addresses and the running max and sum, and what the diagram's score ops
  hold (Scores.registers: ALiBi's distances, a bias's tile, an SFU op's constants). The reserve is a
  bound fitted to what ptxas did on an H100: the rule refuses the two configurations it could not build
  and admits all it built but one (tests/kernels/test_hopper.py); the ops' counts are fitted so to every
  variant's configurations near the edge (bench/register_scan.py).

The ranking is the paper's model: per chunk, a block's tensor-core work takes the overlap schedule's
period (Section 6: analyzer.config.overlap's bound for N warpgroups and the strategy, with Section 6.3's
66 % overhead on the threads' work) times a warpgroup's rows, its loads H N_SM / B (Appendix B.0.1,
from L2: every block of a head reads the same chunks, as the paper's FlashAttention-3 configurations
model with rows_per_load 999); a chunk costs the larger. Blocks run one an SM (the SMEM of one
fills most of it) in waves; each adds one chunk for its prologue and epilogue (the first QK^T and the
last PV run alone), unless the schedule is persistent: a block an SM takes the tiles in turn, and a share
of each tile's fixed cost (`persistent_hidden`) runs under the tile before; the prefetch schedule hides
its own share (`prefetch_hidden`: the next tile's queries land early and its first QK^T runs beside this
tile's last PV); under a mask the busiest persistent block, as the kernel hands out the unequal tiles
(`persistent_loads`), ends the grid. Causal tiles are counted
as the kernel walks them (`causal_tiles`): block skipping streams a tile's chunks up to its diagonal,
and the steps that run the causal mask (those on the diagonal or a window's edge, the tile's first
chunk only where it is one of them) each add `mask_overhead` of a chunk: the mask's compare and
select on every score, on the masked step's own code path. A persistent schedule is ranked where a profile's fit
measured what it hides (`ranked_schedules`); prefetch not under a mask, where ranked it took the
128-key chunks that short causal tiles run slower on, for a reason no term states (`UNMASKED_ONLY`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

from analyzer.common.dtypes import bytes_per_value
from analyzer.config.band_walk import _causal_tiles, band_walk, causal_tiles, persistent_loads
from analyzer.config.configure import configurations, names_of, schedule_of
from analyzer.config.hopper_params import PERSISTENT_SCHEDULES, SCHEDULES, HopperParams, ranked_schedules
from analyzer.config.kernels import Configured
from analyzer.config.overlap import Stage, bound
from analyzer.config.scores import SOFTMAX, Scores, scores_of
from analyzer.config.warp_specialised import (
    MBARRIER_BYTES,
    PARTITION_BYTES,
    REGISTER_RESERVE,
    hopper_capable,
    register_cap,
    registers_per_consumer,
)
from analyzer.diagram.interface import Attention
from analyzer.hardware import Profile

# Beyond the warp-specialised kernel's REGISTER_RESERVE (analyzer.config.warp_specialised), where the
# kernel masks keys (each row's bounds, the columns it compares; _attn_keep compares a pair of keys
# through one column). Compiled for sm_90a at the rule's edge, 8 admits what ptxas builds without a
# spill: head dim 64, 3 consumers of 160 registers at s_x = 128 and 4 of 112 at s_x = 64 need the 8 and
# spill nothing; with a column a key they spilled 8 B and 288 B, and a reserve of 16 refused them
# (bench/results/register_scan_h100.md)
CAUSAL_RESERVE = 8
# ... and beyond those with FP8 (e4m3 conversions, the key order, the scales): ptxas for sm_90a spilled
# 80 to 440 bytes a thread where the tiles left 8 registers of a consumer's free, 4 bytes where 24, none
# where 40 or more (head dims 64 to 256, 1 to 4 consumers, s_x 64 to 256; tests/kernels/test_hopper_fp8.py)
FP8_RESERVE = 32
CHUNKS = (64, 128, 256)       # s_x: powers of two (TMA boxes, gl.arange) up to wgmma's largest n
STAGES = (2, 3, 4)
OVERLAPS = ("none", "inter", "intra", "inter+intra")
ALIKE = 0.05                  # predictions this close are alike: the calibrated model's error (README)
# The overlap a tie goes to, by the lane that bounds Section 6's period. Where the tensor cores do (the
# softmax fits under the contractions), the ping-pong's turn barriers only add waits: intra first. Where
# the threads do, ordering the warpgroups keeps one's contractions under another's softmax: inter+intra
# first. Measured on an H100 at 8k (bench/results/hopper_h100_overlap.md, docs/section6.md): intra the
# fastest at head dim 256 (tensor-bound), inter+intra within 1.5 % of the fastest at 64 (threads-bound),
# the four within 3 % at 128 not causal and intra 6 % behind at 128 causal.
PREFERRED = {"tensor": ("intra", "none", "inter+intra", "inter"),
             "threads": ("inter+intra", "intra", "inter", "none"),
             # a plain running sum (no online softmax: sigmoid attention), whichever lane bounds it: at every
             # sigmoid shape swept the intra-warpgroup overlap ran 13-18 % behind the fastest overlap and
             # inter+intra within 2 % of it (bench/results/hopper_variants_h100.md, head dims 64 and 128,
             # 2k-16k); the model's period does not say why, so the order is the measurement's
             "sum": ("inter+intra", "inter", "none", "intra")}
# Where the tie goes from the tensor cores' order to the threads': the fastest overlap changes between threads'
# work about half the tensor cores' (softmax at head dim 128: intra first) and about equal to it (softmax at 64,
# softcap at 128: inter+intra first; bench/results/hopper_variants_h100.md); three quarters lies between
THREADS_SHARE = 0.75
LOADS_FROM = "l2"             # the blocks of one head read the same chunks: all but the first from L2


@dataclass(frozen=True)
class HopperConfig:
    """One configuration of the warp-specialised kernel for one head dim."""

    warpgroups: int           # N consumer warpgroups
    rows: int                 # w: query rows per warpgroup (wgmma's m)
    chunk: int                # s_x: keys per streamed chunk
    stages: int               # SMEM buffers per streamed load (K and V each)
    overlap: str              # none, inter, intra or inter+intra
    schedule: str             # tiles (a block a tile, the hardware schedules), persistent or prefetch (a block an SM)
    smem_bytes: int
    registers: int            # per consumer thread, as setmaxnreg gives them
    registers_needed: int
    held: bool = True         # the ops' vectors held through the chunks; False: recomputed a chunk, where held
    # ones do not fit the registers (the shifted ALiBi's m (j - r): the kernel's ALIBI 2, _attn_alibi_cols)

    @property
    def block_rows(self) -> int:
        """g_q = N w: the query rows of a block."""
        return self.warpgroups * self.rows

    @property
    def intra(self) -> bool:
        return "intra" in self.overlap

    @property
    def inter(self) -> bool:
        return "inter" in self.overlap

    def entry(self) -> dict[str, int | str]:
        """The configuration as the generated module's CONFIGS carries it."""
        return {"WARPGROUPS": self.warpgroups, "BLOCK_X": self.chunk, "STAGES": self.stages,
                "OVERLAP": self.overlap, "SCHEDULE": self.schedule}

    def label(self) -> str:
        groups = "warpgroup" if self.warpgroups == 1 else "warpgroups"
        return (f"N={self.warpgroups} consumer {groups} of {self.rows} rows, s_x={self.chunk}, "
                f"{self.stages} stages, overlap {self.overlap}, {self.schedule}")


def configuration(profile: Profile, head_dim: int, dtype: str, *, warpgroups: int, chunk: int, stages: int,
                  overlap: str, schedule: str = "tiles", causal: bool = False,
                  value_dim: int | None = None, scores: Scores = SOFTMAX) -> HopperConfig:
    """The configuration with its SMEM and register needs (Tables 1-2); `legal` says whether it fits.
    `value_dim`: V's and the output's head dim where it is not the queries' and keys' (MLA's 192/128).
    `scores`: the diagram's chain of scores: the registers its ops hold (Scores.registers), and a bias
    from memory, which the producer lands a tile a consumer and stage beside V."""
    e = value_dim or head_dim
    rows = profile.divisors.mma[dtype].m
    threads = profile.divisors.mma_threads
    size = bytes_per_value(dtype)
    q_buffers = 2 if schedule == "prefetch" else 1      # prefetch: the next tile's queries in a second buffer
    smem = (q_buffers * warpgroups * rows * head_dim + stages * chunk * (head_dim + e)) * size
    if e != head_blocks(head_dim)[0] or schedule == "prefetch" or dtype == "fp8":   # else the output leaves
        # through the query tile's first column block (MLA's 128 of 192, as FlashAttention-3); FP8's is 16-bit
        smem += warpgroups * rows * e * max(size, 2)
    # the query tile's ready and empty, each stage's K and V ready and empty, and a turn per consumer
    if scores.bias is not None:
        smem += stages * warpgroups * rows * chunk * size  # each consumer's tile of the bias a stage
    smem += MBARRIER_BYTES * (2 * q_buffers + 4 * stages + warpgroups) + PARTITION_BYTES
    fp32 = rows * (e + chunk) // threads                   # O accumulator and one chunk's scores
    # the previous chunk's probabilities, packed; e4m3's pass through pairs of 16 bits (cvt's e4m3x2)
    # before four share a register, and a chunk of them counts as 16-bit (ptxas spilled 1.1 to 2.5 KB
    # at head dim 256, s_x = 128 and 64, s_x = 256, two consumers, which one byte a value admitted)
    packed = rows * chunk * max(size, 2) // (4 * threads)
    given = registers_per_consumer(profile, warpgroups)
    tiles = fp32 + packed + REGISTER_RESERVE + (CAUSAL_RESERVE if causal else 0) + \
        (FP8_RESERVE if dtype == "fp8" else 0)
    # the ops' vectors held where they fit, else recomputed a chunk where the kernel can (measured: holding
    # ALiBi's is 3-4 % faster at head dim 64, recomputing it 1 % faster at 128, where held it spilled)
    held = tiles + scores.registers(rows * chunk // threads) <= given or not scores.recomputable
    return HopperConfig(warpgroups=warpgroups, rows=rows, chunk=chunk, stages=stages, overlap=overlap,
                        schedule=schedule, smem_bytes=smem, registers=given,
                        registers_needed=tiles + scores.registers(rows * chunk // threads, held), held=held)


def head_blocks(head_dim: int) -> tuple[int, int]:
    """The column blocks the kernel loads a head dim of q and k in: itself where it is a power of two,
    else the largest power of two below it and the rest (192 = 128 + 64); Gluon's tiles are powers of
    two. (0, 0) where the rest is none (a head dim the kernel cannot load)."""
    lo = 1 << (head_dim.bit_length() - 1)
    hi = head_dim - lo
    return (lo, hi) if hi & (hi - 1) == 0 else (0, 0)


def legal(profile: Profile, c: HopperConfig) -> bool:
    smem = profile.level("smem").block_capacity_bytes
    return (c.smem_bytes <= smem and c.registers_needed <= c.registers
            and c.chunk <= 256 and (c.warpgroups > 1 or not c.inter))


def candidates(profile: Profile, head_dim: int, dtype: str, causal: bool = False,
               schedules: tuple[str, ...] = ("tiles",), value_dim: int | None = None,
               scores: Scores = SOFTMAX) -> list[HopperConfig]:
    """Every legal configuration for `head_dim`: N up to what the register file holds; persistent where
    it is ranked (under a mask the persistent blocks take the heads' unequal tiles longest first, the
    rounds in alternating order, so that their sums of lengths stay within a tile: `BALANCE` in the
    kernel)."""
    out = []
    if not head_blocks(head_dim)[0]:
        return out
    for n in range(1, profile.registers.per_sm // profile.divisors.mma_threads // 128 + 1):
        for chunk in CHUNKS:
            for stages in STAGES:
                for overlap in OVERLAPS:
                    for schedule in schedules:
                        c = configuration(profile, head_dim, dtype, warpgroups=n, chunk=chunk, stages=stages,
                                          overlap=overlap, schedule=schedule, causal=causal,
                                          value_dim=value_dim, scores=scores)
                        if legal(profile, c):
                            out.append(c)
    return out


def _body(profile: Profile, c: HopperConfig, head_dim: int, dtype: str, params: HopperParams,
          scores: Scores = SOFTMAX, value_dim: int | None = None) -> tuple[Stage, ...]:
    """Table 3's loop body per row of one chunk: QK^T and PV on the tensor cores (2 d s_x each, at
    `efficiency` of the datasheet rate), and the scores' work on the special function units: the
    softmax's exponentials and its rescale (s_x + 1), or what the diagram's chain of scores costs
    (analyzer.config.scores: sigmoid attention's s_x tanh), with the fp32 lane work an op adds beyond the
    softmax's (ALiBi's 2 s_x, at the lanes' rate) in the same stage: the threads issue both. Each op costs
    what a sweep of the variants fitted (`params.score_clocks`) where it did, else what is counted here.
    QK^T contracts the head dim, PV the keys into `value_dim` columns (2 e s_x)."""
    clock = profile.clocks.tensor_hz * profile.sm_count
    tensor = profile.tensor_flops_per_s[dtype] / clock * params.tensor_efficiency * \
        (params.fp8_tensor_efficiency if dtype == "fp8" else 1.0)
    contraction = 2 * head_dim * c.chunk / tensor
    mix = 2 * (value_dim or head_dim) * c.chunk / tensor
    rate = profile.per_sm_per_clock
    normalise = 1 if scores.softmax else 0          # the softmax's exp2 a score
    sfu = (c.chunk * normalise + scores.sfu_per_row) / rate.sfu_ops \
        + c.chunk * scores.op_clocks(rate.sfu_ops, rate.fp32_fma, dict(params.score_clocks))
    label = "softmax (exp)" if scores == SOFTMAX else f"{scores.label()} (sfu)"
    return (Stage("S (dot)", "tensor", contraction), Stage(label, "sfu", sfu),
            Stage("O (contraction)", "tensor", mix))


def chunk_times(profile: Profile, c: HopperConfig, head_dim: int, dtype: str, overhead: float | None = None,
                params: HopperParams | None = None, scores: Scores = SOFTMAX,
                value_dim: int | None = None) -> dict[str, float]:
    """Seconds a block spends on one chunk, by what may bound it: `tensor` (the contractions at Section
    6's period, tensor cores saturated), `threads` (the period, set by the softmax and its overhead) and
    `loads` (the chunk's K and V from LOADS_FROM, shared by the SMs); the chunk takes the largest.
    `overhead` replaces the parameters' softmax overhead (Section 6's experiment varies it)."""
    params = params or HopperParams.of(profile)
    o = params.softmax_overhead if overhead is None else overhead
    body = _body(profile, c, head_dim, dtype, params, scores, value_dim)
    strategy = "intra" if c.intra else "inter"
    period = bound(body, groups=c.warpgroups, strategy=strategy, overhead=o,
                   softness=params.overlap_softness)   # clk per row
    if c.warpgroups == 1 and not c.intra and params.lone_overlap:
        # measured: one consumer warpgroup with no overlap scheduled runs well ahead of a serial
        # period (bench/results/hopper_sweep_h100.json: 20 % on average); lone_overlap places it between
        # the serial period and the intra-warpgroup one
        period -= params.lone_overlap * (period - bound(body, groups=1, strategy="intra", overhead=o,
                                                        softness=params.overlap_softness))
    busy = c.warpgroups * sum(s.clocks for s in body if s.lane == "tensor")
    t_k = period * c.rows / profile.clocks.tensor_hz          # every group's rows, sharing the lanes
    loaded = c.chunk * (head_dim + (value_dim or head_dim)) * bytes_per_value(dtype)   # a chunk of K and of V
    bandwidth = profile.level(LOADS_FROM).bandwidth_bytes_per_s * params.l2_efficiency
    t_h = loaded * profile.sm_count / bandwidth
    if scores.bias is not None:    # the block's rows of the bias at the chunk's keys: read once, from HBM,
        # a request a row
        t_h += c.block_rows * c.chunk * bytes_per_value(dtype) * profile.sm_count / \
            (profile.level("gmem").bandwidth_bytes_per_s * params.bias_efficiency) + \
            c.block_rows * params.bias_row_clocks / profile.clocks.tensor_hz
    # the lane that bounds it is the one that would under Section 6's perfect overlap: the soft overlap
    # lengthens the period by what the shorter lane fails to hide, it does not change which is longer
    sharp = bound(body, groups=c.warpgroups, strategy=strategy, overhead=o)
    return {"tensor" if sharp <= busy * (1 + 1e-9) else "threads": t_k, "loads": t_h}


def predicted_time(profile: Profile, c: HopperConfig, head_dim: int, dtype: str, *, seq_q: int, seq_k: int,
                   instances: int, causal: bool = False, overhead: float | None = None,
                   params: HopperParams | None = None, scores: Scores = SOFTMAX,
                   value_dim: int | None = None) -> float:
    """Seconds for `instances` (batch x query heads) of attention at these lengths (module docstring),
    with the profile's fitted parameters unless `params` are given."""
    params = params or HopperParams.of(profile)
    return _time(profile, c, _chunk_s(profile, c, head_dim, dtype, overhead, params, scores, value_dim),
                 seq_q=seq_q, seq_k=seq_k, instances=instances, causal=causal, params=params, scores=scores)


def _chunk_s(profile: Profile, c: HopperConfig, head_dim: int, dtype: str, overhead: float | None,
             params: HopperParams, scores: Scores, value_dim: int | None) -> tuple[float, float]:
    """Seconds a chunk costs a block, with its fixed overhead (what no size changes), and the chunk's
    seconds a masked step's overhead is a share of: its own, or with FP8 the same chunk's in 16 bits.
    The mask's compares and selects are the threads' work whatever the contractions' type, and the fit
    measured them as a share of 16-bit chunks (FP8's halve the tensor cores' time, not the mask's)."""
    def seconds(dtype: str, scores: Scores) -> float:
        return max(chunk_times(profile, c, head_dim, dtype, overhead, params, scores, value_dim).values()) + \
            params.chunk_overhead_s
    own = seconds(dtype, scores)
    return own, (seconds("fp16", replace(scores, e4m3=False)) if dtype == "fp8" else own)


def _time(profile: Profile, c: HopperConfig, chunk: tuple[float, float], *, seq_q: int, seq_k: int, instances: int,
          causal: bool, params: HopperParams, scores: Scores) -> float:
    """predicted_time from the configuration's seconds a chunk and a masked step's share (`_chunk_s`)."""
    walk = band_walk(causal, scores)
    if not walk:
        return unmasked_time(profile, unmasked_parts(profile, c, chunk[0], seq_q=seq_q, seq_k=seq_k, params=params),
                             instances)
    chunk_s, mask_s = chunk
    blocks_q = math.ceil(seq_q / c.block_rows)
    chunks, masked = _causal_tiles(c.block_rows, c.chunk, seq_q, seq_k, *walk)
    waves = math.ceil(instances * blocks_q / profile.sm_count)
    steps_s = chunks * chunk_s + params.mask_overhead * masked * mask_s
    fixed_s = _fixed(c, chunk_s, params)
    if c.schedule in PERSISTENT_SCHEDULES:     # unequal tiles: the busiest block, as the kernel hands them out, ends
        hidden, slower = _hidden(c, params)     # the grid
        b_chunks, b_masked, b_tiles = persistent_loads(c.block_rows, c.chunk, seq_q, seq_k, *walk, instances,
                                                       min(instances * blocks_q, profile.sm_count))
        busiest = ((b_chunks * chunk_s + params.mask_overhead * b_masked * mask_s) * slower
                   + b_tiles * (1 - hidden) * fixed_s).max()
        return params.launch_overhead_s + float(busiest) + hidden * fixed_s
    return params.launch_overhead_s + waves * (steps_s + fixed_s)


def _fixed(c: HopperConfig, chunk_s: float, params: HopperParams) -> float:
    """A tile's prologue and overheads: its own, and each consumer warpgroup's (its epilogue, in turn)."""
    return params.prologue_chunks * chunk_s + params.tile_overhead_s + params.consumer_overhead_s * c.warpgroups


def _hidden(c: HopperConfig, params: HopperParams) -> tuple[float, float]:
    """A persistent schedule's share of each tile's fixed cost that runs under the tile before it, and how
    much slower it streams a chunk (1 + the slowdown)."""
    share = params.prefetch_hidden if c.schedule == "prefetch" else params.persistent_hidden
    return (1.0 if share is None else share), 1 + params.persistent_slowdown      # unfitted: all of it hidden


def unmasked_parts(profile: Profile, c: HopperConfig, chunk_s: float, *, seq_q: float, seq_k: float,
                   params: HopperParams) -> tuple[float, float, int]:
    """An unmasked call's time as (once, a wave, query blocks an instance): the time is once + ceil(instances
    x blocks / SMs) x a wave, every tile alike (a persistent block's tiles each a wave: its turns)."""
    blocks_q = math.ceil(seq_q / c.block_rows)
    steps_s = math.ceil(seq_k / c.chunk) * chunk_s
    fixed_s = _fixed(c, chunk_s, params)
    if c.schedule in PERSISTENT_SCHEDULES:     # a share of each tile's fixed cost runs under the tile before it
        hidden, slower = _hidden(c, params)
        return params.launch_overhead_s + hidden * fixed_s, steps_s * slower + (1 - hidden) * fixed_s, blocks_q
    return params.launch_overhead_s, steps_s + fixed_s, blocks_q


def unmasked_time(profile: Profile, parts: tuple[float, float, int], instances: float) -> float:
    """An unmasked call's seconds from its `unmasked_parts`, at `instances` problems (the waves it fills)."""
    once_s, wave_s, blocks_q = parts
    return once_s + math.ceil(instances * blocks_q / profile.sm_count) * wave_s


def ranked(profile: Profile, head_dim: int, dtype: str, *, seq_q: int, seq_k: int, instances: int,
           causal: bool = False, params: HopperParams | None = None, scores: Scores = SOFTMAX,
           value_dim: int | None = None) -> list[tuple[float, HopperConfig]]:
    """The legal configurations with their predicted seconds, the model's choice first: predictions
    within ALIKE of the fastest are ones the model cannot tell apart, and among them the tie rule
    (`_tie`) decides; the rest follow, fastest first."""
    params = params or HopperParams.of(profile)
    return ranked_priced(profile, priced(profile, head_dim, dtype, causal, params, scores, value_dim), seq_q=seq_q,
                         seq_k=seq_k, instances=instances, causal=causal, params=params, scores=scores)


def priced(profile: Profile, head_dim: int, dtype: str, causal: bool, params: HopperParams, scores: Scores,
           value_dim: int | None) -> list[tuple[HopperConfig, float, tuple]]:
    """Each legal configuration with what no size changes: its seconds a chunk and its tie key."""
    masked = band_walk(causal, scores) is not None
    return [(c, _chunk_s(profile, c, head_dim, dtype, None, params, scores, value_dim),
             _tie(profile, c, head_dim, dtype, params, scores, value_dim))
            for c in candidates(profile, head_dim, dtype, masked, schedules=ranked_schedules(params, masked),
                                value_dim=value_dim, scores=scores)]


def ranked_priced(profile: Profile, costed: list[tuple[HopperConfig, float, tuple]], *, seq_q: int, seq_k: int,
                  instances: int, causal: bool, params: HopperParams,
                  scores: Scores) -> list[tuple[float, HopperConfig]]:
    """`ranked` of the configurations `priced` gave, at one problem."""
    return ordered([(_time(profile, c, chunk_s, seq_q=seq_q, seq_k=seq_k, instances=instances, causal=causal,
                           params=params, scores=scores), c, tie) for c, chunk_s, tie in costed])


def ordered(scored: list[tuple[float, HopperConfig, tuple]]) -> list[tuple[float, HopperConfig]]:
    """(score, configuration, tie key) ranked: scores within ALIKE of the least are ones the model cannot tell
    apart, and among them the tie rule decides; the rest follow, least first."""
    band = min((t for t, _, _ in scored), default=0.0) * (1 + ALIKE)
    return [(t, c) for t, c, _ in sorted(scored, key=lambda s: (0, *s[2], s[0]) if s[0] <= band else (1, s[0], *s[2]))]


def threads_bound(profile: Profile, c: HopperConfig, head_dim: int, dtype: str, overhead: float | None = None,
                  params: HopperParams | None = None, scores: Scores = SOFTMAX,
                  value_dim: int | None = None) -> bool:
    """Whether a row's softmax (with the overhead) is close enough to its two contractions to bound the
    period: Section 6's lanes, the threads' at least THREADS_SHARE of the tensor cores' (with a soft
    overlap both lanes show in the period; where the overlap is perfect, the threads' the longer)."""
    params = params or HopperParams.of(profile)
    o = params.softmax_overhead if overhead is None else overhead
    body = _body(profile, c, head_dim, dtype, params, scores, value_dim)
    tensor = sum(s.clocks for s in body if s.lane == "tensor")
    share = THREADS_SHARE if params.overlap_softness > 0 else 1.0
    return sum(s.clocks for s in body if s.lane != "tensor") * (1 + o) >= share * tensor


def _tie(profile: Profile, c: HopperConfig, head_dim: int, dtype: str, params: HopperParams,
         scores: Scores = SOFTMAX, value_dim: int | None = None) -> tuple:
    """Among configurations the model predicts alike: larger chunks (fewer iterations, each with its
    barrier waits, which the model leaves out), fewer stages (less SMEM), more warpgroups, then the overlap
    PREFERRED for the lane that bounds the period (or a plain sum's); of two schedules, the faster predicted."""
    preferred = PREFERRED["sum" if not scores.softmax else
                          "threads" if threads_bound(profile, c, head_dim, dtype, params=params, scores=scores,
                                                     value_dim=value_dim) else "tensor"]
    return (-c.chunk, c.stages, -c.warpgroups, preferred.index(c.overlap))


def refusal(profile: Profile, c: Configured, sets: dict[str, int] | None = None) -> str | None:
    """Why the Hopper kernel does not take configured diagram `c` on `profile` with these --set pins, or
    None: napkin kernel and napkin sweep ask the same question, and fall back to the portable kernel
    alike."""
    why = realisable(c)
    if why:
        return why
    if not hopper_capable(profile):
        return f"{profile.name} has no warpgroup MMA and TMA (a Hopper GPU has)"
    sizes = {s.name for s in c.diagram.size_symbols}
    tiles = {s.name for k in c.diagram.kernels for p in k.partitions.values() for s in p.symbols}
    for name in sorted(set(sets or {}) - sizes):
        if name in tiles:
            return (f"--set {name} pins a tile of the portable kernel; the Hopper kernel ranks its "
                    "configurations whole")
        return f"--set {name}: {c.diagram.name} has no size {name!r}"
    return None


def named(profile: Profile, c: Configured, name: str) -> tuple[int, HopperConfig] | str:
    """The Hopper configuration that the diagram's configuration `name` (napkin configure --config)
    describes, with the head dim it is for, or why the kernel cannot realise it: N = warpgroups x w /
    wgmma's m (a consumer owns m rows), its chunk, stages and overlap."""
    base, specs = configurations(c.source_file, dtype=c.dtype)     # the file's own (the weave drops them)
    spec = next((s for s in specs if s.name == name), None)
    if spec is None:
        return f"--config {name}: {c.source_file} names no such configuration"
    if spec.strategy != "fragment":
        return f"--config {name} uses the {spec.strategy} strategy; the Hopper kernel realises the fragment one"
    if "fp8" in spec.dtypes.values() and c.dtype != "fp8":
        return f"--config {name} computes in {', '.join(sorted(set(spec.dtypes.values())))}; pass --dtype fp8 " \
               "for the Hopper kernel's FP8"
    names = names_of(schedule_of(base, c.kernels[0].plan.name))
    m = profile.divisors.mma[c.dtype].m
    rows = spec.sizes.get(names.w, m)
    chunk = spec.sizes.get(names.s or "", 128)
    if rows % m or chunk not in CHUNKS:
        return (f"--config {name} has {names.w}={rows} and {names.s}={chunk}; the Hopper kernel takes rows in "
                f"multiples of {m} and a chunk of {', '.join(map(str, CHUNKS))}")
    head_dim = spec.sizes.get(str(base.size(c.roles.head_dim)))
    if head_dim is None:       # the configuration leaves it open: the diagram's default
        head_dim = int(base.size(c.roles.head_dim).subs(base.defaults))
    chain = scores(c)
    config = configuration(profile, head_dim, c.dtype, warpgroups=(spec.warpgroups or 1) * rows // m, chunk=chunk,
                           stages=spec.stages, overlap=spec.overlap, causal=c.roles.causal,
                           scores=SOFTMAX if isinstance(chain, str) else chain)
    if not legal(profile, config):
        return (f"--config {name} as the Hopper kernel runs it ({config.label()}) does not fit {profile.name}: "
                f"{config.smem_bytes} bytes of SMEM, {config.registers_needed} registers a consumer thread")
    return head_dim, config


def realisable(c: Configured) -> str | None:
    """None if the Hopper kernel realises `c`, else why not (one line): attention with one fused,
    streamed kernel, S = Q K^T over the head dim, the chain of scores analyzer.config.scores reads (a
    causal mask, elementwise ops, the online softmax or a plain sum), then the contraction with V over
    the keys; V's head dim may be its own (MLA's 192/128: `value_dim`)."""
    r = c.roles
    if not isinstance(r, Attention):
        return f"{c.source_file} is not attention-shaped (the Hopper kernel realises streamed attention)"
    if len(c.kernels) != 1:
        return f"{c.source_file} has {len(c.kernels)} kernels; the Hopper kernel fuses attention into one"
    found = scores(c)
    if isinstance(found, str):
        return f"{c.source_file}: {found}"
    p = c.kernels[0].plan
    if found.bias is not None and c.dtype == "fp8":     # the bias's tiles are in key order, FP8's S is not
        return (f"{c.source_file} adds a bias to the scores; the Hopper kernel's FP8 streams its keys in an order "
                "of its own (docs/kernels.md): generate it in fp16 or bf16")
    if found.bias is not None:
        axes = c.diagram.arrays[c.diagram.op(found.bias.name).inputs[1]].axes
        if r.seq_q not in axes or r.seq_k not in axes:
            return (f"{c.source_file}: its bias {c.diagram.op(found.bias.name).inputs[1]} is not laid along both "
                    f"{r.seq_q} and {r.seq_k}; the Hopper kernel loads a bias by query and key tiles")
    if p.stream is None or p.stream.axes != (r.seq_k,):
        return f"{c.source_file}'s kernel does not stream the keys {r.seq_k}; the Hopper kernel does"
    return None


def value_dim(c: Configured, sizes: dict[str, int] | None = None) -> int | None:
    """V's (and the output's) head dim at `sizes` (the diagram's defaults fill the rest) where the diagram
    gives it an axis of its own (MLA's e); None where V shares the queries' and keys' head dim."""
    r = c.roles
    if not isinstance(r, Attention) or r.value_dim == r.head_dim:
        return None
    return c.axis_sizes(sizes or {})(r.value_dim)


def scores(c: Configured) -> Scores | str:
    """The chain of scores of configured attention `c` (analyzer.config.scores), or why it has none the
    Hopper kernel realises."""
    r = c.roles
    if not isinstance(r, Attention):
        return "not attention-shaped"
    ops = [c.diagram.op(n) for n in c.kernels[0].plan.schedule.kernel.ops]
    found = scores_of(ops, r.head_dim, r.seq_k, r.seq_q, r.extras)
    # FP8: the probabilities' rounding to e4m3 costs the threads (Scores.e4m3)
    return replace(found, e4m3=True) if c.dtype == "fp8" and not isinstance(found, str) else found


__all__ = ["PERSISTENT_SCHEDULES", "SCHEDULES", "HopperConfig", "HopperParams", "band_walk", "candidates", "causal_tiles", "chunk_times", "configuration", "head_blocks", "hopper_capable", "legal", "named", "ordered", "predicted_time", "priced", "ranked", "ranked_priced", "ranked_schedules", "realisable", "refusal", "register_cap", "registers_per_consumer", "scores", "unmasked_parts", "unmasked_time", "value_dim"]
