"""band_mask (local attention, not causal: query i sees keys i - before .. i + after) in the diagram
language and the model: its refusals as one-line errors, causal_mask and window_mask as the bands they
are, the chunks a band streams against the element-level simulation (rectangles too), the pairs it
attends against brute-force counting, and what the Hopper family takes of it (diagrams/band_attention.yaml)."""

from __future__ import annotations

import copy
from pathlib import Path

import numpy as np
import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from analyzer import hardware
from analyzer.codegen import generate
from analyzer.common import resources
from analyzer.common.errors import NapkinError
from analyzer.common.yamlio import load_file
from analyzer.config import band_walk, hopper
from analyzer.config.kernels import configure_kernels
from analyzer.config.scores import pairs
from analyzer.diagram.graph import compile_data
from analyzer.diagram.interface import Band, interface
from analyzer.model.analysis import analyze
from analyzer.model.cost import level_cost
from analyzer.model.fusion import schedule, skip_extent

H100 = hardware.load("h100")


def shipped(name: str) -> dict:
    return copy.deepcopy(load_file(resources.shipped("diagrams")[name]))


def banded(before: int | None = 256, after: int | None = 256, *, keys: int | None = None) -> dict:
    """band_attention's file with another band (None: that bound left out), its keys an axis of their own
    (`keys`: its default) where given."""
    data = shipped("band_attention")
    mask = data["ops"][1]
    for side, n in (("before", before), ("after", after)):
        mask.pop(side, None)
        if n is not None:
            mask[side] = n
    if keys is not None:
        data["axes"]["x"] = {"default": keys, "doc": "key positions"}
    return data


def written(tmp_path, data: dict, name: str = "b.yaml") -> str:
    path = tmp_path / name
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return str(path)


def as_band(name: str, before: int | None, after: int | None) -> dict:
    """Shipped diagram `name` with its mask replaced by band_mask (before, after)."""
    data = shipped(name)
    mask = next(o for o in data["ops"] if o["primitive"] in ("causal_mask", "window_mask"))
    mask.pop("window", None)
    mask["primitive"] = "band_mask"
    mask.update({k: v for k, v in (("before", before), ("after", after)) if v is not None})
    return data


# -- the language ---------------------------------------------------------------------------------------

@pytest.mark.parametrize("edit, field, message", [
    ({"before": -1}, "ops[1]", "band_mask's before is -1: a whole number of keys, at least 0"),
    ({"after": 2.5}, "ops[1]", "band_mask's after is 5/2: a whole number of keys, at least 0"),
    ({"after": "q"}, "ops[1].after", "unknown name 'q'"),
    ({"before": None, "after": None}, "ops[1]", "band_mask needs `before` or `after` (or both)"),
    ({"key": "q"}, "ops[1]", "band_mask needs two different axes for query and key"),
    ({"query": "d"}, "ops[1]", "band_mask query axis 'd' is not an axis of its input [q, x]"),
    ({"window": 8}, "ops[1].window", "primitive band_mask takes no `window`"),
])
def test_a_band_the_primitive_cannot_mean_is_one_line(edit, field, message):
    data = banded()
    mask = data["ops"][1]
    for k, v in edit.items():
        if v is None:
            mask.pop(k)
        else:
            mask[k] = v
    with pytest.raises(NapkinError) as info:
        compile_data(data, source="b.yaml")
    line = info.value.one_line()
    assert "\n" not in line and line.startswith(f"b.yaml: {field}: ") and message in line, line


def test_a_window_mask_takes_no_before():
    data = shipped("gemma2_local_attention")
    data["ops"][3]["before"] = 3
    with pytest.raises(NapkinError, match="primitive window_mask takes no `before`"):
        compile_data(data, source="w.yaml")


def test_the_roles_carry_the_band_and_the_call_is_not_causal():
    roles = interface(compile_data(banded(), source="b.yaml"))
    assert (roles.band, roles.causal, roles.window) == (Band(256, 256), False, None)
    roles = interface(compile_data(banded(None, 0), source="b.yaml"))
    assert (roles.band, roles.causal, roles.window) == (Band(None, 0), True, None)
    roles = interface(compile_data(banded(99, 0), source="b.yaml"))
    assert (roles.band, roles.causal, roles.window) == (Band(99, 0), True, 100)


# -- causal_mask and window_mask are bands ---------------------------------------------------------------

@pytest.mark.parametrize("name, before, after", [("causal_attention", None, 0),
                                                 ("gemma2_local_attention", 4095, 0)])
def test_causal_and_window_masks_are_the_bands_they_name(tmp_path, name, before, after):
    """The same skip, the same counts (H, M, FLOPs as expressions), the same roles, the same chain of
    scores for the Hopper kernel, which takes both alike."""
    files = (written(tmp_path, shipped(name), "mask.yaml"), written(tmp_path, as_band(name, before, after)))
    mask, band = (compile_data(load_file(Path(f)), source=f) for f in files)
    a, b = (schedule(d, d.kernels[0], "smem") for d in (mask, band))
    assert (a.skip.before, a.skip.after) == (b.skip.before, b.skip.after) == (before, after)
    assert skip_extent(a) == skip_extent(b)
    ca, cb = level_cost(a), level_cost(b)
    assert (ca.transfers, ca.memory, ca.flops) == (cb.transfers, cb.memory, cb.flops)
    assert interface(mask).band == interface(band).band
    chains = [hopper.scores(configure_kernels(f, H100, sized=False)) for f in files]
    assert [(o.window, o.right) for o in chains[0].ops] == [(o.window, o.right) for o in chains[1].ops]
    assert chains[1].causal and chains[1].window == chains[0].window and chains[1].right == 0
    assert hopper.realisable(configure_kernels(files[1], H100, sized=False)) is None


def test_a_band_after_its_query_runs_on_the_hopper_kernel(tmp_path):
    """The kernel walks a tile from its first row's first key to its last row's last (RIGHT past the
    diagonal) and masks the band's two edges, as the chain reads the mask."""
    c = configure_kernels("band_attention", H100, sized=False)
    chain = hopper.scores(c)
    assert (chain.causal, chain.window, chain.right) == (False, 257, 256)
    assert hopper.realisable(c) is None and hopper.band_walk(False, chain) == (256, 256)
    g = generate("band_attention", "h100")
    assert g.backend == "hopper"
    assert "\nRIGHT = 256  #" in g.source and "\nLEFT = 256  #" in g.source
    assert "s = _attn_band(s, cols, rows - 257, gl.minimum(rows + 256, size_x - 1))" in g.source
    ahead = generate(written(tmp_path, banded(8, None)), "h100")      # every key after: a left edge alone
    assert "\nRIGHT = -1  #" in ahead.source and "\nLEFT = 8  #" in ahead.source
    assert "s = _attn_band(s, cols, rows - 9, size_x - 1)" in ahead.source
    causal = generate("causal_attention", "h100").source
    assert "\nRIGHT = 0  #" in causal and "s = _attn_keep(s, cols, gl.minimum(rows, size_x - 1))" in causal


@settings(max_examples=60, deadline=None)
@given(rows=st.sampled_from([64, 128, 192]), chunk=st.sampled_from([64, 128]), seq=st.integers(1, 2000),
       left=st.integers(-1, 700), right=st.integers(-1, 700))
def test_the_hopper_models_band_walk_is_the_chunks_a_block_sees(rows, chunk, seq, left, right):
    """_causal_tiles against brute force: a block streams every chunk holding a key one of its rows sees
    (its rows past the queries' end included: the kernel computes and clips them), and runs the masked
    step on every chunk some row sees in part or that runs past the keys, its first chunk included."""
    blocks = -(-seq // rows)
    walked = masked = 0
    for b in range(blocks):
        row0, last = b * rows, b * rows + rows - 1
        lo = 0 if left < 0 else max(row0 - left, 0)
        hi = seq - 1 if right < 0 else min(last + right, seq - 1)
        seen = range(lo // chunk, hi // chunk + 1)
        walked += len(seen)
        for j in seen:
            keys = range(j * chunk, (j + 1) * chunk)
            whole = keys[-1] < seq and all((left < 0 or k >= r - left) and (right < 0 or k <= r + right)
                                           for r in (row0, last) for k in (keys[0], keys[-1]))
            masked += not whole
    assert band_walk._causal_tiles(rows, chunk, seq, seq, left, right) == pytest.approx((walked / blocks,
                                                                                       masked / blocks))


def test_analyze_says_what_a_band_skips():
    a = analyze("band_attention", "h100")
    assert a.kernels[0].block_skipping == ("Sb: group of q streams x from the chunk of its first row's first x "
                                           "(256 before a row's own) to the chunk of its last row's last x "
                                           "(256 after a row's own)")


def test_masks_along_the_same_axes_narrow_the_band():
    """A causal mask beside a band of 5 before and 9 after: the block stops at its diagonal."""
    data = banded(5, 9)
    data["ops"].insert(2, {"name": "Sc", "primitive": "causal_mask", "inputs": ["Sb"], "query": "q", "key": "x",
                           "output": ["q", "x"]})
    data["ops"][3]["inputs"] = ["Sc", "V"]
    d = compile_data(data, source="b.yaml")
    skip = schedule(d, d.kernels[0], "smem").skip
    assert (skip.mask.name, skip.before, skip.after) == ("Sb", 5, 0)
    assert interface(d).band == Band(5, 0)


# -- the model (against the element-level simulation: tests/property/test_oracle.py) ------------------------

SIDES = st.one_of(st.none(), st.integers(0, 9))


def test_band_attentions_streamed_keys_at_its_defaults():
    """q = 8192, g = 64, s = 16: a group streams 64 + 2 x 256 keys, 320 to 512 in the four groups at
    each end (the doc's 20.6 M values of H, 2.37 GFLOP)."""
    d = compile_data(shipped("band_attention"), source="b.yaml")
    sched = schedule(d, d.kernels[0], "smem")
    g, s = sched.partition.symbols
    q = next(sym for sym in d.size_symbols if sym.name == "q")
    mean = skip_extent(sched, ragged=False).subs({q: 8192, g: 64, s: 16})     # the whole tiles' form
    assert mean * 128 == 128 * 576 - 2 * (256 + 192 + 128 + 64)
    dim = next(sym for sym in d.size_symbols if sym.name == "d")
    cost = level_cost(sched)
    assert cost.transfers.subs({q: 8192, dim: 128, g: 64, s: 16}) == 2 * 8192 * 128 + 2 * 128 * mean * 128
    assert cost.flops["tensor"].subs({q: 8192, dim: 128, g: 64, s: 16}) == 4 * 128 * 64 * mean * 128
    assert pairs(8192, 8192, Band(256, 256)) == 8192 * 513 - 256 * 257


def test_the_fewest_transfers_napkin_finds_are_the_brute_force_minimum():
    """H* at the SMEM's limit on an H100, by napkin's integer search (the classic rule's optimum), against
    every tile pair the divisors allow: g_q a multiple of wgmma's m (64), dividing q or not (a band over one
    sequence is counted exactly for a ragged last group), s_x one of its k (16) dividing g_q (a band's
    blocks align with the groups), the bytes held within the limit."""
    a = analyze("band_attention", "h100")
    rule, level = a.kernels[0].classic_rule, a.kernels[0].levels[-1]
    d = compile_data(shipped("band_attention"), source="b.yaml")
    cost = level_cost(schedule(d, d.kernels[0], "smem"))
    g, s = schedule(d, d.kernels[0], "smem").partition.symbols
    sizes = {sym: {"q": 8192, "d": 128}[sym.name] for sym in d.size_symbols}
    found = {}
    for g_q in range(64, 8193, 64):
        for s_x in range(16, g_q + 1, 16):
            if g_q % s_x == 0:
                v = cost.evaluate({**sizes, g: g_q, s: s_x})
                if v["memory_bytes"] <= level.memory_limit_bytes:
                    found[g_q, s_x] = v["transfer_bytes"]
    best = min(found.values())
    assert rule.optimal_transfer_bytes == best
    assert found[rule.optimal_tiles["g_q"], rule.optimal_tiles["s_x"]] == best
    assert best < min(found[t] for t in found if t[0] < max(k[0] for k in found))   # the largest group wins


# -- the pairs a band attends ---------------------------------------------------------------------------

@settings(max_examples=200, deadline=None, derandomize=True)
@given(seq_q=st.integers(1, 300), seq_k=st.integers(1, 300), before=SIDES | st.integers(0, 400),
       after=SIDES | st.integers(0, 400))
def test_a_band_attends_the_pairs_it_sees(seq_q, seq_k, before, after):
    """Brute force over the (query, key) grid, top-left aligned, rectangles too; FlashAttention's half for
    a causal mask alone, every pair without one."""
    i, j = np.arange(seq_q)[:, None], np.arange(seq_k)[None, :]
    seen = np.ones((seq_q, seq_k), dtype=bool)
    seen &= True if before is None else j >= i - before
    seen &= True if after is None else j <= i + after
    band = Band(before, after)
    want = seq_q * seq_k / 2 if (before, after) == (None, 0) else float(seen.sum())
    assert pairs(seq_q, seq_k, band) == want
    assert pairs(seq_q, seq_k, None) == seq_q * seq_k
