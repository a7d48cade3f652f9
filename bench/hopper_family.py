"""The diagrams the Hopper attention kernel realises beyond softmax attention, beside napkin's softmax
attention and the peers, on one GPU, in one run: correctness first, then timing. The kernel reads
the chain of scores off the diagram (analyzer.config.scores: sigmoid attention) and V's head dim
apart from the queries' (MLA's 192/128: a head dim that is no power of two loads in two column blocks).

1. Checks (before any timing), against float64 on the GPU: sigmoid_attention's and mla_attention's
   Hopper modules at their head dims, sequence lengths 1, 17, 1000, 4096, unequal query and key
   lengths, outliers, strided inputs, fp16 and bf16, and each overlap and warpgroup count through
   config=; and the softmax modules the same kernel text renders (mha, causal_attention, gqa).
2. Sigmoid, 2 x 16 heads, head dims 64, 128, 256, sequence lengths 1k to 16k: its Hopper module; its
   portable Triton module (what napkin generated for it before); napkin's softmax attention on the
   Hopper path at the same shape (mha); SDPA's cuDNN backend (softmax); and torch's unfused
   sigmoid(q k^T / sqrt(d)) v, what a user writes without a fused kernel.
3. MLA 192/128, 2 x 16 heads, sequence lengths 1k to 16k: its Hopper module, its portable module, and
   SDPA's cuDNN backend with the same head dims.
Each napkin Hopper row beside the model's prediction for the configuration the module launches.

    python bench/hopper_family.py --gpu h100 --out bench/results

Writes hopper_family_<gpu>.json and .md to --out after every step (a run cut short keeps what it measured).
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
SEQLENS = (1024, 2048, 4096, 8192, 16384)
HEAD_DIMS = (64, 128, 256)
OVERLAPS = ("none", "inter", "intra", "inter+intra")


class Run(BudgetedRun):
    """The run's modules, record and clock."""

    def __init__(self, args: argparse.Namespace, argv: list[str] | None) -> None:
        import torch

        from analyzer.codegen import generate
        self.torch = torch
        super().__init__(args, argv, "hopper_family.py", markdown, environment=environment(), checks=[], timing=[],
                         mla=[], skipped=[])
        self.generated, self.hopper = {}, {}
        for diagram in ("sigmoid_attention", "mla_attention", "mha", "causal_attention", "gqa"):
            g = generate(diagram, args.gpu)
            assert g.backend == "hopper", f"{diagram} on {args.gpu} generated {g.backend}"
            self.generated[diagram] = g
            self.hopper[diagram] = self.written(g, f"chains_hopper_{diagram}")
        self.portable = self.written(generate("sigmoid_attention", args.gpu, backend="triton"), "chains_triton_sigmoid")
        self.portable_mla = self.written(generate("mla_attention", args.gpu, backend="triton"), "chains_triton_mla")


def case(diagram, d, seq_q, seq_k, dtype="fp16", strided=False, outlier=False, config=None, heads_q=3,
         heads_kv=3, e=None):
    return dict(diagram=diagram, causal=diagram == "causal_attention", sigmoid=diagram == "sigmoid_attention",
                d=d, e=e, seq_q=seq_q, seq_k=seq_k, heads_q=heads_q, heads_kv=heads_kv, dtype=dtype, strided=strided,
                outlier=outlier, config=config)


def check_cases():
    cases = []
    for d in HEAD_DIMS:
        for seq in (1, 17, 1000, 4096):
            cases.append(case("sigmoid_attention", d, seq, seq, outlier=seq == 1000))
    cases.append(case("sigmoid_attention", 128, 300, 1000, dtype="bf16", strided=True))
    cases.append(case("sigmoid_attention", 64, 1000, 333, dtype="bf16", strided=True, outlier=True))
    for n, chunk in ((1, 128), (2, 128), (3, 64)):
        for overlap in OVERLAPS:
            if n == 1 and "inter" in overlap:
                continue
            cases.append(case("sigmoid_attention", 128, 1000, 1000, config={
                "WARPGROUPS": n, "BLOCK_X": chunk, "STAGES": 2, "OVERLAP": overlap,
                "SCHEDULE": "persistent" if n == 2 else "tiles"}))
    for seq in (1, 17, 1000, 4096):
        cases.append(case("mla_attention", 192, seq, seq, e=128, outlier=seq == 1000))
    cases.append(case("mla_attention", 192, 300, 1000, e=128, dtype="bf16", strided=True))
    cases.append(case("mla_attention", 64, 1000, 1000, e=128))
    cases.append(case("mla_attention", 128, 1000, 1000, e=128, dtype="bf16"))
    for n, chunk in ((1, 128), (2, 64), (3, 64)):
        for overlap in OVERLAPS:
            if n == 1 and "inter" in overlap:
                continue
            cases.append(case("mla_attention", 192, 1000, 1000, e=128, config={
                "WARPGROUPS": n, "BLOCK_X": chunk, "STAGES": 2, "OVERLAP": overlap, "SCHEDULE": "tiles"}))
    for diagram in ("mha", "causal_attention"):
        for d in HEAD_DIMS:
            cases.append(case(diagram, d, 1000, 1000, outlier=d == 64))
        cases.append(case(diagram, 128, 17, 17, dtype="bf16", strided=True))
    cases.append(case("gqa", 128, 1000, 1000, heads_q=8, heads_kv=2))
    return cases


def checks(run: Run) -> bool:
    torch = run.torch
    ok = True
    for i, c in enumerate(check_cases()):
        dtype = {"fp16": torch.float16, "bf16": torch.bfloat16}[c["dtype"]]
        q, k, v = attention_inputs(torch, 2, c["heads_q"], c["heads_kv"], c["seq_q"], c["seq_k"], c["d"], dtype,
                         c["strided"], c["outlier"], seed=i, e=c["e"])
        ref = reference_attention(torch, q, k, v, c["causal"], c["sigmoid"])
        try:
            out = run.hopper[c["diagram"]].attention(q, k, v, causal=c["causal"], config=c["config"])
            torch.cuda.synchronize()
            err = rel_err(torch, out, ref)
        except Exception as exc:  # noqa: BLE001 - a failure is a result of the check
            err, out = float("inf"), repr(exc)[:300]
        row = {**c, "rel_err": err, "ok": err < TOLERANCE}
        if not row["ok"]:
            row["error"] = out if isinstance(out, str) else None
        ok &= row["ok"]
        run.doc["checks"].append(row)
        log(f"check {i}: {c['diagram']} d={c['d']} e={c['e']} {c['seq_q']}x{c['seq_k']} {c['dtype']} config={c['config']}: "
            f"{err:.2e}")
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
    for d in (128, 64, 256):
        for seq in SEQLENS:
            if run.left() < 0:
                run.doc["skipped"].append({"d": d, "seqlen": seq})
                continue
            q, k, v = (torch.randn(BATCH, HEADS, seq, d, device="cuda", dtype=torch.float16) for _ in range(3))
            sigmoid, softmax = run.hopper["sigmoid_attention"], run.hopper["mha"]

            def sdpa():
                with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
                    return F.scaled_dot_product_attention(q, k, v)

            def eager():
                return torch.sigmoid((q @ k.transpose(-2, -1)) * d ** -0.5) @ v

            timed = {"sigmoid_hopper": lambda: sigmoid.attention(q, k, v),
                     "sigmoid_triton": lambda: run.portable.attention(q, k, v),
                     "softmax_hopper": lambda: softmax.attention(q, k, v),
                     "sdpa_cudnn": sdpa}
            if seq <= 8192:          # the scores whole: 2 x 16 x 8k x 8k fp16 is 4 GiB
                timed["sigmoid_eager"] = eager
            row = {"d": d, "seqlen": seq}
            for name, fn in timed.items():
                try:
                    s = triton.testing.do_bench(fn, warmup=WARMUP_MS, rep=REP_MS) * 1e-3
                    row[name] = round(tflops(seq, d, s), 1)
                    row[f"{name}_us"] = round(s * 1e6, 1)
                except Exception as exc:  # noqa: BLE001
                    row[name] = None
                    row[f"{name}_error"] = repr(exc)[:200]
            for diagram, name in (("sigmoid_attention", "sigmoid_hopper"), ("mha", "softmax_hopper")):
                label, s = hopper_predicted(run.profile, run.generated[diagram], seq, d, "fp16", BATCH * HEADS)
                row[f"{name}_config"] = label
                row[f"{name}_predicted_us"] = round(s * 1e6, 1)
            log(f"timing d={d} L={seq}: " + ", ".join(f"{n} {row[n]}" for n in timed))
            run.doc["timing"].append(row)
            run.save()
            del q, k, v
            torch.cuda.empty_cache()


def mla(run: Run) -> None:
    """MLA 192/128: the Hopper module, the portable module and SDPA's cuDNN backend with the same head dims."""
    import torch.nn.functional as F
    import triton
    from torch.nn.attention import SDPBackend, sdpa_kernel
    torch = run.torch
    d, e = 192, 128
    for seq in SEQLENS:
        if run.left() < 0:
            run.doc["skipped"].append({"mla": seq})
            continue
        q, k = (torch.randn(BATCH, HEADS, seq, d, device="cuda", dtype=torch.float16) for _ in range(2))
        v = torch.randn(BATCH, HEADS, seq, e, device="cuda", dtype=torch.float16)
        hopper = run.hopper["mla_attention"]

        def sdpa():
            with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
                return F.scaled_dot_product_attention(q, k, v)

        timed = {"mla_hopper": lambda: hopper.attention(q, k, v), "mla_triton": lambda: run.portable_mla.attention(q, k, v),
                 "sdpa_cudnn": sdpa}
        row = {"d": d, "e": e, "seqlen": seq}
        flops = 2 * BATCH * HEADS * seq * seq * (d + e)
        for name, fn in timed.items():
            try:
                s = triton.testing.do_bench(fn, warmup=WARMUP_MS, rep=REP_MS) * 1e-3
                row[name] = round(flops / s / 1e12, 1)
                row[f"{name}_us"] = round(s * 1e6, 1)
            except Exception as exc:  # noqa: BLE001
                row[name] = None
                row[f"{name}_error"] = repr(exc)[:200]
        label, s = hopper_predicted(run.profile, run.generated["mla_attention"], seq, d, "fp16", BATCH * HEADS)
        row["mla_hopper_config"] = label
        row["mla_hopper_predicted_us"] = round(s * 1e6, 1)
        log(f"mla L={seq}: " + ", ".join(f"{n} {row[n]}" for n in timed))
        run.doc["mla"].append(row)
        run.save()
        del q, k, v
        torch.cuda.empty_cache()


# ------------------------------------------------------------------------------------------ report

def markdown(doc) -> str:
    lines = heading(doc, "The Hopper attention family beyond softmax: sigmoid and MLA 192/128")
    checks = doc["checks"]
    bad = [c for c in checks if not c["ok"]]
    lines += [f"## Checks against float64: {len(checks) - len(bad)} of {len(checks)} within {TOLERANCE:g}", ""]
    for c in bad:
        lines.append(f"- FAILED {c['diagram']} d={c['d']} e={c['e']} {c['seq_q']}x{c['seq_k']} {c['dtype']} config={c['config']}: "
                     f"{c['rel_err']:.2e} {c.get('error') or ''}")
    worst = max((c["rel_err"] for c in checks), default=0.0)
    lines += [f"Largest relative error: {worst:.2e}", ""]
    lines += [f"## Timing: {BATCH} x {HEADS} heads, fp16, not causal (TFLOP/s of 4 b h L^2 d)", "",
              "| d | L | sigmoid Hopper | sigmoid portable | softmax Hopper | SDPA cuDNN | sigmoid eager "
              "| sigmoid / softmax | sigmoid / portable | sigmoid measured / predicted | softmax measured / predicted "
              "| sigmoid config |",
              "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in doc["timing"]:
        lines.append(
            f"| {r['d']} | {r['seqlen']} | {r.get('sigmoid_hopper')} | {r.get('sigmoid_triton')} | "
            f"{r.get('softmax_hopper')} | {r.get('sdpa_cudnn')} | {r.get('sigmoid_eager', '-')} | "
            f"{ratio(r.get('sigmoid_hopper'), r.get('softmax_hopper'))} | "
            f"{ratio(r.get('sigmoid_hopper'), r.get('sigmoid_triton'))} | "
            f"{ratio(r.get('sigmoid_hopper_us'), r.get('sigmoid_hopper_predicted_us'))} | "
            f"{ratio(r.get('softmax_hopper_us'), r.get('softmax_hopper_predicted_us'))} | "
            f"{r.get('sigmoid_hopper_config')} |")
    lines += ["", f"## MLA 192/128: {BATCH} x {HEADS} heads, fp16, not causal (TFLOP/s of 2 b h L^2 (d + e))", "",
              "| L | MLA Hopper | MLA portable | SDPA cuDNN | Hopper / cuDNN | Hopper / portable | measured / predicted "
              "| config |", "|---|---|---|---|---|---|---|---|"]
    for r in doc["mla"]:
        lines.append(f"| {r['seqlen']} | {r.get('mla_hopper')} | {r.get('mla_triton')} | {r.get('sdpa_cudnn')} | "
                     f"{ratio(r.get('mla_hopper'), r.get('sdpa_cudnn'))} | {ratio(r.get('mla_hopper'), r.get('mla_triton'))} | "
                     f"{ratio(r.get('mla_hopper_us'), r.get('mla_hopper_predicted_us'))} | {r.get('mla_hopper_config')} |")
    if doc["skipped"]:
        lines += ["", f"Skipped (budget): {doc['skipped']}"]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    args = parse(argv, __doc__.splitlines()[0], budget_s=480.0)
    run = Run(args, argv)
    ok = checks(run)
    if not ok:
        log("checks failed: no timing")
        run.save()
        return 1
    mla(run)
    timing(run)
    run.save()
    return 0


if __name__ == "__main__":
    sys.exit(main())
