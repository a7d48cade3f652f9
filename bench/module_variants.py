"""What bench/exp2_fma.py and bench/lazy_rescale.py share: variants of a generated attention module (its
text with one constant rendered otherwise, each a file of its own), the configuration the module chooses
at FlashAttention-3's grid, their compilation ahead in worker processes, and the timed call and row."""

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


def prepared(gpu: str, cases: Iterable[tuple[str, int]], lengths: Iterable[int], keys: Iterable[Any],
             render: Callable[[str, str, Any], str], prefix: str, workers: int) -> tuple[dict, str, dict]:
    """Attention's generated module for `gpu` in each dtype of `cases`, a variant of it per key (`render`),
    written under /tmp/<prefix>; the configuration the first key's module chooses at each (dtype, head
    dim, length), every variant compiled there ahead: (paths, the kernel's name, configurations)."""
    from analyzer.codegen import generate
    keys = list(keys)
    sources = {dtype: generate("attention", gpu, dtype=dtype).source for dtype in {d for d, _ in cases}}
    paths = written(sources, keys, render, Path(f"/tmp/{prefix}"), prefix)
    plain = {dtype: loaded(paths, dtype, keys[0]) for dtype in sources}
    kernel = next(iter(next(iter(plain.values())).CONFIGS))
    configs = {(dtype, d, seq): chosen(plain[dtype], d, seq) for dtype, d in cases for seq in lengths}
    compile_ahead(paths, configs, kernel, workers)
    return paths, kernel, configs


def grid_inputs(torch: Any, d: int, seq: int) -> list:
    """q, k and v at the grid's shape for head dim `d` and length `seq`: N(0, 1), fp16."""
    return [torch.randn(TOKENS // seq, MODEL_DIM // d, seq, d, device="cuda", dtype=torch.float16) for _ in range(3)]


def timed_row(triton: Any, module: Any, kernel: str, cfg: dict, x: list) -> dict[str, Any]:
    """`module` timed on the grid's inputs `x` in `cfg` (bench.common.timed), with its TFLOP/s (4 b h L^2 d)."""
    from bench.common import timed
    batch, heads, seq, d = x[0].shape
    t = timed(triton, call(module, kernel, cfg, x, x[0].new_empty(x[0].shape)))
    return {**t, "tflops": round(4 * batch * heads * seq * seq * d / t["time_s"] / 1e12, 1)}
