"""The symbolic counts equal a brute-force simulation of the tiled schedule, for every shipped diagram.

For random axis sizes and tile sizes, analyzer.model.simulate executes each kernel's schedule element by
element and counts loads, saves, the peak a group holds and the FLOPs; the expressions derived by
analyzer.model.cost must give exactly the same numbers.
"""

from __future__ import annotations

import math

import pytest
import sympy
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from analyzer.common import resources
from analyzer.diagram.compiled import Partition
from analyzer.diagram.primitives import Mask
from analyzer.model.analysis import load
from analyzer.model.cost import level_cost
from analyzer.model.fusion import ragged_exact, schedule
from analyzer.model.simulate import simulate

CASES = [(name, k, level) for name in resources.shipped("diagrams")
         for k, kernel in enumerate(load(name).kernels)
         for level in load(name).levels[1:]]
MAX_ELEMENTS = 4000   # keep the element-level simulation fast


@st.composite
def configuration(draw, diagram, part: Partition, skip, divisible: bool):
    """Sizes for the size symbols and partition sizes; tiles divide their axes when `divisible`."""
    tiles: dict[sympy.Symbol, int] = {}
    need: dict[sympy.Symbol, int] = {}        # size symbol -> what it must be a multiple of
    at_least: dict[sympy.Symbol, int] = {}
    for _, sym in part.group:
        tiles[sym] = draw(st.integers(1, 3))
    if part.stream:
        axis, sym = part.stream
        if skip is not None and skip.query in dict(part.group):
            g = dict(part.group)[skip.query]
            tiles[sym] = draw(st.sampled_from([t for t in (1, 2, 3) if tiles[g] % t == 0]))
        else:
            tiles[sym] = draw(st.integers(1, 3))
    for axis, sym in (*part.group, *([part.stream] if part.stream else [])):
        size = diagram.size(axis)
        assert size.is_Symbol, "shipped diagrams size partitioned axes by one symbol"
        need[size] = math.lcm(need.get(size, 1), tiles[sym])
        if part.stream and axis == part.stream[0]:
            at_least[size] = max(at_least.get(size, 1), 2 * tiles[sym])   # at least two chunks
    sizes = {}
    for sym in diagram.size_symbols:
        step = need.get(sym, 1) if divisible else 1
        low = max(1, -(-at_least.get(sym, 1) // step))
        sizes[sym] = step * draw(st.integers(low, low + 2))
    if not divisible:
        for axis, sym in part.group:   # a tile larger than its axis is not a tile
            tiles[sym] = min(tiles[sym], int(diagram.size(axis).subs(sizes)))
    return sizes, tiles


def _small(diagram, sizes) -> bool:
    biggest = max(math.prod(int(diagram.size(a).subs(sizes)) for a in arr.axes)
                  for arr in diagram.arrays.values())
    return biggest <= MAX_ELEMENTS


def _simulated(name, kernel, level, data, *, divisible):
    """The symbolic costs and a simulation of one kernel, for drawn sizes; None if too large."""
    diagram = load(name)
    sched = schedule(diagram, diagram.kernels[kernel], level)
    sizes, tiles = data.draw(configuration(diagram, sched.partition, sched.skip, divisible=divisible))
    if not _small(diagram, sizes):
        return None
    return diagram, sched, level_cost(sched), sizes, tiles, simulate(sched, sizes, tiles)


@pytest.mark.parametrize("name,kernel,level", CASES)
@settings(max_examples=25, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])
@given(data=st.data())
def test_symbolic_counts_equal_simulation(name, kernel, level, data):
    run = _simulated(name, kernel, level, data, divisible=True)
    if run is None:
        return
    _, _, cost, sizes, tiles, sim = run
    values = {**sizes, **tiles}
    assert cost.transfers.subs(values) == sim.transfers                  # H, paper form N_g H_g
    assert cost.transfer_bytes.subs(values) == sim.transfer_bytes
    assert cost.groups.subs(values) == sim.groups                        # N_g
    assert cost.memory.subs(values) == sim.peak                          # M
    assert cost.memory_bytes.subs(values) == sim.peak_bytes
    assert {p: v.subs(values) for p, v in cost.flops.items()} == sim.flops


MASKED = {name for name in resources.shipped("diagrams") if any(isinstance(o.primitive, Mask) for o in load(name).ops)}


@pytest.mark.parametrize("name,kernel,level", [c for c in CASES if c[0] not in MASKED])
@settings(max_examples=15, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])
@given(data=st.data())
def test_ragged_tiles_count_exactly_with_ceiling_groups(name, kernel, level, data):
    """Tiles that do not divide their axis: transfers with ceiling(a / g_a) groups are exact."""
    run = _simulated(name, kernel, level, data, divisible=False)
    if run is None:
        return
    diagram, sched, cost, sizes, tiles, sim = run
    exact = cost.evaluate({**sizes, **tiles})
    assert exact["transfers"] == sim.transfers
    assert exact["transfer_bytes"] == sim.transfer_bytes
    assert exact["groups"] == sim.groups
    if all(int(diagram.size(a).subs(sizes)) % t == 0 for a, s in sched.partition.group
           for t in [tiles[s]]):
        assert exact["memory"] == sim.peak


RAGGED_EXACT = [c for c in CASES if c[0] in MASKED
                 and ragged_exact(schedule(load(c[0]), load(c[0]).kernels[c[1]], c[2]))]


@pytest.mark.parametrize("name,kernel,level", RAGGED_EXACT)
@settings(max_examples=15, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])
@given(data=st.data())
def test_ragged_tiles_under_a_mask_count_exactly(name, kernel, level, data):
    """A mask over one sequence (causal, a sliding window, a band) with query groups that do not divide it
    (1000 tokens in tiles of 64): the last group streams to the sequence's end, and the counts with
    ceiling(a / g) groups are the simulation's."""
    run = _simulated(name, kernel, level, data, divisible=False)
    if run is None:
        return
    _, _, cost, sizes, tiles, sim = run
    exact = cost.evaluate({**sizes, **tiles})
    assert exact["transfers"] == sim.transfers
    assert exact["transfer_bytes"] == sim.transfer_bytes
    assert exact["groups"] == sim.groups
    assert {p: exact[f"flops_{p}"] for p in sim.flops} == pytest.approx(sim.flops)


def test_the_ragged_exact_diagrams_are_those_over_one_sequence():
    assert {c[0] for c in RAGGED_EXACT} >= {"causal_attention", "causal_gqa", "alibi_attention", "sink_attention",
                                            "gemma2_local_attention", "band_attention"}     # a window, a band too


def test_a_single_chunk_never_needs_more_memory_than_the_steady_state():
    diagram = load("attention")
    sched = schedule(diagram, diagram.kernels[0], "smem")
    cost = level_cost(sched)
    q, x, d, g_q, s_x = (sympy.Symbol(n, positive=True) for n in ("q", "x", "d", "g_q", "s_x"))
    values = {q: 4, x: 3, d: 2, g_q: 2, s_x: 3}
    sim = simulate(sched, {q: 4, x: 3, d: 2}, {g_q: 2, s_x: 3})
    assert sim.peak <= cost.memory.subs(values)


@settings(max_examples=60, deadline=None, derandomize=True)
@given(window=st.integers(1, 13), g=st.sampled_from([1, 2, 3, 4, 6]), data=st.data())
def test_a_sliding_windows_counts_equal_simulation(window, g, data):
    """gemma2_local_attention with a window short enough to bite at simulated sizes: the chunks before a
    group's window are skipped as the simulation walks them (its H, M and FLOPs exact), whatever the
    window's remainder in chunks."""
    import yaml

    from analyzer.diagram.graph import compile_data
    text = yaml.safe_load(resources.shipped("diagrams")["gemma2_local_attention"].read_text())
    text["ops"] = [dict(o, window=window) if o["primitive"] == "window_mask" else o for o in text["ops"]]
    diagram = compile_data(text, source="w.yaml")
    sched = schedule(diagram, diagram.kernels[0], "smem")
    assert sched.skip is not None and sched.skip.before == window - 1
    cost = level_cost(sched)
    s = data.draw(st.sampled_from([t for t in (1, 2, 3, 6) if g % t == 0]))
    low = -(-2 * s // g)            # at least two chunks: the steady state the memory counts
    q = g * data.draw(st.integers(low, low + 4))
    sizes = {sym: {"q": q, "d": data.draw(st.integers(1, 2))}[sym.name] for sym in diagram.size_symbols}
    tiles = dict(zip(sched.partition.symbols, (g, s), strict=True))
    sim = simulate(sched, sizes, tiles)
    values = {**sizes, **tiles}
    assert cost.transfers.subs(values) == sim.transfers
    assert {p: v.subs(values) for p, v in cost.flops.items()} == sim.flops
    # M is a steady-state chunk's columns: exact where some group streams two chunks or more, an upper
    # bound where the window leaves every group one (a single chunk holds less)
    longest = min(q, g + s * -(-(window - 1) // s)) // s
    if longest >= 2:
        assert cost.memory.subs(values) == sim.peak
    else:
        assert cost.memory.subs(values) >= sim.peak


@settings(max_examples=40, deadline=None, derandomize=True)
@given(window=st.integers(1, 12), g=st.sampled_from([2, 3, 4, 6]), data=st.data())
def test_a_sliding_window_over_ragged_tiles_counts_exactly(window, g, data):
    """The same window over a sequence its query groups do not divide: with ceiling(q / g) groups, the last
    ragged, the transfers and FLOPs are the simulation's."""
    import yaml

    from analyzer.diagram.graph import compile_data
    text = yaml.safe_load(resources.shipped("diagrams")["gemma2_local_attention"].read_text())
    text["ops"] = [dict(o, window=window) if o["primitive"] == "window_mask" else o for o in text["ops"]]
    diagram = compile_data(text, source="w.yaml")
    _ragged_counts_match(diagram, g, data)


@settings(max_examples=40, deadline=None, derandomize=True)
@given(before=st.one_of(st.none(), st.integers(0, 9)), after=st.integers(0, 9), g=st.sampled_from([2, 3, 4, 6]),
       data=st.data())
def test_a_band_over_ragged_tiles_counts_exactly(before, after, g, data):
    """band_attention over one sequence (its keys the queries) that its query groups do not divide: the
    groups before the last end A' past their diagonal or at the end, the last at the end, and the
    transfers and FLOPs with ceiling(q / g) groups are the simulation's."""
    import yaml

    from analyzer.diagram.graph import compile_data
    text = yaml.safe_load(resources.shipped("diagrams")["band_attention"].read_text())
    mask = next(o for o in text["ops"] if o["primitive"] == "band_mask")
    mask.pop("before")
    mask["after"] = after
    if before is not None:
        mask["before"] = before
    diagram = compile_data(text, source="b.yaml")
    _ragged_counts_match(diagram, g, data)


def _ragged_counts_match(diagram, g: int, data) -> None:
    """The diagram's SMEM schedule at a drawn sequence its query groups of g do not divide: the transfers
    and FLOPs with ceiling(q / g) groups are the simulation's."""
    sched = schedule(diagram, diagram.kernels[0], "smem")
    assert ragged_exact(sched)
    cost = level_cost(sched)
    s = data.draw(st.sampled_from([t for t in (1, 2, 3, 6) if g % t == 0]))
    q = g * data.draw(st.integers(1, 6)) + data.draw(st.integers(1, g - 1))      # a ragged last group
    sizes = {sym: {"q": q, "d": data.draw(st.integers(1, 2))}[sym.name] for sym in diagram.size_symbols}
    tiles = dict(zip(sched.partition.symbols, (g, s), strict=True))
    sim = simulate(sched, sizes, tiles)
    exact = cost.evaluate({**sizes, **tiles})
    assert exact["transfers"] == sim.transfers
    assert {p: exact[f"flops_{p}"] for p in sim.flops} == pytest.approx(sim.flops)


SIDES = st.one_of(st.none(), st.integers(0, 9))


@pytest.mark.slow(seconds=5)
@settings(max_examples=40, deadline=None, derandomize=True)
@given(before=SIDES, after=SIDES, g=st.sampled_from([1, 2, 3, 4, 6]), data=st.data())
def test_a_bands_counts_equal_simulation(before, after, g, data):
    """band_attention with a band short enough to bite at simulated sizes (either bound left out, or 0),
    its keys an axis of their own, fewer or more than the queries: H, the FLOPs and M as the simulation
    walks the chunks, whatever the band's remainder in chunks. A query past the last key by more than the
    band reaches sees nothing (its output is undefined), so no group starts past the keys."""
    import yaml

    from analyzer.diagram.graph import compile_data
    text = yaml.safe_load(resources.shipped("diagrams")["band_attention"].read_text())
    mask = next(o for o in text["ops"] if o["primitive"] == "band_mask")
    for side, n in (("before", before if before is not None or after is not None else 0), ("after", after)):
        mask.pop(side)
        if n is not None:
            mask[side] = n
    text["axes"]["x"] = {"default": 64}
    diagram = compile_data(text, source="b.yaml")
    sched = schedule(diagram, diagram.kernels[0], "smem")
    before = mask.get("before")
    assert (sched.skip.before, sched.skip.after) == (before, after)
    cost = level_cost(sched)
    s = data.draw(st.sampled_from([t for t in (1, 2, 3, 6) if g % t == 0]))
    low = -(-2 * s // g)            # at least two chunks of keys: the steady state the memory counts
    keys = g * data.draw(st.integers(low, low + 4))
    reach = 0 if before is None else s * -(-before // s)      # W': the keys before a group it streams
    queries = g * data.draw(st.integers(1, max(1, (keys + reach) // g)))
    sizes = {sym: {"q": queries, "x": keys, "d": data.draw(st.integers(1, 2))}[sym.name]
             for sym in diagram.size_symbols}
    tiles = dict(zip(sched.partition.symbols, (g, s), strict=True))
    sim = simulate(sched, sizes, tiles)
    values = {**sizes, **tiles}
    assert cost.transfers.subs(values) == sim.transfers
    assert {p: v.subs(values) for p, v in cost.flops.items()} == sim.flops

    def chunks(i: int) -> int:      # what group i streams: from its first row's band to its last row's
        first = max(0, i * g - reach)
        last = keys if after is None else min(keys, (i + 1) * g + s * -(-after // s))
        return -(-(last - first) // s)
    # M is a steady-state chunk's columns: exact where some group streams two chunks or more, an upper
    # bound where the band leaves every group one (a single chunk holds less)
    if max(chunks(i) for i in range(queries // g)) >= 2:
        assert cost.memory.subs(values) == sim.peak
    else:
        assert cost.memory.subs(values) >= sim.peak
