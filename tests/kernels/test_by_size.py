"""The by-size table of a generated attention kernel (analyzer.config.by_size): the wrapper launches, at
every call, the configuration napkin sweep ranks first at the nearest grid point, and every configuration
the table holds computes attention correctly (on the CPU, TRITON_INTERPRET=1)."""

from __future__ import annotations

import itertools
import math
import random

import pytest

from analyzer.codegen.triton import config_names
from analyzer.config.by_size import INSTANCES, LENGTHS, call_sizes, nearest
from analyzer.config.choose import TIE
from analyzer.config.sweep import sweep

torch = pytest.importorskip("torch")
pytest.importorskip("triton")

from helpers_kernel import generated, module, reference, rel_err  # noqa: E402


def _entry(g, k, c) -> dict:
    entry = {name: c.tiles.get(symbol, 1) for symbol, name in config_names(g, k).items()}
    return {**entry, "num_warps": c.num_warps, "num_stages": c.num_stages}


def test_nearest_is_the_closest_grid_point_in_log2():
    grid = (1, 2, 4, 8, 16)
    rng = random.Random(3)
    for value in [0.2, 1, 3, 6, 5.65, 2 ** 2.5, 17, 1000, *(rng.uniform(0.5, 40) for _ in range(300))]:
        x = math.log2(max(value, 1))
        distances = [abs(math.log2(g) - x) for g in grid]
        best = min(distances)
        assert nearest(grid, value) == distances.index(best)      # the first (smaller) of a tie


def test_matmul_launches_the_tables_choice_by_the_geometric_mean_of_its_sizes(tmp_path):
    g = generated("matmul")
    m = module("matmul", tmp_path)
    (k,) = g.kernels
    assert set(k.tables) == {None} and k.tables[None].instances == (1,)
    rng = random.Random(1)
    for _ in range(300):
        size = {a: rng.choice([100, 256, 700, 1024, 3000, 8192, 40000]) for a in "abc"}
        expected = k.choice_for(None, (size["a"] * size["b"] * size["c"]) ** (1 / 3))
        assert m._sized(m.CONFIGS["gemm"][None], size) == _entry(g, k, expected)
        (launched,) = g.launched(size)
        assert launched is expected


@pytest.mark.parametrize("diagram", ["causal_attention", "gqa"])
def test_wrapper_launches_the_tables_choice(diagram, tmp_path):
    """The generated _sized lookup and KernelConfigs.choice_for (what predict() times) agree."""
    g = generated(diagram)
    m = module(diagram, tmp_path)
    (k,) = g.kernels
    assert k.tables, "the h200 profile's choice depends on the size: the kernel has a table"
    r = g.roles
    rng = random.Random(0)
    for key in k.tables:
        for _ in range(200):
            batch, seq_q = rng.randint(1, 16), rng.choice([1, 100, 300, 700, 1500, 5000, 20000, 50000])
            seq_k = seq_q if r.causal else rng.choice([seq_q, 64, 9000])
            size = {"batch": batch, r.seq_q: seq_q, r.seq_k: seq_k, r.head_dim: key}
            if r.heads:
                size[r.heads] = rng.randint(1, 8)
                size[r.group] = rng.choice([1, 2, 4])
                heads = size[r.heads] * size[r.group]
            else:
                size["heads"] = heads = rng.randint(1, 64)
            # the square problem alike: as many keys, as many query tiles (analyzer.config.by_size.grid_point)
            expected = k.choice_for(key, seq_k, batch * heads * seq_q / seq_k)
            assert m._sized(m.CONFIGS[k.plan.name][key], size) == _entry(g, k, expected)
            assert g.launched(size) == [expected]


def test_each_cell_is_the_sweeps_first_at_its_grid_point():
    """A cell's configuration is predicted within TIE of napkin sweep's first at that point's sizes."""
    g = generated("attention")
    (k,) = g.kernels
    table = k.tables[128]
    for (i, seqlen), (j, n) in itertools.islice(
            itertools.product(enumerate(LENGTHS), enumerate(INSTANCES)), 0, None, 7):
        sizes = call_sizes(g.diagram, g.roles, seqlen, n, {"d": 128})
        (s,) = sweep("attention", "h200", sets=sizes, backend="triton")
        cell = table.configs[table.cells[i][j]]
        row = next(r for r in s.rows if (r.tiles, r.num_warps, r.num_stages) ==
                   (cell.tiles, cell.num_warps, cell.num_stages))
        assert row.time_s <= s.rows[0].time_s * (1 + TIE), (seqlen, n)
        assert sizes["heads"] == n and sizes["q"] == sizes["x"] == seqlen


def test_pinned_sizes_or_tiles_leave_one_configuration():
    """A pinned problem size is one size to rank at; pinned tiles, warps and stages are one candidate."""
    from analyzer.codegen import generate
    (k,) = generated("attention").kernels
    assert set(k.tables) == set(k.choices)
    for sets in ({"q": 2048}, {"batch": 8, "heads": 16}):
        (k,) = generate("attention", "h200", backend="triton", sets=sets).kernels
        assert not k.tables
    (k,) = generate("attention", "h200", backend="triton", sets={"d": 128, "g_q": 128, "s_x": 64, "w_q": 64,
                                               "stages": 2}).kernels
    assert not k.tables and set(k.choices) == {128}


def test_weaved_sizes_choose_as_the_sweep_ranks():
    """napkin kernel --set batch=.. --set heads=.. --set q=.. takes napkin sweep's first there."""
    from analyzer.codegen import generate
    sets = {"batch": 8, "heads": 16, "q": 2048, "x": 2048, "d": 128}
    (k,) = generate("attention", "h200-calibrated", backend="triton", sets=sets).kernels
    (s,) = sweep("attention", "h200-calibrated", sets=sets, backend="triton")
    first = s.rows[0]
    assert (k.choices[128].tiles, k.choices[128].num_warps, k.choices[128].num_stages) == \
        (first.tiles, first.num_warps, first.num_stages)


@pytest.mark.parametrize("diagram", ["attention", "causal_attention"])
def test_every_configuration_of_the_table_computes_attention(diagram, tmp_path):
    """Each configuration a call may launch, given to the call (config=), against float64."""
    g = generated(diagram)
    m = module(diagram, tmp_path)
    (k,) = g.kernels
    entry = m.CONFIGS[k.plan.name][64]
    assert len(entry["configs"]) == len(k.tables[64].configs) > 1
    gen = torch.Generator().manual_seed(5)
    q, kk, v = (torch.randn(1, 2, 200, 64, generator=gen).half() for _ in range(3))
    want = reference(q, kk, v, causal=g.roles.causal)
    for config in entry["configs"]:
        out = torch.full_like(q, float("nan"))
        m.attention(q, kk, v, causal=g.roles.causal, out=out, config={k.plan.name: config})
        assert torch.isfinite(out).all() and rel_err(out, want) < 1e-2, config


@pytest.mark.parametrize("diagram, hdim, batch, heads, seqlen", [("attention", 128, 8, 16, 2048),
                                                                  ("causal_attention", 64, 1, 32, 16384),
                                                                  ("gqa", 64, 2, 8, 1000)])
def test_predict_times_the_launched_configuration_as_the_sweep_does(diagram, hdim, batch, heads, seqlen):
    from analyzer.codegen import generate
    from analyzer.config.predict import predict
    gpu = "h200-calibrated"
    p = predict(diagram, gpu, batch=batch, heads=heads, seqlen_q=seqlen, head_dim=hdim)
    (c,) = generate(diagram, gpu, backend="triton").launched(p.sizes)
    (s,) = sweep(diagram, gpu, sets=p.sizes, backend="triton")
    row = next(r for r in s.rows if (r.tiles, r.num_warps, r.num_stages) ==
               (c.tiles, c.num_warps, c.num_stages))
    assert p.time_s == pytest.approx(row.time_s, rel=1e-9) and p.bound == row.bound
    assert p.tiles["g_q"] == c.tiles["g_q"]


def test_a_grid_point_no_candidate_can_take_falls_back_to_the_default_choice(monkeypatch):
    """Where every candidate breaks a divisor rule at a grid point, the table launches the choice at
    the diagram's default sizes there instead of failing the generation."""
    from analyzer.codegen import generate
    from analyzer.common.errors import NapkinError
    from analyzer.config import by_size
    real = by_size.rank_at

    def rank_at(model, profile, sizes, choices, ones):
        if sizes["q"] == 512:
            raise NapkinError("no legal configuration")
        return real(model, profile, sizes, choices, ones)

    monkeypatch.setattr(by_size, "rank_at", rank_at)
    (k,) = generate("causal_attention", "h200", backend="triton", sets={"d": 64}).kernels
    table = k.tables[64]
    row = LENGTHS.index(512)
    assert {table.cells[row][j] for j in range(len(INSTANCES))} == \
        {next(i for i, c in enumerate(table.configs) if (c.tiles, c.num_warps, c.num_stages) ==
              (k.choices[64].tiles, k.choices[64].num_warps, k.choices[64].num_stages))}


@pytest.mark.parametrize("seq_q, seq_k, instances", [(8192, 256, 16), (4096, 512, 20), (1024, 4096, 8)])
def test_a_call_reads_the_table_at_the_square_problem_alike(seq_q, seq_k, instances):
    """A call whose queries and keys differ reads the table where the square problem has as many keys
    (each tile's chunks) and as many query rows (instances x queries / keys): where both lengths fill
    whole blocks, the Hopper model predicts the two alike for every configuration (the geometric mean
    would read 4096 queries against 256 keys as one problem of 1024)."""
    from analyzer import hardware
    from analyzer.config import hopper
    from analyzer.config.by_size import grid_point
    h100 = hardware.load("h100")
    length, alike = grid_point(generated("mha").roles, [seq_q, seq_k], instances)
    assert (length, alike) == (seq_k, instances * seq_q / seq_k)
    whole = [c for _, c in hopper.ranked(h100, 64, "fp16", seq_q=seq_q, seq_k=seq_k, instances=instances)
             if not (seq_q % c.block_rows or seq_k % c.block_rows)]
    assert len(whole) > 10
    for c in whole:
        time = (lambda sq, sk, n, c=c: hopper.predicted_time(h100, c, 64, "fp16", seq_q=sq, seq_k=sk, instances=n))
        assert time(seq_q, seq_k, instances) == pytest.approx(time(length, length, int(alike)), rel=1e-12)
