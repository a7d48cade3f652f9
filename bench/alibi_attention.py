"""ALiBi (a linear bias on the scores from the positions, a slope a head) from its diagram,
diagrams/alibi_attention.yaml, beside napkin's own plain causal attention and FlexAttention with an ALiBi
score_mod, on one GPU, in one run: correctness first, then timing.

1. Checks (before any timing), against float64 on the GPU: the Hopper module napkin kernel generates
   for the diagram, and for a copy of it without the causal mask (ALiBi's - m |i - j| on both sides of
   the diagonal), at head dims 64, 128 and 256, lengths 1, 17, 1000 and 4096, strided bf16 inputs,
   FlashAttention-3's outlier inputs, slopes given per head (broadcast over the batch) and per batch
   entry and head, and each warpgroup count and overlap through config=; the portable Triton and CUDA
   modules; FlexAttention with ALiBi as its score_mod (the peer timed below). Slopes are ALiBi's
   geometric ones, 2^(-8 (h + 1) / H); beside each error, that of attention without the bias (a kernel
   that ignored it fails).
2. Timing, 2 x 16 heads, bf16, causal, head dim 128 (and 64 and 256 at 8k), lengths 2k to 16k: the
   Hopper module; its portable module; FlexAttention with the ALiBi score_mod and a causal block mask;
   napkin's plain causal attention on the Hopper path (what the bias costs); FlashAttention-4 and SDPA's
   cuDNN backend, plain causal. The Hopper rows beside the model's prediction for the configuration
   each launches.

    python bench/alibi_attention.py --gpu h100 --out bench/results

Writes alibi_attention_<gpu>.json and .md to --out after every step (a run cut short keeps what it
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
    hopper_predicted,
    log,
    ratio,
    reference_attention,
    rel_err,
)

DIAGRAM = "alibi_attention"
BATCH, HEADS = 2, 16
SEQLENS = (8192, 4096, 16384, 2048)     # the target's length first: a run cut short keeps it
OVERLAPS = ("none", "inter", "intra", "inter+intra")


def slopes_of(torch, heads: int):
    """ALiBi's slopes for `heads` heads (Press et al. 2022, for a power of two): 2^(-8 (h + 1) / heads)."""
    return torch.tensor([2.0 ** (-8 * (h + 1) / heads) for h in range(heads)], device="cuda")


def non_causal(data: dict) -> dict:
    """The diagram without its causal mask: the op after the mask takes the mask's input."""
    mask = next(o for o in data["ops"] if o["primitive"] == "causal_mask")
    ops = [dict(o, inputs=[mask["inputs"][0] if i == mask["name"] else i for i in o["inputs"]])
           for o in data["ops"] if o is not mask]
    return {**data, "name": f"{data['name']}_full", "ops": ops}


class Run(BudgetedRun):
    """The run's modules, record and clock."""

    def __init__(self, args: argparse.Namespace, argv: list[str] | None) -> None:
        import torch

        from analyzer.codegen import generate
        from analyzer.common import resources
        self.torch = torch
        super().__init__(args, argv, "alibi_attention.py", markdown, environment=environment(), checks=[], timing=[],
                         skipped=[], peers={})
        data = yaml.safe_load(resources.resolve("diagrams", DIAGRAM, what="diagram", field="DIAGRAM").read_text())
        full = self.tmp / f"{DIAGRAM}_full.yaml"
        full.write_text(yaml.safe_dump(non_causal(data), sort_keys=False))
        self.g = generate(DIAGRAM, args.gpu)
        assert self.g.backend == "hopper", f"{DIAGRAM} on {args.gpu} generated {self.g.backend}"
        self.hopper = self.written(self.g, "alibi_hopper")
        g_full = generate(str(full), args.gpu)
        assert g_full.backend == "hopper"
        self.full = self.written(g_full, "alibi_full_hopper")
        self.causal_g = generate("causal_attention", args.gpu, dtype="bf16")
        assert self.causal_g.backend == "hopper"
        self.causal = self.written(self.causal_g, "alibi_causal_hopper")
        self.portable = self.written(generate(DIAGRAM, args.gpu, backend="triton"), "alibi_triton")
        self.cuda = self.written(generate(DIAGRAM, args.gpu, backend="cuda"), "alibi_cuda", ".cu")


def flex(causal: bool = True):
    """FlexAttention with ALiBi as its score_mod (the slopes a tensor it indexes by head) and a causal
    block mask (built once a shape), as FlexAttention's own ALiBi example does."""
    import torch
    from torch.nn.attention.flex_attention import create_block_mask, flex_attention

    torch._dynamo.config.recompile_limit = 64      # one compile a shape
    compiled = torch.compile(flex_attention, dynamic=False)
    masks = {}

    def call(q, k, v, slopes):
        m = slopes.float()      # the bias in fp32, as napkin's kernels compute it

        def alibi(score, b, h, q_idx, kv_idx):
            return score - m[h] * (q_idx - kv_idx).abs()

        def lower(b, h, q_idx, kv_idx):
            return q_idx >= kv_idx

        key = (q.shape[-2], k.shape[-2])
        if causal and key not in masks:
            masks[key] = create_block_mask(lower, None, None, key[0], key[1], device="cuda")
        return compiled(q, k, v, score_mod=alibi, block_mask=masks[key] if causal else None)
    # the score_mod indexes slopes by head: (heads,), the same for every batch entry
    return lambda q, k, v, slopes: call(q, k, v, slopes if slopes.dim() == 1 else slopes[0])
    return call


def fa4():
    """FlashAttention-4's CuTe forward for sm90, plain causal; None where it is not installed."""
    try:
        from flash_attn.cute import flash_attn_func
    except ImportError:
        return None

    def call(q, k, v):
        out, _ = flash_attn_func(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), causal=True)
        return out.transpose(1, 2)
    return call


# ------------------------------------------------------------------------------------------ checks

def check_cases():
    cases = []
    for causal in (True, False):
        for d in (64, 128, 256):
            for seq in (1, 17, 1000, 4096):
                cases.append({"causal": causal, "d": d, "seq": seq, "dtype": "bf16", "strided": False,
                              "outlier": False, "slopes": "heads", "config": None})
    cases.append({"causal": True, "d": 128, "seq": 1000, "dtype": "bf16", "strided": True, "outlier": False,
                  "slopes": "batch x heads", "config": None})
    cases.append({"causal": True, "d": 128, "seq": 4500, "dtype": "fp16", "strided": True, "outlier": True,
                  "slopes": "heads", "config": None})
    for n, chunk in ((1, 128), (2, 128), (3, 64)):
        for overlap in OVERLAPS:
            if n == 1 and "inter" in overlap:
                continue
            cases.append({"causal": True, "d": 128, "seq": 1000, "dtype": "bf16", "strided": False,
                          "outlier": False, "slopes": "heads",
                          "config": {"WARPGROUPS": n, "BLOCK_X": chunk, "STAGES": 2, "OVERLAP": overlap,
                                     "SCHEDULE": "tiles" if n < 3 else "persistent"}})
    return cases


def _check(run: Run, name: str, fn, c: dict, seed: int) -> bool:
    torch = run.torch
    dtype = {"fp16": torch.float16, "bf16": torch.bfloat16}[c["dtype"]]
    heads = 4
    q, k, v = attention_inputs(torch, 2, heads, heads, c["seq"], c["seq"], c["d"], dtype, c["strided"],
                               c["outlier"], seed=seed)
    slopes = slopes_of(torch, heads)
    if c["slopes"] == "batch x heads":     # another slope for each batch entry
        slopes = torch.stack([slopes, slopes.flip(0)])
    slopes = slopes.to(dtype)               # the call's tensors share one element type (exact: powers of 2)
    ref = reference_attention(torch, q, k, v, c["causal"], False, slopes=slopes)
    plain = reference_attention(torch, q, k, v, c["causal"], False)     # no bias: what it must not give
    try:
        out = fn(q, k, v, slopes)
        torch.cuda.synchronize()
        err = rel_err(torch, out, ref)
        error = None
    except Exception as exc:  # noqa: BLE001 - a failure is a result of the check
        err, error = float("inf"), repr(exc)[:300]
    row = {**c, "kernel": name, "rel_err": err, "unbiased_rel_err": rel_err(torch, plain, ref),
           "ok": err < TOLERANCE, "error": error}
    run.doc["checks"].append(row)
    log(f"check {name} causal={c['causal']} d={c['d']} L={c['seq']} {c['dtype']} slopes={c['slopes']} "
        f"config={c['config']}: {err:.2e} (without the bias {row['unbiased_rel_err']:.2e}) {error or ''}")
    return row["ok"]


def checks(run: Run) -> bool:
    ok = True
    for i, c in enumerate(check_cases()):
        module = run.hopper if c["causal"] else run.full
        ok &= _check(run, "napkin hopper", lambda q, k, v, m, mod=module, c=c: mod.attention(
            q, k, v, m, causal=c["causal"], config=c["config"]), c, i)
    base = {"causal": True, "d": 128, "seq": 1000, "dtype": "bf16", "strided": False, "outlier": False,
            "slopes": "heads", "config": None}
    ok &= _check(run, "napkin triton", lambda q, k, v, m: run.portable.attention(q, k, v, m, causal=True), base, 101)
    for d in (64, 128):
        ok &= _check(run, "napkin cuda", lambda q, k, v, m: run.cuda.attention(q, k, v, m, causal=True),
                     {**base, "d": d}, 102 + d)
    ok &= _check(run, "FlexAttention", flex(), base, 300)
    run.doc["peers"]["flash_attn.cute"] = fa4() is not None
    run.save()
    return ok


# ------------------------------------------------------------------------------------------ timing

def timing(run: Run) -> None:
    import torch.nn.functional as F
    import triton
    from torch.nn.attention import SDPBackend, sdpa_kernel

    torch = run.torch
    peer, causal_fa4 = flex(), fa4()
    slopes = slopes_of(torch, HEADS).to(torch.bfloat16)
    for d, seqs in ((128, SEQLENS), (64, (8192,)), (256, (8192,))):
        for seq in seqs:
            if run.left() < 0:
                run.doc["skipped"].append({"d": d, "seqlen": seq})
                continue
            q, k, v = (torch.randn(BATCH, HEADS, seq, d, device="cuda", dtype=torch.bfloat16) for _ in range(3))

            def sdpa():
                with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
                    return F.scaled_dot_product_attention(q, k, v, is_causal=True)

            timed = {"alibi_hopper": lambda: run.hopper.attention(q, k, v, slopes, causal=True),
                     "alibi_triton": lambda: run.portable.attention(q, k, v, slopes, causal=True),
                     "alibi_flex": lambda: peer(q, k, v, slopes),
                     "causal_hopper": lambda: run.causal.attention(q, k, v, causal=True),
                     "causal_fa4": (lambda: causal_fa4(q, k, v)) if causal_fa4 else None,
                     "causal_cudnn": sdpa}
            row = {"d": d, "seqlen": seq}
            flops = 4 * BATCH * HEADS * seq * seq / 2 * d
            for name, fn in timed.items():
                if fn is None:
                    row[name] = None
                    row[f"{name}_error"] = "flash_attn.cute is not installed"
                    continue
                try:
                    s = triton.testing.do_bench(fn, warmup=WARMUP_MS, rep=REP_MS) * 1e-3
                    row[f"{name}_us"] = round(s * 1e6, 1)
                    row[name] = round(flops / s / 1e12, 1)
                except Exception as exc:  # noqa: BLE001
                    row[name] = None
                    row[f"{name}_error"] = repr(exc)[:200]
            for g, name in ((run.g, "alibi_hopper"), (run.causal_g, "causal_hopper")):
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
    lines = [f"# ALiBi attention (causal, a slope a head) from its diagram ({env.get('gpu')})", "",
             f"Command: `{doc['command']}`  ", f"Date: {doc['date']}; GPU: {env.get('gpu')}; "
             f"torch {env.get('torch')}, triton {env.get('triton')}; timer: {doc['timer']}; "
             f"FlashAttention-4 installed: {doc['peers'].get('flash_attn.cute')}", ""]
    checks = doc["checks"]
    bad = [c for c in checks if not c["ok"]]
    lines += [f"## Checks against float64: {len(checks) - len(bad)} of {len(checks)} within {TOLERANCE:g}", "",
              "Slopes 2^(-8 (h + 1) / H) per head (or another set per batch entry); the non-causal rows are a copy "
              "of the diagram without its mask. Beside each, the error of the same attention without the bias.", ""]
    for c in bad:
        lines.append(f"- FAILED {c['kernel']} causal={c['causal']} d={c['d']} L={c['seq']} {c['dtype']} "
                     f"config={c['config']}: {c['rel_err']:.2e} {c.get('error') or ''}")
    worst = max((c["rel_err"] for c in checks), default=0.0)
    unbiased = min((c["unbiased_rel_err"] for c in checks if c["seq"] > 1), default=0.0)
    lines += [f"Largest relative error: {worst:.2e}; attention without the bias is off by at least {unbiased:.2e} "
              f"(L > 1). Kernels checked: {', '.join(sorted({c['kernel'] for c in checks}))}.", ""]
    lines += [f"## Timing: {BATCH} x 16 heads, bf16, causal (TFLOP/s: 4 b h d L^2 / 2)", "",
              "| d | L | napkin ALiBi | Flex ALiBi | napkin ALiBi portable | napkin causal | FA4 causal | cuDNN causal "
              "| ALiBi / causal time (napkin) | the same, predicted | napkin / Flex (ALiBi) | measured / predicted "
              "(ALiBi) | config |",
              "|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in doc["timing"]:
        def us(name):
            return r.get(f"{name}_us")
        lines.append(
            f"| {r['d']} | {r['seqlen']} | {us('alibi_hopper')} us | {us('alibi_flex')} us | {us('alibi_triton')} us | "
            f"{us('causal_hopper')} us | {us('causal_fa4')} us | {us('causal_cudnn')} us | "
            f"{ratio(us('alibi_hopper'), us('causal_hopper'))} | "
            f"{ratio(r.get('alibi_hopper_predicted_us'), r.get('causal_hopper_predicted_us'))} | "
            f"{ratio(us('alibi_flex'), us('alibi_hopper'))} | "
            f"{ratio(us('alibi_hopper'), r.get('alibi_hopper_predicted_us'))} | {r.get('alibi_hopper_config')} |")
    lines += ["", "ALiBi / causal is napkin's ALiBi time over its plain causal time at the same shape: what the bias "
              "costs, measured and as the model predicts it (the target: at most 1.15). napkin / Flex is Flex's time "
              "over napkin's (above 1: napkin is faster)."]
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
