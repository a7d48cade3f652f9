"""What the Hopper attention kernel's consumers do to a chunk of scores between its two contractions,
read off the diagram: the elementwise ops after S = Q K^T, in the diagram's order, and the
normalisation its second contraction asks for.

    dot (Q K^T over the head dim) -> [causal_mask] -> elementwise ops -> softmax_dot or dot (with V)

- `softmax_dot`: the online softmax (Appendix A.3.2): a running max and sum a row, every chunk's
  probabilities exp2'd and the output rescaled, divided by the sum at the end;
- `dot`: a plain running sum (Appendix A.3.1): the ops' values weight V as they are, nothing is
  rescaled and nothing divides the output (sigmoid attention).

Each elementwise op has the lowering the kernel gives it and what that costs on the special function
unit (SFU), which the model's loop body counts (analyzer.config.hopper._body): sigmoid is 1/2 tanh(v/2) +
1/2, one `tanh.approx.f32` a score, where 1/(1 + exp(-v)) would take an exp and a reciprocal; tanh and
softcap (cap tanh(v / cap), Gemma 2's bound on its scores) take one tanh.approx.f32 too.
"""

from __future__ import annotations

from dataclasses import dataclass
from itertools import pairwise

import sympy

from analyzer.diagram.compiled import Op

# Elementwise primitives the consumers apply to the scores in registers, with the special-function
# operations a score each costs as the kernel lowers it (analyzer.codegen.hopper.kernel)
SFU_PER_SCORE = {"scale": 0, "relu": 0, "sigmoid": 1, "exp": 1, "tanh": 1, "softcap": 1}


@dataclass(frozen=True)
class ScoreOp:
    """One elementwise op of the chain: its name in the diagram, its primitive, its factor (scale) or
    bound (softcap)."""

    name: str
    primitive: str
    scale: sympy.Expr | None = None
    cap: sympy.Expr | None = None


@dataclass(frozen=True)
class Scores:
    """The chain of a diagram's scores. The default is softmax attention: no op between the
    contractions, the online softmax."""

    ops: tuple[ScoreOp, ...] = ()
    softmax: bool = True            # the online softmax; False: a plain running sum
    causal: bool = False            # a causal mask first (top-left aligned)

    @property
    def sfu_per_score(self) -> int:
        """SFU operations a score: the ops' and, with the softmax, its exp2."""
        return sum(SFU_PER_SCORE[o.primitive] for o in self.ops) + (1 if self.softmax else 0)

    @property
    def sfu_per_row(self) -> int:
        """SFU operations a row and chunk beyond its scores': the softmax's rescale, exp2(m_old - m_new)."""
        return 1 if self.softmax else 0

    @property
    def scale(self) -> ScoreOp | None:
        """The chain's scale op (the kernel takes one factor as an argument), or None."""
        return next((o for o in self.ops if o.primitive == "scale"), None)

    def label(self) -> str:
        chain = [o.primitive for o in self.ops] + ["softmax" if self.softmax else "sum"]
        return " -> ".join((["causal_mask"] if self.causal else []) + chain)


SOFTMAX = Scores()


def scores_of(ops: list[Op], head_dim: str, seq_k: str) -> Scores | str:
    """The score chain of a kernel's ops (the first contraction first), or why the Hopper kernel does not
    realise it (one line)."""
    names = [o.primitive.name for o in ops]
    shape = "dot -> [causal_mask ->] elementwise ops -> softmax_dot or dot"
    if len(ops) < 2 or names[0] != "dot" or names[-1] not in ("dot", "softmax_dot"):
        return f"its kernel is {' -> '.join(names)}; the Hopper kernel realises {shape}"
    first, last = ops[0], ops[-1]
    if first.applied.over != head_dim or last.applied.over != seq_k:
        return "it contracts other axes than q k^T over the head dim and p v over the keys"
    chain = ops[1:-1]
    for prev, op in pairwise(ops):
        if op.inputs[0] != prev.name:
            return f"{op.name} does not take {prev.name}: the Hopper kernel realises one chain of scores"
    causal = bool(chain) and chain[0].primitive.name == "causal_mask"
    if causal:
        m = chain[0].applied
        if m.key != seq_k:
            return f"{chain[0].name} masks along {m.key}, not the keys {seq_k}"
        chain = chain[1:]
    out = []
    for op in chain:
        p = op.primitive.name
        if p not in SFU_PER_SCORE:
            where = "after the first op" if p == "causal_mask" else "between the contractions"
            return (f"{op.name} is {p} {where}; the Hopper kernel applies "
                    f"{', '.join(sorted(SFU_PER_SCORE))} to the scores, after a causal mask")
        if len(op.inputs) != 1:
            return f"{op.name} takes {len(op.inputs)} inputs; the Hopper kernel's score ops take the scores alone"
        out.append(ScoreOp(op.name, p, op.applied.scale if p == "scale" else None,
                           op.applied.cap if p == "softcap" else None))
    if sum(o.primitive == "scale" for o in out) > 1:
        return "its scores are scaled twice; the Hopper kernel takes one factor (fold them into one scale)"
    return Scores(tuple(out), softmax=names[-1] == "softmax_dot", causal=causal)


__all__ = ["SFU_PER_SCORE", "SOFTMAX", "ScoreOp", "Scores", "scores_of"]
