"""Gemma 2's local attention (scores softcapped at 50, then causal with a sliding window of 4096 keys) from
its diagram, diagrams/gemma2_local_attention.yaml, beside FlashAttention-4 and FlexAttention with the same
cap and window, on one GPU, in one run: correctness first, then timing.

1. Checks (before any timing), against float64 on the GPU: the Hopper module napkin kernel generates
   for the diagram, and for copies of it with windows of 1 and 100 keys (so that short lengths cross the
   window's left edge), at head dims 64, 128 and 256, lengths 1, 17, 1000 and 4096 (and 5000, past the
   4096 window), strided bf16 inputs, FlashAttention-3's outlier inputs, and each warpgroup count and
   overlap through config=; the portable Triton and CUDA modules of the 100-key copy; FlashAttention-4
   (`flash_attn.cute`, softcap=50, window_size=(w - 1, 0)) and FlexAttention (score_mod softcap, a
   block mask of the window), the peers timed below. Inputs are scaled by 8 so that the cap bends the
   scores; beside each error, that of attention without the window (a kernel that ignored it fails).
2. Timing, 2 x 16 heads, bf16, causal, head dim 128 (and 256 at 8k), lengths 2k to 16k: the Hopper
   module; its portable module; FlashAttention-4 with the cap and window, and plain causal;
   FlexAttention with both; napkin's plain causal attention on the Hopper path (what the cap and the
   window cost and save); SDPA's cuDNN backend, plain causal. The Hopper row beside the model's
   prediction for the configuration it launches.

    python bench/local_attention.py --gpu h100 --out bench/results

Writes local_attention_<gpu>.json and .md to --out after every step (a run cut short keeps what it
measured). FlashAttention-4 is optional: without `flash_attn.cute` its rows say so.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.budgeted import BudgetedRun, parse  # noqa: E402
from bench.common import (  # noqa: E402
    REP_MS,
    TOLERANCE,
    WARMUP_MS,
    attention_inputs,
    environment,
    fa4_softcap,
    hopper_predicted,
    log,
    ratio,
    reference_attention,
    rel_err,
)

DIAGRAM = "gemma2_local_attention"
BATCH, HEADS = 2, 16
SPREAD = 8.0               # checks' inputs scaled by this: scores of standard deviation SPREAD^2
SEQLENS = (8192, 4096, 16384, 2048)     # the target's length first: a run cut short keeps it
OVERLAPS = ("none", "inter", "intra", "inter+intra")


def diagram_text() -> dict:
    from analyzer.common import resources
    return yaml.safe_load(resources.resolve("diagrams", DIAGRAM, what="diagram", field="DIAGRAM").read_text())


def cap_and_window(data: dict) -> tuple[float, int]:
    """The diagram's cap and window, read from its ops (the peers are given the same)."""
    by = {o["primitive"]: o for o in data["ops"]}
    return float(by["softcap"]["cap"]), int(by["window_mask"]["window"])


class Run(BudgetedRun):
    """The run's modules, record and clock."""

    def __init__(self, args: argparse.Namespace, argv: list[str] | None) -> None:
        import torch

        from analyzer.codegen import generate
        self.torch = torch
        data = diagram_text()
        self.cap, self.window = cap_and_window(data)
        super().__init__(args, argv, "local_attention.py", markdown, environment=environment(), cap=self.cap,
                         window=self.window, checks=[], timing=[], skipped=[], peers={})
        # the diagram, and copies of it with narrower windows: the same ops, another number
        self.by_window, self.files = {}, {}
        for w in (1, 100, self.window):
            ops = [dict(o, window=w) if o["primitive"] == "window_mask" else o for o in data["ops"]]
            path = self.tmp / f"{DIAGRAM}_w{w}.yaml"
            path.write_text(yaml.safe_dump({**data, "ops": ops}, sort_keys=False))
            g = generate(DIAGRAM if w == self.window else str(path), args.gpu)
            assert g.backend == "hopper", f"{DIAGRAM} (window {w}) on {args.gpu} generated {g.backend}"
            self.files[w] = g
            self.by_window[w] = self.written(g, f"local_w{w}_hopper")
        self.hopper = self.by_window[self.window]
        self.causal_g = generate("causal_attention", args.gpu, dtype="bf16")
        assert self.causal_g.backend == "hopper"
        self.causal = self.written(self.causal_g, "local_causal_hopper")
        self.portable = self.written(generate(DIAGRAM, args.gpu, backend="triton"), "local_triton")
        narrow = str(self.tmp / f"{DIAGRAM}_w100.yaml")
        self.portable_100 = self.written(generate(narrow, args.gpu, backend="triton"), "local_w100_triton")
        self.cuda_100 = self.written(generate(narrow, args.gpu, backend="cuda"), "local_w100_cuda", ".cu")


def flex(cap: float, window: int):
    """FlexAttention with the cap as its score_mod and the window as its block mask (built once a shape)."""
    import torch
    from torch.nn.attention.flex_attention import create_block_mask, flex_attention

    def softcap(score, b, h, q_idx, kv_idx):
        return cap * torch.tanh(score / cap)

    def local(b, h, q_idx, kv_idx):
        return (q_idx >= kv_idx) & (q_idx - kv_idx < window)

    torch._dynamo.config.recompile_limit = 64      # one compile a shape
    compiled = torch.compile(flex_attention, dynamic=False)
    masks = {}

    def call(q, k, v):
        key = (q.shape[-2], k.shape[-2])
        if key not in masks:
            masks[key] = create_block_mask(local, None, None, key[0], key[1], device="cuda")
        return compiled(q, k, v, score_mod=softcap, block_mask=masks[key])
    return call


# ------------------------------------------------------------------------------------------ checks

def check_cases(window: int):
    cases = []
    for w in (1, 100, window):
        for d in (64, 128, 256):
            for seq in (1, 17, 1000, 4096) + ((5000,) if w == window else ()):
                cases.append({"w": w, "d": d, "seq": seq, "dtype": "bf16", "strided": False, "outlier": False,
                              "config": None})
    cases.append({"w": 100, "d": 128, "seq": 1000, "dtype": "bf16", "strided": True, "outlier": False, "config": None})
    cases.append({"w": window, "d": 128, "seq": 4500, "dtype": "fp16", "strided": True, "outlier": True,
                  "config": None})
    for n, chunk in ((1, 128), (2, 128), (3, 64)):
        for overlap in OVERLAPS:
            if n == 1 and "inter" in overlap:
                continue
            cases.append({"w": 100, "d": 128, "seq": 1000, "dtype": "bf16", "strided": False, "outlier": False,
                          "config": {"WARPGROUPS": n, "BLOCK_X": chunk, "STAGES": 2, "OVERLAP": overlap,
                                     "SCHEDULE": "tiles"}})
    return cases


def _check(run: Run, name: str, fn, c: dict, seed: int) -> bool:
    torch = run.torch
    dtype = {"fp16": torch.float16, "bf16": torch.bfloat16}[c["dtype"]]
    q, k, v = attention_inputs(torch, 2, 3, 3, c["seq"], c["seq"], c["d"], dtype, c["strided"], c["outlier"],
                               seed=seed)
    q = q * SPREAD
    ref = reference_attention(torch, q, k, v, True, False, run.cap, c["w"])
    plain = reference_attention(torch, q, k, v, True, False, run.cap)     # no window: what it must not give
    try:
        out = fn(q, k, v)
        torch.cuda.synchronize()
        err = rel_err(torch, out, ref)
        error = None
    except Exception as exc:  # noqa: BLE001 - a failure is a result of the check
        err, error = float("inf"), repr(exc)[:300]
    row = {**c, "kernel": name, "rel_err": err, "unwindowed_rel_err": rel_err(torch, plain, ref),
           "ok": err < TOLERANCE, "error": error}
    run.doc["checks"].append(row)
    log(f"check {name} w={c['w']} d={c['d']} L={c['seq']} {c['dtype']} config={c['config']}: {err:.2e} "
        f"(without the window {row['unwindowed_rel_err']:.2e}) {error or ''}")
    return row["ok"]


def checks(run: Run) -> bool:
    ok = True
    for i, c in enumerate(check_cases(run.window)):
        module = run.by_window[c["w"]]
        ok &= _check(run, "napkin hopper", lambda q, k, v, m=module, c=c: m.attention(q, k, v, causal=True,
                                                                                       config=c["config"]), c, i)
    base = {"d": 128, "seq": 1000, "dtype": "bf16", "strided": False, "outlier": False, "config": None}
    ok &= _check(run, "napkin triton", lambda q, k, v: run.portable_100.attention(q, k, v, causal=True),
                 {**base, "w": 100}, 101)
    for d in (64, 128):
        ok &= _check(run, "napkin cuda", lambda q, k, v: run.cuda_100.attention(q, k, v, causal=True),
                     {**base, "d": d, "w": 100}, 102 + d)
    ok &= _check(run, "napkin triton", lambda q, k, v: run.portable.attention(q, k, v, causal=True),
                 {**base, "seq": 5000, "w": run.window}, 103)
    peer = fa4_softcap(run.cap, run.window)
    run.doc["peers"]["flash_attn.cute"] = peer is not None
    for w in (100, run.window):
        seq = 1000 if w == 100 else 5000
        if peer is not None:
            ok &= _check(run, "FlashAttention-4", fa4_softcap(run.cap, w), {**base, "seq": seq, "w": w}, 200 + w)
        ok &= _check(run, "FlexAttention", flex(run.cap, w), {**base, "seq": seq, "w": w}, 300 + w)
    run.save()
    return ok


# ------------------------------------------------------------------------------------------ timing

def timing(run: Run) -> None:
    import torch.nn.functional as F
    import triton
    from torch.nn.attention import SDPBackend, sdpa_kernel

    from analyzer.config.scores import pairs
    from analyzer.diagram.interface import Band
    torch = run.torch
    local_fa4, causal_fa4 = fa4_softcap(run.cap, run.window), fa4_softcap(0.0, None)
    local_flex = flex(run.cap, run.window)
    for d, seqs in ((128, SEQLENS), (256, (8192,))):
        for seq in seqs:
            if run.left() < 0:
                run.doc["skipped"].append({"d": d, "seqlen": seq})
                continue
            q, k, v = (torch.randn(BATCH, HEADS, seq, d, device="cuda", dtype=torch.bfloat16) for _ in range(3))

            def sdpa():
                with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
                    return F.scaled_dot_product_attention(q, k, v, is_causal=True)

            timed = {"local_hopper": lambda: run.hopper.attention(q, k, v, causal=True),
                     "local_triton": lambda: run.portable.attention(q, k, v, causal=True),
                     "local_fa4": (lambda: local_fa4(q, k, v)) if local_fa4 else None,
                     "local_flex": lambda: local_flex(q, k, v),
                     "causal_hopper": lambda: run.causal.attention(q, k, v, causal=True),
                     "causal_fa4": (lambda: causal_fa4(q, k, v)) if causal_fa4 else None,
                     "causal_cudnn": sdpa}
            row = {"d": d, "seqlen": seq}
            local_flops = 4 * BATCH * HEADS * pairs(seq, seq, Band(run.window - 1, 0)) * d
            causal_flops = 4 * BATCH * HEADS * pairs(seq, seq, Band(None, 0)) * d
            for name, fn in timed.items():
                if fn is None:
                    row[name] = None
                    row[f"{name}_error"] = "flash_attn.cute is not installed"
                    continue
                try:
                    s = triton.testing.do_bench(fn, warmup=WARMUP_MS, rep=REP_MS) * 1e-3
                    flops = local_flops if name.startswith("local") else causal_flops
                    row[f"{name}_us"] = round(s * 1e6, 1)
                    row[name] = round(flops / s / 1e12, 1)
                except Exception as exc:  # noqa: BLE001
                    row[name] = None
                    row[f"{name}_error"] = repr(exc)[:200]
            for g, name in ((run.files[run.window], "local_hopper"), (run.causal_g, "causal_hopper")):
                label, s = hopper_predicted(run.profile, g, seq, d, "bf16", BATCH * HEADS)
                row[f"{name}_config"] = label
                row[f"{name}_predicted_us"] = round(s * 1e6, 1)
            log(f"timing d={d} L={seq}: " + ", ".join(f"{n} {row.get(f'{n}_us')} us" for n in timed))
            run.doc["timing"].append(row)
            run.save()
            del q, k, v
            torch.cuda.empty_cache()


# ------------------------------------------------------------------------------------------ report

def markdown(doc) -> str:
    env = doc["environment"]
    w = doc["window"]
    lines = [f"# Gemma 2's local attention (cap {doc['cap']:g}, causal, a {w}-key window) from its diagram "
             f"({env.get('gpu')})", "",
             f"Command: `{doc['command']}`  ", f"Date: {doc['date']}; GPU: {env.get('gpu')}; "
             f"torch {env.get('torch')}, triton {env.get('triton')}; timer: {doc['timer']}; "
             f"FlashAttention-4 installed: {doc['peers'].get('flash_attn.cute')}", ""]
    checks = doc["checks"]
    bad = [c for c in checks if not c["ok"]]
    lines += [f"## Checks against float64: {len(checks) - len(bad)} of {len(checks)} within {TOLERANCE:g}", "",
              f"Inputs: q scaled by {SPREAD:g}, so the cap of {doc['cap']:g} bends the scores; windows of 1, 100 and "
              f"{w} keys (copies of the diagram with another number). Beside each, the error of the same attention "
              "without the window.", ""]
    for c in bad:
        lines.append(f"- FAILED {c['kernel']} w={c['w']} d={c['d']} L={c['seq']} {c['dtype']} config={c['config']}: "
                     f"{c['rel_err']:.2e} {c.get('error') or ''}")
    worst = max((c["rel_err"] for c in checks), default=0.0)
    unwindowed = min((c["unwindowed_rel_err"] for c in checks if c["seq"] > c["w"]), default=0.0)
    lines += [f"Largest relative error: {worst:.2e}; where the window bites (L > w), attention without it is "
              f"off by at least {unwindowed:.2e}. Kernels checked: "
              f"{', '.join(sorted({c['kernel'] for c in checks}))}.", ""]
    lines += [f"## Timing: {BATCH} x 16 heads, bf16, causal (TFLOP/s of the pairs each attends: 4 b h d x "
              f"pairs; causal L^2/2, the window's exact count)", "",
              "| d | L | napkin local | FA4 local | Flex local | napkin local portable | napkin causal | FA4 causal "
              "| cuDNN causal | napkin / FA4 (local, us) | napkin / Flex | local / causal time (napkin) "
              "| the same, predicted | measured / predicted | config |",
              "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in doc["timing"]:
        def us(name):
            return r.get(f"{name}_us")
        lines.append(
            f"| {r['d']} | {r['seqlen']} | {us('local_hopper')} us | {us('local_fa4')} us | {us('local_flex')} us | "
            f"{us('local_triton')} us | {us('causal_hopper')} us | {us('causal_fa4')} us | {us('causal_cudnn')} us | "
            f"{ratio(us('local_fa4'), us('local_hopper'))} | {ratio(us('local_flex'), us('local_hopper'))} | "
            f"{ratio(us('local_hopper'), us('causal_hopper'))} | "
            f"{ratio(r.get('local_hopper_predicted_us'), r.get('causal_hopper_predicted_us'))} | "
            f"{ratio(us('local_hopper'), r.get('local_hopper_predicted_us'))} | {r.get('local_hopper_config')} |")
    lines += ["", "Speed ratios are the peer's time over napkin's (above 1: napkin is faster); local / causal is "
              "napkin's local time over its plain causal time at the same shape: what the cap costs and the "
              "window saves, measured and as the model predicts it."]
    if doc["skipped"]:
        lines += ["", f"Skipped (budget): {doc['skipped']}"]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    args = parse(argv, __doc__.splitlines()[0])
    run = Run(args, argv)
    ok = checks(run)
    if not ok:
        log("checks failed: no timing")
        run.save()
        return 1
    timing(run)
    run.save()
    return 0


if __name__ == "__main__":
    sys.exit(main())
