"""A probe of the FP8 Hopper kernel at head dim 256 beyond the register rule: 128-key chunks, which the
rule refuses for two consumers (the probabilities of two chunks live at once under intra overlap), timed
beside the rule's choice (64-key chunks), each checked against float64 first, in one run.

    python bench/fp8_probe.py --gpu h200 --out bench/results

Writes fp8_probe_<gpu>.json and .md to --out.
"""

from __future__ import annotations

import argparse
import datetime
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.common import (  # noqa: E402
    FP8_TOLERANCE,
    REP_MS,
    WARMUP_MS,
    attention_inputs,
    command,
    environment,
    log,
    reference_attention,
    rel_err,
    save_results,
    written_module,
)

HEAD_DIM, TOKENS, MODEL_DIM = 256, 16384, 2048
CONFIGS = [{"WARPGROUPS": n, "BLOCK_X": chunk, "STAGES": stages, "OVERLAP": overlap, "SCHEDULE": "tiles"}
           for n, chunk, stages, overlap in ((2, 64, 2, "intra"), (2, 64, 3, "intra"), (2, 128, 2, "none"),
                                             (2, 128, 2, "inter"), (2, 128, 2, "intra"), (1, 128, 2, "intra"))]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--gpu", default="h100")
    ap.add_argument("--out", type=Path, default=Path("bench/results"))
    args = ap.parse_args(argv)
    import torch
    import triton

    from analyzer.codegen import generate
    module = written_module(generate("attention", args.gpu, dtype="fp8"), Path("/tmp"), "napkin_fp8_probe")
    doc = {"command": command("fp8_probe.py", argv), "date": datetime.date.today().isoformat(),
           "environment": environment(), "rows": []}
    q, k, v = attention_inputs(torch, 1, 2, 2, 1000, 1000, HEAD_DIM, torch.float16, False, False, seed=1)
    ref = reference_attention(torch, q, k, v, False, False)
    for seq in (8192, 16384):
        batch, heads = TOKENS // seq, MODEL_DIM // HEAD_DIM
        x = [torch.randn(batch, heads, seq, HEAD_DIM, device="cuda", dtype=torch.float16) for _ in range(3)]
        inputs, scales = module.quantize(*x)
        out = torch.empty_like(x[0])
        for cfg in CONFIGS:
            row = {"seqlen": seq, **cfg}
            try:
                row["rel_err"] = rel_err(torch, module.attention(q, k, v, config={"flash": cfg}), ref)
                if row["rel_err"] < FP8_TOLERANCE:
                    s = triton.testing.do_bench(lambda c=cfg: module.attention(*inputs, descale=scales, out=out,
                                                                                config={"flash": c}),
                                                warmup=WARMUP_MS, rep=REP_MS) * 1e-3
                    row["tflops"] = round(4 * batch * heads * seq * seq * HEAD_DIM / s / 1e12, 1)
            except Exception as exc:  # noqa: BLE001 - a configuration that fails is a result
                row["error"] = f"{type(exc).__name__}: {str(exc)[:200]}"
            doc["rows"].append(row)
            log(f"{row}")
    lines = [f"# FP8 at head dim 256 beyond the register rule ({doc['environment']['gpu']})", "",
             f"Command: `{doc['command']}`  ", f"Date: {doc['date']}; timer: triton.testing.do_bench(warmup="
             f"{WARMUP_MS}, rep={REP_MS}), median; {TOKENS} tokens, {MODEL_DIM} model dims, e4m3 inputs", "",
             "| L | N | s_x | stages | overlap | rel. error | TFLOP/s |", "|---|---|---|---|---|---|---|"]
    for r in doc["rows"]:
        err = f"{r['rel_err']:.3f}" if "rel_err" in r else r.get("error", "-")
        lines.append(f"| {r['seqlen']} | {r['WARPGROUPS']} | {r['BLOCK_X']} | {r['STAGES']} | {r['OVERLAP']} | {err} "
                     f"| {r.get('tflops', '-')} |")
    save_results(args.out, f"fp8_probe_{args.gpu}", doc, "\n".join(lines) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
