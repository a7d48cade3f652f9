"""Context-parallel attention: napkin's generated kernel as the block attention of PyTorch's ring.

    torchrun --nproc-per-node 4 examples/context_parallel.py --seqlen 131072 --heads 8 --head-dim 128 --causal

Each rank holds a slice of the sequence: under a causal mask torch's round-robin load balance (rank r
holds chunks r and 2W - 1 - r of 2W, so that every rank has as many keys before its queries), else one
contiguous chunk. PyTorch's ring (torch.distributed.tensor.experimental._attention's
_templated_ring_attention, the engine behind torch's context_parallel) passes K and V around the ranks
and merges each step's output by its log-sum-exp; each step's block is napkin's generated attention
called with return_lse=True: the causal diagram's module for a step the ring calls causal (a rank's own
keys), the plain diagram's for the others. A length the ranks do not divide is padded at the end under
a causal mask (a padded key is seen only by padded queries, which are dropped); without one the keys
would be seen by every query, so it is refused.

--check gathers the output and the log-sum-exp on rank 0 and holds them against float64 (the output's
largest error over its largest value, the log-sum-exp's largest absolute error). --peer also times the
same ring with SDPA's cuDNN backend as the block (torch's own context parallelism). Timings are CUDA
events around the whole ring (median of --repeats), on every rank, the slowest rank's reported.
Without CUDA it runs on the CPU with gloo and the portable module under Triton's interpreter (the
tests: tests/kernels/test_context_parallel.py).
"""

from __future__ import annotations

import argparse
import inspect
import json
import os
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))


def napkin_blocks(gpu: str | None, backend: str | None, folder: Path) -> tuple:
    """napkin's attention for a block of the ring: the generated files of diagrams/attention.yaml and
    diagrams/causal_attention.yaml for `gpu` (the local device's profile where None), and their wrappers."""
    from analyzer.codegen import generate
    from analyzer.measure.device import local_device, profile_for
    from analyzer.measure.run import wrapper_of
    gpu = gpu or profile_for(local_device())
    generated = tuple(generate(d, gpu, backend=backend) for d in ("attention", "causal_attention"))
    return generated, tuple(wrapper_of(g, folder) for g in generated)


def block_op(plain, causal):
    """The ring's op: (q, k, v, is_causal) -> (out, lse), napkin's kernel for the step's mask."""
    def op(q, k, v, is_causal=False, **_):
        return (causal if is_causal else plain)(q, k, v, causal=bool(is_causal), return_lse=True)
    return op


def sdpa_op(q, k, v, is_causal=False, **_):
    """The ring's op with SDPA's cuDNN backend (what torch's context parallelism runs): (out, lse)."""
    import torch
    out, lse, *_ = torch.ops.aten._scaled_dot_product_cudnn_attention(q, k, v, None, True, 0.0, is_causal, False)
    return out, lse


def shard(x, rank: int, world: int, causal: bool):
    """This rank's slice of the sequence (dim 2): chunks r and 2W - 1 - r of 2W under a causal mask."""
    import torch
    if not causal:
        return x.chunk(world, dim=2)[rank].contiguous()
    chunks = x.chunk(2 * world, dim=2)
    return torch.cat([chunks[rank], chunks[2 * world - 1 - rank]], dim=2).contiguous()


def unshard(parts: list, causal: bool):
    """The whole sequence from every rank's slice (shard's inverse)."""
    import torch
    if not causal:
        return torch.cat(parts, dim=2)
    world = len(parts)
    halves = [p.chunk(2, dim=2) for p in parts]
    return torch.cat([halves[r][0] for r in range(world)] + [halves[r][1] for r in reversed(range(world))], dim=2)


def ring(group, op, q, k, v, causal: bool):
    """torch's ring attention of this rank's slices: (out, lse)."""
    from torch.distributed.tensor.experimental import _attention as cp
    cp._cp_options.enable_load_balance = causal       # the round-robin layout shard() makes
    first = next(iter(inspect.signature(cp._templated_ring_attention).parameters))
    if first != "group":
        raise RuntimeError(f"this torch's ring takes {first!r} first, not a process group: torch 2.9 or later "
                           "is needed")
    out, lse, *_ = cp._templated_ring_attention(group, 2, op, q, k, v, is_causal=causal)
    return out, lse.squeeze(-1) if lse.dim() == 4 else lse


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--seqlen", type=int, default=8192)
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--heads", type=int, default=8)
    ap.add_argument("--head-dim", type=int, default=128)
    ap.add_argument("--causal", action="store_true")
    ap.add_argument("--dtype", default="bf16", choices=("fp16", "bf16"))
    ap.add_argument("--gpu", default=None, help="the profile napkin generates for (default: the device's)")
    ap.add_argument("--backend", default=None, help="hopper or triton (default: napkin kernel's choice)")
    ap.add_argument("--check", action="store_true", help="hold the result against float64 on rank 0")
    ap.add_argument("--peer", action="store_true", help="also time the ring with SDPA's cuDNN backend")
    ap.add_argument("--repeats", type=int, default=10)
    ap.add_argument("--json", type=Path, default=None, help="write rank 0's result here")
    args = ap.parse_args(argv)
    import torch
    import torch.distributed as dist

    cuda = torch.cuda.is_available()
    rank, world = int(os.environ.get("RANK", 0)), int(os.environ.get("WORLD_SIZE", 1))
    if cuda:
        torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", 0)))
    dist.init_process_group("nccl" if cuda else "gloo")
    group = dist.group.WORLD
    device = "cuda" if cuda else "cpu"
    unit = 2 * world if args.causal else world
    padded = -(-args.seqlen // unit) * unit
    if padded != args.seqlen and not args.causal:
        raise SystemExit(f"--seqlen {args.seqlen}: without a causal mask the ranks must divide the length "
                         f"({world} of them), since a padded key would be seen by every query")
    element = {"fp16": torch.float16, "bf16": torch.bfloat16}[args.dtype]
    gen = torch.Generator(device=device).manual_seed(0)          # the same tensors on every rank
    q, k, v = (torch.randn(args.batch, args.heads, padded, args.head_dim, generator=gen, device=device,
                           dtype=element) for _ in range(3))
    local = [shard(x, rank, world, args.causal) for x in (q, k, v)]
    with tempfile.TemporaryDirectory(prefix=f"napkin-cp-{rank}-") as tmp:
        generated, wrappers = napkin_blocks(args.gpu, args.backend, Path(tmp))
        ops = {"napkin": block_op(*wrappers)}
        if args.peer and cuda:
            ops["cudnn"] = sdpa_op
        result: dict = {"world": world, "seqlen": args.seqlen, "padded": padded, "batch": args.batch,
                        "heads": args.heads, "head_dim": args.head_dim, "causal": args.causal, "dtype": args.dtype,
                        "device": torch.cuda.get_device_name() if cuda else "cpu"}
        for name, op in ops.items():
            out, lse = ring(group, op, *local, args.causal)
            if cuda:
                times = []
                for _ in range(args.repeats):
                    begin, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                    dist.barrier()
                    begin.record()
                    ring(group, op, *local, args.causal)
                    end.record()
                    torch.cuda.synchronize()
                    times.append(begin.elapsed_time(end) * 1e-3)
                median = torch.tensor(sorted(times)[len(times) // 2], device=device)
                dist.all_reduce(median, op=dist.ReduceOp.MAX)        # the slowest rank's
                result[f"{name}_s"] = float(median)
            if args.check and name == "napkin":
                outs = [torch.empty_like(out) for _ in range(world)]
                lses = [torch.empty_like(lse) for _ in range(world)]
                dist.all_gather(outs, out.contiguous())
                dist.all_gather(lses, lse.contiguous())
                if rank == 0:
                    result.update(_check(generated[args.causal], unshard(outs, args.causal),
                                         unshard(lses, args.causal), q, k, v, args.seqlen))
    if rank == 0:
        print(json.dumps(result))
        if args.json:
            args.json.write_text(json.dumps(result, indent=1) + "\n")
    dist.destroy_process_group()
    return 0 if result.get("ok", True) else 1


def _check(g, out, lse, q, k, v, length: int) -> dict:
    """The gathered output and log-sum-exp against float64 at the unpadded length (every query of it):
    analyzer.measure.reference's evaluation of the diagram `g` realises, and the tolerance napkin measure
    holds a kernel to (sqrt(L) u of the element type; the log-sum-exp's, that times its largest size)."""
    import torch

    from analyzer.measure.reference import reference, reference_lse, tolerance
    r = g.roles
    xs = [x[:, :, :length] for x in (q, k, v)]
    sizes = {g.diagram.size(r.seq_k).name: length, g.diagram.size(r.seq_q).name: length, "batch": q.shape[0],
             "heads": q.shape[1], g.diagram.size(r.head_dim).name: q.shape[3]}
    want, want_lse = reference(torch, g, xs, sizes), reference_lse(torch, g, xs, sizes)
    out, lse = out[:, :, :length].double(), lse[:, :, :length].double()
    out_error = float((out - want).abs().max() / want.abs().max())
    lse_error = float((lse - want_lse).abs().max())
    allowed = tolerance("bf16" if q.dtype == torch.bfloat16 else "fp16", length)
    return {"out_error": out_error, "lse_error": lse_error, "allowed": allowed,
            "ok": out_error <= allowed and lse_error <= allowed * max(1.0, float(want_lse.abs().max()))}


if __name__ == "__main__":
    raise SystemExit(main())
