"""The Hopper attention family's variants swept on one GPU, beside their peers, in one run: the recording
that `napkin calibrate --kernel hopper ... --variants` fits each score op's cost on (docs/validation.md),
and the issue's targets for each variant measured against the fastest peer.

Variants: every shipped diagram the Hopper kernel realises beyond plain softmax attention (sigmoid, MLA
192/128, softcap, Gemma 2's softcap with a sliding window, ALiBi, an additive bias, sinks, a band), and
the two softmax diagrams they are measured against (mha, causal_attention), each generated for the GPU's
profile. What each variant computes is read off its generated module's chain of scores
(analyzer.config.scores.Scores: its cap, window, band, bias, slopes, sink), not written here.

1. Checks against float64 on the GPU, before any timing: each diagram's launched configuration at lengths
   1, 17, 1000 and 4096, strided bf16 inputs with FlashAttention-3's outliers; every configuration
   timed below at length 1000 (one in a thousand values 10x larger). A configuration that fails is
   recorded and not timed.
2. Timing, 2 x 16 heads, bf16, lengths 2k to 16k, head dims 64 and 128 (MLA: 192/128): per shape the
   model's first ranked configurations and a few further down its ranking (so that the fit sees
   configurations bound by the threads, the tensor cores and the loads), and the configuration the module
   launches by itself; each timed by CUDA graph replays (the kernel, not its Python launch). Peers at the
   same shapes: SDPA's cuDNN backend (softmax, causal, MLA's head dims, the bias as attn_mask),
   FlashAttention-4's CuTe forward for sm90 with the same softcap and window where it is installed.

    python bench/hopper_variants.py --gpu h100 [--out DIR] [--budget-s S] [--diagrams a,b] [--seqlens ...]

With --dtype fp8 the variants are the FP8 kernel's (mha and causal_attention in e4m3, quantised by the
module's quantize() before the timing, as FlashAttention-3 times its FP8): the recording that fits the
cost of rounding the probabilities to e4m3 (Scores.e4m3); its checks allow e4m3's rounding (FP8_TOLERANCE)
and use no outliers, which e4m3 cannot carry beside the rest of their block.

Writes hopper_variants_<gpu>.json (meta, checks, records, peers) and .md to --out after every diagram.
"""

from __future__ import annotations

import argparse
import datetime
import os
import sys
import tempfile
import time
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench.common import (  # noqa: E402
    FP8_TOLERANCE,
    TOLERANCE,
    Sampler,
    causal_bias,
    command,
    environment,
    fa4_softcap,
    import_file,
    launched_by,
    log,
    ratio,
    reference_attention,
    rel_err,
    save_results,
    sdpa_bias,
    timed,
)
from bench.hopper_sweep import steady  # noqa: E402

DIAGRAMS = ("mha", "causal_attention", "sigmoid_attention", "mla_attention", "softcap_attention",
            "gemma2_local_attention", "alibi_attention", "bias_attention", "sink_attention", "band_attention")
SEQLENS = (2048, 4096, 8192, 16384)
HEAD_DIMS = (128, 64)              # where the module configures one head dim only (MLA), that one
BATCH, HEADS = 2, 16
RANKS = (0, 1, 2, 3, 6, 10)        # the model's ranking positions timed at each shape
DTYPE = "bf16"
REP_MS = 20.0
SPREAD = 2.0                       # the bias's and the sinks' standard deviation


# ------------------------------------------------------------------------------ a variant, read off

@dataclass(frozen=True)
class Variant:
    """One diagram's Hopper module and what its scores do, as its generated file says."""

    diagram: str
    path: str                      # the written module
    causal: bool
    head_dims: tuple[int, ...]
    value_dim: int | None          # V's head dim where it has its own (MLA)
    reference: dict                # reference_attention's keywords the chain implies (sigmoid, cap, masks)
    extra: str | None              # the call's input beyond q, k, v: "slopes", "bias" or "sinks"
    dtype: str = DTYPE             # the kernel's element type (fp8: e4m3 inputs, bf16 ones quantised)
    chain: Any = None              # the generated module's chain of scores (analyzer.config.scores.Scores)

    def module(self):
        return import_file(Path(self.path), f"variant_{self.diagram}")


def read_off(diagram: str, gpu: str, tmp: Path, dtype: str = DTYPE) -> Variant:
    from analyzer.codegen import generate
    g = generate(diagram, gpu, dtype=dtype)
    assert g.backend == "hopper", f"{diagram} on {gpu} generated {g.backend}"
    path = tmp / f"variant_{diagram}.py"
    g.write(path)
    chain, causal = g.hopper.scores, g.roles.causal
    ref: dict[str, Any] = {"causal": causal, "sigmoid": not chain.softmax}
    cap = next((o.cap for o in chain.ops if o.cap is not None), None)
    if cap is not None:
        ref["softcap"] = float(cap)
    if chain.right not in (0, None) or (chain.window is not None and not causal):
        ref["band"] = (None if chain.window is None else chain.window - 1, chain.right)
    elif chain.window is not None:
        ref["window"] = chain.window
    extra = "slopes" if chain.slope else "bias" if chain.bias else "sinks" if chain.sink else None
    dims = tuple(sorted(import_file(path, f"probe_{diagram}").CONFIGS["flash"]))
    if g.hopper.value_dim:       # V's head dim of its own: the diagram's head dims alone (MLA's 192/128)
        dims = (g.expected.sizes[g.roles.head_dim],)
    return Variant(diagram, str(path), causal, dims, g.hopper.value_dim, ref, extra, dtype, chain)


def inputs(torch, v: Variant, batch: int, heads: int, seq: int, d: int, dtype, *, strided=False, outlier=False,
           seed=0) -> tuple[tuple, dict]:
    """(q, k, v, and the extra input if any) for the call, and the reference's keywords for them."""
    from bench.common import attention_inputs
    q, k, val = attention_inputs(torch, batch, heads, heads, seq, seq, d, dtype, strided, outlier, seed, v.value_dim)
    gen = torch.Generator(device="cuda").manual_seed(seed + 1)
    ref = dict(v.reference)
    if v.extra is None:
        return (q, k, val), ref
    if v.extra == "slopes":     # ALiBi's geometric slopes, 2^(-8 h / heads)
        x = torch.exp2(-8.0 * torch.arange(1, heads + 1, device="cuda") / heads).to(dtype)   # the inputs' dtype
        ref["slopes"] = x
    elif v.extra == "bias":     # a bias per head, shared by the batch entries
        x = (torch.randn(heads, seq, seq, device="cuda", generator=gen) * SPREAD).to(dtype)
        ref["bias"] = x
    else:
        x = (torch.randn(heads, device="cuda", generator=gen) * SPREAD).to(dtype)
        ref["sinks"] = x
    return (q, k, val, x), ref


def _warm(v: Variant, d: int, config: dict) -> dict:
    """Compile one configuration in a worker: one call on a small input (fills Triton's cache)."""
    import torch
    try:
        args, _ = inputs(torch, v, 1, 2, 300, d, torch.bfloat16)
        v.module().attention(*args, config=config)
        torch.cuda.synchronize()
        return {}
    except Exception as exc:  # noqa: BLE001 - a configuration that fails is data too
        return {"error": f"{type(exc).__name__}: {str(exc)[:300]}"}


# ------------------------------------------------------------------------------------------ the run

def parse(argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--gpu", default="h100", help="the profile the kernels are generated and ranked for")
    ap.add_argument("--out", type=Path, default=Path(os.environ.get("OUT", str(ROOT / "bench" / "results"))))
    ap.add_argument("--budget-s", type=float, default=480.0, help="stop timing after this many seconds")
    ap.add_argument("--diagrams", default=",".join(DIAGRAMS))
    ap.add_argument("--seqlens", default=",".join(map(str, SEQLENS)))
    ap.add_argument("--head-dims", default=",".join(map(str, HEAD_DIMS)))
    ap.add_argument("--workers", type=int, default=min(14, os.cpu_count() or 1))
    ap.add_argument("--merge", nargs="+", type=Path, help="join these hopper_variants_<gpu>.json files into --out")
    ap.add_argument("--dtype", default=DTYPE, choices=("bf16", "fp8"),
                    help="the kernels' element type (fp8: the FP8 kernel, on inputs quantised before the timing)")
    return ap.parse_args(argv)


def merge(args: argparse.Namespace, argv: list[str] | None) -> int:
    """One recording of several runs on one GPU: their checks, records and peers joined, each run's command
    kept in meta.merged_from (a run cut short by its budget is finished by another)."""
    import json
    docs = [json.loads(path.read_text()) for path in args.merge]
    gpus = {d["meta"]["gpu"] for d in docs}
    if len(gpus) != 1:
        raise SystemExit(f"--merge: the runs are of different GPUs ({', '.join(sorted(gpus))})")
    meta = {**docs[0]["meta"], "command": command("hopper_variants.py", argv),
            "merged_from": [{"command": d["meta"]["command"], "date": d["meta"]["date"]} for d in docs]}
    doc = {"meta": meta, **{k: [x for d in docs for x in d[k]] for k in ("checks", "records", "peers")}}
    covered = {r["diagram"] for r in doc["records"]} | {f"{r['diagram']} d={r['head_dim']} L={r['seq_q']}"
                                                      for r in doc["records"]}
    # what one run skipped and another measured is not skipped
    doc["skipped"] = [x for d in docs for x in d["skipped"] if x.split(":")[0] not in covered]
    save_results(args.out, f"hopper_variants_{args.gpu}", doc, markdown(doc))
    return 0


def ranked_configs(profile, v: Variant, d: int, seq: int, chain) -> list[tuple[int, dict, float]]:
    """(rank, config=, predicted seconds) at the RANKS positions of the model's ranking."""
    from analyzer.config.hopper import HopperParams, ranked
    order = ranked(profile, d, v.dtype, seq_q=seq, seq_k=seq, instances=BATCH * HEADS, causal=v.causal,
                   params=HopperParams.of(profile), scores=chain, value_dim=v.value_dim)
    return [(i, order[i][1].entry(), order[i][0]) for i in RANKS if i < len(order)]


def predicted(profile, v: Variant, d: int, seq: int, chain, config: dict) -> float:
    from analyzer.config.hopper import HopperParams, configuration, predicted_time
    c = configuration(profile, d, v.dtype, warpgroups=config["WARPGROUPS"], chunk=config["BLOCK_X"],
                      stages=config["STAGES"], overlap=config["OVERLAP"], schedule=config["SCHEDULE"],
                      causal=v.causal, value_dim=v.value_dim, scores=chain)
    return predicted_time(profile, c, d, v.dtype, seq_q=seq, seq_k=seq, instances=BATCH * HEADS, causal=v.causal,
                          params=HopperParams.of(profile), scores=chain, value_dim=v.value_dim)


def check(torch, v: Variant, module, d: int, seq: int, config: dict | None, *, strided=False, outlier=False,
          heads=3, seed=0) -> dict:
    args, ref_kw = inputs(torch, v, 1, heads, seq, d, torch.bfloat16, strided=strided, outlier=outlier, seed=seed)
    ref = reference_attention(torch, *args[:3], **ref_kw)
    row = {"diagram": v.diagram, "d": d, "seq": seq, "strided": strided, "outlier": outlier, "config": config}
    try:
        err = rel_err(torch, module.attention(*args, config=config), ref)
        row.update(rel_err=err, ok=err < (FP8_TOLERANCE if v.dtype == "fp8" else TOLERANCE))
    except Exception as exc:  # noqa: BLE001 - reported, not timed
        row.update(ok=False, error=f"{type(exc).__name__}: {str(exc)[:300]}")
    return row


def peers(torch, v: Variant, args: tuple) -> dict:
    """The peers' calls on the same inputs: SDPA's cuDNN backend where it computes the same attention,
    FlashAttention-4 where it does and is installed."""
    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend, sdpa_kernel
    q, k, val = args[:3]
    ref = v.reference
    out = {}
    plain = not ref["sigmoid"] and "softcap" not in ref and "band" not in ref and "window" not in ref
    if plain and v.extra is None:
        def cudnn():
            with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
                return F.scaled_dot_product_attention(q, k, val, is_causal=v.causal)
        out["cudnn"] = cudnn
    if plain and v.extra == "bias":
        mask = causal_bias(torch, args[3], v.causal)[None]
        out["cudnn"] = lambda: sdpa_bias(q, k, val, mask)
    if "softcap" in ref and not ref["sigmoid"] and v.extra is None and "band" not in ref:
        fa4 = fa4_softcap(ref["softcap"], ref.get("window"), v.causal)
        if fa4 is not None:
            out["fa4"] = lambda: fa4(q, k, val)
    return out


class Run:
    def __init__(self, args: argparse.Namespace, argv: list[str] | None) -> None:
        import torch
        import triton

        from analyzer import hardware
        self.torch, self.triton, self.args = torch, triton, args
        self.profile = hardware.load(args.gpu)
        self.start = time.monotonic()
        self.tmp = Path(tempfile.mkdtemp(prefix="napkin_variants_"))
        self.doc = {"meta": {"command": command("hopper_variants.py", argv),
                             "date": datetime.date.today().isoformat(), "profile": args.gpu, "dtype": args.dtype,
                             "timer": f"triton.testing.do_bench_cudagraph(fn, rep={REP_MS:g}); median, 20th and "
                                      "80th percentiles", **environment()},
                    "checks": [], "records": [], "peers": [], "skipped": []}
        self.doc["meta"]["gpu"] = torch.cuda.get_device_name()

    def left(self) -> float:
        return self.args.budget_s - (time.monotonic() - self.start)

    def save(self) -> None:
        fp8 = "_fp8" if self.args.dtype == "fp8" else ""
        save_results(self.args.out, f"hopper_variants{fp8}_{self.args.gpu}", self.doc, markdown(self.doc))


@dataclass
class Planned:
    """One variant's shapes and the configurations timed at each: (rank, config=, predicted seconds)."""

    variant: Variant
    chain: Any                                    # its Scores
    shapes: dict[tuple[int, int], list]           # (head dim, length) -> the RANKS rows
    errors: dict | None = None                    # (head dim, config items) -> a compile's error, if any

    @property
    def configs(self) -> list[tuple[int, tuple]]:
        return sorted({(d, tuple(sorted(c.items()))) for (d, _), rows in self.shapes.items() for _, c, _ in rows})


def plan(run: Run, v: Variant) -> Planned:
    from analyzer.config.hopper import scores
    from analyzer.config.kernels import configure_kernels
    chain = scores(configure_kernels(v.diagram, run.profile, dtype=v.dtype, sized=False, ranked=False, fp8=True))
    dims = [d for d in map(int, run.args.head_dims.split(",")) if d in v.head_dims] or list(v.head_dims[:1])
    seqs = list(map(int, run.args.seqlens.split(",")))
    return Planned(v, chain, {(d, s): ranked_configs(run.profile, v, d, s, chain) for d in dims for s in seqs})


def compile_all(run: Run, planned: list[Planned]) -> None:
    """Every configuration of every variant compiled once, in parallel, before anything is timed."""
    jobs = [(p, d, c) for p in planned for d, c in p.configs]
    began = time.monotonic()
    with ProcessPoolExecutor(max_workers=run.args.workers) as pool:
        found = list(pool.map(_warm, *zip(*[(p.variant, d, dict(c)) for p, d, c in jobs], strict=True)))
    for p in planned:
        p.errors = {}
    for (p, d, c), e in zip(jobs, found, strict=True):
        p.errors[(d, c)] = e
    log(f"compiled {len(jobs)} configurations in {time.monotonic() - began:.0f} s with {run.args.workers} workers")


def sweep(run: Run, p: Planned, sampler: Sampler) -> None:
    torch, v, chain = run.torch, p.variant, p.chain
    module = v.module()
    dims = sorted({d for d, _ in p.shapes})
    # checks: the launched configuration at the lengths, then each configuration at 1000
    for d in dims:
        for seq, strided, outlier in ((1, False, False), (17, False, False), (1000, True, True), (4096, False, True)):
            run.doc["checks"].append(check(torch, v, module, d, seq, None, strided=strided,
                                           outlier=outlier and v.dtype != "fp8"))
    bad = set()
    for d, c in p.configs:
        row = check(torch, v, module, d, 1000, dict(c), outlier=v.dtype != "fp8", heads=2, seed=3)
        if p.errors[(d, c)].get("error") and row["ok"]:
            row["compile_error"] = p.errors[(d, c)]["error"]
        run.doc["checks"].append(row)
        if not row["ok"]:
            bad.add((d, c))
            log(f"  check failed: {v.diagram} d={d} {dict(c)}: {row.get('error') or row.get('rel_err')}")
    for (d, seq), rows in p.shapes.items():
        if run.left() < 0:
            run.doc["skipped"].append(f"{v.diagram} d={d} L={seq}: out of budget")
            continue
        args, _ = inputs(torch, v, BATCH, HEADS, seq, d, torch.bfloat16)
        own = launched_by(module, lambda: module.attention(*args))
        if v.dtype == "fp8":     # e4m3 inputs and their scales, made once: the kernel is timed, not quantize()
            quantised, scales = module.quantize(*args[:3])

            def call(c):
                return module.attention(*quantised, descale=scales, config=c)
        else:
            def call(c):
                return module.attention(*args, config=c)
        if not any(c == own for _, c, _ in rows):
            rows = [*rows, (None, own, None)]
        steady(torch, lambda: call(own))      # the shape's first timing at the clock the rest meet
        for rank, config, _ in rows:
            key = (d, tuple(sorted(config.items())))
            base = {"kind": "variant", "diagram": v.diagram, "dtype": v.dtype, "head_dim": d, "value_dim": v.value_dim,
                    "causal": v.causal, "batch": BATCH, "heads_q": HEADS, "heads_kv": HEADS, "seq_q": seq,
                    "seq_k": seq, "config": config, "model_rank": rank, "launched": config == own,
                    "predicted_s": predicted(run.profile, v, d, seq, chain, config)}
            if key in bad:
                run.doc["records"].append({**base, "status": "error", "error": "failed its check"})
                continue
            try:
                t = timed(run.triton, lambda c=config: call(c), graph=True,
                          sampler=sampler, rep_ms=REP_MS)
                run.doc["records"].append({**base, **t, "status": "ok"})
            except Exception as exc:  # noqa: BLE001 - a configuration that fails is recorded
                torch.cuda.synchronize()
                run.doc["records"].append({**base, "status": "error", "error": f"{type(exc).__name__}: {exc}"[:300]})
        for name, fn in peers(torch, v, args).items():
            try:
                t = timed(run.triton, fn, graph=True, sampler=sampler, rep_ms=REP_MS)
                run.doc["peers"].append({"diagram": v.diagram, "head_dim": d, "seq": seq, "peer": name, **t})
            except Exception as exc:  # noqa: BLE001
                run.doc["peers"].append({"diagram": v.diagram, "head_dim": d, "seq": seq, "peer": name,
                                         "error": f"{type(exc).__name__}: {exc}"[:300]})
        args = quantised = scales = None      # the inputs freed before the next shape's
        torch.cuda.empty_cache()
        best = min((r["time_s"] for r in run.doc["records"] if r["status"] == "ok" and r["diagram"] == v.diagram
                    and r["head_dim"] == d and r["seq_q"] == seq), default=None)
        log(f"  {v.diagram} d={d} L={seq}: best {best and best * 1e6:.1f} us ({run.left():.0f} s left)")


# --------------------------------------------------------------------------------------- markdown

def summary(doc: dict) -> list[dict]:
    """Per diagram, head dim and length: the fastest configuration measured, the launched one, the
    model's prediction of the launched one and the peers."""
    out = {}
    for r in doc["records"]:
        if r["status"] != "ok":
            continue
        key = (r["diagram"], r["head_dim"], r["seq_q"])
        row = out.setdefault(key, {"diagram": r["diagram"], "d": r["head_dim"], "seq": r["seq_q"], "best_s": None})
        if row["best_s"] is None or r["time_s"] < row["best_s"]:
            row["best_s"] = r["time_s"]
        if r["launched"]:
            row.update(launched_s=r["time_s"], predicted_s=r["predicted_s"], config=r["config"])
    for p in doc["peers"]:
        key = (p["diagram"], p["head_dim"], p["seq"])
        if key in out and "time_s" in p:
            out[key][p["peer"]] = p["time_s"]
    return list(out.values())


def _us(x):
    return "-" if x is None else f"{x * 1e6:.1f}"


def markdown(doc: dict) -> str:
    meta = doc["meta"]
    checks = doc["checks"]
    ok = sum(c["ok"] for c in checks)
    worst = max((c.get("rel_err", 0) for c in checks if c["ok"]), default=0)
    lines = [f"# The Hopper attention family's variants ({meta['gpu']})", "",
             f"Command: `{meta['command']}`  ", f"Date: {meta['date']}; GPU: {meta['gpu']}; {DTYPE}; "
             f"2 x 16 heads; timer: {meta['timer']}", "",
             f"## Checks against float64: {ok} of {len(checks)} within {TOLERANCE}", "",
             f"Largest relative error of those within: {worst:.2e}", ""]
    lines += [f"- failed: {c['diagram']} d={c['d']} L={c['seq']} config={c['config']}: "
              f"{c.get('error') or c.get('rel_err')}" for c in checks if not c["ok"]]
    rows = summary(doc)
    by = {(r["diagram"], r["d"], r["seq"]): r for r in rows}
    lines += ["", "## Each variant: the launched configuration, the fastest measured, the model, the peers", "",
              "| diagram | d | L | launched | fastest measured | launched / fastest | predicted | measured / "
              "predicted | cuDNN | FA4 | config |", "|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['diagram']} | {r['d']} | {r['seq']} | {_us(r.get('launched_s'))} | {_us(r['best_s'])} | "
                     f"{ratio(r.get('launched_s'), r['best_s'])} | {_us(r.get('predicted_s'))} | "
                     f"{ratio(r.get('launched_s'), r.get('predicted_s'))} | {_us(r.get('cudnn'))} | "
                     f"{_us(r.get('fa4'))} | {r.get('config')} |")
    targets = [("sigmoid_attention", "mha", None, "sigmoid / softmax time (napkin, same shape)", 1 / 0.95),
               ("alibi_attention", "causal_attention", None, "ALiBi / plain causal time (napkin)", 1.15),
               ("mla_attention", "mla_attention", "cudnn", "napkin / cuDNN time", 1.0),
               ("bias_attention", "bias_attention", "cudnn", "napkin / cuDNN time (the bias as attn_mask)", 1 / 1.5),
               ("gemma2_local_attention", "gemma2_local_attention", "fa4", "napkin / FA4 time (softcap + window)",
                1 / 1.2)]
    lines += ["", "## Targets (the launched configuration's time over the reference's; at most the bound meets it)", "",
              "| target | d | L | ratio | bound | met |", "|---|---|---|---|---|---|"]
    for diagram, other, peer, what, bound in targets:
        for r in rows:
            if r["diagram"] != diagram or r.get("launched_s") is None:
                continue
            o = by.get((other, r["d"], r["seq"]), {})
            ref = o.get(peer) if peer else o.get("launched_s")
            if ref is None:
                continue
            x = r["launched_s"] / ref
            met = "yes" if x <= bound else "no"
            lines.append(f"| {what} | {r['d']} | {r['seq']} | {x:.2f} | {bound:.2f} | {met} |")
    if doc["skipped"]:
        lines += ["", "Skipped: " + "; ".join(doc["skipped"])]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    if args.merge:
        return merge(args, argv)
    run = Run(args, argv)
    import multiprocessing
    multiprocessing.set_start_method("spawn", force=True)
    planned = [plan(run, read_off(diagram, args.gpu, run.tmp, args.dtype)) for diagram in args.diagrams.split(",")]
    compile_all(run, planned)
    with Sampler() as sampler:
        for p in planned:
            if run.left() < 0:
                run.doc["skipped"].append(f"{p.variant.diagram}: out of budget")
                continue
            try:
                sweep(run, p, sampler)
            except Exception as exc:  # noqa: BLE001 - one variant's failure leaves the others' records
                run.doc["skipped"].append(f"{p.variant.diagram}: {type(exc).__name__}: {str(exc)[:200]}")
                log(f"{p.variant.diagram} failed: {exc}")
            run.save()
    run.save()
    return 0


if __name__ == "__main__":
    sys.exit(main())
