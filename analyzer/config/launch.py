"""What `napkin kernel` launches, and what the model expects of it: one answer that `napkin analyze`,
`configure`, `sweep` and `kernel` all state.

The backend: on a GPU with warpgroup MMA and TMA (a Hopper profile), the Hopper kernel where the
diagram is one it realises (analyzer.config.hopper.refusal) and the configuration named, if any, is one
it runs (analyzer.config.hopper.named); the portable Triton module everywhere else.

The configuration at a problem size: the one the generated module's wrapper launches there (the by-size
table's nearest grid point, analyzer.config.by_size and analyzer.config.hopper.HopperTable), not the best
at exactly that size; `napkin sweep` marks it among its ranking.

The expected time: the launched configuration timed by the model of the backend's kernel: calibrated
where the GPU's profile, or the shipped calibrated profile of the GPU a datasheet profile names, holds
a fit of that kernel (docs/validation*.md say how well it predicts); the paper's idealised model
otherwise, labelled as such. It is not napkin analyze's idealised bound, which the report shows beside it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import TypeVar

import sympy

from analyzer import hardware
from analyzer.common.errors import NapkinError
from analyzer.config.by_size import instance_axes
from analyzer.config.choose import Choice
from analyzer.config.hopper import (
    HopperConfig,
    HopperParams,
    HopperTables,
    chosen_at,
    chunk_times,
    hopper_capable,
    hopper_tables,
    named,
    one_config_tables,
    predicted_time,
    refusal,
    scores,
    value_dim,
)
from analyzer.config.kernels import Configured, configure_kernels
from analyzer.config.predict import predict_configured
from analyzer.config.scores import SOFTMAX, pairs
from analyzer.diagram.compiled import Diagram
from analyzer.diagram.interface import Attention, interface
from analyzer.hardware import Profile
from analyzer.model.analysis import load, partition_symbols
from analyzer.model.result import ExpectedOut, Out

R = TypeVar("R", bound=Out)      # a report that carries `expected` and `expected_absent`

SIZED = {"triton"}      # backends whose wrapper chooses a configuration per call (analyzer.config.by_size)


@dataclass(frozen=True)
class Launch:
    """The backend napkin kernel generates and its configured kernels."""

    backend: str                         # hopper, triton or cuda
    configured: Configured
    hopper: HopperTables | None = None   # the Hopper kernel's configurations by head dim and size
    portable_why: str | None = None      # why a Hopper GPU gets the portable module (None: it does not)


def launch(diagram: str, gpu: str | Profile, *, backend: str | None = None, dtype: str | None = None,
           config: str | None = None, sets: dict[str, int] | None = None, tables: bool = True) -> Launch:
    """The backend (`backend`, or the default above) and its configured kernels; a named `config` the
    Hopper kernel runs keeps its head dim alone (the wrapper refuses the others). `tables`: the Hopper
    kernel's by-size tables too (a module needs them; one expected time needs one cell of them)."""
    profile = hardware.load(gpu)
    chosen, why = backend or "triton", None
    if backend == "hopper" or (backend is None and hopper_capable(profile)):
        # whether the Hopper kernel takes the diagram, and one expected time, need the kernels' structure
        # alone: the portable kernel's configurations are ranked only for a module that carries them
        structure = configure_kernels(diagram, profile, dtype=dtype, config=config, sets=sets, sized=False,
                                      ranked=False)
        why = refusal(profile, structure, sets)
        one = named(profile, structure, config) if config and why is None else None
        if isinstance(one, str):
            why = one
        if why and backend == "hopper":
            raise NapkinError(why, field="--backend", hint="use --backend triton")
        if why is None:
            if not tables and one is None:
                return Launch("hopper", structure)
            configured = configure_kernels(diagram, profile, dtype=dtype, config=config, sets=sets, sized=False)
            return Launch("hopper", *_hopper(diagram, configured, profile, config, one, sets or {}))
    # ranked by the portable kernels' fit where one was measured on this GPU (hardware.portable_model)
    configured = configure_kernels(diagram, hardware.portable_model(profile), dtype=dtype, config=config,
                                   sets=sets, sized=chosen in SIZED)
    return Launch(chosen, configured, None, why)


def _hopper(diagram: str, c: Configured, profile: Profile, config: str | None,
            one: tuple[int, HopperConfig] | None, sets: dict[str, int]) -> tuple[Configured, HopperTables]:
    if one is None:
        return c, hopper_tables(profile, tuple(k for k in c.kernels[0].choices if k is not None), c.dtype,
                                causal=c.roles.causal, scores=scores(c), value_dim=value_dim(c, sets))
    head_dim, chosen = one
    (k,) = c.kernels
    if head_dim not in k.choices:
        raise NapkinError(f"--config {config} is for head dim {head_dim}, which {diagram} does not "
                          "configure", field="--config", hint="use --backend triton")
    return (replace(c, kernels=(replace(k, choices={head_dim: k.choices[head_dim]}),)),
            replace(one_config_tables(profile, head_dim, chosen), scores=scores(c), value_dim=value_dim(c, sets)))


@dataclass(frozen=True)
class Expected:
    """The launched configuration at one problem size and the model's time for it."""

    backend: str
    configuration: str           # as napkin sweep labels its rows
    time_s: float
    tensor_flops: float          # the useful tensor-core FLOPs (block skipping included)
    bound: str
    model: str                   # which model, and where its parameters come from
    calibrated: bool             # False: the idealised model, no one fitted this kernel's model on this GPU
    sizes: dict[str, int]        # the weaved diagram's size symbols it was predicted at
    hopper: HopperConfig | None = None
    portable: tuple[Choice, ...] = ()    # the portable module's: each kernel's configuration launched

    @property
    def throughput_flops_per_s(self) -> float:
        return self.tensor_flops / self.time_s if self.time_s else 0.0

    def as_dict(self) -> dict:
        return {"backend": self.backend, "configuration": self.configuration, "time_s": self.time_s,
                "tensor_flops": self.tensor_flops, "throughput_flops_per_s": self.throughput_flops_per_s,
                "bound": self.bound, "model": self.model, "calibrated": self.calibrated, "sizes": self.sizes}


def sizes_of(c: Configured, sets: dict[str, int] | None) -> dict[str, int]:
    """The weaved diagram's size symbols: its defaults (one batch entry and head), then the --set
    values that name sizes."""
    names = {s.name for s in c.diagram.size_symbols}
    return {**{s.name: int(v) for s, v in c.diagram.defaults.items() if s.name in names},
            **{k: int(v) for k, v in (sets or {}).items() if k in names}}


def expected(launched: Launch, profile: Profile, sizes: dict[str, int]) -> Expected:
    """What the launched kernel takes at `sizes` (size symbols of the weaved diagram), by the model
    of its backend."""
    c = launched.configured
    if launched.backend == "hopper":
        return _hopper_expected(c, launched.hopper, profile, sizes)
    fitted = hardware.portable_model(profile)      # what launch() ranked the configurations with
    p = predict_configured(c, fitted, sizes)
    launched_choices = c.launched(sizes)
    label = "; ".join(portable_label(choice) for choice in launched_choices)
    if fitted.portable_fitted:
        model, calibrated = f"the portable kernel's model calibrated on {fitted.name}", True
    else:
        model, calibrated = ("the paper's idealised model with napkin sweep's terms: no one has fitted the "
                             f"portable kernel's model on {profile.name}"), False
    return Expected(launched.backend, label, p.time_s, p.flops, p.bound, model, calibrated, dict(p.sizes),
                    portable=tuple(launched_choices))


def portable_label(c) -> str:
    """A portable configuration (a Choice, or napkin sweep's Row) as napkin sweep and analyze print it."""
    tiles = " ".join(f"{k}={v}" for k, v in c.tiles.items())
    return f"{tiles} warps={c.num_warps} stages={c.num_stages}"


def allocated(launched: Launch, profile: Profile, sizes: dict[str, int]) -> list[int | None]:
    """The SMEM a block of each kernel the module launches at `sizes` allocates, as napkin counts it for
    legality: the Hopper kernel's (analyzer.config.hopper) or the portable kernel's own allocation
    (analyzer.config.allocation); None where it is not counted (the CUDA backend clamps its own)."""
    if launched.backend == "hopper":
        return [expected(launched, profile, sizes).hopper.smem_bytes]
    if launched.backend != "triton":
        return [None] * len(launched.configured.kernels)
    return [c.smem_bytes for c in launched.configured.launched(sizes)]


def _hopper_expected(c: Configured, tables: HopperTables | None, profile: Profile,
                     sizes: dict[str, int]) -> Expected:
    """`tables` None: the one cell of them these sizes read, computed alone (hopper.chosen_at)."""
    r = c.roles
    at = c.axis_sizes(sizes)
    head_dim, seq_q, seq_k = at(r.head_dim), at(r.seq_q), at(r.seq_k)
    instances = math.prod(at(a) for a in instance_axes(r))
    params = HopperParams.of(profile)
    chain = scores(c)
    e = value_dim(c, sizes)
    if tables is None:
        chosen = chosen_at(profile, head_dim, c.dtype, causal=r.causal, length=math.sqrt(seq_q * seq_k),
                           instances=instances, params=params, scores=chain, value_dim=e)
    elif head_dim in tables.tables:
        chosen = tables.tables[head_dim].at(math.sqrt(seq_q * seq_k), instances)
    else:
        raise NapkinError(f"the Hopper kernel is configured for head dim {', '.join(map(str, tables.tables))}, "
                          f"not {head_dim}", field="--set", hint="use --backend triton")
    time_s = predicted_time(profile, chosen, head_dim, c.dtype, seq_q=seq_q, seq_k=seq_k,
                            instances=instances, causal=r.causal, params=params, scores=chain, value_dim=e)
    flops = 2 * instances * pairs(seq_q, seq_k, r.band) * (head_dim + (e or head_dim))
    parts = chunk_times(profile, chosen, head_dim, c.dtype, params=params, scores=chain, value_dim=e)
    if params.calibrated:
        model = f"the Hopper kernel's model {params.source}"
        if chain != SOFTMAX:
            model += f", carried from softmax attention to its scores' {chain.label()}"
        if e:
            model += f", carried to V's head dim of its own ({e}; fitted where it is the queries')"
    else:
        model = f"the paper's idealised model: nobody measured the Hopper kernel on {profile.name}"
    return Expected("hopper", chosen.label(), time_s, flops, max(parts, key=parts.get), model,
                    params.calibrated, {**{s.name: int(v) for s, v in c.diagram.defaults.items()}, **sizes},
                    chosen)


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


def expected_at(diagram: str, gpu: str | Profile, *, dtype: str | None = None,
                sets: dict[str, int] | None = None) -> Expected:
    """What napkin kernel's default backend launches at the diagram's sizes with `sets` (its sizes and
    tile pins; napkin configure's own variables, such as stages, are left to configure), and its
    expected time."""
    profile = hardware.load(gpu)
    base = load(diagram, dtype=dtype)
    names = {s.name for s in base.size_symbols} | set(partition_symbols(base))
    sets = {k: v for k, v in (sets or {}).items() if k in names}
    launched = launch(diagram, profile, dtype=dtype, sets=_head_dim_pinned(base, sets), tables=False)
    return expected(launched, profile, sizes_of(launched.configured, sets))


def expected_out(e: Expected) -> ExpectedOut:
    return ExpectedOut(backend=e.backend, configuration=e.configuration, time_s=e.time_s,
                       throughput_flops_per_s=e.throughput_flops_per_s, bound=e.bound, model=e.model,
                       calibrated=e.calibrated, sizes=e.sizes)


def expect(diagram: str, gpu: str | Profile, *, dtype: str | None = None,
           sets: dict[str, int] | None = None) -> ExpectedOut:
    """napkin analyze's headline: `expected_at` as the reports carry it."""
    return expected_out(expected_at(diagram, gpu, dtype=dtype, sets=sets))


def with_expected(result: R, diagram: str, gpu: str | Profile, *, dtype: str | None = None,
                  sets: dict[str, int] | None = None) -> R:
    """An analysis or configuration report with what the generated kernel is expected to take (`expect`),
    or why napkin kernel generates none for it: napkin analyze, configure and report lead with it."""
    try:
        return result.model_copy(update={"expected": expect(diagram, gpu, dtype=dtype, sets=sets)})
    except NapkinError as exc:
        return result.model_copy(update={"expected_absent": exc.message})


__all__ = ["SIZED", "Expected", "Launch", "allocated", "expect", "expected", "expected_at", "expected_out", "launch",
           "portable_label", "sizes_of", "with_expected"]
