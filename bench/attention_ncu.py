"""Launches of the Hopper attention kernel for Nsight Compute: FP8 (e4m3 inputs) at head dims 64, 128
and 256 and fp16 at 128, FlashAttention-3's grid at 16k tokens (2048 model dims, not causal), each in
the configuration the module chooses, each launched twice. Run under ncu (bench/results/attention_ncu_h200.txt
has the commands and what they printed on an H200):

    ncu --kernel-name regex:_attention_flash --section SpeedOfLight --section ComputeWorkloadAnalysis \\
        --section SchedulerStats --section WarpStateStats --section InstructionStats \\
        python bench/attention_ncu.py --gpu h200
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

LAUNCHES = (("fp8", 64), ("fp8", 128), ("fp8", 256), ("fp16", 128))
SEQ = 16384


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--gpu", default="h100")
    args = ap.parse_args(argv)
    import torch

    from analyzer.codegen import generate
    from bench.common import written_module
    from bench.module_variants import MODEL_DIM, TOKENS, call, chosen

    tmp = Path(tempfile.mkdtemp())
    modules = {dtype: written_module(generate("attention", args.gpu, dtype=dtype), tmp, f"ncu_{dtype}")
               for dtype in dict.fromkeys(d for d, _ in LAUNCHES)}
    for dtype, d in LAUNCHES:
        module = modules[dtype]
        cfg = chosen(module, d, SEQ)
        x = [torch.randn(TOKENS // SEQ, MODEL_DIM // d, SEQ, d, device="cuda", dtype=torch.float16) for _ in range(3)]
        run = call(module, next(iter(module.CONFIGS)), cfg, x, torch.empty_like(x[0]))
        for _ in range(2):
            run()
        print(dtype, d, cfg)
    torch.cuda.synchronize()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
