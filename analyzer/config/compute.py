"""The compute analysis (Section 5.7, Table 3): clock cycles per row for each column of the loop body.

For one chunk of s of the streamed axis, each function column costs some operations per row of the
block (the paper's per-thread count with t = 1 row per thread; the rows themselves are left out to
normalise for the number of active threads). Dividing by the operations an SM's pipeline completes per
clock gives clock cycles per row; times the active rows, the SM's clock cycles.

- Contractions run on the tensor cores at the dense peak of their operand type; ops/clk =
  FLOP/s / (N_SM f_K). The type is the loaded operand's (a computed operand, the probabilities, is
  converted to it, as FlashAttention-3 does for FP8).
- Online softmax costs one exponential per score on the special function unit, and one more per row
  for delta each time a chunk (or a subloop of u) is folded in: s + s/u.
- The staged strategy rescales the maintained output by delta and adds the tensor cores' chunk on the
  threads once per subloop, an FMA per item (2 ops at 2 x FMA/clk): 2 s d / u (the paper's "FP16
  accumulate"). The fragment strategy multiplies its accumulator fragment by delta and lets the tensor
  cores add; the FlashAttention-3 sheets leave that out of the table, and so does napkin.
- Everything else the threads do (maximum, subtraction, sums, scaling, masks, the fragment rescale) is
  not a column: the paper counts it as overhead (5.7), reported beside the table.
"""

from __future__ import annotations

from dataclasses import dataclass

import sympy

from analyzer.common.errors import NapkinError
from analyzer.common.expr import at, symbol, to_text
from analyzer.config.setting import Setting
from analyzer.diagram.compiled import Op
from analyzer.model.fusion import Reducer

FMA_TYPES = {"fp16": "fp16", "bf16": "fp16", "fp32": "fp32"}


@dataclass(frozen=True)
class Column:
    """One column of Table 3."""

    label: str
    op: str
    pipeline: str        # tensor, sfu or vector
    dtype: str           # element type the pipeline runs in
    ops_per_row: float
    ops_per_clock: float  # per SM
    formula: str

    @property
    def clocks_per_row(self) -> float:
        return self.ops_per_row / self.ops_per_clock


@dataclass(frozen=True)
class Compute:
    columns: tuple[Column, ...]
    overhead_ops_per_row: dict[str, float]   # threads' work outside the columns, per pipeline

    def clocks(self, pipeline: str) -> float:
        return sum(c.clocks_per_row for c in self.columns if c.pipeline == pipeline)

    def ops(self, pipeline: str) -> float:
        return sum(c.ops_per_row for c in self.columns if c.pipeline == pipeline)

    @property
    def tensor_clocks(self) -> float:
        """k_TC of Appendix B.0.1."""
        return self.clocks("tensor")

    @property
    def limiting(self) -> str:
        pipes = {c.pipeline for c in self.columns}
        return max(sorted(pipes), key=self.clocks)


def ops_per_clock(setting: Setting, pipeline: str, dtype: str, *, fma: bool = True) -> float:
    """Operations per clock per SM (Table 3's Ops/Clk = FLOP/s / (N_SM f_K))."""
    p = setting.profile
    if pipeline in ("tensor", "sfu"):    # the rates napkin analyze times compute with, per SM and clock
        return p.rate(pipeline, dtype) / (p.sm_count * p.clocks.tensor_hz)
    kind = FMA_TYPES.get(dtype)
    if kind is None:
        raise NapkinError(f"threads cannot compute in {dtype}", field="dtypes.aux",
                          hint="auxiliaries and accumulators take fp16, bf16 or fp32")
    lanes = p.per_sm_per_clock.fp16_fma if kind == "fp16" else p.per_sm_per_clock.fp32_fma
    return (2.0 if fma else 1.0) * lanes


def compute(setting: Setting) -> Compute:
    s = setting.schedule
    n = setting.names
    groups = s.partition.group_sizes
    rows = set(n.rows)
    values = setting.values
    chunk, u = setting.chunk, setting.subloop   # numbers; the formulas keep s and u

    def extent(axis: str) -> sympy.Expr:       # one row of one chunk, in the configuration's names
        if axis in rows:
            return sympy.Integer(1)
        if axis == n.stream:
            return symbol(n.s)
        return symbol(groups[axis].name) if axis in groups else symbol(axis)

    def number(expr: sympy.Expr) -> float:
        return float(at(expr, values))    # by name: only the symbols of expr (analyzer.common.expr.at)

    columns: list[Column] = []
    overhead: dict[str, float] = {}

    def spare(work: dict[str, sympy.Expr], skip: set[str]) -> None:
        for pipe, value in work.items():
            if pipe not in skip:
                overhead[pipe] = overhead.get(pipe, 0.0) + number(value)

    reducers = {r.op.name: r for r in s.reducers}
    fused = {r.softmax.name for r in s.reducers if r.softmax is not None}
    for op in s.body:
        if op.name in fused:
            continue
        r = reducers.get(op.name)
        if r is not None and (r.softmax is not None or r.accumulator.aux_per_row):
            columns += _softmax_contraction(setting, r, extent, number, setting.contraction_dtype(op))
            work = s.step_flops(r.softmax, extent) if r.softmax else op.primitive.flops(op.applied, extent)
            vector = work.get("vector", 0) + s.chunk_flops(r, extent).get("vector", 0) * chunk / u
            if setting.strategy == "staged":   # the FMA column does the rescale's multiplies
                vector -= _rescale(setting, op, extent) / 2
            spare({"vector": vector}, set())
            continue
        work = s.step_flops(op, extent)
        if "tensor" in work:
            dt = setting.contraction_dtype(op)
            columns.append(Column(f"{op.name} ({op.primitive.name})", op.name, "tensor", dt,
                                  number(work["tensor"]), ops_per_clock(setting, "tensor", dt),
                                  to_text(work["tensor"])))
        if "sfu" in work:
            columns.append(Column(f"{op.name} ({op.primitive.name})", op.name, "sfu", "fp32",
                                  number(work["sfu"]), ops_per_clock(setting, "sfu", "fp32"),
                                  to_text(work["sfu"])))
        spare(work, {"tensor", "sfu"})
    return Compute(tuple(columns), {k: v for k, v in overhead.items() if v})


def _softmax_contraction(setting: Setting, r: Reducer, extent, number, dt: str) -> list[Column]:
    op = r.op
    n = setting.names
    s_sym, u_sym = symbol(n.s), symbol(n.u)
    staged = setting.strategy == "staged"
    scores = sympy.Mul(*(extent(a) for a in (r.softmax or op).applied.inputs[0]))
    subloops = s_sym / u_sym if setting.subloop != setting.chunk else sympy.Integer(1)
    exps = scores + subloops                     # s exponentials, one delta per subloop (Table 4)
    tensor = op.primitive.flops(op.applied, extent)["tensor"]
    aux = setting.dtype("aux", op.accumulate)
    columns = [
        Column("softmax (exp)", op.name, "sfu", "fp32", number(exps),
               ops_per_clock(setting, "sfu", aux), to_text(exps)),
        Column(f"{op.name} (contraction)", op.name, "tensor", dt, number(tensor),
               ops_per_clock(setting, "tensor", dt), to_text(tensor)),
    ]
    if staged:   # the fragment strategy's rescale (d multiplies per chunk) is overhead, as in the sheets
        rescale = _rescale(setting, op, extent)
        columns.append(Column("accumulate (FMA)", op.name, "vector", aux, number(rescale),
                              ops_per_clock(setting, "vector", aux), to_text(rescale)))
    return columns


def _rescale(setting: Setting, op: Op, extent) -> sympy.Expr:
    """Staged: ops per row per chunk to rescale O' and add the tensor cores' chunk, an FMA per item
    per subloop (2 s d / u)."""
    out = sympy.Mul(*(extent(a) for a in op.applied.output))
    n = setting.names
    return 2 * out * symbol(n.s) / symbol(n.u)

