"""A kernel with contractions on the tensor cores, as CUDA C++ (the device code; analyzer.codegen.cuda.host
writes its launcher and analyzer.codegen.cuda.fragments its register tiles and mma).

Every register tile is [rows, n], the block's rows (the m dimension of its contractions) split over the
warps in m16 tiles: a warp owns one tile (16 rows) or two (32 rows, when its register tiles are narrow
enough; halves the shared-memory traffic per mma). The mma is `mma.sync.m16n8k16` (fp16 and bf16,
fp32 accumulate; sm_80+), two m16n8k8 on sm_75 (fp16 only; bf16 is refused by the launcher). Loaded
tiles pass through shared memory (rows XOR-swizzled in 16-byte chunks, 16-byte `cp.async` into
`stages` buffers on sm_80+, plain 16-byte loads and one buffer on sm_75; element loads when strides or
alignment forbid 16 bytes) and reach the tensor cores through `ldmatrix`. Accumulators, softmax
statistics and every intermediate are fp32 registers.

The walk over the plan is analyzer.codegen.render.PlanWalk's: the head's tiles are loaded once; the
loop over the chunks of the stream keeps NBUF - 1 chunks in flight, and runs the body on interior
chunks without masks and on the edge chunks masked (under a mask with block skipping, only up to the
diagonal or a band's right edge, and from its left edge); the tail finishes the accumulators; the block
saves its outputs.
"""

from __future__ import annotations

from itertools import product as cartesian

from analyzer.codegen.cuda.common import SPELLING, CudaWriter, unrenderable
from analyzer.codegen.cuda.fragments import COL_E, NEG_INF, CVal, FragmentWriter
from analyzer.codegen.cuda.host import cfg_structs, launcher
from analyzer.codegen.cuda.ids import CudaIds, Functions
from analyzer.codegen.cuda.variants import WHOLE_EXTENTS, Variant, mma_variant
from analyzer.codegen.escape import cpp_comment
from analyzer.codegen.render import (
    MASKS,
    POINTWISE,
    PlanWalk,
    base2_scale,
    contraction_dims,
    is_online,
    loaded,
    neutral,
    pointwise,
    sink_of,
    skipping_words,
    streamed_operands,
)
from analyzer.config.plan import GROUP, WHOLE, Dim, next_pow2
from analyzer.diagram.compiled import Op


class MmaKernel(FragmentWriter):
    """A kernel with contractions, on the tensor cores (module docstring)."""

    def __init__(self, g, k, fns: Functions, ids: CudaIds) -> None:
        CudaWriter.__init__(self, g, k, fns, ids)
        PlanWalk.__init__(self, self.p)
        p = self.p
        self.row = self._row_dim()
        self.vals: dict[str, CVal] = {}
        self.loaded = loaded(p)
        self.variants = self._variants()
        self.tmp = 0
        self._check()

    # -- structure -------------------------------------------------------------------------------
    def _row_dim(self) -> Dim:
        p = self.p
        rows = {contraction_dims(p, o)[0] for o in p.schedule.ops if o.primitive.contraction}
        if len(rows) != 1:
            raise unrenderable(p, "its contractions produce tiles with different rows "
                               f"({', '.join(sorted(rows))})")
        (row,) = rows
        d = p.dim(row)
        if d.kind != GROUP:
            raise unrenderable(p, f"the rows of its contractions ({row}) are not a grouped axis")
        return d

    def _check(self) -> None:
        p, R = self.p, self.row.name
        for op in self.s.ops:
            if op.name in self.paired:
                continue
            dims = self._out_dims(op)
            if dims and R not in dims:
                raise unrenderable(p, f"op {op.name!r} computes a tile [{', '.join(dims)}] without the "
                                   f"block's rows {R!r} (a warp owns 16 rows of every register tile)", op)
            if len(dims) == 2 and op.primitive.name in ("sum", "max", "softmax") and \
                    p.dim_of[op.applied.over] == R:
                raise unrenderable(p, f"op {op.name!r} reduces over the block's rows {R!r}", op)
            if op.primitive.contraction:
                r = self.reducer_of.get(op.name)
                second = streamed_operands(r)[1] if r is not None else op.inputs[1]
                if second not in self.loaded or len(p.tiles_of[second]) != 2:
                    raise unrenderable(p, f"the second operand {second!r} of {op.name!r} is computed in "
                                       "the kernel; it must be a tile loaded from memory", op)
        for name in self.s.saves:
            if name in self.loaded:
                raise unrenderable(p, f"it saves its input {name!r} unchanged")

    def _out_dims(self, op: Op) -> tuple[str, ...]:
        if op.primitive.contraction:
            m, n, _ = contraction_dims(self.p, op)
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
                out.append(mma_variant(p, self.row, len(out), key, choice, wholes, self.gpu))
        return out

    # -- the source ------------------------------------------------------------------------------
    def render(self) -> str:
        out = [cfg_structs(self)]
        out.append(self._kernel())
        out.append(launcher(self))
        return "\n".join(out)

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
        self.walk()
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

    # -- the streamed loop (its order: analyzer.codegen.render.PlanWalk) -------------------------------
    def loop_head(self) -> None:
        """The chunk bounds, `load_chunk` (one chunk GMEM -> SMEM into a buffer) and the prologue's loads,
        before the head's ops."""
        s, c, st, n = self.s, self.c, self.stream, self.n
        axis = st.axes[0]
        B = self.ext(st.name)
        lim = self.lim(st.name)
        skip = s.skip
        if skip is not None:
            q = skip.query
            blk, tile = n("blk_{}", q), n.tile(q)
        if skip is not None and skip.after is not None:
            a = f" + {int(skip.after)}" if skip.after else ""      # the keys a row sees past its own
            c.comment(skipping_words(int(skip.after), q, axis))
            c.line(f"const int hi = (int)napkin_min64({n.size(axis)}, ({blk} + 1) * {tile}{a});")
            c.line(f"const int mid = (int)napkin_min64(({n.size(axis)} / {B}) * {B}, "
                   f"(({blk} * {tile} + 1{a}) / {B}) * {B});")
        else:       # no mask, or a band with no bound after a row's own key
            c.line(f"const int hi = (int){n.size(axis)};  // the launcher checks sizes < 2**31")
            c.line(f"const int mid = (hi / {B}) * {B};")
        if skip is not None and skip.before is not None:
            w, row0 = int(skip.before), f"{blk} * {tile}"
            c.comment(f"and a sliding window: each row sees the {w} {axis} before it, so the block starts at the "
                      f"chunk of its first row's first {axis}; from `whole` on every row sees a chunk whole")
            c.line(f"const int lo = ({row0} > {w} ? {row0} - {w} : 0) / {B} * {B};")
            c.line(f"const int whole = (int)napkin_min64(mid, napkin_max64(lo, ({row0} + {tile} - 1 - {w} > 0 ? "
                   f"{row0} + {tile} - 1 - {w} + {B} - 1 : 0) / {B} * {B}));")
        else:
            c.line("const int lo = 0;")
        c.line(f"const int n_chunks = (hi - lo + {B} - 1) / {B};")
        stage_terms = []
        self.stage_at: dict[str, str] = {}          # streamed array -> its offset in a buffer
        for name, elems in self.stage_off.items():
            self.stage_at[name] = " + ".join(stage_terms) or "0"
            stage_terms.append(f"napkin_round8({elems})")
        c.comment(f"GMEM -> SMEM: one chunk of {axis} into buffer `buf` (cp.async on sm_80+)")
        c.open("auto load_chunk = [&](int start, int buf)")
        c.line(f"const int {lim} = hi - start;")
        c.line("(void)start;")
        for name in self.stage_off:
            sm = self.smem(name).name
            c.line(f"T* const {sm} = sm_stage + buf * C::STAGE_ELEMS + {self.stage_at[name]};")
            self.load(name, sm)
        c.close("};")
        c.line("// prologue: the first NBUF - 1 chunks in flight")
        c.open("for (int b = 0; b < NBUF - 1; ++b)")
        c.line(f"if (b < n_chunks) load_chunk(lo + b * {B}, b);")
        c.line("napkin::commit();")
        c.close()
        c.line("napkin::wait<NBUF - 1>();  // the head's tiles")
        c.line("__syncthreads();")

    def chunks_open(self) -> None:
        """The loop over the chunks: the next chunk's loads in flight, this chunk's buffer."""
        c, st = self.c, self.stream
        B, lim = self.ext(st.name), self.lim(st.name)
        c.comment(f"stream {st.axes[0]} in chunks of {B}: interior chunks without masks, then the edge chunks")
        c.open("for (int ci = 0; ci < n_chunks; ++ci)")
        c.line(f"const int start = lo + ci * {B};")
        c.line("__syncthreads();  // every warp is done with the buffer the next load overwrites")
        c.open("")
        c.line("const int nc = ci + NBUF - 1;")
        c.line(f"if (nc < n_chunks) load_chunk(lo + nc * {B}, nc % NBUF);")
        c.line("napkin::commit();")
        c.close()
        c.line("napkin::wait<NBUF - 1>();")
        c.line("__syncthreads();")
        c.line("const int buf = ci % NBUF;")
        c.line(f"const int {lim} = hi - start;")
        c.line(f"(void)buf; (void){lim};")
        for name in self.stage_off:
            sm = self.smem(name)
            c.line(f"const T* const {sm.name} = sm_stage + buf * C::STAGE_ELEMS + {self.stage_at[name]};")
            c.line(f"const uint32_t {sm.su} = napkin::smem_u32({sm.name});")
            c.line(f"(void){sm.su};")

    def pass_open(self, *, masked: bool, span: str) -> None:
        """The interior chunks (no masks) or, in the same loop, the edge chunks (masked), and under a
        sliding window first those at its left edge (masked)."""
        c = self.c
        if span == "left":
            c.open("if (start < whole)")
            c.line("// the window's left edge: masked")
        elif span == "interior" and "left" in self.spans():
            c.close("} else if (start < mid) {  // interior chunk: no masks")
            c.depth += 1
        elif span == "interior":
            c.open("if (start < mid)")
            c.line("// interior chunk: no masks")
        else:
            c.close("} else {  // edge chunk: masked")
            c.depth += 1
        for name in self.stage_off:
            self.vals[name] = self.smem(name)

    def pass_close(self, *, masked: bool, span: str) -> None:
        if span == "edge":      # the last branch of the loop's if
            self.c.close()

    def chunks_close(self) -> None:
        self.c.close()
        self.c.line("napkin::wait<0>();")

    # -- accumulators ----------------------------------------------------------------------------------
    def init(self, r) -> None:
        c, op = self.c, r.op
        name = op.name
        acc = self.n("acc_{}", name)
        if op.primitive.contraction:
            _, n, k = contraction_dims(self.p, op)
            if k != self.stream.name:
                raise unrenderable(self.p, f"the streamed contraction {name!r} is not over the stream", op)
            c.line(f"float {acc}[MA][{self.ext(n)} / 8][4];")
            self.zero(acc, n)
            if is_online(r):
                m, l = self.n("m_{}", name), self.n("l_{}", name)
                c.line(f"float {m}[MA][2], {l}[MA][2];  // running maximum (base 2), running sum "
                       "(this thread's columns)")
                self.loop_row(f"{{ {m}[mi][h] = {NEG_INF}; {l}[mi][h] = 0.f; }}")
        else:
            x = self.p.tiles_of[op.inputs[0]]
            if self.p.dim_of[op.applied.over] != self.stream.name or self.canon(x) != (self.row.name,
                                                                                     self.stream.name):
                raise unrenderable(self.p, f"the streamed reduction {name!r} is not a row reduction of a "
                                   "[rows, chunk] tile", op)
            c.line(f"float {acc}[MA][2];")
            self.loop_row(f"{acc}[mi][h] = {neutral(SPELLING, op.primitive.name)};")

    def finish(self, r) -> None:
        c, op = self.c, r.op
        name = op.name
        acc = self.n("acc_{}", name)
        c.comment(f"tail of {name}: the accumulator is complete")
        if op.primitive.contraction:
            m, n, _ = contraction_dims(self.p, op)
            if is_online(r):
                out, inv = self.val(name), self.n("inv_{}", name)
                sink = sink_of(r)
                plus = ""
                if sink is not None:    # exp(sink - m) in base 2: m holds log2 e times the scores
                    mx = self.n("m_{}", name)
                    s = self.at(self.value(sink), (self.row.name,), "row")
                    c.comment(f"the sink logits {sink} join the sum once a row: exp(sink - m), in base 2")
                    plus = (f" + napkin::ex2({s} * {SPELLING.log2e} - ({mx}[mi][h] == {NEG_INF} ? 0.f : "
                            f"{mx}[mi][h]))")
                c.line(f"float {inv}[MA][2];")
                self.loop_row(f"{{ const float l = napkin::quad_sum({self.n('l_{}', name)}[mi][h]){plus}; "
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

    # -- primitives (which, in what order: analyzer.codegen.render.PlanWalk) ------------------------
    def primitive(self, op: Op, *, masked: bool) -> None:
        name, prim, c = op.name, op.primitive.name, self.c
        ins = [self.value(i) for i in op.inputs]
        if prim == "dot":
            c.comment(f"{name} = {op.inputs[0]} . {op.inputs[1]} over {op.applied.over} "
                      "(tensor cores, fp32 accumulate)")
            m, n, k = contraction_dims(self.p, op)
            out = self.val(name)
            c.line(f"float {out}[MA][{self.ext(n)} / 8][4];")
            self.zero(out, n)
            self.mma(out, ins[0], ins[1], (m, n, k), mask_a=None)
            self.vals[name] = CVal("acc", out, (m, n))
            return
        if prim == "softmax_dot":
            m, n, k = contraction_dims(self.p, op)
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
        if prim in POINTWISE:
            args = ins
            if len(ins) == 2:     # a binary op: laid out as the operand with more dims
                dims = self.canon(x.dims if len(x.dims) >= len(rest[0].dims) else rest[0].dims)
            self.ew(name, dims, lambda ctx, t: pointwise(SPELLING, op, [self.at(v, t, ctx) for v in args],
                                                         self.n))
        elif prim in MASKS or prim == "alibi":
            self.positional(op, x, rest, dims, masked=masked)
        elif prim == "softmax":
            over = self.p.dim_of[op.applied.over]
            c.comment(f"{name} = softmax of {op.inputs[0]} over {op.applied.over}")
            self.vals[name] = self.softmax_rows("", self.register(op.inputs[0]), over, op, True)
        elif prim in ("sum", "max"):
            over = self.p.dim_of[op.applied.over]
            xr = self.register(op.inputs[0])
            if xr.kind != "acc" or xr.dims[1] != over:
                raise unrenderable(self.p, f"{name!r} reduces a tile [{', '.join(x.dims)}] over "
                                   f"{op.applied.over}", op)
            zero = neutral(SPELLING, prim)
            comb = (lambda a, b: f"{a} + {b}") if prim == "sum" else (lambda a, b: f"fmaxf({a}, {b})")
            valid = self.col_valid(over, masked)
            src = f"{xr.name}[mi][j][e]" if valid is None else f"({valid} ? {xr.name}[mi][j][e] : {zero})"
            out = self.val(name)
            c.line(f"float {out}[MA][2];")
            self.loop_row(f"{out}[mi][h] = {zero};")
            self.loop_acc(over, f"{out}[mi][e >> 1] = {comb(f'{out}[mi][e >> 1]', src)};")
            red = "napkin::quad_sum" if prim == "sum" else "napkin::quad_max"
            self.loop_row(f"{out}[mi][h] = {red}({out}[mi][h]);")
            self.vals[name] = CVal("row", out, (self.row.name,))
        else:
            raise unrenderable(self.p, f"primitive {prim!r}", op)

    def accumulate(self, r, *, masked: bool) -> None:
        op = r.op
        name = op.name
        c = self.c
        st = self.stream
        if op.primitive.contraction:
            first, second, scale_op = streamed_operands(r)
            a = self.value(first)
            b = self.value(second)
            m, n, k = contraction_dims(self.p, op)
            if is_online(r):
                self.online_step(name, scale_op, self.register(first), b, (m, n, k), masked=masked)
            else:
                c.comment(f"{name} += {first} . {second} over this chunk of {st.axes[0]} (A.3.1)")
                mask_a = self.lim(st.name) if masked and a.kind != "smem" else None
                self.mma(self.n("acc_{}", name), a, b, (m, n, k), mask_a=mask_a)
            return
        x = self.register(op.inputs[0])
        src = f"{x.name}[mi][j][e]"
        if masked:
            src = f"({COL_E} < {self.lim(st.name)} ? {src} : {neutral(SPELLING, op.primitive.name)})"
        acc = f"{self.n('acc_{}', name)}[mi][e >> 1]"
        comb = f"{acc} + {src}" if op.primitive.name == "sum" else f"fmaxf({acc}, {src})"
        c.comment(f"{name}: running {op.primitive.name} over this chunk of {st.axes[0]}")
        self.loop_acc(st.name, f"{acc} = {comb};")

    def online_step(self, name: str, scale_op: Op, s: CVal, v: CVal, mnk, *, masked: bool) -> None:
        """Online softmax folded into the contraction (Appendix A.3.2, Table 4), in base 2."""
        c = self.c
        m, n, k = mnk
        if s.kind != "acc" or s.dims != (m, k):
            raise unrenderable(self.p, f"the scores of {name!r} have dims [{', '.join(s.dims)}]")
        scale = base2_scale(SPELLING, scale_op, self.n)
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
                    raise unrenderable(p, f"it saves {name!r} [{', '.join(dims)}] from a tile "
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
                    raise unrenderable(p, f"it saves {name!r} [{', '.join(dims)}] from a row vector")
                c.open("if ((lane & 3) == 0)")
                addr = self.address(name, {R.name: "row"})
                self.loop_row(f"{{ const int row = fr + (mi << 4) + (h << 3); if ({self.valid(R, 'row')}) "
                              f"{g_name}[{addr}] = napkin::Num<T>::of({v.name}[mi][h]); }}")
                c.close()
            else:
                if dims:
                    raise unrenderable(p, f"it saves {name!r} [{', '.join(dims)}] from a scalar")
                c.line(f"if (blockIdx.x == 0 && tid == 0) {g_name}[0] = napkin::Num<T>::of({v.name});")


__all__ = ["MmaKernel"]
