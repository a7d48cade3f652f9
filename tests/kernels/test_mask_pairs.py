"""The masked kernels compare a pair of keys through one column (_attn_keep, _attn_band in
analyzer/codegen/hopper/attention.gluon): two consecutive registers of a thread's scores must hold keys c
and c + 1 of one row, c even. That is wgmma's accumulator layout (its first register basis one column
over) and FP8's key order (which keeps a key's lowest bit); were either to change, the second key of
every pair would be masked by the wrong bound."""

from __future__ import annotations

import re

import pytest

from analyzer.codegen.hopper import kernel

pytest.importorskip("triton")


@pytest.mark.parametrize("chunk", [64, 128, 256])
@pytest.mark.parametrize("k_step", [16, 32])        # 16-bit operands, e4m3's
def test_the_scores_layout_holds_a_rows_keys_in_pairs(chunk, k_step):
    from triton._C.libtriton import gluon_ir, ir
    from triton.experimental.gluon import language as gl

    context = ir.context()
    ir.load_dialects(context)
    builder = gluon_ir.GluonOpBuilder(context)
    layout = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, 1], instr_shape=[16, chunk, k_step])
    linear = builder.to_linear_layout(layout._to_ir(builder), [64, chunk])
    assert linear.reg_bases[0] == [0, 1]             # register 2i + 1 is register 2i's column + 1, same row
    columns = [basis[1] for basis in linear.lane_bases + linear.reg_bases[1:] if basis[1]]
    assert all(c % 2 == 0 for c in columns)          # every other basis moves by an even number of columns


def fp8_key(c: int) -> int:
    """_attn_fp8_keys of the kernel text: within each 32, 16 jh + 8 jl + 2 l + e -> 16 jh + 4 l + 2 jl + e."""
    return (c & ~31) | (c & 16) | ((c & 6) << 1) | ((c & 8) >> 2) | (c & 1)


def test_fp8s_key_order_keeps_the_pairs():
    text = kernel.KERNEL.template
    assert "return (c & ~31) | (c & 16) | ((c & 6) << 1) | ((c & 8) >> 2) | (c & 1)" in text
    keys = [fp8_key(c) for c in range(256)]
    assert sorted(keys) == list(range(256))          # a permutation of the chunk's keys
    assert all(keys[c + 1] == keys[c] + 1 and keys[c] % 2 == 0 for c in range(0, 256, 2))


def test_the_selects_take_two_scores_a_call():
    text = kernel.KERNEL.template
    for name in ("_attn_keep", "_attn_band"):
        body = text[text.index(f"def {name}("):]
        body = body[:body.index("@gluon.jit")]
        assert re.search(r"pack=2\)", body), name
