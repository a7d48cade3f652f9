"""ALiBi's shifted lowering in the Hopper attention kernel, three ways, on one GPU in one run: which one
lets the long-sequence configuration at head dim 128 (two consumers of 128-key chunks) build without a
spill, and what each costs, beside napkin's plain causal kernel at the same shapes.

The kernel adds m (j - r) to a chunk's scores (analyzer.config.scores: the softmax leaves the row's part
to itself). Its column part is a vector along the chunk's keys, which a thread holds s_x / 4 of:
- `held`: m (j - r) at the first chunk's columns computed once a tile and held through the loop, plus
  m times the chunk's first column a chunk (the kernel's ALIBI 1; before 2026-11-28 its only lowering):
  a float vector live across the loop, which spilled 60 bytes a thread at head dim 128, s_x = 128
  (bench/register_scan.py);
- `converted`: j - r recomputed a chunk from the key indices the mask reads too, converted to float
  (cvt.rn.f32.s32) and multiplied by m;
- `magic`: the same, converted by the exponent trick: the bits 0x4B000000 | j are the float 2^23 + j for
  0 <= j < 2^23, so subtracting 2^23 + r gives j - r exactly with an OR and a float subtract on the
  lanes, no conversion unit (the kernel's ALIBI 2, where the held vector does not fit the registers).
The generated module takes the held and the magic lowering by configuration (ALIBI_RECOMPUTED); this
probe sets one of the three at every configuration.

Each is checked against float64 (lengths 1, 17, 1000, 4096; strided inputs; FlashAttention-3's outliers)
at every configuration timed, then timed by CUDA graph replays at 2 x 16 heads, bf16, causal.

    python bench/alibi_lowering.py --gpu h200 [--out DIR] [--seqlens 8192,16384]

Writes alibi_lowering_<gpu>.json and .md into --out ($OUT if set, else bench/results).
"""

from __future__ import annotations

import argparse
import datetime
import os
import sys
import tempfile
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench.common import command, environment, import_file, log, save_results, timed  # noqa: E402
from bench.hopper_variants import BATCH, HEADS, check, inputs, read_off  # noqa: E402

# The kernel as generated holds the vector where it fits and recomputes it by the exponent trick elsewhere
# (ALIBI_RECOMPUTED, the launcher's ALIBI 1 or 2); each lowering here is one of the two everywhere, or the
# conversion's text in place of the trick's
RECOMPUTED = ("slope_cols = 8388608.0 + first_row",
              "part = slope * ((cols | 0x4B000000).to(gl.float32, bitcast=True) - slope_cols)")
CONVERTED = ("slope_cols = first_row", "part = slope * (cols - slope_cols).to(gl.float32)")
LOWERINGS = ("held", "converted", "magic")
# the configurations timed at each head dim: the long-sequence choice before the register rule counted
# ALiBi's vector, and what the rule leaves
CONFIGS = {128: ((2, 128, "intra"), (2, 64, "intra"), (1, 128, "intra"), (2, 128, "inter+intra")),
           64: ((2, 128, "inter+intra"), (3, 64, "inter+intra"))}
SEQLENS = (8192, 16384)


# the launcher's choice of the lowering, replaced: one lowering at every configuration (1 held, 2 recomputed)
EVERYWHERE = """


def _alibi_mode(head_dim, groups, block_x):
    \"\"\"This probe's: ALiBi's column part lowered one way at every configuration.\"\"\"
    return {mode}
"""


def lowered(source: str, name: str) -> str:
    """The generated module's text with ALiBi's column part lowered as `name` at every configuration: its
    _alibi_mode defined again at its end (the launcher calls it at each call's plan)."""
    assert all(line in source for line in RECOMPUTED), "the generated module's recomputed lowering has moved"
    if name == "converted":
        source = source.replace(RECOMPUTED[0], CONVERTED[0]).replace(RECOMPUTED[1], CONVERTED[1])
    return source + EVERYWHERE.format(mode=1 if name == "held" else 2)


def entry(groups: int, chunk: int, overlap: str) -> dict:
    return {"WARPGROUPS": groups, "BLOCK_X": chunk, "STAGES": 2, "OVERLAP": overlap, "SCHEDULE": "tiles"}


def _warm(job: tuple[str, int, dict]) -> str | None:
    """Compile one lowering's configuration in a worker (one call on a small input); why it failed, or None."""
    import torch
    path, d, config = job
    try:
        module = import_file(Path(path), Path(path).stem)
        q, k, v = (torch.randn(1, 2, 300, d, device="cuda", dtype=torch.bfloat16) for _ in range(3))
        module.attention(q, k, v, torch.full((1, 2), 0.5, device="cuda", dtype=torch.bfloat16), config=config)
        torch.cuda.synchronize()
        return None
    except Exception as exc:  # noqa: BLE001 - reported, and its checks fail
        return f"{type(exc).__name__}: {str(exc)[:300]}"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--gpu", default="h100")
    ap.add_argument("--out", type=Path, default=Path(os.environ.get("OUT", str(ROOT / "bench" / "results"))))
    ap.add_argument("--seqlens", default=",".join(map(str, SEQLENS)))
    ap.add_argument("--workers", type=int, default=min(14, os.cpu_count() or 1))
    args = ap.parse_args(argv)
    import torch
    import triton

    tmp = Path(tempfile.mkdtemp())
    alibi = read_off("alibi_attention", args.gpu, tmp)
    plain = read_off("causal_attention", args.gpu, tmp)
    source = Path(alibi.path).read_text()
    modules = {}
    for name in LOWERINGS:
        path = tmp / f"alibi_{name}.py"
        path.write_text(lowered(source, name))
        modules[name] = import_file(path, f"alibi_{name}")
    jobs = [(str(tmp / f"alibi_{name}.py"), d, entry(*c)) for name in LOWERINGS for d, cs in CONFIGS.items()
            for c in cs]
    with ProcessPoolExecutor(args.workers) as pool:      # Triton's cache keeps what each worker compiles
        for (path, d, e), error in zip(jobs, pool.map(_warm, jobs)):
            if error:
                log(f"{Path(path).stem} d={d} {e}: {error}")
    checks, rows = [], []
    for d, configs in CONFIGS.items():
        for name, module in modules.items():
            for c in configs:
                for seq, strided, outlier in ((1, False, False), (17, True, False), (1000, False, True),
                                              (4096, True, True)):
                    checks.append({"lowering": name, **check(torch, alibi, module, d, seq, entry(*c),
                                                             strided=strided, outlier=outlier)})
                    if not checks[-1]["ok"]:
                        log(f"check failed: {checks[-1]}")
        for seq in map(int, args.seqlens.split(",")):
            call, _ = inputs(torch, alibi, BATCH, HEADS, seq, d, torch.bfloat16)
            base_args, _ = inputs(torch, plain, BATCH, HEADS, seq, d, torch.bfloat16)
            base = plain.module()
            t = timed(triton, lambda: base.attention(*base_args), graph=True)
            rows.append({"kernel": "causal_attention", "d": d, "seq": seq, "config": None, **t})
            for name, module in modules.items():
                if any(not c["ok"] for c in checks if c["lowering"] == name and c["d"] == d):
                    continue
                for c in configs:
                    t = timed(triton, lambda m=module, e=entry(*c): m.attention(*call, config=e), graph=True)
                    rows.append({"kernel": f"alibi {name}", "d": d, "seq": seq, "config": entry(*c), **t})
                    log(f"{name} d={d} L={seq} {c}: {t['time_s'] * 1e6:.1f} us")
    doc = {"command": command("alibi_lowering.py", argv), "environment": environment(),
           "date": datetime.date.today().isoformat(), "checks": checks,
           "rows": rows}
    save_results(args.out, f"alibi_lowering_{args.gpu}", doc, markdown(doc))
    return 0


def markdown(doc: dict) -> str:
    env = doc["environment"]
    ok = sum(c["ok"] for c in doc["checks"])
    md = [f"# ALiBi's shifted lowering, three ways ({env['gpu']})", "",
          f"Command: `{doc['command']}`  ", f"Date: {doc['date']}; 2 x 16 heads, bf16, causal; CUDA graph replays; "
          "median (20th-80th percentile), us", "",
          f"Checks against float64: {ok} of {len(doc['checks'])} within tolerance.", "",
          "| d | L | kernel | configuration | time | over plain causal |", "|---|---|---|---|---|---|"]
    plain = {(r["d"], r["seq"]): r["time_s"] for r in doc["rows"] if r["kernel"] == "causal_attention"}
    for r in doc["rows"]:
        c = r["config"]
        label = "launched" if c is None else f"{c['WARPGROUPS']}x{c['BLOCK_X']} {c['OVERLAP']}"
        spread = f"({r['time_s_p20'] * 1e6:.1f}-{r['time_s_p80'] * 1e6:.1f})"
        md.append(f"| {r['d']} | {r['seq']} | {r['kernel']} | {label} | {r['time_s'] * 1e6:.1f} {spread} | "
                  f"{r['time_s'] / plain[r['d'], r['seq']]:.3f} |")
    return "\n".join(md) + "\n"


if __name__ == "__main__":
    raise SystemExit(main())
