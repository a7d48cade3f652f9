"""Identifiers in generated code: one per thing, whatever the diagram names its arrays and axes.

A generated kernel names its variables after the diagram (`Q_ptr`, `offs_q`, `acc_O`, `TILE_Q`), so that
it reads like the diagram. A diagram may name things anything that is a valid name (analyzer.common.expr): an
input `t`, `out` or `torch`, axes `q` and `Q`, an op `acc` beside an op `val` (`acc_val` would be both
`acc_{val}` and `{acc}_val`), a Python keyword. Building identifiers by pasting names into templates
therefore collides, and a collision is a wrong answer or code that does not parse.

So every identifier a backend makes from a diagram's names is claimed from a `Scope`: the scope gives
the preferred spelling (`offs_q`) when it is free and not reserved (keywords, builtins, the generator's
own fixed names, names of the enclosing scope), else the first free `<preferred>_<n>`. A claim is keyed
by what it names (template and names), so the same thing always gets the same identifier and two things
never share one. Claims are made in the order the source is written, so output stays deterministic.
"""

from __future__ import annotations

import builtins
import keyword
import re
from collections.abc import Hashable, Iterable

from analyzer.common.errors import NapkinError

IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")

# Python: keywords (soft ones too: `match`, `case`, `type`, `_`) and builtins, which a local must not
# shadow where the generated code calls them (range, float, min, zip, isinstance, ...)
PYTHON_RESERVED = frozenset(keyword.kwlist) | frozenset(keyword.softkwlist) | frozenset(dir(builtins))

# C++17 keywords and alternative tokens, and what CUDA and the C library define for every kernel
CPP_RESERVED = frozenset("""
    alignas alignof and and_eq asm auto bitand bitor bool break case catch char char8_t char16_t char32_t
    class compl concept const consteval constexpr constinit const_cast continue co_await co_return
    co_yield decltype default delete do double dynamic_cast else enum explicit export extern false float
    for friend goto if inline int long mutable namespace new noexcept not not_eq nullptr operator or
    or_eq private protected public register reinterpret_cast requires return short signed sizeof static
    static_assert static_cast struct switch template this thread_local throw true try typedef typeid
    typename union unsigned using virtual void volatile wchar_t while xor xor_eq override final import
    module
    threadIdx blockIdx blockDim gridDim warpSize dim3 uint3 float2 float4 half half2 int2 int4 uint2
    uint4 size_t ptrdiff_t int8_t int16_t int32_t int64_t uint8_t uint16_t uint32_t uint64_t
    INFINITY NAN NULL EOF assert errno min max abs exp exp2 expf exp2f log logf sqrt sqrtf rsqrt rsqrtf
    fmaxf fminf fabsf tanh tanhf std cuda cudaError_t cudaStream_t napkin
""".split())


class Scope:
    """The identifiers of one scope of generated source (a module, a function, a translation unit).

    `reserved`: names the generator writes itself in this scope or that the language keeps; `parent`:
    the enclosing scope, whose names a local must not shadow either. `cpp`: C++ rules besides Python's
    identifier syntax: no `__` anywhere and no leading `_` (reserved to the implementation)."""

    def __init__(self, reserved: Iterable[str] = (), parent: Scope | None = None, *,
                 cpp: bool = False) -> None:
        self.parent = parent
        self.cpp = cpp
        self._taken: set[str] = set(reserved)
        self._given: dict[Hashable, str] = {}

    def taken(self, name: str) -> bool:
        return name in self._taken or (self.parent is not None and self.parent.taken(name))

    def reserve(self, *names: str) -> None:
        """Names the generator writes as they are (`pid`, `alpha`, `cfg`): no claim may take them."""
        self._taken.update(names)

    def claim(self, key: Hashable, preferred: str) -> str:
        """The identifier of `key`: `preferred` if free, else the first free `preferred_<n>`."""
        if key in self._given:
            return self._given[key]
        base = self._legal(preferred)
        name, n = base, 1
        while self.taken(name) or keyword.iskeyword(name):
            n += 1
            name = self._legal(f"{base}_{n}")     # C++: `EXT_X_` + `_2` is EXT_X_2, not EXT_X__2
        self._taken.add(name)
        self._given[key] = name
        return name

    def __call__(self, template: str, *names: str, case: str | None = None) -> str:
        """The identifier `template` makes of diagram names `names`, e.g. `scope("offs_{}", axis)` or
        `scope("TILE_{}", axis, case="upper")`: claimed once per (template, names, case)."""
        shown = [n.upper() if case == "upper" else n.lower() if case == "lower" else n for n in names]
        return self.claim((template, names, case), template.format(*shown))

    def _legal(self, preferred: str) -> str:
        if not IDENTIFIER.fullmatch(preferred):
            raise NapkinError(f"internal: {preferred!r} is not an identifier",
                              hint="names reaching the code generator are validated first (analyzer.common.expr)")
        if self.cpp:
            preferred = re.sub("__+", "_", preferred).lstrip("_") or "v"
        return preferred


class PlanIds:
    """The identifiers every backend gives a kernel plan's arguments, by what they name: pointers,
    sizes, strides, scale factors and tiles. A backend's subclass adds its own templates and claims the
    parameters first, in order, so that its launcher and its kernel name them alike."""

    def __init__(self, scope: Scope) -> None:
        self.scope = scope

    def __call__(self, template: str, *names: str, case: str | None = None) -> str:
        return self.scope(template, *names, case=case)

    def ptr(self, array: str) -> str:
        return self.scope("{}_ptr", array)

    def size(self, axis: str) -> str:
        return self.scope("size_{}", axis)

    def stride(self, array: str, axis: str) -> str:
        return self.scope("stride_{}_{}", array, axis)

    def scale(self, op: str) -> str:
        return self.scope("scale_{}", op)

    def tile(self, axis: str) -> str:
        """A grouped axis's tile size (the configuration's g)."""
        return self.scope("TILE_{}", axis, case="upper")

    def block(self, dim: str) -> str:
        """A dimension's extent in the tiles (a power of two; the streamed chunk's is the configuration's s)."""
        return self.scope("BLOCK_{}", dim, case="upper")


__all__ = ["Scope", "PlanIds", "IDENTIFIER", "PYTHON_RESERVED", "CPP_RESERVED"]
