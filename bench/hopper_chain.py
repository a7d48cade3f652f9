"""The Hopper chain kernel (two contractions, the second fed by the first in registers) against what a
user would call instead, and every legal configuration of it, in one run.

napkin kernel generates, on a Hopper profile, the chain kernel for mlp2 (Y = relu(X W1) W2),
linear_attention_queries (O = (Q K^T) V) and a diagram of this script's own, mlp_bias (Y = gelu(X W1 + b) W2:
ops between the contractions that load a vector) (analyzer.config.chain). This script:
- checks each generated module against a float64 reference (relative error < 1e-2), at its default sizes
  and at sizes that are no multiple of any tile (the TMA engine's edges, a stream with a partial chunk),
  and what a user may pass besides (one row and a stream shorter than a chunk, one query and one key, a
  transposed weight, a misaligned base: the launcher's copies);
- times each beside torch's unfused sequence of the same order (mlp2: matmul, relu, matmul; linear
  attention: (Q K^T) V as two matmuls), and linear attention's keys-first order, Q (K^T V), in torch and
  in napkin's modules for linear_attention (fused: every group of queries builds the state) and
  linear_attention_split (the state built once in pieces, three kernels; both the portable module: the
  chain kernel refuses that order);
- times every legal configuration of the chain kernel at each diagram's defaults: whether the model's
  choice is within 5 % of the fastest, and the model's error on each.

Every timing is a CUDA graph's replays (triton.testing.do_bench_cudagraph), median of its repetitions.

    python bench/hopper_chain.py [--gpu h100] [--workers 16] [--out DIR]

It writes hopper_chain_<gpu>.json and .md into --out (bench/results).
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.common import (  # noqa: E402
    command,
    environment,
    import_file,
    log,
    rel_err,
    save_results,
    timed,
)

# mlp2 with a bias along the hidden features and GELU between the layers (written to a file of its own)
MLP_BIAS = """\
name: mlp_bias
title: A two-layer MLP with a bias and GELU between the layers
dtype: fp16
levels: [gmem, smem]
axes:
  n: {default: 16384}
  i: {default: 256}
  f: {default: 4096}
  o: {default: 128}
inputs:
  X: [n, i]
  W1: [i, f]
  bias: [f]
  W2: [f, o]
ops:
  - {name: H, primitive: dot, inputs: [X, W1], over: i, output: [n, f]}
  - {name: Z, primitive: add, inputs: [H, bias], output: [n, f]}
  - {name: A, primitive: gelu, inputs: [Z], output: [n, f]}
  - {name: Y, primitive: dot, inputs: [A, W2], over: f, output: [n, o]}
outputs: [Y]
kernels:
  - name: mlp
    partition:
      smem: {group: {n: g_n}, stream: {f: s_f}}
"""
EDGES = {"mlp2": {"n": 1000, "i": 200, "f": 1000, "o": 120},
         "mlp_bias": {"n": 1000, "i": 200, "f": 1000, "o": 120},
         "linear_attention_queries": {"q": 1000, "x": 1100, "d": 96, "e": 80},
         "linear_attention": {"q": 1000, "x": 1100, "d": 96, "e": 80},
         "linear_attention_split": {"q": 1000, "c": 11, "xc": 100, "d": 96, "e": 80}}
def _transposed(torch, xs):
    """W1 as a transposed view of a (f, i) tensor: its last stride is not 1, so the launcher copies it."""
    return [xs[0], xs[1].T.contiguous().T, *xs[2:]]


def _offset(torch, xs):
    """X at a base 2 bytes past an allocation's: no TMA descriptor takes it, so the launcher copies it."""
    x = xs[0]
    padded = torch.empty(x.numel() + 1, dtype=x.dtype, device=x.device)
    view = padded[1:].view(x.shape)
    view.copy_(x)
    return [view, *xs[1:]]


# inputs a user may pass beside the plain ones: one row and a stream shorter than a chunk, one query and
# one key, a transposed weight, a misaligned base
ODD_INPUTS = (("mlp2", "one row, f shorter than a chunk", {"n": 1, "i": 200, "f": 17, "o": 120},
               lambda t, xs: xs),
              ("linear_attention_queries", "one query and one key", {"q": 1, "x": 1, "d": 64, "e": 64},
               lambda t, xs: xs),
              ("mlp2", "W1 a transposed view", EDGES["mlp2"], _transposed),
              ("mlp2", "X at a misaligned base", EDGES["mlp2"], _offset))
MODULES = (("mlp2", "fp16"), ("mlp2", "bf16"), ("mlp_bias", "fp16"), ("mlp_bias", "bf16"),
           ("linear_attention_queries", "fp16"), ("linear_attention_queries", "bf16"), ("linear_attention", "fp16"),
           ("linear_attention_split", "fp16"))


def inputs(torch, diagram: str, s: dict, dtype, seed: int = 0) -> list:
    """The diagram's inputs at sizes `s`, scaled so that every output is of order one."""
    g = torch.Generator(device="cuda").manual_seed(seed)

    def r(*shape, scale=1.0):
        return (torch.randn(*shape, device="cuda", generator=g) * scale).to(dtype)
    if diagram == "mlp2":
        return [r(s["n"], s["i"]), r(s["i"], s["f"], scale=s["i"] ** -0.5), r(s["f"], s["o"], scale=s["f"] ** -0.5)]
    if diagram == "mlp_bias":
        return [r(s["n"], s["i"]), r(s["i"], s["f"], scale=s["i"] ** -0.5), r(s["f"]),
                r(s["f"], s["o"], scale=s["f"] ** -0.5)]
    if diagram == "linear_attention_split":     # the keys as c pieces of xc: views of (x, d) and (x, e)
        x = s["c"] * s["xc"]
        return [r(s["q"], s["d"], scale=s["d"] ** -0.5), r(x, s["d"]).view(s["c"], s["xc"], s["d"]),
                r(x, s["e"], scale=x ** -0.5).view(s["c"], s["xc"], s["e"])]
    return [r(s["q"], s["d"], scale=s["d"] ** -0.5), r(s["x"], s["d"]), r(s["x"], s["e"], scale=s["x"] ** -0.5)]


def reference(torch, diagram: str, xs: list):
    d = [x.double() for x in xs]
    if diagram == "mlp2":
        return torch.relu(d[0] @ d[1]) @ d[2]
    if diagram == "mlp_bias":
        return torch.nn.functional.gelu(d[0] @ d[1] + d[2], approximate="tanh") @ d[3]
    k, v = (x.reshape(-1, x.shape[-1]) for x in d[1:])     # the split form's pieces as one run of keys
    return d[0] @ (k.T @ v)


def peers(torch, diagram: str, xs: list) -> dict:
    """What a user would call instead: torch's unfused sequence, in each order it has."""
    F = torch.nn.functional
    if diagram == "mlp2":
        return {"torch": lambda: torch.matmul(torch.relu(torch.matmul(xs[0], xs[1])), xs[2])}
    if diagram == "mlp_bias":
        return {"torch": lambda: torch.matmul(F.gelu(torch.matmul(xs[0], xs[1]) + xs[2], approximate="tanh"), xs[3]),
                "torch addmm": lambda: torch.matmul(F.gelu(torch.addmm(xs[2], xs[0], xs[1]), approximate="tanh"),
                                                    xs[3])}
    k, v = (x.reshape(-1, x.shape[-1]) for x in xs[1:])    # a view: the split form's pieces as one run of keys
    return {"torch queries first": lambda: torch.matmul(torch.matmul(xs[0], k.T), v),
            "torch keys first": lambda: torch.matmul(xs[0], torch.matmul(k.T, v))}


def flops(diagram: str, s: dict) -> float:
    """The diagram's tensor FLOPs (the keys-first order does fewer: its own count)."""
    if diagram in ("mlp2", "mlp_bias"):
        return 2.0 * s["n"] * s["f"] * (s["i"] + s["o"])
    if diagram == "linear_attention":
        return 2.0 * s["x"] * s["d"] * s["e"] + 2.0 * s["q"] * s["d"] * s["e"]
    if diagram == "linear_attention_split":
        return 2.0 * s["c"] * s["xc"] * s["d"] * s["e"] + 2.0 * s["q"] * s["d"] * s["e"]
    return 2.0 * s["q"] * s["x"] * (s["d"] + s["e"])


def warm(path: str, name: str, diagram: str, dtype: str, config: dict | None) -> str:
    """Compile one configuration in a worker process: one call on small inputs fills Triton's cache."""
    import torch
    module = import_file(Path(path), name)
    xs = inputs(torch, diagram, EDGES[diagram], {"fp16": torch.float16, "bf16": torch.bfloat16}[dtype])
    try:
        getattr(module, diagram)(*xs, config=config)
        torch.cuda.synchronize()
        return ""
    except Exception as exc:  # noqa: BLE001 - a configuration that fails is a row of its own
        return f"{type(exc).__name__}: {str(exc)[:300]}"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--gpu", default="h100", help="the profile napkin generates the kernels for")
    ap.add_argument("--workers", type=int, default=16, help="processes compiling configurations ahead")
    ap.add_argument("--out", type=Path, default=Path(__file__).resolve().parent / "results")
    ap.add_argument("--rep-ms", type=float, default=50.0)
    args = ap.parse_args(argv)
    import multiprocessing

    import torch
    import triton

    from analyzer import hardware
    from analyzer.codegen import generate
    from analyzer.config import chain
    from analyzer.config.family.hopper_contraction import counts_at
    from analyzer.config.launch import expected

    env = environment()
    profile = hardware.load(args.gpu)
    began = time.time()
    tmp = Path(tempfile.mkdtemp())
    modules = {}
    (tmp / "mlp_bias.yaml").write_text(MLP_BIAS)
    for diagram, dtype in MODULES:
        g = generate(str(tmp / "mlp_bias.yaml") if diagram == "mlp_bias" else diagram, profile, dtype=dtype)
        path = tmp / f"{diagram}_{dtype}.py"
        g.write(path)
        modules[(diagram, dtype)] = (import_file(path, path.stem), path, g)
        log(f"{diagram} {dtype}: {g.backend}")
    torch_dtype = {"fp16": torch.float16, "bf16": torch.bfloat16}

    sweep = []      # every legal chain configuration at the defaults, fp16
    for diagram in ("mlp2", "linear_attention_queries"):
        g = modules[(diagram, "fp16")][2]
        t = g.contraction.tables[0]
        defaults = {s.name: int(v) for s, v in g.diagram.defaults.items()}
        plan = g.kernels[0].plan
        for c in chain.candidates(profile, t.structure, "fp16", chain.widths_of(plan, t.structure, defaults)):
            sweep.append((diagram, defaults, c))
    jobs = {(d, "fp16", json.dumps(c.entry())) for d, _, c in sweep} | {(d, t, "null") for d, t in modules}
    ctx = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(max_workers=args.workers, mp_context=ctx) as pool:
        futures = {j: pool.submit(warm, str(modules[(j[0], j[1])][1]), modules[(j[0], j[1])][1].stem, j[0], j[1],
                                  json.loads(j[2])) for j in sorted(jobs)}
        errors = {j: f.result() for j, f in futures.items()}
    log(f"compiled {len(jobs)} configurations in {time.time() - began:.0f} s")

    def ours(diagram, dtype, xs, config=None):
        module = modules[(diagram, dtype)][0]
        return lambda: getattr(module, diagram)(*xs, config=config)

    checks, rows = [], []
    for diagram, what, sizes, make in ODD_INPUTS:      # what a user may pass: the launcher's copies and edges
        xs = make(torch, inputs(torch, diagram, sizes, torch.float16, seed=2))
        err = rel_err(torch, ours(diagram, "fp16", xs)(), reference(torch, diagram, xs))
        checks.append({"diagram": diagram, "dtype": "fp16", "backend": modules[(diagram, "fp16")][2].backend,
                       "sizes": sizes, "what": what, "rel_err": err, "ok": err < 1e-2})
        log(json.dumps(checks[-1]))
    for (diagram, dtype), (_, _, g) in modules.items():
        defaults = {s.name: int(v) for s, v in g.diagram.defaults.items()}
        for what, sizes in (("edges", EDGES[diagram]), ("defaults", defaults)):
            xs = inputs(torch, diagram, sizes, torch_dtype[dtype], seed=1)
            err = rel_err(torch, ours(diagram, dtype, xs)(), reference(torch, diagram, xs))
            checks.append({"diagram": diagram, "dtype": dtype, "backend": g.backend, "sizes": sizes, "what": what,
                           "rel_err": err, "ok": err < 1e-2})
            log(json.dumps(checks[-1]))
        xs = inputs(torch, diagram, defaults, torch_dtype[dtype])
        t_ours = timed(triton, ours(diagram, dtype, xs), graph=True, rep_ms=args.rep_ms)
        e = expected(g.as_launch, profile, defaults)
        row = {"diagram": diagram, "dtype": dtype, "backend": g.backend, "sizes": defaults,
               "flops": flops(diagram, defaults), "ours_s": t_ours["time_s"], "predicted_s": e.time_s,
               "configuration": e.configuration, "peers": {}}
        for how, fn in peers(torch, diagram, xs).items():
            row["peers"][how] = timed(triton, fn, graph=True, rep_ms=args.rep_ms)["time_s"]
        rows.append(row)
        log(json.dumps(row))
        del xs
        torch.cuda.empty_cache()

    records = []
    for diagram, sizes, c in sweep:
        xs = inputs(torch, diagram, sizes, torch.float16)
        rec = {"diagram": diagram, "sizes": sizes, "config": c.entry(), "label": c.label()}
        err = errors.get((diagram, "fp16", json.dumps(c.entry())), "")
        if err:
            rec["error"] = err
        else:
            rec["seconds"] = timed(triton, ours(diagram, "fp16", xs, c.entry()), graph=True, rep_ms=20)["time_s"]
            ((_, counts),) = counts_at(diagram, profile, "fp16", sizes, c.label())
            rec["predicted_s"] = chain.predicted_time(profile, c, counts, "fp16",
                                                      chain.ContractionParams.of(profile, chain=True))[0]
        records.append(rec)
        log(json.dumps(rec))
    log(f"swept {len(records)} configurations; {time.time() - began:.0f} s in all")

    doc = {"command": command("hopper_chain.py", argv), "env": env, "gpu_profile": profile.name,
           "timer": f"triton.testing.do_bench_cudagraph (rep {args.rep_ms:g} ms; the sweep's 20 ms), median",
           "checks": checks, "targets": rows, "records": records}
    md = [f"# The Hopper chain kernel on {env['gpu']}", "", f"`{doc['command']}`; {doc['timer']}.", "",
          "| diagram | dtype | napkin kernel | napkin | peer | peer/napkin | predicted/measured | configuration |",
          "|---|---|---|---|---|---|---|---|"]
    for r in rows:
        for how, t in r["peers"].items():
            md.append(f"| {r['diagram']} | {r['dtype']} | {r['backend']} | {r['ours_s'] * 1e6:.1f} us "
                      f"({r['flops'] / r['ours_s'] / 1e12:.0f} TFLOP/s) | {how} {t * 1e6:.1f} us | "
                      f"{t / r['ours_s']:.3f}x | {r['predicted_s'] / r['ours_s']:.3f} | {r['configuration']} |")
    md += ["", "Every legal configuration at the defaults (fp16):", "",
           "| diagram | configuration | measured | predicted/measured | behind the fastest |", "|---|---|---|---|---|"]
    for diagram in ("mlp2", "linear_attention_queries"):
        done = [r for r in records if r["diagram"] == diagram and "seconds" in r]
        best = min((r["seconds"] for r in done), default=float("nan"))
        for r in sorted(done, key=lambda r: r["seconds"]):
            md.append(f"| {diagram} | {r['label']} | {r['seconds'] * 1e6:.1f} us | "
                      f"{r['predicted_s'] / r['seconds']:.3f} | {r['seconds'] / best - 1:.1%} |")
        md += [f"| {diagram} | {r['label']} | {r['error']} | | |" for r in records
               if r["diagram"] == diagram and "error" in r]
    md += ["", "Checks against float64: " + ", ".join(
        f"{c['diagram']} {c['dtype']} {c['what']} {c['rel_err']:.1e}" for c in checks), ""]
    save_results(args.out, "hopper_chain_" + ("h200" if "H200" in env["gpu"] else "h100"), doc, "\n".join(md) + "\n")
    return 0 if all(c["ok"] for c in checks) else 1


if __name__ == "__main__":
    raise SystemExit(main())
