"""The pipeline of `napkin sweep`: every legal configuration of a diagram's kernels, each with its
predicted time at one problem size, fastest first.

    raw diagram -> weave over batch (and heads) -> legal configurations per head dim
    (analyzer.config.choose: candidates, napkin configure's Table 2, divisor rules)
    -> the model's terms at each configuration (analyzer.model.analysis.TermModel: H per level, FLOPs per
    pipeline, N_g, chunks) -> predicted time (analyzer.model.predict; calibrated when the profile is)
    -> ranked as the kernel generator ranks them

The first row is the model's choice at exactly these sizes; `launched` marks the row the generated
module launches there (its by-size table's nearest grid point, analyzer.config.launch), whose time
napkin analyze and the kernel's header state. For streamed softmax
attention on a Hopper GPU that is the Hopper kernel's (analyzer.config.hopper: warpgroups, chunk,
stages, overlap, schedule, ranked by Section 6's model); `backend="triton"` ranks the portable module's. Sizes are the weaved
diagram's: batch, heads and the diagram's own (q, x, d, ...); legality is judged as the generator
judges it, at the diagram's default sizes with the head dim of these.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass

from analyzer import hardware
from analyzer.common.errors import NapkinError
from analyzer.common.expr import at
from analyzer.common.progress import Progress, silent
from analyzer.common.version import __version__
from analyzer.config.by_size import instance_axes
from analyzer.config.choose import TIE, Choice, legal, rank_at, same_config
from analyzer.config.configure import schedule_of
from analyzer.config.hopper import (
    ALIKE,
    HopperConfig,
    HopperParams,
    chunk_times,
    hopper_capable,
    ranked,
    refusal,
    scores,
    value_dim,
)
from analyzer.config.kernels import configure_kernels
from analyzer.config.launch import Expected, Launch, expected, launch, portable_label
from analyzer.config.scores import pairs
from analyzer.config.sweep_result import SweepOut, SweepReport
from analyzer.diagram.interface import Attention, interface
from analyzer.diagram.weave import compile_woven, outer_tiles, source_data
from analyzer.model.analysis import TermModel, load, resolve_sizes
from analyzer.model.predict import kernel_parts


@dataclass(frozen=True)
class Row:
    """One legal configuration and what the model predicts for it."""

    kernel: str
    tiles: dict[str, int]              # the lowest level's tile sizes
    woven: dict[str, int]              # tiles of the weaved axes (batch, heads): one index a block
    num_warps: int
    num_stages: int
    time_s: float
    tensor_flops: float
    bound: str                         # compute, power (a lowered clock) or transfers

    @property
    def label(self) -> str:
        return portable_label(self)

    @property
    def throughput_flops_per_s(self) -> float:
        return self.tensor_flops / self.time_s if self.time_s else 0.0

    def as_dict(self) -> dict:
        return {"kernel": self.kernel, "tiles": self.tiles, "num_warps": self.num_warps,
                "num_stages": self.num_stages, "time_s": self.time_s,
                "tensor_flops": self.tensor_flops,
                "throughput_flops_per_s": self.throughput_flops_per_s, "bound": self.bound}


@dataclass(frozen=True)
class HopperRow:
    """One legal configuration of the Hopper kernel (analyzer.config.hopper) and its predicted time."""

    kernel: str
    config: HopperConfig
    time_s: float
    tensor_flops: float
    bound: str                         # tensor, threads (the softmax) or loads

    @property
    def label(self) -> str:
        return self.config.label()

    @property
    def throughput_flops_per_s(self) -> float:
        return self.tensor_flops / self.time_s if self.time_s else 0.0

    def as_dict(self) -> dict:
        return {"kernel": self.kernel, "configuration": self.config.entry(), "time_s": self.time_s,
                "tensor_flops": self.tensor_flops, "throughput_flops_per_s": self.throughput_flops_per_s,
                "bound": self.bound}


@dataclass(frozen=True)
class Sweep:
    diagram: str
    gpu: str
    calibrated: bool
    dtype: str
    kernel: str
    sizes: dict[str, int]
    rows: list[Row] | list[HopperRow]  # fastest first (ties: the kernel's tie rule)
    seconds: float                     # how long ranking took
    backend: str = "triton"            # whose configurations: the Triton module's or the Hopper kernel's
    model: str = ""                    # which model timed the rows, and where its parameters come from
    launched: int | None = None        # the row napkin kernel's module launches at these sizes (None: none)
    expected: Expected | None = None   # that configuration's time, as napkin analyze and kernel state it
    tie: float = TIE                   # rows within this relative time tie, ordered by the kernel's tie rule

    def as_dict(self) -> dict:
        return {"diagram": self.diagram, "gpu": self.gpu, "calibrated": self.calibrated, "model": self.model,
                "dtype": self.dtype, "kernel": self.kernel, "backend": self.backend, "sizes": self.sizes,
                "seconds": self.seconds, "launched": self.launched, "tie": self.tie,
                "expected": {k: v for k, v in self.expected.as_dict().items() if k != "tensor_flops"}
                if self.expected else None,
                "rows": [r.as_dict() for r in self.rows]}


def report(sweeps: list[Sweep]) -> SweepReport:
    """napkin sweep --json: the rankings in their documented schema (napkin schema sweep)."""
    return SweepReport(napkin_version=__version__, sweeps=[SweepOut.model_validate(s.as_dict()) for s in sweeps])


def sweep(diagram: str, gpu, *, dtype: str = "fp16", sets: dict[str, int] | None = None,
          kernel: str | None = None, backend: str | None = None, progress: Progress = silent,
          sibling_fit: bool = True) -> list[Sweep]:
    """One ranking per kernel of `diagram` (or of `kernel` alone) at the sizes `sets` gives (weaved
    size symbols; tile symbols pin a tile). `backend`: whose configurations, as napkin kernel chooses
    it (default: the Hopper kernel's where the GPU and the diagram allow it, else the Triton module's).
    `progress` hears of each kernel ranked. `sibling_fit`: a shipped datasheet profile ranks the portable
    configurations with its calibrated sibling's fit, as napkin kernel does (hardware.portable_model);
    False: with its own figures (napkin calibrate's datasheet column)."""
    began = time.perf_counter()
    progress("configure", 0, 1)
    profile = hardware.load(gpu)
    if backend not in (None, "hopper", "triton"):
        raise NapkinError(f"--backend {backend!r}: napkin sweep ranks the hopper or the triton backend's "
                          "configurations")
    if backend == "hopper" or (backend is None and hopper_capable(profile)):
        # the kernels' structure, as launch() asks: the portable configurations are ranked below, if at all
        configured = configure_kernels(diagram, profile, dtype=dtype, sized=False, ranked=False)
        why = refusal(profile, configured, sets)
        if why is None:     # what launch() decides; one expected time needs no by-size tables
            progress("configure", 1, 1)
            return [_hopper_sweep(Launch("hopper", configured), profile, dtype, sets or {}, kernel, began)]
        if backend == "hopper":
            raise NapkinError(why, field="--backend", hint="use --backend triton")
    profile.check_dtype(dtype)
    if sibling_fit:
        profile = hardware.portable_model(profile)
    base = load(diagram, dtype=dtype)
    roles = interface(base)
    data, source = source_data(diagram, dtype)
    woven = compile_woven(data, source, roles.outer)
    sets = dict(sets or {})
    size_names = {s.name for s in woven.size_symbols}
    tile_names = {s.name for k in base.kernels for p in k.partitions.values() for s in p.symbols}
    unknown = sorted(set(sets) - size_names - tile_names)
    if unknown:
        raise NapkinError(f"--set {unknown[0]}: {woven.name} has no size or tile size {unknown[0]!r}",
                          hint=f"sizes: {', '.join(sorted(size_names))}; tiles: "
                               f"{', '.join(sorted(tile_names))}")
    sizes, _ = resolve_sizes(woven, {k: v for k, v in sets.items() if k in size_names})
    shown = {s.name: int(v) for s, v in sizes.items()}
    pins = {k: v for k, v in sets.items() if k in tile_names}
    head_pin = {}
    if isinstance(roles, Attention):     # legality as the generator judges it: per head dim
        head = base.size(roles.head_dim)
        value = int(at(woven.size(roles.head_dim), sizes))
        head_pin = {str(s): value for s in head.free_symbols}
        pins.update(head_pin)
    names = [k.name for k in woven.kernels]
    if kernel is not None and kernel not in names:
        raise NapkinError(f"--kernel {kernel}: {woven.name} has no such kernel",
                          hint=f"its kernels: {', '.join(names)}")
    ranking = [kernel] if kernel else names
    for name in ranking:        # a kernel with nothing to configure below SMEM: say so before ranking any
        try:
            schedule_of(base, name)
        except NapkinError as exc:
            if len(names) == 1:
                raise
            others = [n for n in names if n != name and _configurable(base, n)]
            raise NapkinError(f"kernel {name!r} of {woven.name} streams no axis into a contraction: there is "
                              "nothing to configure below SMEM", file=exc.file,
                              hint=(f"rank the others alone: --kernel {' or --kernel '.join(others)}" if others
                                    else exc.hint)) from None
    # what napkin kernel launches at these sizes: its configuration for this head dim alone (the module
    # configures every head dim; the others cannot be what a call at these sizes launches)
    launched = launch(diagram, profile, backend="triton", dtype=dtype, sets={**sets, **head_pin})
    e = expected(launched, profile, shown)
    chosen = dict(zip(names, launched.configured.launched(shown), strict=True))
    progress("configure", 1, 1)
    out = []
    for i, name in enumerate(ranking):
        progress("rank", i, len(ranking))
        choices = legal(base, profile, name, pins, dtype)
        ones = outer_tiles(woven, roles.outer)
        ranked, terms = rank_at(TermModel(woven, profile, name), profile, shown, choices, ones)
        parts = kernel_parts(terms.values, terms.weights, profile, dtype)
        index = {id(c): i for i, c in enumerate(choices)}
        rows = [_row(c, t, f, ones, parts.bound(index[id(c)])) for c, t, f in ranked]
        at_row = next((i for i, (c, _, _) in enumerate(ranked) if same_config(c, chosen[name])), None)
        # the rows' model: napkin kernel's (e.model), unless sibling_fit=False ranked with other figures
        model = e.model if launched.configured.gpu == profile.name else (
            f"the paper's idealised model with napkin sweep's terms ({profile.name}'s own figures)")
        out.append(Sweep(woven.name, profile.name, profile.portable_fitted, dtype, name, shown,
                         rows, 0.0, "triton", model, at_row, e))
    progress("rank", len(ranking), len(ranking))
    elapsed = time.perf_counter() - began
    return [Sweep(**{**s.__dict__, "seconds": elapsed}) for s in out]


def _hopper_sweep(launched: Launch, profile, dtype: str, sets: dict[str, int], kernel: str | None,
                  began: float) -> Sweep:
    """The Hopper kernel's legal configurations at the sizes `sets` gives (sizes only), the model's
    choice first."""
    c = launched.configured
    woven, r = c.diagram, c.roles
    (k,) = c.kernels
    if kernel is not None and kernel != k.plan.name:
        raise NapkinError(f"--kernel {kernel}: {woven.name} has no such kernel", hint=f"its kernel: {k.plan.name}")
    sizes, _ = resolve_sizes(woven, sets)      # sizes alone: refusal() sent any other name elsewhere
    shown = {s.name: int(v) for s, v in sizes.items()}

    def size(axis: str) -> int:
        return int(at(woven.size(axis), sizes))

    head_dim, seq_q, seq_k = size(r.head_dim), size(r.seq_q), size(r.seq_k)
    instances = math.prod(size(a) for a in instance_axes(r))
    e = value_dim(c, shown)
    flops = 2 * instances * pairs(seq_q, seq_k, r.band) * (head_dim + (e or head_dim))
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
    e = expected(launched, profile, shown)
    at_row = next((i for i, row in enumerate(rows) if row.config == e.hopper), None)
    return Sweep(woven.name, profile.name, params.calibrated, dtype, k.plan.name, shown, rows,
                 time.perf_counter() - began, "hopper", e.model, at_row, e, tie=ALIKE)


def _configurable(d, kernel: str) -> bool:
    try:
        schedule_of(d, kernel)
    except NapkinError:
        return False
    return True


def _row(c: Choice, time_s: float, flops: float, ones: dict[str, int], bound: str) -> Row:
    return Row(c.kernel, dict(c.tiles), ones, c.num_warps, c.num_stages, time_s, flops, bound)


__all__ = ["sweep", "Sweep", "Row", "HopperRow"]
