"""The ring's merge kernel (analyzer.measure.ring_merge) under Triton's interpreter: for any sequence of
steps torch's round-robin ring makes (each updating every row or the second half of them), the merged
output and log-sum-exp equal float64's merge of the same blocks, and torch's own merger's result; rows
that see no key, cuDNN's log-sum-exp layout, and the replacement of torch's merger inside its ring."""

from __future__ import annotations

import math

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

torch = pytest.importorskip("torch")
pytest.importorskip("triton")

from analyzer.measure.ring_merge import RingMerger, merge, merged_by  # noqa: E402


def _blocks(seed: int, shape: tuple[int, int, int, int], partials: list[bool], dtype, empty_rows: int = 0):
    """A ring's blocks: the first over every row, then one a step (half the rows where partial); the
    first `empty_rows` rows of each block see no key (output 0, log-sum-exp -inf)."""
    gen = torch.Generator().manual_seed(seed)
    batch, heads, rows, d = shape
    out = []
    for partial in [False, *partials]:
        n = rows - -(-rows // 2) if partial else rows
        o = torch.randn(batch, heads, n, d, generator=gen).to(dtype)
        lse = 4 * torch.randn(batch, heads, n, generator=gen)
        o[:, :, :empty_rows], lse[:, :, :empty_rows] = 0, -math.inf
        out.append((o, lse, partial))
    return out


def _float64(blocks, rows: int):
    """The merge in float64: (output, log-sum-exp) over every block's keys."""
    (o, lse, _), *rest = blocks
    out, total = o.double().clone(), lse.double().clone()
    for o, lse, partial in rest:
        part = slice(-(-rows // 2), rows) if partial else slice(0, rows)
        new = torch.logaddexp(total[:, :, part], lse.double())
        seen = new > -math.inf           # a row that has seen no key stays 0
        a = torch.where(seen, torch.exp(total[:, :, part] - new), 0.0)
        c = torch.where(seen, torch.exp(lse.double() - new), 0.0)
        out[:, :, part] = a[..., None] * out[:, :, part] + c[..., None] * o.double()
        total[:, :, part] = new
    return out, total


def _merged(blocks, steps: int | None = None):
    m = RingMerger(len(blocks) if steps is None else steps)
    for o, lse, partial in blocks:
        m.step(o.clone(), lse.clone(), partial)
    return m.results()


# The merged output is rounded once to the block's type: within half its spacing of float64's (the unit
# roundoff u of the largest value), plus fp32's rounding of the weights. Triton's interpreter converts
# fp32 to bf16 by truncation, not to nearest (the GPU rounds), so bf16 is held to a whole spacing, 2u.
ALLOWED = {torch.float16: 2.0 ** -11 + 1e-6, torch.bfloat16: 2 * 2.0 ** -8 + 1e-6}


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(partials=st.lists(st.booleans(), max_size=4), rows=st.integers(1, 9), d=st.sampled_from([1, 24, 64]),
       dtype=st.sampled_from([torch.float16, torch.bfloat16]), seed=st.integers(0, 2 ** 16))
def test_the_merge_is_attention_over_every_block_seen(partials, rows, d, dtype, seed):
    blocks = _blocks(seed, (2, 3, rows, d), partials, dtype)
    out, lse = _merged(blocks)
    want, want_lse = _float64(blocks, rows)
    assert out.dtype == dtype and out.shape == want.shape and lse.dtype == torch.float32
    assert float((out.double() - want).abs().max()) <= ALLOWED[dtype] * float(want.abs().max())
    assert float((lse.double() - want_lse).abs().max()) <= 4e-6 * max(1.0, float(want_lse.abs().max()))


@pytest.mark.parametrize("partials", [[True, True, True], [False, True], [False, False, False]])
def test_the_merge_agrees_with_torchs_merger(partials):
    """The rank patterns of a 4-rank round-robin ring (rank 0: every later step half the rows; rank 1;
    rank 3: none) give torch's result, each within its own rounding of float64's."""
    from torch.distributed.tensor.experimental._context_parallel._attention import _SDPAMerger
    blocks = _blocks(7, (1, 2, 8, 16), partials, torch.float16)
    theirs = _SDPAMerger(True, seq_dim=2)
    for o, lse, partial in blocks:
        theirs.step(o, lse, partial)
    their_out, their_lse = theirs.results()
    out, lse = _merged(blocks)
    scale = float(their_out.abs().max())
    assert float((out.float() - their_out.float()).abs().max()) <= 2 * ALLOWED[torch.float16] * scale
    assert float((lse - their_lse.squeeze(-1)).abs().max()) <= 1e-5 * float(their_lse.abs().max())


def test_rows_that_see_no_key_stay_zero_until_a_block_brings_one():
    """Rows 0-1 see no key in any block (0 and -inf throughout); row 2 sees none in the first block only."""
    blocks = _blocks(3, (1, 1, 6, 8), [False, False], torch.float16, empty_rows=2)
    blocks[0][0][:, :, 2], blocks[0][1][:, :, 2] = 0, -math.inf
    out, lse = _merged(blocks)
    want, want_lse = _float64(blocks, 6)
    assert torch.equal(out[:, :, :2], torch.zeros_like(out[:, :, :2])) and bool((lse[:, :, :2] == -math.inf).all())
    assert not out.isnan().any() and float((out.double() - want).abs().max()) <= ALLOWED[torch.float16] * 4
    assert torch.allclose(lse[:, :, 2:].double(), want_lse[:, :, 2:], atol=1e-5)


def test_fewer_steps_than_expected_still_give_the_whole_result():
    """A ring that skips steps (torch's causal ring without load balance) merges fewer blocks than its ranks:
    the rows left in fp32 are converted by results()."""
    blocks = _blocks(5, (1, 2, 8, 16), [False, True], torch.float16)
    out, _ = _merged(blocks, steps=4)
    want, _ = _float64(blocks, 8)
    assert float((out.double() - want).abs().max()) <= ALLOWED[torch.float16] * float(want.abs().max())


def test_cudnns_log_sum_exp_layout_comes_back_as_it_came():
    """cuDNN's log-sum-exp has a last dimension of 1, as torch's merger returns it."""
    blocks = [(o, lse[..., None], p) for o, lse, p in _blocks(1, (1, 2, 4, 8), [False], torch.float16)]
    out, lse = _merged(blocks)
    assert lse.shape == (1, 2, 4, 1) and out.shape == (1, 2, 4, 8)


def test_a_merge_of_mismatched_shapes_is_refused():
    o = torch.zeros(1, 1, 4, 8)
    with pytest.raises(ValueError, match="block_lse is torch.float32 \\(1, 1, 3\\)"):
        merge(o, torch.zeros(1, 1, 4), o.clone(), torch.zeros(1, 1, 3), o)
    with pytest.raises(ValueError, match="the sequence is dimension 1"):
        RingMerger(2, seq_dim=1)


def test_inside_merged_by_torchs_ring_builds_this_merger_and_its_own_after():
    from torch.distributed.tensor.experimental._context_parallel import _attention as cp
    ring = cp._templated_ring_attention
    with merged_by(ring, steps=3):
        made = ring.__globals__["_SDPAMerger"](True, seq_dim=2)
        assert isinstance(made, RingMerger) and made.steps == 3
    assert ring.__globals__["_SDPAMerger"] is cp._SDPAMerger and cp._SDPAMerger.__name__ == "_SDPAMerger"
    with pytest.raises(RuntimeError, match="no _SDPAMerger"):
        with merged_by(lambda: None, steps=2):
            pass


@pytest.mark.parametrize("ranks", [2, 3, 4])
def test_the_models_bytes_are_what_the_kernel_moves_at_every_rank(ranks, monkeypatch):
    """napkin analyze --devices counts napkin's merge (analyzer.config.context_parallel.kernel_merge_bytes)
    step by step as every rank of a round-robin causal ring makes it (step 0 the rank's own block, step
    i <= rank all its rows, i > rank the second half): the bytes each merge kernel reads and writes, and
    the buffer's rows converted at the end, counted from the tensors the merger hands the kernel."""
    from analyzer.config import context_parallel as cp
    from analyzer.measure import ring_merge
    rows, d, q = 6, 8, 2
    moved = []
    real = ring_merge.merge

    def counted(out, lse, block, block_lse, dst):
        moved[-1] += sum(x.numel() * x.element_size() for x in (out, block, dst)) + 3 * lse.numel() * 4
        real(out, lse, block, block_lse, dst)
    monkeypatch.setattr(ring_merge, "merge", counted)
    halves = [(-(-rows // 2) * d, -(-rows // 2)), ((rows - -(-rows // 2)) * d, rows - -(-rows // 2))]
    for rank in range(ranks):
        partials = [i > rank for i in range(1, ranks)]
        blocks = _blocks(rank, (1, 1, rows, d), partials, torch.float16)
        m = RingMerger(ranks)
        moved.clear()
        model, buffered = 0.0, [False, False]
        for i, (o, lse, partial) in enumerate(blocks):
            moved.append(0)
            m.step(o, lse, partial)
            if i:
                updated = [1] if partial else [0, 1]
                model += cp.kernel_merge_bytes(halves, q, updated, buffered, last=i == ranks - 1)
                for h in updated:
                    buffered[h] = i < ranks - 1
        assert sum(moved) == model
        assert m.in_buffer == buffered           # what results() converts, and the model's kernel_result_s
