"""Compile a generated portable (Triton) matmul module's kernel for sm_90a without a GPU, with the
signature Triton's launcher specialises for contiguous fp16 tensors whose sizes are multiples of 16
(unit strides become the constant 1; pointers, sizes and the other strides are divisible by 16), and
report what ptxas says of it.

It runs in a process of its own (`compiled`, through hopper_build's runner): the kernel tests run under
TRITON_INTERPRET=1, which cannot compile.

    python -m tests.kernels.portable_build MODULE.py JOBS.json   # prints a JSON list, one result a job
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

from tests.kernels.hopper_build import _load, in_process_of_its_own, ptxas_log

UNIT = ("stride_A_b", "stride_B_c", "stride_C_c")      # the last axis of each array: contiguous
SERIALISED = "C7515"      # ptxas: "Potential Performance Loss: wgmma.mma_async instructions are serialized"


def compiled(path: Path, jobs: list[dict]) -> list[dict]:
    """Compile module `path`'s matmul kernel once per job ({"TILE_A", "TILE_C", "BLOCK_B", "num_warps",
    "num_stages"}) in a fresh interpreter; each result: the SMEM the kernel allocates, the wgmma wait
    counts of its PTX, and the codes of ptxas's notes assembling it
    (C7515: it serialised the wgmma)."""
    return in_process_of_its_own("tests.kernels.portable_build", path, jobs, timeout=600)


def _compile(module, job: dict) -> dict:
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    fn = module._matmul_gemm
    tiles = {"TILE_A": job["TILE_A"], "TILE_C": job["TILE_C"], "BAND_A": module._band(job["TILE_A"], job["TILE_C"]),
             "BLOCK_A": triton.next_power_of_2(job["TILE_A"]), "BLOCK_B": job["BLOCK_B"],
             "BLOCK_C": triton.next_power_of_2(job["TILE_C"])}
    constexprs = {**dict.fromkeys(UNIT, 1), **tiles}
    signature = {name: "constexpr" if name in constexprs else "*fp16" if name.endswith("_ptr") else "i32"
                 for name in fn.arg_names}
    aligned = {(fn.arg_names.index(n),): [["tt.divisibility", 16]] for n, t in signature.items() if t != "constexpr"}
    kernel = triton.compile(ASTSource(fn, signature=signature, constexprs=constexprs, attrs=aligned),
                            target=GPUTarget("cuda", 90, 32),
                            options={"num_warps": job["num_warps"], "num_stages": job["num_stages"]})
    ptx = kernel.asm["ptx"]
    log = ptxas_log(ptx)
    return {"shared": kernel.metadata.shared, "mma": ptx.count("wgmma.mma_async"),
            "waits": sorted({int(n) for n in re.findall(r"wgmma\.wait_group\.sync\.aligned\s+(\d+)", ptx)}),
            "notes": sorted(set(re.findall(r"\((C\d{4})\)", log)))}


if __name__ == "__main__":
    module = _load(Path(sys.argv[1]))
    print(json.dumps([_compile(module, j) for j in json.loads(sys.argv[2])]))
