"""Every legal configuration of the Hopper kernel, timed on one GPU beside its peers: the recording that
`napkin calibrate --kernel hopper` fits (docs/validation.md), and, in the same run, the FlashAttention-3
grid against SDPA's cuDNN and FLASH backends and the portable Triton kernel.

Shapes:
- grid: FlashAttention-3's forward benchmark (16k tokens, hidden 2048): head dims 64, 128, 256; seqlen
  512 ... 16384; causal and not; fp16;
- beyond (the validation's shape classes, none of them in the grid): grouped-query prefill, odd lengths,
  batch 1 long context, cross-attention with short key sequences, an encoder's short sequences;
- real: real models' short shapes (bench/shapes.py's REAL_SHAPES: ViT-L/14, BERT-large, SDXL's
  cross-attention), where the frontier's rows miss cuDNN; the fit trains on them beside the grid;
- short: more short shapes (SHORT_SHAPES: ViT-B/16, BERT-base at 128 tokens, Whisper's encoder, SDXL's
  smaller cross-attention, cross-attention at head dim 128), held out of the fit.
Configurations: every legal one the model ranks (analyzer.config.hopper.candidates: warpgroups, chunk,
stages, overlap; a block a tile), or its first N (--top N), each also with the persistent schedules
where they fit (--schedules tiles,persistent,prefetch), each checked against SDPA (relative error < 1e-2) and then timed by
CUDA graph replays, so that the kernel is timed and not its Python launch. The configuration the module
launches by itself (its by-size table) and the peers are timed both ways, by graph replays and by
triton.testing.do_bench (a Python launch per call, L2 cleared between calls): the difference is the
host's share. At short sequences, not causal, the launched configuration with the persistent schedule is
timed REPEATS times, each with its own graph, to see whether its spread is the kernel's or the timer's.
The SM clock, power and temperature are sampled beside every timing (bench/common.py, Sampler).

    python bench/hopper_sweep.py --gpu h100 [--out DIR] [--budget-s S] [--rep-ms MS] [--parts grid,beyond,real,short]
        [--schedules tiles,persistent,prefetch] [--top N] [--overlaps inter+intra]
        [--diagrams mha,causal_attention,gqa]

Writes hopper_sweep_<gpu>.json (meta, records, peers, persistent) and .md after every shape.
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
from dataclasses import dataclass
from functools import partial
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench.common import (  # noqa: E402
    TOLERANCE,
    Compile,
    Sampler,
    command,
    environment,
    import_file,
    launched_by,
    log,
    precompile,
    rel_err,
    save_results,
    timed,
)

TOKENS, HIDDEN = 16384, 2048                      # FlashAttention-3's forward benchmark
SEQLENS = (512, 1024, 2048, 4096, 8192, 16384)
HEAD_DIMS = (128, 64, 256)                        # 128 first: the targets' head dim
REPEATS = 3                                       # persistent schedule: separate timings
DTYPE = "fp16"


@dataclass(frozen=True)
class Shape:
    kind: str                 # grid, or the validation's shape class
    diagram: str              # mha, causal_attention or gqa
    batch: int
    heads_q: int
    heads_kv: int
    seq_q: int
    seq_k: int
    d: int

    @property
    def causal(self) -> bool:
        return self.diagram == "causal_attention"

    @property
    def flops(self) -> float:
        return 4.0 * self.batch * self.heads_q * self.seq_q * self.seq_k * self.d / (2 if self.causal else 1)

    def label(self) -> str:
        heads = f"{self.heads_q}" if self.heads_q == self.heads_kv else f"{self.heads_q}/{self.heads_kv}"
        return (f"{self.kind}: {self.diagram} d={self.d} b={self.batch} h={heads} "
                f"{self.seq_q}x{self.seq_k}")


def shapes(parts: set[str], head_dims: tuple[int, ...] = HEAD_DIMS, seqlens: tuple[int, ...] = SEQLENS
           ) -> list[Shape]:
    out = []
    if "grid" in parts:
        for d in head_dims:
            for seq in seqlens:
                for diagram in ("mha", "causal_attention"):
                    b, h = TOKENS // seq, HIDDEN // d
                    out.append(Shape("grid", diagram, b, h, h, seq, seq, d))
    if "beyond" in parts:
        out += [Shape("grouped-query prefill", "gqa", 2, 32, 8, 4096, 4096, 128),
                Shape("grouped-query prefill", "gqa", 1, 64, 8, 8192, 8192, 128),
                Shape("odd lengths", "mha", 4, 16, 16, 1000, 1000, 128),
                Shape("odd lengths", "causal_attention", 2, 16, 16, 3000, 3000, 128),
                Shape("batch 1 long context", "causal_attention", 1, 16, 16, 32768, 32768, 128),
                Shape("cross-attention, short keys", "mha", 8, 16, 16, 4096, 256, 128),
                Shape("cross-attention, short keys", "mha", 8, 16, 16, 4096, 512, 64),
                Shape("encoder", "mha", 64, 12, 12, 512, 512, 64),
                Shape("head dim 256", "causal_attention", 4, 8, 8, 3000, 3000, 256)]
    if "real" in parts:
        from analyzer.calibrate.hopper import REAL_MODEL
        from bench.shapes import REAL_SHAPES
        out += [Shape(f"{REAL_MODEL}{name}", "mha", b, h, h, sq, sk, d)
                for name, (b, h, sq, sk, d) in REAL_SHAPES.items()]
    if "short" in parts:
        from bench.shapes import SHORT_SHAPES
        out += [Shape(f"short: {name}", "mha", b, h, h, sq, sk, d)
                for name, (b, h, sq, sk, d) in SHORT_SHAPES.items()]
    return out


class Run:
    def __init__(self, args: argparse.Namespace, argv: list[str] | None) -> None:
        from analyzer import hardware
        from analyzer.codegen import generate
        self.args = args
        self.profile = hardware.load(args.gpu)
        self.tmp = Path(tempfile.mkdtemp(prefix="napkin_hopper_sweep_"))
        self.hopper, self.triton, self.paths = {}, {}, {}
        for diagram in ("mha", "causal_attention", "gqa"):
            for backend, into in (("hopper", self.hopper), ("triton", self.triton)):
                g = generate(diagram, args.gpu, backend=backend)
                name = f"sweep_{backend}_{diagram}"
                path = self.tmp / f"{name}.py"
                g.write(path)
                into[diagram] = import_file(path, name)
                if backend == "hopper":
                    self.paths[diagram] = (str(path), name)
        self.doc = {"meta": {"date": datetime.date.today().isoformat(), "command": command("hopper_sweep.py", argv),
                             "profile": args.gpu, "dtype": DTYPE,
                             "timer": f"triton.testing.do_bench_cudagraph(fn, rep={args.rep_ms}) (graph) and "
                                      f"triton.testing.do_bench(fn, warmup=25, rep={args.rep_ms}) (plain); "
                                      "median, 20th and 80th percentiles",
                             **environment()},
                    "records": [], "peers": [], "persistent": [], "skipped": []}
        self.deadline = time.monotonic() + args.budget_s

    def save(self) -> None:
        save_results(Path(self.args.out), f"hopper_sweep_{self.args.gpu}", self.doc, markdown(self.doc))


def candidates(run: Run, shape: Shape):
    """The legal configurations in the model's order; outside ALL_STAGES_AT only the fewest stages of
    each (warpgroups, chunk, overlap), and the model's first choice; with --top, the first that many of
    these; with --overlaps, those of the overlaps named alone. With --schedules tiles,persistent,prefetch
    each of them also with each persistent schedule named, where it fits (prefetch's second query buffer and output buffer take SMEM)."""
    from analyzer.config import hopper as model
    from analyzer.measure.sweep import ALL_STAGES_AT, fewest_stages
    ranked = [c for _, c in model.ranked(run.profile, shape.d, DTYPE, seq_q=shape.seq_q, seq_k=shape.seq_k,
                                         instances=shape.batch * shape.heads_q, causal=shape.causal)
              if c.schedule == "tiles" and (not run.args.overlaps or c.overlap in run.args.overlaps.split(","))]
    if not (shape.kind == "grid" and shape.seq_q in ALL_STAGES_AT):
        ranked = fewest_stages(ranked)
    ranked = ranked[:run.args.top or None]
    for schedule in run.args.schedules.split(","):
        if schedule != "tiles":
            again = (model.configuration(run.profile, shape.d, DTYPE, warpgroups=c.warpgroups, chunk=c.chunk,
                                         stages=c.stages, overlap=c.overlap, schedule=schedule, causal=shape.causal)
                     for c in ranked if c.schedule == "tiles")
            ranked += [c for c in again if model.legal(run.profile, c)]
    return ranked


def specialised(shape: Shape) -> tuple:
    """What Triton specialises the kernel's integer arguments on (equal to 1, divisible by 16): shapes
    alike in this share a compiled kernel."""
    ints = (shape.seq_q, shape.seq_k, shape.batch * shape.heads_q, shape.heads_q, shape.heads_q // shape.heads_kv)
    return tuple((x == 1, x % 16 == 0) for x in ints)


def small(shape: Shape) -> tuple[int, int, int, int, int]:
    """The smallest (batch, heads_q, heads_kv, seq_q, seq_k) specialised as `shape` is."""
    length = (lambda n: 1 if n == 1 else 16 if n % 16 == 0 else 17)
    for batch in range(1, 17):
        at = (batch, shape.heads_q, shape.heads_kv, length(shape.seq_q), length(shape.seq_k))
        if specialised(Shape(shape.kind, shape.diagram, *at, shape.d)) == specialised(shape):
            return at
    raise AssertionError(shape)


def compile_all(run: Run, todo: list[Shape]) -> None:
    """Every configuration timed, compiled first in worker processes at a shape that the timed ones
    share their specialisation with (a small batch of it)."""
    jobs = []
    for shape in todo:
        path, name = run.paths[shape.diagram]
        configs = [c.entry() for c in candidates(run, shape)]
        if not shape.causal and shape.seq_q <= 2048:
            configs += [dict(c, SCHEDULE="persistent") for c in configs[:3] if c["SCHEDULE"] == "tiles"]
        jobs += [Compile(path, name, "flash", c, "attention", shape.d, shape.causal, small(shape)) for c in configs]
    jobs.sort(key=lambda job: (job.head_dim, job.name, str(job.config)))
    errors = {i: r["error"] for i, r in precompile(jobs, run.args.workers).items() if "error" in r}
    for i, error in errors.items():
        log(f"  compile failed: {jobs[i].config} d={jobs[i].head_dim}: {error}")


def measure(run: Run, shape: Shape) -> None:
    import torch
    import torch.nn.functional as F
    import triton
    from torch.nn.attention import SDPBackend, sdpa_kernel

    from analyzer.config import hopper as model
    sampler = run.sampler
    q = torch.randn(shape.batch, shape.heads_q, shape.seq_q, shape.d, device="cuda", dtype=torch.float16)
    k, v = (torch.randn(shape.batch, shape.heads_kv, shape.seq_k, shape.d, device="cuda", dtype=torch.float16)
            for _ in range(2))
    gqa = shape.heads_q != shape.heads_kv
    sdpa = partial(F.scaled_dot_product_attention, q, k, v, is_causal=shape.causal, enable_gqa=gqa)
    ref = sdpa()
    hopper = run.hopper[shape.diagram]
    mine = launched_by(hopper, partial(hopper.attention, q, k, v, causal=shape.causal))
    ranked = candidates(run, shape)
    base = {"kind": shape.kind, "diagram": shape.diagram, "dtype": DTYPE, "head_dim": shape.d,
            "causal": shape.causal, "batch": shape.batch, "heads_q": shape.heads_q, "heads_kv": shape.heads_kv,
            "seq_q": shape.seq_q, "seq_k": shape.seq_k, "flops": shape.flops}
    steady(torch, partial(hopper.attention, q, k, v, causal=shape.causal))
    for rank, c in enumerate(ranked, 1):
        if time.monotonic() > run.deadline:
            run.doc["skipped"].append(f"{shape.label()} {c.label()}")
            continue
        entry = c.entry()
        rec = {**base, "config": entry, "model_rank": rank, "launched": entry == mine,
               "predicted_s": model.predicted_time(run.profile, c, shape.d, DTYPE, seq_q=shape.seq_q,
                                                   seq_k=shape.seq_k, instances=shape.batch * shape.heads_q,
                                                   causal=shape.causal),
               "timer": "graph"}
        call = partial(hopper.attention, q, k, v, causal=shape.causal, config=entry)
        try:
            rec["rel_err"] = rel_err(torch, call(), ref)
            if not rec["rel_err"] < TOLERANCE:
                raise RuntimeError(f"relative error {rec['rel_err']:.3g} against SDPA")
            rec.update(timed(triton, call, graph=True, sampler=sampler, rep_ms=run.args.rep_ms))
            if entry == mine:
                plain = timed(triton, call, graph=False, rep_ms=run.args.rep_ms)
                rec["plain_time_s"] = plain["time_s"]
            rec["tflops"] = shape.flops / rec["time_s"] / 1e12
            rec["status"] = "ok"
        except Exception as exc:  # noqa: BLE001 - a configuration that fails is data too
            rec["status"], rec["error"] = "error", f"{type(exc).__name__}: {str(exc)[:300]}"
        run.doc["records"].append(rec)
    if time.monotonic() > run.deadline:
        run.doc["skipped"].append(f"{shape.label()} peers")
        return
    peers = {"hopper (launched)": partial(hopper.attention, q, k, v, causal=shape.causal),
             "triton": partial(run.triton[shape.diagram].attention, q, k, v, causal=shape.causal)}
    for name, backend in (("sdpa_cudnn", SDPBackend.CUDNN_ATTENTION), ("sdpa_flash", SDPBackend.FLASH_ATTENTION)):
        def peer(backend=backend):
            with sdpa_kernel(backend):
                return sdpa()
        peers[name] = peer
    for name, fn in peers.items():
        row = {**base, "peer": name}
        try:
            if name != "hopper (launched)" and not rel_err(torch, fn(), ref) < TOLERANCE:
                raise RuntimeError("relative error above tolerance against SDPA's default")
            graph = timed(triton, fn, graph=True, sampler=sampler, rep_ms=run.args.rep_ms)
            plain = timed(triton, fn, graph=False, rep_ms=run.args.rep_ms)
            row.update(time_s=graph["time_s"], plain_time_s=plain["time_s"],
                       tflops=shape.flops / graph["time_s"] / 1e12, plain_tflops=shape.flops / plain["time_s"] / 1e12,
                       sm_clock_mhz=graph.get("sm_clock_mhz"))
        except Exception as exc:  # noqa: BLE001 - a peer without this shape is data too
            row["error"] = f"{type(exc).__name__}: {str(exc)[:200]}"
        run.doc["peers"].append(row)
    if not shape.causal and shape.seq_q <= 2048 and shape.kind == "grid":
        entry = dict(mine, SCHEDULE="persistent")
        call = partial(hopper.attention, q, k, v, config=entry)
        times = [timed(triton, call, graph=True, rep_ms=run.args.rep_ms)["time_s"] for _ in range(REPEATS)]
        times.append(timed(triton, call, graph=False, rep_ms=run.args.rep_ms)["time_s"])
        run.doc["persistent"].append({**base, "config": entry, "graph_times_s": times[:-1], "plain_time_s": times[-1]})
    ok = [r for r in run.doc["records"] if r.get("status") == "ok" and r["kind"] == shape.kind
          and (r["diagram"], r["head_dim"], r["seq_q"], r["seq_k"], r["batch"]) ==
          (shape.diagram, shape.d, shape.seq_q, shape.seq_k, shape.batch)]
    if ok:
        best = min(ok, key=lambda r: r["time_s"])
        chosen = next((r for r in ok if r["launched"]), None)
        cudnn = next((p.get("tflops") for p in run.doc["peers"][-4:] if p["peer"] == "sdpa_cudnn"), None)
        log(f"{shape.label()}: {len(ok)} configs, best {best['tflops']:.0f} {best['config']}, launched "
            f"{chosen['tflops'] if chosen else float('nan'):.0f}, cuDNN {cudnn or float('nan'):.0f} TFLOP/s")
    del q, k, v, ref
    torch.cuda.empty_cache()


def steady(torch, fn, seconds: float = 1.0) -> None:
    """Run `fn` back to back for `seconds`, so that the timings after it meet the SM clock the GPU's power
    limit holds under load. After the host's pauses (a shape's tensors, its checks) an H200 boosted to
    1980 MHz, and a shape's first 10 ms timing ran up to 13 % faster than the same configuration timed
    after a second of load (bench/results/hopper_sweep_h200_unwarmed.json beside
    hopper_sweep_h200_balanced.json, 2026-11-28, the NVML clock beside each record)."""
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        for _ in range(8):
            fn()
        torch.cuda.synchronize()


def markdown(doc: dict) -> str:
    meta = doc["meta"]
    out = [f"# The Hopper kernel's configurations on {meta.get('gpu')} ({meta['date']})", "",
           f"`{meta['command']}`; torch {meta.get('torch')}, triton {meta.get('triton')}. Timer: {meta['timer']}. "
           f"{len(doc['records'])} records, {sum(r.get('status') == 'ok' for r in doc['records'])} ran. "
           "TFLOP/s by graph replays; `plain` by do_bench.", "",
           "| shape | configs | best | best TFLOP/s | launched TFLOP/s | launched / best time | plain | cuDNN "
           "| cuDNN plain | FLASH | Triton |", "|---|---|---|---|---|---|---|---|---|---|---|"]
    groups: dict[tuple, list[dict]] = {}
    for r in doc["records"]:
        groups.setdefault((r["kind"], r["diagram"], r["head_dim"], r["batch"], r["heads_q"], r["heads_kv"],
                           r["seq_q"], r["seq_k"]), []).append(r)
    peers = {(p["kind"], p["diagram"], p["head_dim"], p["batch"], p["heads_q"], p["heads_kv"], p["seq_q"],
              p["seq_k"], p["peer"]): p for p in doc["peers"]}
    fmt = (lambda x: f"{x:.0f}" if x else "-")
    for key, recs in groups.items():
        ok = [r for r in recs if r.get("status") == "ok"]
        if not ok:
            continue
        best = min(ok, key=lambda r: r["time_s"])
        chosen = next((r for r in ok if r["launched"]), None)
        c = best["config"]
        kind, diagram, d, b, hq, hk, sq, sk = key
        peer = (lambda name, field="tflops": peers.get((*key, name), {}).get(field))
        out.append(f"| {kind}: {diagram} d={d} b={b} h={hq}/{hk} {sq}x{sk} | {len(ok)}/{len(recs)} "
                   f"| N={c['WARPGROUPS']} s_x={c['BLOCK_X']} {c['STAGES']}st {c['OVERLAP']} | {best['tflops']:.0f} "
                   f"| {fmt(chosen and chosen['tflops'])} "
                   f"| {chosen['time_s'] / best['time_s'] if chosen else float('nan'):.3f} "
                   f"| {fmt(peer('hopper (launched)', 'plain_tflops'))} | {fmt(peer('sdpa_cudnn'))} "
                   f"| {fmt(peer('sdpa_cudnn', 'plain_tflops'))} | {fmt(peer('sdpa_flash'))} | {fmt(peer('triton'))} |")
    if doc["persistent"]:
        out += ["", "## The persistent schedule, timed separately (not causal, TFLOP/s)", "",
                "| hdim | seqlen | config | graph, each timing | plain |", "|---|---|---|---|---|"]
        for p in doc["persistent"]:
            c = p["config"]
            each = ", ".join(f"{p['flops'] / t / 1e12:.0f}" for t in p["graph_times_s"])
            out.append(f"| {p['head_dim']} | {p['seq_q']} | N={c['WARPGROUPS']} s_x={c['BLOCK_X']} {c['OVERLAP']} "
                       f"| {each} | {p['flops'] / p['plain_time_s'] / 1e12:.0f} |")
    if doc["skipped"]:
        out += ["", f"Skipped for the time budget: {len(doc['skipped'])} configurations."]
    return "\n".join(out) + "\n"


def shape_key(row: dict) -> tuple:
    return (row["kind"], row["diagram"], row["head_dim"], row["batch"], row["heads_q"], row["heads_kv"],
            row["seq_q"], row["seq_k"])


def row_key(row: dict) -> tuple:
    """A record's shape and configuration; a peer's or a persistent timing's shape and name."""
    return (*shape_key(row), json.dumps(row.get("config"), sort_keys=True), row.get("peer"))


def merge(paths: list[str], out: Path, gpu: str) -> int:
    """Join runs of one GPU; where two measured the same configuration (or peer) at the same shape, the
    later file's row is kept."""
    docs = [json.loads(Path(p).read_text()) for p in paths]
    owner = {row_key(r): i for i, d in enumerate(docs) for part in ("records", "peers", "persistent")
             for r in d[part]}
    kept = (lambda i, rows: [r for r in rows if owner.get(row_key(r), i) == i])
    doc = {"meta": {**docs[-1]["meta"], "command": "python bench/hopper_sweep.py --merge " + " ".join(paths),
                    # a merged file's own runs are listed as it lists them
                    "merged_from": [run for i, d in enumerate(docs) for run in d["meta"].get("merged_from") or
                                    [{"command": d["meta"]["command"], "date": d["meta"]["date"],
                                      "shapes": len({shape_key(r) for r in kept(i, d["records"])})}]]},
           **{part: [r for i, d in enumerate(docs) for r in kept(i, d[part])]
              for part in ("records", "peers", "persistent")},
           "skipped": []}
    measured = {Shape(r["kind"], r["diagram"], r["batch"], r["heads_q"], r["heads_kv"], r["seq_q"], r["seq_k"],
                      r["head_dim"]).label() for r in doc["records"]}
    doc["skipped"] = [s for d in docs for s in d["skipped"] if not any(s.startswith(m + " ") for m in measured)]
    save_results(out, f"hopper_sweep_{gpu}", doc, markdown(doc))
    return 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--gpu", default="h100", help="the profile the kernels are generated and ranked for")
    ap.add_argument("--out", default=os.environ.get("OUT", str(ROOT / "bench" / "results")))
    ap.add_argument("--budget-s", type=float, default=480.0, help="stop timing after this many seconds")
    ap.add_argument("--rep-ms", type=float, default=10.0, help="each timing's repetition, ms")
    ap.add_argument("--workers", type=int, default=min(14, os.cpu_count() or 1))
    ap.add_argument("--parts", default="grid,beyond", help="grid, beyond, real, short (comma-separated)")
    ap.add_argument("--head-dims", default=",".join(map(str, HEAD_DIMS)), help="the grid's head dims")
    ap.add_argument("--seqlens", default=",".join(map(str, SEQLENS)), help="the grid's sequence lengths")
    ap.add_argument("--merge", nargs="+", help="join these hopper_sweep_<gpu>.json files into --out")
    ap.add_argument("--schedules", default="tiles", help="tiles, or tiles and persistent schedules (persistent, "
                                                         "prefetch): each configuration timed also with each")
    ap.add_argument("--diagrams", default="mha,causal_attention,gqa", help="the shapes of these diagrams only")
    ap.add_argument("--overlaps", default="", help="time only these overlaps (comma-separated; default: all)")
    ap.add_argument("--top", type=int, default=0, help="time only the model's first N configurations a shape "
                                                        "(0: every one)")
    args = ap.parse_args(argv)
    if args.merge:
        return merge(args.merge, Path(args.out), args.gpu)
    numbers = (lambda text: tuple(int(x) for x in text.split(",") if x))
    import torch
    if not torch.cuda.is_available():
        print("error: no CUDA device", file=sys.stderr)
        return 1
    began = time.monotonic()
    run = Run(args, argv)
    todo = [s for s in shapes(set(args.parts.split(",")), numbers(args.head_dims), numbers(args.seqlens))
            if s.diagram in args.diagrams.split(",")]
    compile_all(run, todo)
    log(f"{run.doc['meta']['gpu']}: generated and compiled in {time.monotonic() - began:.0f} s")
    with contextlib.ExitStack() as stack:
        run.sampler = stack.enter_context(Sampler())
        run.doc["meta"]["gpu_state"] = f"{run.sampler.source}: means over each graph timing"
        for shape in todo:
            measure(run, shape)
            run.save()
    log(f"done in {time.monotonic() - began:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
