"""What sets the Hopper chain kernel's time a chunk: the same chain timed with its parts changed one at a
time, in one run, so the model's terms can be told apart (analyzer.config.chain, docs/kernels.md).

napkin measure's sweep of the chain kernel (bench/results/measure/chain_sweep_h200.json) found linear
attention queries first 1.3-1.6x slower a chunk than mlp2 at the same widths, tile and FLOPs. The two
differ in three ways: the first contraction's B operand is stored with its contracted axis last (K, read
transposed) or first (W1); an op runs between the contractions (relu) or none; and relu makes half of
P zero. Each variant below changes one of them:

- mlp2: Y = relu(X W1) W2, inputs N(0, 1);
- mlp2 positive: the same with X and W1 of |N(0, 1)|, so relu leaves every score as it is (no zeros);
- mlp2 W1 stored (f, i): its B operand read transposed, as linear attention's K;
- mlp2 without relu: no op between the contractions;
- linear attention queries first, O = (Q K^T) V, K stored (x, d) (read transposed);
- linear attention with K stored (d, x): its B operand as mlp2's W1.

Each variant at rows = stream = 16384, widths 128, every configuration in CONFIGS, each checked against
float64 at a size no tile divides (1008) and timed by CUDA graph replays (triton.testing.do_bench_cudagraph).

    python bench/chain_probe.py [--gpu h200] [--out DIR]

It writes chain_probe_<gpu>.json and .md into --out (bench/results).
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.common import command, environment, import_file, log, rel_err, save_results, timed  # noqa: E402

SIZE, WIDTH = 16384, 128
CHECK = 1008                      # rows and stream at the check: no multiple of a tile (of 16: one specialisation)
CONFIGS = ({"BLOCK_M": 64, "BLOCK_F": 64, "STAGES": 3, "WARPGROUPS": 1},
           {"BLOCK_M": 64, "BLOCK_F": 128, "STAGES": 3, "WARPGROUPS": 1},
           {"BLOCK_M": 128, "BLOCK_F": 64, "STAGES": 3, "WARPGROUPS": 2},
           {"BLOCK_M": 128, "BLOCK_F": 128, "STAGES": 3, "WARPGROUPS": 2},
           {"BLOCK_M": 192, "BLOCK_F": 64, "STAGES": 3, "WARPGROUPS": 3})


def _mlp(name: str, w1: str, relu: bool) -> str:
    mid = "  - {name: A, primitive: relu, inputs: [H], output: [n, f]}\n" if relu else ""
    return f"""\
name: {name}
title: {name}
dtype: fp16
levels: [gmem, smem]
axes:
  n: {{default: {SIZE}}}
  i: {{default: {WIDTH}}}
  f: {{default: {SIZE}}}
  o: {{default: {WIDTH}}}
inputs:
  X: [n, i]
  W1: {w1}
  W2: [f, o]
ops:
  - {{name: H, primitive: dot, inputs: [X, W1], over: i, output: [n, f]}}
{mid}  - {{name: Y, primitive: dot, inputs: [{'A' if relu else 'H'}, W2], over: f, output: [n, o]}}
outputs: [Y]
kernels:
  - name: mlp
    partition:
      smem: {{group: {{n: g_n}}, stream: {{f: s_f}}}}
"""


def _linear(name: str, k: str) -> str:
    """Linear attention queries first, O = (Q K^T) V: mlp2 without relu, its arrays named as attention's."""
    text = _mlp(name, k, relu=False)
    for old, new in (("X", "Q"), ("W1", "K"), ("W2", "V"), ("H", "S"), ("mlp", "linear")):
        text = re.sub(rf"\b{old}\b", new, text)
    return text


# name -> (diagram text, whether W1 (K) is stored (f, i), relu, inputs positive)
VARIANTS = {
    "mlp2": (_mlp("mlp2", "[i, f]", True), False, True, False),
    "mlp2 positive": (_mlp("mlp2", "[i, f]", True), False, True, True),
    "mlp2 W1 stored (f, i)": (_mlp("mlp2_t", "[f, i]", True), True, True, False),
    "mlp2 without relu": (_mlp("mlp2_plain", "[i, f]", False), False, False, False),
    "linear attention, K (x, d)": (_linear("linear", "[f, i]"), True, False, False),
    "linear attention, K (d, x)": (_linear("linear_kt", "[i, f]"), False, False, False),
}


def tensors(torch, rows: int, stream: int, stored_t: bool, positive: bool, seed: int = 0) -> list:
    """X (rows, i), W1 (i, f) or (f, i), W2 (f, o), scaled so that the output is of order one."""
    g = torch.Generator(device="cuda").manual_seed(seed)

    def r(*shape, scale=1.0):
        x = torch.randn(*shape, device="cuda", generator=g)
        return ((x.abs() if positive else x) * scale).half()
    w1 = r(stream, WIDTH, scale=WIDTH ** -0.5) if stored_t else r(WIDTH, stream, scale=WIDTH ** -0.5)
    return [r(rows, WIDTH), w1, r(stream, WIDTH, scale=stream ** -0.5)]


def reference(torch, xs: list, stored_t: bool, relu: bool):
    x, w1, w2 = (t.double() for t in xs)
    h = x @ (w1.T if stored_t else w1)
    return (torch.relu(h) if relu else h) @ w2


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--gpu", default="h200", help="the profile napkin generates the kernels for")
    ap.add_argument("--out", type=Path, default=Path(__file__).resolve().parent / "results")
    ap.add_argument("--rep-ms", type=float, default=30.0)
    args = ap.parse_args(argv)
    import torch
    import triton

    from analyzer import hardware
    from analyzer.codegen import generate

    env = environment()
    profile = hardware.load(args.gpu)
    began = time.time()
    tmp = Path(tempfile.mkdtemp())
    rows, checks = [], []
    for variant, (text, stored_t, relu, positive) in VARIANTS.items():
        name = text.split("\n")[0].split(": ")[1]
        path = tmp / f"{name}.yaml"
        path.write_text(text)
        g = generate(str(path), profile)
        module = import_file(g.write(tmp / f"{name}.py")[0], name)
        fn = getattr(module, name)
        small = tensors(torch, CHECK, CHECK, stored_t, positive, seed=1)
        want = reference(torch, small, stored_t, relu)
        xs = tensors(torch, SIZE, SIZE, stored_t, positive)
        for config in CONFIGS:
            err = rel_err(torch, fn(*small, config=config), want)
            checks.append({"variant": variant, "config": config, "rel_err": err, "ok": err < 1e-2})
            t = timed(triton, lambda: fn(*xs, config=config), graph=True, rep_ms=args.rep_ms)
            rows.append({"variant": variant, "backend": g.backend, "config": config, "seconds": t["time_s"],
                         "flops": 2.0 * SIZE * SIZE * 2 * WIDTH})
            log(json.dumps(rows[-1] | {"rel_err": err}))
    log(f"{len(rows)} timings in {time.time() - began:.0f} s")
    doc = {"command": command("chain_probe.py", argv), "env": env, "gpu_profile": profile.name,
           "timer": f"triton.testing.do_bench_cudagraph (rep {args.rep_ms:g} ms), median",
           "sizes": {"rows": SIZE, "stream": SIZE, "widths": WIDTH}, "checks": checks, "rows": rows}
    labels = [f"{c['WARPGROUPS']} x 64 rows, s_f={c['BLOCK_F']}" for c in CONFIGS]
    md = [f"# What sets the chain kernel's time a chunk, on {env['gpu']}", "",
          f"`{doc['command']}`; {doc['timer']}; rows = stream = {SIZE}, widths {WIDTH}, fp16, 3 stages. "
          "Time in us (TFLOP/s).", "", "| variant | " + " | ".join(labels) + " |", "|---" * (len(labels) + 1) + "|"]
    for variant in VARIANTS:
        cells = [r for r in rows if r["variant"] == variant]
        md.append(f"| {variant} | " + " | ".join(f"{r['seconds'] * 1e6:.1f} ({r['flops'] / r['seconds'] / 1e12:.0f})"
                                                  for r in cells) + " |")
    md += ["", "Checks against float64 (rows = stream = 1008): " + (
        "all within 1e-2" if all(c["ok"] for c in checks) else
        ", ".join(f"{c['variant']} {c['config']} {c['rel_err']:.1e}" for c in checks if not c["ok"])), ""]
    save_results(args.out, "chain_probe_" + ("h200" if "H200" in env["gpu"] else "h100"), doc, "\n".join(md) + "\n")
    return 0 if all(c["ok"] for c in checks) else 1


if __name__ == "__main__":
    raise SystemExit(main())
