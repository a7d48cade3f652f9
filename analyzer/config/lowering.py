"""The variables a configured kernel pre-allocates below GMEM (Sections 5.3-5.5, Figure 33, Table 1).

Recolouring (5.3): contractions run on tensor cores, in tiles of w rows per tensor-core thread group;
everything else runs on threads in registers. Each array of the kernel's schedule becomes one or more
variables, each with its shape, element type, the level that computes it, where it is stored, and
whether one copy serves the whole block or each thread group needs its own (the paper's M_TB and
M_WG columns):

- a loaded array without the block's row axes (keys, values) is one copy per block in SMEM, with one
  buffer per pipeline stage when it is streamed (the sheets' "extra loaded");
- a loaded array with row axes (queries) is per thread group, in SMEM (tensor cores read SMEM), or in
  registers when the configuration says so (the FlashAttention-3 sheets);
- the fragment strategy (FlashAttention-2/3) keeps a contraction's output in its register fragment
  and applies softmax there in place; intra-warpgroup overlap holds a second score tile;
- the staged strategy (the paper's derivation) treats fragments as incoherent: scores go from the
  tensor cores through SMEM to registers in subloops of u, the probabilities back through SMEM to the
  tensor cores in chunks of c, and the output of the second contraction through SMEM to the threads in
  chunks of c_d and e_d, where the maintained output lives (Figures 31-33);
- the online-softmax auxiliaries keep mu and z per row across chunks plus delta within one (Table 4).
"""

from __future__ import annotations

from dataclasses import dataclass

from analyzer.common.dtypes import bytes_per_value
from analyzer.config.setting import Setting
from analyzer.diagram.compiled import Op
from analyzer.model.fusion import Reducer

TENSOR, REGISTERS, SMEM = "tensor core", "registers", "smem"


@dataclass(frozen=True)
class Variable:
    """One row of the configuration table (Table 1)."""

    name: str
    array: str
    doc: str
    dims: tuple[tuple[str, int], ...]   # (label, size) per dimension, e.g. (("w_q", 128), ("d", 128))
    dtype: str
    level: str                          # where it is computed or consumed: tensor core or registers
    storage: str                        # smem or registers
    scope: str                          # "block" (M_TB) or "group" (M_WG, per warpgroup)
    multiple: int = 1                   # values per index (the auxiliaries: mu, delta, z)
    buffers: int = 1                    # copies held at once (asynchronous loads, intra overlap)

    @property
    def values(self) -> int:
        n = self.multiple
        for _, size in self.dims:
            n *= size
        return n

    @property
    def bytes(self) -> int:
        return self.values * bytes_per_value(self.dtype) * self.buffers

    @property
    def shape(self) -> str:
        parts = [label for label, _ in self.dims] + ([str(self.multiple)] if self.multiple > 1 else [])
        return " x ".join(parts) or "1"


def variables(setting: Setting) -> tuple[Variable, ...]:
    s = setting.schedule
    d = s.diagram
    n = setting.names
    groups = s.partition.group_sizes
    rows = set(n.rows)

    def dims(axes: tuple[str, ...], *, chunk: int | None = None, chunk_label: str | None = None,
             out_chunk: tuple[str, int] | None = None) -> tuple[tuple[str, int], ...]:
        """Tile dimensions of one thread group's or one block's share of an array."""
        out: list[tuple[str, int]] = []
        if any(a in rows for a in axes):
            out.append((n.w, setting.w))
        last_other = next((a for a in reversed(axes) if a not in rows and a != n.stream), None)
        for a in axes:
            if a in rows:
                continue
            if a == n.stream:
                out.append((chunk_label or n.s, chunk if chunk is not None else setting.chunk))
            elif out_chunk is not None and a == last_other:
                out.append(out_chunk)
            elif a in groups:
                out.append((groups[a].name, setting.values[groups[a].name]))
            else:
                out.append((a, setting.values[a]))
        return tuple(out)

    def scope(axes: tuple[str, ...]) -> str:
        return "group" if any(a in rows for a in axes) else "block"

    members = {op.name for op in s.ops}
    consumers = {name: [o for o in s.ops if name in o.inputs] for name in s.arrays}
    staged = setting.strategy == "staged"
    out: list[Variable] = []
    for name in s.loads + s.resident:
        arr = d.arrays[name]
        tensor = any(o.primitive.contraction for o in consumers[name])
        where = "group" if scope(arr.axes) == "group" else "block"
        storage = SMEM
        if where == "group" and not staged:
            storage = setting.spec.storage.get(name, SMEM)
        buffers = setting.spec.stages if n.stream in arr.axes and name in s.loads else 1
        out.append(Variable(name, name, arr.doc or "loaded operand", dims(arr.axes),
                            setting.dtype(name, arr.dtype), TENSOR if tensor else REGISTERS, storage,
                            where, buffers=buffers))

    reducers = {r.op.name: r for r in s.reducers}
    fused = {r.softmax.name for r in s.reducers if r.softmax is not None}
    for op in s.ops:
        if op.name in fused:
            continue
        if op.name in reducers:
            out += _reducer(reducers[op.name], setting, dims, staged)
        elif op.primitive.contraction:
            out += _scores(op, setting, dims, staged, members, consumers)
    return tuple(out)


def _scores(op: Op, setting: Setting, dims, staged: bool, members: set[str],
            consumers: dict[str, list[Op]]) -> list[Variable]:
    """A contraction whose output the threads read next (the attention scores S)."""
    name, axes = op.name, op.applied.output
    dtype = setting.dtype(name, op.accumulate)
    intra = 2 if setting.overlap == "intra" else 1
    if not staged:
        return [Variable(name, name, "scores: tensor-core fragment in registers; the threads apply "
                         "softmax to it in place", dims(axes), dtype, TENSOR, REGISTERS, "group",
                         buffers=intra)]
    n = setting.names
    return [
        Variable(name, name, "scores from the tensor cores", dims(axes), dtype, TENSOR, REGISTERS,
                 "group", buffers=intra),
        Variable(f"{name}.smem", name, "scores made coherent in SMEM for the threads (the paper's P)",
                 dims(axes), dtype, SMEM, SMEM, "group"),
        Variable(f"{name}.reg", name, "scores in registers, one subloop of u at a time (P')",
                 dims(axes, chunk=setting.subloop, chunk_label=n.u), dtype, REGISTERS, REGISTERS,
                 "group"),
    ]


def _reducer(r: Reducer, setting: Setting, dims, staged: bool) -> list[Variable]:
    """The maintained output of a streamed reduction, its staging, and its auxiliaries."""
    op = r.op
    n = setting.names
    name, axes = op.name, op.applied.output
    dtype = setting.dtype(name, op.accumulate)
    softmax = r.softmax is not None or r.accumulator.aux_per_row > 0
    out: list[Variable] = []
    if staged and softmax:
        probs = setting.dtype("P", setting.dtype(op.inputs[0], op.accumulate))
        c_out = (n.c_out, setting.value(n.c_out))
        e_out = (n.e_out, setting.value(n.e_out))
        out += [
            Variable("P.smem", name, "probabilities written to SMEM for the tensor cores, in chunks "
                     "of c (the paper's A)", dims(r.softmax.applied.output if r.softmax else
                                                   op.applied.inputs[0],
                                                   chunk=setting.value(n.c_stream),
                                                   chunk_label=n.c_stream),
                     probs, TENSOR, SMEM, "group"),
            Variable(f"{name}.reg", name, "maintained output in registers (O')", dims(axes), dtype,
                     REGISTERS, REGISTERS, "group"),
            Variable(f"{name}.tc", name, "output chunk of the second contraction on the tensor "
                     "cores (D)", dims(axes, out_chunk=c_out), dtype, TENSOR, REGISTERS, "group"),
            Variable(f"{name}.smem", name, "that chunk made coherent in SMEM (Delta O)",
                     dims(axes, out_chunk=c_out), dtype, SMEM, SMEM, "group"),
            Variable(f"{name}.chunk", name, "the threads' chunk of it, added to O' (Delta O')",
                     dims(axes, out_chunk=e_out), dtype, REGISTERS, REGISTERS, "group"),
        ]
    else:
        doc = ("maintained output: tensor-core accumulator fragment in registers"
               if op.primitive.contraction else "maintained output in registers")
        out.append(Variable(name, name, doc, dims(axes), dtype,
                            TENSOR if op.primitive.contraction else REGISTERS, REGISTERS, "group"))
    if softmax:
        per_row = r.accumulator.aux_per_row + 1     # mu and z across chunks, delta within one
        out.append(Variable(f"{name}.aux", name, "online-softmax auxiliaries mu, delta, z per row "
                            "(Table 4)", dims(tuple(a for a in r.rows)), setting.dtype("aux",
                                                                                     op.accumulate),
                            REGISTERS, REGISTERS, "group", multiple=per_row))
    return out
