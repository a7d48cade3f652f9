"""A sweep's configurations compiled ahead, in worker processes, before one process times them.

Triton compiles a configuration on its first launch, a few seconds each for the Hopper kernels, and
keeps the binary in its cache on disk. A sweep launches a few hundred configurations, each at two or
three specialisations (Triton specialises an integer argument on being 1 and on dividing by 16), so
compiling them one after another would take most of a sweep's time. Compiling them in worker processes
first, each launching its configurations once, leaves the timing process to load every binary from the
cache. A configuration that fails in a worker is left alone: the timing process meets it again and
records why.

    the calls: (input shapes, keywords, configuration) per launch the sweep will make
    -> one per configuration and specialisation (the shapes' integers: 1, a multiple of 16, or neither)
    -> grouped by configuration, one job each, run by `workers` processes (spawned: each its own context)
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable
from concurrent.futures import ProcessPoolExecutor, as_completed
from pathlib import Path
from typing import Any

from analyzer.codegen.files import import_file
from analyzer.common.progress import Progress, silent

Call = tuple[list[tuple[int, ...]], dict[str, Any], dict[str, Any]]    # input shapes, keywords, configuration


def specialisation(shapes: list[tuple[int, ...]], kwargs: dict[str, Any]) -> tuple:
    """What Triton tells apart in the integers a launch derives from its inputs: 1, a multiple of 16,
    or neither (a conservative key: two calls alike in it compile alike)."""
    numbers = [n for s in shapes for n in s] + [v for v in kwargs.values()
                                                if isinstance(v, int) and not isinstance(v, bool)]   # a flag: constexpr
    return tuple(1 if n == 1 else 16 if n % 16 == 0 else 0 for n in numbers)


def jobs(calls: Iterable[Call]) -> dict[str, list[Call]]:
    """Per configuration (its JSON): one call per specialisation, the first met."""
    out: dict[str, dict[tuple, Call]] = {}
    for shapes, kwargs, config in calls:
        key = json.dumps(config, sort_keys=True)
        out.setdefault(key, {}).setdefault(specialisation(shapes, kwargs), (shapes, kwargs, config))
    return {key: list(by.values()) for key, by in out.items()}


def compile_ahead(module: Path, entry: str, element: str, calls: Iterable[Call], workers: int,
                  device: str = "cuda", progress: Progress = silent) -> int:
    """Launch each configuration of `calls` once per specialisation in `workers` processes, so that the
    compiler's cache holds them all; the configurations launched. `module`: the generated module's file,
    `entry` its wrapper's name, `element` the inputs' torch dtype (its name), `device` where they live."""
    todo = jobs(calls)
    if workers <= 1 or len(todo) <= 1:
        return 0
    import multiprocessing
    context = multiprocessing.get_context("spawn")    # a forked CUDA context is unusable
    with ProcessPoolExecutor(max_workers=min(workers, len(todo)), mp_context=context) as pool:
        futures = [pool.submit(warm, str(module), entry, element, device, group) for group in todo.values()]
        for done, _ in enumerate(as_completed(futures), 1):
            progress("sweep: compile", done, len(futures))
    return len(todo)


def warm(module: str, entry: str, element: str, device: str, calls: list[Call]) -> bool:
    """In a worker: launch `calls` of the module's wrapper on inputs of their shapes; False where one
    failed (its error is the timing process's to record)."""
    import torch
    fn: Callable[..., Any] = getattr(import_file(module, Path(module).stem), entry)
    ok = True
    for shapes, kwargs, config in calls:
        try:
            xs = [torch.randn(*s, device=device, dtype=getattr(torch, element)) for s in shapes]
            fn(*xs, **kwargs, config=config)
            if device == "cuda":
                torch.cuda.synchronize()
        except Exception:  # noqa: BLE001 - a configuration that fails is recorded by the timing process
            ok = False
    return ok


def default_workers() -> int:
    """Compilation is single-threaded: a worker per core but one (the timing process's), at most 16."""
    import os
    return max(1, min(16, (os.cpu_count() or 2) - 1))


__all__ = ["Call", "compile_ahead", "default_workers", "jobs", "specialisation", "warm"]
