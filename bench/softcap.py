"""Softcapped attention (Gemma 2: the scores bounded to cap tanh(s / cap) before the softmax) from its
diagram, diagrams/softcap_attention.yaml, beside napkin's softmax attention and the peers, on one GPU, in
one run: correctness first, then timing.

1. Checks (before any timing), against float64 on the GPU: the Hopper module napkin kernel generates
   for softcap_attention, at head dims 64, 128 and 256, sequence lengths 1, 17, 1000 and 4096, unequal
   query and key lengths, strided bf16 inputs and each warpgroup count and overlap through config=, on
   inputs scaled by 8 (scores of standard deviation 64, so the cap of 50 bends them: a kernel without
   the cap fails); and FlexAttention with the same score_mod, the peer timed below.
2. Timing, 2 x 16 heads, fp16, head dims 128 and 256 (Gemma 2's), sequence lengths 2k to 16k: the
   Hopper module; its portable Triton module; FlexAttention (torch.compile'd, score_mod softcap), what
   a PyTorch user calls for a softcap; napkin's softmax attention on the Hopper path at the same shape
   (mha: what the cap costs); and SDPA's cuDNN backend (softmax, no cap: the fastest attention there
   is at the shape). The Hopper row beside the model's prediction for the configuration it launches.

    python bench/softcap.py --gpu h100 --out bench/results

Writes softcap_<gpu>.json and .md to --out after every step (a run cut short keeps what it measured).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.budgeted import BudgetedRun, heading, parse  # noqa: E402
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

BATCH, HEADS = 2, 16
CAP = 50.0                 # the diagram's cap (diagrams/softcap_attention.yaml)
SPREAD = 8.0               # checks' inputs scaled by this: scores of standard deviation SPREAD^2
SEQLENS = (2048, 4096, 8192, 16384)
HEAD_DIMS = (64, 128, 256)
OVERLAPS = ("none", "inter", "intra", "inter+intra")


class Run(BudgetedRun):
    """The run's modules, record and clock."""

    def __init__(self, args: argparse.Namespace, argv: list[str] | None) -> None:
        import torch

        from analyzer.codegen import generate
        self.torch = torch
        super().__init__(args, argv, "softcap.py", markdown, environment=environment(), cap=CAP, checks=[], timing=[],
                         skipped=[])
        self.generated = {d: generate(d, args.gpu) for d in ("softcap_attention", "mha")}
        for name, g in self.generated.items():
            assert g.backend == "hopper", f"{name} on {args.gpu} generated {g.backend}"
        self.softcap = self.written(self.generated["softcap_attention"], "softcap_hopper")
        self.softmax = self.written(self.generated["mha"], "softcap_softmax_hopper")
        self.portable = self.written(generate("softcap_attention", args.gpu, backend="triton"), "softcap_triton")


def flex_softcap():
    """FlexAttention with Gemma 2's cap as its score_mod (the score it is given is already scaled by
    1/sqrt(d), as the diagram's scale op precedes its softcap)."""
    import torch
    from torch.nn.attention.flex_attention import flex_attention

    def softcap(score, b, h, q_idx, kv_idx):
        return CAP * torch.tanh(score / CAP)

    torch._dynamo.config.recompile_limit = 64      # one compile a shape: the timing's 8 exceed its default
    compiled = torch.compile(flex_attention, dynamic=False)
    return lambda q, k, v: compiled(q, k, v, score_mod=softcap)


# ------------------------------------------------------------------------------------------ checks

def check_cases():
    cases = []
    for d in HEAD_DIMS:
        for seq in (1, 17, 1000, 4096):
            cases.append({"d": d, "seq_q": seq, "seq_k": seq, "dtype": "fp16", "strided": False, "config": None})
    cases.append({"d": 128, "seq_q": 300, "seq_k": 1000, "dtype": "bf16", "strided": True, "config": None})
    cases.append({"d": 256, "seq_q": 1000, "seq_k": 333, "dtype": "bf16", "strided": True, "config": None})
    for n, chunk in ((1, 128), (2, 128), (3, 64)):
        for overlap in OVERLAPS:
            if n == 1 and "inter" in overlap:
                continue
            cases.append({"d": 128, "seq_q": 1000, "seq_k": 1000, "dtype": "fp16", "strided": False, "config": {
                "WARPGROUPS": n, "BLOCK_X": chunk, "STAGES": 2, "OVERLAP": overlap, "SCHEDULE": "tiles"}})
    return cases


def checks(run: Run) -> bool:
    torch = run.torch
    ok = True
    flex = flex_softcap()
    for i, c in enumerate(check_cases()):
        dtype = {"fp16": torch.float16, "bf16": torch.bfloat16}[c["dtype"]]
        q, k, v = attention_inputs(torch, 2, 3, 3, c["seq_q"], c["seq_k"], c["d"], dtype, c["strided"], False, seed=i)
        q = q * SPREAD
        ref = reference_attention(torch, q, k, v, False, False, CAP)
        plain = reference_attention(torch, q, k, v, False, False)      # what a kernel without the cap gives
        try:
            out = run.softcap.attention(q, k, v, config=c["config"])
            torch.cuda.synchronize()
            err = rel_err(torch, out, ref)
        except Exception as exc:  # noqa: BLE001 - a failure is a result of the check
            err, out = float("inf"), repr(exc)[:300]
        row = {**c, "kernel": "napkin hopper", "rel_err": err, "uncapped_rel_err": rel_err(torch, plain, ref),
               "ok": err < TOLERANCE}
        if not row["ok"]:
            row["error"] = out if isinstance(out, str) else None
        ok &= row["ok"]
        run.doc["checks"].append(row)
        log(f"check {i}: d={c['d']} {c['seq_q']}x{c['seq_k']} {c['dtype']} config={c['config']}: {err:.2e} "
            f"(without the cap {row['uncapped_rel_err']:.2e})")
    # the peer computes the same function (fp16, equal lengths: what it is timed at)
    q, k, v = attention_inputs(torch, 2, 3, 3, 1024, 1024, 128, torch.float16, False, False, seed=99)
    q = q * SPREAD
    err = rel_err(torch, flex(q, k, v), reference_attention(torch, q, k, v, False, False, CAP))
    run.doc["checks"].append({"d": 128, "seq_q": 1024, "seq_k": 1024, "dtype": "fp16", "strided": False,
                              "config": None, "kernel": "FlexAttention", "rel_err": err, "ok": err < TOLERANCE})
    log(f"check FlexAttention d=128 1024x1024: {err:.2e}")
    ok &= err < TOLERANCE
    run.save()
    return ok


# ------------------------------------------------------------------------------------------ timing

def tflops(seq, d, seconds):
    return 4 * BATCH * HEADS * seq * seq * d / seconds / 1e12


def timing(run: Run) -> None:
    import torch.nn.functional as F
    import triton
    from torch.nn.attention import SDPBackend, sdpa_kernel
    torch = run.torch
    flex = flex_softcap()
    for d in (128, 256):
        for seq in SEQLENS:
            if run.left() < 0:
                run.doc["skipped"].append({"d": d, "seqlen": seq})
                continue
            q, k, v = (torch.randn(BATCH, HEADS, seq, d, device="cuda", dtype=torch.float16) for _ in range(3))

            def sdpa():
                with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
                    return F.scaled_dot_product_attention(q, k, v)

            timed = {"softcap_hopper": lambda: run.softcap.attention(q, k, v),
                     "softcap_triton": lambda: run.portable.attention(q, k, v),
                     "flex_softcap": lambda: flex(q, k, v),
                     "softmax_hopper": lambda: run.softmax.attention(q, k, v),
                     "sdpa_cudnn": sdpa}
            row = {"d": d, "seqlen": seq}
            for name, fn in timed.items():
                try:
                    s = triton.testing.do_bench(fn, warmup=WARMUP_MS, rep=REP_MS) * 1e-3
                    row[name] = round(tflops(seq, d, s), 1)
                    row[f"{name}_us"] = round(s * 1e6, 1)
                except Exception as exc:  # noqa: BLE001
                    row[name] = None
                    row[f"{name}_error"] = repr(exc)[:200]
            for diagram, name in (("softcap_attention", "softcap_hopper"), ("mha", "softmax_hopper")):
                label, s = hopper_predicted(run.profile, run.generated[diagram], seq, d, "fp16", BATCH * HEADS)
                row[f"{name}_config"] = label
                row[f"{name}_predicted_us"] = round(s * 1e6, 1)
            log(f"timing d={d} L={seq}: " + ", ".join(f"{n} {row[n]}" for n in timed))
            run.doc["timing"].append(row)
            run.save()
            del q, k, v
            torch.cuda.empty_cache()


# ------------------------------------------------------------------------------------------ report

def markdown(doc) -> str:
    lines = heading(doc, f"Softcapped attention (Gemma 2, cap {doc['cap']:g}) from its diagram")
    checks = doc["checks"]
    bad = [c for c in checks if not c["ok"]]
    lines += [f"## Checks against float64: {len(checks) - len(bad)} of {len(checks)} within {TOLERANCE:g}", "",
              f"Inputs: q scaled by {SPREAD:g} (scores of standard deviation {SPREAD ** 2:g}), so the cap bends "
              "them; the error of attention without the cap against the reference is given beside each.", ""]
    for c in bad:
        lines.append(f"- FAILED {c['kernel']} d={c['d']} {c['seq_q']}x{c['seq_k']} {c['dtype']} config={c['config']}: "
                     f"{c['rel_err']:.2e} {c.get('error') or ''}")
    worst = max((c["rel_err"] for c in checks), default=0.0)
    uncapped = min((c["uncapped_rel_err"] for c in checks if "uncapped_rel_err" in c and c["seq_k"] > 1),
                   default=0.0)      # one key: every weight is 1, capped or not
    lines += [f"Largest relative error: {worst:.2e}; attention without the cap is off by at least {uncapped:.2e}.", ""]
    lines += [f"## Timing: {BATCH} x {HEADS} heads, fp16, not causal (TFLOP/s of 4 b h L^2 d)", "",
              "| d | L | softcap Hopper | softcap portable | FlexAttention softcap | softmax Hopper | SDPA cuDNN (no cap) "
              "| Hopper / Flex | Hopper / portable | Hopper / softmax | Hopper / cuDNN | measured / predicted | config |",
              "|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in doc["timing"]:
        lines.append(
            f"| {r['d']} | {r['seqlen']} | {r.get('softcap_hopper')} | {r.get('softcap_triton')} | "
            f"{r.get('flex_softcap')} | {r.get('softmax_hopper')} | {r.get('sdpa_cudnn')} | "
            f"{ratio(r.get('softcap_hopper'), r.get('flex_softcap'))} | "
            f"{ratio(r.get('softcap_hopper'), r.get('softcap_triton'))} | "
            f"{ratio(r.get('softcap_hopper'), r.get('softmax_hopper'))} | "
            f"{ratio(r.get('softcap_hopper'), r.get('sdpa_cudnn'))} | "
            f"{ratio(r.get('softcap_hopper_us'), r.get('softcap_hopper_predicted_us'))} | "
            f"{r.get('softcap_hopper_config')} |")
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
