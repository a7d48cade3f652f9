"""A probe of the pipelined prefetch schedule's causal penalty (docs/section6.md): the persistent and
prefetch schedules at head dim 64 on tiles of one chunk (128 tokens, s_x = 128: every tile one chunk,
causal or not) and at 512 tokens, with two and three stages of 128-key chunks and two of 64-key chunks,
each by CUDA graph replays (triton.testing.do_bench_cudagraph, rep=20, the faster of two), 4 x 16384
tokens of 32 heads. It asks whether tiles of one chunk, or a ring too shallow for the next tile's first
chunks, are what slows prefetch under a causal mask at 128-key chunks: neither, on an H200 (the tiles of
one chunk ran 1.21x faster with prefetch; a third stage changed nothing).

    python bench/prefetch_probe.py        # one H200, about a minute; writes time.txt to $OUT
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

CONFIGS = ((2, 128, 2, "intra"), (2, 128, 3, "intra"), (2, 64, 2, "intra"))   # N, s_x, stages, overlap
HEAD_DIM, HEADS, TOKENS = 64, 32, 4 * 16384


def main() -> int:
    import torch
    import triton

    from analyzer.codegen import generate
    from bench.common import written_module
    out = Path(os.environ.get("OUT", "/tmp/out"))
    modules = {n: written_module(generate(n, "h200", dtype="fp16"), out / "mods", n)
               for n in ("causal_attention", "mha")}
    with open(out / "time.txt", "w") as log:
        def say(line: str) -> None:
            print(line, flush=True)
            print(line, file=log, flush=True)

        say(torch.cuda.get_device_name())
        for causal in (True, False):
            for length in (128, 512):
                batch = TOKENS // length
                module = modules["causal_attention" if causal else "mha"]
                q, k, v = (torch.randn(batch, HEADS, length, HEAD_DIM, device="cuda", dtype=torch.float16)
                           for _ in range(3))
                times = {}
                for n, chunk, stages, overlap in CONFIGS:
                    for schedule in ("persistent", "prefetch"):
                        config = dict(WARPGROUPS=n, BLOCK_X=chunk, STAGES=stages, OVERLAP=overlap, SCHEDULE=schedule)

                        def call(config=config):
                            return module.attention(q, k, v, causal=causal, config=config)
                        call()
                        times[f"{chunk}/{stages}/{schedule[:4]}"] = min(
                            triton.testing.do_bench_cudagraph(call, rep=20) for _ in range(2))
                say(f"d={HEAD_DIM} L={length} causal={causal} b={batch}: "
                    + ", ".join(f"{name} {ms * 1e3:.0f}us" for name, ms in times.items()))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
