"""Context-parallel attention: napkin's generated kernel as the block attention of PyTorch's ring.

    torchrun --nproc-per-node 4 examples/context_parallel.py --seqlen 131072 --heads 8 --head-dim 128 --causal
    torchrun --nproc-per-node 4 examples/context_parallel.py --diagram causal_gqa --heads 64 --kv-heads 8 \
        --seqlen 131072 --sizes 1,2,4 --peer

Each rank holds a slice of the sequence: under a causal mask torch's round-robin load balance (rank r
holds chunks r and 2W - 1 - r of 2W, so that every rank has as many keys before its queries), else one
contiguous chunk. PyTorch's ring (torch.distributed.tensor.experimental._attention's
_templated_ring_attention, the engine behind torch's context_parallel) passes K and V around the ranks
and merges each step's output by its log-sum-exp, with napkin's merge kernel in place of torch's merger
(analyzer.measure.ring_merge: one pass a step; --merge torch keeps torch's eager fp32 passes); each step's
block is napkin's generated attention
called with return_lse=True: the diagram's module for a step the ring calls causal (a rank's own keys),
the module of the diagram without its mask (analyzer.diagram.unmasked) for the others. --diagram names
an attention diagram, causal or without a mask (default: attention, or causal_attention with --causal);
--kv-heads fewer than --heads needs a grouped-query one (gqa, causal_gqa).

A length the ranks do not divide is padded at the end: under a causal mask a padded key is seen only by
padded queries, which are dropped; without one, the block of the last rank's keys is called with its
real keys only (torch calls the op once a step, in order, step i with the keys of rank r - i).

--sizes runs the ring on the first N ranks for each N listed, in one launch (the kernels compile once).
--check gathers the output and the log-sum-exp on rank 0 and holds them against float64 (the output's
largest error over its largest value, the log-sum-exp's largest absolute error). --peer also times the
same ring with SDPA's cuDNN backend as the block and torch's merger (torch's own context parallelism),
and with napkin's merge, --engine with a block that computes nothing (the engine's own rotation, copies
and merges). Timings are CUDA
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


def napkin_blocks(diagram: str, gpu: str | None, backend: str | None, folder: Path) -> tuple:
    """napkin's attention for the blocks of the ring: the generated files of `diagram` and of its unmasked
    form (the same file where it has no mask) for `gpu` (the local device's profile where None), and their
    wrappers, (unmasked, as drawn)."""
    from analyzer.codegen import generate
    from analyzer.diagram.unmasked import unmasked
    from analyzer.measure.device import local_device, profile_for
    from analyzer.measure.run import wrapper_of
    from analyzer.model.analysis import load
    gpu = gpu or profile_for(local_device())
    d = load(diagram)
    plain = unmasked(d)
    generated = (generate(plain, gpu, backend=backend),
                 *((generate(d, gpu, backend=backend),) if plain is not d else ()))
    wrappers = tuple(wrapper_of(g, folder) for g in generated)
    return (generated[0], generated[-1]), (wrappers[0], wrappers[-1])


class BlockOp:
    """The ring's op: (q, k, v, is_causal) -> (out, lse), napkin's kernel for the step's mask. torch calls it
    once a step, in order, step i with the keys rank (r - i) mod W holds; without a mask, the keys of the
    last rank past `valid` are padding and are cut off. `reset` before each ring."""

    def __init__(self, plain, causal, rank: int, world: int, valid: int):
        self.plain, self.causal, self.rank, self.world, self.valid = plain, causal, rank, world, valid
        self.step = 0

    def reset(self) -> BlockOp:
        self.step = 0
        return self

    def __call__(self, q, k, v, is_causal=False, **_):
        source = (self.rank - self.step) % self.world
        self.step += 1
        if not is_causal and source == self.world - 1 and self.valid < k.shape[2]:
            k, v = k[:, :, :self.valid], v[:, :, :self.valid]
        return (self.causal if is_causal else self.plain)(q, k, v, causal=bool(is_causal), return_lse=True)


class NullOp:
    """A block that computes nothing (zeros of the output's and the log-sum-exp's shapes): the ring timed
    with it is the engine's own cost, its rotation, copies and merges."""

    def reset(self) -> NullOp:
        return self

    def __call__(self, q, k, v, is_causal=False, **_):
        import torch
        out = torch.zeros(*q.shape[:-1], v.shape[-1], dtype=q.dtype, device=q.device)
        return out, torch.zeros(q.shape[:-1], dtype=torch.float32, device=q.device)


class SdpaOp:
    """The ring's op with SDPA's cuDNN backend (what torch's context parallelism runs): (out, lse). cuDNN
    takes fewer key/value heads than query heads as they are (grouped-query attention)."""

    def reset(self) -> SdpaOp:
        return self

    def __call__(self, q, k, v, is_causal=False, **_):
        import torch
        out, lse, *_ = torch.ops.aten._scaled_dot_product_cudnn_attention(q, k, v, None, True, 0.0, bool(is_causal),
                                                                          False)
        return out, lse


def shard(x, rank: int, world: int, causal: bool):
    """This rank's slice of the sequence (dim 2): chunks r and 2W - 1 - r of 2W under a causal mask."""
    import torch
    if not causal:
        return x.chunk(world, dim=2)[rank].contiguous()
    chunks = x.chunk(2 * world, dim=2)
    return torch.cat([chunks[rank], chunks[2 * world - 1 - rank]], dim=2).contiguous()


def padding(length: int, world: int, causal: bool) -> tuple[int, int]:
    """The sequence padded to what the ranks divide (2W chunks under a causal mask, else W), and the last
    rank's real keys (without a mask; under one, the padding is the end of rank 0's second chunk and every
    rank's keys are real to the queries that see them)."""
    unit = 2 * world if causal else world
    padded = -(-length // unit) * unit
    return padded, padded // world if causal else length - (padded - padded // world)


def unshard(parts: list, causal: bool):
    """The whole sequence from every rank's slice (shard's inverse)."""
    import torch
    if not causal:
        return torch.cat(parts, dim=2)
    world = len(parts)
    halves = [p.chunk(2, dim=2) for p in parts]
    return torch.cat([halves[r][0] for r in range(world)] + [halves[r][1] for r in reversed(range(world))], dim=2)


def ring(group, op, q, k, v, causal: bool, rotation: str = "allgather", merge: str = "napkin"):
    """torch's ring attention of this rank's slices: (out, lse). `rotation`: how K and V move, one
    all-gather (torch's default) or a permutation per step (alltoall). `merge`: how each step's block is
    folded into the running output, napkin's one kernel a step (analyzer.measure.ring_merge) or torch's
    own merger (its eager fp32 passes)."""
    import contextlib

    import torch.distributed as dist
    from torch.distributed.tensor.experimental import _attention as cp
    cp._cp_options.enable_load_balance = causal       # the round-robin layout shard() makes
    cp._cp_options.rotate_method = {"allgather": cp._RotateMethod.ALL_GATHER,
                                    "alltoall": cp._RotateMethod.ALL_TO_ALL}[rotation]
    engine = cp._templated_ring_attention
    first = next(iter(inspect.signature(engine).parameters))
    if first != "group":
        raise RuntimeError(f"this torch's ring takes {first!r} first, not a process group: torch 2.9 or later "
                           "is needed")
    if merge == "napkin":
        from analyzer.measure.ring_merge import merged_by
        merging = merged_by(engine, steps=dist.get_world_size(group))
    else:
        merging = contextlib.nullcontext()
    with merging:
        out, lse, *_ = engine(group, 2, op, q, k, v, is_causal=causal)
    return out, lse.squeeze(-1) if lse.dim() == 4 else lse


def parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--diagram", default=None, help="an attention diagram, causal or without a mask (default: "
                                                    "attention, causal_attention with --causal)")
    ap.add_argument("--seqlen", type=int, default=8192)
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--heads", type=int, default=8, help="query heads")
    ap.add_argument("--kv-heads", type=int, default=None, help="key/value heads (default: --heads)")
    ap.add_argument("--head-dim", type=int, default=128)
    ap.add_argument("--causal", action="store_true", help="causal_attention by default (a diagram says itself)")
    ap.add_argument("--dtype", default="bf16", choices=("fp16", "bf16"))
    ap.add_argument("--gpu", default=None, help="the profile napkin generates for (default: the device's)")
    ap.add_argument("--backend", default=None, help="hopper or triton (default: napkin kernel's choice)")
    ap.add_argument("--sizes", default=None, help="GPU counts to run on, e.g. 1,2,4 (default: every rank)")
    ap.add_argument("--rotation", default="allgather", choices=("allgather", "alltoall"),
                    help="how K and V move: one all-gather (torch's default) or a permutation per step")
    ap.add_argument("--merge", default="napkin", choices=("napkin", "torch"),
                    help="how each step's block joins the running output: napkin's kernel or torch's merger")
    ap.add_argument("--check", action="store_true", help="hold the result against float64 on rank 0")
    ap.add_argument("--peer", action="store_true", help="also time the ring with SDPA's cuDNN backend (with "
                                                        "torch's merger, and with --merge's where that differs)")
    ap.add_argument("--engine", action="store_true", help="also time the ring with blocks that compute nothing")
    ap.add_argument("--repeats", type=int, default=10)
    ap.add_argument("--json", type=Path, default=None, help="write rank 0's result here")
    return ap


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    import torch
    import torch.distributed as dist

    cuda = torch.cuda.is_available()
    if cuda:
        torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", 0)))
    dist.init_process_group("nccl" if cuda else "gloo")
    results = rings(args)
    if dist.get_rank() == 0:
        out = results[0] if len(results) == 1 else {"runs": results, "ok": all(r.get("ok", True) for r in results)}
        print(json.dumps(out))
        if args.json:
            args.json.write_text(json.dumps(out, indent=1) + "\n")
    dist.destroy_process_group()
    return 0 if all(r.get("ok", True) for r in results) else 1


def rings(args: argparse.Namespace) -> list[dict]:
    """The ring for each GPU count of --sizes, in the process group already made: rank 0's results
    (another rank's own, for the counts it takes part in)."""
    import torch
    import torch.distributed as dist

    from analyzer.diagram.interface import interface
    from analyzer.model.analysis import load
    diagram = args.diagram or ("causal_attention" if args.causal else "attention")
    roles = interface(load(diagram))
    causal = bool(getattr(roles, "causal", False))
    if args.causal and not causal:
        raise SystemExit(f"--causal: {diagram} has no causal mask")
    kv_heads = args.kv_heads or args.heads
    if kv_heads != args.heads and not getattr(roles, "group", None):
        raise SystemExit(f"--kv-heads {kv_heads}: {diagram} has no query group axis (use gqa or causal_gqa)")
    rank, world = dist.get_rank(), dist.get_world_size()
    sizes = [int(n) for n in args.sizes.split(",")] if args.sizes else [world]
    if any(not 1 <= n <= world for n in sizes):
        raise SystemExit(f"--sizes {args.sizes}: each between 1 and the {world} ranks launched")
    device = "cuda" if torch.cuda.is_available() else "cpu"
    element = {"fp16": torch.float16, "bf16": torch.bfloat16}[args.dtype]
    results = []
    with tempfile.TemporaryDirectory(prefix=f"napkin-cp-{rank}-") as tmp:
        generated, wrappers = napkin_blocks(diagram, args.gpu, args.backend, Path(tmp))
        for n in sizes:
            group = dist.new_group(list(range(n)))          # every rank takes part in making it
            if rank < n:
                results.append(_run(args, group, rank, n, causal, kv_heads, element, device, generated, wrappers,
                                    diagram))
            dist.barrier()
    return results


def _run(args, group, rank: int, world: int, causal: bool, kv_heads: int, element, device: str, generated,
         wrappers, diagram: str) -> dict:
    """The ring on the `world` ranks of `group`: timed with napkin's blocks (and the peer's), checked."""
    import torch
    import torch.distributed as dist

    cuda = device == "cuda"
    padded, valid = padding(args.seqlen, world, causal)
    gen = torch.Generator(device=device).manual_seed(0)          # the same tensors on every rank
    q = torch.randn(args.batch, args.heads, padded, args.head_dim, generator=gen, device=device, dtype=element)
    k, v = (torch.randn(args.batch, kv_heads, padded, args.head_dim, generator=gen, device=device, dtype=element)
            for _ in range(2))
    local = [shard(x, rank, world, causal) for x in (q, k, v)]
    # name: (block, merge); the peer is torch's own context parallelism, cuDNN's blocks and torch's merger
    ops = {"napkin": (BlockOp(*wrappers, rank, world, valid), args.merge)}
    if args.peer and cuda:
        ops["cudnn"] = (SdpaOp(), "torch")
        if args.merge != "torch":
            ops["cudnn_merged"] = (SdpaOp(), args.merge)
    if args.engine and cuda:
        ops["none"] = (NullOp(), args.merge)
    result: dict = {"diagram": diagram, "world": world, "seqlen": args.seqlen, "padded": padded, "batch": args.batch,
                    "heads": args.heads, "kv_heads": kv_heads, "head_dim": args.head_dim, "causal": causal,
                    "dtype": args.dtype, "rotation": args.rotation, "merge": args.merge,
                    "device": torch.cuda.get_device_name() if cuda else "cpu"}
    for name, (op, merge) in ops.items():
        out, lse = ring(group, op.reset(), *local, causal, args.rotation, merge)
        if cuda:
            times = []
            for _ in range(args.repeats):
                begin, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                dist.barrier(group)
                begin.record()
                ring(group, op.reset(), *local, causal, args.rotation, merge)
                end.record()
                torch.cuda.synchronize()
                times.append(begin.elapsed_time(end) * 1e-3)
            median = torch.tensor(sorted(times)[len(times) // 2], device=device)
            dist.all_reduce(median, op=dist.ReduceOp.MAX, group=group)        # the slowest rank's
            result[f"{name}_s"] = float(median)
        if args.check and name == "napkin":
            outs = [torch.empty_like(out) for _ in range(world)]
            lses = [torch.empty_like(lse) for _ in range(world)]
            dist.all_gather(outs, out.contiguous(), group=group)
            dist.all_gather(lses, lse.contiguous(), group=group)
            if rank == 0:
                result.update(_check(generated[causal], unshard(outs, causal), unshard(lses, causal), q, k, v,
                                     args.seqlen))
    return result


def _check(g, out, lse, q, k, v, length: int) -> dict:
    """The gathered output and log-sum-exp against float64 at the unpadded length (every query of it):
    analyzer.measure.reference's evaluation of the diagram `g` realises, and the tolerance napkin measure
    holds a kernel to (sqrt(L) u of the element type; the log-sum-exp's, that times its largest size)."""
    import torch

    from analyzer.measure.reference import reference, reference_lse, tolerance
    r = g.roles
    xs = [x[:, :, :length] for x in (q, k, v)]
    name = lambda axis: g.diagram.size(axis).name     # noqa: E731 - the size symbol of an axis
    sizes = {name(r.seq_k): length, name(r.seq_q): length, "batch": q.shape[0], name(r.head_dim): q.shape[3]}
    sizes[name(r.heads) if r.heads else "heads"] = k.shape[1]
    if r.group:
        sizes[name(r.group)] = q.shape[1] // k.shape[1]
    want, want_lse = reference(torch, g, xs, sizes), reference_lse(torch, g, xs, sizes)
    out, lse = out[:, :, :length].double(), lse[:, :, :length].double()
    out_error = float((out - want).abs().max() / want.abs().max())
    lse_error = float((lse - want_lse).abs().max())
    allowed = tolerance("bf16" if q.dtype == torch.bfloat16 else "fp16", length)
    return {"out_error": out_error, "lse_error": lse_error, "allowed": allowed,
            "ok": out_error <= allowed and lse_error <= allowed * max(1.0, float(want_lse.abs().max()))}


if __name__ == "__main__":
    raise SystemExit(main())
