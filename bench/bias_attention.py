"""An additive bias read from memory (heads x queries x keys, SDPA's float attn_mask) from its diagram,
diagrams/bias_attention.yaml, beside SDPA's cuDNN backend and FlexAttention given the same tensor and
napkin's own plain causal attention, on one GPU, in one run: correctness first, then timing.

1. Checks (before any timing), against float64 on the GPU: the Hopper module napkin kernel generates
   for the diagram, and for a copy of it without the causal mask, at head dims 64, 128 and 256, lengths
   1, 17, 1000 and 4096, strided bf16 inputs, FlashAttention-3's outlier inputs, a bias per head
   (broadcast over the batch), per batch entry and head, and one for all (queries x keys), and each
   warpgroup count and overlap through config=; the portable Triton and CUDA modules; SDPA's cuDNN
   backend and FlexAttention (the peers timed below). The bias is N(0, 4); beside each error, that of
   attention without it (a kernel that ignored it fails).
2. Timing, 2 x 16 heads, bf16, causal, a bias of 16 heads x L x L shared by the batch entries, head dim
   128 at 4k to 16k (and 64 and 256 at 8k): the Hopper module; its portable module; SDPA's cuDNN backend
   with the bias as attn_mask (the causal mask folded into it as -inf: SDPA takes one or the other) and
   FlexAttention with the bias as its score_mod and a causal block mask, both given that same tensor;
   napkin's plain causal attention (what the bias costs). The Hopper rows beside the model's prediction
   for the configuration each launches, and the bias's bytes over the time (the rate it is read at).

    python bench/bias_attention.py --gpu h100 --out bench/results

Writes bias_attention_<gpu>.json and .md to --out after every step (a run cut short keeps what it
measured).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.alibi_attention import non_causal  # noqa: E402
from bench.budgeted import BudgetedRun, heading, parse  # noqa: E402
from bench.common import (  # noqa: E402
    REP_MS,
    TOLERANCE,
    WARMUP_MS,
    attention_inputs,
    causal_bias,
    environment,
    hopper_predicted,
    log,
    ratio,
    reference_attention,
    rel_err,
    sdpa_bias,
)

DIAGRAM = "bias_attention"
BATCH, HEADS = 2, 16
SPREAD = 2.0               # the bias's standard deviation
SEQLENS = (8192, 4096, 16384)     # the target's length first: a run cut short keeps it
OVERLAPS = ("none", "inter", "intra", "inter+intra")


class Run(BudgetedRun):
    """The run's modules, record and clock."""

    def __init__(self, args: argparse.Namespace, argv: list[str] | None) -> None:
        import torch

        from analyzer.codegen import generate
        from analyzer.common import resources
        self.torch = torch
        super().__init__(args, argv, "bias_attention.py", markdown, environment=environment(), checks=[], timing=[],
                         skipped=[])
        data = yaml.safe_load(resources.resolve("diagrams", DIAGRAM, what="diagram", field="DIAGRAM").read_text())
        full = self.tmp / f"{DIAGRAM}_full.yaml"
        full.write_text(yaml.safe_dump(non_causal(data), sort_keys=False))
        self.g = generate(DIAGRAM, args.gpu, dtype="bf16")
        assert self.g.backend == "hopper", f"{DIAGRAM} on {args.gpu} generated {self.g.backend}"
        self.hopper = self.written(self.g, "bias_hopper")
        g_full = generate(str(full), args.gpu)
        assert g_full.backend == "hopper"
        self.full = self.written(g_full, "bias_full_hopper")
        self.causal_g = generate("causal_attention", args.gpu, dtype="bf16")
        self.causal = self.written(self.causal_g, "bias_causal_hopper")
        self.portable = self.written(generate(DIAGRAM, args.gpu, backend="triton"), "bias_triton")
        self.cuda = self.written(generate(DIAGRAM, args.gpu, backend="cuda"), "bias_cuda", ".cu")


def flex():
    """FlexAttention with the bias as its score_mod (indexed by head, query and key) and a causal block
    mask built once a shape."""
    import torch
    from torch.nn.attention.flex_attention import create_block_mask, flex_attention

    torch._dynamo.config.recompile_limit = 64
    compiled = torch.compile(flex_attention, dynamic=False)
    masks = {}

    def call(q, k, v, bias):
        b3 = bias.reshape(-1, *bias.shape[-2:])       # (heads, L, L): the same for every batch entry

        def add(score, b, h, q_idx, kv_idx):
            return score + b3[h, q_idx, kv_idx]

        def lower(b, h, q_idx, kv_idx):
            return q_idx >= kv_idx

        key = (q.shape[-2], k.shape[-2])
        if key not in masks:
            masks[key] = create_block_mask(lower, None, None, key[0], key[1], device="cuda")
        return compiled(q, k, v, score_mod=add, block_mask=masks[key])
    return call


# ------------------------------------------------------------------------------------------ checks

def check_cases():
    cases = []
    for causal in (True, False):
        for d in (64, 128, 256):
            for seq in (1, 17, 1000, 4096):
                cases.append({"causal": causal, "d": d, "seq": seq, "dtype": "bf16", "strided": False,
                              "outlier": False, "bias": "heads", "config": None})
    for shape in ("batch x heads", "one"):
        cases.append({"causal": True, "d": 128, "seq": 1000, "dtype": "bf16", "strided": True, "outlier": False,
                      "bias": shape, "config": None})
    cases.append({"causal": True, "d": 128, "seq": 4500, "dtype": "fp16", "strided": True, "outlier": True,
                  "bias": "heads", "config": None})
    for n, chunk in ((1, 64), (2, 64), (3, 64)):
        for overlap in OVERLAPS:
            if n == 1 and "inter" in overlap:
                continue
            cases.append({"causal": True, "d": 128, "seq": 1000, "dtype": "bf16", "strided": False,
                          "outlier": False, "bias": "heads",
                          "config": {"WARPGROUPS": n, "BLOCK_X": chunk, "STAGES": 2, "OVERLAP": overlap,
                                     "SCHEDULE": "tiles" if n < 3 else "persistent"}})
    return cases


def _check(run: Run, name: str, fn, c: dict, seed: int) -> bool:
    torch = run.torch
    dtype = {"fp16": torch.float16, "bf16": torch.bfloat16}[c["dtype"]]
    heads = 4
    q, k, v = attention_inputs(torch, 2, heads, heads, c["seq"], c["seq"], c["d"], dtype, c["strided"],
                               c["outlier"], seed=seed)
    gen = torch.Generator(device="cuda").manual_seed(seed)
    shape = {"heads": (heads,), "batch x heads": (2, heads), "one": ()}[c["bias"]] + (c["seq"], c["seq"])
    bias = (torch.randn(shape, device="cuda", generator=gen) * SPREAD).to(dtype)
    ref = reference_attention(torch, q, k, v, c["causal"], False, bias=bias)
    plain = reference_attention(torch, q, k, v, c["causal"], False)     # no bias: what it must not give
    try:
        out = fn(q, k, v, bias)
        torch.cuda.synchronize()
        err = rel_err(torch, out, ref)
        error = None
    except Exception as exc:  # noqa: BLE001 - a failure is a result of the check
        err, error = float("inf"), repr(exc)[:300]
    row = {**c, "kernel": name, "rel_err": err, "unbiased_rel_err": rel_err(torch, plain, ref),
           "ok": err < TOLERANCE, "error": error}
    run.doc["checks"].append(row)
    log(f"check {name} causal={c['causal']} d={c['d']} L={c['seq']} {c['dtype']} bias={c['bias']} "
        f"config={c['config']}: {err:.2e} (without the bias {row['unbiased_rel_err']:.2e}) {error or ''}")
    return row["ok"]


def checks(run: Run) -> bool:
    ok = True
    for i, c in enumerate(check_cases()):
        module = run.hopper if c["causal"] else run.full
        ok &= _check(run, "napkin hopper", lambda q, k, v, b, mod=module, c=c: mod.attention(
            q, k, v, b, causal=c["causal"], config=c["config"]), c, i)
    base = {"causal": True, "d": 128, "seq": 1000, "dtype": "bf16", "strided": False, "outlier": False,
            "bias": "heads", "config": None}
    ok &= _check(run, "napkin triton", lambda q, k, v, b: run.portable.attention(q, k, v, b, causal=True), base, 101)
    for d in (64, 128):
        ok &= _check(run, "napkin cuda", lambda q, k, v, b: run.cuda.attention(q, k, v, b, causal=True),
                     {**base, "d": d}, 102 + d)
    torch = run.torch
    ok &= _check(run, "SDPA cuDNN", lambda q, k, v, b: sdpa_bias(q, k, v, causal_bias(torch, b, True)), base, 300)
    ok &= _check(run, "FlexAttention", flex(), base, 301)
    run.save()
    return ok


# ------------------------------------------------------------------------------------------ timing

def timing(run: Run) -> None:
    import triton

    torch = run.torch
    peer = flex()
    for d, seqs in ((128, SEQLENS), (64, (8192,)), (256, (8192,))):
        for seq in seqs:
            if run.left() < 0:
                run.doc["skipped"].append({"d": d, "seqlen": seq})
                continue
            q, k, v = (torch.randn(BATCH, HEADS, seq, d, device="cuda", dtype=torch.bfloat16) for _ in range(3))
            bias = causal_bias(torch, (torch.randn(1, HEADS, seq, seq, device="cuda") * SPREAD).to(torch.bfloat16),
                               True)
            # FlexAttention last, and not past 2^31 bias items: there its score_mod's indexing of the bias
            # ends in an illegal memory access (measured at 16 x 16384^2), which ends the process's CUDA context
            timed = {"bias_hopper": lambda: run.hopper.attention(q, k, v, bias, causal=True),
                     "bias_triton": lambda: run.portable.attention(q, k, v, bias, causal=True),
                     "bias_cudnn": lambda: sdpa_bias(q, k, v, bias),
                     "causal_hopper": lambda: run.causal.attention(q, k, v, causal=True),
                     "bias_flex": (lambda: peer(q, k, v, bias)) if bias.numel() < 2 ** 31 else None}
            row = {"d": d, "seqlen": seq, "bias_bytes": bias.numel() * 2}
            flops = 4 * BATCH * HEADS * seq * seq / 2 * d
            for name, fn in timed.items():
                if fn is None:
                    row[name] = None
                    row[f"{name}_error"] = "not run: 2^31 bias items or more (an illegal memory access)"
                    continue
                try:
                    s = triton.testing.do_bench(fn, warmup=WARMUP_MS, rep=REP_MS) * 1e-3
                    row[f"{name}_us"] = round(s * 1e6, 1)
                    row[name] = round(flops / s / 1e12, 1)
                except Exception as exc:  # noqa: BLE001
                    row[name] = None
                    row[f"{name}_error"] = repr(exc)[:200]
            for g, name in ((run.g, "bias_hopper"), (run.causal_g, "causal_hopper")):
                label, s = hopper_predicted(run.profile, g, seq, d, "bf16", BATCH * HEADS)
                row[f"{name}_config"] = label
                row[f"{name}_predicted_us"] = round(s * 1e6, 1)
            log(f"timing d={d} L={seq}: " + ", ".join(f"{n} {row.get(f'{n}_us')} us" for n in timed))
            run.doc["timing"].append(row)
            run.save()
            del q, k, v, bias
            torch.cuda.empty_cache()


# ------------------------------------------------------------------------------------------ report

def markdown(doc) -> str:
    lines = heading(doc, "Attention with an additive bias from memory (causal) from its diagram")
    checks = doc["checks"]
    bad = [c for c in checks if not c["ok"]]
    lines += [f"## Checks against float64: {len(checks) - len(bad)} of {len(checks)} within {TOLERANCE:g}", "",
              f"Bias N(0, {SPREAD ** 2:g}) per head (or per batch entry and head, or one for all); the non-causal rows "
              "are a copy of the diagram without its mask. Beside each, the error of the same attention without "
              "the bias.", ""]
    for c in bad:
        lines.append(f"- FAILED {c['kernel']} causal={c['causal']} d={c['d']} L={c['seq']} {c['dtype']} "
                     f"bias={c['bias']} config={c['config']}: {c['rel_err']:.2e} {c.get('error') or ''}")
    worst = max((c["rel_err"] for c in checks), default=0.0)
    unbiased = min((c["unbiased_rel_err"] for c in checks if c["seq"] > 1), default=0.0)
    lines += [f"Largest relative error: {worst:.2e}; attention without the bias is off by at least {unbiased:.2e} "
              f"(L > 1). Kernels checked: {', '.join(sorted({c['kernel'] for c in checks}))}.", ""]
    lines += [f"## Timing: {BATCH} x 16 heads, bf16, causal, a 16 x L x L bf16 bias (TFLOP/s: 4 b h d L^2 / 2)", "",
              "| d | L | napkin bias | cuDNN bias | Flex bias | napkin bias portable | napkin causal | napkin / cuDNN "
              "| napkin / Flex | bias / causal time (napkin) | the same, predicted | measured / predicted | bias read "
              "at (napkin) | config |",
              "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in doc["timing"]:
        def us(name):
            return r.get(f"{name}_us")
        # the kernel reads each head's bias once a batch entry, the half at or below the diagonal
        rate = (f"{r['bias_bytes'] * BATCH / 2 / (us('bias_hopper') * 1e-6) / 1e12:.2f} TB/s"
                if us("bias_hopper") else "-")
        lines.append(
            f"| {r['d']} | {r['seqlen']} | {us('bias_hopper')} us | {us('bias_cudnn')} us | {us('bias_flex')} us | "
            f"{us('bias_triton')} us | {us('causal_hopper')} us | {ratio(us('bias_cudnn'), us('bias_hopper'))} | "
            f"{ratio(us('bias_flex'), us('bias_hopper'))} | {ratio(us('bias_hopper'), us('causal_hopper'))} | "
            f"{ratio(r.get('bias_hopper_predicted_us'), r.get('causal_hopper_predicted_us'))} | "
            f"{ratio(us('bias_hopper'), r.get('bias_hopper_predicted_us'))} | {rate} | {r.get('bias_hopper_config')} |")
    lines += ["", "napkin / cuDNN and napkin / Flex are the peer's time over napkin's (above 1: napkin is faster; the "
              "target is at least 1.5 against cuDNN). Bias / causal is napkin's time over its plain causal time at "
              "the same shape: what reading the bias costs, measured and as the model predicts it."]
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
