"""A package's names imported on first use (PEP 562), so that a light module of the package can be used
without the heavy ones its package exports: `napkin analyze` and `napkin kernel` repeated from the
result cache import neither sympy nor networkx."""

from __future__ import annotations

import importlib
from collections.abc import Callable


def lazy_exports(package: str, home: dict[str, str], namespace: dict) -> Callable[[str], object]:
    """The package's `__getattr__`: name -> the module of `package` that defines it (`home`), imported
    when the name is first asked for and then kept in the package's `namespace`."""
    def __getattr__(name: str) -> object:
        if name not in home:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(f"{package}.{home[name]}"), name)
        namespace[name] = value
        return value
    return __getattr__
