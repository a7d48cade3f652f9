"""The float64 answer a generated kernel is checked against: each op of the diagram as torch computes it
(contractions by einsum), at the call's layout, and the tolerance its error is held to.

A kernel in fp16 or bf16 rounds every intermediate and its output; over a reduction of L terms those
rounding errors add up like sqrt(L) u, u the element type's unit roundoff (Higham and Mary, "A new
approach to probabilistic rounding error analysis", SIAM J. Sci. Comput. 41(5), 2019): the largest error
over the largest reference value is held to sqrt(L) u, L the diagram's longest reduction.

torch is passed in (`torch`: the module), not imported here: napkin computes its models without it, and
only what runs a kernel (napkin measure, the bench scripts) needs it.
"""

from __future__ import annotations

import math
from typing import Any

from analyzer.common.expr import at
from analyzer.diagram.interface import Attention

ROUNDOFF = {"fp16": 2.0 ** -11, "bf16": 2.0 ** -8}   # unit roundoff: half the spacing of the numbers at 1


def inputs(g, sizes: dict[str, int] | None = None) -> tuple[list[list[int]], dict[str, Any]]:
    """The shapes of the wrapper's tensors at the diagram's default sizes (or `sizes` where it names
    them), and its keyword arguments:
    (batch, heads, seqlen, head_dim) for attention, with the key/value heads of a grouped-query diagram,
    then the scores' other inputs (ALiBi's slopes: (batch, heads));
    the diagram's axes in order for the others."""
    size = g.axis_sizes(sizes or {})
    r = g.roles
    if isinstance(r, Attention):
        heads = size(r.heads) if r.heads else size("heads")
        queries = heads * (size(r.group) if r.group else 1)
        batch = size("batch")
        extras = [[batch, queries, *(size(a) for a in g.diagram.arrays[n].axes if a in (r.seq_q, r.seq_k))]
                  for n in r.extras]       # the scores' other inputs: (batch, heads, their sequence axes)
        return ([[batch, queries, size(r.seq_q), size(r.head_dim)], [batch, heads, size(r.seq_k), size(r.head_dim)],
                 [batch, heads, size(r.seq_k), size(r.value_dim)], *extras], {"causal": r.causal})
    return [[size(a) for a in g.diagram.arrays[n].axes] for n in r.inputs], {}


def reduction(g, sizes: dict[str, int] | None = None) -> int:
    """The longest axis the diagram sums over (a contraction, softmax or reduction) at its defaults (or
    `sizes`)."""
    size = g.axis_sizes(sizes or {})
    return max((size(op.applied.over) for op in g.diagram.ops if op.applied.over), default=1)


def tolerance(dtype: str, length: int) -> float:
    """The largest error over the largest reference value a row may have: sqrt(L) u."""
    return math.sqrt(length) * ROUNDOFF[dtype]


def evaluate(torch: Any, d, arrays: dict[str, Any], sizes: dict[str, int] | None = None) -> dict[str, Any]:
    """Every array of diagram `d` in float64 at its default sizes (`sizes`, by size symbol name, where
    given: what a scale such as 1/sqrt(d) reads): `arrays` holds its inputs, each a tensor whose
    dimensions are the array's axes in order; each op's output is laid out the same way."""
    symbols = {s: int((sizes or {}).get(s.name, v)) for s, v in d.defaults.items()}
    letters = {a: chr(ord("a") + i) for i, a in enumerate(d.axes)}
    out = {name: t.double() for name, t in arrays.items()}
    axes_of = d.axes_of()

    def aligned(name: str, axes: tuple[str, ...]) -> Any:
        """Array `name` laid along `axes` (its own axes permuted, the missing ones of size 1)."""
        own = axes_of[name]
        t = out[name].permute(*[own.index(a) for a in axes if a in own])
        shape = [t.shape[[a for a in axes if a in own].index(a)] if a in own else 1 for a in axes]
        return t.reshape(shape)

    for op in d.ops:
        a = op.applied
        prim = op.primitive.name
        scale = float(at(a.scale, symbols)) if a.scale is not None else None
        if prim in ("dot", "softmax_dot"):
            first, second = op.operands
            x = out[first]
            if prim == "softmax_dot":
                axis = axes_of[first].index(a.over)
                x = _softmax(torch, x * (scale if scale is not None else 1.0), axis,
                             aligned(op.sink, axes_of[first]) if op.sink else None)
            spec = (f"{''.join(letters[x] for x in axes_of[first])},{''.join(letters[x] for x in axes_of[second])}"
                    f"->{''.join(letters[x] for x in a.output)}")
            out[op.name] = torch.einsum(spec, x, out[second])
            continue
        x = aligned(op.inputs[0], a.output) if prim not in ("sum", "max", "softmax") else out[op.inputs[0]]
        if prim == "softmax":
            y = _softmax(torch, x * (scale if scale is not None else 1.0), axes_of[op.inputs[0]].index(a.over),
                         aligned(op.sink, axes_of[op.inputs[0]]) if op.sink else None)
            out[op.name] = y.permute(*[axes_of[op.inputs[0]].index(o) for o in a.output])
        elif prim in ("sum", "max"):
            dim = axes_of[op.inputs[0]].index(a.over)
            y = x.sum(dim) if prim == "sum" else x.amax(dim)
            kept = [o for o in axes_of[op.inputs[0]] if o != a.over]
            out[op.name] = y.permute(*[kept.index(o) for o in a.output])
        elif prim in ("add", "sub", "mul", "div"):
            y = aligned(op.inputs[1], a.output)
            out[op.name] = {"add": x + y, "sub": x - y, "mul": x * y, "div": x / y}[prim]
        elif prim == "scale":
            out[op.name] = x * scale
        elif prim == "shift":
            out[op.name] = x + float(at(a.offset, symbols))
        elif prim == "softcap":
            cap = float(at(a.cap, symbols))
            out[op.name] = cap * torch.tanh(x / cap)
        elif prim == "alibi":                # v - m |i - j|
            q, k = a.output.index(a.query), a.output.index(a.key)
            rows_ = torch.arange(x.shape[q], device=x.device).reshape([-1 if i == q else 1 for i in range(x.dim())])
            cols = torch.arange(x.shape[k], device=x.device).reshape([-1 if i == k else 1 for i in range(x.dim())])
            out[op.name] = x - aligned(op.inputs[1], a.output) * (rows_ - cols).abs().double()
        elif prim in ("causal_mask", "window_mask", "band_mask"):    # query i sees keys i - before .. i + after
            q, k = a.output.index(a.query), a.output.index(a.key)
            rows_ = torch.arange(x.shape[q], device=x.device).reshape([-1 if i == q else 1 for i in range(x.dim())])
            cols = torch.arange(x.shape[k], device=x.device).reshape([-1 if i == k else 1 for i in range(x.dim())])
            before, after = op.primitive.keys_before(a), op.primitive.keys_after(a)
            hidden = torch.zeros((), dtype=torch.bool, device=x.device)
            if after is not None:           # the keys after the band (after the query, under a causal mask)
                hidden = hidden | (cols > rows_ + int(after))
            if before is not None:          # and those before it
                hidden = hidden | (cols < rows_ - int(before))
            out[op.name] = x.masked_fill(hidden, float("-inf"))
        else:
            out[op.name] = {"exp": torch.exp, "sigmoid": torch.sigmoid, "relu": torch.relu, "tanh": torch.tanh,
                            "reciprocal": torch.reciprocal, "rsqrt": torch.rsqrt,
                            "gelu": lambda t: torch.nn.functional.gelu(t, approximate="tanh")}[prim](x)
    return out


def _softmax(torch: Any, x: Any, axis: int, sink: Any = None) -> Any:
    """softmax of `x` along `axis`; `sink` (x's layout, size 1 along `axis` and wherever it is copied),
    logits that join the denominator and weigh nothing: one more column, dropped after the softmax."""
    if sink is None:
        return torch.softmax(x, dim=axis)
    shape = list(x.shape)
    shape[axis] = 1
    both = torch.cat([x, sink.expand(shape)], dim=axis)
    return torch.softmax(both, dim=axis).narrow(axis, 0, x.shape[axis])


def reference(torch: Any, g, tensors: list[Any], sizes: dict[str, int] | None = None) -> Any:
    """The float64 output of the call `tensors` makes of generated file `g` (at `sizes`, default the
    diagram's), in the call's layout."""
    d, r = g.diagram, g.roles
    if not isinstance(r, Attention):
        values = evaluate(torch, d, dict(zip(r.inputs, tensors, strict=True)), sizes)
        (name,) = r.outputs
        return values[name]
    o = evaluate(torch, d, _arrays(g, tensors, sizes), sizes)[r.output]
    return _to_call(o, d.arrays[r.output].axes, r, r.seq_q, r.value_dim)


def reference_lse(torch: Any, g, tensors: list[Any], sizes: dict[str, int] | None = None) -> Any:
    """The float64 log-sum-exp (natural log) of each query row's scores, the softmax's sink among them,
    in the call's (batch, heads, seqlen) layout: what attention(..., return_lse=True) returns beside
    the output. The scores are what the output's softmax normalises, its scale applied."""
    d, r = g.diagram, g.roles
    values = evaluate(torch, d, _arrays(g, tensors, sizes), sizes)
    axes_of = d.axes_of()
    op = next(o for o in reversed(d.ops) if o.primitive.name in ("softmax_dot", "softmax"))
    scores, a = op.inputs[0], op.applied
    symbols = {s: int((sizes or {}).get(s.name, v)) for s, v in d.defaults.items()}
    scale = float(at(a.scale, symbols)) if a.scale is not None else 1.0
    own = axes_of[scores]
    x = values[scores] * scale
    if op.sink:     # one more logit a row, as the softmax's (_softmax): the sink laid along the scores' axes
        theirs = axes_of[op.sink]
        sink = values[op.sink].permute(*[theirs.index(o) for o in own if o in theirs])
        sink = sink.reshape([x.shape[own.index(o)] if o in theirs else 1 for o in own])
        shape = list(x.shape)
        shape[own.index(a.over)] = 1
        x = torch.cat([x, sink.expand(shape)], dim=own.index(a.over))
    lse = torch.logsumexp(x, dim=own.index(a.over))
    kept = [o for o in own if o != a.over]
    want = ["batch", *[h for h in _heads(r) if h in kept], r.seq_q]
    lse = lse.permute(*[kept.index(o) for o in want])
    return lse.reshape(lse.shape[0], -1, lse.shape[-1])


def _arrays(g, tensors: list[Any], sizes: dict[str, int] | None) -> dict[str, Any]:
    """The diagram's input arrays of an attention call `tensors`, each laid along its axes."""
    d, r = g.diagram, g.roles
    size = g.axis_sizes(sizes or {})
    arrays = {}
    for name, t, seq, dim in ((r.query, tensors[0], r.seq_q, r.head_dim), (r.key, tensors[1], r.seq_k, r.head_dim),
                              (r.value, tensors[2], r.seq_k, r.value_dim)):
        arrays[name] = _from_call(t, d.arrays[name].axes, r, seq, dim, size)
    for name, t in zip(r.extras, tensors[3:], strict=True):     # (batch, heads, then its sequence axes)
        axes = d.arrays[name].axes
        heads = [h for h in _heads(r) if h in axes]
        seqs = [a for a in axes if a in (r.seq_q, r.seq_k)]
        lengths = {r.seq_q: tensors[0].shape[2], r.seq_k: tensors[1].shape[2]}     # the call's, not the defaults
        shape = (size("batch"), size(r.heads) * (size(r.group) if r.group else 1) if r.heads else size("heads"),
                 *(lengths[a] for a in seqs))
        t = t.broadcast_to(shape).reshape(shape[0], *[size(h) for h in heads], *shape[2:])
        have = ["batch", *heads, *seqs]
        arrays[name] = t.permute(*[have.index(a) for a in axes])
    return arrays


def _heads(r) -> list[str]:
    return [r.heads, *([r.group] if r.group else [])] if r.heads else ["heads"]


def _from_call(t: Any, axes: tuple[str, ...], r, seq: str, dim: str, size) -> Any:
    """A (batch, heads, seqlen, dim) tensor as the diagram's array with `axes`: its heads split into the
    diagram's head axes (key/value heads, then the query group)."""
    heads = [h for h in _heads(r) if h in axes]
    t = t.reshape(t.shape[0], *[size(h) for h in heads], t.shape[2], t.shape[3])
    have = ["batch", *heads, seq, dim]
    return t.permute(*[have.index(a) for a in axes])


def _to_call(o: Any, axes: tuple[str, ...], r, seq: str, dim: str) -> Any:
    heads = [h for h in _heads(r) if h in axes]
    want = ["batch", *heads, seq, dim]
    o = o.permute(*[axes.index(a) for a in want])
    return o.reshape(o.shape[0], -1, o.shape[-2], o.shape[-1])


__all__ = ["ROUNDOFF", "evaluate", "inputs", "reduction", "reference", "reference_lse", "tolerance"]
