"""The log-sum-exp the generated attention kernels return (attention(..., return_lse=True)), checked on
the GPU against float64, with the output beside it; and the cost of returning it, timed in one run.

For each shipped attention diagram whose kernel normalises by a softmax (plain, causal, grouped-query,
MLA's 192/128, ALiBi, an additive bias, softcap with a sliding window, sinks, a band), at lengths 1, 17,
1000 and 4096 (2 batch entries, the diagram's heads), fp16:
- the output against analyzer.measure.reference (the largest error over the largest value, held to
  sqrt(L) u as napkin measure holds it);
- the log-sum-exp against analyzer.measure.reference.reference_lse: the largest absolute error, held to
  sqrt(L) u times the largest |lse| (what a score's rounding moves it by), and its rows that see no key
  -inf where the reference's are;
- the custom op attention_op(lse=True) against the plain call, and under torch.compile;
- the time of a call with and without the log-sum-exp at 8 x 16 heads x 4096, hdim 128 (CUDA events).

    python bench/lse_check.py [--gpu h100] [--backend hopper|triton] [--out DIR]

It writes lse_check_<gpu>.json and .md into --out ($OUT if set, else bench/results).
"""

from __future__ import annotations

import argparse
import math
import os
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.common import command, environment, log, save_results  # noqa: E402

DIAGRAMS = ("attention", "causal_attention", "gqa", "mla_attention", "alibi_attention", "bias_attention",
            "gemma2_local_attention", "sink_attention", "band_attention", "softcap_attention")
LENGTHS = (1, 17, 1000, 4096)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--gpu", default="h100")
    ap.add_argument("--backend", default=None, help="hopper (the default on a Hopper profile) or triton")
    ap.add_argument("--out", type=Path,
                    default=Path(os.environ.get("OUT", Path(__file__).resolve().parent / "results")))
    args = ap.parse_args(argv)
    import torch

    from analyzer.codegen import generate
    from analyzer.measure.reference import inputs, reduction, reference, reference_lse, tolerance
    from analyzer.measure.run import wrapper_of
    from analyzer.measure.timing import timed

    env = environment()
    tmp = Path(tempfile.mkdtemp())
    rows, ok = [], True
    for diagram in DIAGRAMS:
        g = generate(diagram, args.gpu, backend=args.backend)
        fn = wrapper_of(g, tmp)
        module = sys.modules[fn.__module__]
        for length in LENGTHS:
            sizes = {g.diagram.size(g.roles.seq_q).name: length, g.diagram.size(g.roles.seq_k).name: length,
                     "batch": 2}
            shapes, kwargs = inputs(g, sizes)
            gen = torch.Generator(device="cuda").manual_seed(length)
            xs = [torch.randn(*s, generator=gen, device="cuda", dtype=torch.float16) for s in shapes]
            row = {"diagram": diagram, "backend": g.backend, "length": length}
            try:
                out, lse = fn(*xs, **kwargs, return_lse=True)
                want, want_lse = reference(torch, g, xs, sizes), reference_lse(torch, g, xs, sizes)
                allowed = tolerance(g.dtype, reduction(g, sizes))
                finite = torch.isfinite(want_lse)
                row["out_error"] = float((out.double() - want).abs().max() / want.abs().max().clamp_min(1e-30))
                row["lse_error"] = float((lse.double() - want_lse)[finite].abs().max()) if finite.any() else 0.0
                row["lse_allowed"] = allowed * max(1.0, float(want_lse[finite].abs().max()) if finite.any() else 1.0)
                row["empty_rows_agree"] = bool((torch.isfinite(lse) == finite).all())
                row["shape"] = list(lse.shape)
                op = module.attention_op(lse=True)
                o2, l2 = op(*xs, causal=kwargs["causal"])
                row["op_agrees"] = bool(torch.equal(o2, out) and torch.equal(l2, lse))
                row["ok"] = (row["out_error"] <= allowed and row["lse_error"] <= row["lse_allowed"]
                             and row["empty_rows_agree"] and row["op_agrees"] and lse.dtype == torch.float32)
            except Exception as exc:  # noqa: BLE001 - a failure is a row of the report
                row.update(ok=False, error=f"{type(exc).__name__}: {str(exc)[:300]}")
            ok &= row["ok"]
            rows.append(row)
            log(row)

    # torch.compile around the op, and the cost of the log-sum-exp at a large shape
    g = generate("attention", args.gpu, backend=args.backend)
    fn = wrapper_of(g, tmp)
    module = sys.modules[fn.__module__]
    q, k, v = (torch.randn(8, 16, 4096, 128, device="cuda", dtype=torch.float16) for _ in range(3))
    op = module.attention_op(lse=True)
    compiled = torch.compile(lambda q, k, v: op(q, k, v, causal=False), fullgraph=True)
    o_c, l_c = compiled(q, k, v)
    o_p, l_p = fn(q, k, v, return_lse=True)
    timing = {"compiled_agrees": bool(torch.equal(o_c, o_p) and torch.equal(l_c, l_p))}
    for what, call in (("without", lambda: fn(q, k, v)), ("with", lambda: fn(q, k, v, return_lse=True))):
        t = timed(call, 100.0)
        timing[f"{what}_s"] = t.time_s
        timing[f"{what}_p20"], timing[f"{what}_p80"] = t.time_s_p20, t.time_s_p80
    shape = {"batch": 8, "heads": 16, "q": 4096, "x": 4096, "d": 128}
    flops = generate("attention", args.gpu, sets=shape).expected.tensor_flops     # the engine's count there
    timing["cost"] = timing["with_s"] / timing["without_s"] - 1
    log(timing)
    ok &= timing["compiled_agrees"]

    doc = {"command": command("lse_check.py", argv), "env": env, "rows": rows, "timing": timing, "ok": ok}
    md = [f"# The log-sum-exp of the generated attention kernels on {env['gpu']}", "", f"`{doc['command']}`", "",
          "| diagram | kernel | length | output error | lse error | allowed | empty rows | op | ok |",
          "|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        if "error" in r:
            md.append(f"| {r['diagram']} | {r['backend']} | {r['length']} | {r['error']} | | | | | no |")
            continue
        md.append(f"| {r['diagram']} | {r['backend']} | {r['length']} | {r['out_error']:.2e} | {r['lse_error']:.2e} | "
                  f"{r['lse_allowed']:.2e} | {'agree' if r['empty_rows_agree'] else 'differ'} | "
                  f"{'same' if r['op_agrees'] else 'differs'} | {'yes' if r['ok'] else 'no'} |")
    md += ["", f"attention 8 x 16 heads x 4096, hdim 128, fp16 (CUDA events, median): "
           f"{timing['without_s'] * 1e6:.1f} us without the log-sum-exp "
           f"({flops / timing['without_s'] / 1e12:.0f} TFLOP/s), {timing['with_s'] * 1e6:.1f} us with it "
           f"({timing['cost']:+.1%}); torch.compile(fullgraph) of attention_op(lse=True) "
           f"{'returns the same tensors' if timing['compiled_agrees'] else 'DIFFERS'}.", ""]
    save_results(args.out, f"lse_check_{'h200' if 'H200' in env['gpu'] else 'h100'}"
                 + (f"_{args.backend}" if args.backend else ""), doc, "\n".join(md) + "\n")
    print("\n".join(md))
    return 0 if ok and math.isfinite(timing["cost"]) else 1


if __name__ == "__main__":
    raise SystemExit(main())
