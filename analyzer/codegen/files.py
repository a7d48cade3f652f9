"""The files `napkin kernel` writes for each backend, named from `-o`, and written together or not at all.

hopper, hopper-contraction and triton: one Python module, FILE.py. cuda: FILE.cu and its Python loader FILE.py beside it; the loader
finds its source as its own name with .cu, so `-o` must name the .cu file (a name without that suffix
would leave a loader that cannot find what it compiles).
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

from analyzer.common.atomic import check_target, named_file, write_files
from analyzer.common.errors import NapkinError

# What -o names, per kernel family (analyzer.config.family; tests/unit/test_families.py holds the names
# to the registry's). Written out here, not read off the families: napkin kernel checks -o before it
# loads the model, and a cached answer is written without it.
OPTION = "--output"
SUFFIX = {"triton": ".py", "hopper": ".py", "hopper-contraction": ".py", "cuda": ".cu"}          # the portable module first: a hint's choice
WHAT = {"triton": "one Python module", "hopper": "one Python module", "hopper-contraction": "one Python module",
        "cuda": "a .cu file and its .py loader beside it"}


def kernel_paths(output: str | Path, backend: str) -> list[Path]:
    """The files a kernel of `backend` written to `output` consists of (the named one first)."""
    path = named_file(output, OPTION)
    suffix = SUFFIX.get(backend)
    if suffix is None:
        raise NapkinError(f"{backend!r}: expected {' or '.join(SUFFIX)}", field="--backend")
    if path.suffix != suffix:
        other = next((b for b, s in SUFFIX.items() if s == path.suffix), None)
        hint = f"name it {path.with_suffix(suffix).name}"
        if other:
            hint += f", or pass --backend {other}"
        raise NapkinError(f"{str(output)!r}: the {backend} backend writes {WHAT[backend]}, so the name "
                          f"must end with {suffix}", field=OPTION, hint=hint)
    return [path] if suffix == ".py" else [path, path.with_suffix(".py")]      # a source and its loader


def check_kernel_target(output: str | Path, backend: str) -> list[Path]:
    """kernel_paths, each checked as a file napkin can write (before the kernel is generated)."""
    paths = kernel_paths(output, backend)
    for path in paths:
        check_target(path, OPTION)
    return paths


def write_kernel(output: str | Path, backend: str, source: str, extra: dict[str, str]) -> list[Path]:
    """The source at `output` and each companion (by suffix) beside it, all written or none."""
    paths = kernel_paths(output, backend)
    files: dict[Path, str] = {paths[0]: source}
    for suffix, text in extra.items():
        files[paths[0].with_suffix(suffix)] = text
    return write_files(files, OPTION)


def import_file(path: str | Path, name: str) -> ModuleType:
    """A written module (a generated kernel's, or its CUDA loader) imported as `name` and registered under
    it: Triton's JIT reads a kernel's source through its module."""
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot import {path}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module

