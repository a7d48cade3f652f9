"""What bench/exp2_fma.py and bench/lazy_rescale.py share: variants of a generated attention module (its
text with one constant rendered otherwise, each a file of its own), the configuration the module chooses
at FlashAttention-3's grid, their compilation ahead in worker processes, and the timed call."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from bench.common import Compile, import_file, precompile

TOKENS, MODEL_DIM = 16384, 2048     # FlashAttention-3's grid: batch x sequence, heads x head dim


def written(sources: dict[str, str], keys: Iterable[Any], render: Callable[[str, str, Any], str], tmp: Path,
            prefix: str) -> dict[tuple[str, Any], tuple[Path, str]]:
    """Per (dtype, key): the file and module name of `render(source, dtype, key)`, written into `tmp`."""
    tmp.mkdir(parents=True, exist_ok=True)
    paths = {}
    for dtype, source in sources.items():
        for key in keys:
            name = f"{prefix}_{dtype}_{int(key)}"
            paths[dtype, key] = (tmp / f"{name}.py", name)
            paths[dtype, key][0].write_text(render(source, dtype, key))
    return paths


def chosen(module: Any, d: int, seq: int) -> dict[str, Any]:
    """The configuration `module` launches at head dim `d` and length `seq` on the grid, and its kernel."""
    kernel = next(iter(module.CONFIGS))
    return module._sized(module.CONFIGS[kernel][d], {"x": seq, "q": seq, "batch": TOKENS // seq,
                                                     "heads": MODEL_DIM // d})


def compile_ahead(paths: dict[tuple[str, Any], tuple[Path, str]], configs: dict[tuple[str, int, int], dict],
                  kernel: str, workers: int) -> None:
    """Every variant at every (dtype, head dim, length)'s configuration, compiled in worker processes (the
    shape's batch and heads: Triton specialises on them)."""
    jobs = [Compile(str(path), name, kernel, configs[dtype, d, seq], "attention", head_dim=d,
                    shape=(TOKENS // seq, MODEL_DIM // d, MODEL_DIM // d, 512, 512))
            for (dtype, d, seq) in configs for (kind, _), (path, name) in paths.items() if kind == dtype]
    precompile(jobs, workers)


def call(module: Any, kernel: str, cfg: dict, x: list, out: Any) -> Callable[[], Any]:
    """The timed call: FP8 on e4m3 inputs quantised before (their scales as descale), else the 16-bit x."""
    if module.FP8:
        inputs, scales = module.quantize(*x)
        return lambda: module.attention(*inputs, descale=scales, out=out, config={kernel: cfg})
    return lambda: module.attention(*x, out=out, config={kernel: cfg})


def loaded(paths: dict[tuple[str, Any], tuple[Path, str]], dtype: str, key: Any) -> Any:
    return import_file(*paths[dtype, key])
