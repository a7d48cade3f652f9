"""A compiled diagram: sizes as sympy, arrays with their levels, ops in execution order with their
weaves, fused kernels with their relabellings per level, and the networkx graph of arrays and functions.

analyzer.diagram.graph builds these from a diagram file; everything downstream reads only these.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property

import networkx as nx
import sympy

from analyzer.common.dtypes import bytes_per_value
from analyzer.common.expr import symbol
from analyzer.diagram import primitives


@dataclass(frozen=True)
class Axis:
    name: str
    size: sympy.Expr   # in the size symbols
    doc: str = ""


@dataclass(frozen=True)
class Array:
    name: str
    axes: tuple[str, ...]
    dtype: str
    level: str
    role: str                 # "input", "intermediate" or "output"
    producer: str | None = None
    doc: str = ""

    @property
    def bytes_per_value(self) -> int:
        return bytes_per_value(self.dtype)


@dataclass(frozen=True)
class Op:
    name: str                 # also the name of its output array
    primitive: primitives.Primitive
    inputs: tuple[str, ...]
    applied: primitives.Applied
    weave: tuple[str, ...]    # axes the primitive is mapped over (Section 2.1)
    column: int               # function column, left to right
    accumulate: str           # element type of a streamed accumulator
    path: str                 # where it is in the file, for errors
    doc: str = ""

    @property
    def output(self) -> str:
        return self.name

    @property
    def operands(self) -> tuple[str, ...]:
        """Its inputs without a softmax's sink: what it computes on (a contraction's two operands)."""
        return self.inputs[:self.primitive.arity]

    @property
    def sink(self) -> str | None:
        """The array of its softmax's sink logits (softmax and softmax_dot's optional last input), or None."""
        return self.inputs[-1] if len(self.inputs) > self.primitive.arity else None

    def broadcast(self, axes_of: dict[str, tuple[str, ...]]) -> dict[str, tuple[str, ...]]:
        """Inputs that are copied along weaved axes they lack: input -> those axes."""
        copied = {}
        for name in self.inputs:
            missing = tuple(a for a in self.weave if a not in axes_of[name])
            if missing:
                copied[name] = missing
        return copied


@dataclass(frozen=True)
class Partition:
    """The relabelling of a kernel at one level: group sizes and at most one stream size."""

    group: tuple[tuple[str, sympy.Symbol], ...] = ()
    stream: tuple[str, sympy.Symbol] | None = None

    @property
    def group_sizes(self) -> dict[str, sympy.Symbol]:
        return dict(self.group)

    @property
    def symbols(self) -> tuple[sympy.Symbol, ...]:
        return tuple(s for _, s in self.group) + ((self.stream[1],) if self.stream else ())

    def renamed(self, suffix: str) -> Partition:
        """The same relabelling with its symbols renamed (for a level the diagram does not draw)."""
        def rename(s: sympy.Symbol) -> sympy.Symbol:
            return symbol(f"{s.name}_{suffix}")
        stream = (self.stream[0], rename(self.stream[1])) if self.stream else None
        return Partition(tuple((a, rename(s)) for a, s in self.group), stream)


@dataclass(frozen=True)
class Kernel:
    name: str
    ops: tuple[str, ...]
    partitions: dict[str, Partition]
    path: str
    doc: str = ""


@dataclass(frozen=True)
class Diagram:
    name: str
    title: str
    paper: str
    doc: str
    source: str
    dtype: str
    levels: tuple[str, ...]
    axes: dict[str, Axis]
    defaults: dict[sympy.Symbol, int]      # default numbers of size symbols
    arrays: dict[str, Array]
    ops: tuple[Op, ...]                    # execution order
    outputs: tuple[str, ...]
    kernels: tuple[Kernel, ...]            # execution order
    graph: nx.DiGraph = field(repr=False, compare=False)
    configurations: tuple = ()             # ConfigurationSpec, named hardware configurations (Section 5)
    # the document it was compiled from: weaving it (analyzer.diagram.weave) and another element type
    # (analyzer.diagram.graph.load) compile that again, without reading the file a second time
    document: dict = field(default_factory=dict, repr=False, compare=False)

    @property
    def top(self) -> str:
        return self.levels[0]

    @property
    def size_symbols(self) -> tuple[sympy.Symbol, ...]:
        found: set[sympy.Symbol] = set()
        for axis in self.axes.values():
            found |= axis.size.free_symbols
        return tuple(sorted(found, key=lambda s: s.name))

    def op(self, name: str) -> Op:
        return self._ops_by_name[name]

    @cached_property
    def _ops_by_name(self) -> dict[str, Op]:
        return {o.name: o for o in self.ops}

    @cached_property
    def _consumers(self) -> dict[str, list[Op]]:
        found: dict[str, list[Op]] = {}
        for o in self.ops:
            for name in dict.fromkeys(o.inputs):
                found.setdefault(name, []).append(o)
        return found

    def size(self, axis: str) -> sympy.Expr:
        return self.axes[axis].size

    def axes_of(self) -> dict[str, tuple[str, ...]]:
        return {name: a.axes for name, a in self.arrays.items()}

    def consumers(self, array: str) -> list[Op]:
        return list(self._consumers.get(array, ()))
