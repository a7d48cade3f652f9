"""The Gluon text of the warp-specialised attention kernel for Hopper (sm_90a).

The kernel realises the configuration analyzer.config.hopper derives (Sections 5.5-5.7 and 6): one
producer warp issuing TMA loads into a ring of SMEM stages synchronised by mbarriers, N consumer
warpgroups running wgmma with the accumulators in registers, and the overlap the configuration names.
Its identifiers are the generator's own (reserved in the module's scope: analyzer.codegen.hopper.module),
so nothing a diagram names reaches this text; the diagram decides what the kernel computes through the
plan the module checks (causal or not, grouped heads, the scale), its constexprs, and the chain of
scores between the two contractions (analyzer.config.scores), which `score_function` renders from the
diagram's ops: the only text here that differs from one attention diagram to another.
"""

from __future__ import annotations

from string import Template

from analyzer.codegen.escape import py_comment, py_doc
from analyzer.config.scores import MASKS, SOFTMAX, Scores

# The module-level names this text defines; the module's scope never hands them out
HELPERS = ("_attn_tile", "_attn_producer", "_attn_load", "_attn_scores", "_attn_probabilities", "_attn_qk",
           "_attn_step", "_attn_consumer", "_attn_tanh")

KERNEL = Template('''\
@gluon.jit
def _attn_tile(t, blocks_q, heads, kv_group, size_x, BLOCK_Q: gl.constexpr, BLOCK_X: gl.constexpr,
               CAUSAL: gl.constexpr, LEFT: gl.constexpr):
    """Tile t of the persistent schedule: which (batch, head) and which query rows, and the chunks of keys
    it streams, first .. chunks - 1, of which those from `whole` to `unmasked` need no mask. The tiles of
    one head are consecutive, so the SMs share its K and V in L2; causal tiles run longest first (block
    skipping makes them unequal). Under a sliding window (LEFT >= 0: a row sees the LEFT keys before its
    own) the tile starts at the chunk of its first row's first key, and its rows see whole chunks from
    `whole` on."""
    bh = t // blocks_q
    blk = t % blocks_q
    if CAUSAL:
        blk = blocks_q - 1 - blk
    idx_b = bh // heads
    idx_h = bh % heads
    row0 = blk * BLOCK_Q
    chunks = gl.cdiv(size_x, BLOCK_X)
    unmasked = size_x // BLOCK_X
    if CAUSAL:
        chunks = gl.minimum(chunks, gl.cdiv(row0 + BLOCK_Q, BLOCK_X))     # block skipping
        unmasked = gl.minimum(unmasked, (row0 + 1) // BLOCK_X)
    if LEFT >= 0:
        first = gl.maximum(row0 - LEFT, 0) // BLOCK_X                   # block skipping on the left
        whole = gl.minimum(gl.maximum(first, gl.cdiv(gl.maximum(row0 + BLOCK_Q - 1 - LEFT, 0), BLOCK_X)), unmasked)
    else:
        first = 0
        whole = 0
    return idx_b, idx_h, idx_h // kv_group, row0, first, whole, unmasked, chunks


@gluon.jit
def _attn_producer(q_desc, k_desc, v_desc, qh_desc, kh_desc, b_desc, q_smem, k_smem, v_smem, qh_smem, kh_smem,
                   b_smem, q_ready, q_empty, k_ready, k_empty, v_ready, v_empty, tiles, blocks_q, heads, kv_group,
                   size_x, bias_b_rows, bias_h_rows, ROWS: gl.constexpr, BLOCK_X: gl.constexpr,
                   STAGES: gl.constexpr, GROUPS: gl.constexpr, CAUSAL: gl.constexpr, LEFT: gl.constexpr,
                   SPLIT: gl.constexpr, BIAS: gl.constexpr):
    """The producer: one warp with few registers. Per tile it loads the query tiles, then every chunk of
    K and V into a ring of STAGES SMEM buffers: wait until every consumer has released a buffer (its
    `empty` mbarrier), then let the TMA engine fill it and signal its `ready` mbarrier with the bytes.
    The next tile's first chunks load while the consumers finish this one; its queries wait until they
    have stored their output (which passes through the query buffers). A head dim that is no power of two
    (SPLIT: 192 = 128 + 64) loads in two column blocks, q and qh, k and kh, under one mbarrier. With BIAS
    each chunk's V comes with each consumer's tile of the bias (its rows at the chunk's keys), under V's
    mbarrier: a consumer reads its bias before the chunk's softmax and releases it with V after PV."""
    it = 0          # chunks loaded so far, over all tiles: the ring's position
    done = 0        # tiles loaded so far
    for t in range(gl.program_id(0), tiles, gl.num_programs(0)):
        idx_b, idx_h, idx_hk, row0, first, whole, unmasked, chunks = _attn_tile(
            t, blocks_q, heads, kv_group, size_x, GROUPS * ROWS, BLOCK_X, CAUSAL, LEFT)
        n = chunks - first
        ahead = gl.minimum(n, STAGES)
        for j in range(ahead):
            _attn_load(k_desc, v_desc, kh_desc, b_desc, k_smem, v_smem, kh_smem, b_smem, k_ready, k_empty, v_ready,
                       v_empty, it + j, idx_b, idx_hk, (first + j) * BLOCK_X,
                       idx_b * bias_b_rows + idx_h * bias_h_rows + row0, ROWS, STAGES, GROUPS, SPLIT, BIAS)
        mbarrier.wait(q_empty, (done & 1) ^ 1)        # a fresh mbarrier passes phase 1: the first tile goes
        if SPLIT:
            mbarrier.expect(q_ready, GROUPS * (q_desc.block_type.nbytes + qh_desc.block_type.nbytes))
        else:
            mbarrier.expect(q_ready, GROUPS * q_desc.block_type.nbytes)
        for w in gl.static_range(GROUPS):
            tma.async_copy_global_to_shared(q_desc, [idx_b, idx_h, row0 + w * ROWS, 0], q_ready, q_smem.index(w))
            if SPLIT:
                tma.async_copy_global_to_shared(qh_desc, [idx_b, idx_h, row0 + w * ROWS, q_desc.block_type.shape[3]],
                                                q_ready, qh_smem.index(w))
        for j in range(ahead, n):
            _attn_load(k_desc, v_desc, kh_desc, b_desc, k_smem, v_smem, kh_smem, b_smem, k_ready, k_empty, v_ready,
                       v_empty, it + j, idx_b, idx_hk, (first + j) * BLOCK_X,
                       idx_b * bias_b_rows + idx_h * bias_h_rows + row0, ROWS, STAGES, GROUPS, SPLIT, BIAS)
        it += n
        done += 1


@gluon.jit
def _attn_load(k_desc, v_desc, kh_desc, b_desc, k_smem, v_smem, kh_smem, b_smem, k_ready, k_empty, v_ready, v_empty,
               c, idx_b, idx_hk, key0, bias_row0, ROWS: gl.constexpr, STAGES: gl.constexpr,
               GROUPS: gl.constexpr, SPLIT: gl.constexpr, BIAS: gl.constexpr):
    """Chunk c of the ring (its stage c mod STAGES): K (both its column blocks where SPLIT), then V (and
    with BIAS each consumer's rows of the bias at the chunk's keys), each once its buffer is free."""
    s = c % STAGES
    phase = (c // STAGES) & 1
    mbarrier.wait(k_empty.index(s), phase ^ 1)
    if SPLIT:
        mbarrier.expect(k_ready.index(s), k_desc.block_type.nbytes + kh_desc.block_type.nbytes)
        tma.async_copy_global_to_shared(kh_desc, [idx_b, idx_hk, key0, k_desc.block_type.shape[3]], k_ready.index(s),
                                        kh_smem.index(s))
    else:
        mbarrier.expect(k_ready.index(s), k_desc.block_type.nbytes)
    tma.async_copy_global_to_shared(k_desc, [idx_b, idx_hk, key0, 0], k_ready.index(s), k_smem.index(s))
    mbarrier.wait(v_empty.index(s), phase ^ 1)
    if BIAS:
        mbarrier.expect(v_ready.index(s), v_desc.block_type.nbytes + GROUPS * b_desc.block_type.nbytes)
        for w in gl.static_range(GROUPS):
            tma.async_copy_global_to_shared(b_desc, [bias_row0 + w * ROWS, key0], v_ready.index(s),
                                            b_smem.index(w * STAGES + s))
    else:
        mbarrier.expect(v_ready.index(s), v_desc.block_type.nbytes)
    tma.async_copy_global_to_shared(v_desc, [idx_b, idx_hk, key0, 0], v_ready.index(s), v_smem.index(s))


$scores

@gluon.jit
def _attn_probabilities(s_val, m_i, l_i, qk_scale, score_scale, slope, slope_cols, bias, rows, col0, cols, size_x,
                        MASKED: gl.constexpr, SOFTMAX: gl.constexpr):
    """What weights V for one chunk in registers: the diagram's ops on the scores (_attn_scores), then the
    online softmax (Appendix A.3.2, base 2: exp(t) = exp2(t log2 e)), with the factor that rescales what
    was accumulated and the new running max and sum; or, without SOFTMAX, the ops' values as they are (a
    plain running sum, A.3.1; alpha, m and l are then unused). Only chunks past the end of the keys, on
    the diagonal or on a window's left edge are MASKED: the diagram's masks set -inf where it puts them
    among the ops, and keys past the end weigh nothing."""
    s_val = _attn_scores(s_val, score_scale, slope, slope_cols, bias, rows, col0, cols, MASKED)
    if MASKED:
        if SOFTMAX:
            s_val = gl.where(cols[None, :] < size_x, s_val, float("-inf"))
        else:
            s_val = gl.where(cols[None, :] < size_x, s_val, 0.0)
    if SOFTMAX:
        m_new = gl.maximum(m_i, gl.max(s_val, 1) * qk_scale)
        if MASKED:      # a row that has seen no key yet (before its window) subtracts 0, not -inf - -inf
            m_use = gl.where(m_new == float("-inf"), 0.0, m_new)
        else:
            m_use = m_new
        p = gl.exp2(s_val * qk_scale - m_use[:, None])
        alpha = gl.exp2(m_i - m_use)
        l_i = l_i * alpha + gl.sum(p, 1)
    else:
        p = s_val
        alpha = m_i
        m_new = m_i
    return p, alpha, m_new, l_i


@gluon.jit
def _attn_qk(q_tile, qh_tile, k_tile, kh_tile, ROWS: gl.constexpr, BLOCK_X: gl.constexpr, SPLIT: gl.constexpr,
             s_layout: gl.constexpr):
    """S = Q K^T, issued on the tensor cores without waiting: one wgmma, or, where the head dim is no
    power of two (SPLIT), one a column block of it, the second accumulating onto the first."""
    s_tok = warpgroup_mma(q_tile, k_tile.permute((1, 0)), gl.zeros([ROWS, BLOCK_X], gl.float32, s_layout),
                          use_acc=False, is_async=True)
    if SPLIT:
        s_tok = warpgroup_mma(qh_tile, kh_tile.permute((1, 0)), s_tok, is_async=True)
    return s_tok


@gluon.jit
def _attn_step(j, it, q_tile, qh_tile, k_smem, kh_smem, v_smem, k_ready, k_empty, v_ready, v_empty, turn_mine,
               turn_next,
               acc, p_prev, m_i, l_i, rows, arange_x, size_x, qk_scale, score_scale, slope, slope_cols,
               b_smem, b_first, ROWS: gl.constexpr, BLOCK_X: gl.constexpr, HEAD_D: gl.constexpr, HEAD_DH: gl.constexpr,
               HEAD_E: gl.constexpr, STAGES: gl.constexpr, MASKED: gl.constexpr,
               INTRA: gl.constexpr, INTER: gl.constexpr, FIRST: gl.constexpr, SOFTMAX: gl.constexpr,
               SPLIT: gl.constexpr, BIAS: gl.constexpr, s_layout: gl.constexpr, o_layout: gl.constexpr,
               p_layout: gl.constexpr):
    """One consumer warpgroup, chunk j of the tile (chunk it + j of the ring): S_j = Q K_j^T and
    O += P_(j-1) V_(j-1) on the tensor cores, the probabilities of S_j on the threads. INTRA issues both
    contractions before waiting for S_j alone, so the softmax runs under P V; otherwise it waits for both.
    INTER takes this warpgroup's turn (an mbarrier ring over the warpgroups) before issuing and passes it
    on after: one warpgroup's softmax runs under the next one's contractions (ping-pong)."""
    c = it + j
    s = c % STAGES
    sp = (c - 1) % STAGES
    k_tile = k_smem.index(s).reshape([BLOCK_X, HEAD_D])
    kh_tile = kh_smem.index(s).reshape([BLOCK_X, HEAD_DH])
    v_prev = v_smem.index(sp).reshape([BLOCK_X, HEAD_E])
    mbarrier.wait(k_ready.index(s), (c // STAGES) & 1)
    if INTER:
        mbarrier.wait(turn_mine, (c & 1) ^ FIRST)
    s_tok = _attn_qk(q_tile, qh_tile, k_tile, kh_tile, ROWS, BLOCK_X, SPLIT, s_layout)
    mbarrier.wait(v_ready.index(sp), ((c - 1) // STAGES) & 1)
    o_tok = warpgroup_mma(p_prev, v_prev, acc, is_async=True)
    if INTER:
        mbarrier.arrive(turn_next, count=1)
    if INTRA:
        s_val, k_tile, kh_tile = warpgroup_mma_wait(1, deps=(s_tok, k_tile, kh_tile))   # S_j done; P V may run
    else:
        s_val, acc, k_tile, kh_tile, v_prev = warpgroup_mma_wait(0, deps=(s_tok, o_tok, k_tile, kh_tile, v_prev))
    mbarrier.arrive(k_empty.index(s), count=1)
    if BIAS:        # this warpgroup's rows of the bias at chunk j's keys, landed with V_j
        mbarrier.wait(v_ready.index(s), (c // STAGES) & 1)
        bias = b_smem.index(b_first + s).load(s_layout)
    else:
        bias = 0.0
    p, alpha, m_i, l_i = _attn_probabilities(s_val, m_i, l_i, qk_scale, score_scale, slope, slope_cols, bias, rows,
                                             j * BLOCK_X, j * BLOCK_X + arange_x, size_x, MASKED, SOFTMAX)
    if INTRA:
        acc, v_prev = warpgroup_mma_wait(0, deps=(o_tok, v_prev))
    mbarrier.arrive(v_empty.index(sp), count=1)
    if SOFTMAX:
        acc = acc * gl.convert_layout(alpha, gl.SliceLayout(1, o_layout))[:, None]
    p_next = gl.convert_layout(p.to(q_tile.dtype), p_layout)     # the fragment strategy: P stays in registers
    return acc, p_next, m_i, l_i


@gluon.jit
def _attn_consumer(q_desc, o_desc, qh_desc, q_smem, o_smem, qh_smem, k_smem, kh_smem, v_smem, q_ready, q_empty,
                   k_ready, k_empty, v_ready, v_empty, turns, tiles, blocks_q, heads, kv_group, size_x, qk_scale,
                   score_scale, slope_ptr, slope_stride_b, slope_stride_h, slope_scale, b_smem, ROWS: gl.constexpr,
                   BLOCK_X: gl.constexpr, STAGES: gl.constexpr, GROUPS: gl.constexpr, GROUP: gl.constexpr, CAUSAL: gl.constexpr,
                   LEFT: gl.constexpr, ALIBI: gl.constexpr, BIAS: gl.constexpr, INTRA: gl.constexpr,
                   INTER: gl.constexpr, SOFTMAX: gl.constexpr, SPLIT: gl.constexpr):
    """Consumer warpgroup GROUP: per tile, its ROWS query rows against every chunk of keys. Scores and the
    output accumulate in registers in wgmma's layout; K and V come from the producer's SMEM ring. The
    output (HEAD_E columns, V's head dim) leaves through o_smem: the query tile's buffer where V's head
    dim is the queries', a buffer of its own otherwise. With ALIBI, the tile's head has a slope (ALiBi's m,
    one number a (batch, head) at slope_ptr), loaded once a tile. With BIAS, each chunk's scores take this
    warpgroup's tile of the bias, which the producer lands in b_smem with the chunk's V."""
    HEAD_D: gl.constexpr = q_desc.block_type.shape[3]       # the head dim's (first) column block
    HEAD_DH: gl.constexpr = qh_desc.block_type.shape[3]     # its second, where SPLIT
    HEAD_E: gl.constexpr = o_desc.block_type.shape[3]
    s_layout: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, 1],
                                                       instr_shape=[16, BLOCK_X, 16])
    o_layout: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, 1],
                                                       instr_shape=[16, HEAD_E, 16])
    p_layout: gl.constexpr = gl.DotOperandLayout(operand_index=0, parent=o_layout, k_width=2)
    row_layout: gl.constexpr = gl.SliceLayout(1, s_layout)
    FIRST: gl.constexpr = 1 if GROUP == 0 else 0        # warpgroup 0 takes the first turn
    turn_mine = turns.index(GROUP)
    turn_next = turns.index((GROUP + 1) % GROUPS)
    q_tile = q_smem.index(GROUP).reshape([ROWS, HEAD_D])
    qh_tile = qh_smem.index(GROUP).reshape([ROWS, HEAD_DH])
    arange_x = gl.arange(0, BLOCK_X, gl.SliceLayout(0, s_layout))
    b_first: gl.constexpr = GROUP * STAGES          # this warpgroup's bias tiles in b_smem, one a stage

    it = 0          # chunks consumed so far, over all tiles: the ring's position (and the turns taken)
    done = 0        # tiles done so far
    for t in range(gl.program_id(0), tiles, gl.num_programs(0)):
        idx_b, idx_h, idx_hk, row0, first, whole, unmasked, chunks = _attn_tile(
            t, blocks_q, heads, kv_group, size_x, GROUPS * ROWS, BLOCK_X, CAUSAL, LEFT)
        first_row = row0 + GROUP * ROWS
        rows = first_row + gl.arange(0, ROWS, row_layout)
        if ALIBI:   # the head's slope, and its bias at the chunk's columns relative to the tile's first row
            slope = gl.load(slope_ptr + idx_b * slope_stride_b + idx_h * slope_stride_h).to(gl.float32) * slope_scale
            slope_cols = slope * (arange_x - first_row).to(gl.float32)
        else:
            slope = 0.0
            slope_cols = 0.0
        ring = it - first       # chunk j of the tile is chunk ring + j of the ring
        mbarrier.wait(q_ready, done & 1)

        # chunk `first`: S only, nothing to accumulate yet (masked: it may be the last, on the diagonal or on a
        # window's left edge)
        s = it % STAGES
        k_tile = k_smem.index(s).reshape([BLOCK_X, HEAD_D])
        kh_tile = kh_smem.index(s).reshape([BLOCK_X, HEAD_DH])
        mbarrier.wait(k_ready.index(s), (it // STAGES) & 1)
        if INTER:
            mbarrier.wait(turn_mine, (it & 1) ^ FIRST)
        s_tok = _attn_qk(q_tile, qh_tile, k_tile, kh_tile, ROWS, BLOCK_X, SPLIT, s_layout)
        if INTER:
            mbarrier.arrive(turn_next, count=1)
        s_val, k_tile, kh_tile = warpgroup_mma_wait(0, deps=(s_tok, k_tile, kh_tile))
        mbarrier.arrive(k_empty.index(s), count=1)
        if BIAS:
            mbarrier.wait(v_ready.index(s), (it // STAGES) & 1)
            bias = b_smem.index(b_first + s).load(s_layout)
        else:
            bias = 0.0
        m_i = gl.full([ROWS], float("-inf"), gl.float32, row_layout)
        l_i = gl.full([ROWS], 0.0, gl.float32, row_layout)
        p, alpha, m_i, l_i = _attn_probabilities(s_val, m_i, l_i, qk_scale, score_scale, slope, slope_cols, bias,
                                                 rows, first * BLOCK_X, first * BLOCK_X + arange_x, size_x, True,
                                                 SOFTMAX)
        p_prev = gl.convert_layout(p.to(q_smem.dtype), p_layout)
        acc = gl.zeros([ROWS, HEAD_E], gl.float32, o_layout)

        # chunks on a window's left edge: masked
        for j in range(first + 1, whole):
            acc, p_prev, m_i, l_i = _attn_step(
                j, ring, q_tile, qh_tile, k_smem, kh_smem, v_smem, k_ready, k_empty, v_ready, v_empty, turn_mine,
                turn_next, acc, p_prev, m_i, l_i, rows, arange_x, size_x, qk_scale, score_scale, slope,
                slope_cols, b_smem, b_first, ROWS, BLOCK_X, HEAD_D, HEAD_DH, HEAD_E, STAGES, True, INTRA,
                INTER, FIRST, SOFTMAX, SPLIT, BIAS, s_layout, o_layout, p_layout)
        # chunks every row of the tile sees whole: no mask
        for j in range(gl.maximum(whole, first + 1), unmasked):
            acc, p_prev, m_i, l_i = _attn_step(
                j, ring, q_tile, qh_tile, k_smem, kh_smem, v_smem, k_ready, k_empty, v_ready, v_empty, turn_mine,
                turn_next, acc, p_prev, m_i, l_i, rows, arange_x, size_x, qk_scale, score_scale, slope,
                slope_cols, b_smem, b_first, ROWS, BLOCK_X, HEAD_D, HEAD_DH, HEAD_E, STAGES, False, INTRA,
                INTER, FIRST, SOFTMAX, SPLIT, BIAS, s_layout, o_layout, p_layout)
        # chunks on the diagonal or past the last key: masked
        for j in range(gl.maximum(unmasked, first + 1), chunks):
            acc, p_prev, m_i, l_i = _attn_step(
                j, ring, q_tile, qh_tile, k_smem, kh_smem, v_smem, k_ready, k_empty, v_ready, v_empty, turn_mine,
                turn_next, acc, p_prev, m_i, l_i, rows, arange_x, size_x, qk_scale, score_scale, slope,
                slope_cols, b_smem, b_first, ROWS, BLOCK_X, HEAD_D, HEAD_DH, HEAD_E, STAGES, True, INTRA,
                INTER, FIRST, SOFTMAX, SPLIT, BIAS, s_layout, o_layout, p_layout)

        # the last chunk's P V
        c = ring + chunks - 1
        s = c % STAGES
        v_tile = v_smem.index(s).reshape([BLOCK_X, HEAD_E])
        mbarrier.wait(v_ready.index(s), (c // STAGES) & 1)
        o_tok = warpgroup_mma(p_prev, v_tile, acc, is_async=True)
        acc, v_tile = warpgroup_mma_wait(0, deps=(o_tok, v_tile))
        mbarrier.arrive(v_empty.index(s), count=1)

        # O = acc / l (acc itself with a plain sum), through o_smem (this warpgroup's query buffer, no longer
        # read, where the head dims agree) to GMEM by TMA, rows past the end of the queries clipped by the
        # TMA engine; then the query buffer is free for the next tile's queries
        if SOFTMAX:
            o_val = acc / gl.convert_layout(l_i, gl.SliceLayout(1, o_layout))[:, None]
        else:
            o_val = acc
        o_smem.index(GROUP).store(o_val.to(o_smem.dtype).reshape([1, 1, ROWS, HEAD_E]))
        fence_async_shared()
        tma.async_copy_shared_to_global(o_desc, [idx_b, idx_h, row0 + GROUP * ROWS, 0], o_smem.index(GROUP))
        tma.store_wait(0)
        mbarrier.arrive(q_empty, count=1)
        it += chunks - first
        done += 1


@gluon.jit
def $kernel(q_desc, k_desc, v_desc, o_desc, qh_desc, kh_desc, size_q, size_x, batch_heads, heads, kv_group, qk_scale,
        score_scale, slope_ptr, slope_stride_b, slope_stride_h, slope_scale, b_desc, bias_b_rows, bias_h_rows,
        ROWS: gl.constexpr, BLOCK_X: gl.constexpr, STAGES: gl.constexpr,
        GROUPS: gl.constexpr, CAUSAL: gl.constexpr, LEFT: gl.constexpr, ALIBI: gl.constexpr, BIAS: gl.constexpr,
        INTRA: gl.constexpr, INTER: gl.constexpr, SOFTMAX: gl.constexpr, SPLIT: gl.constexpr,
        CONSUMER_REGS: gl.constexpr):
    """A persistent block: it takes tiles of GROUPS x ROWS query rows of one (batch, head) in turn (every
    grid-th tile) and streams each against all its keys (up to the diagonal when CAUSAL, from its rows'
    window when LEFT >= 0: the keys a row sees before its own). The descriptors
    view q, k, v and o as (batch, heads, seqlen, head_dim) with their own strides; k and v have
    heads / kv_group heads (grouped-query attention); v and o may have a head dim of their own (MLA). A head
    dim of q and k that is no power of two (SPLIT) is two column blocks, the first in q_desc and k_desc,
    the second in qh_desc and kh_desc (otherwise these are q_desc and k_desc again, unused). With ALIBI,
    slope_ptr and its strides give each (batch, head) its ALiBi slope, times slope_scale (1 / the scale where
    the kernel folds the chain's scale into exp2's factor), otherwise unused; with BIAS, b_desc views the
    additive bias as rows of keys, (batch, head, query) after one another, a batch entry bias_b_rows rows
    and a head bias_h_rows (0 where the call broadcasts it); otherwise it is k_desc, unused."""
    blocks_q = gl.cdiv(size_q, GROUPS * ROWS)
    tiles = blocks_q * batch_heads

    # SMEM: the query tiles (one per consumer, reused for its output where V's head dim is the queries'; an
    # output tile per consumer otherwise), the K and V rings, the mbarriers
    q_smem = gl.allocate_shared_memory(q_desc.dtype, [GROUPS] + q_desc.block_type.shape, q_desc.layout)
    if o_desc.block_type.shape[3] == q_desc.block_type.shape[3] and not SPLIT:
        o_smem = q_smem
    else:
        o_smem = gl.allocate_shared_memory(o_desc.dtype, [GROUPS] + o_desc.block_type.shape, o_desc.layout)
    k_smem = gl.allocate_shared_memory(k_desc.dtype, [STAGES] + k_desc.block_type.shape, k_desc.layout)
    if SPLIT:
        qh_smem = gl.allocate_shared_memory(qh_desc.dtype, [GROUPS] + qh_desc.block_type.shape, qh_desc.layout)
        kh_smem = gl.allocate_shared_memory(kh_desc.dtype, [STAGES] + kh_desc.block_type.shape, kh_desc.layout)
    else:
        qh_smem = q_smem
        kh_smem = k_smem
    v_smem = gl.allocate_shared_memory(v_desc.dtype, [STAGES] + v_desc.block_type.shape, v_desc.layout)
    if BIAS:        # a tile of the bias a consumer and stage: consumer w's stages from w * STAGES
        b_smem = gl.allocate_shared_memory(b_desc.dtype, [GROUPS * STAGES] + b_desc.block_type.shape, b_desc.layout)
    else:
        b_smem = k_smem
    q_ready = gl.allocate_shared_memory(gl.int64, [1], mbarrier.MBarrierLayout())
    q_empty = gl.allocate_shared_memory(gl.int64, [1], mbarrier.MBarrierLayout())
    k_ready = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    k_empty = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    v_ready = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    v_empty = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    turns = gl.allocate_shared_memory(gl.int64, [GROUPS, 1], mbarrier.MBarrierLayout())
    mbarrier.init(q_ready, count=1)
    mbarrier.init(q_empty, count=GROUPS)                    # every consumer has stored its output
    for s in gl.static_range(STAGES):
        mbarrier.init(k_ready.index(s), count=1)
        mbarrier.init(k_empty.index(s), count=GROUPS)       # every consumer releases each buffer
        mbarrier.init(v_ready.index(s), count=1)
        mbarrier.init(v_empty.index(s), count=GROUPS)
    for w in gl.static_range(GROUPS):
        mbarrier.init(turns.index(w), count=1)

    # warp specialisation: consumer 0 runs in the kernel's own 4 warps, consumers 1.. and the producer in
    # worker partitions; setmaxnreg gives the consumers CONSUMER_REGS registers and the producer 24
$partitions''')

PARTITION = Template('''\
${indent}gl.warp_specialize([
${consumers}
${indent}    (_attn_producer, (q_desc, k_desc, v_desc, qh_desc, kh_desc, b_desc, q_smem, k_smem, v_smem, qh_smem,
${indent}                      kh_smem, b_smem, q_ready, q_empty, k_ready, k_empty, v_ready, v_empty, tiles, blocks_q,
${indent}                      heads, kv_group, size_x, bias_b_rows, bias_h_rows, ROWS, BLOCK_X, STAGES, GROUPS, CAUSAL,
${indent}                      LEFT, SPLIT, BIAS)),
${indent}], [${warps}], [${regs}])''')

CONSUMER = Template('''\
${indent}    (_attn_consumer, (q_desc, o_desc, qh_desc, q_smem, o_smem, qh_smem, k_smem, kh_smem, v_smem, q_ready,
${indent}                      q_empty, k_ready, k_empty, v_ready, v_empty, turns, tiles, blocks_q, heads, kv_group,
${indent}                      size_x, qk_scale, score_scale, slope_ptr, slope_stride_b, slope_stride_h, slope_scale,
${indent}                      b_smem, ROWS, BLOCK_X, STAGES, GROUPS, ${group}, CAUSAL, LEFT, ALIBI, BIAS, INTRA, INTER, SOFTMAX,
${indent}                      SPLIT)),''')


# The Gluon of each elementwise op on the scores (analyzer.config.scores.SFU_PER_SCORE counts its cost)
SCORE_OPS = {
    "scale": ("s = s * score_scale", "multiplied by its factor (an argument)"),
    "relu": ("s = gl.maximum(s, 0.0)", "max(v, 0)"),
    "exp": ("s = gl.exp2(s * 1.4426950408889634)", "exp(v) = exp2(v log2 e): one exp2 a score"),
    "sigmoid": ("s = 0.5 * _attn_tanh(0.5 * s) + 0.5", "1/(1 + exp(-v)) = tanh(v/2)/2 + 1/2: one tanh a score"),
    "tanh": ("s = _attn_tanh(s)", "one tanh a score"),
    "softcap": ("s = {cap} * _attn_tanh(s * {inverse})", "cap tanh(v / cap): one tanh a score"),
    "alibi": ("s = s - slope * gl.abs(rows.to(gl.float32)[:, None] - cols.to(gl.float32)[None, :])",
              "ALiBi's v - m |i - j|, m the head's slope: positions as floats (exact below 2^24), a subtract and "
              "a multiply-add a score"),
    "add": ("s = s + bias.to(gl.float32)", "plus the chunk's tile of the bias (landed in SMEM with V)"),
    "alibi shifted": ("s = s + (slope_cols + slope * col0)[None, :]",
                      "ALiBi's v - m |i - j| as v + m (j - r), r the tile's first row (slope_cols: m (j - r) at the "
                      "first chunk's columns): the softmax ignores the row's part, -m (i - r), and the mask keeps "
                      "j <= i; one add a score"),
}
TANHS = ("sigmoid", "tanh", "softcap")     # the ops that call _attn_tanh

TANH = '''


@gluon.jit
def _attn_tanh(x):
    """tanh on the special function unit: PTX tanh.approx.f32 (sm_75 and later), one operation where
    1/(1 + exp(-v)) takes two (an exp and a reciprocal); its relative error is about 2^-11, below
    fp16's and bf16's rounding of the probabilities that follow."""
    return gl.inline_asm_elementwise("tanh.approx.f32 $0, $1;", "=f,f", [x], dtype=gl.float32, is_pure=True,
                                     pack=1)'''


def score_function(scores: Scores, source: str) -> str:
    """`_attn_scores`: the ops of the diagram `source` on a chunk of scores, in its order, one line each."""
    lines = ["@gluon.jit",
             "def _attn_scores(s, score_scale, slope, slope_cols, bias, rows, col0, cols, MASKED: gl.constexpr):",
             f'    """The scores\' ops of {py_doc(source)}, in its order; '
             + ("none: the online softmax follows." if not scores.ops else
                ("the online softmax follows." if scores.softmax else "their values weight V as they are.")) + '"""']
    folded = scores.folded
    for op in scores.ops:
        if folded and op.primitive == "scale":
            lines.append(f"    # {py_comment(op.name)}: scale, folded into the softmax's exp2 factor (the ops after it are "
                         "linear in it)")
            continue
        if op.primitive in MASKS:       # only where a chunk may hold masked keys
            inside = "cols[None, :] <= rows[:, None]"
            if op.window is not None:   # a whole number of the diagram's, written as an int literal
                inside = f"({inside}) & (cols[None, :] > rows[:, None] - {int(op.window)})"
            what = "-inf after the query" + ("" if op.window is None else f" or {int(op.window)} keys before it")
            lines += [f"    if MASKED:  # {py_comment(op.name)}: {op.primitive}, {what}",
                      f"        s = gl.where({inside}, s, float(\"-inf\"))"]
            continue
        code, what = SCORE_OPS[op.lowering]
        if op.cap is not None:      # a number of the diagram, written as a literal (repr of a float)
            code = code.format(cap=repr(float(op.cap)), inverse=repr(1 / float(op.cap)))
        lines.append(f"    {code}  # {py_comment(op.name)}: {op.primitive}, {what}")
    lines.append("    return s")
    text = "\n".join(lines)
    return text + (TANH if any(o.primitive in TANHS for o in scores.ops) else "")


def partitions(warpgroups: tuple[int, ...]) -> str:
    """The kernel's warp_specialize call for each number of consumer warpgroups its configurations use
    (a branch per number: Gluon takes the partitions as a literal list, one tuple of arguments each)."""
    out = []
    for i, n in enumerate(sorted(set(warpgroups))):
        keyword = "if" if i == 0 else "elif"
        body = PARTITION.substitute(
            indent="        ",
            consumers="\n".join(CONSUMER.substitute(indent="        ", group=g) for g in range(n)),
            warps=", ".join(["4"] * (n - 1) + ["1"]),
            regs=", ".join(["CONSUMER_REGS"] * (n - 1) + ["24"]))
        out.append(f"    {keyword} GROUPS == {n}:\n{body}")
    out.append("    else:\n        gl.static_assert(False, \"no partition list for this many consumer warpgroups\")")
    return "\n".join(out)


def render_kernel(name: str, warpgroups: tuple[int, ...], scores: Scores = SOFTMAX, source: str = "") -> str:
    """The kernel text, its entry point named `name` (claimed in the module's scope), its chain of scores
    `scores` read off the diagram file `source`."""
    return KERNEL.substitute(kernel=name, partitions=partitions(warpgroups), scores=score_function(scores, source))


__all__ = ["HELPERS", "SCORE_OPS", "render_kernel", "score_function"]
