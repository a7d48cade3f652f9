"""A sympy expression as a numpy function, for evaluating a model at many configurations at once.

sympy's NumPy printer writes the code; this module compiles it. `sympy.lambdify` does the same, but
on every call it also builds a namespace from `from numpy import *` (which imports numpy.f2py and its
kin, about 50 ms the first time) and prints the whole expression into a docstring: together about
five times the cost of the compilation, paid on every cold `napkin analyze`. The function's arguments
are renamed x0, x1, ... before printing, so no symbol name (which a diagram chooses) reaches the
compiled code, and the code calls only what the printer qualified with its module.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Sequence

import sympy
from sympy.printing.numpy import NumPyPrinter


class _Printer(NumPyPrinter):
    """sympy's NumPy printer, printing each argument symbol by its position (x0, x1, ...)."""

    def __init__(self, names: dict[sympy.Symbol, str]) -> None:
        super().__init__({"fully_qualified_modules": True, "inline": True, "strict": True})
        self._names = names

    def _print_Symbol(self, expr: sympy.Symbol) -> str:
        if expr not in self._names:
            raise ValueError(f"{expr} is not an argument")
        return self._names[expr]


def numpy_function(args: Sequence[sympy.Symbol], expr: sympy.Expr) -> Callable:
    """f(*values) = `expr` with `args` set to `values` (numbers or numpy arrays, broadcast)."""
    names = [f"x{i}" for i in range(len(args))]
    printer = _Printer(dict(zip(args, names, strict=True)))
    body = printer.doprint(expr)
    namespace = {module.split(".")[0]: importlib.import_module(module.split(".")[0])
                 for module in printer.module_imports}
    source = f"def f({', '.join(names)}):\n    return {body}\n"
    exec(compile(source, "<napkin numpy_function>", "exec"), namespace)  # noqa: S102 - printer output
    return namespace["f"]
