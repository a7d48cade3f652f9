"""exp2 on the FMA lanes (FlashAttention-4's emulation) in the Hopper attention kernel: each share of the
softmax's exponentials taken off the special function unit (EXP2_FMA of every 8,
analyzer.codegen.hopper.exp2), checked against float64, then timed at FlashAttention-3's grid (16k tokens,
2048 model dims, not causal) in the configuration the module chooses, every share in one run.

    python bench/exp2_fma.py --gpu h200 --out bench/results

A variant is the generated module with its EXP2_FMA and EXP2_PTX lines rendered for another count (the
rest of the text as generated). Writes exp2_fma_<gpu>.json and .md to --out.
"""

from __future__ import annotations

import argparse
import datetime
import re
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.common import (  # noqa: E402
    FP8_TOLERANCE,
    REP_MS,
    TOLERANCE,
    attention_inputs,
    command,
    environment,
    log,
    reference_attention,
    rel_err,
    save_results,
)
from bench.module_variants import MODEL_DIM, TOKENS, grid_inputs, loaded, prepared, timed_row  # noqa: E402

COUNTS = (0, 1, 2, 3, 4)
CASES = (("fp8", 64), ("fp8", 128), ("fp8", 256), ("fp16", 64), ("fp16", 128))
LENGTHS = (8192, 16384)
BLOCK = re.compile(r"^EXP2_FMA = .*?^EXP2_PTX = (?:\"\".*?$|\(.*?^\))", re.S | re.M)


def variant(source: str, dtype: str, count: int) -> str:
    """The generated module's text with its exp2 lines rendered for `count` of every 8 on the FMA lanes."""
    from analyzer.codegen.hopper.module import exp2_lines
    lines = exp2_lines(count, dtype)
    text, n = BLOCK.subn(lambda _: "\n".join(lines), source)
    assert n == 1, "the generated module's EXP2 lines moved"
    return text


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--gpu", default="h100")
    ap.add_argument("--out", type=Path, default=Path("bench/results"))
    ap.add_argument("--workers", type=int, default=15)
    args = ap.parse_args(argv)
    import torch
    import triton

    doc = {"command": command("exp2_fma.py", argv), "date": datetime.date.today().isoformat(),
           "environment": environment(), "rows": []}
    paths, kernel, configs = prepared(args.gpu, CASES, LENGTHS, COUNTS, variant, "napkin_exp2", args.workers)
    for dtype, d in CASES:
        q, k, v = attention_inputs(torch, 1, 2, 2, 1000, 1000, d, torch.float16, False, False, seed=1)
        ref = reference_attention(torch, q, k, v, False, False)
        for count in COUNTS:
            module = loaded(paths, dtype, count)
            for seq in LENGTHS:
                cfg = configs[dtype, d, seq]
                err = rel_err(torch, module.attention(q, k, v, config={kernel: cfg}), ref)
                row = {"dtype": dtype, "head_dim": d, "seqlen": seq, "exp2_fma": count, "config": cfg,
                       "rel_err": err}
                if err < (FP8_TOLERANCE if dtype == "fp8" else TOLERANCE):
                    row.update(timed_row(triton, module, kernel, cfg, grid_inputs(torch, d, seq)))
                doc["rows"].append(row)
                log(f"{dtype} d={d} L={seq} fma={count}: err {err:.2e} {row.get('tflops', '-')} TFLOP/s")
    lines = [f"# exp2 on the FMA lanes in the Hopper attention kernel ({doc['environment']['gpu']})", "",
             f"Command: `{doc['command']}`  ", f"Date: {doc['date']}; timer: triton.testing.do_bench(rep={REP_MS}), "
             f"median; {TOKENS} tokens, {MODEL_DIM} model dims, not causal; FP8 on e4m3 inputs; the module's "
             "configuration at each shape", "",
             "TFLOP/s (4 b h L^2 d) by how many of every 8 exponentials run on the FMA lanes; the relative error "
             "against float64 at one batch entry, two heads, 1000 positions (16k's configuration)", "",
             "| dtype | d | L | " + " | ".join(f"{c}/8" for c in COUNTS) + " | best / 0 | errors |",
             "|---|---|---|" + "---|" * (len(COUNTS) + 2)]
    for dtype, d in CASES:
        for seq in LENGTHS:
            rows = {r["exp2_fma"]: r for r in doc["rows"]
                    if (r["dtype"], r["head_dim"], r["seqlen"]) == (dtype, d, seq)}
            speeds = [rows[c].get("tflops") for c in COUNTS]
            best = max((s for s in speeds if s), default=None)
            gain = f"{best / speeds[0]:.3f}" if best and speeds[0] else "-"
            errs = " ".join(f"{rows[c]['rel_err']:.1e}" for c in COUNTS) if seq == LENGTHS[-1] else ""
            lines.append(f"| {dtype} | {d} | {seq} | " + " | ".join(str(s or "-") for s in speeds)
                         + f" | {gain} | {errs} |")
    save_results(args.out, f"exp2_fma_{args.gpu}", doc, "\n".join(lines) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
