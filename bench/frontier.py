"""napkin's Hopper attention beside the fastest peers at every shape issue 34 names, in one run: the
FlashAttention-3 grid and real models' short shapes, against SDPA's cuDNN backend and FlashAttention-4's
CuTe forward for sm90 (FlashAttention-3's design), with the model's prediction of each launched
configuration.

1. Checks against float64 on the GPU, before any timing: the configuration each module launches by
   itself for mha, causal_attention and gqa (fp16 and bf16; lengths 1, 17, 577, 1000 with outliers and
   strided inputs, 4096; 4096 queries against 77 keys), and every shipped Hopper diagram (causal, sigmoid,
   MLA 192/128, softcaps, Gemma 2's window, ALiBi, a bias, sinks, a band; bench/hopper_variants.py reads
   what each computes off its module) with each persistent schedule forced where it fits (persistent,
   prefetch), at 17 and 1000, since the model launches them at short sequences (under a mask, the
   tiles longest first in boustrophedon rounds).
2. The grid: 16k tokens, hidden 2048; head dims 64, 128, 256; lengths 512 to 16k; causal and not; fp16
   (bf16 at head dim 128, 4k and 16k). Each kernel is timed by CUDA graph replays, which leave the
   host out (its Python launch is bench/host_cost.py's), in ROUNDS rounds in turn; the faster round's
   median is reported for every kernel alike.
3. Real shapes: ViT-L/14 at 336 px (577 tokens), BERT-large (512 tokens), Stable Diffusion XL's
   cross-attention (4096 queries against 77 text tokens), as bench/shapes.py's REAL_SHAPES gives them.

napkin's module is the one `napkin kernel` writes for the profile (its own configuration: no config=).
FlashAttention-4 gets its own layout, (batch, seqlen, heads, dim) contiguous, made before timing
(`../shared/reference/peers-on-the-gpu.md` says how to install it on a GPU machine without network).

    python bench/frontier.py --gpu h100 [--out DIR] [--budget-s S] [--parts checks,grid,shapes]

Writes frontier_<gpu>.json and .md to --out after every row.
"""

from __future__ import annotations

import argparse
import datetime
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench.common import (  # noqa: E402
    TOLERANCE,
    attention_inputs,
    command,
    environment,
    import_file,
    launched_by,
    log,
    ratio,
    reference_attention,
    rel_err,
    save_results,
    timed,
)
from bench.shapes import REAL_SHAPES  # noqa: E402

TOKENS, HIDDEN = 16384, 2048                     # FlashAttention-3's forward benchmark
SEQLENS = (512, 1024, 2048, 4096, 8192, 16384)
HEAD_DIMS = (128, 64, 256)
ROUNDS = 2
REP_MS = 20.0
VARIANTS = ("causal_attention", "sigmoid_attention", "mla_attention", "softcap_attention", "gemma2_local_attention",
            "alibi_attention", "bias_attention", "sink_attention", "band_attention")   # every shipped Hopper diagram
CUDNN_AT_LEAST, FA4_AT_LEAST, FA4_MEDIAN = 1.0, 0.95, 1.0     # issue 34's targets, napkin's speed over each


def parse(argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--gpu", default="h100", help="the profile the kernels are generated and ranked for")
    ap.add_argument("--out", type=Path, default=Path(os.environ.get("OUT", str(ROOT / "bench" / "results"))))
    ap.add_argument("--budget-s", type=float, default=480.0, help="stop timing after this many seconds")
    ap.add_argument("--parts", default="checks,grid,shapes")
    ap.add_argument("--workers", type=int, default=min(14, os.cpu_count() or 1))
    return ap.parse_args(argv)


class Run:
    def __init__(self, args: argparse.Namespace, argv: list[str] | None) -> None:
        import torch
        import triton

        from analyzer import hardware
        from analyzer.codegen import generate
        self.torch, self.triton, self.args = torch, triton, args
        self.profile = hardware.load(args.gpu)
        self.start = time.monotonic()
        self.tmp = Path(tempfile.mkdtemp(prefix="napkin_frontier_"))
        self.modules = {}
        for diagram in ("mha", "causal_attention", "gqa"):
            g = generate(diagram, args.gpu)
            assert g.backend == "hopper", f"{diagram} on {args.gpu} generated {g.backend}"
            g.write(self.tmp / f"frontier_{diagram}.py")
            self.modules[diagram] = import_file(self.tmp / f"frontier_{diagram}.py", f"frontier_{diagram}")
        self.doc = {"meta": {"command": command("frontier.py", argv), "date": datetime.date.today().isoformat(),
                             "profile": args.gpu, "timer": f"triton.testing.do_bench_cudagraph(fn, rep={REP_MS:g}), "
                                                           f"median; the faster of {ROUNDS} rounds",
                             **environment(), "gpu": torch.cuda.get_device_name()},
                    "checks": [], "grid": [], "shapes": [], "skipped": []}
        try:
            from flash_attn.cute import flash_attn_func
            self.fa4 = flash_attn_func
        except ImportError as exc:
            self.fa4 = None
            self.doc["meta"]["fa4"] = f"not installed: {exc}"

    def left(self) -> float:
        return self.args.budget_s - (time.monotonic() - self.start)

    def save(self) -> None:
        save_results(self.args.out, f"frontier_{self.args.gpu}", self.doc, markdown(self.doc))


# ------------------------------------------------------------------------------------------ checks

def checks(run: Run) -> bool:
    torch = run.torch
    cases = [(diagram, causal, d, sq, sk, dt, strided, outlier)
             for diagram, causal in (("mha", False), ("causal_attention", True), ("gqa", False))
             for d in HEAD_DIMS for dt in ("fp16", "bf16")
             for sq, sk, strided, outlier in ((1, 1, False, False), (17, 17, False, False), (577, 577, False, False),
                                              (1000, 1000, True, True), (4096, 4096, False, False),
                                              (4096, 77, False, False))
             if not (causal and sq != sk)]
    for i, (diagram, causal, d, sq, sk, dt, strided, outlier) in enumerate(cases):
        heads_q, heads_kv = (8, 2) if diagram == "gqa" else (3, 3)
        dtype = {"fp16": torch.float16, "bf16": torch.bfloat16}[dt]
        q, k, v = attention_inputs(torch, 2, heads_q, heads_kv, sq, sk, d, dtype, strided, outlier, seed=i)
        row = {"diagram": diagram, "d": d, "seq_q": sq, "seq_k": sk, "dtype": dt, "strided": strided,
               "outlier": outlier, "config": "launched"}
        module = run.modules[diagram]
        try:
            row["config"] = launched_by(module, lambda: module.attention(q, k, v, causal=causal))
            err = rel_err(torch, module.attention(q, k, v, causal=causal), reference_attention(torch, q, k, v,
                                                                                                 causal, False))
            row.update(rel_err=err, ok=err < TOLERANCE)
        except Exception as exc:  # noqa: BLE001 - a failed check is a result
            row.update(ok=False, error=f"{type(exc).__name__}: {str(exc)[:300]}")
        run.doc["checks"].append(row)
        run.save()      # each row as it comes: a run stopped from outside keeps what it checked
    persistent_checks(run)
    bad = [c for c in run.doc["checks"] if not c["ok"]]
    for c in bad:
        log(f"check failed: {c}")
    log(f"checks: {len(run.doc['checks']) - len(bad)} of {len(run.doc['checks'])} within {TOLERANCE}")
    return not bad


# The persistent checks' heads at each length: tiles enough that every block takes several (two to four on
# 132 SMs), so that the prefetch schedule runs tiles after one another as one pipeline
PIPELINED_HEADS = {17: 400, 1000: 48}


def persistent_checks(run: Run) -> None:
    """Every shipped Hopper diagram, its model's configuration at 17 and 1000 with each persistent schedule
    forced where it fits (prefetch's second query buffer and output buffer take SMEM; bench/hopper_variants.py's
    reading of what each computes, and its check), on PIPELINED_HEADS heads: each row into the run's checks
    as it comes."""
    from analyzer.config.hopper import PERSISTENT_SCHEDULES, configuration, legal
    from bench.hopper_variants import check, inputs, read_off
    for diagram in VARIANTS:
        v = read_off(diagram, run.args.gpu, run.tmp)
        module = v.module()
        for d in v.head_dims:
            for seq in (17, 1000):
                args, _ = inputs(run.torch, v, 1, 3, seq, d, run.torch.bfloat16)
                own = launched_by(module, lambda a=args: module.attention(*a))
                for schedule in PERSISTENT_SCHEDULES:
                    c = configuration(run.profile, d, "bf16", warpgroups=own["WARPGROUPS"], chunk=own["BLOCK_X"],
                                      stages=own["STAGES"], overlap=own["OVERLAP"], schedule=schedule,
                                      causal=v.causal, value_dim=v.value_dim, scores=v.chain)
                    if legal(run.profile, c):
                        run.doc["checks"].append(check(run.torch, v, module, d, seq, dict(own, SCHEDULE=schedule),
                                                       outlier=seq == 1000, heads=PIPELINED_HEADS[seq]))
                        run.save()


# ------------------------------------------------------------------------------------------ timing

def tflops(batch: int, heads: int, sq: int, sk: int, d: int, causal: bool, seconds: float) -> float:
    return 4 * batch * heads * sq * sk * d / seconds / 1e12 / (2 if causal else 1)


def row_of(run: Run, batch: int, heads: int, sq: int, sk: int, d: int, causal: bool, dt: str) -> dict:
    """One shape: napkin's module (its own configuration), cuDNN and FlashAttention-4, each timed ROUNDS
    times in turn; the model's prediction of the configuration napkin launched."""
    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend, sdpa_kernel

    from analyzer.config.hopper import HopperParams, configuration, predicted_time
    torch = run.torch
    dtype = {"fp16": torch.float16, "bf16": torch.bfloat16}[dt]
    q = torch.randn(batch, heads, sq, d, device="cuda", dtype=dtype)
    k, v = (torch.randn(batch, heads, sk, d, device="cuda", dtype=dtype) for _ in range(2))
    module = run.modules["causal_attention" if causal else "mha"]
    config = launched_by(module, lambda: module.attention(q, k, v, causal=causal))
    c = configuration(run.profile, d, dt, warpgroups=config["WARPGROUPS"], chunk=config["BLOCK_X"],
                      stages=config["STAGES"], overlap=config["OVERLAP"], schedule=config["SCHEDULE"], causal=causal)
    predicted = predicted_time(run.profile, c, d, dt, seq_q=sq, seq_k=sk, instances=batch * heads, causal=causal,
                               params=HopperParams.of(run.profile))

    def cudnn():
        with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
            return F.scaled_dot_product_attention(q, k, v, is_causal=causal)
    calls = {"napkin": lambda: module.attention(q, k, v, causal=causal), "cudnn": cudnn}
    if run.fa4 is not None:
        q4, k4, v4 = (x.transpose(1, 2).contiguous() for x in (q, k, v))
        calls["fa4"] = lambda: run.fa4(q4, k4, v4, causal=causal)[0]
    row = {"batch": batch, "heads": heads, "seq_q": sq, "seq_k": sk, "d": d, "causal": causal, "dtype": dt,
           "config": config, "predicted_s": predicted}
    times: dict[str, list[float]] = {name: [] for name in calls}
    for _ in range(ROUNDS):
        for name, fn in calls.items():
            try:
                times[name].append(timed(run.triton, fn, graph=True, rep_ms=REP_MS)["time_s"])
            except Exception as exc:  # noqa: BLE001 - a peer without this shape is data too
                row[f"{name}_error"] = f"{type(exc).__name__}: {str(exc)[:200]}"
    for name, ts in times.items():
        if ts:
            row[f"{name}_s"] = min(ts)
            row[f"{name}_rounds_s"] = ts
            row[f"{name}_tflops"] = tflops(batch, heads, sq, sk, d, causal, min(ts))
    return row


def grid_rows() -> list[tuple[int, int, bool, str]]:
    rows = [(d, seq, causal, "fp16") for d in HEAD_DIMS for seq in SEQLENS for causal in (False, True)]
    return rows + [(128, seq, causal, "bf16") for seq in (4096, 16384) for causal in (False, True)]


def precompile_rows(run: Run) -> None:
    """The configuration napkin's module launches at every timed fp16 shape, compiled first in worker
    processes at a shape Triton specialises alike (bench/hopper_sweep.py's `small`)."""
    from bench.common import Compile, precompile
    from bench.hopper_sweep import Shape, small
    timed_shapes = [(TOKENS // seq, HIDDEN // d, seq, seq, d, causal) for d, seq, causal, dt in grid_rows()
                    if dt == "fp16"]
    timed_shapes += [(b, h, sq, sk, d, False) for b, h, sq, sk, d in REAL_SHAPES.values()]
    jobs = []
    for batch, heads, sq, sk, d, causal in timed_shapes:
        diagram = "causal_attention" if causal else "mha"
        module = run.modules[diagram]
        size = {"batch": batch, "heads": heads, "h": heads, "q": sq, "x": sk, "d": d}
        config = dict(module._sized(module.CONFIGS["flash"][d], size))
        at = small(Shape("frontier", diagram, batch, heads, heads, sq, sk, d))
        jobs.append(Compile(str(run.tmp / f"frontier_{diagram}.py"), f"frontier_{diagram}", "flash", config,
                            "attention", d, causal, at))
    errors = {i: r["error"] for i, r in precompile(jobs, run.args.workers).items() if "error" in r}
    for i, error in errors.items():
        log(f"  compile failed: {jobs[i].config} d={jobs[i].head_dim}: {error}")


def grid(run: Run) -> None:
    for d, seq, causal, dt in grid_rows():
        if run.left() < 0:
            run.doc["skipped"].append(f"grid d={d} L={seq} causal={causal} {dt}")
            continue
        row = row_of(run, TOKENS // seq, HIDDEN // d, seq, seq, d, causal, dt)
        run.doc["grid"].append(row)
        log(f"grid d={d} L={seq} causal={causal} {dt}: napkin {_tf(row.get('napkin_tflops'))}, cuDNN "
            f"{_tf(row.get('cudnn_tflops'))}, FA4 {_tf(row.get('fa4_tflops'))} TFLOP/s {row['config']}")
        run.save()


def shapes(run: Run) -> None:
    for name, (batch, heads, sq, sk, d) in REAL_SHAPES.items():
        if run.left() < 0:
            run.doc["skipped"].append(name)
            continue
        row = {"shape": name, **row_of(run, batch, heads, sq, sk, d, False, "fp16")}
        run.doc["shapes"].append(row)
        log(f"{name}: " + ", ".join(f"{who} {row[key] * 1e6:.1f} us" if row.get(key) else f"{who} -"
                                    for who, key in (("napkin", "napkin_s"), ("cuDNN", "cudnn_s"), ("FA4", "fa4_s"))))
        run.save()


# ------------------------------------------------------------------------------------------ report

def _speed(row: dict, peer: str) -> float | None:
    """napkin's speed over the peer's: the peer's time over napkin's."""
    return row[f"{peer}_s"] / row["napkin_s"] if row.get(f"{peer}_s") and row.get("napkin_s") else None


def _config(c: dict) -> str:
    return f"N={c['WARPGROUPS']} s_x={c['BLOCK_X']} {c['STAGES']}st {c['OVERLAP']} {c['SCHEDULE']}"


def _x(x: float | None) -> str:
    """A speed to three decimals (two would show 0.996 as 1.00 beside a target of 1.0 missed)."""
    return "-" if x is None else f"{x:.3f}"


def _tf(x: float | None) -> str:
    """TFLOP/s, or "-" for a kernel that did not run (FlashAttention-4 not installed)."""
    return "-" if not x else f"{x:.0f}"


def _met(x: float | None, at_least: float) -> str:
    return "-" if x is None else "yes" if x >= at_least else "no"


def markdown(doc: dict) -> str:
    meta = doc["meta"]
    out = [f"# napkin's Hopper attention beside cuDNN and FlashAttention-4 ({meta['gpu']})", "",
           f"Command: `{meta['command']}`; {meta['date']}; torch {meta.get('torch')}, triton {meta.get('triton')}. "
           f"Timer: {meta['timer']}. TFLOP/s = 4 batch heads L_q L_k d / time, halved when causal. "
           "Speed = the peer's time over napkin's.", ""]
    if meta.get("fa4"):
        out += [f"FlashAttention-4: {meta['fa4']}", ""]
    if doc["checks"]:
        bad = [c for c in doc["checks"] if not c["ok"]]
        worst = max((c.get("rel_err", 0.0) for c in doc["checks"] if c["ok"]), default=0.0)
        forced = sorted({c["config"]["SCHEDULE"] for c in doc["checks"] if "seq" in c and c.get("config")})
        out += ["## Checks against float64", "", f"{len(doc['checks']) - len(bad)} of {len(doc['checks'])} within "
                f"{TOLERANCE} (largest {worst:.2e}); among them every shipped Hopper diagram with "
                f"{' and '.join(forced) or 'no'} schedule forced.", ""]
        out += [f"- FAILED: {c}" for c in bad] + ([""] if bad else [])
    if doc["grid"]:
        out += ["## The FlashAttention-3 grid", "",
                "| d | L | causal | dtype | napkin TFLOP/s | config | predicted / measured | cuDNN | FA4 "
                "| speed over cuDNN | over FA4 | >= 1.0 cuDNN | >= 0.95 FA4 |", "|" + "---|" * 13]
        for r in doc["grid"]:
            c, f = _speed(r, "cudnn"), _speed(r, "fa4")
            out.append(f"| {r['d']} | {r['seq_q']} | {'yes' if r['causal'] else 'no'} | {r['dtype']} "
                       f"| {_tf(r.get('napkin_tflops'))} | {_config(r['config'])} "
                       f"| {ratio(r['predicted_s'], r.get('napkin_s'))} | {_tf(r.get('cudnn_tflops'))} "
                       f"| {_tf(r.get('fa4_tflops'))} | {_x(c)} | {_x(f)} | {_met(c, CUDNN_AT_LEAST)} "
                       f"| {_met(f, FA4_AT_LEAST)} |")
        cs = [x for r in doc["grid"] if (x := _speed(r, "cudnn"))]
        fs = [x for r in doc["grid"] if (x := _speed(r, "fa4"))]
        errors = [abs(r["predicted_s"] / r["napkin_s"] - 1) for r in doc["grid"] if r.get("napkin_s")]
        out += ["", f"Over cuDNN: median {statistics.median(cs):.3f}, {sum(x >= CUDNN_AT_LEAST for x in cs)} of "
                f"{len(cs)} rows at >= {CUDNN_AT_LEAST}." if cs else "",
                f"Over FlashAttention-4: median {statistics.median(fs):.3f} (target >= {FA4_MEDIAN}), "
                f"{sum(x >= FA4_AT_LEAST for x in fs)} of {len(fs)} rows at >= {FA4_AT_LEAST}." if fs else "",
                f"The model's error on the launched configurations: median {100 * statistics.median(errors):.1f} %, "
                f"{sum(e > 0.10 for e in errors)} rows beyond 10 %." if errors else "", ""]
    if doc["shapes"]:
        out += ["## Real shapes (fp16, not causal)", "",
                "| shape | napkin us | config | predicted / measured | cuDNN us | FA4 us | speed over cuDNN "
                "| over FA4 | >= 1.0 cuDNN |", "|" + "---|" * 9]
        for r in doc["shapes"]:
            c, f = _speed(r, "cudnn"), _speed(r, "fa4")
            us = (lambda x: f"{x * 1e6:.1f}" if x else "-")
            out.append(f"| {r['shape']} ({r['seq_q']} x {r['seq_k']}, {r['heads']} heads, d {r['d']}) "
                       f"| {us(r.get('napkin_s'))} | {_config(r['config'])} "
                       f"| {ratio(r['predicted_s'], r.get('napkin_s'))} "
                       f"| {us(r.get('cudnn_s'))} | {us(r.get('fa4_s'))} | {_x(c)} | {_x(f)} "
                       f"| {_met(c, CUDNN_AT_LEAST)} |")
        out.append("")
    if doc["skipped"]:
        out += [f"Skipped for the time budget: {', '.join(doc['skipped'])}.", ""]
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    import torch
    if not torch.cuda.is_available():
        print("error: no CUDA device", file=sys.stderr)
        return 1
    run = Run(args, argv)
    parts = set(args.parts.split(","))
    precompile_rows(run)
    if "checks" in parts and not checks(run):
        log("checks failed: nothing timed")
        return 1
    for name, part in (("grid", grid), ("shapes", shapes)):
        if name in parts:
            part(run)
    run.save()
    log(f"done in {time.monotonic() - run.start:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
