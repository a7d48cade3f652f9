"""Launches of the Hopper attention kernel for Nsight Compute: why four consumer warpgroups run real models'
short shapes slowly (issue 34).

On an H200 at Stable Diffusion XL's cross-attention (batch 2, 10 heads, 4096 queries against 77 keys, head
dim 64), four consumers of 64-key chunks ran 21.0-23.0 us under every schedule while two consumers of
128-key chunks ran 15.1 us with the prefetch schedule (17.9 persistent, 23.6 a block a tile;
bench/results/hopper_sweep_h200_real.md): the prefetch schedule saved two consumers 1.7 us a tile and four
0.2 us, and the model, fitted on those records, still reads four consumers' calls there 22 % fast. Each
configuration below is launched twice at that shape, and the two fastest at BERT-large's (batch 8, 16 heads,
512 tokens) as the control where four consumers ran as fast as two.

    ncu --kernel-name "regex:_mha_flash" --section SpeedOfLight --section WarpStateStats \\
        --section LaunchStats --section Occupancy --section SchedulerStats \\
        python bench/short_ncu.py --gpu h200
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

SHAPES = {"SDXL": (2, 10, 4096, 77, 64), "BERT": (8, 16, 512, 512, 64)}   # batch, heads, queries, keys, d
LAUNCHES = (                                  # shape, consumer warpgroups, chunk, schedule (2 stages, intra)
    ("SDXL", 4, 64, "prefetch"),
    ("SDXL", 4, 64, "persistent"),
    ("SDXL", 2, 128, "prefetch"),
    ("SDXL", 2, 128, "persistent"),
    ("BERT", 4, 64, "prefetch"),
    ("BERT", 2, 128, "prefetch"),
)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--gpu", default="h200", help="the profile the module is generated for")
    args = ap.parse_args(argv)
    import torch

    from analyzer.codegen import generate
    from bench.common import written_module

    module = written_module(generate("mha", args.gpu, dtype="fp16"), Path(tempfile.mkdtemp()), "ncu_mha")
    inputs = {name: tuple(torch.randn(b, h, n, d, device="cuda", dtype=torch.float16)
                          for n in (sq, sk, sk)) for name, (b, h, sq, sk, d) in SHAPES.items()}
    for shape, groups, chunk, schedule in LAUNCHES:
        config = dict(WARPGROUPS=groups, BLOCK_X=chunk, STAGES=2, OVERLAP="intra", SCHEDULE=schedule)
        for _ in range(2):
            module.attention(*inputs[shape], config=config)
        print(shape, config, flush=True)
    torch.cuda.synchronize()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
