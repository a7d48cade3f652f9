"""Render a kernel plan as a Triton kernel (`@triton.jit`).

One program is one block of the grid: it owns one index of every grid axis and one tile of every
grouped axis (Section 2.3). Arrays without the streamed axis are loaded once (the head); the loop walks
the streamed axis a chunk at a time (Section 2.4, Figure 27): its loads, the body's primitives as tile
operations, and each reducer's accumulator (Appendix A.3). After the loop the tail finishes the
accumulators and the block saves its outputs.

The loop runs twice: first over the chunks that need no mask (inside the sequence and, under a mask
with block skipping, wholly inside every row's band: below the diagonal of a causal one), then over the
few edge chunks, masked (and under a band's left bound first the chunks on its left edge). Masked
slots get the neutral element of what consumes them: -inf before a softmax or a maximum, zero before a
sum or a contraction. Without block skipping the edge loop is compiled only where the launcher says the
stream has edge chunks (the constexpr EVEN_<stream>): an accumulator that runs on from one loop into
the other makes ptxas serialise the interior loop's wgmma on Hopper (its note C7515).
"""

from __future__ import annotations

from dataclasses import dataclass

from analyzer.codegen.escape import py_comment
from analyzer.codegen.render import (
    MASKS,
    POINTWISE,
    PlanWalk,
    Spelling,
    band,
    band_terms,
    band_words,
    base2_scale,
    check_plan,
    contraction_dims,
    is_online,
    neutral,
    pointers,
    pointwise,
    runtime_axes,
    scaled_ops,
    sink_of,
    skipping_words,
    skips_mask,
    streamed_operands,
)
from analyzer.codegen.triton.ids import KERNEL_LOCALS, KernelIds
from analyzer.common.errors import NapkinError
from analyzer.config.plan import GROUP, STREAM, WHOLE, Dim, KernelPlan
from analyzer.diagram.compiled import Op
from analyzer.model.fusion import Reducer

SPELLING = Spelling(
    unary={
        "exp": "tl.exp({x})",
        "sigmoid": "tl.sigmoid({x})",
        "relu": "tl.maximum({x}, 0.0)",
        "tanh": "(2.0 * tl.sigmoid(2.0 * ({x})) - 1.0)",     # tanh u = 2 sigmoid(2u) - 1: Triton has no tanh
        # GELU, tanh form: 0.5 x (1 + tanh u) = x sigmoid(2u), u = sqrt(2/pi) (x + 0.044715 x^3)
        "gelu": "{x} * tl.sigmoid(1.5957691216057308 * ({x} + 0.044715 * {x} * {x} * {x}))",
        "reciprocal": "1.0 / {x}",
        "rsqrt": "tl.rsqrt({x})",
    },
    binary={"add": "+", "sub": "-", "mul": "*", "div": "/"},
    zero="0.0", neg_inf="float('-inf')", log2e="1.4426950408889634", number="{!r}")
RENDERED = SPELLING.rendered


@dataclass(frozen=True)
class Val:
    """A tile in the generated code: its variable and its dims, in order."""

    name: str
    dims: tuple[str, ...]
    loaded: bool = False      # straight from memory in its storage type (zero in masked slots)


def check_renderable(p: KernelPlan) -> None:
    check_plan(p, "Triton", RENDERED)


class _Writer(PlanWalk):
    def __init__(self, p: KernelPlan, ids: KernelIds, padded: dict[str, bool]) -> None:
        super().__init__(p)
        self.n = ids
        self.padded = padded
        self.lines: list[str] = []
        self.vals: dict[str, Val] = {}
        self.depth = 1

    # -- output ---------------------------------------------------------------------------------------
    def line(self, text: str = "") -> None:
        self.lines.append(("    " * self.depth + text) if text else "")

    def comment(self, text: str) -> None:
        self.line(f"# {py_comment(text)}")

    # -- names ----------------------------------------------------------------------------------------
    def offs(self, axis: str) -> str:
        return self.n("offs_{}", axis)

    def mask_of(self, dim: str) -> str:
        return self.n("mask_{}", dim)

    def tile_var(self, array: str) -> str:
        return self.n("{}_tile", array, case="lower")

    def val(self, op: str, suffix: str = "val") -> str:
        """The register tile of op `op` (`<op>_val`), or a step of it (`<op>_s`, `<op>_e`)."""
        return self.n("{}_" + suffix, op, case="lower")

    # -- indices and masks ----------------------------------------------------------------------------
    def size(self, axis: str) -> str:
        dim = self.p.dim(self.p.dim_of[axis]) if axis in self.p.dim_of else None
        return self.n.whole(axis) if dim is not None and dim.kind == WHOLE else self.n.size(axis)

    def expand(self, vector: str, dim: str, dims: tuple[str, ...]) -> str:
        """A per-dimension vector laid along `dim` of a tile with `dims`."""
        if len(dims) == 1:
            return vector
        return f"{vector}[:, None]" if dims[0] == dim else f"{vector}[None, :]"

    def mask(self, dims: tuple[str, ...], *, chunk_masked: bool) -> str | None:
        parts = []
        for dim in dims:
            d = self.p.dim(dim)
            if d.kind == STREAM and not chunk_masked:
                continue
            parts.append(self.expand(self.mask_of(dim), dim, dims))
        return " & ".join(parts) if parts else None

    def pointer(self, array: str, dims: tuple[str, ...], chunk_origin: bool = False) -> str:
        terms = [self.n.ptr(array), self.n("base_{}", array)]
        for axis in self.p.axes_of(array):
            if axis in self.p.grid:
                continue
            dim = self.p.dim_of[axis]
            stream = chunk_origin and self.p.dim(dim).kind == STREAM
            offs = self.n("arange_{}", dim) if stream else self.offs(axis)
            terms.append(f"{self.expand(offs, dim, dims)} * {self.n.stride(array, axis)}")
        return " + ".join(terms)

    # -- values ---------------------------------------------------------------------------------------
    def oriented(self, v: Val, dims: tuple[str, ...]) -> str:
        if v.dims == dims:
            return v.name
        if len(dims) == 2 and v.dims == (dims[1], dims[0]):
            return f"tl.trans({v.name})"
        raise NapkinError(f"internal: cannot orient {v.name} [{', '.join(v.dims)}] as [{', '.join(dims)}]")

    def broadcast(self, v: Val, dims: tuple[str, ...]) -> str:
        if len(v.dims) == len(dims):
            return self.oriented(v, dims)
        if len(v.dims) == 1 and len(dims) == 2:
            return self.expand(v.name, v.dims[0], dims)
        if not v.dims:
            return v.name
        raise NapkinError(f"internal: cannot broadcast {v.name} [{', '.join(v.dims)}] to [{', '.join(dims)}]")

    @staticmethod
    def widened(v: Val) -> Val:
        """`v` in fp32: a tile straight from memory (fp16 or bf16) converted, anything else as it is."""
        return Val(f"{v.name}.to(tl.float32)", v.dims) if v.loaded else v

    def value(self, name: str, *, masked: bool) -> Val:
        if name not in self.vals:
            self.load(name, masked=masked)
        return self.vals[name]

    def load(self, array: str, *, masked: bool) -> None:
        dims = self.p.tiles_of[array]
        streamed = self.stream is not None and self.stream.name in dims
        ptr = self.n("ptrs_{}", array)
        if streamed:
            ptr += f" + start * {self.n.stride(array, self.stream.axes[0])}"
        mask = self.mask(dims, chunk_masked=masked)
        where = "" if mask is None else f", mask={mask}, other=0.0"
        self.line(f"{self.tile_var(array)} = tl.load({ptr}{where})")
        self.vals[array] = Val(self.tile_var(array), dims, loaded=True)

    # -- the kernel -----------------------------------------------------------------------------------
    def render(self, name: str) -> str:
        p = self.p
        s = p.schedule
        head = [f"def {name}("]
        for param, note in self.n.params:
            head.append(f"    {param},{'  # ' + py_comment(note) if note else ''}")
        head.append("):")
        first = next((a for a in pointers(p) if a in s.loads), None)
        if first is not None:
            self.line(f"ELEM = {self.n.ptr(first)}.dtype.element_ty  # storage type of the inputs")
        self.blocks()
        self.comment("GMEM -> SMEM -> registers: the tiles loaded once per block (head)")
        for array in s.loads + s.resident:
            if self.stream is None or self.stream.name not in p.tiles_of[array]:
                self.load(array, masked=True)
        self.walk()
        self.saves()
        return "\n".join(["@triton.jit", *head, *self.lines])

    def blocks(self) -> None:
        p, n = self.p, self.n
        group_axes = [(a, t) for d in p.groups for a, t in zip(d.axes, d.tiles, strict=True)]
        if p.banded:
            r, c = p.banded
            band = n.band()
            self.comment(f"which block: bands of {band} row tiles, walked down the rows first, so that "
                         "one wave of blocks")
            self.comment("covers a square of the output and shares its inputs' tiles in L2 (the cache "
                         "level's optimal tile is square: Theorem 2)")
            self.line("pid = tl.program_id(0)")
            self.line(f"{n('nblk_{}', r)} = tl.cdiv({n.size(r)}, {n.tile(r)})")
            self.line(f"band = {band} * tl.cdiv({n.size(c)}, {n.tile(c)})")
            self.line(f"first = (pid // band) * {band}")
            self.line(f"rows = tl.minimum({n('nblk_{}', r)} - first, {band})")
            self.line(f"{n('blk_{}', r)} = first + (pid % band) % rows")
            self.line(f"{n('blk_{}', c)} = (pid % band) // rows")
        else:
            self.comment("which block: one index of each grid axis, one tile of each grouped axis")
        if group_axes and not p.banded:
            self.line("rest = tl.program_id(0)")
            for axis, _ in reversed(group_axes):
                self.line(f"{n('blk_{}', axis)} = rest % tl.cdiv({n.size(axis)}, {n.tile(axis)})")
                self.line(f"rest = rest // tl.cdiv({n.size(axis)}, {n.tile(axis)})")
        if p.grid:
            self.line(f"rest = tl.program_id({1 if group_axes else 0})")
            for axis in reversed(p.grid):
                self.line(f"{n('idx_{}', axis)} = (rest % {n.size(axis)}).to(tl.int64)")
                self.line(f"rest = rest // {n.size(axis)}")
        for array in pointers(p):
            terms = [f"{n('idx_{}', a)} * {n.stride(array, a)}" for a in p.axes_of(array) if a in p.grid]
            self.line(f"{n('base_{}', array)} = {' + '.join(terms) if terms else '0'}")
        self.comment("tile indices and masks, per dimension")
        for d in p.dims:
            self.dim_indices(d)
        for array in pointers(p):
            dims = p.tiles_of[array]
            self.line(f"{n('ptrs_{}', array)} = {self.pointer(array, dims, chunk_origin=True)}")

    def dim_indices(self, d: Dim) -> None:
        n = self.n
        block = n.block(d.name)
        if d.kind == WHOLE:
            (axis,) = d.axes
            self.line(f"{self.offs(axis)} = tl.arange(0, {block})")
            self.line(f"{self.mask_of(d.name)} = {self.offs(axis)} < {n.whole(axis)}")
            return
        if d.kind == STREAM:
            self.line(f"{n('arange_{}', d.name)} = tl.arange(0, {block})")
            return
        if len(d.axes) == 1:
            (axis,) = d.axes
            self.line(f"{self.offs(axis)} = {n('blk_{}', axis)} * {n.tile(axis)} + tl.arange(0, {block})")
            mask = f"{self.offs(axis)} < {n.size(axis)}"
            if self.padded.get(d.name):   # parenthesised: & binds tighter than <
                mask = f"({mask}) & (tl.arange(0, {block}) < {n.tile(axis)})"
            self.line(f"{self.mask_of(d.name)} = {mask}")
            return
        flat = n("r_{}", d.name)
        self.line(f"{flat} = tl.arange(0, {block})")
        inner: list[str] = []
        masks = []
        for axis in reversed(d.axes):
            below = " * ".join(inner) or "1"
            self.line(f"{self.offs(axis)} = {n('blk_{}', axis)} * {n.tile(axis)} + "
                      f"({flat} // ({below})) % {n.tile(axis)}")
            masks.append(f"({self.offs(axis)} < {n.size(axis)})")
            inner.append(n.tile(axis))
        if self.padded.get(d.name):
            masks.append(f"({flat} < {' * '.join(inner)})")
        self.line(f"{self.mask_of(d.name)} = {' & '.join(reversed(masks))}")

    # -- the streamed loop (its order: analyzer.codegen.render.PlanWalk) --------------------------------
    def chunks_open(self) -> None:
        """The loop's bounds: `hi` the stream's end for this block, `mid` the end of the interior; under a
        sliding window or a band's left bound `lo` its start and `whole` the first chunk every row of the
        block sees whole."""
        st, n = self.stream, self.n
        axis = st.axes[0]
        block = n.block(st.name)
        skip = self.s.skip
        if skip is not None:
            q = skip.query
            row0 = f"{n('blk_{}', q)} * {n.tile(q)}"
            if skip.after is None:
                self.comment(f"block skipping under a band: this block's {q} rows see {axis} to its end")
                self.line(f"hi = {n.size(axis)}")
                self.line(f"mid = ({n.size(axis)} // {block}) * {block}")
            else:
                a = f" + {int(skip.after)}" if skip.after else ""      # the keys a row sees past its own
                self.comment(skipping_words(int(skip.after), q, axis))
                self.line(f"hi = tl.minimum({n.size(axis)}, ({n('blk_{}', q)} + 1) * {n.tile(q)}{a})")
                self.line(f"mid = tl.minimum(({n.size(axis)} // {block}) * {block}, "
                          f"(({row0} + 1{a}) // {block}) * {block})")
            if skip.before is not None:
                w = int(skip.before)
                self.comment(f"and a sliding window: each row sees the {w} {axis} before it, so the block "
                             f"starts at the chunk of its first row's first {axis}")
                self.line(f"lo = (tl.maximum({row0} - {w}, 0) // {block}) * {block}")
                self.line(f"whole = tl.minimum(mid, tl.maximum(lo, tl.cdiv(tl.maximum({row0} + {n.tile(q)} - 1 - {w}, "
                          f"0), {block}) * {block}))")
        else:
            self.line(f"hi = {n.size(axis)}")
            self.line(f"mid = ({n.size(axis)} // {block}) * {block}")

    SPANS = {"left": ("lo", "whole", "the window's left edge: masked"),
             "interior": ("0", "mid", "interior chunks: no masks"),
             "edge": ("mid", "hi", "edge chunks: masked")}

    def pass_open(self, *, masked: bool, span: str) -> None:
        """One loop over the chunks: the interior ones (no masks), the edge ones (masked), or under a
        sliding window those at its left edge (masked; the interior then starts at `whole`)."""
        st, n = self.stream, self.n
        axis = st.axes[0]
        block = n.block(st.name)
        lo, end, what = self.SPANS[span]
        if span == "interior" and "left" in self.spans():
            lo = "whole"
        if span == "edge" and self.n.even():
            # compiled only where the launcher says there are edge chunks: a loop that carries the
            # accumulators on from the interior's makes ptxas serialise the interior's wgmma (its C7515)
            self.line(f"if not {self.n.even()}:")
            self.depth += 1
        self.comment(f"stream {axis} in chunks of {block} ({what})")
        self.line(f"for start in range({lo}, {end}, {block}):")
        self.depth += 1
        self.line(f"{self.offs(axis)} = start + {n('arange_{}', st.name)}")
        if masked:
            self.line(f"{self.mask_of(st.name)} = {self.offs(axis)} < hi")

    def pass_close(self, *, masked: bool, span: str) -> None:
        self.depth -= 2 if span == "edge" and self.n.even() else 1

    def init(self, r: Reducer) -> None:
        op = r.op
        dims = self.out_dims(op)
        shape = ", ".join(self.n.block(d) for d in dims)
        acc = self.n("acc_{}", op.name)
        if is_online(r):
            rows = self.n.block(dims[0])
            self.line(f"{self.n('m_{}', op.name)} = tl.full(({rows},), float('-inf'), tl.float32)"
                      "  # running maximum")
            self.line(f"{self.n('l_{}', op.name)} = tl.zeros(({rows},), tl.float32)  # running sum")
            self.line(f"{acc} = tl.zeros(({shape},), tl.float32)")
        elif op.primitive.name == "max":
            self.line(f"{acc} = tl.full(({shape},), float('-inf'), tl.float32)")
        else:
            self.line(f"{acc} = tl.zeros(({shape},), tl.float32)")

    def out_dims(self, op: Op) -> tuple[str, ...]:
        if op.primitive.contraction:
            return self.contraction_dims(op)
        return self.p.tiles_of[op.name]

    def contraction_dims(self, op: Op) -> tuple[str, ...]:
        m, n, _ = contraction_dims(self.p, op)
        return (m, n)

    def finish(self, r: Reducer) -> None:
        name = r.op.name
        dims = self.out_dims(r.op)
        acc = self.n("acc_{}", name)
        self.comment(f"tail of {name}: the accumulator is complete")
        if is_online(r):
            l = self.n("l_{}", name)
            sink = sink_of(r)
            if sink is not None:
                m = self.n("m_{}", name)
                s = self.broadcast(self.widened(self.value(sink, masked=True)), dims[:1])
                self.comment(f"the sink logits {sink} join the sum once a row: exp(sink - m), in base 2 (m holds "
                             "log2 e times the scores)")
                self.line(f"{l} = {l} + tl.math.exp2({s} * {SPELLING.log2e} - tl.where({m} == float('-inf'), "
                          f"0.0, {m}))")
            if self.n.lse is not None and self.n.lse[0] == name:
                self.lse_store(name, dims[0])
            self.comment("a row that saw no key (a band past the keys' end) holds 0, as FlashAttention's, not 0 / 0")
            self.line(f"{self.val(name)} = {acc} / tl.where({l} == 0.0, 1.0, {l})[:, None]")
        else:
            self.line(f"{self.val(name)} = {acc}")
        self.vals[name] = Val(self.val(name), dims)

    def lse_store(self, name: str, row: str) -> None:
        """The rows' log-sum-exp of online softmax `name` stored where the call asks for it (its rows: dim
        `row`, the grid's axes of the output beside it)."""
        n = self.n
        m, total = n("m_{}", name), n("l_{}", name)
        _, axes = n.lse
        tiled = [a for a in axes if a not in self.p.grid]
        if any(self.p.dim_of[a] != row for a in tiled):
            raise NapkinError(f"the log-sum-exp of {name}: its rows span more than one dim of the kernel",
                              hint="please report this with the diagram file")
        terms = [n.lse_ptr(), *(f"{n('idx_{}', a)} * {n.lse_stride(a)}" for a in axes if a in self.p.grid),
                 *(f"{self.expand(self.offs(a), row, (row,))} * {n.lse_stride(a)}" for a in tiled)]
        mask = self.mask((row,), chunk_masked=True)
        lse = n("lse_{}", name)
        self.comment("the rows' log-sum-exp, where the call asks for it: ln 2 (m + log2 l), m and l in exp2's")
        self.comment("units; -inf for a row that saw no key")
        self.line(f"if {n.store_lse()}:")
        self.line(f"    {lse} = tl.where({total} == 0.0, float('-inf'), ({m} + tl.math.log2({total})) * "
                  "0.6931471805599453)")
        self.line(f"    tl.store({' + '.join(terms)}, {lse}{'' if mask is None else f', mask={mask}'})")

    # -- primitives (which of them, in what order: analyzer.codegen.render.PlanWalk) ---------------------
    def primitive(self, op: Op, *, masked: bool) -> None:
        name, prim = op.name, op.primitive.name
        out = self.val(name)
        ins = [self.value(i, masked=masked) for i in op.inputs]
        if prim == "dot":
            m, n = self.contraction_dims(op)
            k = self.p.dim_of[op.applied.over]
            a, b = self.operands(op, ins, (m, k), (k, n))
            self.comment(f"{name} = {op.inputs[0]} . {op.inputs[1]} over {op.applied.over} "
                         "(tensor cores, fp32 accumulate)")
            self.line(f"{out} = tl.dot({a}, {b})")
            self.vals[name] = Val(out, (m, n))
            return
        # everything but a contraction computes in fp32: a loaded fp16 tile is widened first (sums,
        # squares and rsqrt in fp16 lose digits, and Triton's math takes fp32 only)
        (x, *rest) = ins = [self.widened(v) for v in ins]
        if prim in MASKS:
            if skips_mask(self.p, op, masked=masked):
                self.vals[name] = x   # interior chunks lie inside every row's band (below the diagonal)
                return
            q, k = op.applied.query, op.applied.key
            oq = self.expand(self.offs(q), self.p.dim_of[q], x.dims)
            ok = self.expand(self.offs(k), self.p.dim_of[k], x.dims)
            terms = band_terms(oq, ok, *band(op))
            inside = terms[0] if len(terms) == 1 else " & ".join(f"({t})" for t in terms)
            self.line(f"{out} = tl.where({inside}, {x.name}, {SPELLING.neg_inf})  # {band_words(*band(op))}")
        elif prim == "alibi":       # v - m |i - j|, the positions of the query and key axes
            (m,) = rest
            q, k = op.applied.query, op.applied.key
            oq = self.expand(self.offs(q), self.p.dim_of[q], x.dims)
            ok = self.expand(self.offs(k), self.p.dim_of[k], x.dims)
            self.line(f"{out} = {x.name} - {self.broadcast(m, x.dims)} * tl.abs({oq} - {ok}).to(tl.float32)"
                      "  # ALiBi's linear bias")
        elif prim in POINTWISE:
            dims = x.dims
            if rest:        # a binary op: both operands laid out as the one with more dims
                (y,) = rest
                dims = x.dims if len(x.dims) >= len(y.dims) else y.dims
                args = [self.broadcast(x, dims), self.broadcast(y, dims)]
            else:
                args = [x.name]
            self.line(f"{out} = {pointwise(SPELLING, op, args, self.n)}")
            self.vals[name] = Val(out, dims)
            return
        elif prim == "softmax":
            self.softmax(op, x, rest[0] if rest else None)
            return
        elif prim in ("sum", "max"):
            axis = x.dims.index(self.p.dim_of[op.applied.over])
            mask = self.mask(x.dims, chunk_masked=True)
            src = x.name if mask is None else f"tl.where({mask}, {x.name}, {neutral(SPELLING, prim)})"
            self.line(f"{out} = tl.{prim}({src}, {axis})")
            self.vals[name] = Val(out, tuple(d for d in x.dims if d != self.p.dim_of[op.applied.over]))
            return
        self.vals[name] = Val(out, x.dims)

    def softmax(self, op: Op, x: Val, sink: Val | None = None) -> None:
        """The softmax of a whole row; `sink`, its sink logits, join the sum as exp(sink - max)."""
        name = op.name
        over = self.p.dim_of[op.applied.over]
        axis = x.dims.index(over)
        scale = f" * {self.n.scale(name)}" if op.applied.scale is not None else ""
        mask = self.mask(x.dims, chunk_masked=True)
        shifted, exp, out = self.val(name, "s"), self.val(name, "e"), self.val(name)
        self.comment(f"{name} = softmax of {op.inputs[0]} over {op.applied.over}")
        self.line(f"{shifted} = {x.name}{scale}")
        if mask is not None:
            self.line(f"{shifted} = tl.where({mask}, {shifted}, {SPELLING.neg_inf})")
        keep = "[:, None]" if axis == 1 else "[None, :]"
        if sink is None:
            self.line(f"{exp} = tl.exp({shifted} - tl.max({shifted}, {axis}){keep})")
            self.line(f"{out} = {exp} / tl.sum({exp}, {axis}){keep}")
        else:
            rows = tuple(d for d in x.dims if d != over)
            top = self.val(name, "m")
            self.line(f"{top} = tl.max({shifted}, {axis})")
            self.line(f"{exp} = tl.exp({shifted} - {top}{keep})")
            self.comment(f"the sink logits {op.sink} join the sum: exp(sink - max)")
            self.line(f"{out} = {exp} / (tl.sum({exp}, {axis}) + tl.exp({self.broadcast(sink, rows)} - {top})){keep}")
        self.vals[name] = Val(out, x.dims)

    def operands(self, op: Op, ins: list[Val], a_dims, b_dims) -> tuple[str, str]:
        """Both operands of a contraction, oriented (m, k) and (k, n), in one storage type."""
        a, b = ins
        elem = next((f"{v.name}.dtype" for v in (b, a) if v.loaded), "ELEM")
        out = []
        for v, dims in ((a, a_dims), (b, b_dims)):
            text = self.oriented(v, dims)
            out.append(text if v.loaded else f"{text}.to({elem})")
        return out[0], out[1]

    def accumulate(self, r: Reducer, *, masked: bool) -> None:
        op = r.op
        name = op.name
        st = self.stream
        acc = self.n("acc_{}", name)
        if op.primitive.contraction:
            first, second, scale_op = streamed_operands(r)
            a = self.value(first, masked=masked)
            b = self.value(second, masked=masked)
            m, n = self.out_dims(op)
            k = st.name
            if is_online(r):
                self.online(name, scale_op, a, b, (m, k), (k, n), masked=masked)
            else:
                self.comment(f"{name} += {first} . {second} over this chunk of {st.axes[0]} (A.3.1)")
                pa, pb = self.operands(op, [a, b], (m, k), (k, n))
                # a computed operand holds whatever its ops make of the zeros loaded past the edge
                # (0/0, rsqrt(0)): zero it there, or one inf times a loaded zero spoils a whole row
                if masked and not a.loaded:
                    pa = f"tl.where({self.expand(self.mask_of(k), k, (m, k))}, {pa}, 0.0)"
                if masked and not b.loaded:
                    pb = f"tl.where({self.expand(self.mask_of(k), k, (k, n))}, {pb}, 0.0)"
                self.line(f"{acc} = tl.dot({pa}, {pb}, {acc})")
            return
        x = self.widened(self.value(op.inputs[0], masked=masked))
        axis = x.dims.index(st.name)
        src = x.name
        if masked:
            src = (f"tl.where({self.expand(self.mask_of(st.name), st.name, x.dims)}, {x.name}, "
                   f"{neutral(SPELLING, op.primitive.name)})")
        if op.primitive.name == "sum":
            self.line(f"{acc} = {acc} + tl.sum({src}, {axis})")
        else:
            self.line(f"{acc} = tl.maximum({acc}, tl.max({src}, {axis}))")

    def online(self, name: str, scale_op: Op, s: Val, v: Val, s_dims, v_dims, *, masked: bool) -> None:
        """Online softmax folded into the contraction (Appendix A.3.2, Table 4), in base 2."""
        x = self.stream.name
        acc, m, l = self.n("acc_{}", name), self.n("m_{}", name), self.n("l_{}", name)
        scale = base2_scale(SPELLING, scale_op, self.n)
        self.comment(f"{name}: online softmax over this chunk (running max m, sum l; A.3.2), "
                     "in base 2: exp(t) = exp2(t log2 e)")
        self.line(f"t = {self.oriented(s, s_dims)} * ({scale})")
        if masked:
            self.line(f"t = tl.where({self.expand(self.mask_of(x), x, s_dims)}, t, {SPELLING.neg_inf})")
        self.line(f"m_new = tl.maximum({m}, tl.max(t, 1))")
        self.line("m_use = tl.where(m_new == float('-inf'), 0.0, m_new)  # rows with nothing seen yet")
        self.line("p = tl.math.exp2(t - m_use[:, None])")
        self.line(f"alpha = tl.math.exp2({m} - m_use)")
        self.line(f"{l} = {l} * alpha + tl.sum(p, 1)")
        self.line(f"{m} = m_new")
        elem = f"{v.name}.dtype" if v.loaded else "ELEM"
        self.line(f"{acc} = tl.dot(p.to({elem}), {self.oriented(v, v_dims)}, {acc} * alpha[:, None])")

    def saves(self) -> None:
        self.comment("registers -> GMEM: the block's outputs")
        for name in self.p.schedule.saves:
            v = self.vals[name]
            dims = self.p.tiles_of[name]
            mask = self.mask(dims, chunk_masked=True)
            where = "" if mask is None else f", mask={mask}"
            ptr = self.pointer(name, dims)
            self.line(f"tl.store({ptr}, {self.oriented(v, dims)}.to({self.n.ptr(name)}.dtype.element_ty)"
                      f"{where})")


def render_kernel(p: KernelPlan, name: str, ids: KernelIds, padded: dict[str, bool] | None = None) -> str:
    """The @triton.jit source of plan `p`, a function called `name` whose identifiers are `ids`;
    `padded`: dims whose tile is not a power of two in some configuration the file carries (their
    extra slots are masked)."""
    check_renderable(p)
    return _Writer(p, ids, padded or {}).render(name) + "\n"


__all__ = ["render_kernel", "KernelIds", "KERNEL_LOCALS", "RENDERED", "SPELLING", "pointers", "scaled_ops",
           "runtime_axes", "check_renderable", "GROUP"]
