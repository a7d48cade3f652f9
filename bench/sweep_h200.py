"""Every legal configuration of the generated attention and matmul kernels, measured on one GPU and
recorded against the model's prediction (the data `napkin calibrate` fits; docs/validation.md).

For each family the configurations are those `napkin sweep` ranks (analyzer.config.sweep): tiles,
warps and stages the model allows. The kernel is generated once per diagram; each configuration is
timed by replacing its entry in the module's CONFIGS table (the kernel source does not change, so one
compile per configuration and head dim). Shapes:
- attention and causal_attention: the FlashAttention-3 forward grid (16k tokens, hidden 2048),
  seqlen 512 ... 16384, head dims 64, 128 and 256, fp16;
- matmul: square fp16 products of 1024 ... 8192, with torch.matmul timed at each size beside it.
Every timing is checked first against a reference (SDPA, torch.matmul): relative error < 1e-2.
Matmul is timed by CUDA graph replays: at 1024 a kernel takes less time than its Python launch.
Attention is too by default (--attention-timer cudagraph): triton.testing.do_bench clears L2 with a
256 MB write between repetitions, which has its own power and SM clock, and the clock is what the
GPU state beside each timing is for. During every timing the SM clock, board power and temperature
are sampled (bench/gpu_state.py) and recorded with it: the H200 holds its 700 W limit by lowering the
clock, so time = cycles / clock, and the two can be told apart.
Compilation runs in worker processes first (Triton's cache is shared), timing in this process.

    python bench/sweep_h200.py [--out DIR] [--groups attention:128,matmul] [--budget-s S]
        [--attention-timer cudagraph|do_bench]
    python bench/sweep_h200.py --merge A.json B.json --out DIR     # join partial runs

    python bench/sweep_h200.py --compile-only                       # registers, spills, SMEM only

Output: sweep_h200.json (meta, records) and sweep_h200.md (the best and the model's choice per shape),
and compiled_h200.json: per configuration the registers per thread, spilled bytes and SMEM bytes the
compiler allotted (napkin calibrate --registers fits them; --compile-only writes only this one).
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import importlib.util
import json
import os
import sys
import tempfile
import time
from concurrent.futures import ProcessPoolExecutor
from functools import partial
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from common import without_out  # noqa: E402 - the recorded command leaves out where results went
from gpu_state import Sampler  # noqa: E402 - the SM clock and power beside each timing

GPU = "h200"
DTYPE = "fp16"
TOKENS, HIDDEN = 16384, 2048                      # FlashAttention-3's forward benchmark
SEQLENS = (512, 1024, 2048, 4096, 8192, 16384)
HEAD_DIMS = (64, 128, 256)
MATMUL_SIZES = (1024, 2048, 4096, 6144, 8192)
WARMUP_MS, REP_MS = 25, 100                       # triton.testing.do_bench
TOLERANCE = 1e-2
DIAGRAMS = {"attention": False, "causal_attention": True}
ALL_GROUPS = [f"{d}:{h}" for d in DIAGRAMS for h in HEAD_DIMS] + ["matmul"]


def log(message: str) -> None:
    print(message, flush=True)


def import_file(path: Path, name: str):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def entry(module, kernel: str, key, row) -> dict[str, Any]:
    """The module's CONFIGS entry for a sweep row (tile constexprs by the plan's names)."""
    template = module.CONFIGS[kernel][key]
    if "by_size" in template:           # a by-size table: any of its configurations names the tiles
        template = template["configs"][0]
    out = dict(template)
    by_symbol = module_tiles(module, kernel)
    for symbol, value in {**row.tiles, **row.woven}.items():
        if symbol in by_symbol:
            out[by_symbol[symbol]] = value
    out["num_warps"], out["num_stages"] = row.num_warps, row.num_stages
    return out


_TILES: dict[str, dict[str, str]] = {}


def module_tiles(module, kernel: str) -> dict[str, str]:
    return _TILES[f"{module.__name__}:{kernel}"]


def load_kernel(diagram: str, tmp: Path):
    """Generate and import the Triton module of `diagram`; remember its tile constexprs by symbol."""
    from analyzer.codegen import generate
    from analyzer.codegen.module import config_names
    g = generate(diagram, GPU, backend="triton", dtype=DTYPE)
    path = tmp / f"sweep_{diagram}.py"
    g.write(path)
    module = import_file(path, f"sweep_{diagram}")
    for k in g.kernels:
        _TILES[f"{module.__name__}:{k.plan.name}"] = config_names(g, k)
    return module, path, g


# ------------------------------------------------------------------------------ compile workers

def _warm(path: str, name: str, kernel: str, key, config: dict, family: str, hdim: int | None,
          causal: bool) -> dict[str, Any]:
    """Compile one configuration in a worker: run it once on a small input (fills Triton's cache).
    Returns what the compiler allotted (registers per thread, spilled bytes, SMEM) or the error."""
    import torch
    module = import_file(Path(path), name)
    module.CONFIGS[kernel][key] = config
    try:
        if family == "attention":
            q, k, v = (torch.randn(1, 2, 512, hdim, device="cuda", dtype=torch.float16) for _ in range(3))
            module.attention(q, k, v, causal=causal)
        else:
            a = torch.randn(512, 512, device="cuda", dtype=torch.float16)
            module.matmul(a, a)
        torch.cuda.synchronize()
        return compiled_resources(module)
    except Exception as exc:  # noqa: BLE001 - a configuration that fails is data too
        return {"error": f"{type(exc).__name__}: {str(exc)[:300]}"}


def compiled_resources(module) -> dict[str, Any]:
    """Registers per thread, spilled bytes and SMEM bytes of the kernels this process compiled from
    `module` (the largest of each, if several)."""
    from triton.runtime.jit import JITFunction
    out: dict[str, Any] = {}
    for fn in vars(module).values():
        if not isinstance(fn, JITFunction):
            continue
        for cache in getattr(fn, "device_caches", {}).values():
            kernels = cache[0] if isinstance(cache, tuple) else cache
            for compiled in getattr(kernels, "values", lambda: ())():
                try:
                    compiled._init_handles()
                    found = {"registers": int(compiled.n_regs), "spills": int(compiled.n_spills),
                             "shared_bytes": int(compiled.metadata.shared)}
                except Exception:  # noqa: BLE001 - an older or newer Triton: record nothing
                    continue
                out = {k: max(v, out.get(k, 0)) for k, v in found.items()}
    return out


def precompile(jobs: list[tuple], workers: int) -> dict[int, dict[str, Any]]:
    """Per job: the compiler's resources, or {"error": ...}."""
    if not jobs or workers <= 1:
        return {}
    import multiprocessing
    ctx = multiprocessing.get_context("spawn")
    began = time.time()
    with ProcessPoolExecutor(max_workers=workers, mp_context=ctx) as pool:
        futures = [pool.submit(_warm, *job) for job in jobs]
        results = {i: f.result() for i, f in enumerate(futures)}
    log(f"  compiled {len(jobs)} configurations in {time.time() - began:.0f} s with {workers} workers")
    return results


def resources(compiled: dict[int, dict[str, Any]], index: int) -> dict[str, Any]:
    return {k: v for k, v in compiled.get(index, {}).items() if k != "error"}


def compiled_records(rows, compiled: dict[int, dict[str, Any]], base: dict) -> list[dict]:
    """--compile-only: what the compiler allotted each configuration, nothing timed."""
    return [{**base, "tiles": row.tiles, "num_warps": row.num_warps, "num_stages": row.num_stages,
             **compiled.get(i, {})} for i, row in enumerate(rows)]


# ------------------------------------------------------------------------------------- timing

def bench(triton, fn, graph: bool = False, sampler=None) -> dict[str, float]:
    """Median, 20th and 80th percentile seconds. graph: time replays of a captured CUDA graph, so
    that a kernel shorter than its Python launch is timed, not the launch. sampler (gpu_state.Sampler):
    also the means of the SM clock, power and temperature sampled while it ran."""
    t0 = time.monotonic()
    if graph:
        median, p20, p80 = triton.testing.do_bench_cudagraph(fn, rep=REP_MS, quantiles=[0.5, 0.2, 0.8])
    else:
        median, p20, p80 = triton.testing.do_bench(fn, warmup=WARMUP_MS, rep=REP_MS,
                                                   quantiles=[0.5, 0.2, 0.8])
    state = sampler.window(t0, time.monotonic()) if sampler else {}
    return {"time_s": median * 1e-3, "time_s_p20": p20 * 1e-3, "time_s_p80": p80 * 1e-3, **state}


def timer_name(graph: bool) -> str:
    return "cudagraph" if graph else "do_bench"


def timer_text(attention_graph: bool) -> str:
    graph = f"triton.testing.do_bench_cudagraph(fn, rep={REP_MS})"
    plain = f"triton.testing.do_bench(fn, warmup={WARMUP_MS}, rep={REP_MS})"
    return (f"attention: {graph if attention_graph else plain}; matmul: {graph} (kernels shorter than "
            "their Python launch); median, 20th and 80th percentiles")


def rel_err(torch, out, ref) -> float:
    out, ref = out.double(), ref.double()
    if not torch.isfinite(out).all():
        return float("inf")
    return float((out - ref).norm() / ref.norm())


def attention_group(diagram: str, hdim: int, args, state) -> list[dict]:
    import torch
    import triton

    from analyzer.config.sweep import sweep
    causal = DIAGRAMS[diagram]
    module, path, _ = state["modules"].setdefault(diagram, load_kernel(diagram, state["tmp"]))
    if hdim not in module.CONFIGS["flash"]:
        log(f"  {diagram} has no configuration for head dim {hdim}: skipped")
        return []
    seqlens = [s for s in SEQLENS if not args.seqlens or s in args.seqlens]
    ranked = {}
    for L in seqlens:
        batch, heads = TOKENS // L, HIDDEN // hdim
        sizes = {"batch": batch, "heads": heads, "q": L, "d": hdim}
        if not causal:
            sizes["x"] = L
        s = sweep(diagram, GPU, dtype=DTYPE, sets=sizes)[0]
        ranked[L] = (sizes, s)
    rows = ranked[seqlens[0]][1].rows
    original = dict(module.CONFIGS["flash"][hdim])
    configs = [entry(module, "flash", hdim, r) for r in rows]
    jobs = [(str(path), f"sweep_{diagram}", "flash", hdim, c, "attention", hdim, causal) for c in configs]
    compiled = precompile(jobs, args.workers)
    state["compiled"] += compiled_records(rows, compiled, {"family": "attention", "diagram": diagram,
                                                           "head_dim": hdim})
    if args.compile_only:
        return []
    records = []
    for L in seqlens:
        sizes, s = ranked[L]
        batch, heads = sizes["batch"], sizes["heads"]
        q, k, v = (torch.randn(batch, heads, L, hdim, device="cuda", dtype=torch.float16) for _ in range(3))
        ref = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=causal)
        flops = 4.0 * batch * heads * L * L * hdim / (2 if causal else 1)
        predicted = {r.label: r for r in s.rows}
        for rank, (row, config) in enumerate(zip(rows, configs, strict=True), 1):
            if time.time() > state["deadline"]:
                state["skipped"].append(f"{diagram}:{hdim} L={L} {row.label}")
                continue
            rec = {"family": "attention", "diagram": diagram, "dtype": DTYPE, "head_dim": hdim,
                   "causal": causal, "seqlen": L, "sizes": sizes, "kernel": "flash",
                   "tiles": row.tiles, "woven": row.woven, "num_warps": row.num_warps,
                   "num_stages": row.num_stages, "config": config, "flops": flops,
                   "predicted_s": predicted[row.label].time_s,
                   "model_rank": [r.label for r in s.rows].index(row.label) + 1,
                   "timer": timer_name(args.attention_graph), **resources(compiled, rank - 1)}
            module.CONFIGS["flash"][hdim] = config
            try:
                out = module.attention(q, k, v, causal=causal)
                rec["rel_err"] = rel_err(torch, out, ref)
                if not rec["rel_err"] < TOLERANCE:
                    raise RuntimeError(f"relative error {rec['rel_err']:.3g} against SDPA")
                rec.update(bench(triton, partial(module.attention, q, k, v, causal=causal),
                                 graph=args.attention_graph, sampler=state["sampler"]))
                rec["tflops"] = flops / rec["time_s"] / 1e12
                rec["status"] = "ok"
            except Exception as exc:  # noqa: BLE001 - a configuration that fails is data too
                rec["status"] = "error"
                rec["error"] = (compiled.get(rank - 1, {}).get("error")
                                or f"{type(exc).__name__}: {str(exc)[:300]}")
            records.append(rec)
        module.CONFIGS["flash"][hdim] = original
        best = min((r for r in records if r["seqlen"] == L and r["status"] == "ok"),
                   key=lambda r: r["time_s"], default=None)
        if best:
            log(f"  {diagram} d={hdim} L={L}: best {best['tflops']:.0f} TFLOP/s "
                f"({best['tiles']}, {best['num_warps']} warps, {best['num_stages']} stages)")
        torch.cuda.empty_cache()
    return records


def matmul_group(args, state) -> list[dict]:
    import torch
    import triton

    from analyzer.config.sweep import sweep
    module, path, _ = state["modules"].setdefault("matmul", load_kernel("matmul", state["tmp"]))
    sizes_list = [n for n in MATMUL_SIZES if not args.matmul_sizes or n in args.matmul_sizes]
    ranked = {n: sweep("matmul", GPU, dtype=DTYPE, sets={"a": n, "b": n, "c": n})[0] for n in sizes_list}
    rows = ranked[sizes_list[0]].rows
    original = dict(module.CONFIGS["gemm"][None])
    configs = [entry(module, "gemm", None, r) for r in rows]
    compiled = precompile([(str(path), "sweep_matmul", "gemm", None, c, "matmul", None, False)
                           for c in configs], args.workers)
    state["compiled"] += compiled_records(rows, compiled, {"family": "matmul", "diagram": "matmul",
                                                           "head_dim": None})
    if args.compile_only:
        return []
    records = []
    for n in sizes_list:
        a, b = (torch.randn(n, n, device="cuda", dtype=torch.float16) for _ in range(2))
        ref = torch.matmul(a, b)
        flops = 2.0 * n ** 3
        peer = bench(triton, partial(torch.matmul, a, b), graph=True, sampler=state["sampler"])
        state["peers"].append({"family": "matmul", "peer": "torch.matmul", "size": n, **peer,
                               "tflops": flops / peer["time_s"] / 1e12})
        s = ranked[n]
        predicted = {r.label: r for r in s.rows}
        for rank, (row, config) in enumerate(zip(rows, configs, strict=True), 1):
            if time.time() > state["deadline"]:
                state["skipped"].append(f"matmul n={n} {row.label}")
                continue
            rec = {"family": "matmul", "diagram": "matmul", "dtype": DTYPE, "head_dim": None,
                   "causal": False, "seqlen": n, "sizes": {"a": n, "b": n, "c": n}, "kernel": "gemm",
                   "tiles": row.tiles, "woven": row.woven, "num_warps": row.num_warps,
                   "num_stages": row.num_stages, "config": config, "flops": flops,
                   "predicted_s": predicted[row.label].time_s,
                   "model_rank": [r.label for r in s.rows].index(row.label) + 1,
                   "timer": timer_name(True), **resources(compiled, rank - 1)}
            module.CONFIGS["gemm"][None] = config
            try:
                out = module.matmul(a, b)
                rec["rel_err"] = rel_err(torch, out, ref)
                if not rec["rel_err"] < TOLERANCE:
                    raise RuntimeError(f"relative error {rec['rel_err']:.3g} against torch.matmul")
                rec.update(bench(triton, partial(module.matmul, a, b), graph=True,
                                 sampler=state["sampler"]))
                rec["tflops"] = flops / rec["time_s"] / 1e12
                rec["status"] = "ok"
            except Exception as exc:  # noqa: BLE001
                rec["status"] = "error"
                rec["error"] = (compiled.get(rank - 1, {}).get("error")
                                or f"{type(exc).__name__}: {str(exc)[:300]}")
            records.append(rec)
        module.CONFIGS["gemm"][None] = original
        best = min((r for r in records if r["seqlen"] == n and r["status"] == "ok"),
                   key=lambda r: r["time_s"], default=None)
        if best:
            log(f"  matmul n={n}: best {best['tflops']:.0f} TFLOP/s ({best['tiles']}), torch.matmul "
                f"{state['peers'][-1]['tflops']:.0f}")
        torch.cuda.empty_cache()
    return records


# ------------------------------------------------------------------------------------- output

def environment() -> dict[str, Any]:
    import torch
    import triton
    props = torch.cuda.get_device_properties(0)
    return {"gpu": props.name, "sm_count": props.multi_processor_count, "torch": torch.__version__,
            "torch_cuda": torch.version.cuda, "triton": triton.__version__,
            "python": sys.version.split()[0]}


def summary(doc: dict) -> str:
    """Per shape: how many configurations ran, the best measured, and the model's first choice."""
    lines = ["| family | diagram | hdim | size | configs | best measured | TFLOP/s | model's first | "
             "TFLOP/s | first / best time |", "|---|---|---|---|---|---|---|---|---|---|"]
    shapes: dict[tuple, list[dict]] = {}
    for r in doc["records"]:
        shapes.setdefault((r["family"], r["diagram"], r["head_dim"] or 0, r["seqlen"]), []).append(r)
    for (family, diagram, hdim, size), recs in sorted(shapes.items()):
        ok = [r for r in recs if r["status"] == "ok"]
        if not ok:
            continue
        best = min(ok, key=lambda r: r["time_s"])
        first = min(recs, key=lambda r: r["model_rank"])
        first_s = first.get("time_s")
        label = lambda r: " ".join(f"{k}={v}" for k, v in r["tiles"].items()) + \
            f" w{r['num_warps']} s{r['num_stages']}"
        lines.append(f"| {family} | {diagram} | {hdim or ''} | {size} | {len(ok)}/{len(recs)} | "
                     f"{label(best)} | {best['tflops']:.0f} | {label(first)} | "
                     f"{first.get('tflops', float('nan')):.0f} | "
                     f"{first_s / best['time_s'] if first_s else float('nan'):.3f} |")
    return "\n".join(lines) + "\n"


def save(doc: dict, out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    (out / "sweep_h200.json").write_text(json.dumps(doc, indent=1) + "\n")
    head = (f"# Configuration sweep on {doc['meta'].get('gpu', '?')} ({doc['meta']['date']})\n\n"
            f"`{doc['meta']['command']}`; {len(doc['records'])} records, "
            f"{sum(r['status'] == 'ok' for r in doc['records'])} ran. "
            "docs/validation.md holds the model's fit to these.\n\n")
    (out / "sweep_h200.md").write_text(head + summary(doc))


def group_of(record: dict) -> str:
    return "matmul" if record["family"] == "matmul" else f"{record['diagram']}:{record['head_dim']}"


def skipped_cell(entry: str) -> tuple[str, int | None]:
    """The (group, size) of a `skipped` entry ("causal_attention:64 L=2048 ...", "matmul n=1024 ...")."""
    group, _, rest = entry.partition(" ")
    size = rest.split(" ", 1)[0].partition("=")[2]
    return group, int(size) if size.isdigit() else None


def merge(paths: list[str], out: Path) -> int:
    """Join runs; where two runs measured the same group at the same size, the later file's records
    are kept."""
    docs = [json.loads(Path(p).read_text()) for p in paths]
    cell = lambda r: (group_of(r), r["seqlen"])            # noqa: E731 - one group at one size
    owner = {cell(r): i for i, d in enumerate(docs) for r in d["records"]}
    sources = []                       # the runs behind each kept group, through earlier merges
    for n, d in enumerate(docs):
        kept = {g for (g, _), i in owner.items() if i == n}
        runs = d["meta"].get("merged_from") or [{"command": d["meta"]["command"],
                                                  "timer": d["meta"]["timer"], "groups": sorted(kept)}]
        for run in runs:
            groups = sorted(set(run["groups"]) & kept)
            if groups:
                sources.append({**run, "groups": groups, "date": run.get("date", d["meta"].get("date"))})
    doc = {"meta": {**docs[-1]["meta"], "merged_from": sources},
           "records": [r for i, d in enumerate(docs) for r in d["records"] if owner[cell(r)] == i],
           "peers": [p for i, d in enumerate(docs) for p in d.get("peers", [])
                     if owner.get((p.get("family", ""), p.get("size"))) == i],
           "skipped": [s for i, d in enumerate(docs) for s in d.get("skipped", [])
                       if owner.get(skipped_cell(s), i) == i]}
    doc["meta"]["command"] = "python bench/sweep_h200.py --merge " + " ".join(paths)
    save(doc, out)
    print(summary(doc))
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=os.environ.get("OUT", str(ROOT / "bench" / "results")))
    parser.add_argument("--groups", default=",".join(ALL_GROUPS),
                        help=f"comma-separated, of: {', '.join(ALL_GROUPS)}")
    parser.add_argument("--seqlens", default="", help="attention seqlens (default: all)")
    parser.add_argument("--matmul-sizes", default="", help="matmul sizes (default: all)")
    parser.add_argument("--budget-s", type=float, default=3600.0, help="stop timing after")
    parser.add_argument("--workers", type=int, default=min(12, os.cpu_count() or 1),
                        help="processes that compile configurations first (1: compile while timing)")
    parser.add_argument("--compile-only", action="store_true",
                        help="compile every configuration and record its registers, spills and SMEM "
                             "(compiled_h200.json); time nothing")
    parser.add_argument("--attention-timer", choices=("cudagraph", "do_bench"), default="cudagraph",
                        help="how attention is timed (matmul always by CUDA graph replays)")
    parser.add_argument("--merge", nargs="+", help="join these sweep_h200.json files into --out")
    args = parser.parse_args(argv)
    args.attention_graph = args.attention_timer == "cudagraph"
    if args.merge:
        return merge(args.merge, Path(args.out))
    args.seqlens = [int(s) for s in args.seqlens.split(",") if s]
    args.matmul_sizes = [int(s) for s in args.matmul_sizes.split(",") if s]
    groups = [g for g in args.groups.split(",") if g]
    bad = [g for g in groups if g not in ALL_GROUPS]
    if bad:
        print(f"error: --groups {bad[0]}: expected one of {', '.join(ALL_GROUPS)}", file=sys.stderr)
        return 1
    import torch
    if not torch.cuda.is_available():
        print("error: no CUDA device", file=sys.stderr)
        return 1
    given = argv if argv is not None else sys.argv[1:]
    command = "python bench/sweep_h200.py " + " ".join(without_out(given))
    doc = {"meta": {"date": datetime.date.today().isoformat(), "command": command.strip(),
                    "timer": timer_text(args.attention_graph), **environment()},
           "records": [], "peers": [], "skipped": []}
    state = {"tmp": Path(tempfile.mkdtemp()), "modules": {}, "peers": doc["peers"],
             "skipped": doc["skipped"], "deadline": time.time() + args.budget_s, "compiled": []}
    out = Path(args.out)
    with contextlib.ExitStack() as stack:
        state["sampler"] = None if args.compile_only else stack.enter_context(Sampler())
        if state["sampler"]:
            doc["meta"]["gpu_state"] = (f"{state['sampler'].source}, every {state['sampler'].period_s} s: "
                                        "means over each timing (bench/gpu_state.py)")
        for group in groups:
            began = time.time()
            log(f"{group}:")
            if group == "matmul":
                doc["records"] += matmul_group(args, state)
            else:
                diagram, hdim = group.split(":")
                doc["records"] += attention_group(diagram, int(hdim), args, state)
            log(f"  {time.time() - began:.0f} s")
            out.mkdir(parents=True, exist_ok=True)
            compiled = {**doc, "meta": {**doc["meta"], "timer": "none: what the compiler allotted"},
                        "records": state["compiled"], "peers": []}
            (out / "compiled_h200.json").write_text(json.dumps(compiled, indent=1) + "\n")
            if not args.compile_only:
                save(doc, out)             # after every group: a run cut short keeps what it measured
    if not args.compile_only:
        print(summary(doc))
    return 0


if __name__ == "__main__":
    sys.exit(main())
