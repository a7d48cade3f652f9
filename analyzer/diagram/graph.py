"""Compile a diagram file into a validated graph (an analyzer.diagram.compiled.Diagram).

Compilation checks meaning: names resolve, shapes agree with each primitive's
rule, weaves name existing axes, the graph has no cycles, levels exist, kernels are convex. Whether a
relabelling is legal (the fusion theorem) is checked later, by analyzer.model.fusion.
"""

from __future__ import annotations

import copy
import dataclasses
from pathlib import Path

import networkx as nx
import sympy
from pydantic import ValidationError

from analyzer.common import resources
from analyzer.common.errors import NapkinError
from analyzer.common.expr import MAX_SIZE, check_name, parse_expr, symbol
from analyzer.common.validation import from_validation_error
from analyzer.common.yamlio import load_file
from analyzer.diagram import primitives
from analyzer.diagram.compiled import Array, Axis, Diagram, Kernel, Op, Partition
from analyzer.diagram.schema import DiagramSpec, KernelSpec, OpSpec

DOCS_HINT = "see docs/diagram-format.md"

# The most axes, inputs and ops (concatenated ones counted one by one) a diagram may have. Every command
# answers a diagram within these in a few seconds on a 2-core machine (the slowest, napkin kernel,
# generates a kernel of 256 ops in about 3 s); far beyond them the configuration search grows slow, and
# no algorithm napkin models needs more (the shipped ones have at most 5 ops).
MAX_AXES = 256
MAX_INPUTS = 256
MAX_OPS = 256


# ---------------------------------------------------------------------------------------------------

def load_diagram(path: Path) -> Diagram:
    """Read, validate and compile a diagram file."""
    data = load_file(path)
    return compile_data(data, source=str(path))


def load(diagram: str | Diagram, *, dtype: str | None = None) -> Diagram:
    """A shipped diagram by name, a diagram file, or a diagram already compiled; `dtype` overrides the
    file's default element type. A command reads the file it names here once, and hands the compiled
    diagram down: those below call this again with it, for its element type, reading nothing."""
    if isinstance(diagram, Diagram):
        if dtype is None or diagram.document.get("dtype") == dtype:
            return diagram
        return compile_data({**diagram.document, "dtype": dtype}, source=diagram.source)
    path = resources.resolve("diagrams", diagram, what="diagram", field="DIAGRAM")
    data = load_file(path)
    if dtype is not None and isinstance(data, dict):
        data = {**data, "dtype": dtype}
    return compile_data(data, source=resources.display("diagrams", path))


_COMPILED: dict[tuple[str, str], Diagram] = {}   # (repr of the data, source) -> its diagram
_COMPILED_MAX = 64     # every shipped diagram in each element type a process asks for (a test worker, a report)


# The axes a call weaves an attention diagram over (analyzer.diagram.interface: BATCH, HEADS) and their
# group sizes: a tile size the diagram names so is renamed (`_weave_safe`) in every compiled copy alike
WEAVE_NAMES = ("batch", "heads")


def _weave_safe(data: object) -> object:
    """`data` with its own tile sizes named like a weaved axis or its group size (`batch`, `g_heads`)
    renamed `<name>_tile`: the diagram compiled alone and weaved then name the same tiles, and the
    weave's axes keep their names. A partition's entry for a weaved axis is the weave's own."""
    claimed = {*WEAVE_NAMES, *(f"g_{n}" for n in WEAVE_NAMES)}
    parts = [part for k in (data.get("kernels") if isinstance(data, dict) else None) or [] if isinstance(k, dict)
             for part in (k.get("partition") or {}).values() if isinstance(part, dict)] \
        if isinstance(data, dict) and isinstance(data.get("kernels"), list) else []
    if not any(isinstance(m, dict) and any(a not in WEAVE_NAMES and isinstance(s, str) and s in claimed
                                           for a, s in m.items())
               for part in parts for m in (part.get("group"), part.get("stream"))):
        return data
    data = copy.deepcopy(data)
    for k in data["kernels"]:
        if not isinstance(k, dict) or not isinstance(k.get("partition"), dict):
            continue
        for part in k["partition"].values():
            for kind in ("group", "stream"):
                mapping = part.get(kind) if isinstance(part, dict) else None
                if isinstance(mapping, dict):
                    for axis, sym in mapping.items():
                        if axis not in WEAVE_NAMES and isinstance(sym, str) and sym in claimed:
                            mapping[axis] = f"{sym}_tile"
    return data


def compile_data(data: object, *, source: str) -> Diagram:
    """The compiled diagram of document `data`. The same document compiles to the same (immutable)
    Diagram object once per process: a report or a test worker compiles a file many times, and the
    configuration search caches its legal candidates by diagram (analyzer.config.choose.legal)."""
    key = (repr(data), source)          # plain data (YAML's core types): its repr is its content
    if key not in _COMPILED:
        if len(_COMPILED) >= _COMPILED_MAX:
            _COMPILED.pop(next(iter(_COMPILED)))
        _COMPILED[key] = _compile(data, source)
    return _COMPILED[key]


def _compile(data: object, source: str) -> Diagram:
    try:
        spec = DiagramSpec.model_validate(_weave_safe(data))
    except ValidationError as exc:
        raise from_validation_error(exc, file=source, hint=DOCS_HINT) from None
    try:
        compiled = _Compiler(spec, source).run()
    except NapkinError as exc:
        raise exc.located(file=source) from None
    return dataclasses.replace(compiled, document=copy.deepcopy(data))   # a copy: the caller's may change


class _Compiler:
    def __init__(self, spec: DiagramSpec, source: str) -> None:
        self.spec = spec
        self.source = source

    def run(self) -> Diagram:
        spec = self.spec
        self._check_counts()
        check_name(spec.name, what="diagram name", field="name")
        levels = self._levels()
        axes, defaults = self._axes()
        arrays = self._inputs(axes, levels)
        ops, entries = self._ops(axes, arrays)
        outputs = self._outputs(arrays)
        graph = self._graph(arrays, ops)
        ops = self._order(graph, ops, entries)
        self._check_used(arrays, ops, outputs)
        kernels = self._kernels(ops, axes, graph, levels, defaults)
        arrays = self._place_arrays(arrays, ops, kernels, outputs, levels)
        return Diagram(name=spec.name, title=spec.title, paper=spec.paper, doc=spec.doc,
                       source=self.source, dtype=spec.dtype, levels=levels, axes=axes,
                       defaults=defaults, arrays=arrays, ops=ops, outputs=outputs,
                       kernels=kernels, graph=graph, configurations=self._configurations(kernels))

    def _check_counts(self) -> None:
        """Refuse at once a diagram larger than MAX_AXES, MAX_INPUTS or MAX_OPS."""
        spec = self.spec
        ops = sum(1 if isinstance(entry, OpSpec) else len(entry.concat) for entry in spec.ops)
        for field, count, most in (("axes", len(spec.axes), MAX_AXES), ("inputs", len(spec.inputs), MAX_INPUTS),
                                   ("ops", ops, MAX_OPS)):
            if count > most:
                raise NapkinError(f"{count} {field}; a diagram may have at most {most}", field=field,
                                  hint="napkin's limit for a diagram (docs/diagram-format.md, section 2): "
                                       "split it into several diagrams, or drop what no op uses")

    def _configurations(self, kernels: tuple[Kernel, ...]) -> tuple:
        """Named configurations: distinct names, known kernels (their numbers are checked by configure)."""
        seen: set[str] = set()
        for i, spec in enumerate(self.spec.configurations):
            check_name(spec.name, what="configuration name", field=f"configurations[{i}].name")
            if spec.name in seen:
                raise NapkinError(f"configuration {spec.name!r} is named twice",
                                  field=f"configurations[{i}].name")
            seen.add(spec.name)
            if spec.kernel is not None and spec.kernel not in {k.name for k in kernels}:
                raise NapkinError(f"configuration {spec.name!r} names kernel {spec.kernel!r}, which "
                                  "the diagram does not have", field=f"configurations[{i}].kernel",
                                  hint=f"kernels: {', '.join(k.name for k in kernels)}")
        return tuple(self.spec.configurations)

    # -- levels and axes ------------------------------------------------------------------------
    def _levels(self) -> tuple[str, ...]:
        levels = tuple(self.spec.levels)
        for i, name in enumerate(levels):
            check_name(name, what="level", field=f"levels[{i}]")
        if len(levels) < 2:
            raise NapkinError("a diagram needs at least two levels (a higher and a lower one)",
                              field="levels", hint="for example: levels: [gmem, smem]")
        if len(set(levels)) != len(levels):
            raise NapkinError("levels are listed twice", field="levels")
        return levels

    def _axes(self) -> tuple[dict[str, Axis], dict[sympy.Symbol, int]]:
        if not self.spec.axes:
            raise NapkinError("a diagram needs at least one axis", field="axes")
        own = {name for name, ax in self.spec.axes.items() if ax is None or ax.size is None}
        axes: dict[str, Axis] = {}
        defaults: dict[sympy.Symbol, int] = {}
        for name, ax in self.spec.axes.items():
            where = f"axes.{name}"
            check_name(name, what="axis", field=where)
            if ax is None or ax.size is None:
                size = symbol(name)
            else:
                size = parse_expr(ax.size, names=own, field=f"{where}.size")
                # a number out of range, or an expression no positive sizes make positive (-q)
                if size.is_positive is False or size.is_number and not (size.is_integer and 0 < size <= MAX_SIZE):
                    raise NapkinError(f"size {ax.size!r} is not a positive whole number "
                                      "(at most 2**40)", field=f"{where}.size")
                if ax.default is not None:
                    raise NapkinError("`default` sets the number of an axis's own size symbol, but "
                                      f"this axis's size is {ax.size!r}", field=f"{where}.default",
                                      hint="put the default on the axes its size is made of")
            if ax is not None and ax.default is not None:
                if ax.default <= 0:
                    raise NapkinError(f"size must be positive, got {ax.default}",
                                      field=f"{where}.default")
                defaults[symbol(name)] = ax.default
            axes[name] = Axis(name, size, ax.doc if ax else "")
        return axes, defaults

    def _check_axes(self, names: list[str], axes: dict[str, Axis], field: str) -> tuple[str, ...]:
        for i, a in enumerate(names):
            if a not in axes:
                raise NapkinError(f"unknown axis {a!r}", field=f"{field}[{i}]",
                                  hint=f"declared axes: {', '.join(axes)}")
        if len(set(names)) != len(names):
            raise NapkinError("an axis appears twice in one array", field=field,
                              hint="give the two wires different axis names")
        return tuple(names)

    # -- arrays and ops -------------------------------------------------------------------------
    def _inputs(self, axes: dict[str, Axis], levels: tuple[str, ...]) -> dict[str, Array]:
        if not self.spec.inputs:
            raise NapkinError("a diagram needs at least one input array", field="inputs")
        arrays: dict[str, Array] = {}
        for name, arr in self.spec.inputs.items():
            where = f"inputs.{name}"
            check_name(name, what="array", field=where)
            level = arr.level or levels[0]
            if level not in levels:
                raise NapkinError(f"unknown level {level!r}", field=f"{where}.level",
                                  hint=f"levels of this diagram: {', '.join(levels)}")
            arrays[name] = Array(name, self._check_axes(arr.axes, axes, f"{where}.axes"),
                                 arr.dtype or self.spec.dtype, level, "input", None, arr.doc)
        return arrays

    def _ops(self, axes: dict[str, Axis], arrays: dict[str, Array]) -> tuple[list[Op], list[list[str]]]:
        flat: list[tuple[OpSpec, str, int]] = []
        for i, entry in enumerate(self.spec.ops):
            if isinstance(entry, OpSpec):
                flat.append((entry, f"ops[{i}]", i))
            else:
                flat.extend((op, f"ops[{i}].concat[{j}]", i) for j, op in enumerate(entry.concat))
        names: set[str] = set()
        for spec, path, _ in flat:
            check_name(spec.name, what="op", field=f"{path}.name")
            if spec.name in arrays or spec.name in names:
                raise NapkinError(f"the name {spec.name!r} is used twice", field=f"{path}.name",
                                  hint="ops name their output arrays; every array needs its own name")
            names.add(spec.name)
        known = set(arrays) | names
        axes_of = {n: a.axes for n, a in arrays.items()}
        for spec, path, _ in flat:  # output shapes first, so inputs can be checked in any order
            axes_of[spec.name] = self._check_axes(spec.output, axes, f"{path}.output")
        ops = [self._op(spec, path, column, axes, axes_of, known) for spec, path, column in flat]
        entries: list[list[str]] = []
        for spec, _, column in flat:
            if column == len(entries):
                entries.append([])
            entries[column].append(spec.name)
        return ops, entries

    def _op(self, spec: OpSpec, path: str, column: int, axes: dict[str, Axis],
            axes_of: dict[str, tuple[str, ...]], known: set[str]) -> Op:
        prim = primitives.get(spec.primitive, field=f"{path}.primitive")
        for param in ("over", "scale", "offset", "cap", "window", "before", "after", "query", "key",
                      "accumulate"):
            given = getattr(spec, param) is not None
            if given and param not in prim.params:
                raise NapkinError(f"primitive {prim.name} takes no `{param}`", field=f"{path}.{param}",
                                  hint=f"{prim.name} takes: {', '.join(sorted(prim.params)) or 'nothing'}"
                                       " besides inputs and output")
        if prim.needs_over and spec.over is None:
            raise NapkinError(f"primitive {prim.name} needs `over`: the axis it acts on",
                              field=f"{path}.over")
        if len(spec.inputs) not in prim.arities:
            raise NapkinError(f"primitive {prim.name} takes {' or '.join(map(str, prim.arities))} input(s), got "
                              f"{len(spec.inputs)}", field=f"{path}.inputs",
                              hint=f"the last of {prim.arity + 1} is the softmax's sink logits, one a row"
                              if prim.takes_sink else None)
        for i, name in enumerate(spec.inputs):
            if name not in known:
                raise NapkinError(f"unknown array {name!r}", field=f"{path}.inputs[{i}]",
                                  hint=f"known arrays: {', '.join(sorted(known))}")
            if name == spec.name:
                raise NapkinError(f"op {spec.name!r} uses its own output", field=f"{path}.inputs[{i}]",
                                  hint="a diagram has no cycles")
        for param in ("over", "query", "key"):
            axis = getattr(spec, param)
            if axis is not None and axis not in axes:
                raise NapkinError(f"unknown axis {axis!r}", field=f"{path}.{param}",
                                  hint=f"declared axes: {', '.join(axes)}")
        scale = None
        if spec.scale is not None:
            own = {s.name for a in axes.values() for s in a.size.free_symbols}
            scale = parse_expr(spec.scale, names=own, field=f"{path}.scale")
        # a constant: no size symbol (it is rendered as a number into the kernel)
        offset = None if spec.offset is None else parse_expr(spec.offset, names=set(),
                                                               field=f"{path}.offset")
        cap = None if spec.cap is None else parse_expr(spec.cap, names=set(), field=f"{path}.cap")
        window, before, after = (None if getattr(spec, f) is None else
                                 parse_expr(getattr(spec, f), names=set(), field=f"{path}.{f}")
                                 for f in ("window", "before", "after"))
        applied = primitives.Applied(tuple(axes_of[n] for n in spec.inputs), axes_of[spec.name],
                                     spec.over, spec.query, spec.key, scale, offset, cap, window, before, after)
        try:
            prim.check(applied)
        except ValueError as exc:
            raise NapkinError(f"op {spec.name!r}: {exc}", field=path) from None
        expected = prim.expected_output(applied)
        if set(applied.output) != expected:
            want = ", ".join(a for a in dict.fromkeys((*applied.output, *sorted(expected)))
                             if a in expected)
            extra = set(applied.output) - expected
            missing = expected - set(applied.output)
            why = []
            if extra:
                why.append(f"axes {sorted(extra)} come from no input")
            if missing:
                why.append(f"input axes {sorted(missing)} are neither "
                           f"{'reduced' if prim.reduces else 'kept'} nor in the output")
            raise NapkinError(f"op {spec.name!r} ({prim.name}): output [{', '.join(applied.output)}] "
                              f"does not match its inputs: {'; '.join(why)}", field=f"{path}.output",
                              hint=f"the shape rule of {prim.name} gives axes {{{want}}}")
        weave = tuple(a for a in applied.output if a not in prim.core_axes(applied))
        if spec.weave is not None:
            for i, a in enumerate(spec.weave):
                if a not in axes:
                    raise NapkinError(f"weave names unknown axis {a!r}", field=f"{path}.weave[{i}]",
                                      hint=f"declared axes: {', '.join(axes)}")
            if set(spec.weave) != set(weave):
                raise NapkinError(f"weave [{', '.join(spec.weave)}] differs from the weave the shapes "
                                  f"imply, [{', '.join(weave)}]", field=f"{path}.weave",
                                  hint="the weave is the output axes the primitive does not act on")
        accumulate = spec.accumulate or spec.dtype or self.spec.dtype
        return Op(spec.name, prim, tuple(spec.inputs), applied, weave, column, accumulate, path,
                  spec.doc)

    def _outputs(self, arrays: dict[str, Array]) -> tuple[str, ...]:
        produced = {op.name for entry in self.spec.ops
                    for op in ([entry] if isinstance(entry, OpSpec) else entry.concat)}
        for i, name in enumerate(self.spec.outputs):
            if name in arrays:
                raise NapkinError(f"input {name!r} cannot also be an output", field=f"outputs[{i}]",
                                  hint="outputs are arrays computed by ops")
            if name not in produced:
                raise NapkinError(f"unknown array {name!r}", field=f"outputs[{i}]",
                                  hint=f"ops produce: {', '.join(sorted(produced))}")
        if len(set(self.spec.outputs)) != len(self.spec.outputs):
            raise NapkinError("an output is listed twice", field="outputs")
        return tuple(self.spec.outputs)

    # -- graph ----------------------------------------------------------------------------------
    def _graph(self, arrays: dict[str, Array], ops: list[Op]) -> nx.DiGraph:
        graph = nx.DiGraph()
        for name in arrays:
            graph.add_node(("array", name))
        for op in ops:
            graph.add_node(("op", op.name))
            graph.add_edge(("op", op.name), ("array", op.name))
            for name in op.inputs:
                graph.add_edge(("array", name), ("op", op.name))
        try:
            cycle = nx.find_cycle(graph)
        except nx.NetworkXNoCycle:
            return graph
        names = [node[1] for node, _ in cycle if node[0] == "op"]
        raise NapkinError(f"the ops form a cycle: {' -> '.join([*names, names[0]])}", field="ops",
                          hint="a diagram composes functions left to right; no op may depend on itself")

    def _order(self, graph: nx.DiGraph, ops: list[Op], entries: list[list[str]]) -> tuple[Op, ...]:
        by_name = {o.name: o for o in ops}
        column_of = {name: c for c, names in enumerate(entries) for name in names}
        for names in entries:  # stacked functions act side by side: none may feed another
            for a in names:
                for b in names:
                    if a != b and nx.has_path(graph, ("op", a), ("op", b)):
                        raise NapkinError(f"concatenated ops {a!r} and {b!r} depend on each other",
                                          field=by_name[b].path,
                                          hint="put the later one in a later column")
        # Columns run left to right; a column listed too early moves after what it needs.
        entry_graph = nx.DiGraph()
        entry_graph.add_nodes_from(range(len(entries)))
        for op in ops:
            for name in op.inputs:
                if name in column_of and column_of[name] != column_of[op.name]:
                    entry_graph.add_edge(column_of[name], column_of[op.name])
        order = list(nx.lexicographical_topological_sort(entry_graph))
        renumber = {old: new for new, old in enumerate(order)}
        return tuple(
            Op(**{**by_name[n].__dict__, "column": renumber[column_of[n]]})
            for old in order for n in entries[old])

    def _check_used(self, arrays: dict[str, Array], ops: tuple[Op, ...], outputs: tuple[str, ...]) -> None:
        used = {name for op in ops for name in op.inputs}
        for name in arrays:
            if name not in used:
                raise NapkinError(f"input {name!r} is never used", field=f"inputs.{name}",
                                  hint="remove it or pass it to an op")
        for op in ops:
            if op.name not in used and op.name not in outputs:
                raise NapkinError(f"the output of op {op.name!r} is neither used nor listed in outputs",
                                  field=op.path, hint="add it to outputs or remove the op")

    # -- kernels --------------------------------------------------------------------------------
    def _kernels(self, ops: tuple[Op, ...], axes: dict[str, Axis], graph: nx.DiGraph,
                 levels: tuple[str, ...], defaults: dict[sympy.Symbol, int]) -> tuple[Kernel, ...]:
        specs = self.spec.kernels or [KernelSpec(name="fused")]
        all_ops = [o.name for o in ops]
        owner: dict[str, str] = {}
        size_names = {s.name for a in axes.values() for s in a.size.free_symbols} | set(axes)
        symbol_owner: dict[str, str] = {}
        kernels: list[Kernel] = []
        for k, spec in enumerate(specs):
            where = f"kernels[{k}]"
            check_name(spec.name, what="kernel", field=f"{where}.name")
            if any(kern.name == spec.name for kern in kernels):
                raise NapkinError(f"kernel name {spec.name!r} is used twice", field=f"{where}.name")
            names = spec.ops if spec.ops is not None else (all_ops if len(specs) == 1 else None)
            if names is None:
                raise NapkinError(f"kernel {spec.name!r} does not list its ops, and there are "
                                  f"{len(specs)} kernels", field=f"{where}.ops",
                                  hint="list each kernel's ops (only a diagram's one kernel may leave "
                                       "them out: it holds every op)")
            if not names:
                raise NapkinError(f"kernel {spec.name!r} lists no ops", field=f"{where}.ops",
                                  hint="list the ops it runs, or leave out ops: a diagram's one kernel "
                                       "holds every op")
            for i, name in enumerate(names):
                if name not in all_ops:
                    raise NapkinError(f"unknown op {name!r}", field=f"{where}.ops[{i}]",
                                      hint=f"ops: {', '.join(all_ops)}")
                if name in owner:
                    raise NapkinError(f"op {name!r} is already in kernel {owner[name]!r}",
                                      field=f"{where}.ops[{i}]", hint="each op runs in one kernel")
                owner[name] = spec.name
            members = set(names)
            for other in all_ops:  # convex: no path leaves the kernel and comes back
                if other in members:
                    continue
                node = ("op", other)
                if any(nx.has_path(graph, ("op", m), node) for m in members) and \
                        any(nx.has_path(graph, node, ("op", m)) for m in members):
                    raise NapkinError(f"kernel {spec.name!r} cannot fuse around op {other!r}, which "
                                      "both depends on it and feeds it", field=f"{where}.ops",
                                      hint=f"add {other!r} to the kernel or split the kernel")
            partitions: dict[str, Partition] = {}
            domain = {a for o in ops if o.name in members for a in o.applied.domain}
            for level, part in spec.partition.items():
                pwhere = f"{where}.partition.{level}"
                if level not in levels:
                    raise NapkinError(f"unknown level {level!r}", field=pwhere,
                                      hint=f"levels of this diagram: {', '.join(levels)}")
                if level == levels[0]:
                    raise NapkinError(f"the top level {level!r} holds whole arrays and is not "
                                      "partitioned", field=pwhere,
                                      hint=f"partition a lower level: {', '.join(levels[1:])}")
                if len(part.stream) > 1:
                    raise NapkinError("a level streams at most one axis", field=f"{pwhere}.stream")
                for kind, mapping in (("group", part.group), ("stream", part.stream)):
                    for axis, name in mapping.items():
                        f = f"{pwhere}.{kind}.{axis}"
                        if axis not in axes:
                            raise NapkinError(f"unknown axis {axis!r}", field=f,
                                              hint=f"declared axes: {', '.join(axes)}")
                        if axis not in domain:
                            raise NapkinError(f"axis {axis!r} is not used by kernel {spec.name!r}",
                                              field=f)
                        check_name(name, what="size symbol", field=f)
                        if name in size_names:
                            raise NapkinError(f"{name!r} already names an axis or size", field=f,
                                              hint="name tile sizes like g_q or s_x")
                        if name in symbol_owner and symbol_owner[name] != f"{spec.name}.{level}":
                            raise NapkinError(f"size symbol {name!r} is used twice", field=f,
                                              hint="every level of every kernel names its own sizes")
                        symbol_owner[name] = f"{spec.name}.{level}"
                both = set(part.group) & set(part.stream)
                if both:
                    raise NapkinError(f"axis {sorted(both)[0]!r} is both grouped and streamed",
                                      field=pwhere)
                group_names = list(part.group.values()) + list(part.stream.values())
                if len(set(group_names)) != len(group_names):
                    raise NapkinError("two axes share one size symbol", field=pwhere)
                stream = next(((a, symbol(s)) for a, s in part.stream.items()), None)
                partitions[level] = Partition(tuple((a, symbol(s)) for a, s in part.group.items()),
                                              stream)
            ordered = tuple(o for o in all_ops if o in members)
            kernels.append(Kernel(spec.name, ordered, partitions, where, spec.doc))
        missing = [o for o in all_ops if o not in owner]
        if missing:
            raise NapkinError(f"ops {missing} are in no kernel", field="kernels",
                              hint="list every op in exactly one kernel")
        first = {o: i for i, o in enumerate(all_ops)}
        return tuple(sorted(kernels, key=lambda kern: first[kern.ops[0]]))

    def _place_arrays(self, arrays: dict[str, Array], ops: tuple[Op, ...], kernels: tuple[Kernel, ...],
                      outputs: tuple[str, ...], levels: tuple[str, ...]) -> dict[str, Array]:
        """Intermediates live at the lowest level of their kernel, or at the top between kernels."""
        kernel_of = {o: k.name for k in kernels for o in k.ops}
        placed = dict(arrays)
        for op in ops:
            consumers = {kernel_of[c.name] for c in ops if op.name in c.inputs}
            crosses = bool(consumers - {kernel_of[op.name]})
            if op.name in outputs:
                role, level = "output", levels[0]
            else:
                role, level = "intermediate", levels[0] if crosses else levels[-1]
            dtype = next((s.dtype for s in self._op_specs() if s.name == op.name), None) or self.spec.dtype
            placed[op.name] = Array(op.name, op.applied.output, dtype, level, role, op.name, op.doc)
        return placed

    def _op_specs(self) -> list[OpSpec]:
        return [op for entry in self.spec.ops
                for op in ([entry] if isinstance(entry, OpSpec) else entry.concat)]
