"""The link between the GPUs of one host, as context parallelism uses it: NCCL's all-gather and a ring
permutation (each GPU sends to the next, torch's all-to-all rotation) timed alone at sizes from 4 KB to
512 MB a GPU, and a line t = latency + bytes / bandwidth fitted to each (scipy's linregress on the
sizes from 1 MB, numpy's least squares; the smallest size gives the latency).

    torchrun --standalone --nproc-per-node 4 bench/link_probe.py [--sizes 2,4]

Each collective runs on the first N ranks for each N of --sizes; CUDA events around it, the median of 20
after 3 warm-up calls, the slowest rank's. "Received" is what one GPU receives: (N - 1) x the size for the
all-gather, the size for the permutation. Rank 0 writes link_probe_<gpu>.json and .md into --out ($OUT if
set, else bench/results).
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.common import command, environment, nccl_rank, save_results, slowest_median  # noqa: E402

SIZES = [1 << s for s in range(12, 30, 2)]        # 4 KB to 256 MB a GPU, by factors of 4
REPEATS, WARMUP = 20, 3


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--sizes", default="2,4", help="GPU counts")
    ap.add_argument("--out", type=Path,
                    default=Path(os.environ.get("OUT", Path(__file__).resolve().parent / "results")))
    args = ap.parse_args(argv)
    import numpy as np
    import torch
    import torch.distributed as dist

    rank = nccl_rank(torch, dist)
    rows, fits = [], []
    for n in [int(x) for x in args.sizes.split(",")]:
        group = dist.new_group(list(range(n)))
        if rank < n:
            for size in SIZES:
                send = torch.ones(size // 2, dtype=torch.bfloat16, device="cuda")
                gathered = torch.empty(n * send.numel(), dtype=torch.bfloat16, device="cuda")
                permuted = torch.empty_like(send)
                nxt, prev = (rank + 1) % n, (rank - 1) % n

                def permute():
                    ops = [dist.P2POp(dist.isend, send, nxt, group), dist.P2POp(dist.irecv, permuted, prev, group)]
                    for w in dist.batch_isend_irecv(ops):
                        w.wait()

                def gather():
                    dist.all_gather_into_tensor(gathered, send, group=group)
                t_gather = slowest_median(torch, dist, group, gather, REPEATS, WARMUP)
                t_permute = slowest_median(torch, dist, group, permute, REPEATS, WARMUP)
                rows.append({"gpus": n, "bytes": size, "allgather_s": t_gather, "permute_s": t_permute,
                             "allgather_received_bytes": (n - 1) * size, "permute_received_bytes": size})
            for kind in ("allgather", "permute"):
                mine = [r for r in rows if r["gpus"] == n]
                big = [r for r in mine if r["bytes"] >= 1 << 20]
                x, y = (np.array([r[key] for r in big]) for key in (f"{kind}_received_bytes", f"{kind}_s"))
                slope, intercept = np.polyfit(x, y, 1)
                fits.append({"gpus": n, "collective": kind, "latency_s": min(r[f"{kind}_s"] for r in mine),
                             "intercept_s": float(intercept), "bandwidth_bytes_per_s": float(1 / slope),
                             "r": float(np.corrcoef(x, y)[0, 1])})
        dist.barrier()
    if rank == 0:
        doc = {"command": "torchrun --standalone --nproc-per-node " + str(dist.get_world_size()) + " "
               + command("link_probe.py", argv).removeprefix("python "), "environment": environment(),
               "rows": rows, "fits": fits}
        name = f"link_probe_{environment()['gpu'].split()[-1].lower()}"
        save_results(args.out, name, doc, markdown(doc))
        print(markdown(doc))
    dist.destroy_process_group()
    return 0


def markdown(doc: dict) -> str:
    lines = [f"# The link between {doc['environment']['gpu']}s", "", f"`{doc['command']}`", "",
             "| GPUs | bytes a GPU | all-gather | received/s | permutation | received/s |", "|---|---|---|---|---|---|"]
    for r in doc["rows"]:
        lines.append(f"| {r['gpus']} | {r['bytes']} | {r['allgather_s'] * 1e6:.1f} us | "
                     f"{r['allgather_received_bytes'] / r['allgather_s'] / 1e9:.0f} GB/s | "
                     f"{r['permute_s'] * 1e6:.1f} us | {r['permute_received_bytes'] / r['permute_s'] / 1e9:.0f} GB/s |")
    lines += ["", "t = latency + received / bandwidth, fitted from 1 MB a GPU (the smallest time as the latency):", "",
              "| GPUs | collective | latency (smallest) | intercept | bandwidth | r |", "|---|---|---|---|---|---|"]
    for f in doc["fits"]:
        lines.append(f"| {f['gpus']} | {f['collective']} | {f['latency_s'] * 1e6:.1f} us | "
                     f"{f['intercept_s'] * 1e6:.1f} us | {f['bandwidth_bytes_per_s'] / 1e9:.0f} GB/s | {f['r']:.4f} |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    raise SystemExit(main())
