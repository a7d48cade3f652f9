"""Weaving a whole diagram over extra axes (Section 2.1), before it is compiled.

A kernel that serves torch's scaled_dot_product_attention layout runs the diagram once per batch entry
(and once per head, where the diagram has no head axis): that is the diagram weaved over those axes.
Weaving prepends the axes to every input and every op's output and groups them with size-1 tiles at
every partitioned level, so each block takes one index of each. The weaved diagram is compiled and
analysed like any other; napkin analyze counts the same transfers per instance.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass

from analyzer.common.errors import NapkinError
from analyzer.diagram.compiled import Diagram
from analyzer.diagram.graph import compile_data


@dataclass(frozen=True)
class Outer:
    """An axis the whole diagram is weaved over, with its group symbol (always one index a block)."""

    axis: str
    doc: str


def outer_tiles(d: Diagram, outer: tuple[Outer, ...]) -> dict[str, int]:
    """Every group symbol of the weaved axes, at one index a block."""
    axes = {o.axis for o in outer}
    return {sym.name: 1 for k in d.kernels for p in k.partitions.values() for a, sym in p.group
            if a in axes}


def weave(data: dict, outer: tuple[Outer, ...]) -> dict:
    """The diagram document weaved over `outer` (outermost first); `data` itself is not changed."""
    if not outer:
        return data
    woven = copy.deepcopy(data)
    axes = woven.get("axes") or {}
    taken = set(axes) | {str(o.get("name")) for o in woven.get("ops") or [] if isinstance(o, dict)}
    for o in outer:
        if o.axis in taken:
            raise NapkinError(f"cannot weave over {o.axis!r}: the diagram already has an axis or op "
                              "of that name", field=f"axes.{o.axis}",
                              hint="rename it in the diagram file")
    names = [o.axis for o in outer]
    woven["axes"] = {**{o.axis: {"default": 1, "doc": o.doc} for o in outer}, **axes}
    woven["inputs"] = {name: names + list(shape) for name, shape in (woven.get("inputs") or {}).items()}
    for op in woven.get("ops") or []:
        op["output"] = names + list(op.get("output") or [])
    kernels = woven.get("kernels") or []
    for kernel in kernels:
        suffix = f"_{kernel.get('name')}" if len(kernels) > 1 else ""   # symbols are per kernel
        for level, part in (kernel.get("partition") or {}).items():
            if isinstance(part, dict):
                part["group"] = {**{o.axis: f"g_{o.axis}{suffix}" + ("" if level == "smem" else f"_{level}")
                                    for o in outer}, **(part.get("group") or {})}
    woven.pop("configurations", None)   # named configurations describe the unweaved kernel
    return woven


def weave_diagram(d: Diagram, outer: tuple[Outer, ...]) -> Diagram:
    """Diagram `d` weaved over `outer` (outermost first) and compiled: from the document `d` was
    compiled from, in its element type; `d` itself where there is nothing to weave over."""
    if not outer:
        return d
    return compile_data(weave(d.document, outer), source=d.source)
