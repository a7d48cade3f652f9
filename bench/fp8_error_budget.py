"""Where the FP8 kernel's error comes from, on FlashAttention-3's Table 3 inputs: the output's RMSE
against float64 with each of the kernel's roundings alone and all together, on the CPU (no GPU).

The FP8 kernel (`napkin kernel attention --dtype fp8`) rounds three things to e4m3: q and k (block
scales and incoherent processing: the module's quantize(), whose values dequantised here are exactly
what the kernel reads), v (a scale a column), and the probabilities P before P V (relative to the row's
running max, so a probability below 2^-9 of it is 0 and one below 2^-6 keeps fewer bits; the row's sum
takes the unrounded ones). Each part is applied alone to float64 attention, then all three, which the
kernel's measured RMSE reproduces (docs/section6.md). Two what-ifs say what would move it:
- `P x 2^8`: the probabilities scaled by 2^8 before rounding (an exponent shift of exp2's argument, free
  in the kernel, the sum scaled alike), so small ones keep their bits;
- q and k rounded without incoherent processing, and with one scale a tensor: what the Hadamard
  transform and the block scales each buy.

    python bench/fp8_error_budget.py [--queries 1024] [--out DIR]

It writes fp8_error_budget.json and .md into --out (bench/results). Float64 on the CPU: a few minutes.
"""

from __future__ import annotations

import argparse
import math
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.common import command, import_file, log, save_results  # noqa: E402
from bench.hopper_fp8 import OUTLIER_STD, OUTLIERS, dequantised, outlier_inputs  # noqa: E402

HEAD_DIMS = (64, 128, 256)
KEYS = 4096                  # as bench/hopper_fp8.py's accuracy part: 4096 keys, 2048 / d heads
SHIFT = 8.0                  # P x 2^8: at most 256, within e4m3's 448


def attention(torch, q, k, v, p_bits=None, shift=0.0):
    """float64 softmax(q k^T / sqrt(d)) v, head by head; `p_bits`: the probabilities rounded so (e4m3
    through fp16, as the kernel carries them), relative to the row's max times 2^shift; the row's sum
    unrounded."""
    out = []
    for h in range(q.shape[1]):
        s = q[0, h] @ k[0, h].T / math.sqrt(q.shape[-1])
        p = torch.exp2((s - s.amax(-1, keepdim=True)) * math.log2(math.e) + shift)
        weights = p if p_bits is None else p.half().to(p_bits).double()
        out.append((weights @ v[0, h]) / p.sum(-1, keepdim=True))
    return torch.stack(out)[None]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--queries", type=int, default=1024, help="query rows a head (the GPU's accuracy part: 4096)")
    ap.add_argument("--out", type=Path, default=Path(__file__).resolve().parent / "results")
    args = ap.parse_args(argv)
    import torch

    from analyzer.codegen import generate

    g = generate("attention", "h200", dtype="fp8")
    (path,) = g.write(Path(tempfile.mkdtemp()) / "attention_fp8.py")
    fp8 = import_file(path, "attention_fp8")
    e4m3 = torch.float8_e4m3fn
    rows = []
    for d in HEAD_DIMS:
        shape = (1, 2048 // d, KEYS, d)
        q, k, v = (outlier_inputs(torch, shape, seed, device="cpu") for seed in (1, 2, 3))
        q = q[:, :, :args.queries]
        exact = [x.double() for x in (q, k, v)]
        ref = attention(torch, *exact)

        def rounded(incoherent=True, blocks=True):
            return dequantised(fp8, *fp8.quantize(q, k, v, incoherent=incoherent, blocks=blocks))
        qb, kb, vb = rounded()
        cases = {"q and k": (qb, kb, exact[2], None, 0.0), "v": (*exact[:2], vb, None, 0.0),
                 "P": (*exact, e4m3, 0.0), "all three (the kernel)": (qb, kb, vb, e4m3, 0.0),
                 "P x 2^8": (*exact, e4m3, SHIFT), "all three, P x 2^8": (qb, kb, vb, e4m3, SHIFT)}
        qn, kn, _ = rounded(incoherent=False)
        qt, kt, _ = rounded(blocks=False)
        cases["q and k, no incoherent processing"] = (qn, kn, exact[2], None, 0.0)
        cases["q and k, one scale a tensor"] = (qt, kt, exact[2], None, 0.0)
        for name, (a, b, c, bits, shift) in cases.items():
            rmse = (attention(torch, a, b, c, bits, shift) - ref).pow(2).mean().sqrt().item()
            rows.append({"d": d, "rounded": name, "rmse": rmse})
            log(f"d={d} {name}: RMSE {rmse:.3e}")
    doc = {"command": command("fp8_error_budget.py", argv), "queries": args.queries, "keys": KEYS,
           "outliers": OUTLIERS, "outlier_std": OUTLIER_STD, "rows": rows}
    names = list(dict.fromkeys(r["rounded"] for r in rows))
    by = {(r["d"], r["rounded"]): r["rmse"] for r in rows}
    md = ["# The FP8 kernel's error, part by part (float64 on the CPU)", "",
          f"`{doc['command']}`: q, k and v from N(0, 1) with {OUTLIERS:.1%} of the entries from N(0, "
          f"{OUTLIER_STD:g}), {args.queries} queries and {KEYS} keys, 2048 / d heads; the RMSE of the output against "
          "float64 with what the column names rounded as the FP8 kernel rounds it (the module's quantize(): "
          "block scales, incoherent processing), the rest exact.", "",
          "| rounded | " + " | ".join(f"d = {d}" for d in HEAD_DIMS) + " |", "|---|" + "---|" * len(HEAD_DIMS)]
    md += [f"| {n} | " + " | ".join(f"{by[d, n]:.2e}" for d in HEAD_DIMS) + " |" for n in names]
    save_results(args.out, "fp8_error_budget", doc, "\n".join(md) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
