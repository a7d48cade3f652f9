"""Where the causal mask's time goes at short sequences (issue 34), and what the masked chunks' new text
buys: one GPU, fp16, in one run.

1. Checks against float64 (common.reference_attention): the masked diagrams (causal, a band of 256/256
   and one of 100/37, Gemma 2's softcap and window, its window cut to 300 keys so that tiles start on
   its left edge) and plain attention, at 17, 1000 and 4099 tokens of 2 x 4 heads and 1000 of 9 x 8
   (both orders of a persistent schedule's masked tiles), head dims 64 and 128, under four
   configurations (every schedule, 64- and 128-key chunks).
2. Timing, 4 x 16384 tokens of 32 heads (16 at head dim 128), by CUDA graph replays
   (triton.testing.do_bench_cudagraph, rep=20, the faster of two): the causal and unmasked kernels as
   generated now beside the modules of an earlier text where --before names them (a folder of
   causal.py and mha.py, each generated from diagrams/causal_attention.yaml and mha.yaml).

    python bench/causal_probe.py [--before DIR]   # one H200, about three minutes; time.txt, time.json to $OUT
    python bench/causal_probe.py --no-timing --only causal_attention,band_100_37   # some checks alone

The first run (bench/results/causal_probe_h200_before.txt) timed variants of the text of then with parts
of the mask's work taken out: the mask on every tile's first chunk and the masked steps' compares were
most of what the causal kernel spent beyond its chunks.
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import sys
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.band_attention import band_of, moved  # noqa: E402
from bench.common import TOLERANCE  # noqa: E402
from bench.local_attention import cap_and_window  # noqa: E402

CHECK_CONFIGS = ((2, 128, "persistent", "intra"), (2, 64, "prefetch", "intra"), (3, 64, "tiles", "inter+intra"),
                 (1, 128, "prefetch", "none"))      # N, s_x, schedule, overlap
TIME_CONFIGS = ((2, 128, "persistent"), (2, 64, "persistent"), (2, 128, "prefetch"), (2, 64, "prefetch"),
                (2, 128, "tiles"))                  # two stages, intra-warpgroup overlap
TOKENS = 4 * 16384


def diagrams(tmp: Path) -> dict[str, tuple[Path, dict]]:
    """The diagrams checked, by name: each file and what the float64 reference takes of its masks."""
    def written(data: dict, name: str) -> Path:
        data = {**data, "name": name}
        (tmp / f"{name}.yaml").write_text(yaml.safe_dump(data))
        return tmp / f"{name}.yaml"

    band = yaml.safe_load((ROOT / "diagrams/band_attention.yaml").read_text())
    gemma = yaml.safe_load((ROOT / "diagrams/gemma2_local_attention.yaml").read_text())
    cap, window = cap_and_window(gemma)
    cut = copy.deepcopy(gemma)
    next(op for op in cut["ops"] if op["primitive"] == "window_mask")["window"] = 300
    return {"mha": (ROOT / "diagrams/mha.yaml", {}),
            "causal_attention": (ROOT / "diagrams/causal_attention.yaml", {"causal": True}),
            "band_attention": (ROOT / "diagrams/band_attention.yaml", {"band": band_of(band)}),
            "band_100_37": (written(moved(band, 100, 37, False), "band_100_37"), {"band": (100, 37)}),
            "gemma2_local_attention": (ROOT / "diagrams/gemma2_local_attention.yaml",
                                       {"causal": True, "softcap": cap, "window": window}),
            "gemma2_window_300": (written(cut, "gemma2_window_300"), {"causal": True, "softcap": cap, "window": 300})}


def checks(torch, modules: dict, say) -> list[dict]:
    """Every masked diagram against float64 under CHECK_CONFIGS."""
    from bench.common import reference_attention, rel_err
    rows = []
    for name, (module, masks) in modules.items():
        for d in (64, 128):
            # 2 x 4 heads: the persistent blocks take the tiles longest first over the whole grid; 9 x 8 at
            # 1000 tokens: a head's tiles consecutive (a round holds fewer than four of each head: _attn_tile)
            for seq, batch, heads in ((17, 2, 4), (1000, 2, 4), (1000, 9, 8), (4099, 2, 4)):
                q, k, v = (torch.randn(batch, heads, seq, d, device="cuda", dtype=torch.float16) for _ in range(3))
                ref = reference_attention(torch, q, k, v, masks.get("causal", False), False,
                                          softcap=masks.get("softcap"), window=masks.get("window"),
                                          band=masks.get("band"))
                for n, chunk, schedule, overlap in CHECK_CONFIGS:
                    config = dict(WARPGROUPS=n, BLOCK_X=chunk, STAGES=2, OVERLAP=overlap, SCHEDULE=schedule)
                    out = module.attention(q, k, v, causal=masks.get("causal", False), config=config)
                    err = rel_err(torch, out, ref)
                    rows.append({"diagram": name, "d": d, "seq": seq, "batch": batch, "heads": heads,
                                 "config": config, "rel_err": err,
                                 "ok": bool(err < TOLERANCE)})
        bad = [r for r in rows if r["diagram"] == name and not r["ok"]]
        say(f"check {name}: {sum(r['diagram'] == name for r in rows) - len(bad)} ok, {len(bad)} beyond {TOLERANCE}"
            + "".join(f"\n  d={r['d']} seq={r['seq']} {r['batch']}x{r['heads']} {r['config']}: {r['rel_err']:.3g}"
                      for r in bad))
    return rows


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--before", type=Path, help="a folder of causal.py and mha.py generated from an earlier text")
    parser.add_argument("--no-checks", action="store_true", help="time only (the checks: 192 cases against float64)")
    parser.add_argument("--only", help="check these diagrams alone (comma-separated names of `diagrams`)")
    parser.add_argument("--no-timing", action="store_true", help="checks only")
    args = parser.parse_args()
    import torch
    import triton

    from analyzer.codegen import generate
    from analyzer.codegen.files import import_file
    out = Path(os.environ.get("OUT", "/tmp/out"))
    mods = out / "mods"
    mods.mkdir(parents=True, exist_ok=True)
    loaded = {}
    for name, (path, masks) in diagrams(mods).items():
        if args.no_checks and name not in ("mha", "causal_attention"):
            continue
        for_timing = name in ("mha", "causal_attention") and not args.no_timing
        if args.only and name not in args.only.split(",") and not for_timing:
            continue
        generate(str(path), "h200", dtype="fp16").write(mods / f"{name}.py")
        loaded[name] = (import_file(mods / f"{name}.py", f"probe_{name}"), masks)
    results = {"gpu": torch.cuda.get_device_name(), "checks": [], "us": {}}
    with open(out / "time.txt", "w") as log:
        def say(line: str) -> None:
            print(line, flush=True)
            print(line, file=log, flush=True)

        say(f"{results['gpu']}; fp16")
        if not args.no_checks:
            results["checks"] = checks(torch, {n: m for n, m in loaded.items()
                                               if not args.only or n in args.only.split(",")}, say)
        if args.no_timing:
            (out / "time.json").write_text(json.dumps(results, indent=1))
            return 0 if all(r["ok"] for r in results["checks"]) else 1
        timed = {"causal": loaded["causal_attention"][0], "mha": loaded["mha"][0]}
        if args.before:
            for name in ("causal", "mha"):
                timed[f"{name} before"] = import_file(args.before / f"{name}.py", f"before_{name}")
        say("microseconds, 4 x 16384 tokens")
        for d, heads, length in ((64, 32, 512), (64, 32, 1024), (128, 16, 512)):
            batch = TOKENS // length
            q, k, v = (torch.randn(batch, heads, length, d, device="cuda", dtype=torch.float16) for _ in range(3))
            for n, chunk, schedule in TIME_CONFIGS:
                config = dict(WARPGROUPS=n, BLOCK_X=chunk, STAGES=2, OVERLAP="intra", SCHEDULE=schedule)
                times = {}
                for name, module in timed.items():
                    def call(module=module, causal=name.startswith("causal")):
                        return module.attention(q, k, v, causal=causal, config=config)
                    call()
                    times[name] = 1e3 * min(triton.testing.do_bench_cudagraph(call, rep=20) for _ in range(2))
                key = f"d={d} L={length} N={n} s_x={chunk} {schedule}"
                results["us"][key] = times
                say(f"{key}: " + ", ".join(f"{name} {us:.0f}" for name, us in times.items()))
    (out / "time.json").write_text(json.dumps(results, indent=1))
    return 0 if all(r["ok"] for r in results["checks"]) else 1


if __name__ == "__main__":
    raise SystemExit(main())
