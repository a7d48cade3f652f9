"""The Hopper contraction kernel against what a user would call instead, and a sweep of its configurations.

napkin kernel generates, on a Hopper profile, the warp-specialised contraction kernel for matmul,
matmul_bias_gelu, rmsnorm_matmul and swiglu_mlp (analyzer.config.family.hopper_contraction). This
script, in one run:
- checks each generated module against a float64 reference (relative error < 1e-2), at its default sizes
  and at sizes that are no multiple of any tile (the TMA engine's edges);
- times each at the issue's shapes beside torch in the same process: matmul 4096^3 and 8192^3 in fp16 and
  bf16 against torch.matmul; matmul with bias and GELU (8192 x 4096 -> 16384, fp16) against torch's
  unfused matmul, add and GELU (and addmm + GELU, whose bias cuBLAS fuses); the SwiGLU MLP at Llama-3-8B's
  dimensions (8192 tokens, 4096 -> 14336 -> 4096, bf16) against torch's unfused sequence; RMSNorm feeding
  a matmul (16384 x 4096 -> 4096, fp16) against F.rms_norm then torch.matmul;
- sweeps every legal configuration of the matmul at 2048^3, 4096^3 and 8192^3, of the GELU matmul and of
  the RMSNorm matmul at their defaults (fp16): the recording napkin calibrate --kernel contraction fits the
  kernel's model to (and holds it against).

Every timing is a CUDA graph's replays (triton.testing.do_bench_cudagraph), median of its repetitions.

    python bench/hopper_contraction.py [--gpu h100] [--workers 16] [--out DIR] [--no-sweep]

It writes hopper_contraction_<gpu>.json and .md into --out (bench/results).
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

SWEEP_MATMUL = (2048, 4096, 8192)
GELU = {"n": 8192, "i": 4096, "o": 16384}
SWIGLU = {"n": 8192, "i": 4096, "f": 14336, "o": 4096}
RMSNORM = {"n": 16384, "i": 4096, "o": 4096}
EPS = 1e-6          # rmsnorm_matmul's shift
EDGES = {"matmul": {"a": 1000, "b": 1100, "c": 900}, "matmul_bias_gelu": {"n": 777, "i": 1000, "o": 1500},
         "swiglu_mlp": {"n": 500, "i": 700, "f": 900, "o": 600}, "rmsnorm_matmul": {"n": 777, "i": 1000, "o": 1500}}


def inputs(torch, diagram: str, size: dict, dtype, seed: int = 0) -> list:
    """The diagram's inputs at `size`, scaled so that every output is of order one."""
    g = torch.Generator(device="cuda").manual_seed(seed)

    def r(*shape, scale=1.0):
        return (torch.randn(*shape, device="cuda", generator=g) * scale).to(dtype)
    if diagram == "matmul":
        return [r(size["a"], size["b"]), r(size["b"], size["c"], scale=size["b"] ** -0.5)]
    if diagram == "matmul_bias_gelu":
        return [r(size["n"], size["i"]), r(size["i"], size["o"], scale=size["i"] ** -0.5), r(size["o"])]
    if diagram == "rmsnorm_matmul":
        gain = (torch.rand(size["i"], device="cuda", generator=g) + 0.5).to(dtype)
        return [r(size["n"], size["i"]), gain, r(size["i"], size["o"], scale=size["i"] ** -0.5)]
    return [r(size["n"], size["i"]), r(size["i"], size["f"], scale=size["i"] ** -0.5),
            r(size["i"], size["f"], scale=size["i"] ** -0.5), r(size["f"], size["o"], scale=size["f"] ** -0.5)]


def reference(torch, diagram: str, xs: list):
    d = [x.double() for x in xs]
    if diagram == "matmul":
        return d[0] @ d[1]
    if diagram == "matmul_bias_gelu":
        return torch.nn.functional.gelu(d[0] @ d[1] + d[2], approximate="tanh")
    if diagram == "rmsnorm_matmul":
        return (d[0] * torch.rsqrt((d[0] ** 2).mean(1, keepdim=True) + EPS) * d[1]) @ d[2]
    h1, h3 = d[0] @ d[1], d[0] @ d[2]
    return (torch.nn.functional.silu(h1) * h3) @ d[3]


def peer(torch, diagram: str, xs: list, how: str):
    """What a user would call instead."""
    F = torch.nn.functional
    if diagram == "matmul":
        return lambda: torch.matmul(xs[0], xs[1])
    if diagram == "matmul_bias_gelu":
        if how == "addmm":
            return lambda: F.gelu(torch.addmm(xs[2], xs[0], xs[1]), approximate="tanh")
        return lambda: F.gelu(torch.matmul(xs[0], xs[1]) + xs[2], approximate="tanh")
    if diagram == "rmsnorm_matmul":
        return lambda: torch.matmul(F.rms_norm(xs[0], (xs[0].shape[1],), xs[1], eps=EPS), xs[2])
    return lambda: torch.matmul(F.silu(torch.matmul(xs[0], xs[1])) * torch.matmul(xs[0], xs[2]), xs[3])


def flops(diagram: str, s: dict) -> float:
    if diagram == "matmul":
        return 2.0 * s["a"] * s["b"] * s["c"]
    if diagram in ("matmul_bias_gelu", "rmsnorm_matmul"):
        return 2.0 * s["n"] * s["i"] * s["o"]
    return 2.0 * s["n"] * s["i"] * s["f"] * 2 + 2.0 * s["n"] * s["f"] * s["o"]


def square(n: int) -> dict:
    return {"a": n, "b": n, "c": n}


def warm(path: str, name: str, wrapper: str, diagram: str, dtype: str, config: dict | None) -> str:
    """Compile one configuration in a worker process: one call on small inputs fills Triton's cache."""
    import torch
    module = import_file(Path(path), name)
    xs = inputs(torch, diagram, EDGES[diagram], {"fp16": torch.float16, "bf16": torch.bfloat16}[dtype])
    try:
        getattr(module, wrapper)(*xs, config=config)
        torch.cuda.synchronize()
        return ""
    except Exception as exc:  # noqa: BLE001 - a configuration that fails is a row of its own
        return f"{type(exc).__name__}: {str(exc)[:300]}"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--gpu", default="h100", help="the profile napkin generates the kernels for")
    ap.add_argument("--workers", type=int, default=16, help="processes compiling configurations ahead")
    ap.add_argument("--out", type=Path, default=Path(__file__).resolve().parent / "results")
    ap.add_argument("--no-sweep", action="store_true", help="the comparison alone")
    ap.add_argument("--rep-ms", type=float, default=50.0)
    args = ap.parse_args(argv)
    import multiprocessing

    import torch
    import triton

    from analyzer import hardware
    from analyzer.codegen import generate
    from analyzer.config.contraction import candidates

    env = environment()
    profile = hardware.load(args.gpu)
    began = time.time()
    tmp = Path(tempfile.mkdtemp())
    modules = {}
    for diagram, dtype in (("matmul", "fp16"), ("matmul", "bf16"), ("matmul_bias_gelu", "fp16"),
                           ("rmsnorm_matmul", "fp16"), ("swiglu_mlp", "bf16")):
        g = generate(diagram, profile, dtype=dtype)
        path = tmp / f"{diagram}_{dtype}.py"
        g.write(path)
        modules[(diagram, dtype)] = (import_file(path, path.stem), path, g)
        log(f"{diagram} {dtype}: {g.backend}")
    wrapper = {d: d for d, _ in modules}
    torch_dtype = {"fp16": torch.float16, "bf16": torch.bfloat16}

    # the configurations to sweep, compiled ahead in workers
    sweep = []
    if not args.no_sweep:
        for diagram, dtype, sizes in [*(("matmul", "fp16", square(n)) for n in SWEEP_MATMUL),
                                      ("matmul_bias_gelu", "fp16", GELU), ("rmsnorm_matmul", "fp16", RMSNORM)]:
            g = modules[(diagram, dtype)][2]
            for c in candidates(profile, g.contraction.tables[0].structure, dtype):
                sweep.append((diagram, dtype, sizes, c.entry()))
    jobs = {(d, t, json.dumps(e)) for d, t, _, e in sweep}
    jobs |= {(d, t, "null") for d, t in modules}
    ctx = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(max_workers=args.workers, mp_context=ctx) as pool:
        futures = {j: pool.submit(warm, str(modules[(j[0], j[1])][1]), modules[(j[0], j[1])][1].stem,
                                  wrapper[j[0]], j[0], j[1], json.loads(j[2])) for j in sorted(jobs)}
        errors = {j: f.result() for j, f in futures.items()}
    log(f"compiled {len(jobs)} configurations in {time.time() - began:.0f} s")

    def ours(diagram, dtype, xs, config=None):
        module = modules[(diagram, dtype)][0]
        return lambda: getattr(module, wrapper[diagram])(*xs, config=config)

    checks, rows = [], []
    for (diagram, dtype), (module, _, g) in modules.items():
        defaults = {s.name: int(v) for s, v in g.diagram.defaults.items()}
        for what, sizes in (("edges", EDGES[diagram]), ("defaults", defaults)):
            xs = inputs(torch, diagram, sizes, torch_dtype[dtype], seed=1)
            out = ours(diagram, dtype, xs)()
            err = rel_err(torch, out, reference(torch, diagram, xs))
            checks.append({"diagram": diagram, "dtype": dtype, "sizes": sizes, "what": what, "rel_err": err,
                           "ok": err < 1e-2})
            log(json.dumps(checks[-1]))
            del xs, out
            torch.cuda.empty_cache()

    targets = [*(("matmul", dt, square(n)) for n in (4096, 8192) for dt in ("fp16", "bf16")),
               ("matmul_bias_gelu", "fp16", GELU), ("rmsnorm_matmul", "fp16", RMSNORM), ("swiglu_mlp", "bf16", SWIGLU)]
    for diagram, dtype, sizes in targets:
        xs = inputs(torch, diagram, sizes, torch_dtype[dtype])
        t_ours = timed(triton, ours(diagram, dtype, xs), graph=True, rep_ms=args.rep_ms)
        row = {"diagram": diagram, "dtype": dtype, "sizes": sizes, "flops": flops(diagram, sizes),
               "ours_s": t_ours["time_s"], "ours_p20": t_ours["time_s_p20"], "ours_p80": t_ours["time_s_p80"]}
        for how in (("unfused", "addmm") if diagram == "matmul_bias_gelu" else ("torch",)):
            t = timed(triton, peer(torch, diagram, xs, how), graph=True, rep_ms=args.rep_ms)
            row[f"{how}_s"] = t["time_s"]
            row[f"ratio_{how}"] = t["time_s"] / t_ours["time_s"]
        from analyzer.config.launch import expected
        e = expected(modules[(diagram, dtype)][2].as_launch, profile, sizes)
        row.update({"predicted_s": e.time_s, "configuration": e.configuration})
        rows.append(row)
        log(json.dumps(row))
        del xs
        torch.cuda.empty_cache()

    records = []
    current = None
    for diagram, dtype, sizes, entry in sweep:
        if (diagram, json.dumps(sizes)) != current:
            current = (diagram, json.dumps(sizes))
            xs = inputs(torch, diagram, sizes, torch_dtype[dtype])
        err = errors.get((diagram, dtype, json.dumps(entry)), "")
        rec = {"diagram": diagram, "dtype": dtype, "sizes": sizes, "config": entry}
        if err:
            rec["error"] = err
        else:
            t = timed(triton, ours(diagram, dtype, xs, entry), graph=True, rep_ms=20)
            rec.update({"seconds": t["time_s"], "p20": t["time_s_p20"], "p80": t["time_s_p80"]})
        records.append(rec)
    log(f"swept {len(records)} configurations; {time.time() - began:.0f} s in all")

    doc = {"command": command("hopper_contraction.py", argv), "env": env, "gpu_profile": profile.name,
           "timer": f"triton.testing.do_bench_cudagraph (rep {args.rep_ms:g} ms; the sweep's 20 ms), median",
           "checks": checks, "targets": rows, "records": records}
    md = [f"# The Hopper contraction kernel on {env['gpu']}", "", f"`{doc['command']}`; {doc['timer']}.", "",
          "| diagram | dtype | sizes | napkin | peer | peer/napkin | predicted/measured | configuration |",
          "|---|---|---|---|---|---|---|---|"]
    for r in rows:
        peers = [k[:-2] for k in r if k.endswith("_s") and k not in ("ours_s", "predicted_s")]
        for how in peers:
            md.append(f"| {r['diagram']} | {r['dtype']} | {' '.join(f'{k}={v}' for k, v in r['sizes'].items())} | "
                      f"{r['ours_s'] * 1e6:.1f} us ({r['flops'] / r['ours_s'] / 1e12:.0f} TFLOP/s) | "
                      f"{how} {r[how + '_s'] * 1e6:.1f} us | {r['ratio_' + how]:.3f}x | "
                      f"{r['predicted_s'] / r['ours_s']:.3f} | {r['configuration']} |")
    md += ["", "Checks against float64: " + ", ".join(
        f"{c['diagram']} {c['dtype']} {c['what']} {c['rel_err']:.1e}" for c in checks), ""]
    save_results(args.out, "hopper_contraction_" + ("h200" if "H200" in env["gpu"] else "h100"), doc,
                 "\n".join(md) + "\n")
    return 0 if all(c["ok"] for c in checks) else 1


if __name__ == "__main__":
    raise SystemExit(main())
