"""The Triton kernel generated from diagrams/matmul.yaml against float64 (TRITON_INTERPRET=1)."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("triton")

from helpers_kernel import GPU, module, written  # noqa: E402

from analyzer.codegen import generate  # noqa: E402


@pytest.mark.parametrize("shape", [(1, 1, 1), (17, 33, 65), (300, 200, 100)])
def test_matmul_matches_float64(shape, tmp_path):
    m = module("matmul", tmp_path)
    a_, b_, c_ = shape
    g = torch.Generator().manual_seed(sum(shape))
    a = torch.randn(a_, b_, generator=g).half()
    b = torch.randn(b_, c_, generator=g).half()
    out = m.matmul(a, b)
    ref = a.double() @ b.double()
    assert out.shape == (a_, c_)
    assert torch.isfinite(out).all()
    assert ((out.double() - ref).norm() / ref.norm()).item() < 1e-2


def test_banded_block_order_covers_every_tile_once(tmp_path):
    """Blocks walk bands of row tiles (one wave covers a square of the output): with 64 x 64 tiles,
    16 row tiles and 15 column tiles make one full band of _band(64, 64) rows and a ragged one."""
    m = module("matmul", tmp_path)
    band = m._band(64, 64)
    assert band == round((m.SM_COUNT) ** 0.5) and 16 % band != 0
    g = torch.Generator().manual_seed(7)
    a = torch.randn(16 * 64 - 5, 40, generator=g).half()
    b = torch.randn(40, 15 * 64 - 3, generator=g).half()
    ref = a.double() @ b.double()
    out = m.matmul(a, b, config={"TILE_A": 64, "TILE_C": 64, "BLOCK_B": 32, "num_warps": 4, "num_stages": 3})
    assert ((out.double() - ref).norm() / ref.norm()).item() < 1e-2


def test_matmul_transposed_input(tmp_path):
    m = module("matmul", tmp_path)
    a = torch.randn(40, 30).half().t()           # strided view, (30, 40)
    b = torch.randn(40, 20).half()
    ref = a.double() @ b.double()
    assert ((m.matmul(a, b).double() - ref).norm() / ref.norm()).item() < 1e-2


def test_matmul_mismatched_inner_axis(tmp_path):
    m = module("matmul", tmp_path)
    with pytest.raises(ValueError, match="axis b"):
        m.matmul(torch.randn(4, 5).half(), torch.randn(6, 7).half())


def test_a_tile_that_is_no_power_of_two_masks_its_padding(tmp_path):
    """A 192-wide tile runs in a 256-wide block whose last 64 slots are masked. The mask was written
    `offs < size & (arange < TILE)`, which Python reads as `offs < (size & ...)`: every column but the
    first few was dropped."""
    g = generate("matmul", GPU, sets={"g_a": 64, "g_c": 192, "s_b": 64})
    assert "(offs_c < size_c) & (tl.arange(0, BLOCK_C) < TILE_C)" in g.source
    m = written(g, tmp_path)
    gen = torch.Generator().manual_seed(192)
    a = torch.randn(70, 50, generator=gen).half()
    b = torch.randn(50, 400, generator=gen).half()
    ref = a.double() @ b.double()
    assert ((m.matmul(a, b).double() - ref).norm() / ref.norm()).item() < 1e-2
