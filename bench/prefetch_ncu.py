"""Launches of the Hopper attention kernel for Nsight Compute: why the prefetch schedule runs short causal
tiles of 128-key chunks slowly (issue 34; docs/section6.md, "The persistent blocks' balanced order").

On an H200 at head dim 64, 512 causal tokens (32 x 32 heads), prefetch at 128-key chunks ran 148-164
TFLOP/s, 0.63-0.72 of the model's prediction, where prefetch at 64-key chunks ran 210-215 and the
persistent schedule at 128-key chunks 171-184 (bench/results/hopper_sweep_h200_balanced.md). Compiled for
sm_90a (Triton 3.6), the prefetch kernel's loop over tiles is 9,500 SASS instructions at 128-key chunks
(about 150 KB), 6,500 at 64-key chunks and 5,100 for the persistent schedule, and a tile of 512 causal
tokens streams one to four chunks: the hypothesis to test is that each short tile's path through that
loop misses the instruction cache (warp stalls on no instruction), not the mask's arithmetic. Each
configuration below is launched twice, the unmasked prefetch one beside it as the control.

The same hypothesis may hold for three consumers at 128-key chunks under the causal mask (docs/section6.md,
"A pair of keys through one column"): with a column a key it ran 5 % faster at 8k-16k tokens than the
text now, though the consumers' loops are the same instructions in both. With --before DIR (a folder with
causal.py of that text) both are launched at 16k tokens of 32 heads, a block a tile, inter+intra.

    ncu --kernel-name "regex:_(causal_attention|mha)_flash" --launch-skip 0 --section WarpStateStats \\
        --section InstructionStats --section SchedulerStats --section SpeedOfLight \\
        python bench/prefetch_ncu.py --gpu h200 [--before DIR]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

D, SEQ, BATCH, HEADS = 64, 512, 32, 32           # FlashAttention-3's grid row: 16k tokens, 2048 model dims
LAUNCHES = (                                      # diagram, chunk, schedule (two consumer warpgroups, 2 stages)
    ("causal_attention", 128, "prefetch"),
    ("causal_attention", 64, "prefetch"),
    ("causal_attention", 128, "persistent"),
    ("mha", 128, "prefetch"),
)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--gpu", default="h200", help="the profile the modules are generated for")
    ap.add_argument("--before", type=Path, help="a folder with causal.py of an earlier text (three consumers)")
    args = ap.parse_args(argv)
    import torch

    from analyzer.codegen import generate
    from bench.common import written_module

    tmp = Path(tempfile.mkdtemp())
    modules = {name: written_module(generate(name, args.gpu, dtype="fp16"), tmp, f"ncu_{name}")
               for name in dict.fromkeys(n for n, _, _ in LAUNCHES)}
    q, k, v = (torch.randn(BATCH, HEADS, SEQ, D, device="cuda", dtype=torch.float16) for _ in range(3))
    for name, chunk, schedule in LAUNCHES:
        config = dict(WARPGROUPS=2, BLOCK_X=chunk, STAGES=2, OVERLAP="none", SCHEDULE=schedule)
        for _ in range(2):
            modules[name].attention(q, k, v, causal=name != "mha", config=config)
        print(name, config, flush=True)
    three = {"now": modules["causal_attention"]}
    if args.before:
        from analyzer.codegen.files import import_file
        three["before"] = import_file(args.before / "causal.py", "ncu_before")
    q, k, v = (torch.randn(1, HEADS, 16384, D, device="cuda", dtype=torch.float16) for _ in range(3))
    config = dict(WARPGROUPS=3, BLOCK_X=128, STAGES=2, OVERLAP="inter+intra", SCHEDULE="tiles")
    for text, module in three.items():
        for _ in range(2):
            module.attention(q, k, v, causal=True, config=config)
        print(text, "causal_attention 16k", config, flush=True)
    torch.cuda.synchronize()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
