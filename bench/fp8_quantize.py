"""The FP8 module's quantize() on the GPU: its Triton kernels (_quantize_rows, _quantize_columns: each
tensor read once, v twice) against its torch operations (_quantized_by_torch), value for value, then
timed, and the FP8 kernel called on 16-bit inputs (quantised in the call) beside the same kernel on
inputs quantised before, in one run.

    python bench/fp8_quantize.py --gpu h200 --out bench/results

Writes fp8_quantize_<gpu>.json and .md to --out.
"""

from __future__ import annotations

import argparse
import datetime
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.common import REP_MS, WARMUP_MS, command, environment, log, save_results, written_module  # noqa: E402

TOKENS, MODEL_DIM = 16384, 2048
CHECKS = ((1, 3, 200, 333, 64), (2, 4, 1000, 1000, 128), (1, 2, 4096, 777, 256), (2, 8, 64, 32, 128))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--gpu", default="h100")
    ap.add_argument("--out", type=Path, default=Path("bench/results"))
    args = ap.parse_args(argv)
    import torch
    import triton

    from analyzer.codegen import generate
    m = written_module(generate("attention", args.gpu, dtype="fp8"), Path("/tmp"), "napkin_fp8_quantize")
    doc = {"command": command("fp8_quantize.py", argv), "date": datetime.date.today().isoformat(),
           "environment": environment(), "checks": [], "timing": []}
    ok = True
    for b, h, n_q, n_k, d in CHECKS:      # strided k, and incoherent processing's float32 inputs too
        gen = torch.Generator(device="cuda").manual_seed(n_q + d)
        q = torch.randn(b, h, n_q, d, device="cuda", generator=gen).half() * 3
        k = torch.randn(b, n_k, h, d, device="cuda", generator=gen).half().transpose(1, 2)
        v = torch.randn(b, h, n_k, d, device="cuda", generator=gen).half()
        for incoherent in (False, True):
            x = (q, k, v) if not incoherent else (q.float() @ m._hadamard(d, 0, "cuda"),
                                                  k.float() @ m._hadamard(d, 0, "cuda"), v)
            fused, by_torch = m._quantized_on_gpu(*x), m._quantized_by_torch(*x)
            pairs = list(zip((*fused[0], *fused[1]), (*by_torch[0], *by_torch[1]), strict=True))
            # the values and scales, each compared whole; the strides only reported (the torch operations'
            # e4m3 tensors are slices of buffers padded to a block, the kernels' are not)
            same = [a.shape == w.shape and torch.equal(a.float(), w.float()) for a, w in pairs]
            row = {"shape": [b, h, n_q, n_k, d], "incoherent": incoherent, "equal": same, "ok": all(same),
                   "same_strides": [a.stride() == w.stride() for a, w in pairs]}
            ok &= row["ok"]
            doc["checks"].append(row)
            log(f"check {row}")
    for d in (64, 128, 256):
        for seq in (4096, 16384):
            batch, heads = TOKENS // seq, MODEL_DIM // d
            q, k, v = (torch.randn(batch, heads, seq, d, device="cuda", dtype=torch.float16) for _ in range(3))
            inputs, scales = m.quantize(q, k, v)
            out = torch.empty_like(q)
            flops = 4 * batch * heads * seq * seq * d
            row = {"d": d, "seqlen": seq}
            for name, fn in (("quantize, torch", lambda: m._quantized_by_torch(q, k, v)),
                             ("quantize, triton", lambda: m._quantized_on_gpu(q, k, v)),
                             ("attention, e4m3 inputs", lambda: m.attention(*inputs, descale=scales, out=out)),
                             ("attention, 16-bit inputs", lambda: m.attention(q, k, v, out=out))):
                s = triton.testing.do_bench(fn, warmup=WARMUP_MS, rep=REP_MS) * 1e-3
                row[name] = round(s * 1e6, 1)
                if name.startswith("attention"):
                    row[f"{name} TFLOP/s"] = round(flops / s / 1e12, 1)
            doc["timing"].append(row)
            log(f"timing {row}")
    lines = [f"# quantize() on the GPU: Triton kernels against torch operations ({doc['environment']['gpu']})", "",
             f"Command: `{doc['command']}`  ", f"Date: {doc['date']}; timer: triton.testing.do_bench(warmup="
             f"{WARMUP_MS}, rep={REP_MS}), median; {TOKENS} tokens, {MODEL_DIM} model dims", "",
             f"Checks (e4m3 values, scales, shapes and strides equal to the torch operations'): "
             f"{sum(c['ok'] for c in doc['checks'])} of {len(doc['checks'])}", "",
             "| d | L | quantize, torch (us) | quantize, Triton (us) | attention, e4m3 inputs | attention, 16-bit "
             "inputs |", "|---|---|---|---|---|---|"]
    for r in doc["timing"]:
        lines.append(f"| {r['d']} | {r['seqlen']} | {r['quantize, torch']} | {r['quantize, triton']} | "
                     f"{r['attention, e4m3 inputs TFLOP/s']} | {r['attention, 16-bit inputs TFLOP/s']} |")
    save_results(args.out, f"fp8_quantize_{args.gpu}", doc, "\n".join(lines) + "\n")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
