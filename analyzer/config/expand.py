"""Pseudocode expansion of a relabelled kernel (Sections 5.1-5.2, Figures 27-30).

A streamed kernel expands into an explicit loop: the head F initialises the maintained outputs (and
the auxiliaries of online softmax) as if it had seen a stream of size 0, the body B folds in one chunk
of the streamed axis per iteration, and the tail finishes (dividing by z). Every array appears with
its tile shape, so the columns read as the variables to pre-allocate. Section 5.2's degrees of freedom
come out of the same structure: an accumulator is streamable, so it allows a subloop over chunks of
its chunk; a contraction splits along any of its axes and adds up linearly (the dotted boxes).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from analyzer.common.errors import NapkinError
from analyzer.common.expr import to_text
from analyzer.diagram.compiled import Diagram, Op
from analyzer.model.fusion import Reducer, Schedule, schedule


@dataclass(frozen=True)
class Line:
    """One statement of the pseudocode, with what it means."""

    code: str
    note: str = ""
    depth: int = 0


@dataclass(frozen=True)
class Freedom:
    """A degree of freedom the expansion exposes (Section 5.2)."""

    kind: str       # "subloop" or "split"
    op: str
    axes: tuple[str, ...]
    text: str


@dataclass(frozen=True)
class Expansion:
    diagram: str
    kernel: str
    level: str
    relabelling: str
    lines: tuple[Line, ...]
    freedoms: tuple[Freedom, ...] = field(default_factory=tuple)


def expand(diagram: Diagram, *, kernel: str | None = None, level: str | None = None) -> list[Expansion]:
    """The loop form of every kernel (or the one named) at `level` (default: the lowest level)."""
    level = level or diagram.levels[-1]
    if level not in diagram.levels[1:]:
        raise NapkinError(f"--level {level!r}: {diagram.name} relabels its kernels at "
                          f"{', '.join(diagram.levels[1:])}", hint="pick one of those levels")
    kernels = list(diagram.kernels)
    if kernel is not None:
        kernels = [k for k in kernels if k.name == kernel]
        if not kernels:
            raise NapkinError(f"--kernel {kernel!r}: {diagram.name} has no such kernel",
                              hint=f"kernels: {', '.join(k.name for k in diagram.kernels)}")
    return [_expand(schedule(diagram, k, level)) for k in kernels]


def _expand(s: Schedule) -> Expansion:
    d = s.diagram
    part = s.partition
    groups = part.group_sizes
    b, chunk = part.stream if part.stream else (None, None)

    def tile(axis: str) -> str:
        if axis in groups:
            return groups[axis].name
        if axis == b:
            return chunk.name
        return axis

    def shape(name: str) -> str:
        return f"{name}[{', '.join(tile(a) for a in d.arrays[name].axes)}]"

    lines: list[Line] = []
    depth = 0
    if groups:
        counts = ", ".join(f"{a}/{g.name}" for a, g in groups.items())
        tiles = ", ".join(f"{g.name} of {a}" for a, g in groups.items())
        lines.append(Line(f"for each block of {tiles}:", f"in parallel, {counts} blocks (group "
                          "partition, Section 2.3)"))
        depth = 1
    held = [n for n in s.loads if b is None or b not in d.arrays[n].axes]
    streamed = [n for n in s.loads if n not in held]
    for name in held:
        lines.append(Line(f"load {shape(name)}", f"{d.top} -> {s.level}", depth))
    for name in s.resident:
        lines.append(Line(f"hold {shape(name)}", f"already at {s.level}", depth))
    for op in s.head:
        lines.append(Line(_statement(op, shape), "head", depth))
    for r in s.reducers:                          # Figure 27: the head F on a stream of size 0
        lines.append(Line(_initial(r, shape, tile), "head: state after a stream of size 0", depth))
    if b is not None:
        lines.append(Line(f"for each chunk of {chunk.name} of {b}:",
                          f"{to_text(d.size(b))}/{chunk.name} chunks, in order (stream partition, "
                          "Section 2.4)", depth))
        depth += 1
        for name in streamed:
            lines.append(Line(f"load {shape(name)}", f"{d.top} -> {s.level}", depth))
    reducer_of = {r.op.name: r for r in s.reducers}
    fused = {r.softmax.name for r in s.reducers if r.softmax is not None}
    for op in s.body:
        if op.name in fused:
            continue                              # folded into its contraction's accumulator
        if op.name in reducer_of:
            for code, note in _accumulate(reducer_of[op.name], shape, tile):
                lines.append(Line(code, note, depth))
        else:
            lines.append(Line(_statement(op, shape), _pipes(op), depth))
    if b is not None:
        depth -= 1
    for r in s.reducers:
        sink = (r.softmax or r.op).sink
        if sink is not None:
            lines.append(Line(f"z <- z + exp({sink} - mu)", "tail: the sink joins the sum (special function unit)",
                              depth))
        if r.softmax is not None or r.accumulator.aux_per_row:
            lines.append(Line(f"{shape(r.op.name)} <- {r.op.name} / z", "tail: normalise once", depth))
    for op in s.tail:
        lines.append(Line(_statement(op, shape), "tail", depth))
    for name in s.saves:
        lines.append(Line(f"save {shape(name)}", f"{s.level} -> {d.top}", depth))
    relabel = ", ".join([f"{a} -> {g.name}" for a, g in groups.items()]
                        + ([f"{b} -> {chunk.name} (stream)"] if b else [])) or "none"
    return Expansion(d.name, s.kernel.name, s.level, relabel, tuple(lines), _freedoms(s, tile))


# -- statements ----------------------------------------------------------------------------------------

def _statement(op: Op, shape) -> str:
    args = ", ".join(op.inputs)
    extra = f" over {op.applied.over}" if op.applied.over else ""
    if op.applied.scale is not None:
        extra += f", scale {to_text(op.applied.scale)}"
    return f"{shape(op.name)} <- {op.primitive.name}({args}){extra}"


def _pipes(op: Op) -> str:
    return "tensor cores" if op.primitive.contraction else "threads"


def _initial(r: Reducer, shape, tile) -> str:
    out = shape(r.op.name)
    if r.softmax is not None or r.accumulator.aux_per_row:
        rows = ", ".join(tile(a) for a in r.rows)
        return f"{out} <- 0; mu[{rows}] <- -inf; z[{rows}] <- 0"
    start = {"max": "-inf"}.get(r.op.primitive.name, "0")
    return f"{out} <- {start}"


def _accumulate(r: Reducer, shape, tile) -> list[tuple[str, str]]:
    """The accumulator B of one chunk (Appendix A.3, Table 4 unscaled SoftMax)."""
    op = r.op
    out = shape(op.name)
    b = op.applied.over
    if r.softmax is not None or r.accumulator.aux_per_row:
        scores, values = op.operands if r.softmax is None else (r.softmax.inputs[0], op.inputs[1])
        scale = (r.softmax or op).applied.scale
        beta = f"{to_text(scale)} * " if scale is not None else ""
        rows = ", ".join(tile(a) for a in r.rows)
        chunk = tile(b)
        return [(f"mu_new[{rows}] <- max(mu, max over {chunk} of {beta}{scores})", "threads"),
                (f"delta[{rows}] <- exp(mu - mu_new); mu <- mu_new", "special function unit"),
                (f"P <- exp({beta}{scores} - mu)", "special function unit"),
                (f"z <- delta * z + sum over {chunk} of P", "threads"),
                (f"{out} <- delta * {op.name} + dot(P, {values}) over {chunk}",
                 "tensor cores; the rescale on threads")]
    if op.primitive.contraction:
        return [(f"{out} <- {op.name} + dot({', '.join(op.inputs)}) over {tile(b)}",
                 "tensor cores, accumulating (A.3.1)")]
    how = {"max": "max", "sum": "+"}.get(op.primitive.name, op.primitive.name)
    return [(f"{out} <- {op.name} {how} {op.primitive.name}({', '.join(op.inputs)}) over {tile(b)}",
             "threads, accumulating")]


def _freedoms(s: Schedule, tile) -> tuple[Freedom, ...]:
    out: list[Freedom] = []
    b, chunk = s.partition.stream if s.partition.stream else (None, None)
    for r in s.reducers:
        u = f"u_{b}"
        out.append(Freedom("subloop", r.op.name, (b,),
                           f"the accumulator of {r.op.name} is streamable: each chunk of {chunk.name} "
                           f"may be folded in as subloops of {u} (Section 5.2)"))
    for op in s.body + s.head + s.tail:
        if op.primitive.contraction:
            axes = tuple(dict.fromkeys(op.applied.domain))
            out.append(Freedom("split", op.name, axes,
                               f"the contraction {op.name} splits along any of "
                               f"{', '.join(tile(a) for a in axes)} and adds up linearly (dotted box)"))
    return tuple(out)


def render(expansions: list[Expansion]) -> str:
    """Readable pseudocode, one block per kernel."""
    blocks = []
    for e in expansions:
        head = [f"# {e.diagram}, kernel {e.kernel}, relabelled at {e.level}: {e.relabelling}"]
        width = max((4 * ln.depth + len(ln.code) for ln in e.lines), default=0) + 2
        body = []
        for ln in e.lines:
            code = "    " * ln.depth + ln.code
            body.append(f"{code.ljust(width)}# {ln.note}" if ln.note else code)
        free = ["", "# degrees of freedom"] + [f"#   {f.kind}: {f.text}" for f in e.freedoms]
        blocks.append("\n".join(head + body + (free if e.freedoms else [])))
    return "\n\n".join(blocks)

