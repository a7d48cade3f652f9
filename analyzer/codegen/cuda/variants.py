"""The compile-time variants of a CUDA kernel: each configuration napkin chose (analyzer.config), as the
CUDA renderers can run it.

Register tiles have compile-time extents, so each configuration (and each compile-time extent of a
whole axis, e.g. the head dimension) is one instantiation of a kernel template. A configuration that
CUDA cannot run as given is clamped to a legal one, and the variant records each clamp and why (the
.cu header lists them): at most MAX_ROWS rows a block, at most MAX_COLS columns in a register tile
besides the rows, a chunk of 16 to MAX_CHUNK that leaves the registers enough, and at most the shared
memory a block may use.

Two kinds of bound: the shapes this renderer chooses to write (the constants below), and what the GPU
allows (CudaLimits, from its profile: shared memory per block, registers per thread, threads per block).
"""

from __future__ import annotations

from dataclasses import dataclass

from analyzer.codegen.cuda.limits import BLOCKS_PER_SM, WARP, CudaLimits
from analyzer.codegen.render import contraction_dims, loaded
from analyzer.common.errors import NapkinError
from analyzer.config.plan import GROUP, STREAM, Dim, KernelPlan, next_pow2

# Choices of this renderer, not of the GPU: the shapes its kernels are written and tested for
MAX_ROWS = 128                # rows of a block (a warp owns 16 or 32 of them)
MAX_COLS = 128                # columns of a register tile besides the rows (a grouped axis)
MAX_CHUNK = 128               # the streamed chunk
MAX_STAGES = 4                # shared-memory buffers of the streamed tiles
WHOLE_EXTENTS = (64, 128, 256)  # compile-time extents of a whole axis that has no configurations
ELEM_BYTES = 2                # fp16 and bf16
POINT_MAX_WARPS = 32          # the point kernel's block reduction keeps one partial a warp in napkin_red[32]

# Registers: a [16 ma, n] fp32 register tile in mma fragments costs each thread of its warp ma n / 2
# registers. Besides its tiles a thread holds fragments, addresses, loop indices and row statistics; the
# reserves are this renderer's estimates of those, which leave the tiles of a 255-register thread (sm_75 to
# sm_90) the budgets the kernels were tuned and tested with (320 and 192 columns).
REG_RESERVE = 95              # one m16 tile a warp: an accumulator's columns plus the chunk's, at most
                              # 2 (registers - 95)
MA2_RESERVE = 63              # two m16 tiles a warp (32 rows) when an accumulator's columns plus the widest
                              # body tile's, a register each, are at most registers - 63

# CUDA's own, the same on every architecture
SMEM_DEFAULT = 48 * 1024      # above this the launcher opts in with cudaFuncSetAttribute


def _prod(values) -> int:
    out = 1
    for v in values:
        out *= int(v)
    return out


@dataclass(frozen=True)
class Variant:
    """One compile-time instantiation of a kernel: its configuration as CUDA runs it."""

    index: int
    key: int | None                         # the configuration's key (head dim), None: one for all
    wholes: tuple[tuple[str, int], ...]     # whole dim -> compile-time extent
    warps: int
    tiles: tuple[tuple[str, int], ...]      # grouped axis -> tile (after clamping)
    extents: tuple[tuple[str, int], ...]    # dim -> elements of a tile (register or shared memory)
    chunk: int | None
    stages: int
    ma: int = 1                             # m16 tiles a warp (its rows: 16 * ma)
    head_elems: int = 0                     # shared memory: head tiles, elements
    stage_elems: int = 0                    # shared memory: one buffer of the streamed tiles
    clamps: tuple[str, ...] = ()

    @property
    def smem(self) -> int:
        return (self.head_elems + self.stages * self.stage_elems) * ELEM_BYTES

    def extent(self, dim: str) -> int:
        return dict(self.extents)[dim]

    def tile(self, axis: str) -> int:
        return dict(self.tiles)[axis]


def _fit(dim: Dim, tiles: dict[str, int], limit: int) -> None:
    """Shrink the tiles of `dim`'s axes, innermost first, until their product is at most `limit`."""
    for a in reversed(dim.axes):
        if _prod(tiles[x] for x in dim.axes) <= limit:
            return
        other = _prod(tiles[x] for x in dim.axes if x != a)
        tiles[a] = max(1, limit // other) if other <= limit else 1


def _smem_elems(p: KernelPlan, extents: dict[str, int]) -> tuple[int, int]:
    head = stage = 0
    stream = p.stream.name if p.stream else None
    for name in loaded(p):
        dims = p.tiles_of[name]
        if not dims:
            continue
        n = _prod(extents[d] for d in dims)
        n = (n + 7) // 8 * 8
        if stream in dims:
            stage += n
        else:
            head += n
    return head, stage


def mma_variant(p: KernelPlan, row: Dim, index: int, key, choice, wholes: dict[str, int],
                limits: CudaLimits) -> Variant:
    """The variant of configuration `choice` (head dim `key`) and whole extents `wholes` of a tensor-core
    kernel whose block's rows are `row`, within the GPU's `limits`: within the shared memory that keeps
    two blocks an SM where that is possible (CudaLimits.smem_budgets), else all a block may use."""
    *shares, whole = limits.smem_budgets
    for budget in shares:
        try:
            return _mma_variant(p, row, index, key, choice, wholes, limits, budget)
        except NapkinError:
            continue
    return _mma_variant(p, row, index, key, choice, wholes, limits, whole)


def _mma_variant(p: KernelPlan, row: Dim, index: int, key, choice, wholes: dict[str, int],
                 limits: CudaLimits, smem_budget: int) -> Variant:
    shared_why = ("shared memory" if smem_budget == limits.smem_per_block else
                  f"shared memory: {BLOCKS_PER_SM} blocks an SM")
    sizes = p.schedule.partition.group_sizes
    sym = {a: sizes[a].name for d in p.groups for a in d.axes}
    configured = {a: int(choice.tiles.get(sym[a], 1)) for a in sym}
    tiles = dict(configured)
    clamps: list[str] = []
    warps_cfg = max(1, int(choice.num_warps))
    rows_most = min(MAX_ROWS, 16 * (limits.threads_per_block // WARP))   # a warp per 16 rows at most
    max_rows = rows_most
    reg_cols = 2 * (limits.registers_per_thread - REG_RESERVE)
    ma2_cols = limits.registers_per_thread - MA2_RESERVE
    for d in p.groups:
        if d is not row:
            _fit(d, tiles, MAX_COLS)
    stream = p.stream
    chunk = None
    chunk_cfg = None
    if stream is not None:
        chunk_cfg = int(choice.tiles[p.schedule.partition.stream[1].name])
        chunk = max(16, min(next_pow2(chunk_cfg), MAX_CHUNK))
    stages_cfg = max(1, int(choice.num_stages))
    stages = min(stages_cfg, MAX_STAGES) if stream is not None else 1
    why_chunk = "registers" if chunk is not None and chunk < chunk_cfg else ""
    why_rows = ""
    why_stages = ""
    acc_dims = set()
    for r in p.schedule.reducers:
        if r.op.primitive.contraction:
            acc_dims.add(contraction_dims(p, r.op)[1])
    while True:
        row_tiles = dict(tiles)
        _fit(row, row_tiles, max_rows)
        extents = {}
        for d in p.dims:
            if d.kind == GROUP:
                extents[d.name] = max(16, next_pow2(_prod(row_tiles[a] for a in d.axes)))
            elif d.kind == STREAM:
                extents[d.name] = chunk
            else:
                extents[d.name] = wholes[d.name]
        acc_w = max((extents[d] for d in acc_dims), default=0)
        if chunk is not None and acc_w + chunk > reg_cols and chunk > 16:
            chunk //= 2
            why_chunk = "registers"
            continue
        head, stage = _smem_elems(p, extents)
        if (head + stages * stage) * ELEM_BYTES <= smem_budget:
            break
        if stages > 2:
            stages -= 1
            why_stages = shared_why
        elif chunk is not None and chunk > 32:
            chunk //= 2
            why_chunk = shared_why
        elif stages > 1:
            stages = 1
            why_stages = shared_why
        elif chunk is not None and chunk > 16:
            chunk //= 2
            why_chunk = shared_why
        elif max_rows > 16:
            max_rows //= 2
            why_rows = shared_why
        else:
            raise NapkinError(f"kernel {p.name!r}: its tiles need {(head + stage) * ELEM_BYTES // 1024} KB "
                              f"of shared memory, more than the {limits.smem_per_block // 1024} KB a block may use "
                              "(the GPU profile's smem level)",
                              file=p.diagram.source,
                              hint="pin smaller tiles with --set, or use the Triton backend")
    tiles = row_tiles
    rows = extents[row.name]
    body_w = 0
    for op in p.schedule.body:
        if op.name in {r.op.name for r in p.schedule.reducers} or op.primitive.contraction and \
                op.name not in p.tiles_of:
            continue
        dims = p.tiles_of.get(op.name, ())
        if len(dims) == 2:
            body_w = max(body_w, extents[dims[1] if dims[0] == row.name else dims[0]])
    ma = 2 if rows >= 32 and acc_w + body_w <= ma2_cols else 1
    warps = rows // (16 * ma)
    for a, symbol in sym.items():
        if tiles[a] != configured[a]:
            reason = (f"at most {rows_most} rows a block" if a in row.axes and not why_rows else
                      shared_why if a in row.axes else f"at most {MAX_COLS} columns in registers")
            clamps.append(f"{symbol} {configured[a]} -> {tiles[a]} ({reason})")
    if warps != warps_cfg:
        clamps.append(f"{warps_cfg} -> {warps} warps ({16 * ma} rows a warp: {ma} m16 tile"
                      f"{'s' if ma > 1 else ''})")
    if chunk is not None and chunk != chunk_cfg:
        clamps.append(f"{p.schedule.partition.stream[1].name} {chunk_cfg} -> {chunk} "
                      f"({why_chunk or 'a multiple of 16 for the tensor cores'})")
    if stages != stages_cfg and stream is not None:
        clamps.append(f"{stages_cfg} -> {stages} stages ({why_stages or f'at most {MAX_STAGES}'})")
    return Variant(index, key, tuple(sorted(wholes.items())), warps, tuple(tiles.items()),
                   tuple(extents.items()), chunk, stages, ma, head, stage, tuple(clamps))


def point_variant(p: KernelPlan, index: int, key, choice, limits: CudaLimits) -> Variant:
    """The variant of configuration `choice` of a kernel without contractions, within `limits`."""
    sizes = p.schedule.partition.group_sizes
    tiles = {a: int(choice.tiles.get(sizes[a].name, 1)) for d in p.groups for a in d.axes}
    warps_cfg = max(1, int(choice.num_warps))
    warps = min(warps_cfg, POINT_MAX_WARPS, limits.threads_per_block // WARP)
    clamps = (f"{warps_cfg} -> {warps} warps",) if warps != warps_cfg else ()
    return Variant(index, key, (), warps, tuple(tiles.items()), (), None, 1, clamps=clamps)


__all__ = ["Variant", "mma_variant", "point_variant", "MAX_ROWS", "MAX_COLS", "MAX_CHUNK", "MAX_STAGES",
           "SMEM_DEFAULT", "WHOLE_EXTENTS", "ELEM_BYTES", "CudaLimits"]
