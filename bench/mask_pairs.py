"""What comparing a pair of keys through one column buys the masked kernels (_attn_keep, _attn_band): the
causal kernel at head dim 64 on FlashAttention-3's grid, 512 to 16k tokens, in one run on one GPU, fp16.

With a column a key, ptxas held 14 columns of a consumer across the tile: three consumers of 160 registers
at s_x = 128 spilled 8 B, four of 112 at s_x = 64 spilled 288 B, and the register rule refused both (its
causal reserve, 16). FlashAttention-3 takes three consumers of 64 rows at s_x = 128 for head dim 64.

1. Checks against float64 (common.reference_attention), causal, head dim 64, at 17, 1000 and 4099 tokens of
   2 x 4 heads and 1000 of 9 x 8: the configurations the reserve now admits, every schedule.
2. Timing, 16k tokens of 32 heads a length (FlashAttention-3's benchmark), CUDA graph replays
   (triton.testing.do_bench_cudagraph, rep=20, the faster of two), after a second of the kernel at each
   length (hopper_sweep.steady): each configuration of CONFIGS in the kernel generated now and, where
   --before names a folder with causal.py (an earlier text's module of diagrams/causal_attention.yaml),
   in that one; SDPA's cuDNN backend beside them. With --rounds R each length is timed R times, the
   texts' order reversed every other round (a text timed first met a cooler GPU), and the table gives the
   fastest round with the slowest beside it.

    python bench/mask_pairs.py --gpu h200 [--before DIR] [--lengths 8192,16384] [--rounds 3] [--out DIR]
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.common import TOLERANCE, Compile, command, environment, import_file, log, precompile, save_results  # noqa: E402
from bench.hopper_sweep import steady  # noqa: E402

TOKENS, HEADS, HEAD_DIM = 16384, 32, 64
LENGTHS = (512, 1024, 2048, 4096, 8192, 16384)
# (N, s_x, schedule): FlashAttention-3's tile and today's choices; two stages, both overlaps
CONFIGS = ((2, 128, "tiles"), (2, 128, "persistent"), (3, 128, "tiles"), (3, 128, "persistent"),
           (3, 128, "prefetch"), (4, 64, "tiles"), (4, 64, "persistent"))
CHECKED = ((3, 128, "tiles"), (3, 128, "persistent"), (3, 128, "prefetch"), (4, 64, "tiles"),
           (4, 64, "persistent"), (4, 64, "prefetch"))


def config_of(n: int, chunk: int, schedule: str) -> dict:
    return dict(WARPGROUPS=n, BLOCK_X=chunk, STAGES=2, OVERLAP="inter+intra", SCHEDULE=schedule)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--gpu", default="h200", help="the profile the module is generated for")
    ap.add_argument("--before", type=Path, help="a folder with causal.py generated from an earlier text")
    ap.add_argument("--out", type=Path, default=Path(os.environ.get("OUT", str(ROOT / "bench" / "results"))))
    ap.add_argument("--workers", type=int, default=min(14, os.cpu_count() or 1))
    ap.add_argument("--lengths", default=",".join(map(str, LENGTHS)))
    ap.add_argument("--rounds", type=int, default=1)
    ap.add_argument("--configs", help="N:s_x:schedule,... (default: CONFIGS)")
    args = ap.parse_args(argv)
    configs = CONFIGS if not args.configs else tuple(
        (int(n), int(x), s) for n, x, s in (c.split(":") for c in args.configs.split(",")))
    import torch
    import triton
    from torch.nn.attention import SDPBackend, sdpa_kernel

    from analyzer.codegen import generate
    from bench.common import reference_attention, rel_err

    mods = args.out / "mods"
    mods.mkdir(parents=True, exist_ok=True)
    (path,) = generate("causal_attention", args.gpu, dtype="fp16").write(mods / "causal.py")
    texts = {"now": path} | ({"before": args.before / "causal.py"} if args.before else {})
    modules = {name: import_file(p, f"mask_pairs_{name}") for name, p in texts.items()}
    precompile([Compile(str(p), f"mask_pairs_{name}", "flash", config_of(*c), "attention", HEAD_DIM, True)
                for name, p in texts.items() for c in configs + CHECKED], args.workers)

    doc = {"command": command("mask_pairs.py", argv), "gpu": torch.cuda.get_device_name(), **environment(),
           "checks": [], "timings": []}
    for seq, batch, heads in ((17, 2, 4), (1000, 2, 4), (1000, 9, 8), (4099, 2, 4)):
        q, k, v = (torch.randn(batch, heads, seq, HEAD_DIM, device="cuda", dtype=torch.float16) for _ in range(3))
        ref = reference_attention(torch, q, k, v, True, False)
        for c in CHECKED:
            err = rel_err(torch, modules["now"].attention(q, k, v, causal=True, config=config_of(*c)), ref)
            doc["checks"].append({"seq": seq, "batch": batch, "heads": heads, "config": config_of(*c),
                                  "rel_err": err, "ok": bool(err < TOLERANCE)})
    bad = [r for r in doc["checks"] if not r["ok"]]
    log(f"checks: {len(doc['checks']) - len(bad)} of {len(doc['checks'])} within {TOLERANCE}")

    for length in map(int, args.lengths.split(",")):
        batch = TOKENS // length
        q, k, v = (torch.randn(batch, HEADS, length, HEAD_DIM, device="cuda", dtype=torch.float16) for _ in range(3))
        flops = 4 * batch * HEADS * length * length * HEAD_DIM / 2
        with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
            for round_ in range(args.rounds):
                calls = {("cuDNN", "-"): lambda: torch.nn.functional.scaled_dot_product_attention(q, k, v,
                                                                                                   is_causal=True)}
                for c in configs:
                    for name, module in (list(modules.items()) if round_ % 2 == 0 else list(modules.items())[::-1]):
                        calls[(name, c)] = lambda m=module, c=c: m.attention(q, k, v, causal=True, config=config_of(*c))
                steady(torch, calls[("cuDNN", "-")])
                for (name, c), call in calls.items():
                    call()
                    us = 1e3 * min(triton.testing.do_bench_cudagraph(call, rep=20) for _ in range(2))
                    doc["timings"].append({"length": length, "round": round_, "text": name,
                                           "config": c if c == "-" else config_of(*c), "us": us,
                                           "tflops": flops / us * 1e-6})
        log(f"L={length}: " + ", ".join(f"{t['text']} {t['config'] if t['config'] == '-' else _label(t['config'])} "
                                        f"{t['tflops']:.0f}" for t in doc["timings"] if t["length"] == length))
    save_results(args.out, f"mask_pairs_{args.gpu}", doc, markdown(doc))
    return 1 if bad else 0


def _label(c: dict) -> str:
    return f"N={c['WARPGROUPS']} s_x={c['BLOCK_X']} {c['SCHEDULE']}"


def markdown(doc: dict) -> str:
    checks = doc["checks"]
    worst = max((r["rel_err"] for r in checks), default=0.0)
    out = [f"# Comparing a pair of keys through one column: causal, head dim 64 ({doc['gpu']})", "",
           f"`{doc['command']}`; torch {doc.get('torch')}, triton {doc.get('triton')}. Timer: "
           "triton.testing.do_bench_cudagraph(rep=20), the faster of two, after a second of load a length. "
           "TFLOP/s = 2 batch heads L^2 d (causal); 16k tokens of 32 heads a length.", "",
           *([f"{doc['before']}.", ""] if doc.get("before") else []),
           f"Checks against float64: {sum(r['ok'] for r in checks)} of {len(checks)} within {TOLERANCE} "
           f"(worst {worst:.2e}).", ""]
    texts = list(dict.fromkeys(t["text"] for t in doc["timings"] if t["text"] != "cuDNN"))
    rounds = max(t.get("round", 0) for t in doc["timings"]) + 1
    if rounds > 1:
        out += [f"{rounds} rounds a length, the texts' order reversed every other round: the fastest round's "
                "TFLOP/s, the slowest's in brackets.", ""]
    out += ["| L | configuration | " + " | ".join(f"{t} TFLOP/s" for t in texts) + " | cuDNN | "
            + " | ".join(f"{t} / cuDNN" for t in texts) + " |",
            "|---|---|" + "---|" * (2 * len(texts) + 1)]

    def best(rows: list[dict]) -> str:
        fast, slow = max(r["tflops"] for r in rows), min(r["tflops"] for r in rows)
        return f"{fast:.0f}" + (f" ({slow:.0f})" if len(rows) > 1 else "")

    for length in dict.fromkeys(t["length"] for t in doc["timings"]):
        rows = [t for t in doc["timings"] if t["length"] == length]
        cudnn_rows = [t for t in rows if t["text"] == "cuDNN"]
        cudnn = max(t["tflops"] for t in cudnn_rows)
        for label in dict.fromkeys(_label(t["config"]) for t in rows if t["text"] != "cuDNN"):
            got = {text: [t for t in rows if t["text"] == text and _label(t["config"]) == label] for text in texts}
            out.append(f"| {length} | {label} | " + " | ".join(best(got[t]) if got[t] else "-" for t in texts)
                       + f" | {best(cudnn_rows)} | "
                       + " | ".join(f"{max(r['tflops'] for r in got[t]) / cudnn:.3f}" if got[t] else "-"
                                    for t in texts) + " |")
    return "\n".join(out) + "\n"


if __name__ == "__main__":
    raise SystemExit(main())
