"""Render kernel plans as CUDA C++ (`napkin kernel --backend cuda`) and write the Python loader.

The CUDA kernels realise the same plans as analyzer.codegen.triton, with the same structure: one block
of the grid owns one index of every grid axis and one tile of every grouped axis; per-axis sizes and
strides are arguments; the arrays without the streamed axis are loaded once (the head); the loop walks
the streamed axis a chunk at a time, interior chunks without masks and then the edge chunks, masked
(under a causal mask with block skipping, only up to the diagonal); masked slots get the neutral
element of what consumes them; the online softmax runs in base 2 with the running maximum guarded
(`m_use`) for rows that have seen nothing yet.

Two renderers, chosen by the plan:

- a kernel with contractions runs them on tensor cores. Every register tile is [rows, n], the block's
  rows (the m dimension of its contractions) split over the warps in m16 tiles: a warp owns one tile
  (16 rows) or two (32 rows, when its register tiles are narrow enough; halves the shared-memory
  traffic per mma). The mma is `mma.sync.m16n8k16` (fp16 and bf16, fp32 accumulate; sm_80+), two
  m16n8k8 on sm_75 (fp16 only; bf16 is refused by the launcher). Loaded tiles pass through shared
  memory (rows XOR-swizzled in 16-byte chunks, 16-byte `cp.async` into `stages` buffers on sm_80+,
  plain 16-byte loads and one buffer on sm_75; element loads when strides or alignment forbid 16
  bytes) and reach the tensor cores through `ldmatrix`. Accumulators, softmax statistics and every
  intermediate are fp32 registers.
- a kernel without contractions (a softmax over whole rows, elementwise ops) is a loop over its
  elements: the block's threads stride along the dimension it reduces, with block-wide reductions.

Register tiles have compile-time extents, so each configuration (and each compile-time extent of a
whole axis, e.g. the head dimension) is one instantiation of a kernel template; the launcher picks it
from the runtime sizes and the dtype code. A configuration that CUDA cannot run as given is clamped to
a legal one and the .cu header says how: at most 128 rows a block, at most 128 columns in a register
tile besides the rows, a chunk of 16 to 128, shared memory at most 99 KB (the launcher opts in above
48 KB).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from itertools import product as cartesian
from typing import ClassVar

from analyzer.codegen.escape import cpp_comment, cpp_str, py_comment, py_doc, py_str
from analyzer.codegen.module import (
    MODULE_GLOBALS,
    checked_python,
    header,
    module_ids,
    wrapper,
)
from analyzer.codegen.names import CPP_RESERVED, PlanIds, Scope
from analyzer.codegen.triton import pointers, runtime_axes, scaled_ops
from analyzer.common.errors import NapkinError
from analyzer.config.plan import (
    GROUP,
    STREAM,
    WHOLE,
    Dim,
    KernelPlan,
    band_rows,
    next_pow2,
)
from analyzer.diagram.compiled import Op
from analyzer.diagram.interface import Attention

ELEMENTWISE = {"exp": "napkin::exp_", "sigmoid": "napkin::sigmoid", "relu": "napkin::relu",
               "gelu": "napkin::gelu", "reciprocal": "napkin::rcp", "rsqrt": "napkin::rsqrt_"}
BINARY = {"add": "+", "sub": "-", "mul": "*", "div": "/"}
RENDERED = {"dot", "softmax_dot", "softmax", "scale", "shift", "causal_mask", "sum", "max", *ELEMENTWISE,
            *BINARY}

MAX_ROWS = 128                # rows of a block (a warp owns 16 or 32 of them)
MA2_COLS = 192                # a warp owns two m16 tiles (32 rows) when its register tiles have at
                              # most this many columns together (accumulators plus the chunk)
MAX_COLS = 128                # columns of a register tile besides the rows (a grouped axis)
MAX_CHUNK = 128               # the streamed chunk
REG_COLS = 320                # an accumulator's columns plus the chunk's, at most (registers)
MAX_STAGES = 4
SMEM_LIMIT = 99 * 1024        # dynamic shared memory a block may use (sm_86's opt-in limit)
SMEM_DEFAULT = 48 * 1024      # above this the launcher opts in with cudaFuncSetAttribute
WHOLE_EXTENTS = (64, 128, 256)  # compile-time extents of a whole axis that has no configurations
ELEM_BYTES = 2                # fp16 and bf16
POINT_MAX_WARPS = 32
LOG2E = "1.4426950408889634f"
NEG_INF = "(-INFINITY)"

ERRORS = {   # launcher return codes besides cudaError_t (negative)
    -1: "bf16 kernels need tensor cores of compute capability 8.0 or newer (sm_80+); on this GPU "
        "only fp16 runs",
    -2: "the kernel needs more shared memory a block than this GPU allows",
    -3: "no compiled variant of the kernel for these sizes (a whole axis is larger than the "
        "kernel's extents)",
    -4: "dtype code must be 0 (fp16) or 1 (bf16)",
    -5: "too many blocks for one launch, or an axis longer than 2**31 - 1",
}


def check_renderable(p: KernelPlan) -> None:
    for op in p.schedule.ops:
        if op.primitive.name not in RENDERED:
            raise NapkinError(f"primitive {op.primitive.name!r} (op {op.name!r}) has no CUDA renderer",
                              file=p.diagram.source, field=op.path,
                              hint=f"the CUDA backend renders: {', '.join(sorted(RENDERED))}")
    for d in p.dims:
        if d.kind == STREAM and any(d.name in p.tiles_of[s] for s in p.schedule.saves):
            raise NapkinError(f"kernel {p.name!r} saves an array along its streamed axis "
                              f"{d.axes[0]!r}; the CUDA backend saves only after the loop",
                              file=p.diagram.source)


def _float(value) -> str:
    """A constant as a C++ float literal (shift's offset: a finite number, analyzer.common.expr)."""
    return f"{float(value)!r}f"


def _prod(values) -> int:
    out = 1
    for v in values:
        out *= int(v)
    return out


def _contraction_dims(p: KernelPlan, op: Op) -> tuple[str, str, str]:
    """(m, n, k) dims of a contraction: m from its first input, n from its second."""
    k = p.dim_of[op.applied.over]
    a, b = (p.tiles_of[i] for i in op.inputs)
    m = next(d for d in a if d != k)
    n = next(d for d in b if d != k)
    return m, n, k


def _unrenderable(p: KernelPlan, what: str, op: Op | None = None) -> NapkinError:
    return NapkinError(f"kernel {p.name!r}: {what}; the CUDA backend cannot render it",
                       file=p.diagram.source, field=op.path if op is not None else None,
                       hint="generate the Triton backend (--backend triton) for this diagram")


# -- configurations --------------------------------------------------------------------------------

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
    for name in _loaded(p):
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


def _loaded(p: KernelPlan) -> tuple[str, ...]:
    s = p.schedule
    return tuple(dict.fromkeys((*s.loads, *s.resident)))


def _mma_variant(p: KernelPlan, row: Dim, index: int, key, choice, wholes: dict[str, int]) -> Variant:
    sizes = p.schedule.partition.group_sizes
    sym = {a: sizes[a].name for d in p.groups for a in d.axes}
    configured = {a: int(choice.tiles.get(sym[a], 1)) for a in sym}
    tiles = dict(configured)
    clamps: list[str] = []
    warps_cfg = max(1, int(choice.num_warps))
    max_rows = MAX_ROWS
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
            acc_dims.add(_contraction_dims(p, r.op)[1])
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
        if chunk is not None and acc_w + chunk > REG_COLS and chunk > 16:
            chunk //= 2
            why_chunk = "registers"
            continue
        head, stage = _smem_elems(p, extents)
        if (head + stages * stage) * ELEM_BYTES <= SMEM_LIMIT:
            break
        if stages > 2:
            stages -= 1
            why_stages = "shared memory"
        elif chunk is not None and chunk > 32:
            chunk //= 2
            why_chunk = "shared memory"
        elif stages > 1:
            stages = 1
            why_stages = "shared memory"
        elif chunk is not None and chunk > 16:
            chunk //= 2
            why_chunk = "shared memory"
        elif max_rows > 16:
            max_rows //= 2
            why_rows = "shared memory"
        else:
            raise NapkinError(f"kernel {p.name!r}: its tiles need {(head + stage) * ELEM_BYTES // 1024} KB "
                              f"of shared memory, more than the CUDA backend's {SMEM_LIMIT // 1024} KB",
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
    ma = 2 if rows >= 32 and acc_w + body_w <= MA2_COLS else 1
    warps = rows // (16 * ma)
    for a, symbol in sym.items():
        if tiles[a] != configured[a]:
            reason = (f"at most {MAX_ROWS} rows a block" if a in row.axes and not why_rows else
                      "shared memory" if a in row.axes else f"at most {MAX_COLS} columns in registers")
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


def _point_variant(p: KernelPlan, index: int, key, choice) -> Variant:
    sizes = p.schedule.partition.group_sizes
    tiles = {a: int(choice.tiles.get(sizes[a].name, 1)) for d in p.groups for a in d.axes}
    warps_cfg = max(1, int(choice.num_warps))
    warps = min(warps_cfg, POINT_MAX_WARPS)
    clamps = (f"{warps_cfg} -> {warps} warps",) if warps != warps_cfg else ()
    return Variant(index, key, (), warps, tuple(tiles.items()), (), None, 1, clamps=clamps)


# -- the C++ prelude ---------------------------------------------------------------------------------

PRELUDE = r"""
#include <cuda_runtime.h>
#include <cuda_fp16.h>
#include <cuda_bf16.h>
#include <stdint.h>
#include <math.h>

#if defined(__CUDA_ARCH__) && (__CUDA_ARCH__ < 800)
#define NAPKIN_ASYNC 0   // sm_75: plain 16-byte loads, one shared-memory buffer, m16n8k8 fp16 mma
#else
#define NAPKIN_ASYNC 1   // sm_80+: cp.async into `stages` buffers, m16n8k16 fp16 and bf16 mma
#endif

#define NAPKIN_ERR_BF16 (-1)
#define NAPKIN_ERR_SMEM (-2)
#define NAPKIN_ERR_SIZE (-3)
#define NAPKIN_ERR_DTYPE (-4)
#define NAPKIN_ERR_GRID (-5)

namespace napkin {

template <typename T> struct Num;
template <> struct Num<__half> {
  static __device__ __forceinline__ float to_f(__half x) { return __half2float(x); }
  static __device__ __forceinline__ __half of(float x) { return __float2half_rn(x); }
  static __device__ __forceinline__ uint32_t pack(float lo, float hi) {
    __half2 h = __floats2half2_rn(lo, hi);
    return *reinterpret_cast<uint32_t*>(&h);
  }
};
template <> struct Num<__nv_bfloat16> {
  static __device__ __forceinline__ float to_f(__nv_bfloat16 x) { return __bfloat162float(x); }
  static __device__ __forceinline__ __nv_bfloat16 of(float x) { return __float2bfloat16_rn(x); }
  static __device__ __forceinline__ uint32_t pack(float lo, float hi) {
    __nv_bfloat162 h = __floats2bfloat162_rn(lo, hi);
    return *reinterpret_cast<uint32_t*>(&h);
  }
};

// D += A B on the tensor cores: A 16x16 (row), B 16x8 (col), fp32 accumulators c[4].
template <typename T> __device__ __forceinline__ void mma(float (&c)[4], const uint32_t (&a)[4],
                                                          uint32_t b0, uint32_t b1);
template <> __device__ __forceinline__ void mma<__half>(float (&c)[4], const uint32_t (&a)[4],
                                                        uint32_t b0, uint32_t b1) {
#if NAPKIN_ASYNC
  asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
               "{%8,%9}, {%0,%1,%2,%3};\n"
               : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
               : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
#else
  asm volatile("mma.sync.aligned.m16n8k8.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5}, {%6}, "
               "{%0,%1,%2,%3};\n"
               : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3]) : "r"(a[0]), "r"(a[1]), "r"(b0));
  asm volatile("mma.sync.aligned.m16n8k8.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5}, {%6}, "
               "{%0,%1,%2,%3};\n"
               : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3]) : "r"(a[2]), "r"(a[3]), "r"(b1));
#endif
}
template <> __device__ __forceinline__ void mma<__nv_bfloat16>(float (&c)[4], const uint32_t (&a)[4],
                                                               uint32_t b0, uint32_t b1) {
#if NAPKIN_ASYNC
  asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
               "{%8,%9}, {%0,%1,%2,%3};\n"
               : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
               : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
#else
  __trap();  // bf16 tensor cores need sm_80; the launcher refuses bf16 below it
#endif
}

// Four 8x8 matrices of 16-bit elements from shared memory into mma fragments (.trans: transposed).
__device__ __forceinline__ uint32_t smem_u32(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}
__device__ __forceinline__ void ldsm4(uint32_t (&r)[4], uint32_t s) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(s));
}
__device__ __forceinline__ void ldsm4t(uint32_t (&r)[4], uint32_t s) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(s));
}

// GMEM -> SMEM, 16 bytes: cp.async (sm_80+) or a plain vector load (sm_75).
__device__ __forceinline__ void cp16(void* dst, const void* src) {
#if NAPKIN_ASYNC
  const unsigned s = static_cast<unsigned>(__cvta_generic_to_shared(dst));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" :: "r"(s), "l"(src) : "memory");
#else
  *reinterpret_cast<uint4*>(dst) = *reinterpret_cast<const uint4*>(src);
#endif
}
__device__ __forceinline__ void commit() {
#if NAPKIN_ASYNC
  asm volatile("cp.async.commit_group;\n" ::: "memory");
#endif
}
template <int N> __device__ __forceinline__ void wait() {
#if NAPKIN_ASYNC
  asm volatile("cp.async.wait_group %0;\n" :: "n"(N) : "memory");
#endif
}

// Eight consecutive elements of which the first `nv` are inside the array; the rest are zero.
template <typename T> __device__ __forceinline__ void copy8(T* dst, const T* src, int nv) {
  if (nv >= 8) {
    cp16(dst, src);
  } else {
#pragma unroll
    for (int e = 0; e < 8; ++e) dst[e] = e < nv ? src[e] : Num<T>::of(0.f);
  }
}

// Shared-memory tiles are [rows][W] with the 16-byte chunks of each row XOR-swizzled, so that
// ldmatrix and the 16-byte stores of eight consecutive rows hit distinct banks.
template <int W> __device__ __forceinline__ int swz(int r, int c) {
  constexpr int CH = W / 8;
  if constexpr (CH >= 8) {
    return r * W + ((((c >> 3) ^ (r & 7))) << 3) + (c & 7);
  } else if constexpr (CH <= 1) {
    return r * W + c;
  } else {
    constexpr int RPL = 8 / CH;
    return r * W + ((((c >> 3) ^ ((r / RPL) & (CH - 1)))) << 3) + (c & 7);
  }
}

// The chunk bits the swizzle XORs: chunk c of a row is at c ^ x with x <= swz_m<W>().
template <int W> constexpr __host__ __device__ int swz_m() {
  return W / 8 >= 8 ? 7 : (W / 8 > 1 ? W / 8 - 1 : 0);
}

__device__ __forceinline__ float ex2(float x) {  // 2^x; ex2(-inf) = 0
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
  return y;
}
__device__ __forceinline__ float quad_max(float v) {
  v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, 1));
  return fmaxf(v, __shfl_xor_sync(0xffffffffu, v, 2));
}
__device__ __forceinline__ float quad_sum(float v) {
  v += __shfl_xor_sync(0xffffffffu, v, 1);
  return v + __shfl_xor_sync(0xffffffffu, v, 2);
}
template <int NW, bool MAX> __device__ __forceinline__ float block_reduce(float v, float* red) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) {
    const float w = __shfl_xor_sync(0xffffffffu, v, o);
    v = MAX ? fmaxf(v, w) : v + w;
  }
  __syncthreads();
  if ((threadIdx.x & 31) == 0) red[threadIdx.x >> 5] = v;
  __syncthreads();
  v = red[0];
#pragma unroll
  for (int w = 1; w < NW; ++w) v = MAX ? fmaxf(v, red[w]) : v + red[w];
  return v;
}

__device__ __forceinline__ float exp_(float x) { return __expf(x); }
__device__ __forceinline__ float sigmoid(float x) { return __frcp_rn(1.f + __expf(-x)); }
__device__ __forceinline__ float relu(float x) { return fmaxf(x, 0.f); }
__device__ __forceinline__ float rcp(float x) { return __frcp_rn(x); }
__device__ __forceinline__ float rsqrt_(float x) { return rsqrtf(x); }
// GELU, tanh form: 0.5 x (1 + tanh u) = x sigmoid(2u), u = sqrt(2/pi) (x + 0.044715 x^3)
__device__ __forceinline__ float gelu(float x) {
  return x * sigmoid(1.5957691216057308f * (x + 0.044715f * x * x * x));
}

inline bool aligned(const void* p, int bytes) { return (reinterpret_cast<uintptr_t>(p) % bytes) == 0; }
inline int64_t cdiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

inline int device_major() {
  int dev = 0, major = 0;
  cudaGetDevice(&dev);
  cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev);
  return major;
}
inline int smem_optin() {
  int dev = 0, bytes = 0;
  cudaGetDevice(&dev);
  cudaDeviceGetAttribute(&bytes, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev);
  return bytes;
}

}  // namespace napkin

extern "C" int napkin_set_device(int device) { return (int)cudaSetDevice(device); }
"""


# -- identifiers -------------------------------------------------------------------------------------
#
# The C++ names its variables after the diagram (`Q_ptr`, `size_q`, `TILE_Q`, `acc_O`), and a diagram may
# name things `int`, `t` (`size_t`), `q` beside `Q` (`TILE_Q` twice) or `x__y` (reserved in C++); an op
# `new` would make the running maximum `m_new` of the online softmax's own `m_new`. So, as in the Triton
# backend (analyzer.codegen.names), every identifier made from a diagram's names is claimed from a
# C++ scope: the file's for the functions, one per kernel beneath it for parameters, locals and the
# configuration's members. Neither may take a name the generator writes itself: the file's scope reserves
# the C++ and CUDA names, and every identifier of the prelude and of the code after it; a kernel's scope
# every identifier its own code writes, read off a rendering of the kernel with placeholders (_fixed).

_COMMENT = re.compile(r"//[^\n]*")
_STRING = re.compile(r'"(?:[^"\\\n]|\\.)*"')
_WORD = re.compile(r"(?<![\w.])[A-Za-z_]\w*")     # an identifier (not a number's suffix: 1.f, 0xffu)


def identifiers(code: str) -> set[str]:
    """The identifiers of C++ `code`, comments and string literals left out."""
    return set(_WORD.findall(_STRING.sub('""', _COMMENT.sub("", code))))


def _file_code() -> list[str]:
    """What the .cu defines after the prelude besides the kernels: helpers and the error strings."""
    out = ["static inline __host__ __device__ int64_t napkin_min64(int64_t a, int64_t b) "
           "{ return a < b ? a : b; }",
           "static constexpr __host__ __device__ int napkin_round8(int n) { return (n + 7) / 8 * 8; }",
           "",
           'extern "C" const char* napkin_error_string(int code)',
           "{",
           "  switch (code) {"]
    out += [f"    case {code}: return {cpp_str(text)};" for code, text in ERRORS.items()]
    out += ["    default: return cudaGetErrorString((cudaError_t)code);", "  }", "}"]
    return out


# The file scope's reserved names: C++ and CUDA's, and those the prelude and the code after it define or use
FILE_RESERVED = CPP_RESERVED | identifiers(PRELUDE) | identifiers("\n".join(_file_code()))


@dataclass(frozen=True)
class Functions:
    """The file-level names of one kernel: its extern "C" entry (the loader calls it by this name), its
    __global__ template, and for the tensor-core kernels the configuration structs and the launcher."""

    entry: str
    kernel: str
    cfg: str = ""
    launch: str = ""


def size_axes(p: KernelPlan) -> tuple[str, ...]:
    """Every axis a kernel takes the size of: the runtime ones as Triton, then the whole ones."""
    return tuple(dict.fromkeys((*runtime_axes(p), *(a for d in p.wholes for a in d.axes))))


class CudaIds(PlanIds):
    """The identifiers of one kernel's C++ (configuration structs, __global__ template, launcher, extern
    "C" entry), by what they name. One scope serves the four: the launchers pass the parameters on by
    name and the kernel reads the structs' members by name. The parameters are claimed first, in order."""

    def __init__(self, p: KernelPlan, scope: Scope) -> None:
        super().__init__(scope)
        self.p = p
        for a in pointers(p):
            self.ptr(a)
        for a in size_axes(p):
            self.size(a)
        for a in pointers(p):
            for x in p.axes_of(a):
                self.stride(a, x)
        for o in scaled_ops(p):
            self.scale(o.name)

    def ext(self, dim: str) -> str:
        """A dimension's extent in the register and shared-memory tiles (compile time)."""
        return self.scope("EXT_{}", dim, case="upper")

    def block(self, dim: str) -> str:
        """The streamed chunk's name in the header (the CONFIGS entry's BLOCK_<dim>)."""
        return self.scope("BLOCK_{}", dim, case="upper")

    def row_sum(self, op: str, suffix: str = "") -> str:
        """A softmax's row sums, `sm_<op>`: claimed apart from the shared-memory tile `sm_<array>`."""
        return self.scope.claim(("row sum", op, suffix), f"sm_{op}{suffix}")


class _Placeholders(Scope):
    """A scope that answers each claim with a placeholder that no generated code writes."""

    def claim(self, key, preferred: str) -> str:
        if key not in self._given:
            self._given[key] = f"NAPKIN_PLACEHOLDER_{len(self._given)}"
        return self._given[key]

    def placeholders(self) -> set[str]:
        return set(self._given.values())


def _fixed(g, k, cls) -> set[str]:
    """The identifiers kernel `k`'s C++ writes itself (`tid`, `m_new`, `sm_head`, the prelude's names it
    calls): its rendering with a placeholder for every claimed identifier, less the placeholders."""
    probe = _Placeholders()
    fns = Functions(*(probe.claim(role, role) for role in ("entry", "kernel", "cfg", "launch")))
    text = cls(g, k, fns, CudaIds(k.plan, probe)).render()
    return identifiers(text) - probe.placeholders()


# -- values in registers and shared memory --------------------------------------------------------

@dataclass(frozen=True)
class CVal:
    """A tile in the generated code. kind: 'acc' ([rows, n] fp32 mma fragments: float v[MA][n/8][4],
    a warp's MA tiles of 16 rows, each n/8 fragments of 16 x 8),
    'row' ([rows]: float v[MA][2]), 'scalar' (float), 'smem' (a loaded tile in shared
    memory, dims in the array's order, storage type; `su`: its address in the shared window)."""

    kind: str
    name: str
    dims: tuple[str, ...]
    su: str = ""


class _Code:
    def __init__(self) -> None:
        self.lines: list[str] = []
        self.depth = 1

    def line(self, text: str = "") -> None:
        self.lines.append(("  " * self.depth + text) if text else "")

    def open(self, text: str) -> None:
        self.line(f"{text} {{" if text else "{")
        self.depth += 1

    def close(self, text: str = "}") -> None:
        self.depth -= 1
        self.line(text)

    def comment(self, text: str) -> None:
        """A comment line; `text` may hold a diagram's names."""
        self.line("// " + cpp_comment(text))


ROW_E = "(fr + (mi << 4) + ((e >> 1) << 3))"   # the block-local row of accumulator element [mi][j][e]
COL_E = "(j * 8 + fc + (e & 1))"       # its column
ROW_H = "(fr + (mi << 4) + (h << 3))"          # the row of row-vector element [mi][h]


class _Common:
    """What both renderers share: names, sizes, block indices, offsets of each axis."""

    def __init__(self, g, k, fns: Functions, ids: CudaIds) -> None:
        self.g = g
        self.k = k
        self.p: KernelPlan = k.plan
        self.s = self.p.schedule
        self.fns = fns
        self.n = ids
        self.c = _Code()
        self.stream = self.p.stream

    @property
    def fn(self) -> str:
        """The extern "C" entry: the loader calls it by this name."""
        return self.fns.entry

    @property
    def axes(self) -> tuple[str, ...]:
        """Every axis the kernel takes the size of: runtime ones as Triton, then the whole ones."""
        return size_axes(self.p)

    def c_params(self, ptr_type: str) -> list[str]:
        p, s, n = self.p, self.s, self.n
        out = []
        for a in pointers(p):
            const = "const " if a not in s.saves else ""
            out.append(f"{const}{ptr_type} __restrict__ {n.ptr(a)}")
        out += [f"const int64_t {n.size(a)}" for a in self.axes]
        out += [f"const int64_t {n.stride(a, x)}" for a in pointers(p) for x in p.axes_of(a)]
        out += [f"const float {n.scale(o.name)}" for o in scaled_ops(p)]
        return out

    def arg_names(self) -> list[str]:
        p, n = self.p, self.n
        return ([n.ptr(a) for a in pointers(p)] + [n.size(a) for a in self.axes]
                + [n.stride(a, x) for a in pointers(p) for x in p.axes_of(a)]
                + [n.scale(o.name) for o in scaled_ops(p)])

    def group_axes(self) -> list[str]:
        return [a for d in self.p.groups for a in d.axes]

    def blocks(self, reverse_axis: str | None = None, band: str | None = None) -> None:
        """blockIdx.x -> one tile of every grouped axis (fastest) and one index of every grid axis.
        A banded plan walks its two grouped axes in bands of `band` row tiles (plan.band_rows)."""
        c, p, n = self.c, self.p, self.n
        if p.banded:
            r, col = p.banded
            assert band is not None and reverse_axis is None, "a banded order needs its band"
            nblk_r, nblk_c = n("nblk_{}", r), n("nblk_{}", col)
            c.line("// which block: bands of row tiles, walked down the rows first, so that one wave of "
                   "blocks covers")
            c.line("// a square of the output and shares its inputs' tiles in L2 (the cache level's "
                   "optimal tile is square: Theorem 2)")
            c.line(f"const int64_t {nblk_r} = ({n.size(r)} + {n.tile(r)} - 1) / {n.tile(r)};")
            c.line(f"const int64_t {nblk_c} = ({n.size(col)} + {n.tile(col)} - 1) / {n.tile(col)};")
            c.line(f"const int64_t pid = (int64_t)blockIdx.x % ({nblk_r} * {nblk_c});")
            c.line(f"int64_t rest = (int64_t)blockIdx.x / ({nblk_r} * {nblk_c});")
            c.line(f"const int64_t band = (int64_t)({band}) * {nblk_c};")
            c.line(f"const int64_t first = (pid / band) * ({band});")
            c.line(f"const int64_t rows = napkin_min64({nblk_r} - first, (int64_t)({band}));")
            c.line(f"const int64_t {n('blk_{}', r)} = first + (pid % band) % rows;")
            c.line(f"const int64_t {n('blk_{}', col)} = (pid % band) / rows;")
        else:
            c.line("// which block: one tile of each grouped axis, one index of each grid axis")
            c.line("int64_t rest = blockIdx.x;")
        for a in reversed(self.group_axes() if not p.banded else ()):
            nblk, blk = n("nblk_{}", a), n("blk_{}", a)
            c.line(f"const int64_t {nblk} = ({n.size(a)} + {n.tile(a)} - 1) / {n.tile(a)};")
            if a == reverse_axis:
                c.line(f"const int64_t {blk} = {nblk} - 1 - rest % {nblk};  "
                       "// the longest rows of a causal mask first")
            else:
                c.line(f"const int64_t {blk} = rest % {nblk};")
            c.line(f"rest /= {nblk};")
        for a in reversed(p.grid):
            c.line(f"const int64_t {n('idx_{}', a)} = rest % {n.size(a)};")
            c.line(f"rest /= {n.size(a)};")
        c.line("(void)rest;")
        for a in pointers(p):
            terms = [f"{n('idx_{}', x)} * {n.stride(a, x)}" for x in p.axes_of(a) if x in p.grid]
            const = "const " if a not in self.s.saves else ""
            c.line(f"{const}T* const {self.gmem(a)} = {n.ptr(a)}{''.join(' + ' + t for t in terms)};")

    def gmem(self, array: str) -> str:
        """The block's origin in `array` (its grid indices applied)."""
        return self.n("g_{}", array)

    def lim(self, dim: str) -> str:
        """How many block-local indices of single-axis dim `dim` are inside the array."""
        return self.n("lim_{}", dim)

    def tile_of(self, dim: Dim) -> str:
        return " * ".join(self.n.tile(a) for a in dim.axes)

    def offs(self, axis: str, local: str) -> str:
        """The index along `axis` of block-local index `local` of its dim."""
        n = self.n
        d = self.p.dim(self.p.dim_of[axis])
        if d.kind == WHOLE:
            return f"((int64_t)({local}))"
        if d.kind == STREAM:
            return f"((int64_t)(start + ({local})))"
        if len(d.axes) == 1:
            return f"({n('blk_{}', axis)} * {n.tile(axis)} + ({local}))"
        inner = d.axes[d.axes.index(axis) + 1:]
        below = " * ".join(n.tile(x) for x in inner) or "1"
        return f"({n('blk_{}', axis)} * {n.tile(axis)} + (({local}) / ({below})) % {n.tile(axis)})"

    def valid(self, dim: Dim, local: str) -> str:
        if len(dim.axes) == 1:
            return f"(({local}) < {self.lim(dim.name)})"
        parts = [f"(({local}) < {self.tile_of(dim)})"]
        parts += [f"({self.offs(a, local)} < {self.n.size(a)})" for a in dim.axes]
        return "(" + " && ".join(parts) + ")"

    def limits(self, kinds: tuple[str, ...]) -> None:
        """lim_<dim>: how many block-local indices of each single-axis dim are inside the array."""
        n = self.n
        for d in self.p.dims:
            if len(d.axes) != 1 or d.kind not in kinds:
                continue
            a = d.axes[0]
            if d.kind == GROUP:
                self.c.line(f"const int {self.lim(d.name)} = (int)napkin_min64((int64_t){n.tile(a)}, "
                            f"{n.size(a)} - {n('blk_{}', a)} * {n.tile(a)});")
            elif d.kind == WHOLE:
                self.c.line(f"const int {self.lim(d.name)} = (int){n.size(a)};")

    def address(self, array: str, locals_: dict[str, str], unit_axis: str | None = None) -> str:
        """Offset of the element at block-local indices `locals_` (dim -> index) of `array`."""
        p = self.p
        terms = []
        for axis in p.axes_of(array):
            if axis in p.grid:
                continue
            offs = self.offs(axis, locals_[p.dim_of[axis]])
            terms.append(offs if axis == unit_axis else f"{offs} * {self.n.stride(array, axis)}")
        return " + ".join(terms) or "0"


# -- tensor-core kernels ---------------------------------------------------------------------------

class _Mma(_Common):
    def __init__(self, g, k, fns: Functions, ids: CudaIds) -> None:
        super().__init__(g, k, fns, ids)
        p = self.p
        self.row = self._row_dim()
        self.reducer_of = {r.op.name: r for r in self.s.reducers}
        self.paired = {r.softmax.name: r for r in self.s.reducers if r.softmax is not None}
        self.vals: dict[str, CVal] = {}
        self.loaded = _loaded(p)
        self.variants = self._variants()
        self.tmp = 0
        self._check()

    # -- structure -------------------------------------------------------------------------------
    def _row_dim(self) -> Dim:
        p = self.p
        rows = {_contraction_dims(p, o)[0] for o in p.schedule.ops if o.primitive.contraction}
        if len(rows) != 1:
            raise _unrenderable(p, "its contractions produce tiles with different rows "
                                f"({', '.join(sorted(rows))})")
        (row,) = rows
        d = p.dim(row)
        if d.kind != GROUP:
            raise _unrenderable(p, f"the rows of its contractions ({row}) are not a grouped axis")
        return d

    def _check(self) -> None:
        p, R = self.p, self.row.name
        for op in self.s.ops:
            if op.name in self.paired:
                continue
            dims = self._out_dims(op)
            if dims and R not in dims:
                raise _unrenderable(p, f"op {op.name!r} computes a tile [{', '.join(dims)}] without the "
                                    f"block's rows {R!r} (a warp owns 16 rows of every register tile)", op)
            if len(dims) == 2 and op.primitive.name in ("sum", "max", "softmax") and \
                    p.dim_of[op.applied.over] == R:
                raise _unrenderable(p, f"op {op.name!r} reduces over the block's rows {R!r}", op)
            if op.primitive.contraction:
                second = op.inputs[1]
                r = self.reducer_of.get(op.name)
                if r is not None and r.softmax is not None:
                    second = r.softmax.inputs[0] if second == r.softmax.name else second
                if second not in self.loaded or len(p.tiles_of[second]) != 2:
                    raise _unrenderable(p, f"the second operand {second!r} of {op.name!r} is computed in "
                                        "the kernel; it must be a tile loaded from memory", op)
        for name in self.s.saves:
            if name in self.loaded:
                raise _unrenderable(p, f"it saves its input {name!r} unchanged")

    def _out_dims(self, op: Op) -> tuple[str, ...]:
        if op.primitive.contraction:
            m, n, _ = _contraction_dims(self.p, op)
            return (m, n)
        return self.p.tiles_of[op.name]

    def _variants(self) -> list[Variant]:
        p, k = self.p, self.k
        key_dim = p.dim_of.get(k.key_axis) if k.key_axis else None
        others = [d.name for d in p.wholes if d.name != key_dim]
        out = []
        for key, choice in k.choices.items():
            for combo in cartesian(*(WHOLE_EXTENTS for _ in others)):
                wholes = dict(zip(others, combo))
                if key_dim is not None:
                    wholes[key_dim] = max(16, next_pow2(key))
                out.append(_mma_variant(p, self.row, len(out), key, choice, wholes))
        return out

    # -- names -----------------------------------------------------------------------------------
    def ext(self, dim: str) -> str:
        return self.n.ext(dim)

    def val(self, name: str, suffix: str = "") -> str:
        """The register tile of array or op `name` (`v_<name>`; a step of it: `v_<name>_p`)."""
        return self.n("v_{}" + suffix, name)

    def smem(self, array: str) -> CVal:
        """`array`'s tile in shared memory (`sm_<array>`) and its address in the shared window."""
        return CVal("smem", self.n("sm_{}", array), self.p.tiles_of[array], self.n("su_{}", array))

    def fresh(self) -> str:
        """A register copy of a loaded tile: `v_ld_<n>`, the n-th of the kernel."""
        self.tmp += 1
        return self.n("v_ld_{}", str(self.tmp))

    def canon(self, dims: tuple[str, ...]) -> tuple[str, ...]:
        R = self.row.name
        if len(dims) == 2 and dims[1] == R:
            return (R, dims[0])
        return dims

    # -- the source ------------------------------------------------------------------------------
    def render(self) -> str:
        out = [self._cfg()]
        out.append(self._kernel())
        out.append(self._launcher())
        return "\n".join(out)

    def _cfg(self) -> str:
        cfg = self.fns.cfg
        lines = [f"template <int V> struct {cfg};"]
        for v in self.variants:
            at = f"{self.k.key_axis}={v.key}" if v.key is not None else "one configuration for all sizes"
            wh = ", ".join(f"{d} extent {e}" for d, e in v.wholes)
            what = cpp_comment(at + ("; " + wh if wh else ""))
            lines.append(f"template <> struct {cfg}<{v.index}> {{  // {what}")
            lines.append(f"  static constexpr int WARPS = {v.warps}, MA = {v.ma}, STAGES = {v.stages};")
            for a, t in v.tiles:
                lines.append(f"  static constexpr int {self.n.tile(a)} = {t};")
            if self.p.banded:
                tiles = dict(v.tiles)
                r, col = self.p.banded
                lines.append(f"  static constexpr int BAND = {band_rows(tiles[r], tiles[col], self.g.sm_count)};"
                             f"  // row tiles per band: one wave of {self.g.sm_count} blocks covers a square")
            for d, e in v.extents:
                lines.append(f"  static constexpr int {self.ext(d)} = {e};")
            lines.append(f"  static constexpr int HEAD_ELEMS = {v.head_elems}, STAGE_ELEMS = {v.stage_elems};")
            lines.append("};")
        return "\n".join(lines) + "\n"

    def _kernel(self) -> str:
        p, s, c, f = self.p, self.s, self.c, self.fns
        head = ["template <typename T, int V>",
                f"__global__ void __launch_bounds__({f.cfg}<V>::WARPS * 32, 1)",
                f"{f.kernel}(" + ",\n    ".join([*self.c_params("T*"), "const int vec"]) + ")", "{"]
        c.line(f"using C = {f.cfg}<V>;")
        c.line("constexpr int NT = C::WARPS * 32;")
        c.line("constexpr int NBUF = NAPKIN_ASYNC ? C::STAGES : 1;")
        c.line("constexpr int MA = C::MA;  // m16 tiles a warp: its rows are 16 * MA")
        for a in self.group_axes():
            c.line(f"constexpr int {self.n.tile(a)} = C::{self.n.tile(a)};")
        for d in p.dims:
            c.line(f"constexpr int {self.ext(d.name)} = C::{self.ext(d.name)};")
        c.line("(void)NBUF;")
        c.line("extern __shared__ __align__(128) unsigned char napkin_smem[];")
        c.line("T* const sm_head = reinterpret_cast<T*>(napkin_smem);")
        c.line("T* const sm_stage = sm_head + C::HEAD_ELEMS;")
        c.line("(void)sm_stage;")
        c.line("const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;")
        c.line("// this thread's place in the mma fragments: rows fr + 16 mi and fr + 16 mi + 8, "
               "columns fc and fc + 1")
        c.line("const int fr = warp * 16 * MA + (lane >> 2), fc = (lane & 3) * 2;")
        c.line("// and in the ldmatrix addresses")
        c.line("const int l16 = lane & 15, l8 = lane & 7, h8 = (lane >> 4) << 3, q8 = ((lane >> 3) & 1) << 3;")
        c.line("(void)fr; (void)fc; (void)l16; (void)l8; (void)h8; (void)q8; (void)tid;")
        self.tables: dict[str, tuple[str, str]] = {}
        table_at = len(c.lines)
        skip = s.skip
        self.blocks(reverse_axis=skip.query if skip is not None and skip.query in self.group_axes()
                    else None, band="C::BAND")
        c.line("// tile extents inside the arrays, per dimension")
        self.limits((GROUP, WHOLE))
        # shared memory: the head's tiles, then NBUF buffers of the streamed tiles
        stream = self.stream
        self.stage_off: dict[str, str] = {}
        head_terms: list[str] = []
        for name in self.loaded:
            dims = p.tiles_of[name]
            if not dims:
                continue
            n = " * ".join(self.ext(d) for d in dims)
            if stream is not None and stream.name in dims:
                self.stage_off[name] = n
            else:
                sm = self.smem(name)
                what = cpp_comment(f"{name} [{', '.join(dims)}]")
                c.line(f"T* const {sm.name} = sm_head + {' + '.join(head_terms) or '0'};  // {what}")
                c.line(f"const uint32_t {sm.su} = napkin::smem_u32({sm.name});")
                c.line(f"(void){sm.su};")
                head_terms.append(f"napkin_round8({n})")
        c.line("// GMEM -> SMEM: the tiles loaded once per block (head)")
        for name in self.loaded:
            dims = p.tiles_of[name]
            if stream is not None and stream.name in dims:
                continue
            if not dims:
                c.line(f"const float {self.val(name)} = napkin::Num<T>::to_f({self.gmem(name)}[0]);")
                self.vals[name] = CVal("scalar", self.val(name), ())
                continue
            self.load(name, self.smem(name).name)
            self.vals[name] = self.smem(name)
        c.line("napkin::commit();")
        if stream is None:
            c.line("napkin::wait<0>();")
            c.line("__syncthreads();")
            self.emit_ops(list(s.head), masked=True)
            self.emit_ops([o for o in s.body if o not in s.head], masked=True)
        else:
            self.loop()
        self.emit_ops(list(s.tail), masked=True)
        self.saves()
        c.lines[table_at:table_at] = self.table_lines()
        return "\n".join([*head, *c.lines, "}", ""])

    # -- loads -------------------------------------------------------------------------------------
    def load(self, name: str, dst: str) -> None:
        """GMEM -> SMEM of `name`'s tile (the current chunk when it is streamed), zero outside."""
        p, c = self.p, self.c
        dims = p.tiles_of[name]
        bit = self.loaded.index(name)
        g_name = self.gmem(name)
        what = cpp_comment(f"{name} [{', '.join(dims)}] -> {dst}")
        c.line(f"{{  // {what}")
        c.depth += 1
        if len(dims) == 1:
            (i,) = dims
            d = p.dim(i)
            c.open(f"for (int i = tid; i < {self.ext(i)}; i += NT)")
            addr = self.address(name, {i: "i"})
            c.line(f"{dst}[i] = {self.valid(d, 'i')} ? {g_name}[{addr}] : napkin::Num<T>::of(0.f);")
            c.close()
        else:
            o, i = dims
            do, di = p.dim(o), p.dim(i)
            W = self.ext(i)
            vec_ok = len(di.axes) == 1
            if vec_ok:
                inner = di.axes[0]
                n = f"{self.ext(o)} * ({W} / 8)"
                c.open(f"if (vec & {1 << bit})")
                c.line("#pragma unroll 1  // addresses computed as it goes: registers for the tiles")
                c.open(f"for (int it = 0; it < ({n} + NT - 1) / NT; ++it)")
                c.line("const int cc = tid + it * NT;")
                c.open(f"if (({n}) % NT == 0 || cc < {n})")
                c.line(f"const int o = cc / ({W} / 8), i = (cc % ({W} / 8)) * 8;")
                c.line(f"const int nv = {self.valid(do, 'o')} ? {self.lim(di.name)} - i : 0;")
                addr = self.address(name, {o: "o", i: "i"}, unit_axis=inner)
                c.line(f"napkin::copy8({dst} + napkin::swz<{W}>(o, i), {g_name} + ({addr}), nv);")
                c.close()
                c.close()
                c.close("} else {")
                c.depth += 1
            c.open(f"for (int cc = tid; cc < {self.ext(o)} * {W}; cc += NT)")
            c.line(f"const int o = cc / {W}, i = cc % {W};")
            addr = self.address(name, {o: "o", i: "i"})
            c.line(f"{dst}[napkin::swz<{W}>(o, i)] = ({self.valid(do, 'o')} && {self.valid(di, 'i')}) "
                   f"? {g_name}[{addr}] : napkin::Num<T>::of(0.f);")
            c.close()
            if vec_ok:
                c.close()
        c.depth -= 1
        c.line("}")

    # -- the streamed loop ---------------------------------------------------------------------------
    def loop(self) -> None:
        s, c, st, n = self.s, self.c, self.stream, self.n
        axis = st.axes[0]
        B = self.ext(st.name)
        lim = self.lim(st.name)
        skip = s.skip
        if skip is not None:
            q = skip.query
            blk, tile = n("blk_{}", q), n.tile(q)
            c.comment(f"causal block skipping: this block's {q} rows see {axis} up to their last row")
            c.line(f"const int hi = (int)napkin_min64({n.size(axis)}, ({blk} + 1) * {tile});")
            c.line(f"const int mid = (int)napkin_min64(({n.size(axis)} / {B}) * {B}, "
                   f"(({blk} * {tile} + 1) / {B}) * {B});")
        else:
            c.line(f"const int hi = (int){n.size(axis)};  // the launcher checks sizes < 2**31")
            c.line(f"const int mid = (hi / {B}) * {B};")
        c.line(f"const int n_chunks = (hi + {B} - 1) / {B};")
        stage_terms = []
        offsets = {}
        for name, elems in self.stage_off.items():
            offsets[name] = " + ".join(stage_terms) or "0"
            stage_terms.append(f"napkin_round8({elems})")
        c.comment(f"GMEM -> SMEM: one chunk of {axis} into buffer `buf` (cp.async on sm_80+)")
        c.open("auto load_chunk = [&](int start, int buf)")
        c.line(f"const int {lim} = hi - start;")
        c.line("(void)start;")
        for name in self.stage_off:
            sm = self.smem(name).name
            c.line(f"T* const {sm} = sm_stage + buf * C::STAGE_ELEMS + {offsets[name]};")
            self.load(name, sm)
        c.close("};")
        c.line("// prologue: the first NBUF - 1 chunks in flight")
        c.open("for (int b = 0; b < NBUF - 1; ++b)")
        c.line(f"if (b < n_chunks) load_chunk(b * {B}, b);")
        c.line("napkin::commit();")
        c.close()
        c.line("napkin::wait<NBUF - 1>();  // the head's tiles")
        c.line("__syncthreads();")
        self.emit_ops(list(s.head), masked=True)
        head_vals = dict(self.vals)
        c.line("// accumulators in registers, as for a stream of size 0 (Section 5.1)")
        for r in s.reducers:
            self.init(r)
        c.comment(f"stream {axis} in chunks of {B}: interior chunks without masks, then the edge chunks")
        c.open("for (int ci = 0; ci < n_chunks; ++ci)")
        c.line(f"const int start = ci * {B};")
        c.line("__syncthreads();  // every warp is done with the buffer the next load overwrites")
        c.open("")
        c.line("const int nc = ci + NBUF - 1;")
        c.line(f"if (nc < n_chunks) load_chunk(nc * {B}, nc % NBUF);")
        c.line("napkin::commit();")
        c.close()
        c.line("napkin::wait<NBUF - 1>();")
        c.line("__syncthreads();")
        c.line("const int buf = ci % NBUF;")
        c.line(f"const int {lim} = hi - start;")
        c.line(f"(void)buf; (void){lim};")
        for name in self.stage_off:
            sm = self.smem(name)
            c.line(f"const T* const {sm.name} = sm_stage + buf * C::STAGE_ELEMS + {offsets[name]};")
            c.line(f"const uint32_t {sm.su} = napkin::smem_u32({sm.name});")
            c.line(f"(void){sm.su};")
        for masked, cond in ((False, "if (start < mid)"), (True, "else")):
            if masked:
                c.close("} else {  // edge chunk: masked")
                c.depth += 1
            else:
                c.open(cond)
                c.line("// interior chunk: no masks")
            self.vals = dict(head_vals)
            for name in self.stage_off:
                self.vals[name] = self.smem(name)
            self.emit_ops(list(s.body), masked=masked)
        c.close()
        c.close()
        c.line("napkin::wait<0>();")
        self.vals = dict(head_vals)
        for r in s.reducers:
            self.finish(r)

    # -- accumulators ----------------------------------------------------------------------------------
    def online(self, r) -> bool:
        return r.softmax is not None or r.op.primitive.name == "softmax_dot"

    def init(self, r) -> None:
        c, op = self.c, r.op
        name = op.name
        acc = self.n("acc_{}", name)
        if op.primitive.contraction:
            _, n, k = _contraction_dims(self.p, op)
            if k != self.stream.name:
                raise _unrenderable(self.p, f"the streamed contraction {name!r} is not over the stream", op)
            c.line(f"float {acc}[MA][{self.ext(n)} / 8][4];")
            self.zero(acc, n)
            if self.online(r):
                m, l = self.n("m_{}", name), self.n("l_{}", name)
                c.line(f"float {m}[MA][2], {l}[MA][2];  // running maximum (base 2), running sum "
                       "(this thread's columns)")
                self.loop_row(f"{{ {m}[mi][h] = {NEG_INF}; {l}[mi][h] = 0.f; }}")
        else:
            x = self.p.tiles_of[op.inputs[0]]
            if self.p.dim_of[op.applied.over] != self.stream.name or self.canon(x) != (self.row.name,
                                                                                     self.stream.name):
                raise _unrenderable(self.p, f"the streamed reduction {name!r} is not a row reduction of a "
                                    "[rows, chunk] tile", op)
            neutral = "0.f" if op.primitive.name == "sum" else NEG_INF
            c.line(f"float {acc}[MA][2];")
            self.loop_row(f"{acc}[mi][h] = {neutral};")

    def zero(self, arr: str, n: str) -> None:
        self.loop_acc(n, f"{arr}[mi][j][e] = 0.f;")

    def finish(self, r) -> None:
        c, op = self.c, r.op
        name = op.name
        acc = self.n("acc_{}", name)
        c.comment(f"tail of {name}: the accumulator is complete")
        if op.primitive.contraction:
            m, n, _ = _contraction_dims(self.p, op)
            if self.online(r):
                out, inv = self.val(name), self.n("inv_{}", name)
                c.line(f"float {inv}[MA][2];")
                self.loop_row(f"{{ const float l = napkin::quad_sum({self.n('l_{}', name)}[mi][h]); "
                              f"{inv}[mi][h] = l > 0.f ? 1.f / l : 0.f; }}")
                c.line(f"float {out}[MA][{self.ext(n)} / 8][4];")
                self.loop_acc(n, f"{out}[mi][j][e] = {acc}[mi][j][e] * {inv}[mi][e >> 1];")
                self.vals[name] = CVal("acc", out, (m, n))
            else:
                self.vals[name] = CVal("acc", acc, (m, n))
        else:
            red = "napkin::quad_sum" if op.primitive.name == "sum" else "napkin::quad_max"
            self.loop_row(f"{acc}[mi][h] = {red}({acc}[mi][h]);")
            self.vals[name] = CVal("row", acc, (self.row.name,))

    def loop_acc(self, n: str, stmt: str) -> None:
        """`stmt` for every element [mi][j][e] of a [rows, n] accumulator tile."""
        c = self.c
        c.line("#pragma unroll")
        c.open("for (int mi = 0; mi < MA; ++mi)")
        c.line("#pragma unroll")
        c.open(f"for (int j = 0; j < {self.ext(n)} / 8; ++j)")
        c.line("#pragma unroll")
        c.line(f"for (int e = 0; e < 4; ++e) {stmt}")
        c.close()
        c.close()

    def loop_row(self, stmt: str) -> None:
        """`stmt` for every element [mi][h] of a row vector."""
        c = self.c
        c.line("#pragma unroll")
        c.open("for (int mi = 0; mi < MA; ++mi)")
        c.line("#pragma unroll")
        c.line(f"for (int h = 0; h < 2; ++h) {stmt}")
        c.close()

    # -- elements ----------------------------------------------------------------------------------------
    def at(self, v: CVal, target: tuple[str, ...], ctx: str) -> str:
        """C expression of `v`'s element at the current element of a `target`-shaped tile."""
        R = self.row.name
        if not set(v.dims) <= set(target):
            raise _unrenderable(self.p, f"cannot broadcast [{', '.join(v.dims)}] to [{', '.join(target)}]")
        if v.kind == "acc":
            return f"{v.name}[mi][j][e]"
        if v.kind == "row":
            return f"{v.name}[mi][e >> 1]" if ctx == "acc" else f"{v.name}[mi][h]"
        if v.kind == "scalar":
            return v.name
        row = ROW_E if ctx == "acc" else ROW_H
        idx = {R: row}
        if ctx == "acc":
            idx[target[1]] = COL_E
        if len(v.dims) == 2:
            o, i = v.dims
            return f"napkin::Num<T>::to_f({v.name}[napkin::swz<{self.ext(i)}>({idx[o]}, {idx[i]})])"
        return f"napkin::Num<T>::to_f({v.name}[{idx[v.dims[0]]}])"

    def index_of(self, dim: str, target: tuple[str, ...], ctx: str) -> str:
        if dim == self.row.name:
            return ROW_E if ctx == "acc" else ROW_H
        if ctx == "acc" and dim == target[1]:
            return COL_E
        raise _unrenderable(self.p, f"no index of {dim} in a [{', '.join(target)}] tile")

    def col_valid(self, dim: str, masked: bool) -> str | None:
        """The mask of the columns of an accumulator along `dim` (None: every column is inside)."""
        d = self.p.dim(dim)
        if d.kind == STREAM:
            return f"({COL_E} < {self.lim(dim)})" if masked else None
        if d.kind == WHOLE and len(d.axes) == 1:
            return f"({COL_E} < {self.lim(dim)})"
        return self.valid(d, COL_E)

    def ew(self, name: str, dims: tuple[str, ...], expr, *, copy: bool = False) -> CVal:
        """An elementwise tile: `expr(ctx)` gives an element's value. The value of op `name`, or with
        `copy` a register copy of loaded array `name` (a temporary: `name` keeps its tile)."""
        c = self.c
        dims = self.canon(dims)
        R = self.row.name
        out = self.fresh() if copy else self.val(name)
        if len(dims) == 2 and dims[0] == R:
            c.line(f"float {out}[MA][{self.ext(dims[1])} / 8][4];")
            self.loop_acc(dims[1], f"{out}[mi][j][e] = {expr('acc', dims)};")
            v = CVal("acc", out, dims)
        elif dims == (R,):
            c.line(f"float {out}[MA][2];")
            self.loop_row(f"{out}[mi][h] = {expr('row', dims)};")
            v = CVal("row", out, dims)
        elif not dims:
            c.line(f"const float {out} = {expr('scalar', dims)};")
            v = CVal("scalar", out, dims)
        else:
            raise _unrenderable(self.p, f"{name!r} has a tile [{', '.join(dims)}] without the block's rows")
        if not copy:
            self.vals[name] = v
        return v

    def value(self, name: str) -> CVal:
        if name not in self.vals:
            raise _unrenderable(self.p, f"{name!r} is used before it is computed or loaded")
        return self.vals[name]

    def register(self, name: str) -> CVal:
        """The value of `name`; a loaded [rows, n] tile as an accumulator-layout register tile."""
        v = self.value(name)
        if v.kind != "smem":
            return v
        dims = self.canon(v.dims)
        return self.ew(name, dims, lambda ctx, t: self.at(v, t, ctx), copy=True)

    # -- primitives ----------------------------------------------------------------------------------------
    def emit_ops(self, ops: list[Op], *, masked: bool) -> None:
        for op in ops:
            if op.name in self.paired:
                continue   # folded into its contraction as online softmax (Appendix A.3.2)
            if op.name in self.reducer_of:
                self.accumulate(self.reducer_of[op.name], masked=masked)
            else:
                self.primitive(op, masked=masked)

    def primitive(self, op: Op, *, masked: bool) -> None:
        name, prim, c = op.name, op.primitive.name, self.c
        ins = [self.value(i) for i in op.inputs]
        if prim == "dot":
            c.comment(f"{name} = {op.inputs[0]} . {op.inputs[1]} over {op.applied.over} "
                      "(tensor cores, fp32 accumulate)")
            m, n, k = _contraction_dims(self.p, op)
            out = self.val(name)
            c.line(f"float {out}[MA][{self.ext(n)} / 8][4];")
            self.zero(out, n)
            self.mma(out, ins[0], ins[1], (m, n, k), mask_a=None)
            self.vals[name] = CVal("acc", out, (m, n))
            return
        if prim == "softmax_dot":
            m, n, k = _contraction_dims(self.p, op)
            c.comment(f"{name} = softmax of {op.inputs[0]} over {op.applied.over}, . {op.inputs[1]}")
            p = self.softmax_rows("_p", self.register(op.inputs[0]), k, op, masked)
            out = self.val(name)
            c.line(f"float {out}[MA][{self.ext(n)} / 8][4];")
            self.zero(out, n)
            self.mma(out, p, ins[1], (m, n, k), mask_a=None)
            self.vals[name] = CVal("acc", out, (m, n))
            return
        (x, *rest) = ins
        dims = self.canon(self.p.tiles_of[name]) if name in self.p.tiles_of else x.dims
        if prim == "scale":
            self.ew(name, dims, lambda ctx, t: f"{self.at(x, t, ctx)} * {self.n.scale(name)}")
        elif prim == "shift":
            self.ew(name, dims, lambda ctx, t: f"{self.at(x, t, ctx)} + {_float(op.applied.offset)}")
        elif prim == "causal_mask":
            skip = self.s.skip
            if skip is not None and skip.mask is op and not masked:
                self.vals[name] = x   # interior chunks lie below the diagonal
                return
            q, key = op.applied.query, op.applied.key

            def cond(ctx, t):
                oq = self.offs(q, self.index_of(self.p.dim_of[q], t, ctx))
                ok = self.offs(key, self.index_of(self.p.dim_of[key], t, ctx))
                return f"({oq} >= {ok}) ? {self.at(x, t, ctx)} : {NEG_INF}"
            c.comment(f"{name}: causal mask")
            self.ew(name, dims, cond)
        elif prim in ELEMENTWISE:
            self.ew(name, dims, lambda ctx, t: f"{ELEMENTWISE[prim]}({self.at(x, t, ctx)})")
        elif prim in BINARY:
            (y,) = rest
            dims = self.canon(x.dims if len(x.dims) >= len(y.dims) else y.dims)
            self.ew(name, dims, lambda ctx, t: f"{self.at(x, t, ctx)} {BINARY[prim]} {self.at(y, t, ctx)}")
        elif prim == "softmax":
            over = self.p.dim_of[op.applied.over]
            c.comment(f"{name} = softmax of {op.inputs[0]} over {op.applied.over}")
            self.vals[name] = self.softmax_rows("", self.register(op.inputs[0]), over, op, True)
        elif prim in ("sum", "max"):
            over = self.p.dim_of[op.applied.over]
            xr = self.register(op.inputs[0])
            if xr.kind != "acc" or xr.dims[1] != over:
                raise _unrenderable(self.p, f"{name!r} reduces a tile [{', '.join(x.dims)}] over "
                                    f"{op.applied.over}", op)
            neutral = "0.f" if prim == "sum" else NEG_INF
            comb = (lambda a, b: f"{a} + {b}") if prim == "sum" else (lambda a, b: f"fmaxf({a}, {b})")
            valid = self.col_valid(over, masked)
            src = f"{xr.name}[mi][j][e]" if valid is None else f"({valid} ? {xr.name}[mi][j][e] : {neutral})"
            out = self.val(name)
            c.line(f"float {out}[MA][2];")
            self.loop_row(f"{out}[mi][h] = {neutral};")
            self.loop_acc(over, f"{out}[mi][e >> 1] = {comb(f'{out}[mi][e >> 1]', src)};")
            red = "napkin::quad_sum" if prim == "sum" else "napkin::quad_max"
            self.loop_row(f"{out}[mi][h] = {red}({out}[mi][h]);")
            self.vals[name] = CVal("row", out, (self.row.name,))
        else:
            raise _unrenderable(self.p, f"primitive {prim!r}", op)

    def softmax_rows(self, suffix: str, x: CVal, over: str, op: Op, masked: bool) -> CVal:
        """Softmax of an accumulator tile along its columns (one row at a time, in base 2): op `op`'s
        value, or with `suffix` "_p" the probabilities inside a softmax_dot."""
        c, name = self.c, op.name
        if x.kind != "acc" or x.dims[1] != over:
            raise _unrenderable(self.p, f"{op.name!r} takes a softmax over {op.applied.over} of a tile "
                                f"[{', '.join(x.dims)}]", op)
        scale = f"{self.n.scale(op.name)} * {LOG2E}" if op.applied.scale is not None else LOG2E
        valid = self.col_valid(over, masked)
        t, out = self.n("t_{}" + suffix, name), self.val(name, suffix)
        mx, sm = self.n("mx_{}" + suffix, name), self.n.row_sum(name, suffix)
        n = self.ext(over)
        c.line(f"float {t}[MA][{n} / 8][4], {out}[MA][{n} / 8][4];")
        c.line(f"float {mx}[MA][2], {sm}[MA][2];")
        self.loop_row(f"{{ {mx}[mi][h] = {NEG_INF}; {sm}[mi][h] = 0.f; }}")
        src = f"{x.name}[mi][j][e] * ({scale})"
        src = src if valid is None else f"({valid} ? {src} : {NEG_INF})"
        self.loop_acc(over, f"{{ {t}[mi][j][e] = {src}; "
                            f"{mx}[mi][e >> 1] = fmaxf({mx}[mi][e >> 1], {t}[mi][j][e]); }}")
        self.loop_row(f"{{ {mx}[mi][h] = napkin::quad_max({mx}[mi][h]); "
                      f"if ({mx}[mi][h] == {NEG_INF}) {mx}[mi][h] = 0.f; }}")
        self.loop_acc(over, f"{{ {out}[mi][j][e] = napkin::ex2({t}[mi][j][e] - {mx}[mi][e >> 1]); "
                            f"{sm}[mi][e >> 1] += {out}[mi][j][e]; }}")
        self.loop_row(f"{sm}[mi][h] = 1.f / napkin::quad_sum({sm}[mi][h]);")
        self.loop_acc(over, f"{out}[mi][j][e] *= {sm}[mi][e >> 1];")
        return CVal("acc", out, x.dims)

    # -- contractions ------------------------------------------------------------------------------------
    def mma(self, out: str, a: CVal, b: CVal, mnk: tuple[str, str, str], mask_a: str | None) -> None:
        """out[m, n] += a[m, k] . b[k, n] on the tensor cores; b is a loaded tile in shared memory."""
        c = self.c
        m, n, k = mnk
        if b.kind != "smem" or len(b.dims) != 2:
            raise _unrenderable(self.p, "the second operand of a contraction is not a loaded "
                                "two-dimensional tile")
        if a.kind == "smem" and len(a.dims) != 2:
            raise _unrenderable(self.p, "a contraction's first operand is not two-dimensional")
        if a.kind in ("row", "scalar") or (a.kind == "acc" and a.dims != (m, k)):
            raise _unrenderable(self.p, f"a contraction's first operand has dims [{', '.join(a.dims)}]")
        K, N = self.ext(k), self.ext(n)
        c.line("#pragma unroll")
        c.open(f"for (int kk = 0; kk < {K} / 16; ++kk)")
        c.line("uint32_t a[MA][4];  // this warp's A fragments, one per m16 tile")
        c.line("#pragma unroll")
        c.open("for (int mi = 0; mi < MA; ++mi)")
        if a.kind == "smem":
            o, i = a.dims
            W = self.ext(i)
            mask = f"napkin::swz_m<{W}>()"
            if (o, i) == (m, k):   # [m][k]: k contiguous
                c.line(f"napkin::ldsm4(a[mi], {self.ldsm_addr(a, 'a', f'((2 * kk) & {mask}) >> 1', f'mi * 16 * {W} + ((2 * kk) & ~{mask}) * 8')});")
            else:                  # [k][m]: transposed
                c.line(f"napkin::ldsm4t(a[mi], {self.ldsm_addr(a, 'at', 'mi', f'kk * 16 * {W}')});")
        else:
            src = a.name
            if mask_a is not None:
                def el(j: str, e: int, col: str) -> str:
                    return f"({col} < {mask_a} ? {src}[mi][{j}][{e}] : 0.f)"
                cols = ["kk * 16 + fc", "kk * 16 + fc + 1", "kk * 16 + 8 + fc", "kk * 16 + 8 + fc + 1"]
                c.line(f"a[mi][0] = napkin::Num<T>::pack({el('2 * kk', 0, cols[0])}, {el('2 * kk', 1, cols[1])});")
                c.line(f"a[mi][1] = napkin::Num<T>::pack({el('2 * kk', 2, cols[0])}, {el('2 * kk', 3, cols[1])});")
                c.line(f"a[mi][2] = napkin::Num<T>::pack({el('2 * kk + 1', 0, cols[2])}, "
                       f"{el('2 * kk + 1', 1, cols[3])});")
                c.line(f"a[mi][3] = napkin::Num<T>::pack({el('2 * kk + 1', 2, cols[2])}, "
                       f"{el('2 * kk + 1', 3, cols[3])});")
            else:
                c.line(f"a[mi][0] = napkin::Num<T>::pack({src}[mi][2 * kk][0], {src}[mi][2 * kk][1]);")
                c.line(f"a[mi][1] = napkin::Num<T>::pack({src}[mi][2 * kk][2], {src}[mi][2 * kk][3]);")
                c.line(f"a[mi][2] = napkin::Num<T>::pack({src}[mi][2 * kk + 1][0], {src}[mi][2 * kk + 1][1]);")
                c.line(f"a[mi][3] = napkin::Num<T>::pack({src}[mi][2 * kk + 1][2], {src}[mi][2 * kk + 1][3]);")
        c.close()
        c.line("#pragma unroll")
        c.open(f"for (int nn = 0; nn < {N} / 16; ++nn)")
        c.line("uint32_t b[4];  // B fragments of two n8 tiles, shared by the warp's m16 tiles")
        o, i = b.dims
        W = self.ext(i)
        mask = f"napkin::swz_m<{W}>()"
        if (o, i) == (n, k):       # [n][k]: k contiguous
            c.line(f"napkin::ldsm4(b, {self.ldsm_addr(b, 'b', f'((2 * kk) & {mask}) >> 1', f'nn * 16 * {W} + ((2 * kk) & ~{mask}) * 8')});")
        else:                      # [k][n]: transposed
            c.line(f"napkin::ldsm4t(b, {self.ldsm_addr(b, 'bt', f'((2 * nn) & {mask}) >> 1', f'kk * 16 * {W} + ((2 * nn) & ~{mask}) * 8')});")
        c.line("#pragma unroll")
        c.open("for (int mi = 0; mi < MA; ++mi)")
        c.line(f"napkin::mma<T>({out}[mi][2 * nn], a[mi], b[0], b[1]);")
        c.line(f"napkin::mma<T>({out}[mi][2 * nn + 1], a[mi], b[2], b[3]);")
        c.close()
        c.close()
        c.close()

    # ldmatrix lane addresses: row lr and 16-byte chunk lc of this lane (runtime), for each pattern
    PATTERNS: ClassVar[dict[str, tuple[str, str]]] = {
                "a": ("warp * 16 * MA + l16", "lane >> 4"),                 # A [m][k]
                "at": ("h8 + l8", "warp * 2 * MA + ((lane >> 3) & 1)"),      # A [k][m], transposed
                "b": ("h8 + l8", "(lane >> 3) & 1"),                       # B [n][k]
                "bt": ("q8 + l8", "lane >> 4")}                            # B [k][n], transposed

    def ldsm_addr(self, v: CVal, pattern: str, index: str, rest: str) -> str:
        """The shared-memory address of this lane's row for an ldmatrix.x4: the tile's base, one of
        four lane-constant offsets (the swizzle XORs a row's chunks with bits of the row, and the 8 rows
        of each matrix start at a multiple of 8, so the XOR depends only on the lane), and a
        compile-time rest in elements."""
        W = self.ext(v.dims[1])
        table = self.n("lo_{}_{}", pattern, W)
        self.tables[table] = (pattern, W)
        return f"{v.su} + {table}[{index}] + (uint32_t)(2 * ({rest}))"

    def table_lines(self) -> list[str]:
        out = []
        for table, (pattern, W) in sorted(self.tables.items()):
            lr, lc = self.PATTERNS[pattern]
            out.append(f"  uint32_t {table}[4];  // ldmatrix lane offsets (bytes), pattern {pattern}")
            out.append("  #pragma unroll")
            out.append(f"  for (int v = 0; v < 4; ++v) {table}[v] = (2 * v + ({lc}) < {W} / 8) ? "
                       f"(uint32_t)(2 * napkin::swz<{W}>({lr}, 8 * (2 * v + ({lc})))) : 0u;")
        return out

    def accumulate(self, r, *, masked: bool) -> None:
        op = r.op
        name = op.name
        c = self.c
        st = self.stream
        if op.primitive.contraction:
            first, second = op.inputs
            if r.softmax is not None:          # softmax -> dot: stream the softmax's input
                src = r.softmax
                first = src.inputs[0] if first == src.name else first
                second = src.inputs[0] if second == src.name else second
                scale_op = src
            else:
                scale_op = op
            a = self.value(first)
            b = self.value(second)
            m, n, k = _contraction_dims(self.p, op)
            if self.online(r):
                self.online_step(name, scale_op, self.register(first), b, (m, n, k), masked=masked)
            else:
                c.comment(f"{name} += {first} . {second} over this chunk of {st.axes[0]} (A.3.1)")
                mask_a = self.lim(st.name) if masked and a.kind != "smem" else None
                self.mma(self.n("acc_{}", name), a, b, (m, n, k), mask_a=mask_a)
            return
        x = self.register(op.inputs[0])
        neutral = "0.f" if op.primitive.name == "sum" else NEG_INF
        src = f"{x.name}[mi][j][e]"
        if masked:
            src = f"({COL_E} < {self.lim(st.name)} ? {src} : {neutral})"
        acc = f"{self.n('acc_{}', name)}[mi][e >> 1]"
        comb = f"{acc} + {src}" if op.primitive.name == "sum" else f"fmaxf({acc}, {src})"
        c.comment(f"{name}: running {op.primitive.name} over this chunk of {st.axes[0]}")
        self.loop_acc(st.name, f"{acc} = {comb};")

    def online_step(self, name: str, scale_op: Op, s: CVal, v: CVal, mnk, *, masked: bool) -> None:
        """Online softmax folded into the contraction (Appendix A.3.2, Table 4), in base 2."""
        c = self.c
        m, n, k = mnk
        if s.kind != "acc" or s.dims != (m, k):
            raise _unrenderable(self.p, f"the scores of {name!r} have dims [{', '.join(s.dims)}]")
        scale = f"{self.n.scale(scale_op.name)} * {LOG2E}" if scale_op.applied.scale is not None else LOG2E
        K = self.ext(k)
        mx, l, acc = self.n("m_{}", name), self.n("l_{}", name), self.n("acc_{}", name)
        c.comment(f"{name}: online softmax over this chunk (running max m, sum l; A.3.2), "
                  "in base 2: exp(t) = exp2(t log2 e)")
        c.open("")
        c.line(f"float t[MA][{K} / 8][4];")
        c.line("float m_new[MA][2], m_use[MA][2], alpha[MA][2], rowsum[MA][2];")
        self.loop_row(f"{{ m_new[mi][h] = {mx}[mi][h]; rowsum[mi][h] = 0.f; }}")
        valid = f"{COL_E} < {self.lim(k)}" if masked else None
        src = f"{s.name}[mi][j][e] * ({scale})"
        if valid:
            src = f"({valid} ? {src} : {NEG_INF})"
        self.loop_acc(k, f"{{ t[mi][j][e] = {src}; m_new[mi][e >> 1] = fmaxf(m_new[mi][e >> 1], t[mi][j][e]); }}")
        c.line("#pragma unroll")
        c.open("for (int mi = 0; mi < MA; ++mi)")
        c.line("#pragma unroll")
        c.open("for (int h = 0; h < 2; ++h)")
        c.line("m_new[mi][h] = napkin::quad_max(m_new[mi][h]);")
        c.line(f"m_use[mi][h] = m_new[mi][h] == {NEG_INF} ? 0.f : m_new[mi][h];  // rows with nothing seen yet")
        c.line(f"alpha[mi][h] = napkin::ex2({mx}[mi][h] - m_use[mi][h]);")
        c.line(f"{mx}[mi][h] = m_new[mi][h];")
        c.close()
        c.close()
        self.loop_acc(k, "{ t[mi][j][e] = napkin::ex2(t[mi][j][e] - m_use[mi][e >> 1]); "
                         "rowsum[mi][e >> 1] += t[mi][j][e]; }")
        self.loop_row(f"{l}[mi][h] = {l}[mi][h] * alpha[mi][h] + rowsum[mi][h];")
        self.loop_acc(n, f"{acc}[mi][j][e] *= alpha[mi][e >> 1];")
        self.mma(acc, CVal("acc", "t", (m, k)), v, (m, n, k), mask_a=None)
        c.close()

    # -- saves ---------------------------------------------------------------------------------------------
    def saves(self) -> None:
        p, c = self.p, self.c
        R = self.row
        c.line("// registers -> GMEM: the block's outputs")
        for name in self.s.saves:
            v = self.register(name)
            g_name = self.gmem(name)
            dims = p.tiles_of[name]
            bit = len(self.loaded) + self.s.saves.index(name)
            if v.kind == "acc":
                n = v.dims[1]
                dn = p.dim(n)
                if set(dims) != {R.name, n}:
                    raise _unrenderable(p, f"it saves {name!r} [{', '.join(dims)}] from a tile "
                                        f"[{', '.join(v.dims)}]")
                c.line("#pragma unroll")
                c.open("for (int mi = 0; mi < MA; ++mi)")
                c.line("#pragma unroll")
                c.open(f"for (int j = 0; j < {self.ext(n)} / 8; ++j)")
                c.line("#pragma unroll")
                c.open("for (int h = 0; h < 2; ++h)")
                c.line("const int row = fr + (mi << 4) + (h << 3), col = j * 8 + fc;")
                c.line(f"if (!{self.valid(R, 'row')}) continue;")
                c.line(f"const float x0 = {v.name}[mi][j][2 * h], x1 = {v.name}[mi][j][2 * h + 1];")
                if len(dn.axes) == 1:
                    unit = dn.axes[0]
                    addr = self.address(name, {R.name: "row", n: "col"}, unit_axis=unit)
                    c.open(f"if ((vec & {1 << bit}) && {self.valid(dn, 'col + 1')})")
                    c.line(f"*reinterpret_cast<uint32_t*>({g_name} + ({addr})) = "
                           "napkin::Num<T>::pack(x0, x1);")
                    c.close("} else {")
                    c.depth += 1
                for e in (0, 1):
                    col = "col" if e == 0 else "col + 1"
                    addr = self.address(name, {R.name: "row", n: col})
                    c.line(f"if ({self.valid(dn, col)}) {g_name}[{addr}] = napkin::Num<T>::of(x{e});")
                if len(dn.axes) == 1:
                    c.close()
                c.close()
                c.close()
                c.close()
            elif v.kind == "row":
                if tuple(dims) != (R.name,):
                    raise _unrenderable(p, f"it saves {name!r} [{', '.join(dims)}] from a row vector")
                c.open("if ((lane & 3) == 0)")
                addr = self.address(name, {R.name: "row"})
                self.loop_row(f"{{ const int row = fr + (mi << 4) + (h << 3); if ({self.valid(R, 'row')}) "
                              f"{g_name}[{addr}] = napkin::Num<T>::of({v.name}[mi][h]); }}")
                c.close()
            else:
                if dims:
                    raise _unrenderable(p, f"it saves {name!r} [{', '.join(dims)}] from a scalar")
                c.line(f"if (blockIdx.x == 0 && tid == 0) {g_name}[0] = napkin::Num<T>::of({v.name});")

    # -- host side -----------------------------------------------------------------------------------------
    def vec_conditions(self) -> list[tuple[int, str]]:
        """Host conditions for the 16-byte load path of each loaded tile and the paired stores."""
        p, n = self.p, self.n
        out = []
        for bit, name in enumerate(self.loaded):
            dims = p.tiles_of[name]
            if len(dims) != 2 or len(p.dim(dims[1]).axes) != 1:
                continue
            inner = p.dim(dims[1]).axes[0]
            conds = [f"napkin::aligned({n.ptr(name)}, 16)", f"{n.stride(name, inner)} == 1"]
            conds += [f"{n.stride(name, x)} % 8 == 0" for x in p.axes_of(name) if x != inner]
            out.append((bit, " && ".join(conds)))
        for i, name in enumerate(self.s.saves):
            bit = len(self.loaded) + i
            v_dims = self.canon(p.tiles_of[name])
            if len(v_dims) != 2 or len(p.dim(v_dims[1]).axes) != 1:
                continue
            unit = p.dim(v_dims[1]).axes[0]
            conds = [f"napkin::aligned({n.ptr(name)}, 4)", f"{n.stride(name, unit)} == 1"]
            conds += [f"{n.stride(name, x)} % 2 == 0" for x in p.axes_of(name) if x != unit]
            out.append((bit, " && ".join(conds)))
        return out

    def _launcher(self) -> str:
        p, f, n = self.p, self.fns, self.n
        params = self.c_params("void*")
        blocks = " * ".join([*(f"napkin::cdiv({n.size(a)}, C::{n.tile(a)})" for a in self.group_axes()),
                             *(n.size(a) for a in p.grid)]) or "1"
        lines = ["template <typename T, int V>",
                 f"static int {f.launch}(" + ", ".join([*params, "int major", "cudaStream_t stream"]) + ")",
                 "{",
                 f"  using C = {f.cfg}<V>;",
                 "  const int nbuf = major >= 8 ? C::STAGES : 1;  // sm_75: one buffer, plain loads",
                 "  const size_t smem = (size_t)(C::HEAD_ELEMS + nbuf * C::STAGE_ELEMS) * sizeof(T);",
                 "  if (smem > (size_t)napkin::smem_optin()) return NAPKIN_ERR_SMEM;",
                 f"  if (smem > {SMEM_DEFAULT}) {{",
                 (f"    const cudaError_t e = cudaFuncSetAttribute({f.kernel}<T, V>, "
                  "cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem);"),
                 "    if (e != cudaSuccess) return (int)e;",
                 "  }",
                 f"  const int64_t blocks = {blocks};",
                 "  if (blocks <= 0) return 0;",
                 "  if (blocks > 2147483647LL) return NAPKIN_ERR_GRID;",
                 "  if (" + " || ".join(f"{n.size(a)} > 2147483647LL" for a in self.axes)
                 + ") return NAPKIN_ERR_GRID;",
                 "  int vec = 0;"]
        for bit, cond in self.vec_conditions():
            lines.append(f"  if ({cond}) vec |= {1 << bit};")
        args = []
        for a in pointers(p):
            const = "const " if a not in self.s.saves else ""
            args.append(f"static_cast<{const}T*>({n.ptr(a)})")
        args += self.arg_names()[len(pointers(p)):]
        lines.append(f"  {f.kernel}<T, V><<<(unsigned)blocks, C::WARPS * 32, smem, stream>>>(")
        lines.append("      " + ", ".join([*args, "vec"]) + ");")
        lines.append("  return (int)cudaGetLastError();")
        lines.append("}")
        lines.append("")
        lines += self._extern()
        return "\n".join(lines) + "\n"

    def _extern(self) -> list[str]:
        p, f, k = self.p, self.fns, self.k
        key_dim = p.dim_of.get(k.key_axis) if k.key_axis else None
        lines = [f'extern "C" int {f.entry}('
                 + ", ".join([*self.c_params("void*"), "int dtype", "void* stream"]) + ")", "{",
                 "  cudaGetLastError();  // clear an earlier error of this runtime",
                 "  if (dtype != 0 && dtype != 1) return NAPKIN_ERR_DTYPE;",
                 "  const int major = napkin::device_major();",
                 "  if (dtype == 1 && major < 8) return NAPKIN_ERR_BF16;",
                 "  const cudaStream_t s = static_cast<cudaStream_t>(stream);"]
        args = ", ".join([*self.arg_names(), "major", "s"])
        for v in self.variants:
            conds = []
            for d, e in v.wholes:
                size = self.n.size(p.dim(d).axes[0])
                if d == key_dim:
                    conds.append(f"{size} == {v.key}")
                else:
                    lower = max([x for x in WHOLE_EXTENTS if x < e], default=0)
                    conds.append(f"{size} <= {e}" + (f" && {size} > {lower}" if lower else ""))
            cond = " && ".join(conds) or "true"
            lines.append(f"  if ({cond})")
            lines.append(f"    return dtype == 0 ? {f.launch}<__half, {v.index}>({args})")
            lines.append(f"                      : {f.launch}<__nv_bfloat16, {v.index}>({args});")
        lines.append("  return NAPKIN_ERR_SIZE;")
        lines.append("}")
        return lines


# -- kernels without contractions ------------------------------------------------------------------

class _Point(_Common):
    """Elementwise ops and reductions: the block's threads stride along the reduced dimension r;
    the block walks the combinations of the other dimensions one at a time. Every reduction over r
    is one pass over r (a softmax: its running maximum and sum), and the outputs along r one more."""

    def __init__(self, g, k, fns: Functions, ids: CudaIds) -> None:
        super().__init__(g, k, fns, ids)
        p, s = self.p, self.s
        self.variants = [_point_variant(p, 0, key, c) for key, c in list(k.choices.items())[:1]]
        self.reducer_of = {r.op.name: r for r in s.reducers}
        reduced = {p.dim_of[o.applied.over] for o in s.ops if o.primitive.name in ("softmax", "sum", "max")}
        if s.reducers and self.stream is not None:
            reduced.add(self.stream.name)
        if len(reduced) > 1:
            raise _unrenderable(p, f"it reduces over more than one dimension ({', '.join(sorted(reduced))})")
        if reduced:
            self.r: Dim | None = p.dim(reduced.pop())
        else:
            first = next((n for n in s.saves if p.tiles_of[n]), None)
            self.r = p.dim(p.tiles_of[first][-1]) if first else None
        self.indep = [d for d in p.dims if d is not self.r]
        self.ops = {o.name: o for o in s.ops}
        self.reduced: dict[str, str] = {}          # sum/max over r -> its variable
        self.softmaxes: dict[str, str] = {}        # softmax over r -> its scale (base 2)
        self.comb: dict[str, str] = {}             # values computed once per combination
        self._pre = 0

    def render(self) -> str:
        return f"{self._kernel()}\n{self._launcher()}"

    def has_r(self, name: str) -> bool:
        return self.r is not None and self.r.name in self.p.tiles_of.get(name, ())

    def local(self, dim: str) -> str:
        """The index of dim `dim` in the block (`i_<dim>`)."""
        return self.n("i_{}", dim)

    def extent(self, d: Dim) -> str:
        if d.kind == GROUP:
            return f"(int64_t)({self.tile_of(d)})"
        return self.n.size(d.axes[0])

    def offs(self, axis: str, local: str) -> str:
        d = self.p.dim(self.p.dim_of[axis])
        if d.kind == STREAM:
            return f"((int64_t)({local}))"   # the whole stream in one loop
        return super().offs(axis, local)

    def pvalid(self, d: Dim, local: str) -> str:
        if d.kind != GROUP:
            return "true"
        if len(d.axes) == 1:
            a = d.axes[0]
            return f"({self.offs(a, local)} < {self.n.size(a)})"
        return self.valid(d, local)

    def _kernel(self) -> str:
        s, c = self.s, self.c
        v = self.variants[0]
        head = ["template <typename T>",
                f"__global__ void __launch_bounds__({v.warps * 32})",
                f"{self.fns.kernel}(" + ",\n    ".join(self.c_params("T*")) + ")", "{"]
        c.line(f"constexpr int NT = {v.warps * 32};")
        for a, t in v.tiles:
            c.line(f"constexpr int64_t {self.n.tile(a)} = {t};")
        c.line("__shared__ float napkin_red[32];")
        c.line("const int tid = threadIdx.x;")
        c.line("(void)napkin_red; (void)tid; (void)NT;")
        if self.p.banded:
            tiles = dict(v.tiles)
            r, col = self.p.banded
            c.line(f"constexpr int64_t BAND = {band_rows(tiles[r], tiles[col], self.g.sm_count)};"
                   f"  // row tiles per band: one wave of {self.g.sm_count} blocks covers a square")
        self.blocks(band="BAND")
        c.line("// the block's elements: one combination of the other dimensions at a time")
        n_ind = " * ".join(self.extent(d) for d in self.indep) or "1"
        c.open(f"for (int64_t comb = 0; comb < {n_ind}; ++comb)")
        c.line("int64_t left = comb;")
        c.line("(void)left;")
        for d in reversed(self.indep):
            c.line(f"const int64_t {self.local(d.name)} = left % {self.extent(d)};")
            c.line(f"left /= {self.extent(d)};")
        for d in self.indep:
            c.line(f"if (!{self.pvalid(d, self.local(d.name))}) continue;")
        for op in s.ops:
            if op.primitive.name in ("softmax", "sum", "max") or op.name in self.reducer_of:
                self.reduction_pass(op)
        along = [n for n in s.saves if self.has_r(n)]
        if along:
            c.comment(f"registers -> GMEM: the outputs along {self.r.axes[0]}")
            self.r_loop(lambda memo: [self.store(n, memo) for n in along])
        for n in s.saves:
            if not self.has_r(n):
                expr = self.need(n, None)
                addr = self.address(n, {d.name: self.local(d.name) for d in self.indep})
                c.line(f"if (tid == 0) {self.gmem(n)}[{addr}] = napkin::Num<T>::of({expr});")
        c.close()
        return "\n".join([*head, *c.lines, "}", ""])

    def r_loop(self, body) -> None:
        """One pass of the block's threads along r; body(memo) writes the loop's statements."""
        c, d = self.c, self.r
        self._pre = len(c.lines)
        i = self.local(d.name)
        c.open(f"for (int64_t {i} = tid; {i} < {self.extent(d)}; {i} += NT)")
        c.line(f"if (!{self.pvalid(d, i)}) continue;")
        body({})
        c.close()

    def emit_pre(self, text: str) -> None:
        """A statement of the combination's scope, placed before the loop being written."""
        self.c.lines.insert(self._pre, "  " * (self.c.depth - 1) + text)
        self._pre += 1

    def need(self, name: str, memo: dict | None) -> str:
        """A C expression of `name`'s element at the current indices (memo: the loop's values)."""
        p = self.p
        along = self.has_r(name)
        if name in self.reduced:
            return self.reduced[name]
        if along and memo is None:
            raise _unrenderable(p, f"{name!r} is needed outside the loop over {self.r.axes[0]}")
        table = memo if along else self.comb
        if name in table:
            return table[name]
        emit = self.emit_pre if (not along and memo is not None) else self.c.line
        var = self.n("e_{}", name) if along else self.n("c_{}", name)
        op = self.ops.get(name)
        if op is None:                       # a loaded array
            locals_ = {d.name: self.local(d.name) for d in p.dims}
            expr = f"napkin::Num<T>::to_f({self.gmem(name)}[{self.address(name, locals_)}])"
        elif name in self.softmaxes:
            x = self.need(op.inputs[0], memo)
            expr = (f"napkin::ex2({x} * ({self.softmaxes[name]}) - {self.n('m_{}', name)}) * "
                    f"{self.n('l_{}', name)}")
        else:
            prim = op.primitive.name
            args = [self.need(i, memo) for i in op.inputs]
            if prim == "scale":
                expr = f"{args[0]} * {self.n.scale(name)}"
            elif prim == "shift":
                expr = f"({args[0]} + {_float(op.applied.offset)})"
            elif prim in ELEMENTWISE:
                expr = f"{ELEMENTWISE[prim]}({args[0]})"
            elif prim in BINARY:
                expr = f"{args[0]} {BINARY[prim]} {args[1]}"
            elif prim == "causal_mask":
                q, key = op.applied.query, op.applied.key
                oq = self.offs(q, self.local(p.dim_of[q]))
                ok = self.offs(key, self.local(p.dim_of[key]))
                expr = f"(({oq} >= {ok}) ? {args[0]} : {NEG_INF})"
            else:
                raise _unrenderable(p, f"primitive {prim!r} ({name!r}) in a kernel without contractions", op)
        emit(f"const float {var} = {expr};")
        table[name] = var
        return var

    def reduction_pass(self, op: Op) -> None:
        c, name = self.c, op.name
        prim = op.primitive.name
        if self.r is None:
            raise _unrenderable(self.p, f"{name!r} reduces over nothing", op)
        if op.primitive.contraction:
            raise _unrenderable(self.p, f"contraction {name!r} outside the tensor-core renderer", op)
        src = op.inputs[0]
        nw = self.variants[0].warps
        if prim == "softmax":
            scale = f"{self.n.scale(name)} * {LOG2E}" if op.applied.scale is not None else LOG2E
            m, l = self.n("m_{}", name), self.n("l_{}", name)
            c.comment(f"{name} = softmax of {src} over {op.applied.over}: running max and sum (base 2)")
            c.line(f"float {m} = {NEG_INF}, {l} = 0.f;")

            def body(memo):
                x = self.need(src, memo)
                c.line(f"const float t = {x} * ({scale});")
                c.open(f"if (t > {m})")
                c.line(f"{l} = {l} * napkin::ex2({m} - t) + 1.f;")
                c.line(f"{m} = t;")
                c.close(f"}} else if (t != {NEG_INF}) {{")
                c.depth += 1
                c.line(f"{l} += napkin::ex2(t - {m});")
                c.close()
            self.r_loop(body)
            c.open("")
            c.line(f"const float mm = napkin::block_reduce<{nw}, true>({m}, napkin_red);")
            c.line(f"{l} = {m} == {NEG_INF} ? 0.f : {l} * napkin::ex2({m} - mm);")
            c.line(f"{l} = 1.f / napkin::block_reduce<{nw}, false>({l}, napkin_red);")
            c.line(f"{m} = mm;")
            c.close()
            self.softmaxes[name] = scale
            return
        neutral = "0.f" if prim == "sum" else NEG_INF
        comb = (lambda a, b: f"{a} + {b}") if prim == "sum" else (lambda a, b: f"fmaxf({a}, {b})")
        r = self.n("r_{}", name)
        c.comment(f"{name} = {prim} of {src} over {self.r.axes[0]}")
        c.line(f"float {r} = {neutral};")
        self.r_loop(lambda memo: c.line(f"{r} = {comb(r, self.need(src, memo))};"))
        c.line(f"{r} = napkin::block_reduce<{nw}, {'false' if prim == 'sum' else 'true'}>"
               f"({r}, napkin_red);")
        self.reduced[name] = r

    def store(self, name: str, memo: dict) -> None:
        expr = self.need(name, memo)
        addr = self.address(name, {d.name: self.local(d.name) for d in self.p.dims})
        self.c.line(f"{self.gmem(name)}[{addr}] = napkin::Num<T>::of({expr});")

    def _launcher(self) -> str:
        p, f, n = self.p, self.fns, self.n
        v = self.variants[0]
        tiles = dict(v.tiles)
        blocks = " * ".join([*(f"napkin::cdiv({n.size(a)}, {tiles[a]})" for a in self.group_axes()),
                             *(n.size(a) for a in p.grid)]) or "1"
        args = ", ".join([*(f"static_cast<{'const ' if a not in self.s.saves else ''}T*>({n.ptr(a)})"
                            for a in pointers(p)), *self.arg_names()[len(pointers(p)):]])
        return "\n".join([
            f'extern "C" int {f.entry}('
            + ", ".join([*self.c_params("void*"), "int dtype", "void* stream"]) + ")",
            "{",
            "  cudaGetLastError();  // clear an earlier error of this runtime",
            "  if (dtype != 0 && dtype != 1) return NAPKIN_ERR_DTYPE;",
            "  const cudaStream_t s = static_cast<cudaStream_t>(stream);",
            f"  const int64_t blocks = {blocks};",
            "  if (blocks <= 0) return 0;",
            "  if (blocks > 2147483647LL) return NAPKIN_ERR_GRID;",
            "  if (dtype == 0) {",
            "    using T = __half;",
            f"    {f.kernel}<T><<<(unsigned)blocks, {v.warps * 32}, 0, s>>>({args});",
            "  } else {",
            "    using T = __nv_bfloat16;",
            f"    {f.kernel}<T><<<(unsigned)blocks, {v.warps * 32}, 0, s>>>({args});",
            "  }",
            "  return (int)cudaGetLastError();",
            "}", ""])


# -- the files ---------------------------------------------------------------------------------------

def _renderer(k) -> type[_Common]:
    check_renderable(k.plan)
    if any(o.primitive.contraction for o in k.plan.schedule.ops):
        return _Mma
    return _Point


def _writers(g) -> list[tuple]:
    """Each kernel with its writer, every identifier claimed: the file's scope first reserves what every
    kernel writes itself, then claims each kernel's extern "C" entry (the loader's names for them come
    first), then its other functions; each kernel's own identifiers come from a scope beneath."""
    file = Scope(FILE_RESERVED, cpp=True)
    renderers = [(k, _renderer(k)) for k in g.kernels]
    fixed = {k.plan.name: _fixed(g, k, cls) for k, cls in renderers}
    for names in fixed.values():
        file.reserve(*names)
    entries = {k.plan.name: file("napkin_{}_{}", g.diagram.name, k.plan.name) for k in g.kernels}
    out = []
    for k, cls in renderers:
        name, entry = k.plan.name, entries[k.plan.name]
        kernel = file.claim(("kernel", name), f"{entry}_kernel")
        if cls is _Mma:
            fns = Functions(entry, kernel, file.claim(("cfg", name), f"{entry}_cfg"),
                            file.claim(("launch", name), f"{entry}_launch"))
        else:
            fns = Functions(entry, kernel)
        out.append((k, cls(g, k, fns, CudaIds(k.plan, Scope(fixed[name], parent=file, cpp=True)))))
    return out


def _describe(k, w) -> list[str]:
    """Header lines: each kernel's configuration as CUDA runs it."""
    p = k.plan
    lines = []
    for v in w.variants:
        at = f"{k.key_axis}={v.key}: " if v.key is not None else ""
        wh = "".join(f", {d} extent {e}" for d, e in v.wholes if not (k.key_axis and d == p.dim_of[k.key_axis]))
        if isinstance(w, _Mma):
            tiles = ", ".join(f"{w.n.tile(a)}={t}" for a, t in v.tiles)
            chunk = f", {w.n.block(p.stream.name)}={v.chunk}" if p.stream is not None else ""
            text = (f"  CUDA {at}rows = {v.extent(w.row.name)} ({v.warps} warps x {16 * v.ma}), "
                    f"{tiles}{chunk}{wh}, "
                    f"{v.stages} stage{'s' if v.stages != 1 else ''}, {v.smem / 1024:.0f} KB shared memory")
        else:
            tiles = ", ".join(f"{w.n.tile(a)}={t}" for a, t in v.tiles)
            r = w.r.axes[0] if w.r is not None else "nothing"
            text = (f"  CUDA {at}{v.warps} warps striding along {r}" + (f", {tiles}" if tiles else "")
                    + " (no tensor cores: no contraction)")
        lines.append(text)
        if v.clamps:
            lines.append("    clamped: " + "; ".join(v.clamps))
    return lines


def cuda_source(g) -> tuple[str, list]:
    writers = _writers(g)
    kernels = [(k, w, w.render()) for k, w in writers]
    out = ["// " + cpp_comment(line) if line else "//" for line in header(g, "C++")]
    out.append("// CUDA realisation (analyzer.codegen.cuda): mma.sync.m16n8k16 tensor cores (fp16 and bf16 "
               "in, fp32 accumulate) on sm_80+,")
    out.append("// two m16n8k8 (fp16 only) on sm_75; shared-memory tiles in 16-byte cp.async loads "
               "into `stages` buffers on sm_80+ (plain loads, one buffer, on sm_75);")
    out.append("// a warp owns one or two m16 tiles (16 or 32 rows) of a block; online softmax in registers; "
               "launchers return 0 or a cudaError_t (negative: napkin_error_string).")
    for k, w, _ in kernels:
        out.append("// " + cpp_comment(f"Kernel {k.plan.name!r} -> {w.fn}:"))
        out += ["//" + cpp_comment(line) for line in _describe(k, w)]
    out.append("")
    out.append(PRELUDE.strip("\n"))
    out.append("")
    out += _file_code()
    out.append("")
    for k, _, text in kernels:
        out.append("// " + cpp_comment(f"---- kernel {k.plan.name!r} " + "-" * 60))
        out.append(text)
    return "\n".join(out).rstrip() + "\n", writers


# -- the Python loader ---------------------------------------------------------------------------------

LOADER_RUNTIME = r'''
_CU = Path(__file__).resolve().with_suffix(".cu")
_DTYPE_CODE = {torch.float16: 0, torch.bfloat16: 1}
_LIBS = {}                 # compute capability -> the loaded library
_CURRENT = [None]          # the device the library's runtime was last set to


def _nvcc():
    """nvcc: $NAPKIN_NVCC, $CUDA_HOME/bin, $CUDA_PATH/bin, PATH, /usr/local/cuda/bin."""
    candidates = [os.environ.get("NAPKIN_NVCC")]
    candidates += [os.path.join(os.environ[v], "bin", "nvcc") for v in ("CUDA_HOME", "CUDA_PATH")
                   if os.environ.get(v)]
    candidates += [shutil.which("nvcc"), "/usr/local/cuda/bin/nvcc"]
    for path in candidates:
        if path and os.path.isfile(path) and os.access(path, os.X_OK):
            return path
    raise RuntimeError("nvcc (the CUDA compiler) was not found; it compiles " + str(_CU) + " on first "
                       "use. Put it on PATH or set NAPKIN_NVCC or CUDA_HOME")


def _cache_dirs():
    """Where compiled libraries live: $NAPKIN_CUDA_CACHE, next to this file, ~/.cache/napkin."""
    if os.environ.get("NAPKIN_CUDA_CACHE"):
        yield Path(os.environ["NAPKIN_CUDA_CACHE"])
    yield _CU.parent / "__napkin_cuda__"
    yield Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "napkin"


def _compile(arch):
    """The library for compute capability `arch` (e.g. "90"), compiled once per source hash."""
    if not _CU.is_file():
        raise RuntimeError(f"{_CU} is missing: the CUDA source is written next to this loader "
                           "(Generated.write)")
    source = _CU.read_bytes()
    # the key skips the header comment: files that differ only there (fp16 and bf16) share a library
    lines = source.splitlines(keepends=True)
    body = b"".join(lines[next((i for i, x in enumerate(lines) if not x.startswith(b"//")), 0):])
    nvcc = _nvcc()
    flags = ["-O3", "-std=c++17", "-shared", "-Xcompiler", "-fPIC",
             "-gencode", f"arch=compute_{arch},code=sm_{arch}"]
    digest = hashlib.sha256(body + " ".join([nvcc, *flags]).encode()).hexdigest()[:24]
    name = f"napkin-sm{arch}-{digest}.so"
    for folder in _cache_dirs():
        if (folder / name).is_file():
            return folder / name
    problems = []
    for folder in _cache_dirs():
        try:
            folder.mkdir(parents=True, exist_ok=True)
            tmp = folder / f".{name}.{os.getpid()}.{threading.get_ident()}.tmp"
            tmp.touch()
        except OSError as exc:
            problems.append(f"{folder}: {exc}")
            continue
        proc = subprocess.run([nvcc, *flags, "-o", str(tmp), str(_CU)], capture_output=True, text=True)
        if proc.returncode != 0:
            tmp.unlink(missing_ok=True)
            raise RuntimeError(f"nvcc failed to compile {_CU} for sm_{arch}:\n"
                               + (proc.stderr or proc.stdout)[-6000:])
        os.replace(tmp, folder / name)
        return folder / name
    raise RuntimeError("no writable folder for the compiled kernels: " + "; ".join(problems)
                       + " (set NAPKIN_CUDA_CACHE)")


def _library(device):
    """The compiled kernels for `device` (a CUDA torch.device), compiled with nvcc on first use."""
    index = device.index if device.index is not None else torch.cuda.current_device()
    major, minor = torch.cuda.get_device_capability(index)
    arch = f"{major}{minor}"
    lib = _LIBS.get(arch)
    if lib is None:
        with _LOCK:
            lib = _LIBS.get(arch)
            if lib is None:
                lib = ctypes.CDLL(str(_compile(arch)))
                lib.napkin_error_string.restype = ctypes.c_char_p
                lib.napkin_error_string.argtypes = [ctypes.c_int]
                lib.napkin_set_device.restype = ctypes.c_int
                lib.napkin_set_device.argtypes = [ctypes.c_int]
                for fn, (n_ptr, n_int, n_float) in _SIGNATURES.items():
                    f = getattr(lib, fn)
                    f.restype = ctypes.c_int
                    f.argtypes = ([ctypes.c_void_p] * n_ptr + [ctypes.c_int64] * n_int
                                  + [ctypes.c_float] * n_float + [ctypes.c_int, ctypes.c_void_p])
                _LIBS[arch] = lib
    if _CURRENT[0] != index:
        _check(lib, lib.napkin_set_device(index), "cudaSetDevice")
        _CURRENT[0] = index
    return lib


def _check(lib, code, what):
    if code != 0:
        message = lib.napkin_error_string(code).decode(errors="replace")
        raise RuntimeError(f"CUDA kernel {what} failed: {message} (code {code})")


def _stream(device):
    return torch.cuda.current_stream(device).cuda_stream
'''


def _loader_configs(writers, ids) -> str:
    lines = ["# The configuration of each kernel as CUDA runs it (napkin's own under 'napkin'), keyed by",
             "# head dim where it has one",
             "CONFIGS = {"]
    for k, w in writers:
        p = k.plan
        sizes = p.schedule.partition.group_sizes
        tile, block = ids.kernels[p.name].tile, ids.kernels[p.name].block
        lines.append(f"    {p.name!r}: {{")
        by_key: dict = {}
        for v in w.variants:
            by_key.setdefault(v.key, []).append(v)
        for key, variants in by_key.items():
            c = k.choices[key]
            napkin = {tile(a): c.tiles.get(sizes[a].name, 1) for d in p.groups for a in d.axes}
            if p.stream is not None:
                napkin[block(p.stream.name)] = c.tiles[p.schedule.partition.stream[1].name]
            napkin["num_warps"] = c.num_warps
            napkin["num_stages"] = c.num_stages
            entries = []
            for v in variants:
                e = {tile(a): t for a, t in v.tiles}
                if p.stream is not None and v.chunk is not None:
                    e[block(p.stream.name)] = v.chunk
                e["num_warps"] = v.warps
                e["num_stages"] = v.stages
                if isinstance(w, _Mma):
                    e["rows"] = v.extent(w.row.name)
                    e["smem_bytes"] = v.smem
                if v.wholes and len(variants) > 1:
                    e["extents"] = {d: x for d, x in v.wholes}
                entries.append(e)
            entry = dict(entries[0])
            if len(entries) > 1:
                entry = {"variants": entries}
            entry["napkin"] = napkin
            lines.append(f"        {key!r}: {entry!r},")
        lines.append("    },")
    lines.append("}")
    lines.append("CONFIG = CONFIGS  # the same, under the short name")
    return "\n".join(lines) + "\n"


def _loader_launchers(writers, ids) -> list[str]:
    out = []
    for k, w in writers:
        p = k.plan
        ptrs = pointers(p)
        first = next((a for a in ptrs if a in _loaded(p)), ptrs[0])
        lines = [f"def {ids.launch[p.name]}(t, size, stride, scale):",
                 '    """' + py_doc(f"Kernel {p.name!r} ({w.fn} in the .cu): t, size, stride, scale map names "
                                  "to tensors and numbers.") + '"""']
        if isinstance(w, _Mma):
            key_dim = p.dim_of.get(k.key_axis) if k.key_axis else None
            for d in p.wholes:
                if d.name != key_dim:
                    axis = py_str(d.axes[0])
                    why = py_str(f"; the CUDA kernel {p.name!r} holds it whole in registers, at most "
                                 f"{max(WHOLE_EXTENTS)}")
                    lines.append(f"    if size[{axis}] > {max(WHOLE_EXTENTS)}:")
                    lines.append(f"        raise ValueError({py_str('axis ' + d.axes[0] + ' has size ')} "
                                 f"+ str(size[{axis}]) + {why})")
        lines.append(f"    device = t[{first!r}].device")
        lines.append("    lib = _library(device)")
        args = [f"t[{a!r}].data_ptr()" for a in ptrs]
        args += [f"size[{a!r}]" for a in w.axes]
        args += [f"stride[{a!r}][{x!r}]" for a in ptrs for x in p.axes_of(a)]
        args += [f"scale[{o.name!r}]" for o in scaled_ops(p)]
        args += [f"_DTYPE_CODE[t[{first!r}].dtype]", "_stream(device)"]
        lines.append(f"    code = lib.{w.fn}(")
        lines += [f"        {a}," for a in args]
        lines.append("    )")
        lines.append(f"    _check(lib, code, {p.name!r})")
        out += lines + ["", ""]
    return out


def _loader_wrapper(g, ids) -> list[str]:
    """The Triton module's wrapper (same checks, same call), on CUDA devices only."""
    lines = wrapper(g, ids)
    out: list[str] = []
    i = 0
    replaced = False
    while i < len(lines):
        line = lines[i]
        if "TRITON_INTERPRET" in line and line.strip().startswith("if "):
            indent = line[: len(line) - len(line.lstrip())]
            out.append(f'{indent}if device.type != "cuda":')
            out.append(f'{indent}    raise ValueError(f"the tensors are on {{device}}; this kernel runs on a '
                       'CUDA GPU only "')
            out.append(f'{indent}                     "(compiled with nvcc; on the CPU use the Triton '
                       'backend under TRITON_INTERPRET=1)")')
            i += 1
            depth = 0
            while i < len(lines):
                depth += lines[i].count("(") - lines[i].count(")")
                i += 1
                if depth <= 0:
                    break
            replaced = True
            continue
        out.append(line)
        i += 1
    if not replaced:   # the wrapper changed: put the check after the device is known
        at = next(j for j, x in enumerate(out) if x.strip().startswith("device = "))
        indent = out[at][: len(out[at]) - len(out[at].lstrip())]
        out[at + 1:at + 1] = [f'{indent}if device.type != "cuda":',
                              (f'{indent}    raise ValueError(f"the tensors are on {{device}}; this kernel '
                               'runs on a CUDA GPU only")')]
    if isinstance(g.roles, Attention) and not any(k.key_axis for k in g.kernels):
        # no kernel holds the head dim whole: every head dim runs
        out = [x.replace("if head_dim not in HEAD_DIMS:", "if HEAD_DIMS and head_dim not in HEAD_DIMS:")
               for x in out]
    return out


# What the loader defines or imports itself, besides what it claims per diagram
LOADER_GLOBALS = (*MODULE_GLOBALS, "ctypes", "hashlib", "shutil", "subprocess", "threading", "Path", "_LOCK",
                  "_SIGNATURES", "_CU", "_DTYPE_CODE", "_LIBS", "_CURRENT", "_nvcc", "_cache_dirs",
                  "_compile", "_library", "_check", "_stream")


def loader(g, writers) -> str:
    ids = module_ids(g, LOADER_GLOBALS)
    signatures = {w.fn: (len(pointers(k.plan)), len(w.axes) + sum(len(k.plan.axes_of(a))
                                                                  for a in pointers(k.plan)),
                         len(scaled_ops(k.plan)))
                  for k, w in writers}
    out = ['"""' + py_doc(f"{g.diagram.name}: CUDA kernels generated by napkin from {g.source_file}; this "
                          "loader compiles the .cu file next to it with nvcc on first use (cached by source "
                          "hash) and calls it.") + '"""', ""]
    out += ["# " + py_comment(line) if line else "#" for line in header(g)]
    out += [("# Backend: CUDA C++ in the .cu file of the same name (see its header for how CUDA runs "
             "each configuration)."), ""]
    out += ["import ctypes", "import hashlib", "import math", "import os", "import shutil", "import subprocess",
            "import threading", "from pathlib import Path", "", "import torch", ""]
    out.append("_LOCK = threading.Lock()")
    out.append("_SIGNATURES = {  # launcher -> (pointers, int64 sizes and strides, float scales)")
    for fn, sig in signatures.items():
        out.append(f"    {fn!r}: {sig!r},")
    out.append("}")
    out.append(LOADER_RUNTIME.rstrip())
    out += ["", ""]
    out.append(_loader_configs(writers, ids))
    out += _loader_launchers(writers, ids)
    out += _loader_wrapper(g, ids)
    return checked_python("\n".join(out).rstrip() + "\n", g.source_file)


def cuda_files(g) -> tuple[str, dict[str, str]]:
    """The .cu source of generated diagram `g` and its Python loader ({".py": text})."""
    source, writers = cuda_source(g)
    return source, {".py": loader(g, writers)}


__all__ = ["RENDERED", "Variant", "check_renderable", "cuda_files", "cuda_source", "loader"]
