"""What the Triton and CUDA renderers share: which primitives a kernel may hold, how the plan is walked,
and the logic of its masks; each backend spells it in its own language.

Both backends realise the same plan (analyzer.config.plan) with the same structure: the head's tiles are
loaded once, the streamed loop walks the stream a chunk at a time (interior chunks without masks, then
the edge chunks, masked), the tail finishes the accumulators, and the block saves its outputs. Shared
here, once:

- the primitives a kernel renders (`STRUCTURAL` plus a backend's `Spelling` of the elementwise ones) and
  the refusal of a plan that holds another, or that saves along its stream (`check_plan`);
- the op order and the loop's passes (`PlanWalk`): the head's ops, the reducers' accumulators, the
  two passes over the body from the same values, the finished accumulators, then the tail; a softmax
  paired with a contraction is not written on its own but folded into it as online softmax;
- the neutral element a masked slot gets from what consumes it (`neutral`), the operands a streamed
  contraction reads (`streamed_operands`), the base-2 scale of an online softmax (`base2_scale`) and
  its sink (`sink_of`: exp(sink - m) joins the finished sum, in base 2 log2 e times the sink), a mask
  that interior chunks skip (`skips_mask`), and which keys a mask keeps: every mask is a band, query i
  seeing keys i - before .. i + after (`band`, `band_terms`, `band_words`);
- the expression of an elementwise primitive from its operands' expressions (`pointwise`).

What differs stays with each backend: a Triton tile is one value, a CUDA one a loop over mma
fragments or over a block's threads; Triton loads a tile where it is first used, CUDA copies the
chunk into shared memory ahead; their loops, reductions and softmax are written differently.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from analyzer.codegen.names import PlanIds
from analyzer.common.errors import NapkinError
from analyzer.config.plan import STREAM, WHOLE, KernelPlan, streamed_operands
from analyzer.diagram.compiled import Op
from analyzer.diagram.primitives import REGISTRY, Mask
from analyzer.model.fusion import Reducer

# Elementwise primitives of one input and of two: each backend spells every one (Spelling)
UNARY = ("exp", "sigmoid", "relu", "tanh", "gelu", "reciprocal", "rsqrt")
BINARY = ("add", "sub", "mul", "div")
# The primitives whose rendering is the backend's own code, not an entry of its table
MASKS = tuple(n for n, p in REGISTRY.items() if isinstance(p, Mask))     # causal_mask, window_mask, band_mask
STRUCTURAL = ("dot", "softmax_dot", "softmax", "scale", "shift", "softcap", *MASKS, "alibi", "sum", "max")


@dataclass(frozen=True)
class Spelling:
    """How a backend writes the elementwise primitives and the constants of masks and softmax."""

    unary: Mapping[str, str]       # primitive -> its expression of `{x}`
    binary: Mapping[str, str]      # primitive -> its infix operator
    zero: str                      # the neutral element of a sum (and of a contraction's operand)
    neg_inf: str                   # of a maximum and a softmax
    log2e: str                     # log2 e: exp(t) = exp2(t log2 e)
    number: str                    # a finite constant (shift's offset, softcap's cap): a format of its float

    def __post_init__(self) -> None:
        if set(self.unary) != set(UNARY) or set(self.binary) != set(BINARY):
            raise NapkinError("internal: a backend's spelling must cover the elementwise primitives "
                              f"{', '.join((*UNARY, *BINARY))}")

    @property
    def rendered(self) -> frozenset[str]:
        """Every primitive a backend with this spelling renders."""
        return frozenset({*STRUCTURAL, *self.unary, *self.binary})


def check_plan(p: KernelPlan, backend: str, rendered: frozenset[str] | set[str]) -> None:
    """Refuse a plan the `backend` (its name, as messages show it) cannot render: a primitive outside
    `rendered`, or an output saved along the streamed axis (both backends save after the loop)."""
    for op in p.schedule.ops:
        if op.primitive.name not in rendered:
            raise NapkinError(f"primitive {op.primitive.name!r} (op {op.name!r}) has no {backend} renderer",
                              file=p.diagram.source, field=op.path,
                              hint=f"the {backend} backend renders: {', '.join(sorted(rendered))}")
    for d in p.dims:
        if d.kind == STREAM and any(d.name in p.tiles_of[s] for s in p.schedule.saves):
            raise NapkinError(f"kernel {p.name!r} saves an array along its streamed axis "
                              f"{d.axes[0]!r}; the {backend} backend saves only after the loop",
                              file=p.diagram.source)


# -- the plan's facts both backends name alike -------------------------------------------------------

def pointers(p: KernelPlan) -> tuple[str, ...]:
    """The arrays a kernel takes a pointer to: its loads, resident arrays and saves, in that order."""
    s = p.schedule
    return tuple(dict.fromkeys((*s.loads, *s.resident, *s.saves)))


def loaded(p: KernelPlan) -> tuple[str, ...]:
    """The arrays a kernel reads from memory."""
    s = p.schedule
    return tuple(dict.fromkeys((*s.loads, *s.resident)))


def scaled_ops(p: KernelPlan) -> tuple[Op, ...]:
    """The ops with a scale factor, which the kernel takes as an argument."""
    return tuple(o for o in p.schedule.ops if o.applied.scale is not None)


def runtime_axes(p: KernelPlan) -> tuple[str, ...]:
    """Axes whose size is a runtime argument (grid, grouped and streamed); whole ones are constexpr."""
    return tuple(a for a in (*p.grid, *(a for d in p.dims if d.kind != WHOLE for a in d.axes)))


def contraction_dims(p: KernelPlan, op: Op) -> tuple[str, str, str]:
    """(m, n, k) dims of a contraction: m from its first input, n from its second, k the contracted."""
    k = p.dim_of[op.applied.over]
    a, b = (p.tiles_of[i] for i in op.operands)
    m = next(d for d in a if d != k)
    n = next(d for d in b if d != k)
    return m, n, k


# -- masks, reducers, elementwise ops ----------------------------------------------------------------

def neutral(spell: Spelling, prim: str) -> str:
    """The value a masked slot takes before `prim` consumes it: zero before a sum, -inf before a
    maximum (and a softmax)."""
    return spell.zero if prim == "sum" else spell.neg_inf


def is_online(r: Reducer) -> bool:
    """Whether a streamed reducer is an online softmax folded into its contraction (Appendix A.3.2)."""
    return r.softmax is not None or r.op.primitive.name == "softmax_dot"


def lse_of(p: KernelPlan) -> tuple[str, tuple[str, ...]] | None:
    """The output whose rows' log-sum-exp the kernel can write, and the rows' axes (the output's axes that
    its softmax's scores have too: all but the value head dim): an output saved from an online softmax
    (softmax_dot, or a softmax paired with its dot); None where the kernel saves none."""
    for r in p.schedule.reducers:
        if is_online(r) and r.op.name in p.schedule.saves:
            scores = p.axes_of((r.softmax or r.op).inputs[0])
            return r.op.name, tuple(a for a in p.axes_of(r.op.name) if a in scores)
    return None


def sink_of(r: Reducer) -> str | None:
    """The sink logits of an online softmax (softmax_dot's, or the paired softmax's), or None: what the
    finished sum takes once a row, exp(sink - m), before it divides the accumulator."""
    return (r.softmax or r.op).sink


def base2_scale(spell: Spelling, op: Op, ids: PlanIds) -> str:
    """The factor a softmax's input is multiplied by to take exp in base 2: its scale times log2 e."""
    return f"{ids.scale(op.name)} * {spell.log2e}" if op.applied.scale is not None else spell.log2e


def skips_mask(p: KernelPlan, op: Op, *, masked: bool) -> bool:
    """Whether mask `op` (causal, a window or a band) passes its input through unchanged: in the unmasked
    pass of a loop with block skipping, whose chunks lie inside every row's band (below the diagonal)."""
    skip = p.schedule.skip
    return skip is not None and skip.mask is op and not masked


def band(op: Op) -> tuple[int | None, int | None]:
    """The keys mask `op` lets a query see before its own and after it (None: all on that side)."""
    before, after = op.primitive.keys_before(op.applied), op.primitive.keys_after(op.applied)
    return (None if before is None else int(before)), (None if after is None else int(after))


def band_terms(oq: str, ok: str, before: int | None, after: int | None) -> list[str]:
    """The conditions under which key offset `ok` lies in the band around query offset `oq` (every one
    must hold): not after the query (causal), at most `after` past it, fewer than `before` + 1 before it."""
    terms = [f"{oq} >= {ok}"] if after == 0 else [] if after is None else [f"{ok} <= {oq} + {after}"]
    return terms + ([] if before is None else [f"{ok} > {oq} - {before + 1}"])


def skipping_words(after: int, query: str, key: str) -> str:
    """What block skipping leaves a block of `query` rows, for the comment above its chunk bounds."""
    return (f"causal block skipping: this block's {query} rows see {key} up to their last row" if not after else
            f"block skipping under a band: this block's {query} rows see {key} up to {after} past their last row")


def band_words(before: int | None, after: int | None) -> str:
    """A mask's band in words, for a comment: causal, a window of w, or a band."""
    if after == 0:
        return "causal mask" if before is None else f"causal, a window of {before + 1}"
    sides = [f"{n} {side}" for n, side in ((before, "before"), (after, "after")) if n is not None]
    return f"a band: {' and '.join(sides)} a query's own key"


POINTWISE = frozenset({"scale", "shift", "softcap", *UNARY, *BINARY})


def pointwise(spell: Spelling, op: Op, args: Sequence[str], ids: PlanIds) -> str:
    """The expression of elementwise op `op` (scale, shift, softcap, unary or binary) of its operands'
    expressions `args`, in the backend's spelling; a scale factor is the kernel's argument, shift's
    offset and softcap's cap are literals."""
    prim = op.primitive.name
    if prim == "scale":
        return f"{args[0]} * {ids.scale(op.name)}"
    if prim == "shift":
        return f"{args[0]} + {spell.number.format(float(op.applied.offset))}"
    if prim == "softcap":          # cap tanh(v / cap)
        cap = spell.number.format(float(op.applied.cap))
        return f"({cap} * {spell.unary['tanh'].format(x=f'({args[0]}) / {cap}')})"
    if prim in spell.unary:
        return spell.unary[prim].format(x=args[0])
    if prim in spell.binary:
        return f"{args[0]} {spell.binary[prim]} {args[1]}"
    raise NapkinError(f"internal: {prim!r} is not an elementwise primitive")


# -- the walk --------------------------------------------------------------------------------------------

class PlanWalk:
    """The order in which a kernel writer visits a plan's ops, shared by the backends. A subclass writes
    each step in its language: `primitive` (an op computed where it stands), `accumulate` (a reducer's
    step over one chunk), `init` and `finish` (a reducer's accumulator before and after the loop),
    `comment`, and the loop's frame: `loop_head`, `chunks_open`, `pass_open`, `pass_close`,
    `chunks_close`. `vals` maps each array and op to the backend's value of it."""

    def __init__(self, p: KernelPlan) -> None:
        self.p = p
        self.s = p.schedule
        self.stream = p.stream
        self.reducer_of = {r.op.name: r for r in self.s.reducers}
        self.paired = {r.softmax.name: r for r in self.s.reducers if r.softmax is not None}
        self.vals: dict = {}

    def emit_ops(self, ops: Sequence[Op], *, masked: bool) -> None:
        for op in ops:
            if op.name in self.paired:
                continue   # folded into its contraction as online softmax (Appendix A.3.2)
            if op.name in self.reducer_of:
                self.accumulate(self.reducer_of[op.name], masked=masked)
            else:
                self.primitive(op, masked=masked)

    def walk(self) -> None:
        """The kernel's computation, once the head's tiles are loaded: without a stream the head's ops
        and then the body's others; with one the streamed loop; then the tail."""
        s = self.s
        if self.stream is None:
            self.emit_ops(s.head, masked=True)
            self.emit_ops([o for o in s.body if o not in s.head], masked=True)
        else:
            self.loop()
        self.emit_ops(s.tail, masked=True)

    def spans(self) -> tuple[str, ...]:
        """The passes over the chunks, in order: the interior chunks (no masks) and the edge ones
        (masked: on the diagonal or a band's right edge, or past the end), and under a sliding window or a
        band with `before` first the chunks where some of the block's rows see only part (`left`, masked)."""
        skip = self.s.skip
        return ("left", "interior", "edge") if skip is not None and skip.before is not None else \
            ("interior", "edge")

    def loop(self) -> None:
        """The head's ops, the accumulators, the passes over the body (`spans`: interior chunks without
        masks, edge chunks masked: each from the values before the loop), the accumulators finished."""
        s = self.s
        self.loop_head()
        self.emit_ops(s.head, masked=True)
        self.comment("accumulators in registers, as for a stream of size 0 (Section 5.1)")
        for r in s.reducers:
            self.init(r)
        self.chunks_open()
        before = dict(self.vals)
        for span in self.spans():
            masked = span != "interior"
            self.vals = dict(before)
            self.pass_open(masked=masked, span=span)
            self.emit_ops(s.body, masked=masked)
            self.pass_close(masked=masked, span=span)
        self.vals = before
        self.chunks_close()
        for r in s.reducers:
            self.finish(r)

    # -- what a backend writes -------------------------------------------------------------------------
    def comment(self, text: str) -> None:
        raise NotImplementedError

    def primitive(self, op: Op, *, masked: bool) -> None:
        raise NotImplementedError

    def accumulate(self, r: Reducer, *, masked: bool) -> None:
        raise NotImplementedError

    def init(self, r: Reducer) -> None:
        raise NotImplementedError

    def finish(self, r: Reducer) -> None:
        raise NotImplementedError

    def loop_head(self) -> None:
        """Before the head's ops of a streamed kernel (CUDA: the chunk bounds and the first loads)."""

    def chunks_open(self) -> None:
        """After the accumulators: the chunk bounds, or the loop over the chunks."""

    def pass_open(self, *, masked: bool, span: str) -> None:
        raise NotImplementedError

    def pass_close(self, *, masked: bool, span: str) -> None:
        raise NotImplementedError

    def chunks_close(self) -> None:
        """After both passes, before the accumulators are finished."""


__all__ = ["UNARY", "BINARY", "MASKS", "STRUCTURAL", "POINTWISE", "Spelling", "check_plan", "pointers", "loaded",
           "scaled_ops", "runtime_axes", "contraction_dims", "neutral", "is_online", "streamed_operands",
           "sink_of", "base2_scale", "skips_mask", "band", "band_terms", "band_words", "skipping_words",
           "pointwise", "PlanWalk"]
