"""The schedules of the Hopper attention kernel at short sequences, where a tile's fixed costs decide (issue
34): a block a tile, persistent, and prefetch (persistent with two query buffers and the output's own),
checked with several tiles a block and timed beside cuDNN, in one run. It is the measurement a pipelined
tail (the next tile's first Q K^T and softmax under this tile's last P V) is to be held against.

1. Checks against float64, per tile of 64 query rows (a wrong tile is named, not averaged away): mha and
   causal_attention, fp16, head dim 128, 700 and 1024 keys, 2 x 48 heads (several tiles a block:
   2-chunk tiles, 1-chunk tiles and ragged ones follow one another), each schedule, configurations of one
   and two consumer warpgroups, with and without overlap.
2. Timing: the FlashAttention-3 grid's short rows (16k tokens, hidden 2048; 512 and 1024; head dims 64,
   128, 256; causal and not), the configuration the module launches by itself with each schedule forced,
   and SDPA's cuDNN backend, each by CUDA graph replays (triton.testing.do_bench_cudagraph, rep=20),
   the faster of two rounds in turn.

    python bench/tile_pipeline.py --gpu h200 [--out DIR] [--parts checks,timing]

Writes tile_pipeline_<gpu>.json and .md to --out after every row.
"""

from __future__ import annotations

import argparse
import datetime
import os
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.common import (  # noqa: E402
    command,
    launched_by,
    log,
    ratio,
    reference_attention,
    save_results,
    written_module,
)

SCHEDULES = ("tiles", "persistent", "prefetch")
CHECK_CONFIGS = ((1, 128, "none"), (2, 64, "intra"), (2, 128, "inter+intra"))
TILE_ROWS = 64          # the rows a check's error is taken over: one consumer's tile
TILE_TOLERANCE = 2e-2   # largest |out - ref| in a tile (fp16 output: values below 1, rounding 2^-11)
ROUNDS = 2


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--gpu", default="h100")
    ap.add_argument("--out", type=Path, default=Path(os.environ.get("OUT", str(ROOT / "bench" / "results"))))
    ap.add_argument("--parts", default="checks,timing")
    args = ap.parse_args(argv)
    import torch
    import triton

    from analyzer.codegen import generate
    if not torch.cuda.is_available():
        print("tile_pipeline.py: no CUDA device", file=sys.stderr)
        return 1
    tmp = Path(tempfile.mkdtemp())
    modules = {n: written_module(generate(n, args.gpu, dtype="fp16"), tmp, n) for n in ("mha", "causal_attention")}
    doc = {"meta": {"gpu": torch.cuda.get_device_name(), "command": command("tile_pipeline.py", argv),
                    "date": datetime.date.today().isoformat(), "torch": torch.__version__,
                    "triton": triton.__version__}, "checks": [], "timing": []}
    name = f"tile_pipeline_{args.gpu}"
    parts = args.parts.split(",")
    if "checks" in parts:
        for row in checks(torch, modules):
            doc["checks"].append(row)
            save_results(args.out, name, doc, markdown(doc))
        bad = [r for r in doc["checks"] if r["bad_tiles"]]
        log(f"checks: {len(doc['checks']) - len(bad)} of {len(doc['checks'])} with no tile beyond {TILE_TOLERANCE}")
        if bad:
            return 1
    if "timing" in parts:
        for row in timing(torch, triton, modules):
            doc["timing"].append(row)
            save_results(args.out, name, doc, markdown(doc))
    return 0


def checks(torch, modules):
    for diagram, causal in (("causal_attention", True), ("mha", False)):
        for d in (128,):
            for length in (700, 1024):
                gen = torch.Generator(device="cuda").manual_seed(length + d)
                q, k, v = (torch.randn(2, 48, length, d, device="cuda", generator=gen).half() for _ in range(3))
                ref = reference_attention(torch, q, k, v, causal, sigmoid=False)
                for warpgroups, chunk, overlap in CHECK_CONFIGS:
                    for schedule in SCHEDULES:
                        config = {"WARPGROUPS": warpgroups, "BLOCK_X": chunk, "STAGES": 2, "OVERLAP": overlap,
                                  "SCHEDULE": schedule}
                        out = modules[diagram].attention(q, k, v, causal=causal, config=config).double()
                        err = (out - ref).abs().amax(-1)
                        tiles = -(-length // TILE_ROWS)
                        padded = err.new_zeros(*err.shape[:2], tiles * TILE_ROWS)
                        padded[..., :length] = err
                        per_tile = padded.reshape(*err.shape[:2], tiles, TILE_ROWS).amax(-1)
                        bad = per_tile > TILE_TOLERANCE
                        row = {"diagram": diagram, "d": d, "length": length, "config": config,
                               "largest": float(err.max()), "tiles": per_tile.numel(), "bad_tiles": int(bad.sum()),
                               "bad_by_block": torch.bincount(bad.nonzero()[:, 2], minlength=tiles).tolist()
                               if bad.any() else []}
                        log(f"check {diagram} d={d} L={length} {config}: largest {row['largest']:.3g}, "
                            f"{row['bad_tiles']} bad tiles")
                        yield row


def timing(torch, triton, modules):
    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend, sdpa_kernel
    for d in (64, 128, 256):
        for length in (512, 1024):
            for causal in (True, False):
                batch, heads = 16384 // length, 2048 // d
                q, k, v = (torch.randn(batch, heads, length, d, device="cuda", dtype=torch.float16) for _ in range(3))
                module = modules["causal_attention" if causal else "mha"]
                own = launched_by(module, lambda m=module: m.attention(q, k, v, causal=causal))
                calls = {s: (lambda s=s, m=module: m.attention(q, k, v, causal=causal, config=dict(own, SCHEDULE=s)))
                         for s in SCHEDULES}

                def cudnn():
                    with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
                        return F.scaled_dot_product_attention(q, k, v, is_causal=causal)
                calls["cudnn"] = cudnn
                times = {n: [] for n in calls}
                for n, fn in list(calls.items()):
                    try:        # a schedule whose buffers the SMEM does not hold (prefetch at head dim 256)
                        fn()
                    except Exception as exc:  # noqa: BLE001 - reported as not run
                        log(f"  {n}: {type(exc).__name__}: {str(exc)[:120]}")
                        del calls[n], times[n]
                for _ in range(ROUNDS):
                    for n, fn in calls.items():
                        times[n].append(triton.testing.do_bench_cudagraph(fn, rep=20) * 1e-3)
                flops = 4 * batch * heads * length * length * d / (2 if causal else 1)
                row = {"d": d, "length": length, "causal": causal, "batch": batch, "heads": heads,
                       "config": own, **{f"{n}_s": min(t) for n, t in times.items()}}
                row.update({f"{n}_tflops": flops / row[f"{n}_s"] / 1e12 for n in calls})
                row.update({f"{n}_{unit}": None for n in SCHEDULES if n not in calls for unit in ("s", "tflops")})
                log(f"time d={d} L={length} causal={causal}: " +
                    ", ".join(f"{n} {row[f'{n}_tflops']:.0f}" for n in calls))
                yield row


def markdown(doc: dict) -> str:
    m = doc["meta"]
    lines = [f"# The Hopper kernel's schedules at short sequences ({m['gpu']})", "",
             f"`{m['command']}`; {m['date']}; torch {m['torch']}, triton {m['triton']}.", ""]
    if doc["checks"]:
        bad = [r for r in doc["checks"] if r["bad_tiles"]]
        lines += ["## Checks against float64", "",
                  f"{len(doc['checks']) - len(bad)} of {len(doc['checks'])} configurations with every {TILE_ROWS}-row "
                  f"tile within {TILE_TOLERANCE} of float64 (2 x 48 heads; 700 and 1024 keys; head dim 128; "
                  f"largest error {max(r['largest'] for r in doc['checks']):.3g}).", ""]
        for r in bad:
            lines.append(f"- {r['diagram']} d={r['d']} L={r['length']} {r['config']}: {r['bad_tiles']} of "
                         f"{r['tiles']} tiles wrong, by row block {r['bad_by_block']}")
        lines.append("")
    if doc["timing"]:
        lines += ["## Short rows of the FlashAttention-3 grid (TFLOP/s, CUDA graph replays)", "",
                  "| d | L | causal | config | tiles | persistent | prefetch | cuDNN | prefetch / persistent time "
                  "| persistent over cuDNN | prefetch over cuDNN |", "|---|---|---|---|---|---|---|---|---|---|---|"]
        def tf(x):
            return "-" if x is None else f"{x:.0f}"
        for r in doc["timing"]:
            c = r["config"]
            lines.append(f"| {r['d']} | {r['length']} | {'yes' if r['causal'] else 'no'} | N={c['WARPGROUPS']} "
                         f"s_x={c['BLOCK_X']} {c['STAGES']}st {c['OVERLAP']} | {tf(r['tiles_tflops'])} | "
                         f"{tf(r['persistent_tflops'])} | {tf(r['prefetch_tflops'])} | {tf(r['cudnn_tflops'])} | "
                         f"{ratio(r['prefetch_s'], r['persistent_s'])} | {ratio(r['cudnn_s'], r['persistent_s'])} | "
                         f"{ratio(r['cudnn_s'], r['prefetch_s'])} |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    raise SystemExit(main())
