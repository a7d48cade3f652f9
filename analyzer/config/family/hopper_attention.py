"""The Hopper attention family: the warp-specialised kernel of analyzer.codegen.hopper on a GPU with
warpgroup MMA and TMA, for diagrams that are streamed attention (analyzer.config.hopper.realisable: the
chain of scores analyzer.config.scores reads off the diagram). Its configurations, legality and model are
analyzer.config.hopper's (Sections 5.5-5.7 and 6); its fit is a profile's `calibration.hopper`.
"""

from __future__ import annotations

import math
import time
from dataclasses import replace

from analyzer import hardware
from analyzer.common.errors import NapkinError
from analyzer.config.by_size import instance_axes
from analyzer.config.family.base import Accuracy, Expected, Family, Launch
from analyzer.config.hopper import (
    ALIKE,
    HopperConfig,
    HopperParams,
    chunk_times,
    hopper_capable,
    named,
    predicted_time,
    ranked,
    refusal,
    scores,
    value_dim,
)
from analyzer.config.hopper_table import (
    HopperTables,
    chosen_at,
    hopper_tables,
    one_config_tables,
    table_point,
)
from analyzer.config.kernels import Configured, configure_kernels
from analyzer.config.ranking import HopperRow, Sweep
from analyzer.config.scores import SOFTMAX, pairs
from analyzer.hardware import Profile
from analyzer.model.analysis import resolve_sizes


class HopperAttention(Family):
    name = "hopper"
    title = "the Hopper kernel"
    fit = "hopper"

    def preferred_on(self, profile):
        return hopper_capable(profile)

    def take(self, diagram, profile, *, dtype, config, sets, tables):
        # whether the kernel takes the diagram, and one expected time, need the kernels' structure alone
        structure = configure_kernels(diagram, profile, dtype=dtype, config=config, sets=sets, sized=False,
                                      ranked=False, fp8=True)
        why = refusal(profile, structure, sets)
        one = named(profile, structure, config) if config and why is None else None
        if isinstance(one, str):
            why = one
        if why is not None:
            return why
        if not tables and one is None:
            return Launch(self, structure)
        configured = configure_kernels(diagram, profile, dtype=dtype, config=config, sets=sets, sized=False, fp8=True)
        return Launch(self, *_with_tables(configured, profile, config, one, sets))

    def expected(self, launched, profile, sizes):
        """`launched.hopper` None: the one cell of the tables these sizes read, computed alone (chosen_at)."""
        c, tables = launched.configured, launched.hopper
        r = c.roles
        head_dim, seq_q, seq_k, instances, e, flops = _shape(c, sizes)
        params = HopperParams.of(profile)
        chain = scores(c)
        length, alike, ratio = table_point(seq_q, seq_k, instances)     # the cell the call reads
        if tables is None:
            chosen = chosen_at(profile, head_dim, c.dtype, causal=r.causal, length=length, instances=alike,
                               ratio=ratio, params=params, scores=chain, value_dim=e)
        elif head_dim in tables.tables:
            chosen = tables.tables[head_dim].at(length, alike, ratio)
        else:
            raise NapkinError(f"the Hopper kernel is configured for head dim "
                              f"{', '.join(map(str, tables.tables))}, not {head_dim}", field="--set",
                              hint="use --backend triton")
        time_s = predicted_time(profile, chosen, head_dim, c.dtype, seq_q=seq_q, seq_k=seq_k,
                                instances=instances, causal=r.causal, params=params, scores=chain, value_dim=e)
        parts = chunk_times(profile, chosen, head_dim, c.dtype, params=params, scores=chain, value_dim=e)
        if params.calibrated:
            model = f"the Hopper kernel's model {params.source}"
            fitted = [op for op in chain.costed if op in dict(params.score_clocks)]
            if chain != SOFTMAX and fitted:
                model += f", its scores' {', '.join(fitted)} at the costs a sweep of the variants fitted"
            if chain != SOFTMAX and len(fitted) < len(chain.costed):
                model += f", carried from softmax attention to its scores' {chain.label()}"
            if e:
                model += f", carried to V's head dim of its own ({e}; fitted where it is the queries')"
        else:
            model = f"the paper's idealised model: nobody measured the Hopper kernel on {profile.name}"
        return Expected(self.name, chosen.label(), time_s, flops, max(parts, key=parts.get), model,
                        params.calibrated, {**{s.name: int(v) for s, v in c.diagram.defaults.items()}, **sizes},
                        chosen, kernel=self.title)

    def allocated(self, launched, profile, sizes):
        return [self.expected(launched, profile, sizes).hopper.smem_bytes]

    def accuracy(self, profile):
        return Accuracy.of_fit("the Hopper kernel's model", hardware.hopper_fit(profile))

    def sweep(self, diagram, profile, *, dtype, sets, kernel, progress, sibling_fit):
        began = time.perf_counter()
        launched = self.take(diagram, profile, dtype=dtype, config=None, sets=sets, tables=False)
        if isinstance(launched, str):
            return launched
        progress("configure", 1, 1)
        return [_sweep(self, launched, profile, dtype, sets, kernel, began)]


def _shape(c: Configured, sizes: dict[str, int]) -> tuple[int, int, int, int, int | None, int]:
    """Attention `c` at `sizes`: its head dim, query and key lengths, instances (batch x query heads),
    V's head dim where it has its own (else None) and the tensor-core FLOPs its masks leave (pairs)."""
    r = c.roles
    size = c.axis_sizes(sizes)
    head_dim, seq_q, seq_k = size(r.head_dim), size(r.seq_q), size(r.seq_k)
    instances = math.prod(size(a) for a in instance_axes(r))
    e = value_dim(c, sizes)
    flops = 2 * instances * pairs(seq_q, seq_k, r.band) * (head_dim + (e or head_dim))
    return head_dim, seq_q, seq_k, instances, e, flops


def _with_tables(c: Configured, profile: Profile, config: str | None,
                 one: tuple[int, HopperConfig] | None, sets: dict[str, int]) -> tuple[Configured, HopperTables]:
    """The configured kernel and its by-size tables; a named `config` keeps its head dim alone (the
    wrapper refuses the others)."""
    if one is None:
        return c, hopper_tables(profile, tuple(k for k in c.kernels[0].choices if k is not None), c.dtype,
                                causal=c.roles.causal, scores=scores(c), value_dim=value_dim(c, sets))
    head_dim, chosen = one
    (k,) = c.kernels
    if head_dim not in k.choices:
        raise NapkinError(f"--config {config} is for head dim {head_dim}, which {c.source_file} does not "
                          "configure", field="--config", hint="use --backend triton")
    return (replace(c, kernels=(replace(k, choices={head_dim: k.choices[head_dim]}),)),
            replace(one_config_tables(profile, head_dim, chosen), scores=scores(c), value_dim=value_dim(c, sets)))


def _sweep(family: HopperAttention, launched: Launch, profile: Profile, dtype: str, sets: dict[str, int],
           kernel: str | None, began: float) -> Sweep:
    """The kernel's legal configurations at the sizes `sets` gives (sizes only), the model's choice first."""
    c = launched.configured
    woven, r = c.diagram, c.roles
    (k,) = c.kernels
    if kernel is not None and kernel != k.plan.name:
        raise NapkinError(f"--kernel {kernel}: {woven.name} has no such kernel", hint=f"its kernel: {k.plan.name}")
    sizes, _ = resolve_sizes(woven, sets)      # sizes alone: refusal() sent any other name elsewhere
    shown = {s.name: int(v) for s, v in sizes.items()}
    head_dim, seq_q, seq_k, instances, e, flops = _shape(c, shown)
    rows = []
    params = HopperParams.of(profile)
    chain = scores(c)
    for t, config in ranked(profile, head_dim, dtype, seq_q=seq_q, seq_k=seq_k, instances=instances,
                            causal=r.causal, params=params, scores=chain, value_dim=e):
        parts = chunk_times(profile, config, head_dim, dtype, params=params, scores=chain, value_dim=e)
        rows.append(HopperRow(k.plan.name, config, t, flops, max(parts, key=parts.get)))
    if not rows:
        raise NapkinError(f"no configuration of the Hopper kernel fits head dim {head_dim} on {profile.name}",
                          hint="use --backend triton")
    expected = family.expected(launched, profile, shown)
    at_row = next((i for i, row in enumerate(rows) if row.config == expected.hopper), None)
    return Sweep(woven.name, profile.name, params.calibrated, dtype, k.plan.name, shown, rows,
                 time.perf_counter() - began, family.name, expected.model, at_row, expected, tie=ALIKE)


__all__ = ["HopperAttention"]
