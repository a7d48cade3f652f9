"""A diagram without its masks: what a block of keys that its block of queries sees in full computes.

Context parallelism (docs/scale.md) cuts the sequence into blocks: under a causal mask the block of a
device's own keys is causal, but a block of keys that lies wholly before its queries is seen in full, so
that step runs the same diagram with its mask ops dropped, on query and key blocks of different lengths.
`unmasked` derives that diagram from the file's own document: each mask op is removed (its readers read
what it masked) and the key axis it names, tied to the query axis in a self-attention file (`x: {size:
q}`), gets a size of its own, its default the query axis's. Nothing else changes: the ops, element
types, partitions and configurations stay the file's.
"""

from __future__ import annotations

import copy

import sympy

from analyzer.common.errors import NapkinError
from analyzer.diagram.compiled import Diagram
from analyzer.diagram.graph import compile_data
from analyzer.diagram.primitives import Mask


def masks(d: Diagram) -> tuple[str, ...]:
    """The names of the diagram's mask ops (causal_mask, window_mask, band_mask), in execution order."""
    return tuple(op.name for op in d.ops if isinstance(op.primitive, Mask))


def unmasked(d: Diagram) -> Diagram:
    """`d` with its mask ops dropped and their key axes untied from the query axes (see the module)."""
    dropped = masks(d)
    if not dropped:
        return d
    data = copy.deepcopy(d.document)
    reads = {}            # a dropped mask's output -> what it masked
    keys = set()
    for op in d.ops:
        if op.name in dropped:
            (source,) = op.inputs
            reads[op.name] = reads.get(source, source)
            keys.add(op.applied.key)
    data["ops"] = _rewired(data["ops"], dropped, reads)
    data["outputs"] = [reads.get(o, o) for o in data["outputs"]]
    for kernel in data.get("kernels") or []:
        if "ops" in kernel:
            kernel["ops"] = [o for o in kernel["ops"] if o not in dropped]
    for key in sorted(keys):
        size = d.size(key)
        if isinstance(size, sympy.Symbol) and size.name == key:
            continue                       # already a size of its own
        taken = {s.name for s in d.size_symbols}
        if key in taken:
            raise NapkinError(f"axis {key!r} cannot be given a size of its own: {key!r} already names a size",
                              file=d.source, field=f"axes.{key}", hint="rename the size or the axis")
        if not size.free_symbols <= set(d.defaults):
            raise NapkinError(f"axis {key!r} (size {size}) has no default to start its own size from",
                              file=d.source, field=f"axes.{key}", hint="give its sizes defaults")
        entry = {k: v for k, v in data["axes"][key].items() if k != "size"}
        data["axes"][key] = {**entry, "default": int(size.subs(d.defaults))}
    data["name"] = f"{d.name}_unmasked"
    return compile_data(data, source=d.source)


def _rewired(entries: list, dropped: tuple[str, ...], reads: dict[str, str]) -> list:
    """The document's ops without the dropped ones, each reading what a dropped op masked; a concatenation
    (`concat: [ops]`) keeps its other ops, and goes where it keeps none."""
    out = []
    for entry in entries:
        if "concat" in entry:
            kept = _rewired(entry["concat"], dropped, reads)
            if kept:
                out.append({**entry, "concat": kept})
        elif entry.get("name") not in dropped:
            out.append({**entry, "inputs": [reads.get(i, i) for i in entry["inputs"]]})
    return out
