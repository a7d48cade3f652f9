"""Context parallelism step by step: each rank's blocks and the engine's work between them, timed inside
PyTorch's ring, beside the model's steps.

    torchrun --standalone --nproc-per-node 4 bench/ring_steps.py [--gpu h200] [--diagram causal_gqa
        --heads 64 --kv-heads 8] [--seqlen 131072] [--merge napkin|torch] [--peer]

Where bench/context_parallel.py times a whole ring, this one records CUDA events around every call of the
block op (examples/context_parallel.py's ring, napkin's blocks, or cuDNN's with --peer) on every rank:
a step's block is the time inside the call, the engine's part the time from one call's end to the next
(the merge of the block before, the copy of the keys and values, a wait for the link), the last gap
from the last call's end to the ring's. Each is the median over --repeats rings. The model's steps are
those of its slowest rank (analyzer.config.context_parallel). Rank 0 writes ring_steps_<gpu>.json and
.md into --out ($OUT if set, else bench/results).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.common import command, environment, log, nccl_rank, save_results  # noqa: E402
from bench.context_parallel import example, predicted  # noqa: E402


class Stamped:
    """A block op with a CUDA event before and after each call (`marks`, reset with the op)."""

    def __init__(self, op, torch):
        self.op, self.torch, self.marks = op, torch, []

    def reset(self):
        self.op.reset()
        self.marks = []
        return self

    def __call__(self, *args, **kwargs):
        begin, end = (self.torch.cuda.Event(enable_timing=True) for _ in range(2))
        begin.record()
        out = self.op(*args, **kwargs)
        end.record()
        self.marks.append((begin, end))
        return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--gpu", default="h200")
    ap.add_argument("--diagram", default="causal_attention")
    ap.add_argument("--heads", type=int, default=8)
    ap.add_argument("--kv-heads", type=int, default=None)
    ap.add_argument("--seqlen", type=int, default=131072)
    ap.add_argument("--merge", default="napkin", choices=("napkin", "torch"))
    ap.add_argument("--peer", action="store_true", help="cuDNN's blocks instead of napkin's")
    ap.add_argument("--repeats", type=int, default=10)
    ap.add_argument("--out", type=Path,
                    default=Path(os.environ.get("OUT", Path(__file__).resolve().parent / "results")))
    args = ap.parse_args(argv)
    import tempfile

    import torch
    import torch.distributed as dist

    rank = nccl_rank(torch, dist)
    world = dist.get_world_size()
    ex = example()
    kv_heads = args.kv_heads or args.heads
    run = ex.parser().parse_args(["--diagram", args.diagram, "--heads", str(args.heads), "--kv-heads", str(kv_heads),
                                  "--seqlen", str(args.seqlen), "--gpu", args.gpu])
    group = dist.group.WORLD
    causal = "causal" in args.diagram
    padded, valid = ex.padding(args.seqlen, world, causal)
    gen = torch.Generator(device="cuda").manual_seed(0)
    q = torch.randn(1, args.heads, padded, 128, generator=gen, device="cuda", dtype=torch.bfloat16)
    k, v = (torch.randn(1, kv_heads, padded, 128, generator=gen, device="cuda", dtype=torch.bfloat16) for _ in range(2))
    local = [ex.shard(x, rank, world, causal) for x in (q, k, v)]
    with tempfile.TemporaryDirectory(prefix=f"napkin-steps-{rank}-") as tmp:
        _, wrappers = ex.napkin_blocks(args.diagram, args.gpu, None, Path(tmp))
        block = ex.SdpaOp() if args.peer else ex.BlockOp(*wrappers, rank, world, valid)
        op = Stamped(block, torch)
        blocks, gaps, totals = [], [], []
        for i in range(args.repeats + 1):
            dist.barrier()
            begin, end = (torch.cuda.Event(enable_timing=True) for _ in range(2))
            begin.record()
            ex.ring(group, op.reset(), *local, causal, run.rotation, args.merge)
            end.record()
            torch.cuda.synchronize()
            if i == 0:
                continue                                        # the first ring warms up
            marks = op.marks
            blocks.append([b.elapsed_time(e) for b, e in marks])
            gaps.append([marks[j][1].elapsed_time(marks[j + 1][0]) for j in range(len(marks) - 1)]
                        + [marks[-1][1].elapsed_time(end)])
            totals.append(begin.elapsed_time(end))
    mine = {"rank": rank, "total_ms": statistics.median(totals),
            "block_ms": [statistics.median(s) for s in zip(*blocks)],
            "engine_ms": [statistics.median(s) for s in zip(*gaps)]}
    everyone = [None] * world
    dist.all_gather_object(everyone, mine)
    if rank == 0:
        model = predicted(args.gpu, args.diagram, args.heads, kv_heads, args.seqlen, world, run.rotation,
                          args.merge)[world]
        doc = {"command": "torchrun --standalone --nproc-per-node " + str(world) + " "
               + command("ring_steps.py", argv).removeprefix("python "), "environment": environment(),
               "diagram": args.diagram, "heads": args.heads, "kv_heads": kv_heads, "seqlen": args.seqlen,
               "merge": args.merge, "blocks": "cudnn" if args.peer else "napkin", "ranks": everyone,
               "model": model}
        save_results(args.out, f"ring_steps_{args.gpu}", doc, markdown(doc))
        print(markdown(doc))
        log(f"slowest rank {max(r['total_ms'] for r in everyone):.2f} ms, model {model['time_s'] * 1e3:.2f} ms")
    dist.destroy_process_group()
    return 0


def markdown(doc: dict) -> str:
    m = doc["model"]
    lines = [f"# The ring step by step on {doc['environment']['gpu']} x {len(doc['ranks'])}", "",
             f"`{doc['command']}`", "",
             f"{doc['diagram']}, {doc['heads']}/{doc['kv_heads']} heads, {doc['seqlen']} tokens, bf16; "
             f"{doc['blocks']}'s blocks, {doc['merge']}'s merge. Each cell: the block, then the engine's work up "
             "to the next block (ms, median).", "",
             "| rank | total | " + " | ".join(f"step {i}" for i in range(len(doc["ranks"][0]["block_ms"]))) + " |",
             "|---|---|" + "---|" * len(doc["ranks"][0]["block_ms"])]
    for r in doc["ranks"]:
        lines.append(f"| {r['rank']} | {r['total_ms']:.2f} | " + " | ".join(
            f"{b:.2f} + {e:.2f}" for b, e in zip(r["block_ms"], r["engine_ms"])) + " |")
    lines.append("| model's slowest rank | " + f"{m['time_s'] * 1e3:.2f} | " + " | ".join(
        f"{b:.2f} + {e:.2f}" for b, e in m["steps_ms"]) + " |")
    lines += ["", f"The model's slowest rank: {m['time_s'] * 1e3:.2f} ms, its blocks {m['kernel_s'] * 1e3:.2f} ms, "
              f"merges and copies {m['engine_s'] * 1e3:.2f} ms, the link exposed {m['waits_s'] * 1e3:.2f} ms."]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    raise SystemExit(main())
