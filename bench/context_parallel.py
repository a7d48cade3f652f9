"""Context-parallel attention on the GPUs of one host: napkin's kernel inside PyTorch's ring against the
same ring with cuDNN's blocks, and against the model's prediction per GPU count, in one launch.

    torchrun --standalone --nproc-per-node 4 bench/context_parallel.py [--gpu h200] [--sizes 1,2,4]
        [--seqlen 131072] [--quick]

Every rank runs examples/context_parallel.py's rings (imported from the file) on the first N ranks for
each N of --sizes:
- checks against float64 (analyzer.measure.reference) on rank 0, before anything is timed: causal
  attention at 8192 tokens, attention at 8191 (a length the ranks do not divide, without a mask),
  causal grouped-query attention at 4096 (16 query heads on 4 key/value heads) and grouped-query
  attention at 4099, 8 heads, hdim 128, bf16;
- timings (CUDA events around the whole ring, the median of 10, the slowest rank's): the 128k-token
  causal prefill of 8 heads, hdim 128, bf16, and a grouped-query one of 64 query heads on 8 key/value
  heads (causal_gqa), each with napkin's blocks and napkin's merge kernel between them
  (analyzer.measure.ring_merge), with cuDNN's blocks and torch's merger (SDPA's cuDNN op, what torch's
  own context parallelism runs), and with cuDNN's blocks and napkin's merge; the 8-head prefill also with
  napkin's blocks and torch's merger (what each of the two changes is worth);
- the link: NCCL's all-gather of one rank's keys and values across the N GPUs, timed alone;
- the engine alone: the same rings with blocks that compute nothing (its rotation, copies and merges);
- the model: napkin analyze --devices's prediction for each case and N (analyzer.config.context_parallel,
  --gpu's profile), beside the measurement.
Rank 0 writes context_parallel_<gpu>.json and .md into --out ($OUT if set, else bench/results).
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.common import command, environment, log, nccl_rank, save_results, slowest_median  # noqa: E402

EXAMPLE = Path(__file__).resolve().parent.parent / "examples" / "context_parallel.py"
CHECKS = (["--diagram", "causal_attention", "--seqlen", "8192"],
          ["--diagram", "attention", "--seqlen", "8191"],
          ["--diagram", "causal_gqa", "--seqlen", "4096", "--heads", "16", "--kv-heads", "4"],
          ["--diagram", "gqa", "--seqlen", "4099", "--heads", "16", "--kv-heads", "4"])
# diagram, query heads, key/value heads, rotation, merge
TIMED = (("causal_attention", 8, 8, "allgather", "napkin"), ("causal_attention", 8, 8, "allgather", "torch"),
         ("causal_gqa", 64, 8, "allgather", "napkin"), ("causal_attention", 8, 8, "alltoall", "napkin"))


def example():
    spec = importlib.util.spec_from_file_location("context_parallel_example", EXAMPLE)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def link_seconds(torch, dist, n: int, nbytes: int) -> float | None:
    """NCCL's all-gather of `nbytes` per rank over the first n ranks, alone: the median of 10 (None on the
    ranks past n)."""
    group = dist.new_group(list(range(n)))
    out = None
    if dist.get_rank() < n:
        send = torch.empty(nbytes // 2, dtype=torch.bfloat16, device="cuda")
        recv = torch.empty(n * send.numel(), dtype=torch.bfloat16, device="cuda")
        out = slowest_median(torch, dist, group, lambda: dist.all_gather_into_tensor(recv, send, group=group), 10)
    dist.barrier()
    return out


def predicted(gpu: str, diagram: str, heads: int, kv_heads: int, seqlen: int, most: int,
              rotation: str = "allgather", merge: str = "napkin") -> dict[int, dict]:
    """napkin analyze --devices's prediction per GPU count (the weave's heads: the query heads for a
    diagram without head axes; a grouped-query diagram's h and g)."""
    from analyzer.config.context_parallel import context_parallel
    sets = {"q": seqlen, "batch": 1}
    sets.update({"h": kv_heads, "g": heads // kv_heads} if "gqa" in diagram else {"heads": heads})
    found = context_parallel(diagram, gpu, most, sets=sets, rotation=rotation, merge=merge)
    return {c.devices: {"time_s": c.time_s, "kernel_s": c.kernel_s, "engine_s": c.engine_s, "link_s": c.link_s,
                        "waits_s": c.waits_s, "bound": c.bound, "efficiency": found.efficiency(c),
                        # the slowest rank's steps: its block, and the engine's work and wait after it
                        "steps_ms": [(s.kernel_s * 1e3, (s.engine_s + s.waits_s) * 1e3) for s in c.steps]}
            for c in found.counts}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--gpu", default="h200", help="the profile napkin generates for and predicts with")
    ap.add_argument("--sizes", default="1,2,4")
    ap.add_argument("--seqlen", type=int, default=131072)
    ap.add_argument("--quick", action="store_true", help="the 8-head prefill alone timed (both merges)")
    ap.add_argument("--out", type=Path,
                    default=Path(os.environ.get("OUT", Path(__file__).resolve().parent / "results")))
    args = ap.parse_args(argv)
    import torch
    import torch.distributed as dist

    rank = nccl_rank(torch, dist)
    ex = example()
    sizes = [int(n) for n in args.sizes.split(",")]
    doc: dict = {"command": "torchrun --standalone --nproc-per-node " + str(dist.get_world_size()) + " "
                 + command("context_parallel.py", argv).removeprefix("python "),
                 "environment": environment(), "gpu_profile": args.gpu, "checks": [], "timed": [], "link": []}
    checks_ok = True
    for case in CHECKS:
        runs = ex.rings(ex.parser().parse_args([*case, "--gpu", args.gpu, "--check", "--repeats", "1",
                                                "--sizes", ",".join(map(str, sizes))]))
        if rank == 0:
            for r in runs:
                log(f"check {r['diagram']} {r['seqlen']} on {r['world']}: out {r['out_error']:.2e} "
                    f"lse {r['lse_error']:.2e} {'ok' if r['ok'] else 'FAILED'}")
                checks_ok &= r["ok"]
                doc["checks"].append(r)
    flag = torch.tensor(int(checks_ok), device="cuda")
    dist.broadcast(flag, 0)
    if not int(flag):
        if rank == 0:
            save_results(args.out, f"context_parallel_{args.gpu}", doc, markdown(doc))
        dist.destroy_process_group()
        return 1
    for diagram, heads, kv_heads, rotation, merge in TIMED[:2] if args.quick else TIMED:
        runs = ex.rings(ex.parser().parse_args([
            "--diagram", diagram, "--seqlen", str(args.seqlen), "--heads", str(heads), "--kv-heads", str(kv_heads),
            "--gpu", args.gpu, "--peer", "--engine", "--rotation", rotation, "--merge", merge,
            "--sizes", ",".join(map(str, sizes))]))
        if rank == 0:
            model = predicted(args.gpu, diagram, heads, kv_heads, args.seqlen, max(sizes), rotation, merge)
            for r in runs:
                r["model"] = model.get(r["world"])
                m = r["model"]
                # the ring with blocks that take no time: the copies, the merges and the whole link
                r["model_engine_s"] = m["engine_s"] + m["link_s"]
                log(f"{diagram} {heads}/{kv_heads} ({rotation}, {merge}'s merge) on {r['world']}: napkin "
                    f"{r['napkin_s'] * 1e3:.2f} ms, cuDNN {r['cudnn_s'] * 1e3:.2f} ms, model "
                    f"{r['model']['time_s'] * 1e3:.2f} ms")
                doc["timed"].append(r)
            save_results(args.out, f"context_parallel_{args.gpu}", doc, markdown(doc))
    kv_bytes = 2 * 8 * (args.seqlen // max(sizes)) * 128 * 2      # one rank's K and V of the 8-head prefill
    for n in sizes[1:] if sizes[0] == 1 else sizes:
        s = link_seconds(torch, dist, n, kv_bytes)
        if rank == 0:
            doc["link"].append({"gpus": n, "bytes_per_rank": kv_bytes, "seconds": s,
                                "received_bytes_per_s": (n - 1) * kv_bytes / s})
    if rank == 0:
        save_results(args.out, f"context_parallel_{args.gpu}", doc, markdown(doc))
        print(markdown(doc))
    dist.destroy_process_group()
    return 0


def _ms(seconds: float | None) -> str:
    return "-" if seconds is None else f"{seconds * 1e3:.2f} ms"


def markdown(doc: dict) -> str:
    env = doc["environment"]
    lines = [f"# Context-parallel attention on {env['gpu']} x {max([r['world'] for r in doc['checks']] or [1])}",
             "", f"`{doc['command']}`", "",
             f"torch {env['torch']}, triton {env['triton']}; napkin's kernels generated for {doc['gpu_profile']}.",
             "", "## Checks against float64 (rank 0 gathers every rank's output and log-sum-exp)", "",
             "| diagram | tokens | heads (q/kv) | GPUs | padded | output error | lse error | allowed | ok |",
             "|---|---|---|---|---|---|---|---|---|"]
    for r in doc["checks"]:
        lines.append(f"| {r['diagram']} | {r['seqlen']} | {r['heads']}/{r['kv_heads']} | {r['world']} | "
                     f"{r['padded']} | {r['out_error']:.2e} | {r['lse_error']:.2e} | {r['allowed']:.2e} | "
                     f"{'yes' if r['ok'] else 'NO'} |")
    lines += ["", "## The ring timed (median of 10, the slowest rank's), beside the model", "",
              "napkin: napkin's blocks with the merge named; cuDNN: torch's own context parallelism (cuDNN's blocks, "
              "torch's merger); cuDNN, napkin's merge: cuDNN's blocks with napkin's merge kernel.", "",
              "| diagram | heads (q/kv) | rotation | merge | GPUs | napkin | cuDNN | cuDNN / napkin | cuDNN, napkin's "
              "merge | napkin efficiency | model | measured / model | model bound | engine alone | model: engine + "
              "link |", "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    case = lambda r: (r["diagram"], r["heads"], r.get("rotation"), r.get("merge", "torch"))   # noqa: E731
    one = {case(r): r["napkin_s"] for r in doc["timed"] if r["world"] == 1}
    for r in doc["timed"]:
        base = one.get(case(r))
        eff = f"{base / (r['world'] * r['napkin_s']):.1%}" if base else "-"
        m = r.get("model") or {}
        lines.append(f"| {r['diagram']} | {r['heads']}/{r['kv_heads']} | {r.get('rotation', '-')} | "
                     f"{r.get('merge', 'torch')} | {r['world']} | {r['napkin_s'] * 1e3:.2f} ms | "
                     f"{r['cudnn_s'] * 1e3:.2f} ms | "
                     f"{r['cudnn_s'] / r['napkin_s']:.2f}x | {_ms(r.get('cudnn_merged_s'))} | {eff} | "
                     f"{m.get('time_s', 0) * 1e3:.2f} ms | {r['napkin_s'] / m['time_s']:.3f} | {m.get('bound')} | "
                     f"{_ms(r.get('none_s'))} | {_ms(r.get('model_engine_s'))} |"
                     if m else f"| {r['diagram']} | {r['world']} | {r['napkin_s'] * 1e3:.2f} ms | - |")
    if doc["link"]:
        lines += ["", "## The link alone (NCCL all-gather of one rank's keys and values)", "",
                  "| GPUs | bytes per rank | time | received per GPU per second |", "|---|---|---|---|"]
        for x in doc["link"]:
            lines.append(f"| {x['gpus']} | {x['bytes_per_rank'] / 1e6:.0f} MB | {x['seconds'] * 1e3:.3f} ms | "
                         f"{x['received_bytes_per_s'] / 1e9:.0f} GB/s |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    raise SystemExit(main())
