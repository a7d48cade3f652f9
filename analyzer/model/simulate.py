"""A brute-force oracle: execute a kernel's tiled schedule on concrete sizes and count everything.

For every group (one thread block) the simulator writes out the schedule as a trace of function steps:
the head ops once, the body ops once per chunk of the streamed axis (skipping chunks a mask
empties), the tail ops once. Each step reads and writes concrete elements. From the trace alone it
derives when each element must be on chip: an input from the step before its first read (from the
start of the loop, if a loop reads it in every chunk) to the step before its last read; a computed
element from its first write to the step before its last read, and until it is saved if it is an output;
an accumulator and its auxiliary values from the start of the loop. Loads, saves, the peak resident
size of a group and the FLOPs are counted element by element.

It shares no counting code with analyzer.model.cost, only the schedule (which ops run where) and each
primitive's FLOPs per tile, so that tests can hold the symbolic expressions against it.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass

import sympy

from analyzer.common.dtypes import bytes_per_value
from analyzer.common.expr import at
from analyzer.diagram.primitives import PIPELINES
from analyzer.model.fusion import Schedule


@dataclass(frozen=True)
class Simulation:
    loads: int
    saves: int
    load_bytes: int
    save_bytes: int
    groups: int
    peak: int                  # largest number of values one group holds at once
    peak_bytes: int
    flops: dict[str, int]

    @property
    def transfers(self) -> int:
        return self.loads + self.saves

    @property
    def transfer_bytes(self) -> int:
        return self.load_bytes + self.save_bytes


def _ranges(extent: int, tile: int) -> list[range]:
    return [range(start, min(start + tile, extent)) for start in range(0, extent, tile)]


def simulate(schedule: Schedule, sizes: dict[sympy.Symbol, int],
             tiles: dict[sympy.Symbol, int]) -> Simulation:
    """Run the schedule with axis sizes from `sizes` and partition sizes from `tiles`."""
    d = schedule.diagram
    extent = {a: int(at(d.size(a), sizes)) for a in d.axes}
    part = schedule.partition
    grouped = [(a, tiles[s]) for a, s in part.group]
    b, s_b = (part.stream[0], tiles[part.stream[1]]) if part.stream else (None, None)
    reducers = {r.op.name: r for r in schedule.reducers}
    dtype = {n: d.arrays[n].dtype for n in d.arrays}
    for r in schedule.reducers:
        dtype[r.op.name] = r.op.accumulate
        dtype[f"{r.op.name}.aux"] = r.op.accumulate

    totals = {"loads": 0, "saves": 0, "load_bytes": 0, "save_bytes": 0}
    flops = dict.fromkeys(PIPELINES, 0)
    peak = peak_bytes = groups = 0
    group_ranges = [_ranges(extent[a], t) for a, t in grouped]
    for combo in itertools.product(*group_ranges):
        groups += 1
        domain = {a: range(extent[a]) for a in d.axes}
        domain.update({a: r for (a, _), r in zip(grouped, combo, strict=True)})
        steps = [(op, domain) for op in schedule.head]
        loop_start = len(steps)
        if b is not None:
            skip = schedule.skip
            band_end = (domain[skip.query].stop - 1 + int(skip.after)) if skip and skip.after is not None \
                else None    # the last key the group's last query sees
            band_start = (domain[skip.query].start - int(skip.before)) if skip and skip.before is not None \
                else None    # the first key its first query sees
            for chunk in _ranges(extent[b], s_b):
                if band_end is not None and chunk.start > band_end:
                    continue  # every key in this chunk is after every query's band (its diagonal): masked
                if band_start is not None and chunk.stop <= band_start:
                    continue  # every key in this chunk is before every query's window: masked
                steps += [(op, {**domain, b: chunk}) for op in schedule.body]
        steps += [(op, domain) for op in schedule.tail]

        reads: dict[tuple, list[int]] = {}
        writes: dict[tuple, list[int]] = {}
        last_step = {op.name: i for i, (op, _) in enumerate(steps, start=1)}
        for i, (op, dom) in enumerate(steps, start=1):
            for name in op.inputs:
                for idx in _elements(d.arrays[name].axes, dom):
                    reads.setdefault((name, idx), []).append(i)
            out_axes = d.arrays[op.name].axes
            streamed = op in schedule.body and op.name in reducers
            for idx in _elements(out_axes, dom):
                writes.setdefault((op.name, idx), []).append(i)
                if streamed:
                    reads.setdefault((op.name, idx), []).append(i)   # read-modify-write
            if streamed and reducers[op.name].accumulator.aux_per_row:
                r = reducers[op.name]
                for idx in _elements(r.rows, dom):
                    for k in range(r.accumulator.aux_per_row):
                        key = (f"{op.name}.aux", (*idx, k))
                        reads.setdefault(key, []).append(i)
                        writes.setdefault(key, []).append(i)
            step_extent = {a: len(rng) for a, rng in dom.items()}.__getitem__
            for pipe, n in schedule.step_flops(op, step_extent).items():
                flops[pipe] += int(n)
            if not streamed or i == last_step[op.name]:
                for pipe, n in schedule.final_flops(op, step_extent).items():
                    flops[pipe] += int(n)   # once, when the output is complete
            if streamed:
                for pipe, n in schedule.chunk_flops(reducers[op.name], step_extent).items():
                    flops[pipe] += int(n)

        n_gaps = len(steps) + 1
        delta_values = [0] * (n_gaps + 1)
        delta_bytes = [0] * (n_gaps + 1)
        body_names = {op.name for op in schedule.body}
        for key in set(reads) | set(writes):
            name, _ = key
            r, w = reads.get(key, []), writes.get(key, [])
            base = name.split(".aux")[0]
            if base in schedule.resident:
                birth, death = 0, n_gaps - 1
            elif not w:     # loaded
                birth, death = min(r) - 1, max(r) - 1
                if b is not None and b not in d.arrays[name].axes and \
                        any(steps[i - 1][0].name in body_names for i in r):
                    birth = min(birth, loop_start)      # loop-invariant: loaded before the loop
                totals["loads"] += 1
                totals["load_bytes"] += bytes_per_value(dtype[name])
            else:
                birth = min(w)
                if name.endswith(".aux") or (name in reducers and b is not None):
                    birth = loop_start                  # accumulators start before the loop
                later = [i for i in r if i > min(w)] if not name.endswith(".aux") else r
                death = max(later) - 1 if later else birth - 1
                if name in schedule.saves:
                    death = max(death, max(w))
                    totals["saves"] += 1
                    totals["save_bytes"] += bytes_per_value(d.arrays[name].dtype)
            if birth > death:
                continue
            delta_values[birth] += 1
            delta_values[death + 1] -= 1
            size = bytes_per_value(dtype[name])
            delta_bytes[birth] += size
            delta_bytes[death + 1] -= size
        live = live_bytes = 0
        for gap in range(n_gaps):
            live += delta_values[gap]
            live_bytes += delta_bytes[gap]
            peak, peak_bytes = max(peak, live), max(peak_bytes, live_bytes)
    return Simulation(totals["loads"], totals["saves"], totals["load_bytes"], totals["save_bytes"],
                      groups, peak, peak_bytes, {p: v for p, v in flops.items() if v})


def _elements(axes: tuple[str, ...], domain: dict[str, range]):
    return itertools.product(*(domain[a] for a in axes))
