"""Every legal configuration of the generated attention and matmul kernels, measured on one GPU and
recorded against the model's prediction (the data `napkin calibrate` fits; docs/validation.md).

For each family the configurations are those `napkin sweep` ranks (analyzer.config.sweep): tiles,
warps and stages the model allows. The kernel is generated once per diagram; each configuration is
timed by passing it to the call (`config=`, docs/kernels.md; the kernel source does not change, so one
compile per configuration and head dim). Shapes:
- attention and causal_attention: the FlashAttention-3 forward grid (16k tokens, hidden 2048),
  seqlen 512 ... 16384, head dims 64, 128 and 256, fp16;
- matmul: square fp16 products of 1024 ... 8192, with torch.matmul timed at each size beside it.
Every timing is checked first against a reference (SDPA, torch.matmul): relative error < 1e-2.
Matmul is timed by CUDA graph replays: at 1024 a kernel takes less time than its Python launch.
Attention is too by default (--attention-timer cudagraph): triton.testing.do_bench clears L2 with a
256 MB write between repetitions, which has its own power and SM clock, and the clock is what the
GPU state beside each timing is for. During every timing the SM clock, board power and temperature
are sampled (bench/common.py, Sampler) and recorded with it: the H200 holds its 700 W limit by
lowering the clock, so time = cycles / clock, and the two can be told apart.
Compilation runs in worker processes first (Triton's cache is shared), timing in this process.

    python bench/sweep_h200.py [--gpu h100] [--out DIR] [--groups attention:128,matmul] [--budget-s S]
        [--rep-ms MS] [--attention-timer cudagraph|do_bench]
    python bench/sweep_h200.py [--gpu h100] --merge A/sweep_h100.json B/sweep_h100.json --out DIR
                                                                    # join partial runs
    python bench/sweep_h200.py --compile-only                       # registers, spills, SMEM only

--gpu names the profile the kernels are generated and ranked with (default h200, the GPU the script
was first written for; h100 on an H100 SXM5): its legal configurations are the ones timed.
Output: sweep_<gpu>.json (meta, records) and sweep_<gpu>.md (the best and the model's choice per
shape), and compiled_<gpu>.json: per configuration the registers per thread, spilled bytes and SMEM
bytes the compiler allotted (napkin calibrate --registers fits them; --compile-only writes only this
one). A merge joins the compiled_<gpu>.json beside each run's sweep file too.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import json
import os
import sys
import tempfile
import time
from functools import partial
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))          # napkin and bench.common from this checkout, installed or not

from bench.common import (  # noqa: E402
    CAUSAL,
    DTYPE,
    GPU,
    REP_MS,
    TOLERANCE,
    Compile,
    Kernels,
    Sampler,
    command,
    environment,
    log,
    precompile,
    rel_err,
    resources,
    save_results,
    timed,
    timer_name,
    timer_text,
    write_json,
)

TOKENS, HIDDEN = 16384, 2048                      # FlashAttention-3's forward benchmark
SEQLENS = (512, 1024, 2048, 4096, 8192, 16384)
HEAD_DIMS = (64, 128, 256)
MATMUL_SIZES = (1024, 2048, 4096, 6144, 8192)
DIAGRAMS = CAUSAL                                 # the attention diagrams: causal?
ALL_GROUPS = [f"{d}:{h}" for d in DIAGRAMS for h in HEAD_DIMS] + ["matmul"]


def compiled_records(rows, compiled: dict[int, dict], base: dict) -> list[dict]:
    """--compile-only: what the compiler allotted each configuration, nothing timed."""
    return [{**base, "tiles": row.tiles, "num_warps": row.num_warps, "num_stages": row.num_stages,
             **compiled.get(i, {})} for i, row in enumerate(rows)]


def attention_group(diagram: str, hdim: int, args, state) -> list[dict]:
    import torch
    import triton

    from analyzer.config.sweep import sweep
    causal = DIAGRAMS[diagram]
    loaded = state["kernels"](diagram)
    module = loaded.module
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
        # the profile's own legal set and ranking (a shipped datasheet profile's, not its calibrated
        # sibling's): the fit learns from the configurations the calibrated register count drops too
        s = sweep(diagram, args.gpu, dtype=DTYPE, sets=sizes, backend="triton", sibling_fit=False)[0]
        ranked[L] = (sizes, s)
    rows = ranked[seqlens[0]][1].rows
    configs = [loaded.configuration("flash", r) for r in rows]
    compiled = precompile([Compile(str(loaded.path), module.__name__, "flash", c, "attention", hdim, causal)
                           for c in configs], args.workers)
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
            call = partial(module.attention, q, k, v, causal=causal, config={"flash": config})
            try:
                rec["rel_err"] = rel_err(torch, call(), ref)
                if not rec["rel_err"] < TOLERANCE:
                    raise RuntimeError(f"relative error {rec['rel_err']:.3g} against SDPA")
                rec.update(timed(triton, call, graph=args.attention_graph, sampler=state["sampler"],
                                 rep_ms=args.rep_ms))
                rec["tflops"] = flops / rec["time_s"] / 1e12
                rec["status"] = "ok"
            except Exception as exc:  # noqa: BLE001 - a configuration that fails is data too
                rec["status"] = "error"
                rec["error"] = (compiled.get(rank - 1, {}).get("error")
                                or f"{type(exc).__name__}: {str(exc)[:300]}")
            records.append(rec)
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
    loaded = state["kernels"]("matmul")
    module = loaded.module
    sizes_list = [n for n in MATMUL_SIZES if not args.matmul_sizes or n in args.matmul_sizes]
    ranked = {n: sweep("matmul", args.gpu, dtype=DTYPE, sets={"a": n, "b": n, "c": n}, backend="triton",
                       sibling_fit=False)[0] for n in sizes_list}
    rows = ranked[sizes_list[0]].rows
    configs = [loaded.configuration("gemm", r) for r in rows]
    compiled = precompile([Compile(str(loaded.path), module.__name__, "gemm", c, "matmul") for c in configs],
                          args.workers)
    state["compiled"] += compiled_records(rows, compiled, {"family": "matmul", "diagram": "matmul",
                                                           "head_dim": None})
    if args.compile_only:
        return []
    records = []
    for n in sizes_list:
        a, b = (torch.randn(n, n, device="cuda", dtype=torch.float16) for _ in range(2))
        ref = torch.matmul(a, b)
        flops = 2.0 * n ** 3
        peer = timed(triton, partial(torch.matmul, a, b), graph=True, sampler=state["sampler"],
                     rep_ms=args.rep_ms)
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
            call = partial(module.matmul, a, b, config={"gemm": config})
            try:
                rec["rel_err"] = rel_err(torch, call(), ref)
                if not rec["rel_err"] < TOLERANCE:
                    raise RuntimeError(f"relative error {rec['rel_err']:.3g} against torch.matmul")
                rec.update(timed(triton, call, graph=True, sampler=state["sampler"], rep_ms=args.rep_ms))
                rec["tflops"] = flops / rec["time_s"] / 1e12
                rec["status"] = "ok"
            except Exception as exc:  # noqa: BLE001
                rec["status"] = "error"
                rec["error"] = (compiled.get(rank - 1, {}).get("error")
                                or f"{type(exc).__name__}: {str(exc)[:300]}")
            records.append(rec)
        best = min((r for r in records if r["seqlen"] == n and r["status"] == "ok"),
                   key=lambda r: r["time_s"], default=None)
        if best:
            log(f"  matmul n={n}: best {best['tflops']:.0f} TFLOP/s ({best['tiles']}), torch.matmul "
                f"{state['peers'][-1]['tflops']:.0f}")
        torch.cuda.empty_cache()
    return records


# ------------------------------------------------------------------------------------- output

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


def report_of(gpu: str) -> str:
    """Where napkin calibrate's report of this GPU's sweep is committed (README's calibrate commands)."""
    return "docs/validation.md" if gpu == GPU else f"docs/validation-{gpu}.md"


def save(doc: dict, out: Path, gpu: str) -> None:
    head = (f"# Configuration sweep on {doc['meta'].get('gpu', '?')} ({doc['meta']['date']})\n\n"
            f"`{doc['meta']['command']}`; {len(doc['records'])} records, "
            f"{sum(r['status'] == 'ok' for r in doc['records'])} ran. "
            f"{report_of(gpu)} holds the model's fit to these.\n\n")
    save_results(out, f"sweep_{gpu}", doc, head + summary(doc))


def group_of(record: dict) -> str:
    return "matmul" if record["family"] == "matmul" else f"{record['diagram']}:{record['head_dim']}"


def skipped_cell(entry: str) -> tuple[str, int | None]:
    """The (group, size) of a `skipped` entry ("causal_attention:64 L=2048 ...", "matmul n=1024 ...")."""
    group, _, rest = entry.partition(" ")
    size = rest.split(" ", 1)[0].partition("=")[2]
    return group, int(size) if size.isdigit() else None


def merge_command(paths: list[str], gpu: str) -> str:
    return "python bench/sweep_h200.py " + ("" if gpu == GPU else f"--gpu {gpu} ") + "--merge " + " ".join(paths)


def merge_compiled(paths: list[str], out: Path, gpu: str) -> None:
    """Join the compiled_<gpu>.json beside each run's sweep file (where there is one): per group, the
    later run's configurations are kept."""
    found = [p for p in (Path(s).parent / f"compiled_{gpu}.json" for s in paths) if p.is_file()]
    if not found:
        return
    docs = [json.loads(p.read_text()) for p in found]
    owner = {group_of(r): i for i, d in enumerate(docs) for r in d["records"]}
    doc = {**docs[-1], "records": [r for i, d in enumerate(docs) for r in d["records"] if owner[group_of(r)] == i]}
    doc["meta"] = {**docs[-1]["meta"], "command": merge_command(paths, gpu),
                   "merged_from": [d["meta"]["command"] for d in docs]}
    write_json(out / f"compiled_{gpu}.json", doc)


def merge(paths: list[str], out: Path, gpu: str) -> int:
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
    doc["meta"]["command"] = merge_command(paths, gpu)
    save(doc, out, gpu)
    merge_compiled(paths, out, gpu)
    print(summary(doc))
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=os.environ.get("OUT", str(ROOT / "bench" / "results")))
    parser.add_argument("--gpu", default=GPU,
                        help=f"the profile the kernels are generated and ranked with (default {GPU})")
    parser.add_argument("--groups", default=",".join(ALL_GROUPS),
                        help=f"comma-separated, of: {', '.join(ALL_GROUPS)}")
    parser.add_argument("--seqlens", default="", help="attention seqlens (default: all)")
    parser.add_argument("--matmul-sizes", default="", help="matmul sizes (default: all)")
    parser.add_argument("--budget-s", type=float, default=3600.0, help="stop timing after")
    parser.add_argument("--rep-ms", type=float, default=REP_MS,
                        help=f"milliseconds each of a timing's ten graph replays runs (default {REP_MS})")
    parser.add_argument("--workers", type=int, default=min(12, os.cpu_count() or 1),
                        help="processes that compile configurations first (1: compile while timing)")
    parser.add_argument("--compile-only", action="store_true",
                        help="compile every configuration and record its registers, spills and SMEM "
                             "(compiled_<gpu>.json); time nothing")
    parser.add_argument("--attention-timer", choices=("cudagraph", "do_bench"), default="cudagraph",
                        help="how attention is timed (matmul always by CUDA graph replays)")
    parser.add_argument("--merge", nargs="+", help="join these sweep_<gpu>.json files into --out")
    args = parser.parse_args(argv)
    args.attention_graph = args.attention_timer == "cudagraph"
    if args.merge:
        return merge(args.merge, Path(args.out), args.gpu)
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
    doc = {"meta": {"date": datetime.date.today().isoformat(), "command": command("sweep_h200.py", argv),
                    "timer": timer_text(args.attention_graph, args.rep_ms), "profile": args.gpu,
                    **environment()},
           "records": [], "peers": [], "skipped": []}
    state = {"kernels": Kernels(Path(tempfile.mkdtemp()), args.gpu), "peers": doc["peers"],
             "skipped": doc["skipped"], "deadline": time.time() + args.budget_s, "compiled": []}
    out = Path(args.out)
    with contextlib.ExitStack() as stack:
        state["sampler"] = None if args.compile_only else stack.enter_context(Sampler())
        if state["sampler"]:
            doc["meta"]["gpu_state"] = (f"{state['sampler'].source}, every {state['sampler'].period_s} s: "
                                        "means over each timing (bench/common.py, Sampler)")
        for group in groups:
            began = time.time()
            log(f"{group}:")
            if group == "matmul":
                doc["records"] += matmul_group(args, state)
            else:
                diagram, hdim = group.split(":")
                doc["records"] += attention_group(diagram, int(hdim), args, state)
            log(f"  {time.time() - began:.0f} s")
            compiled = {**doc, "meta": {**doc["meta"], "timer": "none: what the compiler allotted"},
                        "records": state["compiled"], "peers": []}
            write_json(out / f"compiled_{args.gpu}.json", compiled)
            if not args.compile_only:
                save(doc, out, args.gpu)             # after every group: a run cut short keeps what it measured
    if not args.compile_only:
        print(summary(doc))
    return 0


if __name__ == "__main__":
    sys.exit(main())
