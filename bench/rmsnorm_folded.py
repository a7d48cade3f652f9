"""RMSNorm feeding a matmul, the way serving stacks fold it: the gain folded into the weight once
(W' = diag(g) W: the weights are static), the rows' factor r = rsqrt(mean(x^2) + eps) computed by a pass
over X, and r applied in the matmul's tail. Timed in one run, on one GPU, at rmsnorm_matmul's defaults
(16384 x 4096 -> 4096, fp16), beside:

- napkin's fused kernel (rmsnorm_matmul as napkin kernel writes it: the gain and the squares in a
  prologue on each chunk of X);
- the folded form: the row factor by torch (one pass over X, fp32 sums), then napkin's kernel of a row-scaled
  matmul diagram (Y = (X W') r, r in the tail), written here, with and without the fold of W' per call;
- torch: F.rms_norm, then a matmul;
- the pieces, for the bound: napkin's plain matmul of the same shape (what a fused kernel whose prologue
  cost nothing would take), torch's matmul alone and F.rms_norm alone. torch's pair over napkin's plain
  matmul is the most any fused form can gain on the unfused sequence here.

Each napkin form is checked against float64 first.

    python bench/rmsnorm_folded.py [--gpu h200] [--out DIR]
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.common import command, environment, import_file, log, rel_err, save_results, timed  # noqa: E402
from bench.hopper_contraction import EPS, RMSNORM, inputs, reference  # noqa: E402

ROW_SCALED = """\
name: row_scaled_matmul
title: A matmul whose rows are scaled in its tail (RMSNorm's factor, the gain folded into W)
dtype: fp16
levels: [gmem, smem]
axes:
  n: {default: 16384}
  i: {default: 4096}
  o: {default: 4096}
inputs:
  X: [n, i]
  W: [i, o]
  R: {axes: [n], doc: the rows' factor}
ops:
  - name: P
    primitive: dot
    inputs: [X, W]
    over: i
    output: [n, o]
  - name: Y
    primitive: mul
    inputs: [P, R]
    output: [n, o]
outputs: [Y]
kernels:
  - name: gemm_rows
    partition:
      smem: {group: {n: g_n, o: g_o}, stream: {i: s_i}}
"""


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--gpu", default="h100", help="the profile the modules are generated for")
    ap.add_argument("--out", type=Path, default=Path(__file__).resolve().parent / "results")
    args = ap.parse_args(argv)
    import torch
    import triton

    from analyzer import hardware
    from analyzer.codegen import generate

    env = environment()
    profile = hardware.load(args.gpu)
    tmp = Path(tempfile.mkdtemp())
    diagram = tmp / "row_scaled_matmul.yaml"
    diagram.write_text(ROW_SCALED)
    modules = {}
    for name, source in (("rmsnorm_matmul", "rmsnorm_matmul"), ("row_scaled_matmul", str(diagram)),
                         ("matmul", "matmul")):
        g = generate(source, profile, dtype="fp16")
        path = tmp / f"{name}.py"
        g.write(path)
        modules[name] = import_file(path, name)
        log(f"{name}: {g.backend}")
    x, gain, w = inputs(torch, "rmsnorm_matmul", RMSNORM, torch.float16)
    ref = reference(torch, "rmsnorm_matmul", [x, gain, w])
    folded = (gain[:, None].float() * w.float()).half()       # W' = diag(g) W, once: the weights are static

    def row_factor():       # in fp32, stored in the inputs' type (the generated wrapper takes one element type)
        return torch.rsqrt(torch.linalg.vector_norm(x, dim=1, dtype=torch.float32).square() / x.shape[1]
                           + EPS).to(x.dtype)

    F = torch.nn.functional
    calls = {
        "napkin fused (prologue)": lambda: modules["rmsnorm_matmul"].rmsnorm_matmul(x, gain, w),
        "napkin folded: torch row factor + row-scaled matmul": lambda: modules["row_scaled_matmul"].row_scaled_matmul(
            x, folded, row_factor()),
        "the same, folding W' every call": lambda: modules["row_scaled_matmul"].row_scaled_matmul(
            x, (gain[:, None] * w), row_factor()),
        "torch row factor alone": row_factor,
        "napkin matmul alone, same shape (the bound)": lambda: modules["matmul"].matmul(x, w),
        "torch matmul alone": lambda: torch.matmul(x, w),
        "torch F.rms_norm alone": lambda: F.rms_norm(x, (x.shape[1],), gain, eps=EPS),
        "torch F.rms_norm + matmul": lambda: torch.matmul(F.rms_norm(x, (x.shape[1],), gain, eps=EPS), w),
    }
    rows = []
    for name, fn in calls.items():
        row = {"callable": name}
        if name.startswith("napkin") and "alone" not in name:
            row["rel_err"] = rel_err(torch, fn(), ref)
        row["time_s"] = timed(triton, fn, graph=True, rep_ms=50)["time_s"]
        rows.append(row)
        log(json.dumps(row))
    torch_s = rows[-1]["time_s"]
    md = [f"# RMSNorm-matmul folded or fused, on {env['gpu']}", "",
          f"`{command('rmsnorm_folded.py', argv)}`: 16384 x 4096 -> 4096 fp16, CUDA graph replays, median", "",
          "| callable | time | torch / it | error against float64 |", "|---|---|---|---|"]
    md += [f"| {r['callable']} | {r['time_s'] * 1e6:.1f} us | {torch_s / r['time_s']:.3f}x | "
           f"{r['rel_err']:.1e} |" if "rel_err" in r else
           f"| {r['callable']} | {r['time_s'] * 1e6:.1f} us | {torch_s / r['time_s']:.3f}x | |" for r in rows]
    bound = torch_s / next(r["time_s"] for r in rows if "(the bound)" in r["callable"])
    md += ["", f"The bound: torch's pair over napkin's plain matmul of the same shape, {bound:.3f}x: what a fused "
           "kernel reaches if its prologue costs nothing."]
    save_results(args.out, "rmsnorm_folded_" + ("h200" if "H200" in env["gpu"] else "h100"),
                 {"env": env, "command": command("rmsnorm_folded.py", argv), "rows": rows, "bound": bound},
                 "\n".join(md) + "\n")
    return 0 if all(r.get("rel_err", 0) < 1e-2 for r in rows) else 1


if __name__ == "__main__":
    raise SystemExit(main())
