"""What one block of the portable Triton kernel allocates in SMEM, counted from the plan it is rendered
from, as Triton 3 lowers the generated code (analyzer.codegen.triton).

The generated kernel loads the tiles without the streamed axis once, before the loop (the head), walks
the streamed axis a chunk at a time (the loop), finishes its accumulators after it (the tail) and keeps
every value of its own in registers. Triton then puts in SMEM:

- a tile loaded from memory that a contraction (tl.dot) reads as it is: the tensor cores read their
  operands from SMEM (wgmma its second operand, and its first where that comes from memory; mma.sync
  both, through ldmatrix). A head tile stays there from the head to its last use. A streamed tile has a
  buffer per load in flight: `num_stages` with wgmma (the asynchronous MMA reads one more),
  `num_stages - 1` with mma.sync, and one where nothing is pipelined (`num_stages = 1`);
- a streamed tile that only the threads read: `num_stages - 1` buffers of the asynchronous copy, none
  at one stage (it is loaded straight into registers); a head tile the threads alone read stays in
  registers;
- a computed tile a contraction reads as its second operand (always from SMEM), or as its first where
  its values are laid out as loaded values are, not as a wgmma accumulator's (the layout change goes
  through SMEM; with mma.sync, an accumulator's values go through it too): one copy in the inputs'
  element type, while the contraction runs. (Compiled as one loop, where the stream is whole chunks,
  Triton may read the loaded tiles in the first operand's layout and keep it in registers for wgmma:
  RMSNorm-matmul then allocates 16 KiB less. The count is the kernel with its edge loop, the most
  either allocates, so that it holds at every size.)
- scratch while a reduction runs across warps over values laid out as loaded ones (a word per row
  and warp across), or a row vector moves from that layout to an accumulator's (the online softmax's
  rescale over loaded scores: a word per row).

A GPU without cp.async (compute capability below 8.0) pipelines nothing, and Triton's dot there stages
its operands through SMEM in fp32: a head tile the loop reads once, before the loop and for all of it
(the conversion is hoisted out of the loop), the others one at a time.

The block's allocation is the most of these live at once, in the head, the loop or the tail; Triton's
layout conversions for the stores after the loop reuse what the loop freed. This count is the portable
kernel's legality (analyzer.config.choose), its blocks per SM, and what tests/kernels/test_allocation.py
holds Triton's own allocation to, compiling every shipped diagram's kernel for sm_90a at its defaults.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

from analyzer.common.dtypes import bytes_per_value
from analyzer.config.plan import GROUP, STREAM, KernelPlan, next_pow2, streamed_operands
from analyzer.diagram.compiled import Op
from analyzer.hardware import Profile

PHASES = ("head", "loop", "tail")
SCRATCH_WORD = 4          # bytes per row (and warp) of a reduction's or a layout conversion's scratch
WARP_THREADS = 32         # threads of a warp (Triton's NVIDIA layouts)
VECTOR_BYTES = 16         # what a thread of a load's layout holds of the contiguous dimension
ASYNC_COPY = (8, 0)       # compute capability from which Triton pipelines loads with cp.async
FP32 = 4                  # bytes of an operand Triton's dot stages without tensor-core pipelining


@dataclass(frozen=True)
class Buffer:
    """One allocation: what it holds, the phases it is live in, its bytes."""

    name: str
    phases: tuple[str, ...]
    bytes: int
    why: str


@dataclass(frozen=True)
class Allocation:
    """The SMEM buffers of one block of the portable kernel."""

    buffers: tuple[Buffer, ...]

    def at(self, phase: str) -> int:
        """Bytes live in `phase` (head, loop or tail)."""
        return sum(b.bytes for b in self.buffers if phase in b.phases)

    @property
    def smem_bytes(self) -> int:
        """The block's SMEM: the most live in any phase."""
        return max(self.at(phase) for phase in PHASES)

    def largest(self, n: int = 3) -> str:
        """The `n` largest buffers of the fullest phase, for a message."""
        phase = max(PHASES, key=self.at)
        held = sorted((b for b in self.buffers if phase in b.phases), key=lambda b: -b.bytes)
        return ", ".join(f"{b.name} {b.bytes} B" for b in held[:n])


def allocation(p: KernelPlan, sizes: Mapping[str, int], *, stages: int, warps: int, dtype: str,
               profile: Profile) -> Allocation:
    """The SMEM of one block of plan `p`'s portable kernel at `stages` pipeline stages and `warps` warps;
    `sizes`: axis -> size for the axes a block holds whole (the head dim); `dtype`: the inputs' element
    type, which computed operands are converted to."""
    s = p.schedule
    d = p.diagram
    loads = tuple(dict.fromkeys((*s.loads, *s.resident)))
    streamed = {a for a in loads if p.stream is not None and p.stream.name in p.tiles_of[a]}
    reducer_of = {r.op.name: r for r in s.reducers}
    paired = {r.softmax.name for r in s.reducers if r.softmax is not None}
    phase_of = {op.name: ("loop" if p.stream is not None else "head") for op in s.body}
    phase_of.update({op.name: "head" for op in s.head})
    phase_of.update({op.name: "tail" for op in s.tail})
    pipelined = _version(profile) >= ASYNC_COPY
    wgmma = profile.divisors.mma_instruction == "wgmma"
    element = bytes_per_value(dtype)

    def elements(name: str) -> int:
        return math.prod(_extent(p, dim, sizes) for dim in p.tiles_of[name])

    def rows(name: str, over: str) -> int:
        return elements(name) // _extent(p, p.dim_of[over], sizes)

    laid_as_loaded = _loaded_layout(s.ops, loads)
    read_by_dot: dict[str, str] = {}       # loaded tile -> its last phase
    last_use: dict[str, str] = {}
    staged: list[Buffer] = []
    one_at_a_time: dict[str, int] = {}     # without cp.async: the largest operand staged in each phase
    for op in s.ops:
        phase = phase_of[op.name]
        for name in op.inputs:
            last_use[name] = phase
        if op.name in paired:
            continue             # folded into its contraction (online softmax)
        online = False
        if op.name in reducer_of and op.primitive.contraction:
            r = reducer_of[op.name]
            first, second, _ = streamed_operands(r)
            online = r.softmax is not None or op.primitive.name == "softmax_dot"
        elif op.primitive.contraction:
            first, second = op.operands
        else:
            staged += _scratch(p, op, phase, laid_as_loaded, elements, lambda dim: _extent(p, dim, sizes), warps,
                               element)
            continue
        last_use[first] = last_use[second] = phase
        if not pipelined:        # Triton's dot without cp.async: fp32 operands staged in SMEM
            for name in (first, second):
                if name in loads and name not in streamed and phase == "loop":
                    read_by_dot[name] = phase          # a head tile's, hoisted out of the loop
                else:
                    one_at_a_time[phase] = max(one_at_a_time.get(phase, 0), elements(name) * FP32)
            continue
        if online:               # its first operand is computed from the scores: p = exp(t - m)
            if laid_as_loaded[first] or not wgmma:
                staged.append(Buffer(f"{op.name}'s probabilities", (phase,), elements(first) * element,
                                     "a computed first operand"))
            if laid_as_loaded[first]:
                staged.append(Buffer(f"{op.name}'s rescale", (phase,),
                                     rows(first, op.applied.over) * SCRATCH_WORD,
                                     "a row vector moved to the accumulator's layout"))
        elif first in loads:
            read_by_dot[first] = phase
        elif laid_as_loaded[first] or not wgmma:
            staged.append(Buffer(f"{first} for {op.name}", (phase,), elements(first) * element,
                                 "a computed first operand"))
        if second in loads:
            read_by_dot[second] = phase
        else:
            staged.append(Buffer(f"{second} for {op.name}", (phase,), elements(second) * element,
                                 "a computed second operand"))
    staged += [Buffer("an fp32 operand", (phase,), n, "operands staged one at a time")
               for phase, n in one_at_a_time.items()]
    held: list[Buffer] = []
    for name in loads:
        size = elements(name) * (bytes_per_value(d.arrays[name].dtype) if pipelined else FP32)
        if name in streamed:
            if pipelined and name in read_by_dot:
                count = max(stages if wgmma else stages - 1, 1)
                why = "a streamed tile a contraction reads, a buffer per load in flight"
            elif pipelined:
                count = stages - 1
                why = "a streamed tile the threads read, the asynchronous copy's buffers"
            else:
                count = 0
                why = ""
            if count:
                held.append(Buffer(f"{name} x {count}", ("loop",), count * size, why))
        elif name in read_by_dot:
            end = PHASES.index(last_use.get(name, "head"))
            held.append(Buffer(name, PHASES[:end + 1], size, "a head tile a contraction reads"))
    return Allocation(tuple(held + staged))


def register_bytes(p: KernelPlan, sizes: Mapping[str, int], *, stages: int, profile: Profile) -> int:
    """Bytes the block's threads hold in registers at once, the most of the head, the loop and the
    tail: each accumulator in fp32 (and an online softmax's running maximum and sum) from the loop to
    the tail; each op's output in fp32 where it is computed; a tile loaded into registers (a head tile
    the threads read, until its last use; a streamed one that goes through registers: at one stage, or
    read by the threads); a head tile bound for SMEM passes through registers in the head. An estimate
    of what the compiler allots, for kernels outside Section 5's model (analyzer.config.kernels), whose
    register count Table 1 does not give."""
    s = p.schedule
    d = p.diagram
    loads = tuple(dict.fromkeys((*s.loads, *s.resident)))
    streamed = {a for a in loads if p.stream is not None and p.stream.name in p.tiles_of[a]}
    pipelined = _version(profile) >= ASYNC_COPY and stages > 1
    phase_of = {op.name: ("loop" if p.stream is not None else "head") for op in s.body}
    phase_of.update({op.name: "head" for op in s.head})
    phase_of.update({op.name: "tail" for op in s.tail})
    reducer_of = {r.op.name: r for r in s.reducers}
    paired = {r.softmax.name for r in s.reducers if r.softmax is not None}
    read_by_dot: set[str] = set()
    last_use: dict[str, str] = {}
    for op in s.ops:
        inputs = op.operands if op.primitive.contraction else op.inputs
        if op.name in reducer_of and op.primitive.contraction:
            inputs = streamed_operands(reducer_of[op.name])[:2]
        for name in inputs:
            last_use[name] = max(last_use.get(name, "head"), phase_of[op.name], key=PHASES.index)
        if op.sink is not None:    # a softmax's sink joins the sum once the row is complete
            phase = "tail" if op.name in reducer_of else phase_of[op.name]
            last_use[op.sink] = max(last_use.get(op.sink, "head"), phase, key=PHASES.index)
        if op.primitive.contraction and op.name not in paired:
            first, second = inputs
            online = op.name in reducer_of and (reducer_of[op.name].softmax is not None
                                                or op.primitive.name == "softmax_dot")
            read_by_dot |= {second} if online else {first, second}    # online: p, not the scores

    def elements(name: str) -> int:
        return math.prod(_extent(p, dim, sizes) for dim in p.tiles_of[name])

    live = dict.fromkeys(PHASES, 0)
    for name in loads:
        size = elements(name) * bytes_per_value(d.arrays[name].dtype)
        if name in streamed:
            if not pipelined or name not in read_by_dot:
                live["loop"] += size
        elif name in read_by_dot and _version(profile) >= ASYNC_COPY:
            live["head"] += size
        else:
            for phase in PHASES[:PHASES.index(last_use.get(name, "head")) + 1]:
                live[phase] += size
    for op in s.ops:
        if op.name in paired:
            continue
        size = elements(op.name) * 4
        if op.name in reducer_of:
            r = reducer_of[op.name]
            rows = math.prod(_extent(p, p.dim_of[a], sizes) for a in dict.fromkeys(r.rows)
                             if a in p.dim_of)
            extra = 2 * rows * 4 if r.rows else 0
            live["loop"] += size + extra
            live["tail"] += size
        else:
            live[phase_of[op.name]] += size
    return max(live.values())


def _extent(p: KernelPlan, dim: str, sizes: Mapping[str, int]) -> int:
    """A tile dimension's extent in the generated kernel: a power of two (a tl.arange block)."""
    d = p.dim(dim)
    if d.kind == GROUP:
        return next_pow2(math.prod(d.tiles))
    if d.kind == STREAM:
        return next_pow2(d.tiles[0])
    return next_pow2(int(sizes[d.axes[0]]))


def _loaded_layout(ops: tuple[Op, ...], loads: tuple[str, ...]) -> dict[str, bool]:
    """Whether each value is laid out as loaded values are (True) or as a contraction's accumulator:
    an op's output follows its inputs, an accumulator's layout wins."""
    out = dict.fromkeys(loads, True)
    for op in ops:
        if op.primitive.contraction:
            out[op.name] = False
        else:
            out[op.name] = all(out.get(i, True) for i in op.inputs)
    return out


def _scratch(p: KernelPlan, op: Op, phase: str, laid_as_loaded: dict[str, bool], elements, extent, warps: int,
             element: int) -> list[Buffer]:
    """Scratch of an op on the threads: a reduction over values laid out as loaded ones, where the
    reduced dimension spans more than one warp (a word per row and warp across it), or a loaded row
    vector broadcast into an accumulator's layout (a word per row)."""
    name = op.primitive.name
    inputs = list(op.inputs)
    if name in ("sum", "max", "softmax") and laid_as_loaded.get(inputs[0], True):
        dims = p.tiles_of[inputs[0]]
        over = p.dim_of[op.applied.over]
        rows = elements(inputs[0]) // extent(over)
        # a load's layout gives each thread 16 bytes of the last (contiguous) dimension and a warp 32
        # threads along it; the warps go along it only past that span
        span = WARP_THREADS * VECTOR_BYTES // element
        across = min(warps, -(-extent(over) // span)) if dims and dims[-1] == over else warps
        if across <= 1:
            return []
        return [Buffer(f"{op.name}'s reduction", (phase,), rows * across * SCRATCH_WORD,
                       "a reduction across warps over values laid out as loaded ones")]
    kinds = {laid_as_loaded.get(i, True) for i in inputs}
    if len(kinds) == 2:
        vector = min((i for i in inputs if laid_as_loaded.get(i, True)), key=elements)
        return [Buffer(f"{vector} for {op.name}", (phase,), elements(vector) * SCRATCH_WORD,
                       "a loaded value moved to the accumulator's layout")]
    return []


def _version(profile: Profile) -> tuple[int, int]:
    major, _, minor = profile.compute_capability.partition(".")
    return int(major), int(minor or 0)


__all__ = ["Allocation", "Buffer", "allocation", "register_bytes"]
