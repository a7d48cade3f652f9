"""Launches for Nsight Compute: RMSNorm-matmul's fused kernel and napkin's plain matmul at the same shape
(16384 x 4096 -> 4096, fp16), each at the module's own configuration, each launched twice, so that the
prologue's cost (23 % over the matmul on an H200: bench/results/rmsnorm_smem_h200.md) can be read off
the tensor pipe's activity and the warps' stall reasons. Run under ncu (bench/results/rmsnorm_ncu_h200.txt
has the command and what it printed):

    ncu --kernel-name regex:"_rmsnorm_matmul_rmsnorm_mm|_matmul_gemm" --launch-count 4 --metrics ... \
        python bench/rmsnorm_ncu.py [--gpu h200]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--gpu", default="h200", help="the profile napkin generates the kernels for")
    args = ap.parse_args(argv)
    import torch

    from analyzer.codegen import generate
    from bench.common import import_file
    from bench.hopper_contraction import RMSNORM, inputs

    tmp = Path(tempfile.mkdtemp())
    x, gain, w = inputs(torch, "rmsnorm_matmul", RMSNORM, torch.float16)
    calls = []
    for diagram in ("rmsnorm_matmul", "matmul"):
        g = generate(diagram, args.gpu, dtype="fp16")
        (path,) = g.write(tmp / f"{diagram}.py")
        module = import_file(path, diagram)
        fn = getattr(module, diagram)
        calls.append((lambda fn=fn: fn(x, gain, w)) if diagram == "rmsnorm_matmul" else (lambda fn=fn: fn(x, w)))
    for call in calls:
        for _ in range(2):
            call()
    torch.cuda.synchronize()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
