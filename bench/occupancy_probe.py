"""A probe of issue 34's short rows: one consumer warpgroup a block, two or three blocks an SM.

The Hopper kernel's register cap (maxnreg) gives one block the whole register file, so one block runs
an SM and nothing hides a tile's fixed costs (its first QK^T and last PV alone, its epilogue) but the
persistent schedule's next loads. The portable Triton kernel, several blocks an SM, is faster than
every Hopper configuration at head dim 64, causal, 512 tokens (bench/results/hopper_sweep_h100.json:
161.6 us against 187.0). This probe writes the generated module again with a lower cap for one
consumer warpgroup (BLOCKS blocks an SM: maxnreg = the register file over 2 BLOCKS warpgroups;
setmaxnreg gives the consumer what the producer's warpgroup leaves), checks each against SDPA and
times it beside the module's own configuration and SDPA's cuDNN backend, by CUDA graph replays, on
FlashAttention-3's short rows (16k tokens, hidden 2048; fp16).

    python bench/occupancy_probe.py --gpu h100 [--out DIR] [--workers N]

Writes occupancy_probe_<gpu>.json and .md to --out.
"""

from __future__ import annotations

import argparse
import datetime
import os
import re
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench.common import (  # noqa: E402
    TOLERANCE,
    Compile,
    command,
    environment,
    import_file,
    launched_by,
    log,
    precompile,
    rel_err,
    save_results,
    timed,
)

TOKENS, HIDDEN = 16384, 2048
SEQLENS = (512, 1024, 2048)
HEAD_DIMS = (64, 128)
BLOCKS = (1, 2, 3)
CHUNKS = (64, 128)
REP_MS = 20


def capped(text: str, blocks: int, profile) -> str:
    """The module's text with one consumer warpgroup's registers for `blocks` blocks an SM: each block two
    warpgroups (the consumer and the producer's), maxnreg the register file's share of a thread, the
    consumer setmaxnreg'd to that plus what the producer's warpgroup gives back. analyzer.config.hopper's
    register_cap and registers_per_consumer with the register file shared by `blocks` blocks."""
    from analyzer.config.hopper import PRODUCER_REGISTERS
    per_thread = profile.registers.per_sm // profile.divisors.mma_threads // blocks
    cap = min(per_thread // 2, profile.registers.per_thread_max + 1) // 8 * 8
    consumer = min(2 * cap - PRODUCER_REGISTERS, profile.registers.per_thread_max) // 8 * 8
    text = re.sub(r"^REGISTER_CAP = \{1: \d+", f"REGISTER_CAP = {{1: {cap}", text, count=1, flags=re.M)
    return re.sub(r"^CONSUMER_REGISTERS = \{1: \d+", f"CONSUMER_REGISTERS = {{1: {consumer}", text, count=1,
                  flags=re.M)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--gpu", default="h100")
    ap.add_argument("--out", type=Path, default=Path(os.environ.get("OUT", str(ROOT / "bench" / "results"))))
    ap.add_argument("--workers", type=int, default=min(14, os.cpu_count() or 1))
    ap.add_argument("--head-dims", default=",".join(map(str, HEAD_DIMS)))
    ap.add_argument("--seqlens", default=",".join(map(str, SEQLENS)))
    ap.add_argument("--blocks", default=",".join(map(str, BLOCKS)), help="blocks an SM to try (1: the module's own)")
    args = ap.parse_args(argv)
    head_dims, seqlens, blocks = (tuple(int(x) for x in text.split(",") if x)
                                  for text in (args.head_dims, args.seqlens, args.blocks))
    import torch
    import torch.nn.functional as F
    import triton
    from torch.nn.attention import SDPBackend, sdpa_kernel

    from analyzer import hardware
    from analyzer.codegen import generate
    if not torch.cuda.is_available():
        print("error: no CUDA device", file=sys.stderr)
        return 1
    profile = hardware.load(args.gpu)
    tmp = Path(tempfile.mkdtemp(prefix="napkin_occupancy_"))
    modules, paths = {}, {}
    for diagram in ("mha", "causal_attention"):
        g = generate(diagram, args.gpu)
        (path,) = g.write(tmp / f"occ_{diagram}.py")
        text = path.read_text()
        for b in sorted({1, *blocks}):
            p = tmp / f"occ_{diagram}_{b}.py"
            p.write_text(capped(text, b, profile) if b > 1 else text)
            paths[diagram, b] = p
            modules[diagram, b] = import_file(p, p.stem)
    configs = [{"WARPGROUPS": 1, "BLOCK_X": x, "STAGES": 2, "OVERLAP": "intra", "SCHEDULE": "tiles"} for x in CHUNKS]
    jobs = [Compile(str(paths[diagram, b]), paths[diagram, b].stem, "flash", c, "attention", d, diagram != "mha",
                    (16, 16, 16, 512, 512))
            for diagram in ("mha", "causal_attention") for b in sorted({1, *blocks}) for d in head_dims
            for c in configs]
    precompile(jobs, args.workers)
    doc = {"meta": {"command": command("occupancy_probe.py", argv), "date": datetime.date.today().isoformat(),
                    "profile": args.gpu, "timer": f"triton.testing.do_bench_cudagraph(fn, rep={REP_MS}), median",
                    **environment()},
           "caps": {b: capped("REGISTER_CAP = {1: 0}\nCONSUMER_REGISTERS = {1: 0}", b, profile) for b in blocks},
           "rows": []}
    began = time.monotonic()
    for d in head_dims:
        for seq in seqlens:
            for diagram in ("mha", "causal_attention"):
                causal = diagram != "mha"
                batch, heads = TOKENS // seq, HIDDEN // d
                q, k, v = (torch.randn(batch, heads, seq, d, device="cuda", dtype=torch.float16) for _ in range(3))
                ref = F.scaled_dot_product_attention(q, k, v, is_causal=causal)
                base = modules[diagram, 1]
                own = launched_by(base, lambda m=base: m.attention(q, k, v, causal=causal))
                calls = {"own " + "/".join(str(own[k_]) for k_ in ("WARPGROUPS", "BLOCK_X", "OVERLAP", "SCHEDULE")):
                         (lambda m=base, c=own: m.attention(q, k, v, causal=causal, config=c))}
                for b in sorted({1, *blocks}):
                    for c in configs:
                        calls[f"N=1 s_x={c['BLOCK_X']} blocks={b}"] = (
                            lambda m=modules[diagram, b], c=c: m.attention(q, k, v, causal=causal, config=c))

                def cudnn():
                    with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
                        return F.scaled_dot_product_attention(q, k, v, is_causal=causal)
                # cuDNN first and last: a row whose two differ by more than a few per cent was timed on a
                # GPU whose speed moved under it
                calls = {"cudnn": cudnn, **calls, "cudnn again": cudnn}
                row = {"d": d, "seq": seq, "causal": causal, "times_s": {}, "errors": {}}
                for name, fn in calls.items():
                    try:
                        err = rel_err(torch, fn(), ref)
                        if not err < TOLERANCE:
                            raise RuntimeError(f"relative error {err:.3g} against SDPA")
                        row["times_s"][name] = timed(triton, fn, graph=True, rep_ms=REP_MS)["time_s"]
                    except Exception as exc:  # noqa: BLE001 - a configuration that fails is a result
                        row["errors"][name] = f"{type(exc).__name__}: {str(exc)[:200]}"
                doc["rows"].append(row)
                save_results(args.out, f"occupancy_probe_{args.gpu}", doc, markdown(doc))
                best = min(row["times_s"].items(), key=lambda kv: kv[1])
                log(f"d={d} L={seq} causal={causal}: " + ", ".join(f"{n} {t * 1e6:.1f}" for n, t in
                                                                   row["times_s"].items()) + f"; best {best[0]}")
    log(f"done in {time.monotonic() - began:.0f} s")
    return 0


def markdown(doc: dict) -> str:
    meta = doc["meta"]
    out = [f"# One consumer warpgroup, several blocks an SM ({meta['gpu']})", "",
           f"`{meta['command']}`; {meta['date']}; torch {meta['torch']}, triton {meta['triton']}. "
           f"Timer: {meta['timer']}. Times in us; FlashAttention-3's grid (16k tokens, hidden 2048), fp16.", ""]
    names = list(dict.fromkeys(n for r in doc["rows"] for n in r["times_s"] if not n.startswith("own")))
    out += ["| d | L | causal | own | own us | " + " | ".join(names) + " | best napkin over cuDNN |",
            "|" + "---|" * (len(names) + 6)]
    for r in doc["rows"]:
        own = next((n for n in r["times_s"] if n.startswith("own")), "-")
        mine = [t for n, t in r["times_s"].items() if not n.startswith("cudnn")]
        cudnn = r["times_s"].get("cudnn")
        out.append(f"| {r['d']} | {r['seq']} | {'yes' if r['causal'] else 'no'} | {own[4:]} "
                   f"| {r['times_s'].get(own, 0) * 1e6:.1f} | "
                   + " | ".join(f"{r['times_s'][n] * 1e6:.1f}" if n in r["times_s"] else "-" for n in names)
                   + f" | {cudnn / min(mine):.3f} |" if mine and cudnn else " | - |")
    errors = [f"- d={r['d']} L={r['seq']} causal={r['causal']} {n}: {e}"
              for r in doc["rows"] for n, e in r["errors"].items()]
    return "\n".join(out + ([""] + errors if errors else []) + [""])


if __name__ == "__main__":
    sys.exit(main())
