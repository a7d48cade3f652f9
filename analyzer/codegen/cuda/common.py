"""What the CUDA renderers share: the spelling of the elementwise primitives, the lines of C++ and a
kernel's names, sizes, block indices and the offsets of each axis."""

from __future__ import annotations

from analyzer.codegen.cuda.ids import CudaIds, Functions, size_axes
from analyzer.codegen.cuda.limits import CudaLimits
from analyzer.codegen.escape import cpp_comment
from analyzer.codegen.render import Spelling, check_plan, pointers, scaled_ops
from analyzer.common.errors import NapkinError
from analyzer.config.plan import GROUP, STREAM, WHOLE, Dim, KernelPlan
from analyzer.diagram.compiled import Op

SPELLING = Spelling(   # the functions are the prelude's (prelude.cuh)
    unary={"exp": "napkin::exp_({x})", "sigmoid": "napkin::sigmoid({x})", "relu": "napkin::relu({x})",
           "tanh": "tanhf({x})", "gelu": "napkin::gelu({x})", "reciprocal": "napkin::rcp({x})", "rsqrt": "napkin::rsqrt_({x})"},
    binary={"add": "+", "sub": "-", "mul": "*", "div": "/"},
    zero="0.f", neg_inf="(-INFINITY)", log2e="1.4426950408889634f", number="{!r}f")
RENDERED = SPELLING.rendered
NEG_INF = SPELLING.neg_inf
LOG2E = SPELLING.log2e


def check_renderable(p: KernelPlan) -> None:
    check_plan(p, "CUDA", RENDERED)


def unrenderable(p: KernelPlan, what: str, op: Op | None = None) -> NapkinError:
    return NapkinError(f"kernel {p.name!r}: {what}; the CUDA backend cannot render it",
                       file=p.diagram.source, field=op.path if op is not None else None,
                       hint="generate the Triton backend (--backend triton) for this diagram")


class Code:
    """Lines of C++ at an indentation depth."""

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


class CudaWriter:
    """What both CUDA renderers share: names, sizes, block indices, offsets of each axis. `g`: the file
    being generated (analyzer.codegen.generator.KernelFile), `k`: the kernel's configurations."""

    def __init__(self, g, k, fns: Functions, ids: CudaIds) -> None:
        self.g = g
        self.k = k
        self.p: KernelPlan = k.plan
        self.s = self.p.schedule
        self.fns = fns
        self.n = ids
        self.c = Code()
        self.stream = self.p.stream

    def comment(self, text: str) -> None:
        self.c.comment(text)

    @property
    def gpu(self) -> CudaLimits:
        """The GPU's limits, which the file carries from its profile (analyzer.codegen.generator)."""
        if self.g.cuda_limits is None:
            raise NapkinError("internal: a CUDA kernel is rendered for a file without the GPU's limits",
                              hint="generate it with analyzer.codegen.generator")
        return self.g.cuda_limits

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


__all__ = ["SPELLING", "RENDERED", "NEG_INF", "LOG2E", "check_renderable", "unrenderable", "Code",
           "CudaWriter"]
