"""The portable module's choice for diagrams that are not attention, measured: the configuration its
by-size table launches at the defaults, against the one the earlier grid of square problems launched
there, and linear_attention_split at each way of cutting its keys into pieces, beside torch, in one run.

Part `grid`: for each shipped diagram whose portable module (on this GPU's profile) launches at its
defaults another configuration than the square grid's point nearest them did (analyzer.config.by_size:
every length axis set to that point's length, until 2026-11-28; the configuration and its prediction as
the committed results/defaults_<gpu>.json of that day recorded them), both configurations of one module
(the old one given per call, config=), checked against float64 (analyzer.measure.reference's evaluation and
tolerance) and timed.

Part `layouts`: linear_attention_split (O = Q (K^T V), the state built once: partial states a piece of
xc keys, their sum, the queries' product) for c from 8 to 256 pieces of 16384 keys (hdim 128, fp16),
each module as `napkin kernel linear_attention_split --set c=.. --set xc=..` writes it, with its
prediction, checked (relative error < 1e-2) and timed beside torch's keys-first Q (K^T V).

Every timing is a CUDA graph's replays (triton.testing.do_bench_cudagraph, median): these kernels run for
microseconds, shorter than their launches from Python.

    python bench/plain_choice.py --gpu h100 [--parts grid,layouts]

It writes plain_choice_<gpu>.json and .md into --out ($OUT if set, else bench/results).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.common import command, environment, import_file, log, rel_err, save_results, timed  # noqa: E402
from analyzer.measure.reference import inputs, reduction, reference, tolerance  # noqa: E402

PIECES = (8, 16, 32, 64, 128, 256)   # c: pieces of the keys (x = c xc)
KEYS, QUERIES, HEAD = 16384, 16384, 128


def before(gpu: str) -> dict[str, tuple[str, float]]:
    """Each diagram's portable configuration at its defaults as the committed run of bench/defaults.py
    on this profile recorded it (its label, and the model's time for it), the square grid's choice until
    2026-11-28."""
    path = Path(__file__).resolve().parent / "results" / f"defaults_{gpu}.json"
    rows = json.loads(path.read_text())["rows"]
    return {r["diagram"]: (r["configuration"], r["predicted_s"]) for r in rows
            if r.get("backend") == "triton" and r.get("configuration")}


def parsed(label: str, kernels) -> dict[str, dict[str, int]]:
    """A portable label (`g_q=64 s_x=256 warps=4 stages=2`, kernels joined by '; ') as each kernel's
    tiles, warps and stages."""
    out = {}
    for k, part in zip(kernels, label.split("; "), strict=True):
        values = dict(item.split("=") for item in part.split())
        out[k.plan.name] = {"tiles": {n: int(v) for n, v in values.items() if n not in ("warps", "stages")},
                            "num_warps": int(values["warps"]), "num_stages": int(values["stages"])}
    return out


def entry(g, k, tiles: dict[str, int], warps: int, stages: int) -> dict:
    """A kernel's configuration as the module's config= takes it (its CONFIGS entry)."""
    from analyzer.codegen.triton.module import config_names
    out = {name: tiles.get(symbol, 1) for symbol, name in config_names(g, k).items()}
    return {**out, "num_warps": warps, "num_stages": stages}


def grid_part(gpu: str, torch, triton, tmp: Path, rep_ms: float) -> list[dict]:
    from analyzer.codegen import generate
    from analyzer.diagram.interface import Attention
    diagrams = sorted(p.stem for p in (Path(__file__).resolve().parent.parent / "diagrams").glob("*.yaml"))
    rows = []
    for name in diagrams:
        g = generate(name, gpu, backend="triton")
        if isinstance(g.roles, Attention):
            continue                        # attention's grid is its own (square problems, instances)
        then, predicted_then = before(gpu).get(name, (None, None))
        if then is None or then == g.expected.configuration:
            continue
        path = tmp / f"{name}.py"
        g.write(path)
        module = import_file(path, name)
        wrapper = getattr(module, name)
        shapes, _ = inputs(g)
        gen = torch.Generator(device="cuda").manual_seed(0)
        tensors = [torch.randn(*s, generator=gen, device="cuda", dtype=torch.float16) for s in shapes]
        ref = reference(torch, g, tensors)
        allowed = tolerance(g.dtype, reduction(g))
        old = parsed(then, g.kernels)
        old_config = {k.plan.name: entry(g, k, old[k.plan.name]["tiles"], old[k.plan.name]["num_warps"],
                                         old[k.plan.name]["num_stages"]) for k in g.kernels}
        for which, config, predicted, label in (
                ("shaped grid (now)", None, g.expected.time_s, g.expected.configuration),
                ("square grid (before)", old_config, predicted_then, then)):
            call = lambda config=config, xs=tensors: wrapper(*xs, config=config)   # noqa: E731
            worst = float((call().double() - ref).abs().max() / ref.abs().max())
            t = timed(triton, call, graph=True, rep_ms=rep_ms)["time_s"] if worst <= allowed else None
            rows.append({"diagram": name, "which": which, "configuration": label, "predicted_s": predicted,
                         "measured_s": t, "max_error": worst, "tolerance": allowed})
            log(rows[-1])
        del tensors, ref
        torch.cuda.empty_cache()
    return rows


def layouts_part(gpu: str, torch, triton, tmp: Path, rep_ms: float) -> tuple[list[dict], list[float]]:
    from analyzer.codegen import generate
    torch.manual_seed(0)
    q, k, v = (torch.randn(n, HEAD, device="cuda", dtype=torch.float16) for n in (QUERIES, KEYS, KEYS))
    ref = q.double() @ (k.double().T @ v.double())
    peer = [timed(triton, lambda: q @ (k.T @ v), graph=True, rep_ms=rep_ms)["time_s"]]
    log(f"torch keys first: {peer[0] * 1e6:.1f} us")
    rows = []
    for c in PIECES:
        g = generate("linear_attention_split", gpu, sets={"c": c, "xc": KEYS // c})
        path = tmp / f"split_{c}.py"
        g.write(path)
        module = import_file(path, path.stem)
        kc, vc = k.view(c, KEYS // c, HEAD), v.view(c, KEYS // c, HEAD)
        call = lambda m=module, kc=kc, vc=vc: m.linear_attention_split(q, kc, vc)   # noqa: E731
        err = rel_err(torch, call(), ref)
        t = timed(triton, call, graph=True, rep_ms=rep_ms)["time_s"] if err < 1e-2 else None
        rows.append({"c": c, "xc": KEYS // c, "backend": g.backend, "configuration": g.expected.configuration,
                     "predicted_s": g.expected.time_s, "measured_s": t, "rel_err": err})
        log(rows[-1])
    peer.append(timed(triton, lambda: q @ (k.T @ v), graph=True, rep_ms=rep_ms)["time_s"])
    return rows, peer


def markdown(env: dict, cmd: str, grid: list[dict], layouts: list[dict], peer: list[float]) -> str:
    us = (lambda s: f"{s * 1e6:.1f} us" if s else "-")   # noqa: E731
    md = [f"# The portable module's choice for diagrams that are not attention, on {env['gpu']}", "",
          f"`{cmd}`; fp16; triton.testing.do_bench_cudagraph, median.", ""]
    if grid:
        md += ["## At the defaults: the shaped grid's configuration against the square grid's", "",
               "| diagram | table | measured | predicted | max error (tolerance) | configuration |",
               "|---|---|---|---|---|---|"]
        md += [f"| {r['diagram']} | {r['which']} | {us(r['measured_s'])} | {us(r['predicted_s'])} | "
               f"{r['max_error']:.2g} ({r['tolerance']:.2g}) | {r['configuration']} |" for r in grid]
        md.append("")
    if layouts:
        ran = [r for r in layouts if r["measured_s"]]
        chosen = min(layouts, key=lambda r: r["predicted_s"])
        fastest = min(ran, key=lambda r: r["measured_s"])
        md += ["## linear_attention_split by its pieces", "",
               f"{QUERIES} queries, {KEYS} keys, d = e = {HEAD}; torch's keys-first Q (K^T V) timed first and "
               f"last: {us(peer[0])} and {us(peer[1])}.", "",
               "| pieces c x xc | measured | predicted | predicted/measured | torch/napkin | rel. error | "
               "configuration |", "|---|---|---|---|---|---|---|"]
        for r in layouts:
            m = r["measured_s"]
            md.append(f"| {r['c']} x {r['xc']} | {us(m)} | {us(r['predicted_s'])} | "
                      f"{r['predicted_s'] / m:.2f} | {peer[0] / m:.2f}x | " if m else
                      f"| {r['c']} x {r['xc']} | failed check | {us(r['predicted_s'])} | - | - | ")
            md[-1] += f"{r['rel_err']:.1e} | {r['configuration']} |"
        behind = (chosen["measured_s"] or math.nan) / fastest["measured_s"] - 1
        md += ["", f"The model's layout: {chosen['c']} x {chosen['xc']}, {behind:.1%} behind the fastest measured "
               f"({fastest['c']} x {fastest['xc']}, {us(fastest['measured_s'])}, "
               f"{peer[0] / fastest['measured_s']:.2f}x torch)."]
    return "\n".join(md) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--gpu", default="h100", help="the profile napkin generates the modules for")
    ap.add_argument("--parts", default="grid,layouts", help="comma-separated: grid, layouts")
    ap.add_argument("--rep-ms", type=float, default=50.0)
    ap.add_argument("--out", type=Path,
                    default=Path(os.environ.get("OUT", Path(__file__).resolve().parent / "results")))
    args = ap.parse_args(argv)
    import torch
    import triton
    parts = set(args.parts.split(","))
    env = environment()
    tmp = Path(tempfile.mkdtemp())
    cmd = command("plain_choice.py", argv)
    grid = grid_part(args.gpu, torch, triton, tmp, args.rep_ms) if "grid" in parts else []
    layouts, peer = layouts_part(args.gpu, torch, triton, tmp, args.rep_ms) if "layouts" in parts else ([], [])
    doc = {"command": cmd, "env": env, "gpu_profile": args.gpu, "timer": "triton.testing.do_bench_cudagraph (median)",
           "grid": grid, "layouts": layouts, "torch_keys_first_s": peer}
    args.out.mkdir(parents=True, exist_ok=True)
    text = markdown(env, cmd, grid, layouts, peer)
    save_results(args.out, "plain_choice_" + ("h200" if "H200" in env["gpu"] else "h100"), doc, text)
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
