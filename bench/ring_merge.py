"""The merge of torch's ring on one GPU: what each rank spends folding its blocks' outputs together, as
torch runs it and fused into one kernel a step, as the fastest context-parallel stacks run it.

torch's `_SDPAMerger` (torch.distributed.tensor.experimental, convert_to_f32) merges a step's block into
the running output in eager elementwise passes: the block's output converted to fp32, then out - block,
sigmoid(lse_b - lse) times that, out less that, five passes over the log-sum-exp, and, for a step that
updates half the rows, the halves joined again by torch.cat. ring-flash-attention (zhuzilin) computes the
same sigmoid form in one `@torch.jit.script` function, `_update_out_and_lse`, and other stacks in one
fused kernel; here the same math is one `torch.compile`d function a step, writing the updated rows in
place (no join). Both are timed for the steps of the slowest rank of torch's round-robin causal ring
(rank 0: step 0 its own causal block, every later step half its rows) at the 128k-token, 8-head, hdim-128
bf16 prefill's shapes on 2 and 4 GPUs, with blocks precomputed, by CUDA events (median of 20),
beside the model's count of the eager passes (analyzer.config.context_parallel). Both merges are checked
against each other (the fused one is the same math, in fp32).

    python bench/ring_merge.py [--seqlen 131072] [--heads 8] [--gpu h200]

Writes ring_merge_<gpu>.json and .md into --out ($OUT if set, else bench/results).
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.common import command, environment, log, save_results  # noqa: E402

REPEATS = 20


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--seqlen", type=int, default=131072)
    ap.add_argument("--heads", type=int, default=8)
    ap.add_argument("--head-dim", type=int, default=128)
    ap.add_argument("--gpu", default="h200", help="the profile whose model's merge is shown beside")
    ap.add_argument("--out", type=Path,
                    default=Path(os.environ.get("OUT", Path(__file__).resolve().parent / "results")))
    args = ap.parse_args(argv)
    import torch
    import torch.nn.functional as F
    from torch.distributed.tensor.experimental._context_parallel._attention import _SDPAMerger

    from analyzer.config.context_parallel import context_parallel

    @torch.compile(fullgraph=True, dynamic=False)
    def fused(out, lse, block_out, block_lse):
        """One step of the merge, in place: out and lse (fp32) take the block's output and log-sum-exp."""
        b = block_out.float()
        out.copy_(out - torch.sigmoid(block_lse - lse) * (out - b))
        lse.copy_(lse - F.logsigmoid(lse - block_lse))

    def eager_ring(blocks):
        merger = _SDPAMerger(True, seq_dim=2)
        for block_out, block_lse, partial in blocks:
            merger.step(block_out, block_lse, partial)
        return merger.results()

    def fused_ring(blocks):
        (first_out, first_lse, _), *rest = blocks
        out, lse = first_out.float(), first_lse.clone()
        for block_out, block_lse, partial in rest:
            rows = slice(out.shape[2] // 2, None) if partial else slice(None)
            fused(out[:, :, rows], lse[:, :, rows], block_out, block_lse)
        return out.to(first_out.dtype), lse

    def timed(fn, blocks) -> float:
        times = []
        for i in range(REPEATS + 3):
            begin, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            torch.cuda.synchronize()
            begin.record()
            fn(blocks)
            end.record()
            torch.cuda.synchronize()
            if i >= 3:
                times.append(begin.elapsed_time(end) * 1e-3)
        return sorted(times)[REPEATS // 2]

    gen = torch.Generator(device="cuda").manual_seed(0)
    rows = []
    for n in (2, 4):
        local = args.seqlen // n
        shape = (1, args.heads, local, args.head_dim)
        blocks = [(torch.randn(*shape, generator=gen, device="cuda", dtype=torch.bfloat16),
                   torch.randn(*shape[:3], 1, generator=gen, device="cuda"), False)]
        for _ in range(1, n):       # rank 0 under torch's round-robin layout: every later step half its rows
            half = (1, args.heads, local // 2, args.head_dim)
            blocks.append((torch.randn(*half, generator=gen, device="cuda", dtype=torch.bfloat16),
                           torch.randn(*half[:3], 1, generator=gen, device="cuda"), True))
        want, want_lse = eager_ring(blocks)
        got, got_lse = fused_ring(blocks)
        error = float((got.float() - want.float()).abs().max() / want.float().abs().max())
        lse_error = float((got_lse - want_lse).abs().max())
        eager_s, fused_s = timed(eager_ring, blocks), timed(fused_ring, blocks)
        model = context_parallel("causal_attention", args.gpu, n, sets={"q": args.seqlen, "heads": args.heads})
        engine = model.counts[-1]
        merge_model_s = sum(s.engine_s for s in engine.steps)
        rows.append({"gpus": n, "eager_s": eager_s, "fused_s": fused_s, "saved_s": eager_s - fused_s,
                     "model_engine_s": merge_model_s, "model_time_s": engine.time_s, "error": error,
                     "lse_error": lse_error})
        log(f"{n} GPUs: eager {eager_s * 1e3:.3f} ms, fused {fused_s * 1e3:.3f} ms, model's merges and copies "
            f"{merge_model_s * 1e3:.3f} ms; fused against eager: {error:.1e}, lse {lse_error:.1e}")
    doc = {"command": command("ring_merge.py", argv), "environment": environment(), "seqlen": args.seqlen,
           "heads": args.heads, "head_dim": args.head_dim, "rows": rows}
    save_results(args.out, f"ring_merge_{args.gpu}", doc, markdown(doc))
    print(markdown(doc))
    return 0


def markdown(doc: dict) -> str:
    lines = [f"# torch's ring merge, eager and fused, on {doc['environment']['gpu']}", "", f"`{doc['command']}`", "",
             f"The slowest rank's merges of a {doc['seqlen']}-token, {doc['heads']}-head, hdim-{doc['head_dim']} bf16 "
             "causal prefill (median of 20, CUDA events).", "",
             "| GPUs | torch's eager merge | fused, one kernel a step | saved | the model's merges and copies | "
             "fused vs eager: output, lse |", "|---|---|---|---|---|---|"]
    for r in doc["rows"]:
        lines.append(f"| {r['gpus']} | {r['eager_s'] * 1e3:.3f} ms | {r['fused_s'] * 1e3:.3f} ms | "
                     f"{r['saved_s'] * 1e3:.3f} ms | {r['model_engine_s'] * 1e3:.3f} ms | "
                     f"{r['error']:.1e}, {r['lse_error']:.1e} |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    raise SystemExit(main())
