"""FP8 attention on Hopper (the paper's Section 6.2; FlashAttention-3's FP8) from the attention diagram,
beside napkin's own 16-bit kernel and cuDNN's, on one GPU, in one run: correctness, accuracy, timing.

1. Checks against float64 on the GPU: `napkin kernel attention --dtype fp8` (and causal_attention) on
   16-bit inputs quantised in the call, at head dims 64, 128 and 256, sequence lengths 1, 17, 1000 and
   4096, unequal lengths, strided bf16 inputs, each warpgroup count and overlap through config=, and e4m3
   inputs with their scales (descale=), incoherent processing on and off.
2. Accuracy (FlashAttention-3's Table 3): q, k and v from N(0, 1) with 0.1 % of their entries drawn
   from N(0, 10) instead; the output's RMSE against float64 for napkin's fp16 kernel and the FP8 kernel
   with per-tensor scales, block scales, incoherent processing, and both.
3. Timing, non-causal, 16k tokens (batch = 16384 / seqlen) and 2048 model dims (heads = 2048 / d), as
   FlashAttention-3's benchmark: the FP8 kernel on e4m3 inputs (what FlashAttention-3 times) at the
   model's choice and at each overlap of Appendix B.2 (the rest of the choice kept), the FP8 kernel
   on 16-bit inputs (quantisation included), napkin's fp16 kernel, and SDPA's cuDNN backend in fp16.

    python bench/hopper_fp8.py --gpu h100 --out bench/results
    python bench/hopper_fp8.py --gpu h200 --quick     # the checks at the modules' own choices, the accuracy

Writes hopper_fp8_<gpu>.json and .md to --out after every step (a run cut short keeps what it measured).
"""

from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.budgeted import BudgetedRun, heading, parse  # noqa: E402
from bench.common import (  # noqa: E402
    FP8_TOLERANCE,
    REP_MS,
    WARMUP_MS,
    attention_inputs,
    environment,
    hopper_predicted,
    launched,
    log,
    ratio,
    reference_attention,
    rel_err,
    written_module,
)

TOKENS, MODEL_DIM = 16384, 2048
SEQLENS = (4096, 8192, 16384)
HEAD_DIMS = (64, 128, 256)
OVERLAPS = ("none", "inter", "intra", "inter+intra")
OUTLIERS, OUTLIER_STD = 1e-3, 10.0      # FlashAttention-3's Table 3 inputs


class Run(BudgetedRun):
    """The run's modules, record and clock."""

    def __init__(self, args: argparse.Namespace, argv: list[str] | None) -> None:
        import torch

        from analyzer.codegen import generate
        self.torch = torch
        super().__init__(args, argv, "hopper_fp8.py", markdown, environment=environment(), checks=[], accuracy=[],
                         timing=[], skipped=[])
        self.generated = {"fp8": generate("attention", args.gpu, dtype="fp8"),
                          "fp8_causal": generate("causal_attention", args.gpu, dtype="fp8"),
                          "fp16": generate("attention", args.gpu)}
        for name, g in self.generated.items():
            assert g.backend == "hopper", f"{name} on {args.gpu} generated {g.backend}"
        self.fp8 = written_module(self.generated["fp8"], self.tmp, "attention_fp8")
        self.fp8_causal = written_module(self.generated["fp8_causal"], self.tmp, "causal_attention_fp8")
        self.fp16 = written_module(self.generated["fp16"], self.tmp, "attention_fp16")


def check_cases():
    cases = []
    for d in HEAD_DIMS:
        for seq in (1, 17, 1000, 4096):
            cases.append({"d": d, "seq_q": seq, "seq_k": seq, "dtype": "fp16", "strided": False, "config": None})
    cases.append({"d": 128, "seq_q": 300, "seq_k": 1000, "dtype": "bf16", "strided": True, "config": None})
    cases.append({"d": 64, "seq_q": 1000, "seq_k": 333, "dtype": "bf16", "strided": True, "config": None})
    for n, chunk in ((1, 128), (2, 128), (2, 64), (3, 64)):
        for overlap in OVERLAPS:
            if n == 1 and "inter" in overlap:
                continue
            cases.append({"d": 128, "seq_q": 1000, "seq_k": 1000, "dtype": "fp16", "strided": False, "config": {
                "WARPGROUPS": n, "BLOCK_X": chunk, "STAGES": 2, "OVERLAP": overlap, "SCHEDULE": "tiles"}})
    for schedule in ("persistent", "prefetch"):
        cases.append({"d": 128, "seq_q": 1000, "seq_k": 1000, "dtype": "fp16", "strided": False, "config": {
            "WARPGROUPS": 2, "BLOCK_X": 128, "STAGES": 2, "OVERLAP": "intra", "SCHEDULE": schedule}})
    for d in (64, 128):
        for seq in (17, 1000):
            cases.append({"d": d, "seq_q": seq, "seq_k": seq, "dtype": "fp16", "strided": False, "config": None,
                          "causal": True})
    for incoherent in (False, True):
        cases.append({"d": 128, "seq_q": 1000, "seq_k": 1000, "dtype": "fp16", "strided": False, "config": None,
                      "quantised": True, "incoherent": incoherent})
    # rows of q and k and columns of v scaled by powers of two from 1/8 to 8: blocks of very unequal scales,
    # where a scale applied to the wrong block, or a missing one, is far outside the tolerance. The scores
    # are then large enough that e4m3's rounding of q and k moves the softmax a long way, so these hold the
    # kernel to float64 attention over the e4m3 values it is given (dequantised), which leaves only the
    # probabilities' rounding
    for d, causal, chunk in ((128, False, 128), (64, True, 256), (256, False, 64)):
        cases.append({"d": d, "seq_q": 1000, "seq_k": 1000, "dtype": "fp16", "strided": False, "causal": causal,
                      "spread": True, "config": {"WARPGROUPS": 2, "BLOCK_X": chunk, "STAGES": 2, "OVERLAP": "intra",
                                                 "SCHEDULE": "tiles"}})
    return cases


def dequantised(module, inputs, scales):
    """The float64 values the FP8 kernel is given: e4m3 q, k and v times their scales."""
    (q, k, v), (q_scale, k_scale, v_scale) = inputs, scales
    block = module.QUANT_BLOCK

    def rows(x, scale, block=block):
        return x.double() * scale.double().repeat_interleave(block, dim=2)[:, :, :x.shape[2], None]
    # k's row c holds key _attn_fp8_keys(c) (quantize's order): the kernel's own function, on integers
    import torch
    keys = module._attn_fp8_keys.fn(torch.arange(k.shape[2], device=k.device))
    stored = rows(k, k_scale, module.KEY_BLOCK)
    natural = stored.clone()
    natural[:, :, keys] = stored
    return rows(q, q_scale), natural[:, :, :v.shape[2]], v.double() * v_scale.double()[:, :, None, :]



def spread(torch, x, dim, seed):
    """x with each slice along `dim` (a row of q or k: -2; a column of v: -1) times a random power of
    two from 1/8 to 8."""
    g = torch.Generator(device=x.device).manual_seed(seed)
    shape = [1] * x.dim()
    shape[dim] = x.shape[dim]
    return x * (2.0 ** torch.randint(-3, 4, shape, device=x.device, generator=g)).to(x.dtype)


def checks(run: Run, own_only: bool = False) -> bool:
    """check_cases against float64 (`own_only`: those at the module's own configuration), then the
    wrapper's refusals."""
    torch = run.torch
    ok = True
    for i, c in enumerate(check_cases()):
        if own_only and c["config"] is not None:
            continue
        dtype = {"fp16": torch.float16, "bf16": torch.bfloat16}[c["dtype"]]
        causal = c.get("causal", False)
        q, k, v = attention_inputs(torch, 2, 3, 3, c["seq_q"], c["seq_k"], c["d"], dtype, c["strided"], False, seed=i)
        module = run.fp8_causal if causal else run.fp8
        if c.get("spread"):
            q, k, v = spread(torch, q, -2, i), spread(torch, k, -2, i + 1000), spread(torch, v, -1, i + 2000)
            inputs, scales = module.quantize(q, k, v)
            ref = reference_attention(torch, *dequantised(module, inputs, scales), causal, False)
        else:
            ref = reference_attention(torch, q, k, v, causal, False)
        try:
            if c.get("quantised"):
                inputs, scales = module.quantize(q, k, v, incoherent=c["incoherent"])
            if c.get("spread") or c.get("quantised"):
                out = module.attention(*inputs, causal=causal, config=c["config"], descale=scales)
            else:
                out = module.attention(q, k, v, causal=causal, config=c["config"])
            torch.cuda.synchronize()
            err = rel_err(torch, out, ref)
        except Exception as exc:  # noqa: BLE001 - a failure is a result of the check
            err, out = float("inf"), repr(exc)[:300]
        row = {**c, "rel_err": err, "ok": err < FP8_TOLERANCE}
        if not row["ok"]:
            row["error"] = out if isinstance(out, str) else None
        ok &= row["ok"]
        run.doc["checks"].append(row)
        log(f"check {i}: d={c['d']} {c['seq_q']}x{c['seq_k']} {c['dtype']} causal={causal} config={c['config']} "
            f"quantised={c.get('quantised', False)} spread={c.get('spread', False)}: {err:.2e}")
    # the wrapper's refusals of e4m3 inputs, on the GPU (their checks follow the device's)
    q, k, v = attention_inputs(torch, 1, 2, 2, 100, 100, 64, torch.float16, False, False, seed=7)
    inputs, scales = run.fp8.quantize(q, k, v)
    for name, call, want in (("no descale", lambda: run.fp8.attention(*inputs), "take descale"),
                             ("descale with 16-bit inputs", lambda: run.fp8.attention(q, k, v, descale=scales),
                              "descale is for e4m3"),
                             ("scales of other keys", lambda: run.fp8.attention(
                                 *inputs, descale=(scales[0], scales[1][:, :, :0], scales[2])), "float32 scales")):
        try:
            call()
            refused = "accepted"
        except ValueError as exc:
            refused = str(exc)
        row = {"refusal": name, "message": refused[:200], "ok": want in refused}
        ok &= row["ok"]
        run.doc["checks"].append({**row, "rel_err": 0.0, "d": 64, "seq_q": 100, "seq_k": 100, "dtype": "fp16",
                                  "config": None})
        log(f"refusal {name}: {refused[:120]}")
    run.save()
    return ok


def outlier_inputs(torch, shape, seed, device="cuda"):
    """FlashAttention-3's Table 3 inputs: N(0, 1), 0.1 % of the entries from N(0, 10) instead."""
    g = torch.Generator(device=device).manual_seed(seed)
    x = torch.randn(shape, device=device, generator=g)
    wild = torch.rand(shape, device=device, generator=g) < OUTLIERS
    x = torch.where(wild, torch.randn(shape, device=device, generator=g) * OUTLIER_STD, x)
    return x.to(torch.float16)


def accuracy(run: Run) -> None:
    torch = run.torch
    for d in (64, 128, 256):
        shape = (1, 2048 // d, 4096, d)
        q, k, v = (outlier_inputs(torch, shape, seed) for seed in (1, 2, 3))
        ref = reference_attention(torch, q, k, v, False, False).double()
        rows = {"fp16 kernel": run.fp16.attention(q, k, v)}
        for name, blocks, incoherent in (("fp8 per-tensor", False, False), ("fp8 blocks", True, False),
                                         ("fp8 per-tensor + incoherent", False, True),
                                         ("fp8 blocks + incoherent", True, True)):
            inputs, scales = run.fp8.quantize(q, k, v, incoherent=incoherent, blocks=blocks)
            rows[name] = run.fp8.attention(*inputs, descale=scales, out=torch.empty_like(q))
        for name, out in rows.items():
            rmse = (out.double() - ref).pow(2).mean().sqrt().item()
            run.doc["accuracy"].append({"d": d, "shape": list(shape), "kernel": name, "rmse": rmse})
            log(f"accuracy d={d} {name}: RMSE {rmse:.3e}")
    run.save()


# ------------------------------------------------------------------------------------------ timing

def tflops(batch, heads, seq, d, seconds):
    return 4 * batch * heads * seq * seq * d / seconds / 1e12


def timing(run: Run) -> None:
    import torch.nn.functional as F
    import triton
    from torch.nn.attention import SDPBackend, sdpa_kernel
    torch = run.torch
    for d in HEAD_DIMS:
        for seq in SEQLENS:
            if run.left() < 0:
                run.doc["skipped"].append({"d": d, "seqlen": seq})
                continue
            batch, heads = TOKENS // seq, MODEL_DIM // d
            q, k, v = (torch.randn(batch, heads, seq, d, device="cuda", dtype=torch.float16) for _ in range(3))
            inputs, scales = run.fp8.quantize(q, k, v)
            out = torch.empty_like(q)
            size = {"batch": batch, "heads": heads, "q": seq, "x": seq, "d": d}
            chosen = launched(run.fp8, "flash", d, size)

            def sdpa():
                with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
                    return F.scaled_dot_product_attention(q, k, v)

            timed = {"fp8": lambda: run.fp8.attention(*inputs, descale=scales, out=out),
                     "fp8_quantising": lambda: run.fp8.attention(q, k, v, out=out),
                     "fp16": lambda: run.fp16.attention(q, k, v, out=out),
                     "sdpa_cudnn": sdpa}
            for overlap in OVERLAPS:
                if overlap != chosen["OVERLAP"] and not (chosen["WARPGROUPS"] == 1 and "inter" in overlap):
                    cfg = {"flash": {**chosen, "OVERLAP": overlap}}
                    timed[f"fp8_{overlap}"] = (lambda cfg=cfg: run.fp8.attention(*inputs, descale=scales, out=out,
                                                                                 config=cfg))
            row = {"d": d, "seqlen": seq, "batch": batch, "heads": heads, "fp8_config": chosen}
            for name, fn in timed.items():
                try:
                    s = triton.testing.do_bench(fn, warmup=WARMUP_MS, rep=REP_MS) * 1e-3
                    row[name] = round(tflops(batch, heads, seq, d, s), 1)
                    row[f"{name}_us"] = round(s * 1e6, 1)
                except Exception as exc:  # noqa: BLE001
                    row[name] = None
                    row[f"{name}_error"] = repr(exc)[:200]
            row[f"fp8_{chosen['OVERLAP']}"] = row["fp8"]
            for name, kind in (("fp8", "fp8"), ("fp16", "fp16")):
                label, s = hopper_predicted(run.profile, run.generated[name], seq, d, kind, batch * heads)
                row[f"{name}_predicted_config"] = label
                row[f"{name}_predicted_us"] = round(s * 1e6, 1)
            log(f"timing d={d} L={seq}: " + ", ".join(f"{n} {row[n]}" for n in timed))
            run.doc["timing"].append(row)
            run.save()
            torch.cuda.empty_cache()


# ------------------------------------------------------------------------------------------ report

def markdown(doc) -> str:
    lines = heading(doc, "FP8 attention (e4m3, block scales) from the attention diagram")
    checks = doc["checks"]
    bad = [c for c in checks if not c["ok"]]
    worst = max((c["rel_err"] for c in checks), default=0.0)
    lines += [f"## Checks against float64: {len(checks) - len(bad)} of {len(checks)} within {FP8_TOLERANCE:g} "
              f"(largest relative error {worst:.2e})", ""]
    for c in bad:
        lines.append(f"- FAILED d={c['d']} {c['seq_q']}x{c['seq_k']} {c['dtype']} config={c['config']}: "
                     f"{c['rel_err']:.2e} {c.get('error') or ''}")
    if doc["accuracy"]:
        kinds = list(dict.fromkeys(a["kernel"] for a in doc["accuracy"]))
        lines += ["", f"## Accuracy: RMSE against float64, inputs N(0, 1) with {OUTLIERS:.1%} outliers from "
                  f"N(0, {OUTLIER_STD:g}) (FlashAttention-3's Table 3), seqlen 4096, 2048 / d heads", "",
                  "| d | " + " | ".join(kinds) + " |", "|---" * (len(kinds) + 1) + "|"]
        for d in sorted({a["d"] for a in doc["accuracy"]}):
            by = {a["kernel"]: a["rmse"] for a in doc["accuracy"] if a["d"] == d}
            lines.append(f"| {d} | " + " | ".join(f"{by.get(k, math.nan):.2e}" for k in kinds) + " |")
    lines += ["", f"## Timing: {TOKENS} tokens, {MODEL_DIM} model dims, not causal (TFLOP/s of 4 b h L^2 d)", "",
              "FP8 on e4m3 inputs (quantised before), at the model's choice and at each overlap; FP8 on 16-bit "
              "inputs (quantised in the call); napkin's fp16 kernel; SDPA's cuDNN backend in fp16.", "",
              "| d | L | fp8 | " + " | ".join(f"fp8 {o}" for o in OVERLAPS) + " | fp8 quantising | fp16 | cuDNN fp16 "
              "| fp8 / fp16 | fp8 / cuDNN | fp8 measured / predicted | fp8 config |",
              "|---" * (10 + len(OVERLAPS)) + "|"]
    for r in doc["timing"]:
        c = r["fp8_config"]
        lines.append(
            f"| {r['d']} | {r['seqlen']} | {r.get('fp8')} | "
            + " | ".join(str(r.get(f"fp8_{o}", "-")) for o in OVERLAPS)
            + f" | {r.get('fp8_quantising')} | {r.get('fp16')} | {r.get('sdpa_cudnn')} | "
            f"{ratio(r.get('fp8'), r.get('fp16'))} | {ratio(r.get('fp8'), r.get('sdpa_cudnn'))} | "
            f"{ratio(r.get('fp8_us'), r.get('fp8_predicted_us'))} | N={c['WARPGROUPS']}, s_x={c['BLOCK_X']}, "
            f"{c['STAGES']} stages, {c['OVERLAP']}, {c['SCHEDULE']} |")
    if doc["skipped"]:
        lines += ["", f"Skipped (budget): {doc['skipped']}"]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    args = parse(argv, __doc__.splitlines()[0], quick="only the checks at the modules' own configurations "
                 "(no config=), then the accuracy; no timing")
    run = Run(args, argv)
    ok = checks(run, own_only=args.quick)
    accuracy(run)
    if args.quick:
        run.save()
        return 0 if ok else 1
    if not ok:
        log("checks failed: no timing")
        run.save()
        return 1
    timing(run)
    run.save()
    return 0


if __name__ == "__main__":
    sys.exit(main())
