"""What `napkin kernel` launches, and what the model expects of it: one answer that `napkin analyze`,
`configure`, `sweep` and `kernel` all state.

The kernel family (analyzer.config.family): on a GPU with warpgroup MMA and TMA (a Hopper profile), the
Hopper attention kernel where the diagram is one it realises (analyzer.config.hopper.refusal) and the
configuration named, if any, is one it runs (analyzer.config.hopper.named); the portable Triton module
everywhere else. Each family times, sizes and ranks its own kernels; this module asks it.

The configuration at a problem size: the one the generated module's wrapper launches there (the by-size
table's nearest grid point, analyzer.config.by_size and analyzer.config.hopper_table.HopperTable), not the best
at exactly that size; `napkin sweep` marks it among its ranking.

The expected time: the launched configuration timed by the model of its family: calibrated
where the GPU's profile, or the shipped calibrated profile of the GPU a datasheet profile names, holds
a fit of that kernel (docs/validation*.md say how well it predicts); the paper's idealised model
otherwise, labelled as such. It is not napkin analyze's idealised bound, which the report shows beside it.
"""

from __future__ import annotations

from dataclasses import replace
from typing import TypeVar

import sympy

from analyzer import hardware
from analyzer.common.errors import NapkinError
from analyzer.config.family import Expected, Launch, tried
from analyzer.config.kernels import Configured
from analyzer.config.ranking import portable_label
from analyzer.diagram.compiled import Diagram
from analyzer.diagram.interface import Attention, interface
from analyzer.hardware import Profile
from analyzer.model.analysis import load, partition_symbols
from analyzer.model.result import ExpectedOut, Out

R = TypeVar("R", bound=Out)      # a report that carries `expected` and `expected_absent`


def launch(diagram: str | Diagram, gpu: str | Profile, *, backend: str | None = None,
           dtype: str | None = None, config: str | None = None, sets: dict[str, int] | None = None,
           tables: bool = True) -> Launch:
    """The family napkin kernel generates (`backend`, or the first that the GPU prefers and that realises
    the diagram: analyzer.config.family.tried) and its configured kernels. `diagram`: a name, a file, or
    the diagram as compiled from its file (each family tried configures that one). `tables`: the Hopper
    kernel's by-size tables too (a module needs them; one expected time needs one cell of them)."""
    profile = hardware.load(gpu)
    families = tried(profile, backend)
    diagram = load(diagram)
    why = None
    attention = isinstance(interface(diagram), Attention)
    for family in families:
        got = family.take(diagram, profile, dtype=dtype, config=config, sets=sets or {}, tables=tables)
        if isinstance(got, Launch):
            # why the preferred families did not take it, where the one taking it is not preferred
            return replace(got, portable_why=None if family.preferred_on(profile) else why)
        if backend is not None:
            raise NapkinError(got, field="--backend", hint="use --backend triton")
        # the reason of the family whose kind of diagram it is: attention's for attention (the contraction
        # kernel only says attention is not its), the contraction kernel's for the rest
        if why is None or not attention:
            why = got
    raise AssertionError("the portable module realises every diagram")     # tried() ends with it


def sizes_of(c: Configured, sets: dict[str, int] | None) -> dict[str, int]:
    """The weaved diagram's size symbols: its defaults (one batch entry and head), then the --set
    values that name sizes."""
    names = {s.name for s in c.diagram.size_symbols}
    return {**{s.name: int(v) for s, v in c.diagram.defaults.items() if s.name in names},
            **{k: int(v) for k, v in (sets or {}).items() if k in names}}


def expected(launched: Launch, profile: Profile, sizes: dict[str, int]) -> Expected:
    """What the launched kernel takes at `sizes` (size symbols of the weaved diagram), by the model
    of its family."""
    return launched.family.expected(launched, profile, sizes)


def allocated(launched: Launch, profile: Profile, sizes: dict[str, int]) -> list[int | None]:
    """The SMEM a block of each kernel the module launches at `sizes` allocates, as napkin counts it for
    legality: the Hopper kernel's (analyzer.config.hopper) or the portable kernel's own allocation
    (analyzer.config.allocation); None where it is not counted (the CUDA backend clamps its own)."""
    return launched.family.allocated(launched, profile, sizes)


def _head_dim_pinned(base: Diagram, sets: dict[str, int]) -> dict[str, int]:
    """`sets` with attention's head dim pinned at its size there: the module configures every head dim
    it serves, one size needs the configurations of one (each head dim's are chosen alone)."""
    roles = interface(base)
    if not isinstance(roles, Attention):
        return sets
    size = base.size(roles.head_dim)
    if not isinstance(size, sympy.Symbol) or size.name in sets or size not in base.defaults:
        return sets
    return {**sets, size.name: int(base.defaults[size])}


def expected_at(diagram: str | Diagram, gpu: str | Profile, *, dtype: str | None = None,
                sets: dict[str, int] | None = None) -> Expected:
    """What napkin kernel's default backend launches at the diagram's sizes with `sets` (its sizes and
    tile pins; napkin configure's own variables, such as stages, are left to configure), and its
    expected time. `diagram`: a name, a file, or the diagram as compiled from its file."""
    profile = hardware.load(gpu)
    diagram = load(diagram)
    base = load(diagram, dtype=dtype)
    names = {s.name for s in base.size_symbols} | set(partition_symbols(base))
    sets = {k: v for k, v in (sets or {}).items() if k in names}
    launched = launch(diagram, profile, dtype=dtype, sets=_head_dim_pinned(base, sets), tables=False)
    return expected(launched, profile, sizes_of(launched.configured, sets))


def expected_out(e: Expected) -> ExpectedOut:
    return ExpectedOut(backend=e.backend, kernel=e.kernel, configuration=e.configuration, time_s=e.time_s,
                       throughput_flops_per_s=e.throughput_flops_per_s, bound=e.bound, model=e.model,
                       calibrated=e.calibrated, sizes=e.sizes)


def expect(diagram: str | Diagram, gpu: str | Profile, *, dtype: str | None = None,
           sets: dict[str, int] | None = None) -> ExpectedOut:
    """napkin analyze's headline: `expected_at` as the reports carry it."""
    return expected_out(expected_at(diagram, gpu, dtype=dtype, sets=sets))


def with_expected(result: R, diagram: str | Diagram, gpu: str | Profile, *, dtype: str | None = None,
                  sets: dict[str, int] | None = None) -> R:
    """An analysis or configuration report with what the generated kernel is expected to take (`expect`),
    or why napkin kernel generates none for it: napkin analyze, configure and report lead with it."""
    try:
        return result.model_copy(update={"expected": expect(diagram, gpu, dtype=dtype, sets=sets)})
    except NapkinError as exc:
        return result.model_copy(update={"expected_absent": exc.message})


__all__ = ["Expected", "Launch", "allocated", "expect", "expected", "expected_at", "expected_out", "launch",
           "portable_label", "sizes_of", "with_expected"]
