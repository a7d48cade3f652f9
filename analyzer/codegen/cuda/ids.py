"""Identifiers in the C++ of a CUDA kernel file, claimed from scopes (analyzer.codegen.names).

The C++ names its variables after the diagram (`Q_ptr`, `size_q`, `TILE_Q`, `acc_O`), and a diagram may
name things `int`, `t` (`size_t`), `q` beside `Q` (`TILE_Q` twice) or `x__y` (reserved in C++); an op
`new` would make the running maximum `m_new` of the online softmax's own `m_new`. So, as in the Triton
backend, every identifier made from a diagram's names is claimed from a C++ scope: the file's for the
functions, one per kernel beneath it for parameters, locals and the configuration's members. Neither may
take a name the generator writes itself: the file's scope reserves the C++ and CUDA names, and every
identifier of the prelude and of the code after it; a kernel's scope every identifier its own code
writes, read off a rendering of the kernel with placeholders (`fixed`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from analyzer.codegen.cuda.prelude import PRELUDE, file_code
from analyzer.codegen.names import CPP_RESERVED, PlanIds, Scope
from analyzer.codegen.render import pointers, runtime_axes, scaled_ops
from analyzer.config.plan import KernelPlan

_COMMENT = re.compile(r"//[^\n]*")
_STRING = re.compile(r'"(?:[^"\\\n]|\\.)*"')
_WORD = re.compile(r"(?<![\w.])[A-Za-z_]\w*")     # an identifier (not a number's suffix: 1.f, 0xffu)


def identifiers(code: str) -> set[str]:
    """The identifiers of C++ `code`, comments and string literals left out."""
    return set(_WORD.findall(_STRING.sub('""', _COMMENT.sub("", code))))


# The file scope's reserved names: C++ and CUDA's, and those the prelude and the code after it define or use
FILE_RESERVED = CPP_RESERVED | identifiers(PRELUDE) | identifiers("\n".join(file_code()))


@dataclass(frozen=True)
class Functions:
    """The file-level names of one kernel: its extern "C" entry (the loader calls it by this name), its
    __global__ template, and for the tensor-core kernels the configuration structs and the launcher."""

    entry: str
    kernel: str
    cfg: str = ""
    launch: str = ""


def size_axes(p: KernelPlan) -> tuple[str, ...]:
    """Every axis a kernel takes the size of: the runtime ones as Triton, then the whole ones."""
    return tuple(dict.fromkeys((*runtime_axes(p), *(a for d in p.wholes for a in d.axes))))


class CudaIds(PlanIds):
    """The identifiers of one kernel's C++ (configuration structs, __global__ template, launcher, extern
    "C" entry), by what they name. One scope serves the four: the launchers pass the parameters on by
    name and the kernel reads the structs' members by name. The parameters are claimed first, in order."""

    def __init__(self, p: KernelPlan, scope: Scope) -> None:
        super().__init__(scope)
        self.p = p
        for a in pointers(p):
            self.ptr(a)
        for a in size_axes(p):
            self.size(a)
        for a in pointers(p):
            for x in p.axes_of(a):
                self.stride(a, x)
        for o in scaled_ops(p):
            self.scale(o.name)

    def ext(self, dim: str) -> str:
        """A dimension's extent in the register and shared-memory tiles (compile time)."""
        return self.scope("EXT_{}", dim, case="upper")

    def block(self, dim: str) -> str:
        """The streamed chunk's name in the header (the CONFIGS entry's BLOCK_<dim>)."""
        return self.scope("BLOCK_{}", dim, case="upper")

    def row_sum(self, op: str, suffix: str = "") -> str:
        """A softmax's row sums, `sm_<op>`: claimed apart from the shared-memory tile `sm_<array>`."""
        return self.scope.claim(("row sum", op, suffix), f"sm_{op}{suffix}")


class Placeholders(Scope):
    """A scope that answers each claim with a placeholder that no generated code writes."""

    def claim(self, key, preferred: str) -> str:
        if key not in self._given:
            self._given[key] = f"NAPKIN_PLACEHOLDER_{len(self._given)}"
        return self._given[key]

    def placeholders(self) -> set[str]:
        return set(self._given.values())


def fixed(g, k, cls) -> set[str]:
    """The identifiers kernel `k`'s C++ writes itself (`tid`, `m_new`, `sm_head`, the prelude's names it
    calls): its rendering with a placeholder for every claimed identifier, less the placeholders."""
    probe = Placeholders()
    fns = Functions(*(probe.claim(role, role) for role in ("entry", "kernel", "cfg", "launch")))
    text = cls(g, k, fns, CudaIds(k.plan, probe)).render()
    return identifiers(text) - probe.placeholders()


__all__ = ["identifiers", "FILE_RESERVED", "Functions", "size_axes", "CudaIds", "Placeholders", "fixed"]
