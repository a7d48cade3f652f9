"""What the Hopper attention kernel's consumers do to a chunk of scores between its two contractions,
read off the diagram: the elementwise ops after S = Q K^T, in the diagram's order, and the
normalisation its second contraction asks for.

    dot (Q K^T over the head dim) -> elementwise ops and masks -> softmax_dot or dot (with V)

- `softmax_dot`: the online softmax (Appendix A.3.2): a running max and sum a row, every chunk's
  probabilities exp2'd and the output rescaled, divided by the sum at the end; with a sink (its third
  input, a logit a head from the call: gpt-oss's attention sinks, `Scores.sink`) exp(sink - m) joins
  the sum before the division, one exp2 a row (log2 e times the sink, in the exp2 domain's units), and
  nothing else changes;
- `dot`: a plain running sum (Appendix A.3.1): the ops' values weight V as they are, nothing is
  rescaled and nothing divides the output (sigmoid attention).

Each elementwise op has the lowering the kernel gives it and what that costs on the special function
unit (SFU), which the model's loop body counts (analyzer.config.hopper._body): sigmoid is 1/2 tanh(v/2) +
1/2, one `tanh.approx.f32` a score, where 1/(1 + exp(-v)) would take an exp and a reciprocal; tanh and
softcap (cap tanh(v / cap), Gemma 2's bound on its scores) take one tanh.approx.f32 too. ALiBi's bias
(v - m |i - j|, m a slope per head loaded once a tile) takes no SFU operation but fp32 ones on the
threads' vector lanes, which the body counts at the lanes' rate beside the SFU's work: two a score
(|i - j| from the positions as floats, then a fused multiply-add), or one where the softmax makes the
bias a column's alone (`ScoreOp.shifted`): under a causal mask every weighed key has j <= i, so
-m |i - j| = m (j - r) - m (i - r) for any r, and the softmax ignores what is the same along a row.
An additive bias (`add` with an input of the call: SDPA's float attn_mask) is one add a score on the
lanes and a tile of the bias a chunk, which the consumers load from memory (the model's loads count it).

A mask (`causal_mask`, `window_mask`: causal with a sliding window, or `band_mask`: query i sees keys
i - before .. i + after) sets -inf where the diagram puts it; the ops after it must carry a masked score
to what the normalisation ignores (-inf before the softmax, 0 before a plain sum), so that the blocks it
empties can be skipped: a softcap after a mask would turn -inf into -cap, which the softmax weighs. Each
mask is read as its band: the keys a query sees before its own (`ScoreOp.window`, its own included) and
after it (`ScoreOp.right`: 0 for a causal mask, and so for a band with after: 0, which is the same mask).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from itertools import pairwise

import numpy as np
import sympy

from analyzer.diagram.compiled import Op
from analyzer.diagram.interface import Band
from analyzer.diagram.primitives import REGISTRY, Mask

# Elementwise primitives the consumers apply to the scores in registers, with the special-function
# operations a score each costs as the kernel lowers it (analyzer.codegen.hopper.kernel)
SFU_PER_SCORE = {"scale": 0, "relu": 0, "sigmoid": 1, "exp": 1, "tanh": 1, "softcap": 1, "alibi": 0, "add": 0}
# fp32 operations a score each costs on the vector lanes beyond what the calibrated softmax overhead covers
VECTOR_PER_SCORE = {"alibi": 2, "alibi shifted": 1, "add": 1,
                    # FP8's probabilities rounded to e4m3 for P V: a cvt.rn.satfinite.e4m3x2.f32 two scores, as
                    # the 16-bit one it replaces, and a prmt four (packed to a register): a quarter beyond
                    "e4m3": 0.25}
# Registers a consumer thread holds for an op beyond the softmax's, as ptxas for sm_90a allocates them
# (bench/register_scan.py, bench/results/register_scan_h100.md: every configuration of the shipped
# variants within 24 registers of the rule's edge compiled, and where each spilled):
# - per score of a chunk a thread holds (rows x s_x / 128): ALiBi keeps its distances as fp32 beside the
#   scores, 3/4 of a chunk's (it spilled 60 B with 40 registers free at s_x = 128, none with 48; 156 B with
#   8 free at s_x = 64, none with 40); the bias its 16-bit tile, half a chunk's (92 B with 8 free at
#   s_x = 64, none with 40 at s_x = 64 or 128);
# - a few a thread for an op on the special function unit (its constants and the tanh's operand):
#   sigmoid and softcap spilled 384-492 B with none free at head dim 64, s_x = 256, none with 8
REGISTERS_PER_SCORE = {"alibi": 0.75, "add": 0.5}
REGISTERS_PER_SFU_OP = 8
# - and 8 a thread for the op itself: ALiBi's slope, its rows' term and first row; the bias's tile
#   descriptor and rows. The counts above were fitted beside the causal mask's reserve of 16, both
#   diagrams being causal; with the mask's 8 (analyzer.config.hopper.CAUSAL_RESERVE: a pair of keys
#   compared through one column) these keep the ops' counts where the scan put them: without them ALiBi's
#   three consumers of 64-key chunks at head dim 128 were admitted and spilled 56 B, the bias's 120 B;
#   and 8 for sigmoid beyond its special-function op's (its 1/2 + tanh(v/2)/2 and the plain sum): three
#   consumers of 128-key chunks at head dim 64 spilled 264 B with its op's 8 counted and none free, where
#   softcap's, counted alike, spilled nothing (the scan of 2026-11-29; the one before passed it)
REGISTERS_PER_OP = {"alibi": 8, "add": 8, "sigmoid": 8}
# ... and where the kernel recomputes an op's vector each chunk instead of holding it (the shifted ALiBi's
# m (j - r) from the key indices, where the held one does not fit: HopperConfig.held): half a chunk's
# (the same scan of that lowering: 104 B spilled with 8 registers free at s_x = 64, none with 40 at
# s_x = 64 or 128)
RECOMPUTED_PER_SCORE = {"alibi shifted": 0.5}
E4M3 = "e4m3"              # the costed lowering of FP8's rounding of the probabilities (Scores.e4m3)
SLOPED = ("alibi",)        # ops whose second input is a slope a head (an extra input of the call)
BIASED = ("add",)          # ops whose second input is a bias read from memory a chunk (an extra input)
MASKS = tuple(n for n, p in REGISTRY.items() if isinstance(p, Mask))   # set -inf where a key is outside a band


@dataclass(frozen=True)
class ScoreOp:
    """One elementwise op of the chain: its name in the diagram, its primitive, its factor (scale) or
    bound (softcap)."""

    name: str
    primitive: str
    scale: sympy.Expr | None = None
    cap: sympy.Expr | None = None
    window: int | None = None           # a mask: the keys a query sees before its own and its own; None: all
    shifted: bool = False               # alibi: applied as m (j - r), the row's part left to the softmax
    right: int | None = 0               # a mask: the keys a query sees after its own (0: causal); None: all

    @property
    def lowering(self) -> str:
        """The key of the kernel's lowering and of its lane count (ALiBi's two: whole, and shifted)."""
        return f"{self.primitive} shifted" if self.shifted else self.primitive

    def of(self, v: float) -> float:
        """What this op makes of a score v (the masks' -inf traced through the ops after them)."""
        if self.primitive in SLOPED or self.primitive in BIASED:
            return v            # a finite bias added: -inf stays -inf
        if self.primitive == "scale":
            return v * (1.0 if self.scale.is_positive else -1.0 if self.scale.is_negative else math.nan)
        if self.primitive == "softcap":
            return float(self.cap) * math.tanh(v / float(self.cap))
        return {"relu": lambda: max(v, 0.0), "sigmoid": lambda: 0.5 * math.tanh(v / 2) + 0.5,
                "exp": lambda: math.exp(v), "tanh": lambda: math.tanh(v)}.get(self.primitive, lambda: v)()


@dataclass(frozen=True)
class Scores:
    """The chain of a diagram's scores. The default is softmax attention: no op between the
    contractions, the online softmax."""

    ops: tuple[ScoreOp, ...] = ()   # in the diagram's order, masks among them
    softmax: bool = True            # the online softmax; False: a plain running sum
    sink: bool = False              # the softmax's sum takes exp(sink - m) once a row (a logit a head, an input)
    e4m3: bool = False              # FP8: the probabilities are rounded to e4m3 for P V (E4M3, a cost a score)

    @property
    def causal(self) -> bool:
        """Whether a mask hides the keys after each query (top-left aligned)."""
        return any(o.primitive in MASKS and o.right == 0 for o in self.ops)

    @property
    def window(self) -> int | None:
        """The keys a query sees under the narrowest sliding window, its own included; None: all before it."""
        return min((o.window for o in self.ops if o.window is not None), default=None)

    @property
    def right(self) -> int | None:
        """The keys a query sees after its own under the narrowest mask (0: causal); None: all, or no mask."""
        return min((o.right for o in self.ops if o.primitive in MASKS and o.right is not None), default=None)

    @property
    def vector_per_score(self) -> int:
        """fp32 vector-lane operations a score the ops add (ALiBi's distance and multiply-add)."""
        return sum(VECTOR_PER_SCORE.get(o.lowering, 0) for o in self.ops)

    def registers(self, scores_per_thread: int, held: bool = True) -> int:
        """Registers a consumer thread needs for the ops beyond the softmax's, where a thread holds
        `scores_per_thread` scores of a chunk (REGISTERS_PER_SCORE, REGISTERS_PER_OP,
        REGISTERS_PER_SFU_OP); `held` False: with the vectors the kernel may recompute a chunk recomputed
        (RECOMPUTED_PER_SCORE)."""
        def per_score(o: ScoreOp) -> float:
            if not held and o.lowering in RECOMPUTED_PER_SCORE:
                return RECOMPUTED_PER_SCORE[o.lowering]
            return REGISTERS_PER_SCORE.get(o.primitive, 0)
        return sum(math.ceil(per_score(o) * scores_per_thread) + REGISTERS_PER_OP.get(o.primitive, 0)
                   + (REGISTERS_PER_SFU_OP if SFU_PER_SCORE.get(o.primitive, 0) else 0) for o in self.ops)

    @property
    def recomputable(self) -> bool:
        """Whether the kernel may recompute a vector of the ops a chunk rather than hold it (the shifted ALiBi)."""
        return any(o.lowering in RECOMPUTED_PER_SCORE for o in self.ops)

    @property
    def costed(self) -> tuple[str, ...]:
        """The lowerings of the chain's ops that cost the threads work (an SFU or lane operation a score,
        as counted): what a fit of the ops' costs can measure (HopperParams.score_clocks)."""
        ops = tuple(dict.fromkeys(o.lowering for o in self.ops
                                  if SFU_PER_SCORE.get(o.primitive, 0) or VECTOR_PER_SCORE.get(o.lowering, 0)))
        return (*ops, E4M3) if self.e4m3 else ops

    def op_clocks(self, sfu_ops: float, fp32_fma: float, fitted: Mapping[str, float] | None = None) -> float:
        """SM clocks a score the ops cost on the threads (the softmax's own exp2 apart): each op's fitted
        cost where a sweep of the variants measured it (`fitted`, by lowering: HopperParams.score_clocks),
        else its counted SFU and lane operations at the datasheet's rates per SM and clock."""
        fitted = fitted or {}
        lowerings = [o.lowering for o in self.ops] + ([E4M3] if self.e4m3 else [])
        return sum(fitted[lo] if lo in fitted else counted_clocks(lo, sfu_ops, fp32_fma) for lo in lowerings)

    @property
    def bias(self) -> ScoreOp | None:
        """The chain's additive bias (a tile of it loaded a chunk), or None."""
        return next((o for o in self.ops if o.primitive in BIASED), None)

    @property
    def folded(self) -> bool:
        """Whether the kernel folds the scale op into the softmax's exp2 factor: a positive factor whose
        later ops are masks and a shifted ALiBi only (applied as m (j - r) / factor), so S takes no
        multiply a score. Only with ALiBi: plain chains keep the text they were measured with."""
        sc = self.scale
        if sc is None or not self.softmax or not sc.scale.is_positive or self.slope is None:
            return False
        after = self.ops[self.ops.index(sc) + 1:]
        return all(o.primitive in MASKS or o.shifted for o in after)

    @property
    def slope(self) -> ScoreOp | None:
        """The chain's ALiBi op (its slope a head, loaded once a tile), or None."""
        return next((o for o in self.ops if o.primitive in SLOPED), None)

    @property
    def sfu_per_row(self) -> int:
        """SFU operations a row and chunk beyond its scores': the softmax's rescale, exp2(m_old - m_new)."""
        return 1 if self.softmax else 0

    @property
    def scale(self) -> ScoreOp | None:
        """The chain's scale op (the kernel takes one factor as an argument), or None."""
        return next((o for o in self.ops if o.primitive == "scale"), None)

    def label(self) -> str:
        normalise = ("softmax with a sink" if self.sink else "softmax") if self.softmax else "sum"
        return " -> ".join([o.primitive for o in self.ops] + [normalise] + (["e4m3 P"] if self.e4m3 else []))


SOFTMAX = Scores()


def counted_clocks(lowering: str, sfu_ops: float, fp32_fma: float) -> float:
    """SM clocks a score an op's lowering costs as counted: its SFU and lane operations at the rates per
    SM and clock (`ScoreOp.lowering`: the primitive, or ALiBi's "alibi shifted")."""
    return SFU_PER_SCORE.get(lowering.split()[0], 0) / sfu_ops + VECTOR_PER_SCORE.get(lowering, 0) / fp32_fma


def pairs(seq_q: int, seq_k: int, band: Band | None = None) -> float:
    """The (query, key) pairs whose scores the attention weighs, as FlashAttention's benchmarks count
    them: all of them without a mask; half under a causal mask; under a sliding window or a band the exact
    count (query i, top-left aligned, sees keys max(0, i - before) .. min(i + after, seq_k - 1))."""
    if band is None or band.before is band.after is None:
        return float(seq_q * seq_k)
    if band.before is None and band.after == 0:
        return seq_q * seq_k / 2
    i = np.arange(seq_q)
    first = 0 if band.before is None else np.maximum(i - band.before, 0)
    last = seq_k - 1 if band.after is None else np.minimum(i + band.after, seq_k - 1)
    return float(np.maximum(last - first + 1, 0).sum())


def scores_of(ops: list[Op], head_dim: str, seq_k: str, seq_q: str | None = None,
              extras: tuple[str, ...] = ()) -> Scores | str:
    """The score chain of a kernel's ops (the first contraction first), or why the Hopper kernel does not
    realise it (one line). `extras`: the call's inputs of the scores besides q, k and v (ALiBi's slopes)."""
    names = [o.primitive.name for o in ops]
    shape = "dot -> elementwise ops and masks -> softmax_dot or dot"
    if len(ops) < 2 or names[0] != "dot" or names[-1] not in ("dot", "softmax_dot"):
        return f"its kernel is {' -> '.join(names)}; the Hopper kernel realises {shape}"
    first, last = ops[0], ops[-1]
    if first.applied.over != head_dim or last.applied.over != seq_k:
        return "it contracts other axes than q k^T over the head dim and p v over the keys"
    for prev, op in pairwise(ops):
        if op.inputs[0] != prev.name:
            return f"{op.name} does not take {prev.name}: the Hopper kernel realises one chain of scores"
    out = []
    for op in ops[1:-1]:
        p = op.primitive.name
        if p not in SFU_PER_SCORE and p not in MASKS:
            return (f"{op.name} is {p} between the contractions; the Hopper kernel applies "
                    f"{', '.join(sorted(SFU_PER_SCORE))} and {' or '.join(MASKS)} to the scores")
        if p in SLOPED:
            if len(op.inputs) != 2 or op.inputs[1] not in extras:
                return f"{op.name} ({p}) takes its slopes from an input of the call; the Hopper kernel loads them so"
            if (op.applied.query, op.applied.key) != (seq_q, seq_k):
                return f"{op.name} ({p}) measures distances along {op.applied.query} and {op.applied.key}, not the " \
                       f"query and key positions {seq_q} and {seq_k}"
        elif p in BIASED:
            if len(op.inputs) != 2 or op.inputs[1] not in extras or op.inputs[0] == op.inputs[1]:
                return f"{op.name} ({p}) adds what is not an input of the call; the Hopper kernel adds a bias it loads"
        elif len(op.inputs) != 1:
            return f"{op.name} takes {len(op.inputs)} inputs; the Hopper kernel's score ops take the scores alone"
        if p in MASKS and op.applied.key != seq_k:
            return f"{op.name} masks along {op.applied.key}, not the keys {seq_k}"
        out.append(_score_op(op))
    softmax = names[-1] == "softmax_dot"
    if last.sink is not None and (last.sink not in extras or set(last.applied.inputs[2]) & {seq_q, seq_k}):
        return (f"{last.name}'s sink {last.sink} is not a logit a head from the call; the Hopper kernel would load "
                "one so")
    for i, o in enumerate(out):
        if o.primitive in MASKS:
            masked = -math.inf
            for after in out[i + 1:]:
                masked = after.of(masked)
            if masked != (-math.inf if softmax else 0.0):
                return (f"{o.name} ({o.primitive}) comes before ops that turn a masked score into {masked:g}, which "
                        f"the {'softmax' if softmax else 'sum'} weighs; put the mask after them")
    if sum(o.primitive == "scale" for o in out) > 1:
        return "its scores are scaled twice; the Hopper kernel takes one factor (fold them into one scale)"
    if sum(o.primitive in BIASED for o in out) > 1:
        return "its scores take two biases; the Hopper kernel loads one (add them into one input)"
    if sum(o.primitive in SLOPED for o in out) > 1:
        return "its scores take two ALiBi biases; the Hopper kernel loads one slope a head (add the slopes)"
    causal = Scores(tuple(out)).causal
    out = [_shifted(o, out[i + 1:], softmax, causal) for i, o in enumerate(out)]
    return Scores(tuple(out), softmax=softmax, sink=last.sink is not None)


def _score_op(op: Op) -> ScoreOp:
    """The chain's op of diagram op `op`: a mask as its band (window: before + 1; right: after)."""
    p, a = op.primitive, op.applied
    if isinstance(p, Mask):
        before, after = p.keys_before(a), p.keys_after(a)
        return ScoreOp(op.name, p.name, window=None if before is None else int(before) + 1,
                       right=None if after is None else int(after))
    return ScoreOp(op.name, p.name, a.scale if p.name == "scale" else None, a.cap if p.name == "softcap" else None)


ROW_INVARIANT = ("scale", *MASKS)     # ops that keep a constant a row a constant a row (or -inf)


def _shifted(op: ScoreOp, after: list[ScoreOp], softmax: bool, causal: bool) -> ScoreOp:
    """ALiBi's op as the kernel may apply it: m (j - r) alone where the softmax follows through ops that
    keep a row's constant a row's constant and a causal mask keeps only keys j <= i (the row's part,
    -m (i - r), then changes no probability)."""
    if op.primitive not in SLOPED or not softmax or not causal or any(a.primitive not in ROW_INVARIANT
                                                                        for a in after):
        return op
    return ScoreOp(op.name, op.primitive, shifted=True)


__all__ = ["BIASED", "E4M3", "MASKS", "RECOMPUTED_PER_SCORE", "REGISTERS_PER_OP", "REGISTERS_PER_SCORE",
           "REGISTERS_PER_SFU_OP", "SFU_PER_SCORE", "SLOPED", "SOFTMAX", "VECTOR_PER_SCORE", "ScoreOp", "Scores",
           "counted_clocks", "pairs", "scores_of"]
