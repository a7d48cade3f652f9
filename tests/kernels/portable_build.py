"""Compile what a generated portable (Triton) module launches, for sm_90a, without a GPU, and report what
Triton allocates and ptxas says of it.

A job is a call of the module's wrapper: its inputs' shapes and element type (the tensors are CPU
tensors that are never read), its keyword arguments and its `config=`. The wrapper runs as it would on
the GPU, with each kernel's `[grid](...)` recorded instead of launched; every launch is then compiled
with the signature Triton's launcher specialises at those arguments (Triton's own binder: unit strides
become the constant 1, sizes and pointers divisible by 16 say so), for GPUTarget("cuda", 90, 32).

It runs in a process of its own (`compiled`, through hopper_build's runner): the kernel tests run under
TRITON_INTERPRET=1, which cannot compile. `allocated` takes jobs of many modules, portable or Hopper, in
one process, and stops each compile where Triton has placed its SMEM (LLVM IR: no PTX, no ptxas).

    python -m tests.kernels.portable_build MODULE.py JOBS.json     # prints a JSON list, one result a job
    python -m tests.kernels.portable_build - JOBS.json             # each job names its "module"
    python -m tests.kernels.portable_build --allocated JOBS.json   # `allocated`: each job names its "module"
"""

from __future__ import annotations

import json
import os
import re
import sys
from pathlib import Path

from tests.kernels.hopper_build import in_process_of_its_own, loaded, ptxas_log

SERIALISED = "C7515"      # ptxas: "Potential Performance Loss: wgmma.mma_async instructions are serialized"
MATMUL = 8192             # the legacy matmul job's sizes: multiples of 16, as the old signature assumed


def compiled(path: Path, jobs: list[dict]) -> list:
    """Compile what module `path` launches for each job in a fresh interpreter. A job is a call,
    {"inputs": [shape, ...], "dtype": "fp16", "kwargs": {...}, "config": {...} or None, "ptxas": bool};
    its result is a list, one entry per launch in order: the kernel's name, its num_warps and
    num_stages, the SMEM it allocates (`shared`) and the wgmma count and wait counts of its PTX, and
    with "ptxas", the codes of ptxas's notes (C7515: it serialised the wgmma), its registers and the
    bytes it spills. A matmul job {"TILE_A", "TILE_C", "BLOCK_B", "num_warps", "num_stages"} is that
    configuration of module's matmul at 8192 cubed, and its result that one launch's."""
    return in_process_of_its_own("tests.kernels.portable_build", path, jobs, timeout=600)


def compiled_each(jobs: list[dict]) -> list:
    """`compiled` of jobs that each name their "module", in one fresh interpreter: one start-up of
    Python, torch and Triton (about 5 s) for every module's jobs, not one a module."""
    return in_process_of_its_own("tests.kernels.portable_build", Path("-"), jobs, timeout=600)


def allocated(jobs: list[dict]) -> list[list[dict]]:
    """The SMEM each launch of each job allocates, compiled for sm_90a in one fresh interpreter: a job
    is a call job of `compiled` with the "module" it calls, or {"module", "hopper": {"entry",
    "head_dim", "dtype"}}, the Hopper module's launch of that CONFIGS entry (tests.kernels.hopper_build);
    each result a list, one {"kernel", "shared"} per launch. The same kernel at the same specialisation
    compiles once."""
    return in_process_of_its_own("tests.kernels.portable_build", Path("--allocated"), jobs, timeout=900)


def call(g, config: dict | None = None, *, ptxas: bool = False) -> dict:
    """The job that calls generated module `g`'s wrapper at its diagram's default sizes, as a bench or a
    user calls it: analyzer.measure.reference.inputs' shapes."""
    from analyzer.measure.reference import inputs
    shapes, kwargs = inputs(g)
    return {"inputs": shapes, "dtype": g.dtype, "kwargs": kwargs, "config": config, "ptxas": ptxas}


class _Recorder:
    """Stands for a @triton.jit kernel in the module: `kernel[grid](*args, **kwargs)` records the launch."""

    def __init__(self, fn, launches: list) -> None:
        self.fn, self.launches = fn, launches

    def __getitem__(self, grid):
        return lambda *args, **kwargs: self.launches.append((self.fn, args, kwargs))


def launches(module, job: dict) -> list:
    """(kernel, args, kwargs) of each launch the module's wrapper makes for `job`, in order."""
    import torch
    from triton.runtime.jit import JITFunction

    recorded: list = []
    for name, value in list(vars(module).items()):
        fn = value.fn if isinstance(value, _Recorder) else value
        if isinstance(fn, JITFunction):
            setattr(module, name, _Recorder(fn, recorded))
    dtype = {"fp16": torch.float16, "bf16": torch.bfloat16}[job["dtype"]]
    tensors = [torch.empty(shape, dtype=dtype) for shape in job["inputs"]]   # never read: no kernel runs
    config = job.get("config")
    wrapper = getattr(module, module.__all__[0])
    os.environ["TRITON_INTERPRET"] = "1"     # the wrapper's device check; the kernels are recorders
    try:
        wrapper(*tensors, **job.get("kwargs", {}), **({"config": config} if config else {}))
    finally:
        del os.environ["TRITON_INTERPRET"]
    return recorded


def _compile(fn, args: tuple, kwargs: dict, ptxas: bool) -> dict:
    import triton

    src, target, options = _specialised(fn, args, kwargs)
    kernel = triton.compile(src, target=target, options=options.__dict__)
    ptx = kernel.asm["ptx"]
    out = {"kernel": fn.__name__, "num_warps": options.num_warps, "num_stages": options.num_stages,
           "shared": kernel.metadata.shared, "mma": ptx.count("wgmma.mma_async"),
           "waits": sorted({int(n) for n in re.findall(r"wgmma\.wait_group\.sync\.aligned\s+(\d+)", ptx)})}
    if ptxas:
        log = ptxas_log(ptx)
        out["notes"] = sorted(set(re.findall(r"\((C\d{4})\)", log)))
        out["registers"] = max((int(n) for n in re.findall(r"Used (\d+) registers", log)), default=0)
        out["spills"] = sum(int(n) for n in re.findall(r"(\d+) bytes spill (?:stores|loads)", log))
    return out


def _shared(src, target, options: dict) -> int:
    """The SMEM Triton allocates compiling `src`: its pipeline run up to LLVM IR, where the allocation
    is decided (triton.compile's stages, without PTX and ptxas)."""
    from triton._C.libtriton import ir
    from triton.compiler import make_backend

    backend = make_backend(target)
    options = backend.parse_options(dict(options, **src.parse_options()))
    stages: dict = {}
    backend.add_stages(stages, options, src.language)
    context = ir.context()
    ir.load_dialects(context)
    backend.load_dialects(context)
    module = src.make_ir(target, options, backend.get_codegen_implementation(options), backend.get_module_map(),
                         context)
    metadata = {"hash": "allocation", "target": target, **options.__dict__}
    for ext, stage in stages.items():
        if ext == "ptx":
            break
        module = stage(module, metadata)
    return int(metadata["shared"])


def _specialised(fn, args: tuple, kwargs: dict):
    """The ASTSource and options Triton's launcher builds for `fn[grid](*args, **kwargs)` on sm_90a."""
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource, make_backend
    from triton.runtime.jit import create_function_from_signature

    target = GPUTarget("cuda", 90, 32)
    backend = make_backend(target)
    binder = create_function_from_signature(fn.signature, fn.params, backend)
    bound, specialization, options = binder(*args, **kwargs)
    options, signature, constexprs, attrs = fn._pack_args(backend, kwargs, bound, specialization, options)
    return ASTSource(fn, signature, constexprs, attrs), target, options


_SEEN: dict = {}       # (kernel source, specialisation, options) -> its SMEM, within one process


def _allocation(job: dict) -> list[dict]:
    module = loaded(job["module"])
    if "hopper" in job:
        from tests.kernels.hopper_build import hopper_source
        h = job["hopper"]
        src, target, options = hopper_source(module, h["entry"], h["head_dim"], h["dtype"])
        key = (src.fn.cache_key, repr(sorted(h["entry"].items())), h["head_dim"], h["dtype"])
        if key not in _SEEN:
            _SEEN[key] = _shared(src, target, options)
        return [{"kernel": src.fn.__name__, "shared": _SEEN[key]}]
    if "contraction" in job:        # the Hopper contraction module: each kernel's configuration
        from tests.kernels.contraction_build import contraction_source
        out = []
        for k in job["contraction"]:
            src, target, options = contraction_source(module, k["kernel"], k["entry"], k["dtype"])
            key = (src.fn.cache_key, k["kernel"], repr(sorted(k["entry"].items())), k["dtype"])
            if key not in _SEEN:
                _SEEN[key] = _shared(src, target, options)
            out.append({"kernel": src.fn.__name__, "shared": _SEEN[key]})
        return out
    out = []
    for fn, args, kwargs in launches(module, job):
        src, target, options = _specialised(fn, args, kwargs)
        key = (fn.cache_key, repr(src.signature), repr(sorted(src.constants.items(), key=str)),
               repr(sorted(options.__dict__.items(), key=str)))
        if key not in _SEEN:
            _SEEN[key] = _shared(src, target, options.__dict__)
        out.append({"kernel": fn.__name__, "shared": _SEEN[key]})
    return out


def _matmul(job: dict) -> dict:
    """The legacy matmul job as a call: that configuration of the gemm at MATMUL cubed."""
    config = {"gemm": {"TILE_A": job["TILE_A"], "TILE_C": job["TILE_C"], "BLOCK_B": job["BLOCK_B"],
                       "num_warps": job["num_warps"], "num_stages": job["num_stages"]}}
    return {"inputs": [[MATMUL, MATMUL]] * 2, "dtype": "fp16", "config": config, "ptxas": True}


def _run(module, job: dict):
    legacy = "TILE_A" in job
    call_job = _matmul(job) if legacy else job
    results = [_compile(fn, args, kwargs, call_job.get("ptxas", False))
               for fn, args, kwargs in launches(module, call_job)]
    return results[0] if legacy else results


if __name__ == "__main__":
    jobs = json.loads(sys.argv[2])
    if sys.argv[1] == "--allocated":
        print(json.dumps([_allocation(j) for j in jobs]))
    else:
        print(json.dumps([_run(loaded(j.get("module", sys.argv[1])), j) for j in jobs]))
