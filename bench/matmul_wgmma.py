"""What the serialised wgmma cost the generated matmul on a Hopper GPU.

ptxas serialised every wgmma of napkin's generated matmul (its note C7515) while the accumulator ran on
from the unmasked loop over b into the masked edge loop. The generator now compiles the edge loop only
where the launcher says b has edge chunks (the constexpr EVEN_B: b a multiple of the chunk), so at those
sizes the kernel is one loop and ptxas keeps the wgmma asynchronous (tests/kernels/test_portable_sm90.py).
This script times, at each size and every legal configuration `napkin sweep` lists there:
- the generated kernel with its edge loop compiled in (EVEN_B=False), as it was before;
- the generated kernel as it is (EVEN_B from the sizes; every size here is a multiple of every chunk).

torch.matmul (cuBLAS) is timed beside them. Every timing is checked first against a float64 product
(relative error < 1e-2). Both kernels are timed in the same run, by CUDA graph replays.

    python bench/matmul_wgmma.py [--gpu h100] [--sizes 2048,8192] [--rep-ms 30] [--workers 15] [--out DIR]

It writes matmul_wgmma_<gpu>.json and .md into --out (bench/results).
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import sys
import tempfile
import time
from functools import partial
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.common import (  # noqa: E402 - after the checkout's root is on sys.path
    TOLERANCE,
    Compile,
    Sampler,
    command,
    environment,
    import_file,
    load_kernel,
    log,
    precompile,
    rel_err,
    save_results,
    timed,
)

# the launcher's argument that compiles the edge loop out where the stream is a multiple of its chunk
EVEN = re.compile(r"\b(EVEN_\w+)=size\[[^\]]+\] % cfg\[[^\]]+\] == 0")
KERNELS = ("with edge loop", "generated")


def with_edge_loop(source: str) -> str:
    """A generated portable module with its masked edge loop compiled in whatever the sizes
    (EVEN_<stream>=False): the loop structure the generator wrote before, whose wgmma ptxas serialises."""
    out, n = EVEN.subn(r"\1=False", source)
    if not n:
        raise ValueError("the module has no EVEN_<stream> argument: nothing to compare")
    return out


def label(config: dict[str, int]) -> str:
    return (f"{config['TILE_A']}x{config['TILE_C']}x{config['BLOCK_B']} w{config['num_warps']} "
            f"s{config['num_stages']}")


def stage_ratios(rows: list[dict], kernel: str) -> list[float]:
    """Per tiles and warps measured at both: `kernel`'s time at 2 stages over its time at 3."""
    at: dict[tuple, dict[int, float]] = {}
    for r in rows:
        c = r["config"]
        at.setdefault((c["TILE_A"], c["TILE_C"], c["BLOCK_B"], c["num_warps"]), {})[c["num_stages"]] = \
            r[kernel]["time_s"]
    return [t[2] / t[3] for t in at.values() if 2 in t and 3 in t]


def markdown(doc: dict) -> str:
    meta = doc["meta"]
    lines = ["# The generated matmul's wgmma, serialised (C7515) and not", "",
             f"`{meta['command']}` on one {meta['gpu']}, {meta['date']}, torch {meta['torch']}, triton "
             f"{meta['triton']}. Each legal configuration (`napkin sweep`'s list) of the generated kernel with "
             "its masked edge loop compiled in (EVEN_B=False: ptxas serialises its wgmma), and as generated "
             "(one loop where b is a multiple of the chunk, as at every size here), timed by CUDA graph "
             f"replays (rep {meta['rep_ms']} ms), median; both checked against a float64 product first.", "",
             "| size | configs | with edge loop / generated, median (range) | at 2 stages | at 3 stages "
             "| 2 stages / 3, with edge loop | 2 stages / 3, generated | best with edge loop | best generated "
             "| torch.matmul |",
             "|---|---:|---|---|---|---|---|---|---|---|"]
    for n in sorted({r["size"] for r in doc["records"]}):
        rows = [r for r in doc["records"] if r["size"] == n and all(k in r for k in KERNELS)]
        if not rows:
            continue
        ratio = lambda rs: [r[KERNELS[0]]["time_s"] / r[KERNELS[1]]["time_s"] for r in rs]
        by_stages = {s: ratio([r for r in rows if r["config"]["num_stages"] == s]) for s in (2, 3)}
        best = {k: min(rows, key=lambda r, k=k: r[k]["time_s"]) for k in KERNELS}
        peer = next(p for p in doc["peers"] if p["size"] == n)
        tflops = lambda t: 2 * n ** 3 / t / 1e12
        every = ratio(rows)
        lines.append(
            f"| {n} | {len(rows)} | {statistics.median(every):.2f} ({min(every):.2f}-{max(every):.2f}) | "
            + " | ".join(f"{statistics.median(v):.2f}" if v else "-" for v in by_stages.values()) + " | "
            + " | ".join(f"{statistics.median(v):.2f}" if (v := stage_ratios(rows, k)) else "-" for k in KERNELS)
            + " | "
            + " | ".join(f"{tflops(best[k][k]['time_s']):.0f} TFLOP/s (`{label(best[k]['config'])}`)" for k in KERNELS)
            + f" | {tflops(peer['time_s']):.0f} TFLOP/s |")
    failed = [r for r in doc["records"] if not all(k in r for k in KERNELS)]
    lines += ["", f"Configurations not timed (an error or a wrong result): {len(failed)}."]
    lines += [f"- n={r['size']} `{label(r['config'])}`: {r.get('error', '?')}" for r in failed]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--gpu", default="h100", help="the profile whose legal configurations are timed")
    parser.add_argument("--sizes", default="2048,8192", help="square sizes, multiples of 256")
    parser.add_argument("--rep-ms", type=float, default=30.0)
    parser.add_argument("--workers", type=int, default=15, help="compile workers")
    parser.add_argument("--out", default=os.environ.get("OUT", "bench/results"))
    args = parser.parse_args(argv)
    sizes = [int(s) for s in args.sizes.split(",") if s]
    if any(n % 256 for n in sizes):
        parser.error("--sizes: each a multiple of 256 (the largest chunk), where the edge loop has no work")
    import torch
    import triton

    from analyzer.config.sweep import sweep
    tmp = Path(tempfile.mkdtemp(prefix="matmul_wgmma_"))
    generated = load_kernel("matmul", tmp, args.gpu)
    edge_path = tmp / "matmul_with_edge.py"
    edge_path.write_text(with_edge_loop(generated.path.read_text()))
    modules = {KERNELS[0]: import_file(edge_path, "matmul_with_edge"), KERNELS[1]: generated.module}
    paths = {KERNELS[0]: edge_path, KERNELS[1]: generated.path}
    doc = {"meta": {"command": command("matmul_wgmma.py", argv), "date": time.strftime("%Y-%m-%d"),
                    "rep_ms": args.rep_ms, **environment()}, "records": [], "peers": []}
    log(f"{doc['meta']['gpu']}: {doc['meta']['command']}")
    configs = {n: [generated.configuration("gemm", row) for row in
                   sweep("matmul", args.gpu, dtype="fp16", sets={"a": n, "b": n, "c": n}, backend="triton",
                         sibling_fit=False)[0].rows] for n in sizes}
    unique = list({label(c): c for cs in configs.values() for c in cs}.values())
    precompile([Compile(str(paths[k]), modules[k].__name__, "gemm", c, "matmul") for k in KERNELS for c in unique],
               args.workers)
    out = Path(args.out)
    with Sampler() as sampler:
        for n in sizes:
            a, b = (torch.randn(n, n, device="cuda", dtype=torch.float16) for _ in range(2))
            ref = torch.matmul(a.double(), b.double())
            peer = timed(triton, partial(torch.matmul, a, b), graph=True, sampler=sampler, rep_ms=args.rep_ms)
            doc["peers"].append({"peer": "torch.matmul", "size": n, **peer,
                                 "rel_err": rel_err(torch, torch.matmul(a, b), ref)})
            for config in configs[n]:
                record: dict = {"size": n, "config": config}
                try:
                    for name in KERNELS:
                        call = partial(modules[name].matmul, a, b, config={"gemm": config})
                        err = rel_err(torch, call(), ref)
                        if not err < TOLERANCE:
                            raise RuntimeError(f"{name}: relative error {err:.3g} against float64")
                        record[name] = {**timed(triton, call, graph=True, sampler=sampler, rep_ms=args.rep_ms),
                                        "rel_err": err}
                except Exception as exc:  # noqa: BLE001 - a configuration that fails is reported, not timed
                    record["error"] = f"{type(exc).__name__}: {str(exc)[:300]}"
                doc["records"].append(record)
            save_results(out, f"matmul_wgmma_{args.gpu}", doc, markdown(doc))
            log(f"  n={n}: {len(configs[n])} configurations")
    log(markdown(doc))
    return 0


if __name__ == "__main__":
    sys.exit(main())
