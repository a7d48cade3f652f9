"""The registry of primitive functions a diagram may use.

Each primitive is one small class that knows
- its shape rule: which axes its output has, given its inputs and the axis it acts on (`over`);
- its core axes: the ones it acts on; every other axis of its output is weaved (Section 2.1);
- its FLOPs per item, per pipeline ("tensor" for contractions, "sfu" for the special function unit,
  "vector" for the rest); a k-size contraction costs 2k (Section 2.2);
- whether it is streamable along `over` and with which accumulator (Appendix A.3): a contraction with
  a running sum (A.3.1), softmax-contraction with a running maximum and sum (A.3.2, Table 4);
- whether it takes a softmax's sink (`takes_sink`: softmax and softmax_dot): an optional last input of
  logits without the `over` axis, one a row, that join the softmax's denominator and weigh no value
  (gpt-oss's attention sinks): softmax(v)_j = exp(v_j - mu) / (exp(sink - mu) + sum_k exp(v_k - mu)).
  Its cost is once a row, when the row is complete (`final_flops`, or the fused pair's
  `pair_final_flops`): one exp on the special function unit and one add.

A new primitive is one class here plus one line in REGISTRY.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import sympy

from analyzer.common.errors import NapkinError

PIPELINES = ("tensor", "sfu", "vector")
Extent = Callable[[str], sympy.Expr]  # axis name -> its (tile) size


@dataclass(frozen=True)
class Accumulator:
    """How a streamable primitive folds in one more chunk of its `over` axis (Appendix A.3)."""

    name: str
    aux_per_row: int   # auxiliary values kept per output row while streaming (online softmax: max, sum)
    doc: str


@dataclass(frozen=True)
class Applied:
    """A primitive applied in a diagram: the axes of its inputs and output, and its parameters."""

    inputs: tuple[tuple[str, ...], ...]
    output: tuple[str, ...]
    over: str | None = None
    query: str | None = None
    key: str | None = None
    scale: sympy.Expr | None = None
    offset: sympy.Expr | None = None     # shift's constant
    cap: sympy.Expr | None = None        # softcap's bound
    window: sympy.Expr | None = None     # window_mask's width in keys
    before: sympy.Expr | None = None     # band_mask: the keys a query sees before its own (None: all)
    after: sympy.Expr | None = None      # band_mask: the keys a query sees after its own (None: all)

    @property
    def domain(self) -> tuple[str, ...]:
        """Every axis the function iterates over: output axes, then the reduced one."""
        seen: dict[str, None] = dict.fromkeys(self.output)
        for axes in self.inputs:
            seen.update(dict.fromkeys(axes))
        return tuple(seen)


def _size(axes: Sequence[str], extent: Extent) -> sympy.Expr:
    return sympy.Mul(*(extent(a) for a in axes))


class Primitive:
    """Base class: an elementwise function of one input (every axis weaved)."""

    name = ""
    doc = ""
    arity = 1                              # inputs it takes (besides an optional sink)
    takes_sink = False                     # takes a softmax's sink logits as an optional last input
    params: frozenset[str] = frozenset()   # op fields this primitive takes besides inputs/output
    needs_over = False
    reduces = False                        # removes `over` from its output
    accumulator: Accumulator | None = None  # streamable along `over` when set
    mask_neutral = False                   # unaffected by -inf entries: a masked block may be skipped
    contraction = False                    # runs on tensor cores (matrix multiply)

    # -- shapes ---------------------------------------------------------------------------------
    def expected_output(self, applied: Applied) -> set[str]:
        """The set of output axes the shape rule gives (inputs already checked for `over`)."""
        axes: set[str] = set()
        for inp in applied.inputs:
            axes |= set(inp)
        if self.reduces:
            axes.discard(applied.over)
        return axes

    def core_axes(self, applied: Applied) -> set[str]:
        """Axes the function itself acts on; the rest of the output's axes are weaved."""
        return {applied.over} if applied.over else set()

    @property
    def arities(self) -> tuple[int, ...]:
        """How many inputs it may take: its arity, and one more with a sink."""
        return (self.arity, self.arity + 1) if self.takes_sink else (self.arity,)

    def sink(self, applied: Applied) -> tuple[str, ...] | None:
        """The axes of its sink logits (its optional last input), or None without one."""
        return applied.inputs[self.arity] if self.takes_sink and len(applied.inputs) > self.arity else None

    def check(self, applied: Applied) -> None:
        """Raise ValueError with a plain sentence if the shapes do not fit this primitive."""
        if self.needs_over:
            for i, axes in enumerate(applied.inputs[:self.arity]):
                if applied.over not in axes:
                    raise ValueError(f"{self.name} acts on axis {applied.over!r} but input {i} has "
                                     f"axes [{', '.join(axes)}]")

    # -- costs ----------------------------------------------------------------------------------
    def flops(self, applied: Applied, extent: Extent) -> dict[str, sympy.Expr]:
        return {"vector": _size(applied.output, extent)}

    def final_flops(self, applied: Applied, extent: Extent) -> dict[str, sympy.Expr]:
        """Work done once per output item after all of `over` is folded in (e.g. dividing by z)."""
        return {}

    def chunk_flops(self, applied: Applied, extent: Extent) -> dict[str, sympy.Expr]:
        """Extra work of the accumulator each time one more chunk of `over` is folded in."""
        return {}

    def rows(self, applied: Applied) -> tuple[str, ...]:
        """Axes indexing the accumulator's auxiliary values (one set of aux values per row)."""
        return tuple(a for a in applied.inputs[0] if a != applied.over)

    def tensor_roles(self, applied: Applied) -> dict[str, tuple[str, ...]] | None:
        """For a contraction: the m, n and k axes of the matrix multiply it runs as."""
        return None

    def keeps_neg_inf(self, applied: Applied) -> bool:
        """Whether a masked item (-inf) stays -inf through this function, so that what a mask-neutral
        reducer after it ignores stays ignored (block skipping may then drop the masked blocks)."""
        return False


class Exp(Primitive):
    name, doc = "exp", "Exponent of every item (special function unit)."

    def flops(self, applied, extent):
        return {"sfu": _size(applied.output, extent)}


class Sigmoid(Primitive):
    name, doc = "sigmoid", "Logistic sigmoid 1/(1+exp(-v)) of every item."

    def flops(self, applied, extent):
        n = _size(applied.output, extent)
        return {"sfu": 2 * n, "vector": n}   # exp and reciprocal; one add


class Relu(Primitive):
    name, doc = "relu", "max(v, 0) of every item."


class Tanh(Primitive):
    name, doc = "tanh", "Hyperbolic tangent of every item (special function unit)."

    def flops(self, applied, extent):
        return {"sfu": _size(applied.output, extent)}


SMALLEST_CAP = 2.0 ** -126     # fp32's smallest normal number: cap and 1/cap stay finite, nonzero fp32


class Softcap(Primitive):
    name = "softcap"
    doc = ("cap tanh(v / cap) of every item (`cap`, e.g. 50): logits bounded to (-cap, cap) smoothly, as "
           "Gemma 2 caps its attention scores.")
    params = frozenset({"cap"})

    def check(self, applied):
        if applied.cap is None:
            raise ValueError("softcap needs a `cap`, e.g. cap: 50")
        if not applied.cap.is_positive:
            raise ValueError(f"softcap's cap is {applied.cap}: a positive number")
        if float(applied.cap) < SMALLEST_CAP:   # the kernels multiply by 1/cap in fp32
            raise ValueError(f"softcap's cap is {applied.cap}: at least 2**-126 (fp32's smallest normal "
                             "number), so that cap and 1/cap are fp32 numbers")

    def flops(self, applied, extent):
        n = _size(applied.output, extent)
        return {"sfu": n, "vector": 2 * n}   # tanh; the multiplies by 1/cap and cap


class Gelu(Primitive):
    name, doc = "gelu", "GELU (tanh form) of every item."

    def flops(self, applied, extent):
        n = _size(applied.output, extent)
        return {"sfu": n, "vector": 7 * n}   # tanh; the cubic polynomial and scaling


class Reciprocal(Primitive):
    name, doc = "reciprocal", "1/v of every item (the special function unit's reciprocal)."

    def flops(self, applied, extent):
        return {"sfu": _size(applied.output, extent)}


class Rsqrt(Primitive):
    name, doc = "rsqrt", "1/sqrt(v) of every item (the special function unit's reciprocal square root)."

    def flops(self, applied, extent):
        return {"sfu": _size(applied.output, extent)}


class Shift(Primitive):
    name, doc = "shift", "Add a constant (`offset`, e.g. 1e-6) to every item."
    params = frozenset({"offset"})

    def check(self, applied):
        if applied.offset is None:
            raise ValueError("shift needs an `offset`, e.g. offset: 1e-6")

    def keeps_neg_inf(self, applied):
        return True


class Scale(Primitive):
    name, doc = "scale", "Multiply every item by a constant (`scale`, e.g. d**-0.5)."
    params = frozenset({"scale"})

    def check(self, applied):
        if applied.scale is None:
            raise ValueError("scale needs a `scale` factor, e.g. scale: d**-0.5")

    def keeps_neg_inf(self, applied):
        return bool(applied.scale.is_positive)


class Mask(Primitive):
    """A mask: -inf at the items whose `key` index lies outside a band around their `query` index, the
    rest passed through. Query i sees keys i - keys_before .. i + keys_after (top-left aligned, like
    torch's is_causal; None: every key on that side), so a streamed kernel may skip the blocks entirely
    outside the band. causal_mask is the band (all before, 0 after), window_mask (w) the band (w - 1, 0)."""

    params = frozenset({"query", "key"})

    def check(self, applied):
        (axes,) = applied.inputs
        for role in ("query", "key"):
            axis = getattr(applied, role)
            if axis is None:
                raise ValueError(f"{self.name} needs a `{role}` axis")
            if axis not in axes:
                raise ValueError(f"{self.name} {role} axis {axis!r} is not an axis of its input "
                                 f"[{', '.join(axes)}]")
        if applied.query == applied.key:
            raise ValueError(f"{self.name} needs two different axes for query and key")

    def keys_before(self, applied: Applied) -> sympy.Expr | None:
        """How many keys before its own position a query sees; None: all of them."""
        return None

    def keys_after(self, applied: Applied) -> sympy.Expr | None:
        """How many keys after its own position a query sees; None: all of them."""
        return None

    def keeps_neg_inf(self, applied):
        return True     # it only adds -inf


def narrower(a: sympy.Expr | int | None, b: sympy.Expr | int | None) -> sympy.Expr | int | None:
    """The tighter of two masks' bounds on one side (None: no bound): both masks applied."""
    return b if a is None else a if b is None else min(a, b)


class CausalMask(Mask):
    name = "causal_mask"
    doc = ("Set items whose `key` index exceeds their `query` index to -inf (top-left aligned, like "
           "torch's is_causal). Blocks entirely above the diagonal can be skipped when streaming.")

    def keys_after(self, applied):
        return sympy.Integer(0)


class WindowMask(CausalMask):
    name = "window_mask"
    doc = ("A causal mask with a sliding window (`window`, e.g. 4096, as Mistral and Gemma 2): query i sees "
           "keys i - window + 1 .. i, the rest set to -inf. Blocks entirely outside the window, above the "
           "diagonal or before its left edge, can be skipped when streaming.")
    params = frozenset({"query", "key", "window"})

    def check(self, applied):
        super().check(applied)
        w = applied.window
        if w is None:
            raise ValueError("window_mask needs a `window`: how many keys a query sees, e.g. window: 4096")
        if not (w.is_Integer and w >= 1):
            raise ValueError(f"window_mask's window is {w}: a whole number of keys, at least 1")

    def keys_before(self, applied):
        return applied.window - 1


class BandMask(Mask):
    name = "band_mask"
    doc = ("Local attention, not causal (FlashAttention's window_size=(before, after)): query i sees keys "
           "i - `before` .. i + `after`, the rest set to -inf (top-left aligned). Either bound may be left out "
           "(no bound on that side), not both. Blocks entirely outside the band can be skipped when streaming.")
    params = frozenset({"query", "key", "before", "after"})

    def check(self, applied):
        super().check(applied)
        if applied.before is None and applied.after is None:
            raise ValueError("band_mask needs `before` or `after` (or both): how many keys before and after "
                             "its own a query sees, e.g. before: 256, after: 256")
        for side in ("before", "after"):
            n = getattr(applied, side)
            if n is not None and not (n.is_Integer and n >= 0):
                raise ValueError(f"band_mask's {side} is {n}: a whole number of keys, at least 0")

    def keys_before(self, applied):
        return applied.before

    def keys_after(self, applied):
        return applied.after


class Alibi(Primitive):
    name = "alibi"
    doc = ("ALiBi's linear bias (Press et al. 2022): v - m |i - j| for the item of `query` index i and `key` "
           "index j, m the second input, a slope per head (an input without the query and key axes, e.g. "
           "`slopes: []`, which the call weaves into a (batch, heads) tensor, as FlashAttention's "
           "alibi_slopes). Finite, so a masked item stays -inf through it.")
    arity = 2
    params = frozenset({"query", "key"})

    def check(self, applied):
        scores, slopes = applied.inputs
        for role in ("query", "key"):
            axis = getattr(applied, role)
            if axis is None:
                raise ValueError(f"alibi needs a `{role}` axis")
            if axis not in scores:
                raise ValueError(f"alibi {role} axis {axis!r} is not an axis of its first input "
                                 f"[{', '.join(scores)}]")
            if axis in slopes:
                raise ValueError(f"alibi's slopes (its second input) vary along its {role} axis {axis!r}; "
                                 "a slope is one number a head: give the slopes no query or key axis")
        if applied.query == applied.key:
            raise ValueError("alibi needs two different axes for query and key")

    def flops(self, applied, extent):
        return {"vector": 3 * _size(applied.output, extent)}   # |i - j|, times m, subtracted

    def keeps_neg_inf(self, applied):
        return True


class Binary(Primitive):
    """Elementwise function of two inputs; an input lacking an axis is copied along it (a weave)."""

    arity = 2


class Add(Binary):
    name, doc = "add", "Sum of two arrays, item by item (broadcast along missing axes)."


class Sub(Binary):
    name, doc = "sub", "Difference of two arrays, item by item."


class Mul(Binary):
    name, doc = "mul", "Product of two arrays, item by item."


class Div(Binary):
    name, doc = "div", "Quotient of two arrays, item by item: a reciprocal and a multiply."

    def flops(self, applied, extent):
        n = _size(applied.output, extent)
        return {"sfu": n, "vector": n}   # the special function unit's reciprocal, then a multiply


class Reduction(Primitive):
    needs_over = True
    reduces = True
    params = frozenset({"over", "accumulate"})

    def flops(self, applied, extent):
        return {"vector": _size(applied.inputs[0], extent)}


class Sum(Reduction):
    name, doc = "sum", "Sum over `over`; streamable with a running sum."
    accumulator = Accumulator("running sum", 0, "s <- s + sum(chunk)")


class Max(Reduction):
    name, doc = "max", "Maximum over `over`; streamable with a running maximum."
    accumulator = Accumulator("running max", 0, "m <- max(m, max(chunk))")
    mask_neutral = True


def _check_sink(prim: Primitive, applied: Applied) -> None:
    """A sink is one logit a row of the softmax: an input without `over`, laid along the scores' other
    axes or fewer of them (copied along those it lacks, as the call weaves heads)."""
    sink = prim.sink(applied)
    if sink is None:
        return
    which = "second" if prim.arity == 1 else "third"
    if applied.over in sink:
        raise ValueError(f"{prim.name}'s sink (its {which} input) varies along its `over` axis {applied.over!r}; a "
                         f"sink is one logit a row of the softmax: give it no {applied.over} axis")
    rows = [a for a in applied.inputs[0] if a != applied.over]
    extra = [a for a in sink if a not in rows]
    if extra:
        raise ValueError(f"{prim.name}'s sink (its {which} input) has axes [{', '.join(extra)}] its scores lack; a "
                         f"sink is one logit a row: lay it along [{', '.join(rows)}] or fewer of them")


def _sink_flops(prim: Primitive, applied: Applied, extent: Extent) -> dict[str, sympy.Expr]:
    """A sink's work once a row, when the row is complete: exp(sink - mu) and its add to the sum."""
    if prim.sink(applied) is None:
        return {}
    rows = _size(prim.rows(applied), extent)
    return {"sfu": rows, "vector": rows}


def _added(*parts: dict[str, sympy.Expr]) -> dict[str, sympy.Expr]:
    out: dict[str, sympy.Expr] = {}
    for part in parts:
        for pipe, n in part.items():
            out[pipe] = out.get(pipe, 0) + n
    return out


SINK_DOC = (" An optional last input, the sink: logits without `over`, one a row (`sinks: []`: one a head "
            "once the call weaves heads), in the units of the scores the softmax sees (after `scale`), that "
            "join its denominator and weigh nothing: exp(sink - mu) is added to the sum (gpt-oss's attention "
            "sinks; a sink of -inf is no sink).")


class Softmax(Primitive):
    name = "softmax"
    doc = ("SoftMax along `over` (optionally of scale * v). Not streamable by itself: it needs the "
           "whole row. Followed by a contraction over the same axis it streams as online softmax "
           "(Appendix A.3.2)." + SINK_DOC)
    needs_over = True
    takes_sink = True
    params = frozenset({"over", "scale"})
    mask_neutral = True
    # The accumulator of the fused pair softmax -> contraction (Table 4, unscaled SoftMax).
    pair_accumulator = Accumulator("online softmax (running max and sum)", 2,
                                   "mu <- max(mu', max(chunk)); delta <- exp(mu' - mu); "
                                   "z <- delta z' + sum exp(chunk - mu); acc <- delta acc + ...")

    def check(self, applied):
        super().check(applied)
        _check_sink(self, applied)

    def flops(self, applied, extent):
        n = _size(applied.inputs[0], extent)
        vector = 4 * n + (n if applied.scale is not None else 0)   # max, subtract, sum, divide (+scale)
        return _added({"sfu": n, "vector": vector}, _sink_flops(self, applied, extent))

    def online_flops(self, applied: Applied, extent: Extent) -> dict[str, sympy.Expr]:
        """Streamed with the contraction after it (Table 4, unscaled SoftMax): no division per item;
        the contraction's output is divided by z once instead (`pair_final_flops`, with the sink)."""
        n = _size(applied.inputs[0], extent)
        return {"sfu": n, "vector": 3 * n + (n if applied.scale is not None else 0)}


class Dot(Primitive):
    name, doc = "dot", "Contraction (inner product) over `over`: 2k FLOPs per output item."
    arity = 2
    params = frozenset({"over", "accumulate"})
    needs_over = True
    reduces = True
    contraction = True
    accumulator = Accumulator("running sum", 0, "acc <- acc + A_chunk . B_chunk (A.3.1)")

    def flops(self, applied, extent):
        return {"tensor": 2 * _size(applied.domain, extent)}

    def rows(self, applied):
        return ()

    def tensor_roles(self, applied):
        first, second = (set(a) for a in applied.inputs[:2])
        m = tuple(a for a in applied.output if a in first and a not in second)
        n = tuple(a for a in applied.output if a in second and a not in first)
        return {"m": m, "n": n, "k": (applied.over,)}


class SoftmaxDot(Dot):
    name = "softmax_dot"
    doc = ("SoftMax-contraction: softmax of the first input along `over`, contracted with the second "
           "over the same axis. Streamable with a running maximum and sum (Appendix A.3.2)." + SINK_DOC)
    params = frozenset({"over", "scale", "accumulate"})
    accumulator = Softmax.pair_accumulator
    mask_neutral = True
    takes_sink = True

    def check(self, applied):
        super().check(applied)
        _check_sink(self, applied)

    def flops(self, applied, extent):
        scores = _size(applied.inputs[0], extent)
        vector = 3 * scores + (scores if applied.scale is not None else 0)  # max, subtract, sum (+scale)
        return {"tensor": 2 * _size(applied.domain, extent), "sfu": scores, "vector": vector}

    def final_flops(self, applied, extent):   # divide the accumulator by z (z with the sink's exp, if any)
        return _added({"vector": _size(applied.output, extent)}, _sink_flops(self, applied, extent))

    def chunk_flops(self, applied, extent):
        rows = _size(self.rows(applied), extent)
        out = _size(applied.output, extent)
        return {"sfu": rows, "vector": out + 2 * rows}   # exp(delta); rescale acc; update mu and z

    def rows(self, applied):
        return Primitive.rows(self, applied)


REGISTRY: dict[str, Primitive] = {p.name: p for p in (
    Dot(), SoftmaxDot(), Softmax(), Exp(), Sigmoid(), Relu(), Tanh(), Gelu(), Reciprocal(), Rsqrt(), Scale(),
    Shift(), Softcap(), Add(), Sub(), Mul(), Div(), Sum(), Max(), CausalMask(), WindowMask(), BandMask(),
    Alibi())}


def get(name: str, *, field: str | None = None) -> Primitive:
    try:
        return REGISTRY[name]
    except KeyError:
        import difflib
        close = difflib.get_close_matches(name, REGISTRY, n=1)
        hint = f"did you mean {close[0]}?" if close else f"known primitives: {', '.join(REGISTRY)}"
        raise NapkinError(f"unknown primitive {name!r}", field=field, hint=hint) from None


def pair_chunk_flops(softmax: Applied, dot: Applied, extent: Extent) -> dict[str, sympy.Expr]:
    """Per-chunk accumulator work of the fused pair softmax -> dot (same work as softmax_dot)."""
    rows = _size(REGISTRY["softmax"].rows(softmax), extent)
    return {"sfu": rows, "vector": _size(dot.output, extent) + 2 * rows}


def pair_final_flops(softmax: Applied, dot: Applied, extent: Extent) -> dict[str, sympy.Expr]:
    """The fused pair divides the contraction's output by z once, the softmax's sink added to z first
    (as softmax_dot does)."""
    return _added({"vector": _size(dot.output, extent)}, _sink_flops(REGISTRY["softmax"], softmax, extent))
