"""The by-size table of the Hopper attention kernel (analyzer.config.hopper's model at a grid of problem
sizes), and the tables a generated module carries: per head dim the configuration a call launches at
each grid point, per consumer count its registers.

The grid is analyzer.config.by_size's with two axes of its own (HopperTable): key lengths from 64, and
the queries a key; each unmasked cell ranks its configurations over the calls that read it (SPAN). The
generated module's _sized reads it as `table_point` says (analyzer.codegen.pymodule.sized_helpers).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from analyzer.common.errors import NapkinError
from analyzer.config.band_walk import band_walk
from analyzer.config.by_size import INSTANCES, LENGTHS, nearest
from analyzer.config.hopper import (
    CHUNKS,
    STAGES,
    HopperConfig,
    HopperParams,
    candidates,
    configuration,
    ordered,
    priced,
    ranked_priced,
    register_cap,
    registers_per_consumer,
    unmasked_parts,
    unmasked_time,
)
from analyzer.config.scores import SOFTMAX, Scores
from analyzer.hardware import Profile

# The Hopper attention table's grid: analyzer.config.by_size's, with key lengths from 64 (cross-attention's
# keys are often a text encoder's few: CLIP's 77) and a third axis, the queries a key (RATIOS), unmasked only.
# A call's sizes fix a block's work (its chunks: the keys) and the blocks (instances x query blocks), but the
# square problem with as many keys and query rows cannot tell 4096 queries against 77 keys (every block's rows
# full) from 53 x 20 problems of 77 queries each (a 128-row block half empty): at that call the square's cell
# launched 256-row blocks, 1.5x slower than 128-row ones on an H200 (bench/results/hopper_sweep_h200_real.md).
KEY_LENGTHS = (64, 128, *LENGTHS)
RATIOS = (1, 4, 16, 64)         # queries over keys; a call below 1 reads the square problem


@dataclass(frozen=True)
class HopperTable:
    """The model's choice at each point of the table's grid (KEY_LENGTHS x ratios x INSTANCES), for one
    head dim. A point (keys L, ratio r, rows n) is the problem of L keys and r L queries with as many query
    rows as n square problems of L (n / r instances): where r = 1, analyzer.config.by_size's square problem."""

    lengths: tuple[int, ...]
    ratios: tuple[int, ...]                     # (1,) under a mask: the square problem alone
    instances: tuple[int, ...]
    configs: tuple[HopperConfig, ...]           # the distinct choices, in grid order
    cells: tuple[tuple[tuple[int, ...], ...], ...]   # [length][ratio][instances] -> index into configs

    def at(self, length: float, instances: float, ratio: float = 1.0) -> HopperConfig:
        """The cell a call reads (`table_point`): `length` its keys in whole chunks, `instances` its query
        rows in square problems of that length, `ratio` its queries over its keys."""
        return self.configs[self.cells[nearest(self.lengths, length)][nearest(self.ratios, ratio)]
                            [nearest(self.instances, instances)]]


def table_point(seq_q: float, seq_k: float, instances: float) -> tuple[float, float, float]:
    """Where a call reads the table: its keys in whole chunks of the smallest s_x (a block streams 77 keys as
    one chunk of 128 or two of 64, never as 64), its query rows in square problems of that length, and its
    queries a key. The generated module's _sized computes the same (analyzer.codegen.pymodule)."""
    length = max(math.ceil(seq_k / CHUNKS[0]), 1) * CHUNKS[0]
    return length, instances * seq_q / length, seq_q / length


# log2 offsets from a cell's instances: the calls that read the cell (nearest in log2) span half an octave
# either side, and the blocks they fill, so the waves' tails, change within it
SPAN = (-0.5, -0.25, 0.0, 0.25, 0.5)


def _cell_ranked(profile: Profile, costed: list[tuple[HopperConfig, tuple[float, float], tuple]], length: int,
                 ratio: int, instances: int, *, causal: bool, params: HopperParams,
                 scores: Scores) -> list[tuple[float, HopperConfig]]:
    """The configurations ranked at one grid point. Unmasked, by their time over the fastest's, averaged
    over the calls that read the cell (SPAN): ranked at its point alone, a cell launches what fills that
    point's waves best, and a call a quarter-octave away may leave one of those waves a tail. On an H200,
    SDXL's cross-attention (4096 x 77, 20 heads) read a cell where 256-row blocks filled two waves whole; it
    fills three with 2.4 waves of work, and ran them 1.5x slower than 128-row blocks. Under a mask, at the
    point alone (the busiest block's load is the mask's walk, not a wave count)."""
    seq_q, seq_k, n = point_problem(length, ratio, instances)
    if band_walk(causal, scores) is not None:
        return ranked_priced(profile, costed, seq_q=seq_q, seq_k=seq_k, instances=n, causal=causal, params=params,
                             scores=scores)
    rows = [instances * 2.0 ** x for x in SPAN]      # query rows, in square problems of `length`
    times = []
    for c, chunk, _ in costed:
        parts = unmasked_parts(profile, c, chunk[0], seq_q=seq_q, seq_k=seq_k, params=params)
        times.append([unmasked_time(profile, parts, r / ratio) for r in rows])
    fastest = [min(at) for at in zip(*times)]
    return ordered([(sum(t / f for t, f in zip(ts, fastest, strict=True)) / len(rows), c, tie)
                    for (c, _, tie), ts in zip(costed, times, strict=True)])


def point_problem(length: int, ratio: int, instances: int) -> tuple[int, int, int]:
    """The problem a grid point ranks at: (queries, keys, instances), `instances` rows of square problems
    of `length` spread over queries `ratio` times as many (at least one instance)."""
    return length * ratio, length, max(instances // ratio, 1)


def hopper_table(profile: Profile, head_dim: int, dtype: str, *, causal: bool,
                 params: HopperParams | None = None, scores: Scores = SOFTMAX,
                 value_dim: int | None = None) -> HopperTable:
    """The first of `_cell_ranked` at every grid point (HopperTable)."""
    params = params or HopperParams.of(profile)
    costed = priced(profile, head_dim, dtype, causal, params, scores, value_dim)    # once, not at each point
    ratios = table_ratios(causal, scores)
    configs: list[HopperConfig] = []
    cells = []
    for length in KEY_LENGTHS:
        plane = []
        for ratio in ratios:
            row = []
            for instances in INSTANCES:
                first = _first(_cell_ranked(profile, costed, length, ratio, instances, causal=causal, params=params,
                                            scores=scores), profile, head_dim)
                if first not in configs:
                    configs.append(first)
                row.append(configs.index(first))
            plane.append(tuple(row))
        cells.append(tuple(plane))
    return HopperTable(KEY_LENGTHS, ratios, INSTANCES, tuple(configs), tuple(cells))


def table_ratios(causal: bool, scores: Scores) -> tuple[int, ...]:
    """The table's queries-a-key axis: RATIOS, or under a mask (a band's tiles depend on where the queries
    sit against the keys, which a ratio does not say) the square problem's alone."""
    return (1,) if band_walk(causal, scores) is not None else RATIOS


def chosen_at(profile: Profile, head_dim: int, dtype: str, *, causal: bool, length: float, instances: float,
              ratio: float = 1.0, params: HopperParams | None = None, scores: Scores = SOFTMAX,
              value_dim: int | None = None) -> HopperConfig:
    """The configuration hopper_table's cell nearest (`length`, `ratio`, `instances`) holds, computed
    alone (`_cell_ranked`'s first)."""
    params = params or HopperParams.of(profile)
    ratios = table_ratios(causal, scores)
    costed = priced(profile, head_dim, dtype, causal, params, scores, value_dim)
    ranking = _cell_ranked(profile, costed, KEY_LENGTHS[nearest(KEY_LENGTHS, length)], ratios[nearest(ratios, ratio)],
                           INSTANCES[nearest(INSTANCES, instances)], causal=causal, params=params, scores=scores)
    return _first(ranking, profile, head_dim)


def _first(ranking: list[tuple[float, HopperConfig]], profile: Profile, head_dim: int) -> HopperConfig:
    if not ranking:
        raise NapkinError(f"no configuration of the Hopper kernel fits head dim {head_dim} on {profile.name}",
                          file=profile.source, field="levels.smem", hint="use --backend triton")
    return ranking[0][1]


def one_config_tables(profile: Profile, head_dim: int, config: HopperConfig) -> HopperTables:
    """Tables that launch `config` at every size (a named configuration)."""
    table = HopperTable(KEY_LENGTHS, (1,), INSTANCES, (config,),
                        tuple(((0,) * len(INSTANCES),) for _ in KEY_LENGTHS))
    n = config.warpgroups
    return HopperTables({head_dim: table}, {n: register_cap(profile, n)}, {n: registers_per_consumer(profile, n)},
                        recomputed=frozenset() if config.held else frozenset({(head_dim, n, config.chunk)}))


@dataclass(frozen=True)
class HopperTables:
    """What the generated Hopper module carries: per head dim its by-size table, and per number of
    consumer warpgroups the register cap at launch and each consumer's registers."""

    tables: dict[int, HopperTable]
    register_cap: dict[int, int]
    consumer_registers: dict[int, int]
    scores: Scores = SOFTMAX          # what the consumers do between the contractions (the diagram's)
    value_dim: int | None = None      # V's head dim where it is not the queries' (one for every table)
    # (head dim, consumer warpgroups, s_x) at which the kernel recomputes the ops' vectors a chunk, where
    # held ones do not fit the registers (HopperConfig.held; stages, overlap and schedule do not change it)
    recomputed: frozenset[tuple[int, int, int]] = frozenset()


_TABLES: dict[tuple, HopperTables] = {}
_TABLES_MAX = 64


def hopper_tables(profile: Profile, head_dims: tuple[int, ...], dtype: str, *, causal: bool,
                  scores: Scores = SOFTMAX, value_dim: int | None = None) -> HopperTables:
    """`value_dim`: V's head dim where the diagram gives it an axis of its own (one for every head dim).

    Remembered by the profile's content and the arguments (a second ranking of each head dim's legal
    configurations at every point of the tables' grid): attention, mha and gqa ask for the same tables,
    and so does every command and test that generates one of them again in a process. Callers read the
    tables; none changes them."""
    key = (profile.model_dump_json(), tuple(head_dims), dtype, causal, scores, value_dim)
    found = _TABLES.get(key)
    if found is None:
        if len(_TABLES) >= _TABLES_MAX:
            _TABLES.clear()
        found = _TABLES[key] = _hopper_tables(profile, tuple(head_dims), dtype, causal=causal, scores=scores,
                                              value_dim=value_dim)
    return found


def _hopper_tables(profile: Profile, head_dims: tuple[int, ...], dtype: str, *, causal: bool,
                   scores: Scores, value_dim: int | None) -> HopperTables:
    params = HopperParams.of(profile)
    tables = {d: hopper_table(profile, d, dtype, causal=causal, params=params, scores=scores, value_dim=value_dim)
              for d in head_dims}
    # every warpgroup count a legal configuration has, not only the tables': config= may launch any
    masked = band_walk(causal, scores) is not None
    used = sorted({c.warpgroups for d in head_dims for c in candidates(profile, d, dtype, masked,
                                                                         value_dim=value_dim, scores=scores)})
    recomputed = frozenset((d, n, chunk) for d in head_dims for n in used for chunk in CHUNKS
                           if not configuration(profile, d, dtype, warpgroups=n, chunk=chunk, stages=STAGES[0],
                                                overlap="intra", causal=masked, value_dim=value_dim,
                                                scores=scores).held)
    return HopperTables(tables, {n: register_cap(profile, n) for n in used},
                        {n: registers_per_consumer(profile, n) for n in used}, scores, value_dim, recomputed)


__all__ = ["KEY_LENGTHS", "RATIOS", "SPAN", "HopperTable", "HopperTables", "chosen_at", "hopper_table", "hopper_tables",
           "one_config_tables", "point_problem", "table_point", "table_ratios"]
