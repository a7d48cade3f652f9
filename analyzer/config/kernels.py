"""The configured kernels of a diagram: what `napkin kernel` generates, before any backend renders it.

    diagram (compiled from its file once) -> its element type (element_type) -> weave over batch
    (and heads) -> compile the weave
    -> schedule of each kernel at SMEM -> configuration per head dimension (choose; by problem size,
    by_size) -> plan (plan)

Each backend (analyzer.codegen) renders the same `Configured`; the model's prediction of a launched
kernel (analyzer.config.predict) and napkin calibrate read it too, so neither needs a backend.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass, field, replace

import sympy

from analyzer import hardware
from analyzer.common.errors import NapkinError
from analyzer.common.expr import symbol
from analyzer.config.allocation import allocation, register_bytes
from analyzer.config.by_size import SizeTable, grid_point, instance_axes, length_axes, size_table
from analyzer.config.choose import (
    RESERVE_REGISTERS,
    TILE_MIN,
    Choice,
    first_of,
    legal,
    named,
    rank_at,
    smem_limit,
)
from analyzer.config.configure import names_of, schedule_of
from analyzer.config.element_type import kernel_element_type
from analyzer.config.plan import KernelPlan, next_pow2, plan, prev_pow2
from analyzer.diagram.compiled import Diagram
from analyzer.diagram.interface import Attention, Plain, interface
from analyzer.diagram.weave import outer_tiles, weave_diagram
from analyzer.hardware import Profile
from analyzer.model.analysis import TermModel, analyze, load
from analyzer.model.cost import level_cost
from analyzer.model.fusion import schedule

HEAD_DIMS = (64, 128, 256)      # configured head dims besides the diagram's own ("256 where it fits")


PLACEHOLDER_TILE = 64     # a tile size every partition takes, for a plan whose tiles are not used
ANALYZED_WARPS = (4, 8, 16)   # one to four warpgroups: the warps a kernel outside Section 5's model may take


@dataclass(frozen=True)
class KernelConfigs:
    """One kernel of the diagram, its plan, and its configuration per head dim (None: one for all)."""

    plan: KernelPlan
    choices: dict[int | None, Choice]
    key_axis: str | None            # the whole axis the configurations are keyed by (the head dim)
    tables: dict[int | None, SizeTable] = field(default_factory=dict)   # by problem size, per key

    @property
    def every_choice(self) -> list[Choice]:
        """Each configuration the kernel may launch: per key, and in the keys' tables."""
        return [*self.choices.values(), *(c for t in self.tables.values() for c in t.configs)]

    def choice(self, key: int | None) -> Choice:
        """The configuration for head dim `key` at the diagram's default sizes (the only one of a
        kernel not keyed by head dim)."""
        return self.choices.get(key) or self.choices.get(None) or next(iter(self.choices.values()))

    def choice_for(self, key: int | None, length: float, instances: float = 1) -> Choice:
        """The configuration the generated wrapper launches for head dim `key` at a call of this length
        and these instances (analyzer.config.by_size)."""
        table = self.tables.get(key)
        return table.at(length, instances) if table is not None else self.choice(key)


@dataclass(frozen=True, kw_only=True)
class Configured:
    """A diagram's kernels configured for one GPU and element type."""

    diagram: Diagram                # weaved
    source_file: str
    gpu: str
    dtype: str
    roles: Attention | Plain
    kernels: tuple[KernelConfigs, ...]
    sm_count: int = 1               # the profile's SMs: one wave of blocks (plan.band_rows)
    note: str | None = None         # the element type generated where the file declares another
    value_dim: int | None = None    # attention with a value axis of its own: the value dim configured

    def tiles_for(self, key: int | None) -> dict[str, int]:
        """Every kernel's tiles for head dim `key` at the diagram's default sizes (the weaved axes take
        one index a block)."""
        tiles = outer_tiles(self.diagram, self.roles.outer)
        for k in self.kernels:
            tiles.update(k.choice(key).tiles)
        return tiles

    def launched(self, sizes: dict[str, int]) -> list[Choice]:
        """Each kernel's configuration the wrapper launches at `sizes` (size symbols of the weaved
        diagram; its defaults fill the rest): the by-size table's where the kernel has one."""
        at = self.axis_sizes(sizes)
        length, instances = grid_point(self.roles, [at(a) for a in length_axes(self.diagram, self.roles)],
                                       math.prod(map(at, instance_axes(self.roles))))
        return [k.choice_for(self.key_at(sizes), length, instances) for k in self.kernels]

    def key_at(self, sizes: dict[str, int]) -> int | None:
        """The head dim at `sizes`: what the kernels' configurations are keyed by (None: not attention)."""
        return self.axis_sizes(sizes)(self.roles.head_dim) if isinstance(self.roles, Attention) else None

    def axis_sizes(self, sizes: dict[str, int]):
        """axis -> its size at `sizes` (size symbols; the diagram's defaults fill the rest)."""
        d = self.diagram
        values = {**{s.name: int(v) for s, v in d.defaults.items()}, **sizes}
        return lambda axis: int(d.size(axis).subs({s: values[s.name] for s in d.size(axis).free_symbols}))

    @property
    def configs(self) -> list[dict]:
        rows = []
        for k in self.kernels:
            for key, c in k.choices.items():
                rows.append({"kernel": k.plan.name, "head_dim": key, **c.tiles,
                             "num_warps": c.num_warps, "num_stages": c.num_stages, "source": c.source})
        return rows


def configure_kernels(diagram: str | Diagram, gpu: str | Profile, *, dtype: str | None = None,
                      config: str | None = None, sets: dict[str, int] | None = None,
                      sized: bool = True, ranked: bool = True, fp8: bool = False) -> Configured:
    """The kernels of `diagram` (a name, a file, or the diagram as compiled from its file) configured
    for `gpu`; `dtype`: fp16 or bf16, default the diagram's own (analyzer.config.element_type: a type
    the kernel cannot honour is refused; `note` says where it is another than the file declares).
    `sized`: each kernel also takes a table of configurations by problem size, for a wrapper that
    chooses per call (analyzer.config.by_size). `ranked` False: the kernels' structure alone (plan,
    roles, sizes), each with a placeholder configuration, for a caller that launches the Hopper kernel,
    whose configuration is its own (analyzer.config.launch). `fp8`: the caller generates FP8 kernels (the
    Hopper attention family), so fp8 is a type it takes."""
    diagram = load(diagram)          # read once: as the file declares it, then in the kernel's type
    element = kernel_element_type(diagram, dtype, fp8=fp8)
    dtype = element.dtype
    profile = hardware.load(gpu)
    profile.check_dtype(dtype)
    sets = sets or {}
    base = load(diagram, dtype=dtype)
    roles = interface(base)
    woven = weave_diagram(base, roles.outer)
    kernels = tuple(_configure(base, woven, k.name, profile, roles, config, sets, dtype, sized=sized,
                               ranked=ranked) for k in woven.kernels)
    return Configured(diagram=woven, source_file=base.source, gpu=profile.name, dtype=dtype, roles=roles,
                      kernels=kernels, sm_count=profile.sm_count, note=element.note,
                      value_dim=_value_dim(base, roles, sets))


def _value_dim(d: Diagram, roles, sets: dict[str, int]) -> int | None:
    """The value head dim the configurations were chosen at, where the values have an axis of their own
    (multi-head latent attention: d = 192, e = 128): `--set` or the diagram's default."""
    if not isinstance(roles, Attention) or roles.value_dim == roles.head_dim:
        return None
    size = d.size(roles.value_dim).subs({**d.defaults, **{s: sets[s.name] for s in d.size_symbols
                                                           if s.name in sets}})
    return int(size) if size.is_number else None


def _configure(base: Diagram, woven: Diagram, kernel: str, profile: Profile, roles, config, sets,
               dtype, *, sized: bool, ranked: bool = True) -> KernelConfigs:
    s = schedule(woven, next(k for k in woven.kernels if k.name == kernel), woven.levels[-1])
    head = roles.head_dim if isinstance(roles, Attention) else None
    base_kernel = schedule(base, next(k for k in base.kernels if k.name == kernel), base.levels[-1])
    whole = [a for a in {a for n in base_kernel.arrays for a in base.arrays[n].axes}
             if a not in base_kernel.partition.group_sizes and a != base_kernel.stream_axis]
    key_axis = head if head in whole else None
    keys: list[int | None] = [None]
    if key_axis is not None:
        default = int(base.size(key_axis).subs(base.defaults))
        keys = sorted({default, *HEAD_DIMS} if key_axis not in sets else {sets[key_axis]})
    tiles = {sym.name for sym in base_kernel.partition.symbols}
    outer = {o.axis for o in roles.outer}       # weaved axes (batch, heads): sizes, never tiles
    key_symbols = {str(s) for s in base.size(key_axis).free_symbols} if key_axis else set()
    workload = sorted(k for k in sets if k in {s.name for s in woven.size_symbols} - key_symbols)
    choices: dict[int | None, Choice] = {}
    tables: dict[int | None, SizeTable] = {}
    errors = {}
    for key in keys:
        here = {k: v for k, v in sets.items() if k not in outer}
        if key is not None:
            here.update(dict.fromkeys(key_symbols, key))
        here.update(_padded_wholes(base, whole, here))
        if not ranked:        # the plan's structure needs tiles, not the fastest ones
            choices[key] = Choice(kernel, dict.fromkeys(tiles, PLACEHOLDER_TILE), 4, 2,
                                  "a placeholder: the portable kernel's configuration was not ranked")
            continue
        try:
            choices[key], table = _choice(base, woven, roles, profile, kernel, tiles, config, here,
                                          {**sets, **here}, dtype,
                                          sized=sized and not workload)
        except NapkinError as exc:
            errors[key] = exc
            continue
        if table is not None:
            tables[key] = table
    if not choices:
        raise next(iter(errors.values()))
    first = next(iter(choices.values()))
    ones = outer_tiles(woven, roles.outer)
    woven_tiles = {**first.tiles, **ones}
    p = plan(woven, s, Choice(first.kernel, woven_tiles, first.num_warps, first.num_stages,
                              first.source))
    for key, c in choices.items():
        other = plan(woven, s, Choice(c.kernel, {**c.tiles, **ones},
                                      c.num_warps, c.num_stages, c.source))
        if [(d.name, d.kind) for d in other.dims] != [(d.name, d.kind) for d in p.dims] or \
                other.grid != p.grid:
            raise NapkinError(f"kernel {kernel!r}: the configuration for {key_axis}={key} tiles the "
                              "kernel differently from the others", file=base.source,
                              hint=f"pin the head dimension with --set {key_axis}=N")
    return KernelConfigs(p, choices, key_axis, tables)


def _padded_wholes(d: Diagram, whole: list[str], sets: dict[str, int]) -> dict[str, int]:
    """The sizes of the axes a block holds whole, as the kernels hold them: a tile's extent is a power
    of two (Triton's BLOCK_D = next_power_of_2(d), CUDA's compile-time extents), so a head dim of 192
    takes the registers, SMEM and tensor-core work of 256. Configurations are chosen at these sizes,
    or one that the model says fits (counted at 192) would not fit the GPU."""
    out = {}
    for axis in whole:
        size = d.size(axis)
        if not isinstance(size, sympy.Symbol):
            continue
        value = sets.get(size.name, d.defaults.get(size))
        if value is not None and int(value) != next_pow2(int(value)):
            out[size.name] = next_pow2(int(value))
    return out


def _choice(d: Diagram, woven: Diagram, roles, profile: Profile, kernel: str, tiles: set[str], config,
            sets: dict[str, int], woven_sets: dict[str, int], dtype: str, *,
            sized: bool) -> tuple[Choice, SizeTable | None]:
    """Section 5's configuration where it applies (a streamed contraction): a named one, or the
    fastest legal one on the weaved diagram at its default sizes with `woven_sets` (batch and heads
    included), and, when `sized`, the table of the fastest per problem size (analyzer.config.by_size).
    Elsewhere napkin analyze's tiles as the kernel can hold them (_analyzed)."""
    try:
        names_of(schedule_of(d, kernel))   # a kernel Section 5 configures: its rows are grouped
    except NapkinError:
        return _analyzed(d, profile, kernel, tiles, sets, dtype), None
    if config is not None:
        return named(d, profile, kernel, tiles, config, sets, dtype), None
    options = legal(d, profile, kernel, sets, dtype)
    ones = outer_tiles(woven, roles.outer)
    sizes = {k: v for k, v in woven_sets.items() if k in {s.name for s in woven.size_symbols}}
    ranked, _ = rank_at(TermModel(woven, profile, kernel), profile, sizes, options, ones)
    table = size_table(woven, roles, profile, kernel, options, ones, sizes, ranked[0][0]) if sized else None
    return first_of(ranked, tiles, profile), table


def _analyzed(d: Diagram, profile: Profile, kernel: str, tiles: set[str], sets: dict[str, int],
              dtype: str) -> Choice:
    """The configuration of a kernel Section 5 does not configure (its first contraction's rows are not
    grouped): of the power-of-two tiles up to napkin analyze's (Triton's blocks are powers of two; at
    least 16 where a contraction takes them, as tl.dot needs) and ANALYZED_WARPS, without pipelining, those
    whose SMEM (analyzer.config.allocation) and registers (register_bytes, with the reserve, within what
    a thread of the block may have) a block holds, the one that transfers fewest bytes (napkin analyze's
    objective, Equation 4); ties go to the larger tiles (fewer chunks), then to fewer warps."""
    result = analyze(d, profile, sets=dict(sets))
    top = {k: prev_pow2(v) for k, v in next(k for k in result.kernels if k.name == kernel)
           .levels[-1].chosen.items() if k in tiles}
    s = schedule(d, next(k for k in d.kernels if k.name == kernel), d.levels[-1])
    cost = level_cost(s)
    values = {**{sym: int(v) for sym, v in d.defaults.items()},
              **{sym: int(sets[sym.name]) for sym in d.size_symbols if sym.name in sets}}
    sizes = {a: int(d.size(a).subs(values)) for a in d.axes}
    dotted = _contracted_tiles(s)
    options = [[2 ** i for i in range((min(TILE_MIN, t) if k in dotted else 1).bit_length() - 1, t.bit_length())]
               for k, t in top.items()]
    limit = smem_limit(profile)
    threads_max = profile.threads.per_block_max // profile.threads.warp_size
    best, fitting = None, 0
    for combo in itertools.product(*options):
        chosen = dict(zip(top, combo, strict=True))
        for warps in (w for w in ANALYZED_WARPS if w <= threads_max):
            c = Choice(kernel, chosen, warps, 1, "")
            p = plan(d, s, c)
            if allocation(p, sizes, stages=1, warps=warps, dtype=dtype, profile=profile).smem_bytes > limit:
                continue
            threads = warps * profile.threads.warp_size
            held = register_bytes(p, sizes, stages=1, profile=profile) / threads / 4
            if held + RESERVE_REGISTERS > registers_per_thread(profile, threads):
                continue
            fitting += 1
            moved = cost.evaluate({**values, **{symbol(k): v for k, v in chosen.items()}})["transfer_bytes"]
            key = (moved, -math.prod(combo), warps)
            if best is None or key < best[0]:
                best = (key, c)
    if best is None:
        raise NapkinError(f"kernel {kernel!r}: no power-of-two tiles up to napkin analyze's "
                          f"({', '.join(f'{k}={v}' for k, v in top.items())}) fit a block's SMEM and registers "
                          f"on {profile.name}", file=d.source, hint="pin smaller sizes with --set")
    c = best[1]
    shown = ", ".join(f"{k}={v}" for k, v in top.items())
    warps = f"{ANALYZED_WARPS[0]} to {ANALYZED_WARPS[-1]} warps"
    return replace(c, analyzed=True,
                   source=f"the fewest transfers (napkin analyze's objective) of {fitting} configurations whose "
                          f"SMEM and registers fit a block: power-of-two tiles up to napkin analyze's for "
                          f"{profile.name} ({shown}), {warps}, no pipelining (outside Section 5's model)",
                   smem_bytes=allocation(plan(d, s, c), sizes, stages=1, warps=c.num_warps, dtype=dtype,
                                         profile=profile).smem_bytes)


def registers_per_thread(profile: Profile, threads: int) -> int:
    """The registers a thread of a block of `threads` may have: its own limit, and its share of the
    registers a block may use."""
    r = profile.registers
    return min(r.per_thread_max, min(r.per_block_max, r.per_sm) // threads)


def _contracted_tiles(s) -> set[str]:
    """The partition symbols of axes a contraction of schedule `s` takes a tile of (tl.dot: 16 at least)."""
    sizes = {**s.partition.group_sizes, **({s.partition.stream[0]: s.partition.stream[1]} if s.partition.stream
                                            else {})}
    return {sizes[a].name for op in s.ops if op.primitive.contraction
            for axes in op.applied.inputs for a in axes if a in sizes}
