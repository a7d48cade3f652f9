"""Register tiles of the tensor-core kernels as mma fragments, and the products on the tensor cores.

Every register tile is [rows, n], the block's rows (the m dimension of its contractions) split over the
warps in m16 tiles: a warp owns MA of them (16 or 32 rows). A thread holds, of each m16 tile, the
elements of rows `fr` and `fr + 8` at columns `fc` and `fc + 1` of every n8 fragment (`float v[MA][n/8][4]`;
element e: row + 8 (e >> 1), column + (e & 1)); a row vector holds its two rows (`float v[MA][2]`).
The products are `mma.sync` m16n8k16 (two m16n8k8 on sm_75) of A fragments packed from registers or
read with `ldmatrix` from a swizzled shared-memory tile, and B fragments read with `ldmatrix`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from analyzer.codegen.cuda.common import (
    LOG2E,
    NEG_INF,
    SPELLING,
    CudaWriter,
    unrenderable,
)
from analyzer.codegen.render import (
    MASKS,
    PlanWalk,
    band,
    band_terms,
    band_words,
    base2_scale,
    skips_mask,
)
from analyzer.config.plan import STREAM, WHOLE, Dim
from analyzer.diagram.compiled import Op

ROW_E = "(fr + (mi << 4) + ((e >> 1) << 3))"   # the block-local row of accumulator element [mi][j][e]
COL_E = "(j * 8 + fc + (e & 1))"       # its column
ROW_H = "(fr + (mi << 4) + (h << 3))"          # the row of row-vector element [mi][h]


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


class FragmentWriter(CudaWriter, PlanWalk):
    """The tensor-core kernel's values: its register tiles, elementwise tiles, softmax along the
    columns and the mma. A subclass sets `row` (the block's rows), `vals` and the kernel around them."""

    row: Dim
    tables: dict[str, tuple[str, str]]     # ldmatrix lane-offset tables the kernel declares
    tmp: int                               # register copies of loaded tiles made so far

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

    def zero(self, arr: str, n: str) -> None:
        self.loop_acc(n, f"{arr}[mi][j][e] = 0.f;")

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
            raise unrenderable(self.p, f"cannot broadcast [{', '.join(v.dims)}] to [{', '.join(target)}]")
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
        raise unrenderable(self.p, f"no index of {dim} in a [{', '.join(target)}] tile")

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
            raise unrenderable(self.p, f"{name!r} has a tile [{', '.join(dims)}] without the block's rows")
        if not copy:
            self.vals[name] = v
        return v

    def value(self, name: str) -> CVal:
        if name not in self.vals:
            raise unrenderable(self.p, f"{name!r} is used before it is computed or loaded")
        return self.vals[name]

    def register(self, name: str) -> CVal:
        """The value of `name`; a loaded [rows, n] tile as an accumulator-layout register tile."""
        v = self.value(name)
        if v.kind != "smem":
            return v
        dims = self.canon(v.dims)
        return self.ew(name, dims, lambda ctx, t: self.at(v, t, ctx), copy=True)

    def softmax_rows(self, suffix: str, x: CVal, over: str, op: Op, masked: bool) -> CVal:
        """Softmax of an accumulator tile along its columns (one row at a time, in base 2): op `op`'s
        value, or with `suffix` "_p" the probabilities inside a softmax_dot; its sink, if any, joins the
        sum as exp(sink - max)."""
        c, name = self.c, op.name
        if x.kind != "acc" or x.dims[1] != over:
            raise unrenderable(self.p, f"{op.name!r} takes a softmax over {op.applied.over} of a tile "
                               f"[{', '.join(x.dims)}]", op)
        scale = base2_scale(SPELLING, op, self.n)
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
        plus = ""
        if op.sink is not None:     # in base 2: the maximum holds log2 e times the scores
            plus = f" + napkin::ex2({self.at(self.value(op.sink), (self.row.name,), 'row')} * {LOG2E} - {mx}[mi][h])"
        self.loop_row(f"{sm}[mi][h] = 1.f / (napkin::quad_sum({sm}[mi][h]){plus});")
        self.loop_acc(over, f"{out}[mi][j][e] *= {sm}[mi][e >> 1];")
        return CVal("acc", out, x.dims)

    # -- contractions ------------------------------------------------------------------------------------
    def mma(self, out: str, a: CVal, b: CVal, mnk: tuple[str, str, str], mask_a: str | None) -> None:
        """out[m, n] += a[m, k] . b[k, n] on the tensor cores; b is a loaded tile in shared memory."""
        c = self.c
        m, n, k = mnk
        if b.kind != "smem" or len(b.dims) != 2:
            raise unrenderable(self.p, "the second operand of a contraction is not a loaded "
                               "two-dimensional tile")
        if a.kind == "smem" and len(a.dims) != 2:
            raise unrenderable(self.p, "a contraction's first operand is not two-dimensional")
        if a.kind in ("row", "scalar") or (a.kind == "acc" and a.dims != (m, k)):
            raise unrenderable(self.p, f"a contraction's first operand has dims [{', '.join(a.dims)}]")
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

    # -- the ops that read positions: masks (each a band) and ALiBi's bias ---------------------------
    def positional(self, op: Op, x: CVal, rest: list[CVal], dims: tuple[str, ...], *, masked: bool) -> None:
        """A mask or ALiBi on value `x` laid out as `dims`: each item's query and key index, from its
        fragment coordinates."""
        name, c = op.name, self.c
        if op.primitive.name in MASKS:
            if skips_mask(self.p, op, masked=masked):
                self.vals[name] = x   # interior chunks lie inside every row's band (below the diagonal)
                return
            q, key = op.applied.query, op.applied.key

            def cond(ctx, t):
                oq = self.offs(q, self.index_of(self.p.dim_of[q], t, ctx))
                ok = self.offs(key, self.index_of(self.p.dim_of[key], t, ctx))
                return f"({' && '.join(band_terms(oq, ok, *band(op)))}) ? {self.at(x, t, ctx)} : {NEG_INF}"
            c.comment(f"{name}: {band_words(*band(op))}")
            self.ew(name, dims, cond)
        else:
            q, key = op.applied.query, op.applied.key
            (m,) = rest

            def alibi(ctx, t):      # v - m |i - j|
                oq = self.offs(q, self.index_of(self.p.dim_of[q], t, ctx))
                ok = self.offs(key, self.index_of(self.p.dim_of[key], t, ctx))
                return f"{self.at(x, t, ctx)} - {self.at(m, t, ctx)} * fabsf((float)({oq} - {ok}))"
            c.comment(f"{name}: ALiBi's linear bias, {m.name} a slope")
            self.ew(name, dims, alibi)


__all__ = ["CVal", "FragmentWriter", "ROW_E", "COL_E", "ROW_H", "LOG2E", "NEG_INF"]
