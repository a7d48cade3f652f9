"""Compile a generated Hopper contraction module's kernels for sm_90a without a GPU: Triton's compiler
with a Hopper target and the signature its launchers pass (TMA descriptors of the configuration's boxes).

It runs in a process of its own, as tests.kernels.hopper_build does (Gluon cannot compile under the
interpreter the portable kernels' tests run in).

    python -m tests.kernels.contraction_build - JOBS.json   # each job: module, kernel, entry, dtype
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from analyzer.codegen.hopper.chain import HELPERS as CHAIN_HELPERS
from analyzer.codegen.hopper.contraction import HELPERS
from tests.kernels.hopper_build import (
    INSTRUCTIONS,
    in_process_of_its_own,
    loaded,
    ptxas_log,
)


def compiled_each(jobs: list[dict]) -> list[dict]:
    """Each job ({"module", "kernel": its plan's name, "entry": a CONFIGS entry, "dtype"}) compiled in one
    fresh interpreter: the SMEM the kernel allocates, which of INSTRUCTIONS its PTX has, whether it uses
    local memory, the bytes ptxas spills and whether it serialised the wgmma."""
    return in_process_of_its_own("tests.kernels.contraction_build", Path("-"), jobs, timeout=900)


def contraction_source(module, kernel: str, entry: dict, dtype: str):
    """The Gluon source, target and options of `module`'s kernel `kernel` launched with `entry`."""
    from triton.experimental.gluon._runtime import GluonJITFunction

    launcher = next(v for k, v in vars(module).items() if k.startswith("_launch_") and f"'{kernel}'" in (v.__doc__ or ""))
    fn = next(v for k, v in vars(module).items() if isinstance(v, GluonJITFunction) and k not in HELPERS
              and k not in CHAIN_HELPERS and k in launcher.__code__.co_names)
    if "_chain_plan" in launcher.__code__.co_names:
        return chain_source(module, launcher, fn, entry, dtype)
    groups = entry["WARPGROUPS"]
    rows, bn, bk = entry["BLOCK_M"] // groups, entry["BLOCK_N"], entry["BLOCK_K"]
    a_t, b_t, b2, pro, kv = module_flags(launcher)

    def desc(block):
        return _descriptor(block, dtype)

    box_b = [bn, bk] if b_t else [bk, bn]
    constexprs = {"BLOCK_M": entry["BLOCK_M"], "BLOCK_N": bn, "BLOCK_K": bk, "STAGES": entry["STAGES"],
                  "GROUPS": groups, "BAND": 8, "A_T": a_t, "B_T": b_t, "B2": b2, "PRO": pro, "KV": kv,
                  "CONSUMER_REGS": module.CONSUMER_REGISTERS[groups]}
    if not b2:
        constexprs["b2_desc"] = None
    if not kv:
        constexprs["v_desc"] = None
    signature = {"a_desc": desc([bk, rows] if a_t else [rows, bk]), "b_desc": desc(box_b), "b2_desc": desc(box_b),
                 "v_desc": desc([bk]),
                 "c_desc": desc([rows, bn]), "size_m": "i32", "size_n": "i32", "size_k": "i32"}
    return _source(module, fn, signature, constexprs, dtype, groups)


def chain_source(module, launcher, fn, entry: dict, dtype: str):
    """The Gluon source, target and options of a chain kernel (analyzer.codegen.hopper.chain) launched with
    `entry`, its whole axes at the widths its launcher was made for."""
    import inspect
    import re

    src = inspect.getsource(launcher)
    b1_t, b2_t, wk, wn = re.search(r"cfg,\s*(True|False), (True|False), \((\d+), (\d+)\)\)", src).groups()
    b1_t, b2_t, wk, wn = b1_t == "True", b2_t == "True", int(wk), int(wn)
    groups, bf = entry["WARPGROUPS"], entry["BLOCK_F"]

    def desc(block):
        return _descriptor(block, dtype)

    fv = src.split("a, b1, b2, v, c = ")[1].split("\n")[0].split(", ")[3] != "None"     # a vector rides the ring
    constexprs = {"ROWS": 64, "BLOCK_F": bf, "STAGES": entry["STAGES"], "GROUPS": groups, "B1_T": b1_t,
                  "B2_T": b2_t, "FV": fv, "CONSUMER_REGS": module.CONSUMER_REGISTERS[groups]}
    if not fv:
        constexprs["v_desc"] = None
    signature = {"a_desc": desc([64, wk]), "b1_desc": desc([bf, wk] if b1_t else [wk, bf]),
                 "b2_desc": desc([wn, bf] if b2_t else [bf, wn]), "v_desc": desc([bf]), "c_desc": desc([64, wn]),
                 "size_m": "i32", "size_f": "i32"}
    return _source(module, fn, signature, constexprs, dtype, groups)


def _descriptor(block: list[int], dtype: str) -> str:
    """The signature type of a TMA descriptor of `block` boxes of `dtype`, in its default SMEM layout."""
    from triton.experimental.gluon import language as gl

    element = {"fp16": gl.float16, "bf16": gl.bfloat16}[dtype]
    layout = gl.NVMMASharedLayout.get_default_for(block, element)
    return f"tensordesc<{dtype}[{', '.join(map(str, block))}],{layout!r}>"


def _source(module, fn, signature: dict, constexprs: dict, dtype: str, groups: int):
    """Kernel `fn`'s source with `signature` (its other scalars filled in: pointers, scales, sizes) and
    `constexprs`, its target (sm_90a) and options (the module's register cap for `groups` consumers)."""
    from triton.backends.compiler import GPUTarget
    from triton.experimental.gluon._runtime import GluonASTSource

    for name in fn.arg_names:
        if name not in signature and name not in constexprs:
            signature[name] = f"*{dtype}" if "ptr" in name else "fp32" if "scale" in name else "i32"
    signature.update(dict.fromkeys(constexprs, "constexpr"))
    signature = {name: signature[name] for name in fn.arg_names}
    return (GluonASTSource(fn, signature=signature, constexprs=constexprs), GPUTarget("cuda", 90, 32),
            {"num_warps": 4, "maxnreg": module.REGISTER_CAP[groups]})


def module_flags(launcher) -> tuple[bool, bool, bool, bool, bool]:
    """(A_T, B_T, B2, PRO, KV) as `launcher` passes them: read off its source (the operands it takes, the
    flags of its _plan call)."""
    import inspect
    import re
    src = inspect.getsource(launcher)
    operands = src.split("a, b, b2, v, c = ")[1].split("\n")[0].split(", ")
    a_t, b_t, pro = re.search(r"size, cfg, (True|False),\s*(True|False), (True|False)\)", src).groups()
    return a_t == "True", b_t == "True", operands[2] != "None", pro == "True", operands[3] != "None"


def _compile(module, kernel: str, entry: dict, dtype: str) -> dict:
    import triton

    src, target, options = contraction_source(module, kernel, entry, dtype)
    import re
    compiled = triton.compile(src, target=target, options=options)
    ptx = compiled.asm["ptx"]
    log = ptxas_log(ptx, f"--maxrregcount={module.REGISTER_CAP[entry['WARPGROUPS']]}")
    return {"shared": compiled.metadata.shared, "instructions": [i for i in INSTRUCTIONS if i in ptx],
            "local": "ld.local" in ptx or "st.local" in ptx,
            "spills": sum(int(n) for n in re.findall(r"(\d+) bytes spill (?:stores|loads)", log)),
            # ptxas's notes that it serialised the wgmma, whatever the cause: C7515 (a loop's edges), C7514
            # (a non-wgmma instruction touching an accumulator within its pipeline stage), C7512 (too few
            # registers)
            "serialised": "wgmma.mma_async instructions are serialized" in log}


if __name__ == "__main__":
    jobs = json.loads(sys.argv[2])
    print(json.dumps([_compile(loaded(j["module"]), j["kernel"], j["entry"], j["dtype"]) for j in jobs]))
