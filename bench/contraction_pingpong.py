"""Whether the Hopper contraction kernel's two consumers should take turns (ping-pong) to issue their
wgmma, so that one's prologue and tail run under the other's contraction: each module napkin kernel
writes on the H100 profile, as written (INTER=False: both consumers issue each chunk together) and with
INTER on where it has two consumers, timed in three rotating rounds in one run (CUDA graph replays,
median), the ping-pong module checked against float64 first.

    python bench/contraction_pingpong.py [--out DIR]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.common import environment, import_file, log, rel_err, rotations, save_results, timed  # noqa: E402
from bench.hopper_contraction import GELU, RMSNORM, SWIGLU, inputs, reference, square  # noqa: E402

SHAPES = [("matmul", "fp16", square(8192)), ("matmul", "fp16", square(4096)), ("matmul_bias_gelu", "fp16", GELU),
          ("rmsnorm_matmul", "fp16", RMSNORM), ("swiglu_mlp", "bf16", SWIGLU)]
OFF = "INTER=False,"
ON = "INTER=groups == 2,"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", type=Path, default=Path(__file__).resolve().parent / "results")
    args = ap.parse_args(argv)
    import torch
    import triton

    from analyzer import hardware
    from analyzer.codegen import generate

    env = environment()
    profile = hardware.load("h100")
    tmp = Path(tempfile.mkdtemp())
    dtypes = {"fp16": torch.float16, "bf16": torch.bfloat16}
    live, rows = [], []
    for diagram, dtype, sizes in SHAPES:
        source = generate(diagram, profile, dtype=dtype).source
        if OFF not in source:
            raise ValueError("the module's launcher has no INTER=False: the probe's text is stale")
        xs = inputs(torch, diagram, sizes, dtypes[dtype])
        fns = {}
        for name, text in (("together", source), ("ping-pong", source.replace(OFF, ON))):
            path = tmp / f"{diagram}_{dtype}_{name.replace('-', '_')}_{len(live)}.py"
            path.write_text(text)
            m = import_file(path, path.stem)
            fns[name] = (lambda m=m, xs=xs, d=diagram: getattr(m, d)(*xs))
        err = rel_err(torch, fns["ping-pong"](), reference(torch, diagram, xs))
        row = {"diagram": diagram, "dtype": dtype, "sizes": sizes, "ping_pong_rel_err": err, "together": [],
               "ping-pong": []}
        rows.append(row)
        live += [(row, name, fn) for name, fn in fns.items()]
        log(json.dumps({"diagram": diagram, "rel_err": err}))
    for _, (row, name, fn) in rotations(live, 3):
        row[name].append(timed(triton, fn, graph=True, rep_ms=50)["time_s"])
    md = [f"# The contraction kernel's consumers together or in turns, on {env['gpu']}", "",
          "`python bench/contraction_pingpong.py`: three rotating rounds, CUDA graph replays, medians", "",
          "| diagram | sizes | together | ping-pong | together / ping-pong | ping-pong error |", "|---|---|---|---|---|---|"]
    for r in rows:
        a, b = statistics.median(r["together"]), statistics.median(r["ping-pong"])
        r["together_s"], r["ping_pong_s"] = a, b
        md.append(f"| {r['diagram']} {r['dtype']} | {' '.join(f'{k}={v}' for k, v in r['sizes'].items())} | "
                  f"{a * 1e6:.1f} us | {b * 1e6:.1f} us | {a / b:.3f}x | {r['ping_pong_rel_err']:.1e} |")
        log(md[-1])
    save_results(args.out, "contraction_pingpong_" + ("h200" if "H200" in env["gpu"] else "h100"),
                 {"env": env, "rows": rows}, "\n".join(md) + "\n")
    return 0 if all(r["ping_pong_rel_err"] < 1e-2 for r in rows) else 1


if __name__ == "__main__":
    raise SystemExit(main())
