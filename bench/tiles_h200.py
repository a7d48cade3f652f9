"""How the generated attention kernel's speed depends on its tiles, on one GPU (a sensitivity sweep).

Generates the Triton kernel of diagrams/attention.yaml and diagrams/causal_attention.yaml once, then
times it with the configuration napkin chose and with alternative tile sizes, warps and stages, each
passed to the call (`config=`; the kernel source does not change). Shapes follow
the FlashAttention-3 benchmark (16k tokens, hidden 2048). Output: tiles_h200.json and a markdown table.

    python bench/tiles_h200.py [--out DIR]
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import sys
import tempfile
import time
from functools import partial
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))          # napkin and bench.common from this checkout, installed or not

from bench.common import launched, load_kernel, write_json  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=os.environ.get("OUT", str(ROOT / "bench" / "results")))
    parser.add_argument("--seqlens", default="4096")
    parser.add_argument("--causal", action="store_true", help="also the causal diagram")
    parser.add_argument("--budget-s", type=float, default=400.0, help="stop trying alternatives after")
    args = parser.parse_args()
    import torch
    import triton
    if not torch.cuda.is_available():
        print("error: no CUDA device", file=sys.stderr)
        return 1
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp())
    rows = []
    began = time.time()
    for diagram, causal in (("attention", False), ("causal_attention", True))[:2 if args.causal else 1]:
        m = load_kernel(diagram, tmp).module
        for hdim in (64, 128):
            for seqlen in (int(s) for s in args.seqlens.split(",")):
                batch, heads = 16384 // seqlen, 2048 // hdim
                q, k, v = (torch.randn(batch, heads, seqlen, hdim, device="cuda", dtype=torch.float16)
                           for _ in range(3))
                flops = 4 * batch * heads * seqlen * seqlen * hdim / (2 if causal else 1)
                ref = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=causal)
                size = {"batch": batch, "heads": heads, "q": seqlen, "x": seqlen, "d": hdim}
                options = [("model", launched(m, "flash", hdim, size))]    # what a call without config= runs
                for tq, tx, warps, stages in itertools.product((64, 128, 256), (32, 64, 128),
                                                               (4, 8, 16), (2, 3)):
                    if warps * 16 > tq * 2 or warps * 64 < tq:
                        continue
                    options.append(("alt", {"TILE_Q": tq, "BLOCK_X": tx, "num_warps": warps,
                                            "num_stages": stages}))
                for label, cfg in options:
                    if label != "model" and time.time() - began > args.budget_s:
                        continue
                    row = {"diagram": diagram, "hdim": hdim, "seqlen": seqlen, "causal": causal,
                           "label": label, **cfg}
                    call = partial(m.attention, q, k, v, causal=causal, config={"flash": cfg})
                    try:
                        o = call()
                        err = ((o.float() - ref.float()).norm() / ref.float().norm()).item()
                        ms = triton.testing.do_bench(call, warmup=10, rep=40, return_mode="median")
                        row.update(ms=ms, tflops=flops / ms / 1e9, rel_err=err)
                    except Exception as exc:  # noqa: BLE001 - a configuration that fails is data too
                        row.update(error=f"{type(exc).__name__}: {str(exc)[:200]}")
                    rows.append(row)
                    print(json.dumps(row), flush=True)
    write_json(out / "tiles_h200.json", rows)
    lines = ["| diagram | hdim | seqlen | label | TILE_Q | BLOCK_X | warps | stages | TFLOP/s |",
             "|---|---|---|---|---|---|---|---|---|"]
    best = {}
    for r in rows:
        key = (r["diagram"], r["hdim"], r["seqlen"])
        if "tflops" in r and r["tflops"] > best.get(key, {}).get("tflops", 0):
            best[key] = r
    for r in rows:
        if r["label"] == "model" or best.get((r["diagram"], r["hdim"], r["seqlen"])) is r:
            lines.append(f"| {r['diagram']} | {r['hdim']} | {r['seqlen']} | "
                         f"{r['label'] if best.get((r['diagram'], r['hdim'], r['seqlen'])) is not r else r['label'] + ' (best)'} | "
                         f"{r['TILE_Q']} | {r['BLOCK_X']} | {r['num_warps']} | {r['num_stages']} | "
                         f"{r.get('tflops', float('nan')):.0f} |")
    (out / "tiles_h200.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
