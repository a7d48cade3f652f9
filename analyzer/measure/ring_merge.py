"""The merge of a context-parallel ring, one Triton kernel a step.

A ring step attends a rank's queries to one block of keys and returns the block's output o_b and its
log-sum-exp l_b; the running result (o, l) takes them in as

    l' = log(e^l + e^l_b),    o' = e^(l - l') o + e^(l_b - l') o_b,

attention over every key seen so far (docs/scale.md). torch's `_SDPAMerger` runs this as eager
elementwise passes in fp32 (each a round trip through HBM: the block's output converted, three passes
over the output's values, five over the log-sum-exp's, the halves joined again after a step that updates
half the rows, the result converted back). `RingMerger` takes its place in torch's ring and reads the
running rows and the block's once a step and writes the running rows once, as the fastest
context-parallel stacks do (ring-flash-attention's `_update_out_and_lse`, in one fused function):

- the first block's output is the running output as it comes, in its own type, nothing copied;
- a merge that is not the ring's last writes the rows it updates in fp32, to a buffer of the output's
  shape allocated at the first merge, reading each row from where it lies (the first block's output or
  that buffer);
- the last merge (`steps` of them expected) writes its rows straight into the first block's output, in
  its type; rows an earlier merge left in the buffer are converted there by `results()`.

Under torch's round-robin causal layout a step updates either every row or the second half of them
(`partial`), so the rows are kept as two halves, each where its latest value lies.

torch and triton are imported at the top: this module is imported only where a ring runs (the example,
the bench scripts, the tests under Triton's interpreter).
"""

from __future__ import annotations

import contextlib
import inspect
from collections.abc import Callable, Iterator
from unittest import mock

import torch
import triton
import triton.language as tl

VALUES_PER_PROGRAM = 4096      # a program's tile of rows x value dim: 32 rows of 128 values, 16 KB of fp32


@triton.jit
def _merge_kernel(out, lse, block, block_lse, dst, rows, heads, value_dim,
                  out_b, out_h, out_s, block_b, block_h, block_s, dst_b, dst_h, dst_s,
                  lse_b, lse_h, block_lse_b, block_lse_h,
                  ROWS: tl.constexpr, D: tl.constexpr):
    """Rows [program 0's tile] of batch-head program 1: dst = the merged output, lse updated in place."""
    r = tl.program_id(0) * ROWS + tl.arange(0, ROWS)
    b = tl.program_id(1) // heads
    h = tl.program_id(1) % heads
    d = tl.arange(0, D)
    live = r < rows
    tile = live[:, None] & (d[None, :] < value_dim)
    running = tl.load(lse + b * lse_b + h * lse_h + r, mask=live, other=0.0)
    incoming = tl.load(block_lse + b * block_lse_b + h * block_lse_h + r, mask=live, other=0.0)
    # the weights e^(l - l') and e^(l_b - l'), taken from the larger of the two so that nothing overflows;
    # a row that has seen no key yet (l = l_b = -inf) keeps weight 0 for both and l' = -inf
    top = tl.maximum(running, incoming)
    top = tl.where(top == float("-inf"), 0.0, top)
    a = tl.exp(running - top)
    c = tl.exp(incoming - top)
    total = a + c
    scale = tl.where(total > 0.0, 1.0 / tl.where(total > 0.0, total, 1.0), 0.0)
    o = tl.load(out + b * out_b + h * out_h + r[:, None] * out_s + d[None, :], mask=tile, other=0.0)
    o_b = tl.load(block + b * block_b + h * block_h + r[:, None] * block_s + d[None, :], mask=tile, other=0.0)
    merged = (a * scale)[:, None] * o.to(tl.float32) + (c * scale)[:, None] * o_b.to(tl.float32)
    tl.store(dst + b * dst_b + h * dst_h + r[:, None] * dst_s + d[None, :], merged.to(dst.dtype.element_ty),
             mask=tile)
    tl.store(lse + b * lse_b + h * lse_h + r, top + tl.log(total), mask=live)


def merge(out: torch.Tensor, lse: torch.Tensor, block: torch.Tensor, block_lse: torch.Tensor,
          dst: torch.Tensor) -> None:
    """One merge of (batch, heads, rows, value dim) outputs with their (batch, heads, rows) fp32
    log-sum-exps: `dst` takes the merged output (it may be `out`), `lse` the merged log-sum-exp, in place.
    Each tensor's last dimension is contiguous (views of rows of a larger one are fine)."""
    batch, heads, rows, value_dim = block.shape
    for name, x in (("out", out), ("block", block), ("dst", dst)):
        if x.shape != block.shape or x.stride(3) != 1:
            raise ValueError(f"merge: {name} is {tuple(x.shape)} with strides {x.stride()}, not {tuple(block.shape)} "
                             "with a contiguous last dimension")
    for name, x in (("lse", lse), ("block_lse", block_lse)):
        if x.shape != block.shape[:3] or x.stride(2) != 1 or x.dtype != torch.float32:
            raise ValueError(f"merge: {name} is {x.dtype} {tuple(x.shape)}, not float32 {tuple(block.shape[:3])} "
                             "with contiguous rows")
    d = triton.next_power_of_2(value_dim)
    tile_rows = max(1, VALUES_PER_PROGRAM // d)
    grid = (triton.cdiv(rows, tile_rows), batch * heads)
    _merge_kernel[grid](out, lse, block, block_lse, dst, rows, heads, value_dim,
                        out.stride(0), out.stride(1), out.stride(2), block.stride(0), block.stride(1),
                        block.stride(2), dst.stride(0), dst.stride(1), dst.stride(2),
                        lse.stride(0), lse.stride(1), block_lse.stride(0), block_lse.stride(1),
                        ROWS=tile_rows, D=d)


class RingMerger:
    """torch's `_SDPAMerger` (step, results) with one merge kernel a step; `steps`: the merges the ring
    will make (its number of ranks), so that the last writes the result in the output's own type.
    `seq_dim` must be 2: (batch, heads, sequence, value dim), the layout torch's ring passes."""

    HALVES = 2          # torch's round-robin cycle: a partial step updates the second of two halves

    def __init__(self, steps: int, seq_dim: int = 2):
        if seq_dim != 2:
            raise ValueError(f"RingMerger: the sequence is dimension {seq_dim}, not 2 (batch, heads, sequence, d)")
        self.steps, self.done = steps, 0
        self.out: torch.Tensor | None = None          # the first block's output: the result's storage
        self.lse: torch.Tensor | None = None          # the running log-sum-exp, (batch, heads, rows), fp32
        self.buffer: torch.Tensor | None = None       # rows merged before the last step, fp32
        self.in_buffer = [False] * self.HALVES        # where each half's latest value lies
        self.lse_kept_dim = False                     # the blocks' log-sum-exps came with a last dim of 1

    def _halves(self, rows: int) -> list[slice]:
        cut = -(-rows // self.HALVES)                 # torch.chunk's: the first half takes the odd row
        return [slice(0, cut), slice(cut, rows)]

    def step(self, out: torch.Tensor, lse: torch.Tensor, partial: bool) -> None:
        if lse.dim() == out.dim():                    # cuDNN keeps a last dimension of 1
            lse, self.lse_kept_dim = lse.squeeze(-1), True
        lse = lse.float().contiguous()
        self.done += 1
        if self.out is None:
            self.out, self.lse = out, lse.clone()
            return
        rows = self.out.shape[2]
        halves = self._halves(rows)
        updated = [1] if partial else [0, 1]
        last = self.done == self.steps
        if not last and self.buffer is None:
            self.buffer = torch.empty(self.out.shape, dtype=torch.float32, device=out.device)
        start = 0
        for i in updated:
            part = halves[i]
            n = part.stop - part.start
            source = self.buffer if self.in_buffer[i] else self.out
            target = self.out if last else self.buffer
            merge(source[:, :, part], self.lse[:, :, part], out[:, :, start:start + n], lse[:, :, start:start + n],
                  target[:, :, part])
            self.in_buffer[i] = not last
            start += n

    def results(self) -> tuple[torch.Tensor, torch.Tensor]:
        if self.out is None or self.lse is None:
            raise RuntimeError("RingMerger: no step was merged")
        for part, buffered in zip(self._halves(self.out.shape[2]), self.in_buffer):
            if buffered:
                self.out[:, :, part].copy_(self.buffer[:, :, part])
        self.in_buffer = [False] * self.HALVES
        return self.out, self.lse.unsqueeze(-1) if self.lse_kept_dim else self.lse


@contextlib.contextmanager
def merged_by(ring: Callable, steps: int) -> Iterator[None]:
    """Inside, torch's ring function `ring` (its `_templated_ring_attention`) merges its blocks with
    `RingMerger` instead of its own `_SDPAMerger`: the name is replaced in the function's module for the
    duration, the engine's loop, rotation and load balance untouched."""
    names = inspect.getclosurevars(ring).globals
    if "_SDPAMerger" not in names:
        raise RuntimeError("this torch's ring has no _SDPAMerger to replace (torch 2.9 to 2.13 have one)")
    with mock.patch.dict(ring.__globals__, {"_SDPAMerger": lambda *_, seq_dim=2, **__: RingMerger(steps, seq_dim)}):
        yield
