"""Compile a generated Hopper module's kernel for sm_90a without a GPU: Triton's compiler with a Hopper
target and the signature the launcher passes (TMA descriptors of the configuration's boxes).

It runs in a process of its own (`compiled`): the kernel tests run the portable kernels under
TRITON_INTERPRET=1, and Gluon loaded under the interpreter cannot compile.

    python -m tests.kernels.hopper_build MODULE.py JOBS.json   # prints a JSON list, one result a job
    python -m tests.kernels.hopper_build - JOBS.json           # each job names its "module"
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

from analyzer.codegen.hopper.kernel import HELPERS

ROOT = Path(__file__).resolve().parents[2]
SCALARS = {"size_q": "i32", "size_x": "i32", "batch_heads": "i32", "heads": "i32", "kv_group": "i32",
           "qk_scale": "fp32", "score_scale": "fp32", "slope_stride_b": "i32", "slope_stride_h": "i32",
           "slope_scale": "fp32", "bias_b_rows": "i32", "bias_h_rows": "i32", "sink_stride_b": "i32",
           "sink_stride_h": "i32", "lse_stride_b": "i32", "lse_stride_h": "i32", "lse_shift": "fp32"}
LSE = False       # compiled as a call without return_lse: the resources of the launch napkin times
INSTRUCTIONS = ("wgmma.mma_async", "setmaxnreg", "cp.async.bulk.tensor", "mbarrier.try_wait")


def compiled(path: Path, jobs: list[dict]) -> list[dict]:
    """Compile module `path`'s kernel once per job ({"entry": a CONFIGS entry, "head_dim", "dtype"}) in a
    fresh interpreter; each result: the SMEM the kernel allocates, which of INSTRUCTIONS its PTX has,
    whether the PTX uses local memory, and the bytes ptxas spills."""
    return in_process_of_its_own("tests.kernels.hopper_build", path, jobs, timeout=900)


def compiled_each(jobs: list[dict]) -> list[dict]:
    """`compiled` of jobs that each name their "module", in one fresh interpreter: one start-up of
    Python, torch and Triton (about 5 s) for every module's jobs, not one a module."""
    return in_process_of_its_own("tests.kernels.hopper_build", Path("-"), jobs, timeout=900)


def in_process_of_its_own(builder: str, path: Path, jobs: list[dict], *, timeout: int) -> list[dict]:
    """`python -m BUILDER MODULE.py JOBS.json` without TRITON_INTERPRET: its JSON list of results."""
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    out = subprocess.run([sys.executable, "-m", builder, str(path), json.dumps(jobs)],
                         cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout, check=False)
    if out.returncode:
        named = [Path(j["module"]).name for j in jobs if "module" in j]
        what = ", ".join(dict.fromkeys(named)) if named else path.name
        raise AssertionError(f"compiling {what} failed:\n{out.stderr[-4000:]}")
    return json.loads(out.stdout)


def _load(path: Path):
    spec = importlib.util.spec_from_file_location(path.stem, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[path.stem] = module
    spec.loader.exec_module(module)
    return module


def _compile(module, entry: dict, head_dim: int, dtype: str) -> dict:
    import triton

    src, target, options = hopper_source(module, entry, head_dim, dtype)
    groups = entry["WARPGROUPS"]
    kernel = triton.compile(src, target=target, options=options)
    ptx = kernel.asm["ptx"]
    log = ptxas_log(ptx, f"--maxrregcount={module.REGISTER_CAP[groups]}")
    return {"shared": kernel.metadata.shared, "instructions": [i for i in INSTRUCTIONS if i in ptx],
            "local": "ld.local" in ptx or "st.local" in ptx, "spills": _spills(log),
            "serialised": "wgmma.mma_async instructions are serialized" in log}


def hopper_source(module, entry: dict, head_dim: int, dtype: str):
    """The Gluon source, target and options of module's kernel launched with CONFIGS entry `entry`."""
    from triton.backends.compiler import GPUTarget
    from triton.experimental.gluon import language as gl
    from triton.experimental.gluon._runtime import GluonASTSource, GluonJITFunction

    (fn,) = [v for k, v in vars(module).items() if isinstance(v, GluonJITFunction) and k not in HELPERS]
    element = {"fp16": gl.float16, "bf16": gl.bfloat16, "fp8": gl.float8e4nv}[dtype]
    fp8 = getattr(module, "FP8", False)        # e4m3 inputs, V's transpose streamed, the output in fp16
    groups = entry["WARPGROUPS"]
    descs = {}
    value_dim = module.VALUE_DIM or head_dim
    lo = 1 << (head_dim.bit_length() - 1)       # the head dim's column blocks, as the launcher splits it
    hi = head_dim - lo
    for name, block in (("q", [1, 1, module.ROWS, lo]), ("k", [1, 1, entry["BLOCK_X"], lo]),
                        ("v", [1, 1, value_dim, entry["BLOCK_X"]] if fp8 else [1, 1, entry["BLOCK_X"], value_dim]),
                        ("o", [1, 1, module.ROWS, value_dim]),
                        ("qh", [1, 1, module.ROWS, hi or lo]), ("kh", [1, 1, entry["BLOCK_X"], hi or lo]),
                        ("b", [module.ROWS, entry["BLOCK_X"]] if module.BIAS else [1, 1, entry["BLOCK_X"], lo])):
        kind, ty = ("fp16", gl.float16) if name == "o" and fp8 else (dtype, element)
        kind = {"fp8": "fp8e4nv"}.get(kind, kind)
        layout = gl.NVMMASharedLayout.get_default_for(block, ty)
        descs[name] = f"tensordesc<{kind}[{', '.join(map(str, block))}],{layout!r}>"
    # the descriptors the launcher passes as None (a head dim of one column block; no bias) are constexprs
    unused = ({"qh_desc": None, "kh_desc": None} if not hi else {}) | ({} if module.BIAS else {"b_desc": None})
    constexprs = {**unused, "ROWS": module.ROWS, "BLOCK_X": entry["BLOCK_X"], "STAGES": entry["STAGES"], "GROUPS": groups,
                  "RIGHT": module.RIGHT, "LEFT": module.LEFT, "BIAS": module.BIAS,
                  "ALIBI": module._alibi_mode(head_dim, groups, entry["BLOCK_X"]),     # the launcher's
                  "SINK": module.SINK, "INTRA": "intra" in entry["OVERLAP"], "INTER": "inter" in entry["OVERLAP"],
                  "SOFTMAX": module.SOFTMAX, "SPLIT": hi > 0, "CONSUMER_REGS": module.CONSUMER_REGISTERS[groups],
                  "BALANCE": module._balance(entry["SCHEDULE"]),       # the launcher's
                  "PREFETCH": entry["SCHEDULE"] == "prefetch",
                  "LSE": LSE,      # the rows' log-sum-exp written (return_lse=True)
                  "FP8": fp8, "QUANT": module.ROWS, "KEY_BLOCK": getattr(module, "KEY_BLOCK", 128),
                  "LINEAR": getattr(module, "LINEAR", True), "EXP2": getattr(module, "EXP2_PTX", ""),
                  "LAZY": getattr(module, "LAZY_RESCALE", False) and entry["BLOCK_X"] >= value_dim}
    signature = {"q_desc": descs["q"], "k_desc": descs["k"], "v_desc": descs["v"], "o_desc": descs["o"],
                 "qh_desc": descs["qh"], "kh_desc": descs["kh"], **SCALARS, "slope_ptr": f"*{'fp16' if fp8 else dtype}",
                 "b_desc": descs["b"], "sink_ptr": f"*{'fp16' if fp8 else dtype}", "lse_ptr": "*fp32",
                 "q_scale_ptr": "*fp32", "k_scale_ptr": "*fp32", "v_scale_ptr": "*fp32",
                 **dict.fromkeys(constexprs, "constexpr")}
    signature = {name: signature[name] for name in fn.arg_names}     # the kernel's order
    return (GluonASTSource(fn, signature=signature, constexprs=constexprs), GPUTarget("cuda", 90, 32),
            {"num_warps": 4, "maxnreg": module.REGISTER_CAP[groups]})


def _spills(log: str) -> int:
    """Bytes ptxas spills (stores and loads), as its log `log` of sm_90a under the kernel's register cap says."""
    import re
    return sum(int(n) for n in re.findall(r"(\d+) bytes spill (?:stores|loads)", log))


def ptxas_log(ptx: str, *flags: str) -> str:
    """What ptxas -v says assembling `ptx` for sm_90a: Triton's own assembler, run again (Triton reads
    the counts only from a loaded kernel, on a GPU, and keeps none of its notes)."""
    import tempfile

    from triton.backends.nvidia.compiler import get_ptxas
    with tempfile.TemporaryDirectory() as tmp:
        source = Path(tmp) / "kernel.ptx"
        source.write_text(ptx)
        out = subprocess.run([get_ptxas(90).path, "-v", "-arch=sm_90a", *flags, str(source),
                              "-o", str(Path(tmp) / "kernel.cubin")], capture_output=True, text=True, check=True)
    return out.stderr


_LOADED: dict = {}      # path -> its module, within one process


def loaded(path: str):
    """Module `path`, loaded once a process however many jobs it has."""
    if path not in _LOADED:
        _LOADED[path] = _load(Path(path))
    return _LOADED[path]


if __name__ == "__main__":
    jobs = json.loads(sys.argv[2])
    print(json.dumps([_compile(loaded(j.get("module", sys.argv[1])), j["entry"], j["head_dim"], j["dtype"])
                      for j in jobs]))
