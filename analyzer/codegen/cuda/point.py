"""A kernel without contractions (a softmax over whole rows, elementwise ops, reductions), as CUDA C++:
a loop over its elements. The block's threads stride along the dimension it reduces, with block-wide
reductions; the block walks the combinations of the other dimensions one at a time."""

from __future__ import annotations

from analyzer.codegen.cuda.common import NEG_INF, SPELLING, CudaWriter, unrenderable
from analyzer.codegen.cuda.ids import CudaIds, Functions
from analyzer.codegen.cuda.variants import point_variant
from analyzer.codegen.render import (
    MASKS,
    POINTWISE,
    band,
    band_terms,
    base2_scale,
    neutral,
    pointers,
    pointwise,
)
from analyzer.config.plan import GROUP, STREAM, Dim, band_rows
from analyzer.diagram.compiled import Op


class PointKernel(CudaWriter):
    """Elementwise ops and reductions: the block's threads stride along the reduced dimension r;
    the block walks the combinations of the other dimensions one at a time. Every reduction over r
    is one pass over r (a softmax: its running maximum and sum), and the outputs along r one more."""

    def __init__(self, g, k, fns: Functions, ids: CudaIds) -> None:
        super().__init__(g, k, fns, ids)
        p, s = self.p, self.s
        self.variants = [point_variant(p, 0, key, c, self.gpu) for key, c in list(k.choices.items())[:1]]
        self.reducer_of = {r.op.name: r for r in s.reducers}
        reduced = {p.dim_of[o.applied.over] for o in s.ops if o.primitive.name in ("softmax", "sum", "max")}
        if s.reducers and self.stream is not None:
            reduced.add(self.stream.name)
        if len(reduced) > 1:
            raise unrenderable(p, f"it reduces over more than one dimension ({', '.join(sorted(reduced))})")
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
            raise unrenderable(p, f"{name!r} is needed outside the loop over {self.r.axes[0]}")
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
            if prim in POINTWISE:
                expr = pointwise(SPELLING, op, args, self.n)
                if prim == "shift":
                    expr = f"({expr})"
            elif prim in MASKS:
                q, key = op.applied.query, op.applied.key
                oq = self.offs(q, self.local(p.dim_of[q]))
                ok = self.offs(key, self.local(p.dim_of[key]))
                expr = f"(({' && '.join(band_terms(oq, ok, *band(op)))}) ? {args[0]} : {NEG_INF})"
            elif prim == "alibi":          # v - m |i - j|
                oq = self.offs(op.applied.query, self.local(p.dim_of[op.applied.query]))
                ok = self.offs(op.applied.key, self.local(p.dim_of[op.applied.key]))
                expr = f"({args[0]} - {args[1]} * fabsf((float)({oq} - {ok})))"
            else:
                raise unrenderable(p, f"primitive {prim!r} ({name!r}) in a kernel without contractions", op)
        emit(f"const float {var} = {expr};")
        table[name] = var
        return var

    def reduction_pass(self, op: Op) -> None:
        c, name = self.c, op.name
        prim = op.primitive.name
        if self.r is None:
            raise unrenderable(self.p, f"{name!r} reduces over nothing", op)
        if op.primitive.contraction:
            raise unrenderable(self.p, f"contraction {name!r} outside the tensor-core renderer", op)
        src = op.inputs[0]
        nw = self.variants[0].warps
        if prim == "softmax":
            scale = base2_scale(SPELLING, op, self.n)
            m, l = self.n("m_{}", name), self.n("l_{}", name)
            sink = self.need(op.sink, None) if op.sink is not None else None   # one a row: before the loop
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
            if sink is None:
                c.line(f"{l} = 1.f / napkin::block_reduce<{nw}, false>({l}, napkin_red);")
                c.line(f"{m} = mm;")
            else:       # a row of -inf weighs nothing: its probabilities exp2(-inf - 0) are 0
                c.comment(f"the sink logits {op.sink} join the sum: exp(sink - max), in base 2")
                c.line(f"{m} = mm == {NEG_INF} ? 0.f : mm;")
                c.line(f"{l} = 1.f / (napkin::block_reduce<{nw}, false>({l}, napkin_red) + "
                       f"napkin::ex2({sink} * {SPELLING.log2e} - {m}));")
            c.close()
            self.softmaxes[name] = scale
            return
        comb = (lambda a, b: f"{a} + {b}") if prim == "sum" else (lambda a, b: f"fmaxf({a}, {b})")
        r = self.n("r_{}", name)
        c.comment(f"{name} = {prim} of {src} over {self.r.axes[0]}")
        c.line(f"float {r} = {neutral(SPELLING, prim)};")
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


__all__ = ["PointKernel"]
