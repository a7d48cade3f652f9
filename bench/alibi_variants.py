"""How the Hopper kernel should compute ALiBi's column term, measured: variants of the generated module's
text for diagrams/alibi_attention.yaml, each checked against float64 and timed beside napkin's plain causal
attention, on one GPU, in one run.

Under a causal mask the kernel applies ALiBi's - m |i - j| as + m (j - r), r the tile's first row (the
softmax ignores a row's constant); what remains is how each chunk's m (j - r) reaches the registers of
the scores, a thread holding 32 of a chunk's 128 columns:
- `per tile`: m (j - r) at the first chunk's columns kept in registers for the tile (the generated text);
- `convert`: each chunk converts its columns j - r to float (I2F, a conversion unit's quarter rate);
- `magic`: each chunk makes the float from the integer's bits (OR into 2^23's exponent, then a subtract:
  two full-rate operations instead of a conversion);
- `off`: no bias at all (wrong answers; the floor the column term is measured against).

    python bench/alibi_variants.py --gpu h100 --out bench/results
"""

from __future__ import annotations

import argparse
import datetime
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.common import (  # noqa: E402
    REP_MS,
    TOLERANCE,
    WARMUP_MS,
    command,
    environment,
    import_file,
    log,
    reference_attention,
    rel_err,
    save_results,
)

PER_TILE = "            slope_cols = slope * (arange_x - first_row).to(gl.float32)\n"
SCORE = "    s = s + (slope_cols + slope * col0)[None, :]"
VARIANTS = {
    "per tile": {},
    "convert": {PER_TILE: "            slope_cols = first_row\n",
                SCORE: "    s = s + (slope * (cols - slope_cols).to(gl.float32))[None, :]"},
    "magic": {PER_TILE: "            slope_cols = first_row\n",
              SCORE: "    s = s + (slope * (((cols - slope_cols + 4194304) | 0x4B000000).to(gl.float32, bitcast=True)"
                     " - 12582912.0))[None, :]"},
    "off": {SCORE: "    s = s"},
}
SHAPES = ((128, 8192), (128, 4096), (64, 8192), (256, 8192))
BATCH, HEADS = 2, 16


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--gpu", default="h100")
    ap.add_argument("--out", type=Path, default=Path("bench/results"))
    args = ap.parse_args(argv)
    import torch
    import triton

    from analyzer.codegen import generate
    tmp = Path("/tmp/napkin_alibi_variants")
    tmp.mkdir(parents=True, exist_ok=True)
    g = generate("alibi_attention", args.gpu)
    (path,) = [p for p in g.write(tmp / "alibi_base.py") if p.suffix == ".py"]
    text = path.read_text()
    modules = {}
    for name, edits in VARIANTS.items():
        body = text
        for old, new in edits.items():
            assert body.count(old) == 1, (name, old)
            body = body.replace(old, new)
        file = tmp / f"alibi_{name.replace(' ', '_')}.py"
        file.write_text(body)
        modules[name] = import_file(file, file.stem)
    causal_g = generate("causal_attention", args.gpu, dtype="bf16")
    (cpath,) = [p for p in causal_g.write(tmp / "causal.py") if p.suffix == ".py"]
    causal = import_file(cpath, "variants_causal")
    doc = {"command": command("alibi_variants.py", argv), "date": datetime.date.today().isoformat(),
           "environment": environment(), "timer": f"triton.testing.do_bench(warmup={WARMUP_MS}, rep={REP_MS}), median",
           "checks": [], "timing": []}
    slopes = torch.tensor([2.0 ** (-8 * (h + 1) / HEADS) for h in range(HEADS)], device="cuda").to(torch.bfloat16)
    gen = torch.Generator(device="cuda").manual_seed(0)
    q, k, v = (torch.randn(1, HEADS, 1000, 128, device="cuda", generator=gen).to(torch.bfloat16) for _ in range(3))
    ref = reference_attention(torch, q, k, v, True, False, slopes=slopes)
    for name, m in modules.items():
        err = rel_err(torch, m.attention(q, k, v, slopes, causal=True), ref)
        doc["checks"].append({"variant": name, "rel_err": err, "ok": err < TOLERANCE or name == "off"})
        log(f"check {name}: {err:.2e}")
    for d, seq in SHAPES:
        q, k, v = (torch.randn(BATCH, HEADS, seq, d, device="cuda", dtype=torch.bfloat16) for _ in range(3))
        row = {"d": d, "seqlen": seq}
        row["causal_us"] = round(triton.testing.do_bench(lambda: causal.attention(q, k, v, causal=True),
                                                         warmup=WARMUP_MS, rep=REP_MS) * 1e3, 1)
        for name, m in modules.items():
            row[f"{name}_us"] = round(triton.testing.do_bench(lambda m=m: m.attention(q, k, v, slopes, causal=True),
                                                              warmup=WARMUP_MS, rep=REP_MS) * 1e3, 1)
        row["causal_again_us"] = round(triton.testing.do_bench(lambda: causal.attention(q, k, v, causal=True),
                                                               warmup=WARMUP_MS, rep=REP_MS) * 1e3, 1)
        log(str(row))
        doc["timing"].append(row)
    lines = [f"# ALiBi's column term in the Hopper kernel, four ways ({doc['environment'].get('gpu')})", "",
             f"Command: `{doc['command']}`  ", f"Date: {doc['date']}; timer: {doc['timer']}", "",
             "Checks (d = 128, L = 1000, bf16, relative error against float64): "
             + ", ".join(f"{c['variant']} {c['rel_err']:.2e}" for c in doc["checks"]), "",
             f"Timing: {BATCH} x {HEADS} heads, bf16, causal; each variant's time over plain causal attention's "
             "(the mean of its two timings, before and after).", "",
             "| d | L | causal | " + " | ".join(VARIANTS) + " |", "|---|---|---|" + "---|" * len(VARIANTS)]
    for r in doc["timing"]:
        base = (r["causal_us"] + r["causal_again_us"]) / 2
        lines.append(f"| {r['d']} | {r['seqlen']} | {base:.1f} us | "
                     + " | ".join(f"{r[f'{n}_us']} us ({r[f'{n}_us'] / base:.2f})" for n in VARIANTS) + " |")
    save_results(args.out, f"alibi_variants_{args.gpu}", doc, "\n".join(lines) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
