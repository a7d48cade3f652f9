"""The portable contraction kernels as ptxas builds them for sm_90a, without a GPU (tests.kernels.portable_build).

ptxas serialises every wgmma of a kernel whose accumulator runs on from the unmasked loop over the
stream into the masked edge loop (its note C7515, "non wgmma instructions defining accumulator
registers ... between start and end of the pipeline stage"): the loads then hide behind another
block's MMA only. The generator compiles the edge loop only where the launcher says the stream has
edge chunks (the constexpr EVEN_<stream>), so at sizes that are multiples of the chunk the kernel is one
loop and keeps its wgmma asynchronous. On an H100 that made the matmul 12-15 % faster and the fused MLP
1.48x (bench/results/contractions_h100.md)."""

from __future__ import annotations

import pytest

from analyzer.codegen.generator import generate
from bench.matmul_wgmma import with_edge_loop
from tests.kernels.portable_build import SERIALISED, call, compiled_each

# both tests read four compilations in one process (about 6 s together, in the first one's fixture)
pytestmark = pytest.mark.slow(seconds=2)

JOBS = [{"TILE_A": 128, "TILE_C": 128, "BLOCK_B": 64, "num_warps": 4, "num_stages": 3}]


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """The generated matmul (at 8192 cubed, three stages) and MLP (at its defaults) modules, and
    the same modules with their edge loops compiled in, each compiled for sm_90a."""
    tmp = tmp_path_factory.mktemp("portable_sm90")
    jobs = []
    for diagram, diagram_jobs in (("matmul", JOBS), ("mlp2", None)):
        g = generate(diagram, "h100", backend="triton")
        (path,) = g.write(tmp / f"{diagram}.py")
        edge = tmp / f"{diagram}_edge.py"
        edge.write_text(with_edge_loop(path.read_text()))       # bench/matmul_wgmma.py times the two
        for p in (path, edge):
            jobs += [{"module": str(p), **job} for job in diagram_jobs or [call(g, ptxas=True)]]
    results = [r if isinstance(r, dict) else r[0] for r in compiled_each(jobs)]      # one start-up
    return {"matmul": (results[0:1], results[1:2]), "mlp2": (results[2:3], results[3:4])}


@pytest.mark.parametrize("diagram", ["matmul", "mlp2"])
def test_the_kernel_keeps_its_wgmma_asynchronous(built, diagram):
    generated, _ = built[diagram]
    assert all(SERIALISED not in r["notes"] and r["mma"] > 0 for r in generated)


@pytest.mark.parametrize("diagram", ["matmul", "mlp2"])
def test_the_edge_loop_is_what_serialised_the_wgmma(built, diagram):
    generated, edge = built[diagram]
    for g, e in zip(generated, edge, strict=True):
        assert SERIALISED in e["notes"] and SERIALISED not in g["notes"]
        assert e["mma"] > g["mma"] > 0          # the edge loop's own MMA goes with it
    if diagram == "matmul":
        for g, e in zip(generated, edge, strict=True):
            assert g["shared"] == e["shared"] == 3 * (128 + 128) * 64 * 2   # stages x the chunk's tiles
