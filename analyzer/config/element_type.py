"""The element type a generated kernel computes in, from the diagram file and `--dtype`.

A generated kernel takes every array in one type, fp16 or bf16 (GENERATED), or, the Hopper attention
kernel alone, fp8 (FP8: e4m3 inputs with block scales, the output in 16 bits; the family asks). The
diagram is validated as `napkin diagrams check` validates it (so `dtype: 5` is an error), and then:
without `--dtype` the kernel takes the file's `dtype`, which must be one of those; with `--dtype` that
type, and a note says so where the file declares another; an array that sets its own type other than
the kernel's is an error, since the kernel would silently compute it in the kernel's type.
"""

from __future__ import annotations

from dataclasses import dataclass

from analyzer.common.errors import NapkinError
from analyzer.diagram.compiled import Diagram
from analyzer.model.analysis import load

GENERATED = ("fp16", "bf16")
FP8 = "fp8"


@dataclass(frozen=True)
class ElementType:
    dtype: str               # what the kernel computes in
    note: str | None = None  # where that differs from what the file declares


def kernel_element_type(diagram: str | Diagram, requested: str | None, *, fp8: bool = False) -> ElementType:
    """The element type a kernel of `diagram` (a name, a file, or the diagram as compiled from its file) is
    generated in, with `--dtype` `requested`; `fp8`: the family asking generates FP8 kernels (the Hopper
    attention kernel)."""
    taken = (*GENERATED, FP8) if fp8 else GENERATED
    if requested is not None and requested not in taken:
        hint = ("napkin generates fp8 kernels for attention on a Hopper GPU (the Hopper kernel); fp32 ones "
                "not yet" if requested == FP8 else "fp32 kernels are not generated yet")
        raise NapkinError(f"{requested!r}: this kernel takes {' or '.join(taken)}", field="--dtype", hint=hint)
    d = load(diagram)
    dtype = requested or d.dtype
    if dtype not in taken:
        raise NapkinError(f"the diagram's element type is {d.dtype}; this kernel takes "
                          f"{' or '.join(taken)}", file=d.source, field="dtype",
                          hint="pass --dtype fp16 or --dtype bf16 to generate it in one of those")
    for name, array in d.arrays.items():
        if array.dtype == d.dtype or array.dtype == dtype:
            continue
        where = f"inputs.{name}.dtype" if array.role == "input" else f"{d.op(name).path}.dtype"
        raise NapkinError(f"array {name} is {array.dtype}, but a generated kernel computes every array "
                          f"in one element type ({dtype})", file=d.source, field=where,
                          hint=f"remove the array's dtype to generate it in {dtype}")
    note = None
    if dtype != d.dtype:
        note = f"{d.source} declares dtype {d.dtype}; the kernel is generated for {dtype} (--dtype)"
    return ElementType(dtype, note)
