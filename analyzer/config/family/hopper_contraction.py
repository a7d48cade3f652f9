"""The Hopper contraction family: the warp-specialised persistent kernels of
analyzer.codegen.hopper.contraction on a GPU with warpgroup MMA and TMA, for diagrams whose every kernel
is a streamed contraction (or several sharing their first operand) with elementwise ops after it
(analyzer.config.contraction.realise), or a chain of two, the second fed by the first
(analyzer.config.chain.realise_chain: a fused MLP, linear attention queries first). Their
configurations, legality and models are analyzer.config.contraction's and analyzer.config.chain's; the
fit of both is a profile's `calibration.contraction`.
"""

from __future__ import annotations

import math
import time

from analyzer.common.errors import NapkinError
from analyzer.config import chain as chains
from analyzer.config import contraction as contractions
from analyzer.config.by_size import LENGTHS, length_axes, shaped_grid
from analyzer.config.chain import Chain, realise_chain
from analyzer.config.contraction import (
    WARPGROUPS,
    ContractionConfig,
    ContractionParams,
    Counts,
    Structure,
    Table,
    Tables,
    chained,
    configuration,
    counted,
    hopper_capable,
    parse_label,
    realise,
    register_cap,
    size_table,
)
from analyzer.config.family.base import Accuracy, Expected, Family, Launch
from analyzer.config.kernels import Configured, configure_kernels
from analyzer.config.ranking import ContractionRow, Sweep
from analyzer.config.warp_specialised import registers_per_consumer
from analyzer.diagram.compiled import Diagram
from analyzer.diagram.interface import Attention
from analyzer.hardware import Profile, contraction_fit
from analyzer.model.analysis import TermModel, partition_symbols, resolve_sizes

DTYPES = ("fp16", "bf16")       # wgmma's 16-bit inputs (FP8 is another kernel)


class HopperContraction(Family):
    name = "hopper-contraction"
    title = "the Hopper contraction kernel"
    fit = "contraction"
    other_fits = ("chain",)      # its chain kernel's (analyzer.config.chain), carried from "contraction" without it
    sized = True

    def preferred_on(self, profile):
        return hopper_capable(profile)

    def take(self, diagram, profile, *, dtype, config, sets, tables):
        if not hopper_capable(profile):
            return f"{profile.name} has no warpgroup MMA and TMA (the Hopper contraction kernel needs sm_90)"
        if config:
            return f"--config {config} names a configuration of Section 5's attention model"
        c = configure_kernels(diagram, profile, dtype=dtype, config=None, sets=sets, sized=False, ranked=False)
        if isinstance(c.roles, Attention):
            return "attention is the Hopper attention kernel's"
        if c.dtype not in DTYPES:
            return f"the Hopper contraction kernel takes {' or '.join(DTYPES)}, not {c.dtype}"
        pinned = sorted(set(sets) & set(partition_symbols(c.diagram)))
        if pinned:
            return f"--set {pinned[0]} pins a tile of the portable kernel"
        structures = []
        for k in c.kernels:
            st = realise_chain(k.plan) if chained(k.plan) else realise(k.plan)   # a chain, or side by side
            if isinstance(st, str):
                return st
            structures.append(st)
        names = {s.name for s in c.diagram.size_symbols}
        pins = {k: int(v) for k, v in sets.items() if k in names}
        lengths, points = shaped_grid(c.diagram, c.roles)       # the module's grid of problem sizes
        grid = (lengths, tuple({**_sizes(c, {}), **point} for point in points))
        for k, st in zip(c.kernels, structures, strict=True):
            if isinstance(st, Chain):       # its whole axes fix what fits: at these sizes, or nothing does
                widths = chains.widths_of(k.plan, st, _sizes(c, pins))
                if not chains.candidates(profile, st, c.dtype, widths):
                    return (f"kernel {k.plan.name!r}: no configuration of the Hopper chain kernel holds {st.k} = "
                            f"{widths[0]} and {st.n} = {widths[1]} whole (at most {chains.WIDEST} each, within the "
                            "SMEM and registers)")
        out = []
        for k, st in zip(c.kernels, structures, strict=True):
            model = _model(c.diagram, profile, k.plan.name)
            if tables and isinstance(st, Chain):
                found = _chain_table(profile, model, k.plan, st, c.dtype, _sizes(c, pins),
                                     lengths=(LENGTHS[0],) if pins else lengths,
                                     params=ContractionParams.of(profile, chain=True))
                if found is None:
                    return f"no configuration of the Hopper chain kernel fits kernel {k.plan.name!r}"
                out.append(found)
            elif tables:
                try:
                    out.append(size_table(profile, model, k.plan, st, c.dtype, grid, _sizes(c, pins) if pins else {},
                                          ContractionParams.of(profile)))
                except ValueError:
                    return f"no configuration of the Hopper contraction kernel fits kernel {k.plan.name!r}"
            else:
                out.append(Table(k.plan.name, st, (), (), ()))
        used = {cfg.warpgroups for t in out for cfg in t.configs} or set(WARPGROUPS)
        if any(isinstance(st, Chain) for st in structures):     # a call's config= may name any of the chain's
            used |= set(chains.WARPGROUPS)
        used = sorted(used)
        return Launch(self, c, contraction=Tables(tuple(out), {n: register_cap(profile, n) for n in used},
                                                  {n: registers_per_consumer(profile, n) for n in used}))

    def expected(self, launched, profile, sizes):
        c: Configured = launched.configured
        values = _sizes(c, sizes)
        length = _length(c, values)
        time_s = flops = 0.0
        bounds, chosen, fits = [], [], []
        for k, table in zip(c.kernels, launched.contraction.tables, strict=True):
            model = _model(c.diagram, profile, k.plan.name)
            kind = chains if isinstance(table.structure, Chain) else contractions   # the same functions
            params = ContractionParams.of(profile, chain=kind is chains)
            fits.append((kind is chains, params))
            if table.configs:
                config = table.at(length)
                (counts,) = kind.counted(model, k.plan, table.structure, values, [config])
                t, bound = kind.predicted_time(profile, config, counts, c.dtype, params)
            else:       # no tables: the model's first choice at these sizes
                first = kind.ranked(profile, model, k.plan, table.structure, c.dtype, values, params)
                if not first:
                    raise NapkinError(f"no configuration of the Hopper contraction kernel fits kernel "
                                      f"{k.plan.name!r}", hint="use --backend triton")
                config, t, bound, counts = first[0].config, first[0].time_s, first[0].bound, first[0].counts
            time_s += t
            flops += counts.tensor_flops
            bounds.append(bound)
            chosen.append(config)
        bound = bounds[0] if len(set(bounds)) == 1 else "mixed: " + ", ".join(
            f"{k.plan.name} {b}" for k, b in zip(c.kernels, bounds, strict=True))
        label = "; ".join(x.label() for x in chosen)
        model = "; ".join(dict.fromkeys(_described(chained_kernel, p, profile) for chained_kernel, p in fits))
        calibrated = all(p.calibrated for _, p in fits)
        return Expected(self.name, label, time_s, flops, bound, model, calibrated, values,
                        kernel=self.title, contraction=tuple(chosen))

    def allocated(self, launched, profile, sizes):
        return [x.smem_bytes for x in self.expected(launched, profile, sizes).contraction]

    def accuracy(self, profile):
        return Accuracy.of_fit("the Hopper contraction kernel's model", contraction_fit(profile))

    def sweep(self, diagram, profile, *, dtype, sets, kernel, progress, sibling_fit):
        began = time.perf_counter()
        launched = self.take(diagram, profile, dtype=dtype, config=None, sets=sets, tables=False)
        if isinstance(launched, str):
            return launched
        c = launched.configured
        names = [k.plan.name for k in c.kernels]
        if kernel is not None and kernel not in names:
            raise NapkinError(f"--kernel {kernel}: {c.diagram.name} has no such kernel",
                              hint=f"its kernels: {', '.join(names)}")
        sizes, _ = resolve_sizes(c.diagram, {k: v for k, v in sets.items()
                                             if k in {s.name for s in c.diagram.size_symbols}})
        shown = {s.name: int(v) for s, v in sizes.items()}
        expected = self.expected(launched, profile, shown)
        out = []
        for i, (k, table) in enumerate(zip(c.kernels, launched.contraction.tables, strict=True)):
            progress("rank", i, len(c.kernels))
            if kernel is not None and k.plan.name != kernel:
                continue
            kind = chains if isinstance(table.structure, Chain) else contractions
            params = ContractionParams.of(profile, chain=kind is chains)
            rows = [ContractionRow(k.plan.name, r.config, r.time_s, r.counts.tensor_flops, r.bound)
                    for r in kind.ranked(profile, _model(c.diagram, profile, k.plan.name), k.plan, table.structure,
                                         c.dtype, shown, params)]
            at_row = next((j for j, r in enumerate(rows) if r.config == expected.contraction[i]), None)
            out.append(Sweep(c.diagram.name, profile.name, params.calibrated, c.dtype, k.plan.name, shown, rows,
                             time.perf_counter() - began, self.name, expected.model, at_row, expected))
        progress("rank", len(c.kernels), len(c.kernels))
        return out


def launched_contraction(diagram: str | Diagram, profile: Profile,
                         dtype: str) -> list[tuple[Structure | Chain, object, TermModel]]:
    """Each kernel's structure (or chain), plan and symbolic model, as the family takes `diagram` on `profile`."""
    got = HopperContraction().take(diagram, profile, dtype=dtype, config=None, sets={}, tables=False)
    if isinstance(got, str):
        raise NapkinError(got)
    c = got.configured
    return [(t.structure, k.plan, _model(c.diagram, profile, k.plan.name))
            for k, t in zip(c.kernels, got.contraction.tables, strict=True)]


def counts_at(diagram: str | Diagram, profile: Profile, dtype: str, sizes: dict[str, int],
              labels: str) -> list[tuple[ContractionConfig, Counts]]:
    """Each kernel's configuration (`labels`: as Expected.configuration names them, "; " between kernels)
    and the engine's counts of it at `sizes`."""
    out = []
    for (st, plan, model), label in zip(launched_contraction(diagram, profile, dtype), labels.split("; "),
                                        strict=True):
        if isinstance(st, Chain):
            c = chains.configuration(profile, st, dtype, chains.widths_of(plan, st, sizes),
                                     **chains.parse_chain_label(label))
            out.append((c, chains.counted(model, plan, st, sizes, [c])[0]))
        else:
            c = configuration(profile, st, dtype, **parse_label(label))
            out.append((c, counted(model, plan, st, sizes, [c])[0]))
    return out


def _chain_table(profile: Profile, model: TermModel, p, ch: Chain, dtype: str, sizes: dict[str, int], *,
                 lengths: tuple[int, ...], params: ContractionParams) -> Table | None:
    """A chain kernel's table: the model's first choice at the diagram's sizes (its defaults and --set),
    in every cell. Its whole axes (k and n) fix what fits an SM, so the grid's sizes, every axis scaled,
    do not apply; the call's wrapper refuses wider whole axes than the configuration was made for."""
    first = chains.ranked(profile, model, p, ch, dtype, sizes, params)
    if not first:
        return None
    return Table(p.name, ch, lengths, (first[0].config,), (0,) * len(lengths))


def _described(chain: bool, params: ContractionParams, profile: Profile) -> str:
    """Which model timed a kernel: its own fit, the contraction kernel's carried to the chain kernel, or
    the idealised model."""
    kernel = "chain" if chain else "contraction"
    if not params.calibrated:
        return f"the idealised model: nobody measured the Hopper {kernel} kernel on {profile.name}"
    if params.own:
        return f"the Hopper {kernel} kernel's model {params.source}"
    return (f"the Hopper contraction kernel's model {params.source}, carried to the chain kernel (nobody has "
            f"fitted the chain on a sweep of its own on {profile.name})")


def _sizes(c: Configured, sizes: dict[str, int]) -> dict[str, int]:
    """The weaved diagram's size symbols: its defaults, then `sizes`."""
    return {**{s.name: int(v) for s, v in c.diagram.defaults.items()}, **sizes}


def _length(c: Configured, values: dict[str, int]) -> float:
    """A call's length, as the module's wrapper takes it: the geometric mean of the diagram's sizes."""
    at = c.axis_sizes(values)
    axes = length_axes(c.diagram, c.roles)
    return math.prod(at(a) for a in axes) ** (1 / len(axes))


def _model(d: Diagram, profile: Profile, kernel: str) -> TermModel:
    """The symbolic model of one kernel on one GPU, built once per compiled diagram and profile (its
    construction derives every level's cost); held with the diagram and profile so their ids are not
    reused."""
    key = (id(d), id(profile), kernel)
    hit = _MODELS.get(key)
    if hit is None or hit[0] is not d or hit[1] is not profile:
        if len(_MODELS) >= 32:
            _MODELS.pop(next(iter(_MODELS)))
        hit = _MODELS[key] = (d, profile, TermModel(d, profile, kernel))
    return hit[2]


_MODELS: dict[tuple, tuple[Diagram, Profile, TermModel]] = {}


__all__ = ["HopperContraction", "counts_at", "launched_contraction"]
