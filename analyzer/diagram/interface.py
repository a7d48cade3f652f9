"""How a generated kernel is called from Python: which diagram axis is which tensor dimension.

An attention-shaped diagram (scores from a contraction of two inputs, then a contraction of what they
become with a third input over the key axis) is called like torch's scaled_dot_product_attention:
`attention(q, k, v, causal=...)` with tensors of shape (batch, heads, seqlen, head_dim), where k and v may
have fewer heads (grouped-query); `causal` says whether the diagram's masks hide every key after its
query (`causal_mask`, a sliding `window_mask`, a `band_mask` with after: 0), and `band` which keys a query
sees. The roles are read off the diagram's structure, not its names:

- head_dim: the axis the scores' contraction reduces;   seq_q / seq_k: its m and n axes;
- heads: an axis shared by the query, key and value;    group: an axis only the query has (GQA);
- value_dim: the value's axis that the output keeps;
- extras: inputs besides q, k and v that enter the scores between the two contractions as the second
  operand of an op (ALiBi's slopes, an additive bias) or as the softmax's sink logits (the last input of
  softmax or softmax_dot), passed after v in file order; each laid out as (batch, heads, then its own
  axes among seq_q and seq_k), broadcast like SDPA's attn_mask;
- and between the two contractions the scores are normalised (softmax, softmax_dot or sigmoid).

The diagram is weaved over `batch`, and over `heads` where it has no head axis (analyzer.diagram.weave).
Any other diagram is called with its inputs in file order, each with its axes in file order, e.g.
`matmul(A, B)`.
"""

from __future__ import annotations

from dataclasses import dataclass

from analyzer.diagram.compiled import Diagram, Op
from analyzer.diagram.primitives import Mask, narrower
from analyzer.diagram.weave import Outer

NORMALISERS = ("softmax", "softmax_dot", "sigmoid")   # what turns scores into attention weights
BATCH = Outer("batch", "batch entries (torch's leading dimension): the whole diagram weaved over them")
HEADS = Outer("heads", "attention heads: the whole diagram weaved over them")


@dataclass(frozen=True)
class Band:
    """The keys each query sees under the diagram's masks: query i sees keys i - before .. i + after, top-left
    aligned like torch's is_causal (None: every key on that side). Two masks: the narrower bound on each side."""

    before: int | None
    after: int | None

    @property
    def causal(self) -> bool:
        """Whether every key after its query is hidden."""
        return self.after == 0


@dataclass(frozen=True)
class Attention:
    """The roles of an attention-shaped diagram (names of its arrays and axes)."""

    query: str
    key: str
    value: str
    output: str
    seq_q: str
    seq_k: str
    head_dim: str
    value_dim: str
    heads: str | None
    group: str | None
    band: Band | None = None      # the keys a query sees under the masks; None: no mask, every key
    extras: tuple[str, ...] = ()  # inputs of the score chain besides q, k and v, in file order

    @property
    def causal(self) -> bool:
        """Whether the masks hide every key after its query (the call's `causal`)."""
        return self.band is not None and self.band.causal

    @property
    def window(self) -> int | None:
        """Under a causal mask, the keys a query sees, its own included (a sliding window); None: all before it."""
        return self.band.before + 1 if self.causal and self.band.before is not None else None

    @property
    def outer(self) -> tuple[Outer, ...]:
        return (BATCH,) if self.heads else (BATCH, HEADS)


@dataclass(frozen=True)
class Plain:
    """Any other diagram: its inputs and outputs in file order."""

    inputs: tuple[str, ...]
    outputs: tuple[str, ...]
    outer: tuple[Outer, ...] = ()


def interface(d: Diagram) -> Attention | Plain:
    found = _attention(d)
    return found if found is not None else Plain(tuple(n for n, a in d.arrays.items() if a.role == "input"),
                                                 d.outputs)


def _attention(d: Diagram) -> Attention | None:
    inputs = [n for n, a in d.arrays.items() if a.role == "input"]
    contractions = [o for o in d.ops if o.primitive.contraction]
    if len(inputs) < 3 or len(d.outputs) != 1 or len(contractions) != 2:
        return None
    scores, mix = contractions
    if not set(scores.inputs) <= set(inputs) or len(set(scores.inputs)) != 2:
        return None
    q_name, k_name = scores.inputs
    v_name = mix.operands[1]
    extras = tuple(n for n in inputs if n not in (q_name, k_name, v_name))
    if v_name not in inputs or mix.name != d.outputs[0] or not _feeds(d, scores, mix, extras):
        return None
    chain = [o for o in d.ops if o.column > scores.column and o.column <= mix.column]
    if not any(o.primitive.name in NORMALISERS for o in chain):
        return None
    roles = scores.primitive.tensor_roles(scores.applied)
    if len(roles["m"]) < 1 or len(roles["n"]) != 1:
        return None
    seq_k = roles["n"][0]
    if mix.applied.over != seq_k:
        return None
    axes = d.axes_of()
    q_axes, k_axes, v_axes = set(axes[q_name]), set(axes[k_name]), set(axes[v_name])
    shared = (q_axes & k_axes & v_axes) - {seq_k, scores.applied.over}
    group = [a for a in roles["m"] if a not in k_axes]
    seq_q = group.pop() if group else None             # the innermost query-only axis: positions
    value_dim = [a for a in v_axes if a not in shared and a != seq_k]
    if seq_q is None or len(shared) > 1 or len(group) > 1 or len(value_dim) != 1:
        return None
    if set(axes[q_name]) != {*shared, *group, seq_q, scores.applied.over}:
        return None
    if any(not set(axes[e]) <= {*shared, *group, seq_q, seq_k} for e in extras):
        return None     # an extra input is laid out along the heads and the two sequences only
    return Attention(q_name, k_name, v_name, mix.name, seq_q, seq_k, scores.applied.over, value_dim[0],
                     next(iter(shared), None), group[0] if group else None, _band(d), extras)


def _band(d: Diagram) -> Band | None:
    """What the diagram's masks leave a query: each side's narrowest bound over them; None: no mask."""
    masks = [o for o in d.ops if isinstance(o.primitive, Mask)]
    if not masks:
        return None
    before = after = None
    for o in masks:
        b, a = o.primitive.keys_before(o.applied), o.primitive.keys_after(o.applied)
        before = narrower(before, None if b is None else int(b))
        after = narrower(after, None if a is None else int(a))
    return Band(before, after)


def _feeds(d: Diagram, first: Op, last: Op, extras: tuple[str, ...]) -> bool:
    """Whether `first`'s output reaches `last` through elementwise ops only, each taking the chain as its
    first input and, if any, one of `extras` as its second (or a softmax's sink as its last); and the
    extras feed nothing else."""
    name = first.name
    used: list[str] = []
    while True:
        users = d.consumers(name)
        if len(users) != 1:
            return False
        user = users[0]
        if user is last:
            used += [last.sink] if last.sink else []
            return user.inputs[0] == name and sorted(used) == sorted(extras) \
                and all(len(d.consumers(e)) == 1 for e in extras)
        if user.inputs[0] != name or (user.primitive.arity != 1 and user.primitive.name != "softmax"
                                      and (len(user.inputs) != 2 or user.inputs[1] not in extras)):
            return False
        used += user.inputs[1:]
        name = user.name
