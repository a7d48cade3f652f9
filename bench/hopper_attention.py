"""The Hopper kernels (napkin kernel --backend hopper, the default for Hopper profiles) against their peers
on one GPU, in one run: correctness first, then the FlashAttention-3 grid, then Section 6's experiment.

1. Checks (before any timing): every generated Hopper module (mha, causal_attention, gqa) against float64
   attention on the GPU: head dims 64, 128, 256; sequence lengths 1, 17, 1000, 4096 and unequal query and
   key lengths; outlier inputs; grouped heads; strided inputs (a transposed (batch, seqlen, heads, dim)
   view); fp16 and bf16; and every overlap and warpgroup count through config=.
2. The FlashAttention-3 grid (16k tokens, hidden 2048; hdim 64, 128, 256; seqlen 512 to 16k; causal and
   not; fp16, bf16 at hdim 128): the Hopper kernel with the model's configuration (no config=, no
   autotuning), today's portable Triton kernel (its own by-size choice), SDPA's cuDNN and FLASH backends.
3. Section 6 (docs/section6.md): at seqlen 8k, per head dim, the model's choice of warpgroups and chunk
   with each overlap (none, inter, intra, inter+intra) and one warpgroup without and with intra overlap,
   each timed next to the model's prediction with no overhead and with Section 6.3's 66 %; and, not
   causal, the other schedule (a block a tile, or persistent: a block an SM). At short sequences, the
   model's configuration with each schedule.

    python bench/hopper_attention.py --gpu h100 --out bench/results

Writes hopper_<gpu>.json and .md to --out after every step (a run cut short keeps what it measured).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.common import (  # noqa: E402
    REP_MS,
    TOLERANCE,
    WARMUP_MS,
    attention_inputs,
    command,
    environment,
    import_file,
    log,
    reference_attention,
    rel_err,
    save_results,
)

FA3_TOKENS, FA3_HIDDEN = 16384, 2048
SEQLENS = (512, 1024, 2048, 4096, 8192, 16384)
HEAD_DIMS = (64, 128, 256)
OVERLAPS = ("none", "inter", "intra", "inter+intra")
SECTION6_SEQLEN = 8192


def parse(argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--gpu", default="h100", help="the profile the kernels are generated for")
    ap.add_argument("--out", type=Path, default=Path("bench/results"))
    ap.add_argument("--budget-s", type=float, default=540.0, help="stop timing after this many seconds")
    ap.add_argument("--quick", action="store_true", help="seqlens 1k, 4k, 16k only")
    ap.add_argument("--timer", choices=("do_bench", "graph"), default="do_bench",
                    help="do_bench (a Python launch per call, L2 cleared between) or graph (CUDA graph replays)")
    ap.add_argument("--parts", default="checks,grid,schedules,section6",
                    help="which parts to run, comma-separated (the checks always run first)")
    return ap.parse_args(argv)


class Run:
    """The run's modules, record and clock."""

    def __init__(self, args: argparse.Namespace, argv: list[str] | None) -> None:
        import torch

        from analyzer.codegen import generate
        self.torch = torch
        self.args = args
        self.start = time.monotonic()
        self.tmp = Path("/tmp/napkin_hopper_bench")
        self.tmp.mkdir(parents=True, exist_ok=True)
        self.name = f"hopper_{args.gpu}"
        timer = (f"triton.testing.do_bench_cudagraph(rep={REP_MS})" if args.timer == "graph"
                 else f"triton.testing.do_bench(warmup={WARMUP_MS}, rep={REP_MS})")
        self.doc = {"command": command("hopper_attention.py", argv), "environment": environment(),
                    "profile": args.gpu, "timer": f"{timer}, median", "checks": [], "grid": [], "schedules": [], "section6": [], "skipped": []}
        self.hopper, self.triton, self.generated = {}, {}, {}
        for diagram in ("mha", "causal_attention", "gqa"):
            g = generate(diagram, args.gpu)
            assert g.backend == "hopper", f"{diagram} on {args.gpu} generated {g.backend}"
            self.generated[diagram] = g
            self.hopper[diagram] = self._load(g, f"hopper_{diagram}")
        for diagram in ("mha", "causal_attention"):
            self.triton[diagram] = self._load(generate(diagram, args.gpu, backend="triton"), f"triton_{diagram}")

    def _load(self, g, name):
        path = self.tmp / f"{name}.py"
        g.write(path)
        return import_file(path, name)

    def left(self) -> float:
        return self.args.budget_s - (time.monotonic() - self.start)

    def save(self) -> None:
        save_results(self.args.out, self.name, self.doc, markdown(self.doc))


# ------------------------------------------------------------------------------------------ checks

def check_cases():
    cases = []
    for diagram, causal in (("mha", False), ("causal_attention", True)):
        for d in HEAD_DIMS:
            for seq in (1, 17, 1000, 4096):
                cases.append(dict(diagram=diagram, causal=causal, d=d, seq_q=seq, seq_k=seq, heads_q=3, heads_kv=3,
                                  dtype="fp16", strided=False, outlier=seq == 1000, config=None))
        other = 1000 if causal else 300         # the causal diagram ties the key length to the queries'
        cases.append(dict(diagram=diagram, causal=causal, d=128, seq_q=other, seq_k=1000, heads_q=3, heads_kv=3,
                          dtype="bf16", strided=True, outlier=False, config=None))
        cases.append(dict(diagram=diagram, causal=causal, d=64, seq_q=1000, seq_k=1000 if causal else 333,
                          heads_q=3, heads_kv=3, dtype="bf16", strided=True, outlier=True, config=None))
    for d in HEAD_DIMS:
        cases.append(dict(diagram="gqa", causal=False, d=d, seq_q=1000, seq_k=1000, heads_q=8, heads_kv=2,
                          dtype="fp16", strided=d == 128, outlier=False, config=None))
    for n, chunk in ((1, 128), (2, 128), (3, 64)):
        for overlap in OVERLAPS:
            if n == 1 and "inter" in overlap:
                continue
            for diagram, causal in (("mha", False), ("causal_attention", True)):
                cases.append(dict(diagram=diagram, causal=causal, d=128, seq_q=1000, seq_k=1000, heads_q=3,
                                  heads_kv=3, dtype="fp16", strided=False, outlier=False,
                                  config={"WARPGROUPS": n, "BLOCK_X": chunk, "STAGES": 2, "OVERLAP": overlap,
                                          "SCHEDULE": "persistent" if n == 2 else "tiles"}))
    return cases


def checks(run: Run) -> bool:
    torch = run.torch
    ok = True
    for i, case in enumerate(check_cases()):
        dtype = {"fp16": torch.float16, "bf16": torch.bfloat16}[case["dtype"]]
        q, k, v = attention_inputs(torch, 2, case["heads_q"], case["heads_kv"], case["seq_q"], case["seq_k"], case["d"],
                         dtype, case["strided"], case["outlier"], seed=i)
        ref = reference_attention(torch, q, k, v, case["causal"], False)
        try:
            out = run.hopper[case["diagram"]].attention(q, k, v, causal=case["causal"], config=case["config"])
            torch.cuda.synchronize()
            err = rel_err(torch, out, ref)
        except Exception as exc:  # noqa: BLE001 - a failure is a result of the check
            err, out = float("inf"), repr(exc)[:300]
        row = {**case, "rel_err": err, "ok": err < TOLERANCE}
        if not row["ok"]:
            row["error"] = out if isinstance(out, str) else None
        ok &= row["ok"]
        run.doc["checks"].append(row)
        log(f"check {i}: {case['diagram']} d={case['d']} {case['seq_q']}x{case['seq_k']} {case['dtype']} "
            f"config={case['config']}: {err:.2e}")
    run.save()
    return ok


# ------------------------------------------------------------------------------------------ timing

def tflops(batch, heads, seq, d, causal, seconds):
    return 4 * batch * heads * seq * seq * d / seconds / 1e12 / (2 if causal else 1)


GRAPH = {"on": False}      # --timer graph: CUDA graph replays (the kernel without its Python launch)


def bench(triton, fn):
    if GRAPH["on"]:
        return triton.testing.do_bench_cudagraph(fn, rep=REP_MS) * 1e-3
    return triton.testing.do_bench(fn, warmup=WARMUP_MS, rep=REP_MS) * 1e-3


def grid(run: Run) -> None:
    import torch.nn.functional as F
    import triton
    from torch.nn.attention import SDPBackend, sdpa_kernel
    torch = run.torch
    seqlens = (1024, 4096, 16384) if run.args.quick else SEQLENS
    rows = [(d, seq, causal, "fp16") for d in (128, 64, 256) for seq in seqlens for causal in (False, True)]
    rows += [(128, seq, causal, "bf16") for seq in (4096, 16384) for causal in (False, True)]
    for d, seq, causal, dt in rows:
        if run.left() < 0:
            run.doc["skipped"].append({"grid": [d, seq, causal, dt]})
            continue
        batch, heads = FA3_TOKENS // seq, FA3_HIDDEN // d
        dtype = {"fp16": torch.float16, "bf16": torch.bfloat16}[dt]
        q, k, v = (torch.randn(batch, heads, seq, d, device="cuda", dtype=dtype) for _ in range(3))
        diagram = "causal_attention" if causal else "mha"
        hopper, portable = run.hopper[diagram], run.triton[diagram]
        size = {"batch": batch, "heads": heads, "h": heads, "q": seq, "x": seq, "d": d}
        chosen = hopper._sized(hopper.CONFIGS["flash"][d], size)
        row = {"d": d, "seqlen": seq, "causal": causal, "dtype": dt, "batch": batch, "heads": heads,
               "hopper_config": dict(chosen)}
        timed = {"hopper": lambda: hopper.attention(q, k, v, causal=causal),
                 "triton": lambda: portable.attention(q, k, v, causal=causal)}
        for name, backend in (("sdpa_cudnn", SDPBackend.CUDNN_ATTENTION), ("sdpa_flash", SDPBackend.FLASH_ATTENTION)):
            def sdpa(backend=backend):
                with sdpa_kernel(backend):
                    return F.scaled_dot_product_attention(q, k, v, is_causal=causal)
            timed[name] = sdpa
        for name, fn in timed.items():
            try:
                row[name] = round(tflops(batch, heads, seq, d, causal, bench(triton, fn)), 1)
            except Exception as exc:  # noqa: BLE001
                row[name] = None
                row[f"{name}_error"] = repr(exc)[:200]
        log(f"grid d={d} L={seq} causal={causal} {dt}: " + ", ".join(f"{n} {row[n]}" for n in timed))
        run.doc["grid"].append(row)
        run.save()


def schedules(run: Run) -> None:
    """Short sequences, not causal: the model's configuration with each schedule (a block a tile, or a
    block an SM taking tiles in turn)."""
    import triton
    torch = run.torch
    for d in HEAD_DIMS:
        for seq in (512, 1024, 2048):
            batch, heads = FA3_TOKENS // seq, FA3_HIDDEN // d
            hopper = run.hopper["mha"]
            size = {"batch": batch, "heads": heads, "h": heads, "q": seq, "x": seq, "d": d}
            chosen = hopper._sized(hopper.CONFIGS["flash"][d], size)
            q, k, v = (torch.randn(batch, heads, seq, d, device="cuda", dtype=torch.float16) for _ in range(3))
            for schedule in ("tiles", "persistent"):
                if run.left() < 0:
                    run.doc["skipped"].append({"schedule": [d, seq, schedule]})
                    continue
                entry = dict(chosen, SCHEDULE=schedule)
                seconds = bench(triton, lambda: hopper.attention(q, k, v, config=entry))
                row = {"d": d, "seqlen": seq, "config": entry, "model_choice": entry == chosen,
                       "measured": round(tflops(batch, heads, seq, d, False, seconds), 1)}
                log(f"schedule d={d} L={seq} {entry}: {row['measured']}")
                run.doc["schedules"].append(row)
                run.save()


def section6(run: Run) -> None:
    import triton

    from analyzer import hardware
    from analyzer.config import hopper as model
    torch = run.torch
    profile = hardware.load(run.args.gpu)
    seq = SECTION6_SEQLEN
    for d in HEAD_DIMS:
        batch, heads = FA3_TOKENS // seq, FA3_HIDDEN // d
        for causal in (False, True):
            diagram = "causal_attention" if causal else "mha"
            hopper = run.hopper[diagram]
            size = {"batch": batch, "heads": heads, "h": heads, "q": seq, "x": seq, "d": d}
            chosen = hopper._sized(hopper.CONFIGS["flash"][d], size)
            variants = [dict(chosen, OVERLAP=o) for o in OVERLAPS]
            variants += [dict(chosen, WARPGROUPS=1, OVERLAP=o) for o in ("none", "intra")]
            if not causal:
                variants.append(dict(chosen, SCHEDULE="persistent" if chosen["SCHEDULE"] == "tiles" else "tiles"))
            q, k, v = (torch.randn(batch, heads, seq, d, device="cuda", dtype=torch.float16) for _ in range(3))
            for entry in variants:
                if run.left() < 0:
                    run.doc["skipped"].append({"section6": [d, causal, entry]})
                    continue
                c = model.configuration(profile, d, "fp16", warpgroups=entry["WARPGROUPS"], chunk=entry["BLOCK_X"],
                                        stages=entry["STAGES"], overlap=entry["OVERLAP"],
                                        schedule=entry["SCHEDULE"], causal=causal)
                predicted = {o: tflops(batch, heads, seq, d, causal, model.predicted_time(
                    profile, c, d, "fp16", seq_q=seq, seq_k=seq, instances=batch * heads, causal=causal,
                    overhead=o)) for o in (0.0, model.OVERHEAD)}
                row = {"d": d, "seqlen": seq, "causal": causal, "config": entry, "legal": model.legal(profile, c),
                       "model_choice": entry == chosen, "predicted_o0": round(predicted[0.0], 1),
                       "predicted_o66": round(predicted[model.OVERHEAD], 1)}
                try:
                    seconds = bench(triton, lambda: hopper.attention(q, k, v, causal=causal, config=entry))
                    row["measured"] = round(tflops(batch, heads, seq, d, causal, seconds), 1)
                except Exception as exc:  # noqa: BLE001
                    row["measured"], row["error"] = None, repr(exc)[:200]
                log(f"section6 d={d} causal={causal} {entry}: {row['measured']} (model {row['predicted_o66']})")
                run.doc["section6"].append(row)
                run.save()


# ------------------------------------------------------------------------------------------ report

def markdown(doc) -> str:
    env = doc["environment"]
    out = [f"# Hopper attention kernels on {env.get('gpu')}", "",
           f"Command: `{doc['command']}`. torch {env.get('torch')}, triton {env.get('triton')}. "
           f"Timer: {doc['timer']}. TFLOP/s = 4 batch heads seqlen^2 hdim / time, halved when causal.", ""]
    checks = doc["checks"]
    if checks:
        bad = [c for c in checks if not c["ok"]]
        worst = max(c["rel_err"] for c in checks)
        out += ["## Checks against float64", "",
                f"{len(checks) - len(bad)} of {len(checks)} pass (||out - ref|| / ||ref|| < {TOLERANCE}); "
                f"largest error {worst:.2e}.", ""]
        out += [f"- FAILED: {c['diagram']} d={c['d']} {c['seq_q']}x{c['seq_k']} {c['dtype']} config={c['config']}: "
                f"{c.get('error') or c['rel_err']}" for c in bad]
        out.append("")
    if doc["grid"]:
        out += ["## The FlashAttention-3 grid (TFLOP/s)", "",
                "| hdim | seqlen | causal | dtype | Hopper (model's config) | config | Triton | SDPA cuDNN | SDPA flash "
                "| Hopper / cuDNN | Hopper / Triton |", "|---|---|---|---|---|---|---|---|---|---|---|"]
        for r in doc["grid"]:
            c = r["hopper_config"]
            label = f"N={c['WARPGROUPS']}, s_x={c['BLOCK_X']}, {c['STAGES']} st, {c['OVERLAP']}, {c['SCHEDULE']}"
            ratio = (lambda a, b: f"{a / b:.2f}" if a and b else "-")
            out.append(f"| {r['d']} | {r['seqlen']} | {'yes' if r['causal'] else 'no'} | {r['dtype']} | {r['hopper']} "
                       f"| {label} | {r['triton']} | {r['sdpa_cudnn']} | {r['sdpa_flash']} "
                       f"| {ratio(r['hopper'], r['sdpa_cudnn'])} | {ratio(r['hopper'], r['triton'])} |")
        out.append("")
    if doc.get("schedules"):
        out += ["## Schedules at short sequences (not causal, fp16, TFLOP/s)", "",
                "| hdim | seqlen | config | schedule | model's choice | measured |", "|---|---|---|---|---|---|"]
        for r in doc["schedules"]:
            c = r["config"]
            out.append(f"| {r['d']} | {r['seqlen']} | N={c['WARPGROUPS']}, s_x={c['BLOCK_X']}, {c['STAGES']} st, "
                       f"{c['OVERLAP']} | {c['SCHEDULE']} | {'yes' if r['model_choice'] else ''} | {r['measured']} |")
        out.append("")
    if doc["section6"]:
        out += [f"## Section 6: overlap at seqlen {SECTION6_SEQLEN} (fp16, TFLOP/s)", "",
                "| hdim | causal | N | s_x | stages | overlap | schedule | model's choice | measured "
                "| predicted (o = 0) | predicted (o = 0.66) |", "|---|---|---|---|---|---|---|---|---|---|---|"]
        for r in doc["section6"]:
            c = r["config"]
            out.append(f"| {r['d']} | {'yes' if r['causal'] else 'no'} | {c['WARPGROUPS']} | {c['BLOCK_X']} "
                       f"| {c['STAGES']} | {c['OVERLAP']} | {c['SCHEDULE']} | {'yes' if r['model_choice'] else ''} "
                       f"| {r['measured']} "
                       f"| {r['predicted_o0']} | {r['predicted_o66']} |")
        out.append("")
    if doc["skipped"]:
        out += [f"Skipped for the time budget: {len(doc['skipped'])} measurements.", ""]
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    GRAPH["on"] = args.timer == "graph"
    run = Run(args, argv)
    log(f"{run.doc['environment']['gpu']}: generated and imported in {time.monotonic() - run.start:.0f} s")
    if not checks(run):
        log("checks failed: nothing timed")
        return 1
    parts = set(args.parts.split(","))
    for name, part in (("grid", grid), ("schedules", schedules), ("section6", section6)):
        if name in parts:
            part(run)
    run.save()
    log(f"done in {time.monotonic() - run.start:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
