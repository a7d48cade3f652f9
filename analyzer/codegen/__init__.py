"""Kernel generation (`napkin kernel`): a diagram's configured kernels as Triton or CUDA source.

    configured kernels (analyzer.config.kernels) -> a backend renders each plan (triton, cuda)
    -> the file's header, configurations and wrapper (module) -> Generated, written by files

The names below are imported on first use (PEP 562), so that `analyzer.codegen.files` (what a cached
napkin kernel writes with) can be used without importing the model.
"""

from __future__ import annotations

from analyzer.common.lazy import lazy_exports

_HOME = {"Generated": "generator", "generate": "generator"}

__all__ = sorted(_HOME)


__getattr__ = lazy_exports(__name__, _HOME, globals())
