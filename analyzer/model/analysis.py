"""The pipeline of `napkin analyze`: diagram + GPU profile + sizes -> Analysis.

    load diagram -> legal schedules per kernel and level (fusion) -> costs (counting rules)
    -> closed-form optimum H*(a, M) -> integer tile search -> predicted time -> Analysis

Upper levels (caches, implied levels) take the tiles that minimise their own transfers under their
effective memory; the lowest level, where the arithmetic happens, takes the tiles that minimise the
predicted time, within the GPU's divisor constraints.
"""

from __future__ import annotations

import difflib
import itertools
from dataclasses import dataclass

import numpy as np
import sympy

from analyzer import hardware
from analyzer.common.dtypes import bytes_per_value
from analyzer.common.errors import NapkinError
from analyzer.common.expr import MAX_SIZE, at, to_text
from analyzer.common.version import __version__
from analyzer.diagram.compiled import Diagram, Kernel, Partition
from analyzer.diagram.graph import load
from analyzer.diagram.primitives import PIPELINES
from analyzer.hardware import Profile
from analyzer.model.classic import ClassicRule, classic_rule
from analyzer.model.constraints import hardware_divisors, skip_divides
from analyzer.model.cost import LevelCost, level_cost
from analyzer.model.fusion import Schedule, schedule
from analyzer.model.hierarchy import ModelLevel, cluster_gain, model_levels, received
from analyzer.model.intensity import bandwidth_limit, useful_flops
from analyzer.model.optimize import (
    Choice,
    ClosedForm,
    closed_form,
    evaluate_points,
    obeyed,
    search,
)
from analyzer.model.predict import kernel_parts, kernel_time, params_of, predict
from analyzer.model.result import (
    Analysis,
    BandwidthLimitOut,
    ClassicRuleOut,
    DiagramOut,
    GpuOut,
    KernelOut,
    LevelOut,
    OpOut,
    OptimumOut,
    SizeOut,
    StandardTermOut,
    TotalsOut,
)

ASSUMPTIONS = [
    "Transfers and memory follow the counting rules of Section 2; memory is the largest data-type "
    "column of a steady-state chunk (docs/model.md).",
    "Each level moves H*(a, M_l) and costs 1/Hdot_l per byte, Hdot_l being the bandwidth of the level "
    "feeding it; levels add up (Equation 2). A caching level uses N_c M_c (Theorem 2).",
    "Compute time is the slowest pipeline's FLOPs over its peak rate; pipelines overlap each other and "
    "the transfers, so a kernel takes the larger of compute and transfer time.",
    "A group (thread block) keeps one SM busy and groups run in waves of N_SM (wave quantization).",
    "Kernels run one after another.",
]
CALIBRATED = ("Calibrated profile: parameters fitted to measurements (gpu.calibration) relax the "
              "assumptions above: achieved rates, overlapping levels, exposed softmax, per-chunk, "
              "latency, block and launch overheads (docs/model.md, docs/validation.md).")


# -- loading: `load` (analyzer.diagram.graph) takes a diagram's name, its file or the diagram compiled --

def partition_symbols(diagram: Diagram) -> dict[str, sympy.Symbol]:
    return {s.name: s for k in diagram.kernels for p in k.partitions.values() for s in p.symbols}


def resolve_sizes(diagram: Diagram, sets: dict[str, int], *, option: str = "--set"
                  ) -> tuple[dict[sympy.Symbol, int], dict[sympy.Symbol, int]]:
    """Sizes of the size symbols (defaults, then --set), and pinned partition sizes. `option` names
    where the sets came from in messages (a recording's sizes are no --set)."""
    size_symbols = {s.name: s for s in diagram.size_symbols}
    tiles = partition_symbols(diagram)
    sizes = {s: v for s, v in diagram.defaults.items() if s.name in size_symbols}
    pins: dict[sympy.Symbol, int] = {}
    for key, value in sets.items():
        if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
            raise NapkinError(f"{option} {key}={value}: sizes are positive whole numbers")
        if value > MAX_SIZE:
            raise NapkinError(f"{option} {key}={value}: size is out of range (at most 2**40)")
        if key in size_symbols:
            sizes[size_symbols[key]] = value
        elif key in tiles:
            pins[tiles[key]] = value
        elif key in diagram.axes:
            raise NapkinError(f"{option} {key}: the size of axis {key!r} is {diagram.size(key)}",
                              hint=f"set {', '.join(sorted(str(s) for s in diagram.size(key).free_symbols))}"
                                   " instead")
        else:
            known = sorted(size_symbols) + sorted(tiles)
            close = difflib.get_close_matches(key, known, n=1)
            raise NapkinError(f"{option} {key}: {diagram.name} has no size or tile size {key!r}",
                              hint=f"did you mean {close[0]}?" if close else f"known: {', '.join(known)}")
    missing = [n for n, s in size_symbols.items() if s not in sizes]
    if missing:
        raise NapkinError(f"size {missing[0]!r} has no default in {diagram.name}",
                          file=diagram.source, hint=f"pass --set {missing[0]}=N")
    check_axis_sizes(diagram, sizes)
    return sizes, pins


def check_axis_sizes(diagram: Diagram, sizes: dict[sympy.Symbol, int]) -> None:
    """Every axis whose size `sizes` fix is a positive whole number of at most 2**40 at them: the
    sizes of a command, or a file's defaults (napkin diagrams check)."""
    for axis in diagram.axes.values():
        if not axis.size.free_symbols <= set(sizes):
            continue
        value = at(axis.size, sizes)
        if not (value.is_Integer and 0 < int(value) <= MAX_SIZE):
            raise NapkinError(f"axis {axis.name!r} has size {axis.size} = {value}, not a positive "
                              "whole number (at most 2**40)", file=diagram.source,
                              field=f"axes.{axis.name}")


# -- symbolic models ---------------------------------------------------------------------------------

@dataclass(frozen=True)
class LevelModel:
    level: ModelLevel
    schedule: Schedule
    cost: LevelCost
    optimum: ClosedForm | None
    optimum_bytes: ClosedForm | None


def level_models(diagram: Diagram, kernel: Kernel, levels: tuple[ModelLevel, ...]) -> list[LevelModel]:
    models = []
    optima: dict[str, tuple[ClosedForm | None, ClosedForm | None]] = {}
    for lv in levels:
        partition = kernel.partitions.get(lv.partition_level, Partition())
        if lv.suffix:
            partition = partition.renamed(lv.suffix)
        sched = schedule(diagram, kernel, lv.partition_level, partition)
        cost = level_cost(sched)
        if lv.partition_level not in optima:   # an implied level has the same H*(a, M)
            drawn = cost if not lv.suffix else level_cost(schedule(diagram, kernel, lv.partition_level))
            optima[lv.partition_level] = _optimum(drawn)
        models.append(LevelModel(lv, sched, cost, *optima[lv.partition_level]))
    return models


def _optimum(cost: LevelCost) -> tuple[ClosedForm | None, ClosedForm | None]:
    part = cost.schedule.partition
    group = tuple(s for _, s in part.group)
    stream = (part.stream[1],) if part.stream else ()
    return (closed_form(cost.transfers, cost.memory, group, stream),
            closed_form(cost.transfer_bytes, cost.memory_bytes, group, stream))


# -- the analysis --------------------------------------------------------------------------------------

def analyze(diagram: str | Diagram, gpu: str | Profile, *, sets: dict[str, int] | None = None,
            dtype: str | None = None, cluster: int | None = None) -> Analysis:
    d = load(diagram, dtype=dtype)
    profile = hardware.load(gpu)
    gpu_source = profile.source
    for name in {d.dtype, *(d.arrays[i].dtype for op in d.ops if op.primitive.contraction
                            for i in op.inputs)}:
        profile.check_dtype(name)
    sizes, pins = resolve_sizes(d, sets or {})
    try:
        levels = model_levels(d, profile, cluster=cluster)
    except NapkinError as exc:   # a profile problem names the profile; an option names itself
        from_option = (exc.field or "").startswith("--")
        raise (exc if exc.file or from_option else exc.located(file=gpu_source)) from None
    kernels = [_analyze_kernel(d, k, levels, profile, sizes, pins) for k in d.kernels]
    return _result(d, profile, gpu_source, sizes, cluster, kernels)


def _analyze_kernel(d: Diagram, kernel: Kernel, levels: tuple[ModelLevel, ...], profile: Profile,
                    sizes: dict, pins: dict) -> tuple[Kernel, list[LevelModel], list[Choice],
                                                      ClassicRule | None]:
    models = level_models(d, kernel, levels)
    choices: list[Choice] = []
    upper: dict[str, float] = {}      # H of each level above the lowest, at its chosen tiles
    for i, m in enumerate(models):
        lowest = i == len(models) - 1
        own_pins = {s: v for s, v in pins.items() if s in m.schedule.partition.symbols}
        where = f"for kernel {kernel.name} at {m.level.name} "
        exprs = {f"flops_{p}": m.cost.counted[f"flops_{p}"] for p in PIPELINES}
        if lowest:
            divisible = hardware_divisors(m.schedule, profile)
            exprs["steps"] = m.cost.counted["steps"]
            exprs["edge_bytes"] = m.cost.counted["edge_bytes"]
            exprs["ramp"] = m.cost.counted["ramp"]

            def objective(values, level=m.level):   # the levels above have their tiles: `upper`
                moved = received(levels, {**upper, level.name: values["transfer_bytes"]})
                above = sum(moved[lv.name] * _weight(lv, profile) for lv in levels if lv.name in upper)
                parts = kernel_parts({**values, f"{level.name}_bytes": moved[level.name]},
                                     {level.name: level.feed_s_per_byte}, profile, d.dtype)
                return np.maximum(parts.compute, above + parts.transfer) + parts.exposed
        else:
            divisible = ()

            def objective(values):
                return values["transfer_bytes"]
        try:
            choice = search(m.cost, sizes, limit_bytes=m.level.memory_bytes, exprs=exprs,
                            objective=objective, divisible=divisible,
                            divides=skip_divides(m.schedule), pinned=own_pins, what=where)
        except NapkinError as exc:
            where_in_file = f"{kernel.path}.partition.{m.level.partition_level}"
            raise exc.located(file=d.source, field_prefix=where_in_file) from None
        choices.append(choice)
        upper[m.level.name] = choice.metrics["transfer_bytes"]
    low = models[-1]
    try:
        rule = classic_rule(low.cost, sizes, limit_bytes=low.level.memory_bytes, dtype=d.dtype,
                            divisible=hardware_divisors(low.schedule, profile),
                            divides=skip_divides(low.schedule))
    except NapkinError as exc:
        raise exc.located(file=d.source, field_prefix=f"{kernel.path}.partition."
                                                       f"{low.level.partition_level}") from None
    return kernel, models, choices, rule


def _weight(level: ModelLevel, profile: Profile) -> float:
    """Seconds per byte into a level, at the calibrated fraction of the bandwidth feeding it."""
    return level.feed_s_per_byte / params_of(profile).get(f"bandwidth_efficiency.{level.name}", 1.0)


# -- the model's terms at given configurations (napkin sweep, napkin calibrate) ---------------------------

@dataclass(frozen=True)
class Terms:
    """What the predicted time of one kernel depends on, at one problem size, for several
    configurations: each value is an array with one entry per configuration."""

    kernel: str
    dtype: str
    values: dict[str, np.ndarray]    # flops_<pipeline>, groups, steps, transfer bytes into <level>_bytes
    weights: dict[str, float]        # level -> seconds per byte at the datasheet bandwidth feeding it

    def time(self, profile: Profile) -> np.ndarray:
        """Predicted seconds per configuration (the profile's calibration applied)."""
        return kernel_time(self.values, self.weights, profile, self.dtype)


class TermModel:
    """The symbolic model of one kernel of a diagram on a GPU, evaluated at many configurations.

    The levels above the lowest take the tiles napkin analyze gives them (their own minimum of H);
    the lowest takes each configuration's tiles, with exact (ceiling) group counts.
    """

    def __init__(self, diagram: Diagram, profile: Profile, kernel: str) -> None:
        found = [k for k in diagram.kernels if k.name == kernel]
        if not found:
            raise NapkinError(f"{diagram.name} has no kernel {kernel!r}", file=diagram.source,
                              hint=f"its kernels: {', '.join(k.name for k in diagram.kernels)}")
        self.diagram, self.profile, self.kernel = diagram, profile, found[0]
        self.models = level_models(diagram, found[0], model_levels(diagram, profile))

    @property
    def tiles(self) -> tuple[str, ...]:
        """The lowest level's partition symbols: what a configuration sets."""
        return tuple(s.name for s in self.models[-1].schedule.partition.symbols)

    def terms(self, sets: dict[str, int], points: list[dict[str, int]]) -> Terms:
        d = self.diagram
        sizes, _ = resolve_sizes(d, {k: v for k, v in sets.items() if k not in self.tiles})
        n = len(points)
        values: dict[str, np.ndarray] = {}
        for m in self.models[:-1]:
            choice = search(m.cost, sizes, limit_bytes=m.level.memory_bytes, exprs={},
                            objective=lambda v: v["transfer_bytes"], what=f"at {m.level.name} ")
            values[f"{m.level.name}_bytes"] = np.full(n, choice.metrics["transfer_bytes"])
        low = self.models[-1]
        symbols = low.schedule.partition.symbols
        missing = [s.name for s in symbols if any(s.name not in p for p in points)]
        if missing:
            raise NapkinError(f"a configuration of kernel {self.kernel.name} lacks tile size "
                              f"{missing[0]!r}", file=d.source)
        at = {s: np.array([p[s.name] for p in points], dtype=np.float64) for s in symbols}
        exprs = {f"flops_{p}": low.cost.counted[f"flops_{p}"] for p in PIPELINES}
        exprs["steps"] = low.cost.counted["steps"]
        exprs["edge_bytes"] = low.cost.counted["edge_bytes"]
        exprs["ramp"] = low.cost.counted["ramp"]
        evaluated = evaluate_points(low.cost, sizes, at, exprs)
        values.update({k: evaluated[k] for k in (*exprs, "groups")})
        values[f"{low.level.name}_bytes"] = evaluated["transfer_bytes"]
        values["memory_bytes"] = evaluated["memory_bytes"]
        broken = np.full(n, "", dtype=object)      # the first divisor rule each configuration breaks
        for rule in (*hardware_divisors(low.schedule, self.profile), *skip_divides(low.schedule)):
            fails = ~obeyed(rule, at, sizes) & (broken == "")
            broken[fails] = rule.reason
        values["broken"] = broken
        weights = {m.level.name: m.level.feed_s_per_byte for m in self.models}
        return Terms(self.kernel.name, d.dtype, values, weights)


def _skipping(skip) -> str:
    """What block skipping drops, in a line (analyzer.model.fusion.skip_extent counts it)."""
    if skip.after != 0:     # a band: not causal
        start = (f"from the chunk of its first row's first {skip.key} ({skip.before} before a row's own)"
                 if skip.before is not None else f"from the first {skip.key}")
        end = (f"to the chunk of its last row's last {skip.key} ({skip.after} after a row's own)"
               if skip.after is not None else f"to the last {skip.key}")
        return f"{skip.mask.name}: group of {skip.query} streams {skip.key} {start} {end}"
    text = f"{skip.mask.name}: group of {skip.query} streams {skip.key} up to its diagonal"
    if skip.before is not None:
        text += (f", from the chunk of its first row's first {skip.key} (a window of {skip.before + 1}: "
                 f"{skip.before} before a row's own)")
    return text


def _result(d: Diagram, profile: Profile, gpu_source: str, sizes: dict, cluster: int | None,
            kernels: list) -> Analysis:
    kernel_out = []
    kernel_of = {}
    for kernel, models, choices, rule in kernels:
        kernel_of.update(dict.fromkeys(kernel.ops, kernel.name))
        lowest, low_choice = models[-1], choices[-1]
        flops = {p: low_choice.metrics[f"flops_{p}"] for p in PIPELINES
                 if low_choice.metrics[f"flops_{p}"]}
        levels = [m.level for m in models]
        transfer_bytes = {m.level.name: c.metrics["transfer_bytes"]
                          for m, c in zip(models, choices, strict=True)}
        moved = received(levels, transfer_bytes)
        weights = {lv.name: lv.feed_s_per_byte for lv in levels}
        paths = {m.level.name: f"{m.level.source}->{m.level.name}" for m in models}
        pred = predict(flops, moved, weights, low_choice.metrics["groups"], profile, d.dtype,
                       paths, low_choice.metrics.get("steps", 0.0), low_choice.metrics.get("edge_bytes", 0.0),
                       low_choice.metrics.get("ramp", 1.0))
        level_out = [_level_out(m, c, float(moved[m.level.name]), sizes, profile, d.dtype)
                     for m, c in zip(models, choices, strict=True)]
        sched = lowest.schedule
        subs = {**sizes, **{s: v for s, v in low_choice.values.items()}}
        kernel_out.append(KernelOut(
            name=kernel.name, ops=list(kernel.ops), head=[o.name for o in sched.head],
            body=[o.name for o in sched.body], tail=[o.name for o in sched.tail],
            block_skipping=_skipping(sched.skip) if sched.skip else None,
            notes=list(sched.notes) + _level_notes(models), levels=level_out,
            flops={p: to_text(v) for p, v in lowest.cost.flops.items()},
            flops_value={p: float(at(v, subs)) for p, v in lowest.cost.flops.items()},
            compute_time_s=pred.compute_s, utilization=pred.utilization,
            transfer_time_s=pred.transfer_time_s, latency_time_s=pred.latency_s, overhead_time_s=pred.added_s,
            power_time_s=pred.power_s, exposed_time_s=pred.exposed_s, predicted_time_s=pred.time_s,
            bound=pred.bound,
            cluster_trade_off_s=_cluster_trade_off(models, profile, sizes) if cluster else None,
            classic_rule=_classic_out(rule, levels, transfer_bytes, weights, paths, profile, d.dtype)))
    compute = sum(max(k.compute_time_s.values(), default=0.0) for k in kernel_out)
    transfer = sum(k.transfer_time_s for k in kernel_out)
    total = sum(k.predicted_time_s for k in kernel_out)
    tensor = sum(k.flops_value.get("tensor", 0.0) for k in kernel_out)
    bounds = {k.bound for k in kernel_out}
    bound = bounds.pop() if len(bounds) == 1 else "mixed: " + ", ".join(
        f"{k.name} {k.bound}" for k in kernel_out)
    totals = TotalsOut(flops=sum(sum(k.flops_value.values()) for k in kernel_out), tensor_flops=tensor,
                       compute_time_s=compute, transfer_time_s=transfer, predicted_time_s=total,
                       throughput_flops_per_s=tensor / total if total else 0.0, bound=bound)
    axes_of = d.axes_of()
    ops = [OpOut(name=o.name, primitive=o.primitive.name, column=o.column, inputs=list(o.inputs),
                 output_axes=list(o.applied.output), over=o.applied.over, weave=list(o.weave),
                 broadcast={k: list(v) for k, v in o.broadcast(axes_of).items()},
                 kernel=kernel_of[o.name]) for o in d.ops]
    size_out = [SizeOut(axis=a.name, expression=to_text(a.size), value=int(at(a.size, sizes)))
                for a in d.axes.values()]
    return Analysis(
        napkin_version=__version__,
        diagram=DiagramOut(name=d.name, title=d.title, paper=d.paper, source=d.source,
                           levels=list(d.levels)),
        gpu=GpuOut(name=profile.name, description=profile.description,
                   source=gpu_source, calibration=params_of(profile) if profile.portable_fitted else None),
        dtype=d.dtype, cluster=None if cluster is None else cluster, sizes=size_out, ops=ops,
        kernels=kernel_out, totals=totals,
        assumptions=ASSUMPTIONS + ([CALIBRATED] if profile.portable_fitted else []))


def _classic_out(rule: ClassicRule | None, levels: list[ModelLevel], transfer_bytes: dict[str, float],
                 weights: dict[str, float], paths: dict[str, str], profile: Profile,
                 dtype: str) -> ClassicRuleOut | None:
    """The rule's tiles at the lowest level; the levels above keep their chosen tiles."""
    if rule is None:
        return None
    level = levels[-1].name
    flops = {p: rule.metrics[f"flops_{p}"] for p in PIPELINES if rule.metrics[f"flops_{p}"]}
    moved = received(levels, {**transfer_bytes, level: rule.metrics["transfer_bytes"]})
    pred = predict(flops, moved, weights,
                   rule.metrics["groups"], profile, dtype, paths, rule.metrics.get("steps", 0.0),
                   rule.metrics.get("edge_bytes", 0.0), rule.metrics.get("ramp", 1.0))
    return ClassicRuleOut(
        level=level, query_axis=rule.axes.query, key_axis=rule.axes.key, head_axis=rule.axes.head,
        head_dim=rule.head_dim, memory_elements=rule.memory_elements, b_c=rule.b_c, b_r=rule.b_r,
        tiles={s.name: v for s, v in rule.tiles.items()}, transfer_bytes=rule.metrics["transfer_bytes"],
        memory_bytes=rule.metrics["memory_bytes"], memory_limit_bytes=rule.limit_bytes, fits=rule.fits,
        breaks=list(rule.breaks), optimal_tiles={s.name: v for s, v in rule.optimum.values.items()},
        optimal_transfer_bytes=rule.optimum.metrics["transfer_bytes"], ratio=rule.ratio,
        predicted_time_s=pred.time_s)


def _cluster_trade_off(models: list[LevelModel], profile: Profile, sizes: dict) -> dict[str, float] | None:
    """Delta H*(N) (Appendix A.2.3) for every cluster size the profile has a bandwidth for."""
    cross, child = models[-2], models[-1]
    if cross.level.role != "cross" or child.optimum_bytes is None:
        return None
    table = profile.level(cross.level.name).bandwidth_bytes_per_s_by_cluster or {}
    w_hc = 1 / cross.level.bandwidth_bytes_per_s      # direct: the level feeding the child
    return {str(n): float(at(cluster_gain(child.optimum_bytes.terms, w_hc, 1 / bw,
                                          child.level.memory_bytes, n), sizes))
            for n, bw in sorted(table.items())}


def _level_notes(models: list[LevelModel]) -> list[str]:
    notes = []
    for x, c in itertools.pairwise(models):
        lv, child = x.level, c.level
        if lv.role != "cross":
            continue
        notes.append(f"clusters of {lv.children}: each cluster loads {lv.name}'s transfers once from "
                     f"{lv.source} and shares them; {child.name} receives the rest of its transfers "
                     f"across the cluster (Theorem 3, Equation 11)")
        if lv.weight_s_per_byte < 0:
            notes.append(
                f"clusters of {lv.children}: {lv.name} transfers at {child.bandwidth_bytes_per_s:.3g} B/s "
                f"are slower than direct {lv.source} -> {child.name} transfers at "
                f"{lv.bandwidth_bytes_per_s:.3g} B/s, so Theorem 3's weight of the cross level is negative "
                "and clusters cost time (Appendix A.2.3: Delta H* < 0)")
    return notes


def _level_out(m: LevelModel, c: Choice, moved: float, sizes: dict, profile: Profile,
               dtype: str) -> LevelOut:
    cost, lv = m.cost, m.level
    part = m.schedule.partition
    limit = None
    tensor = cost.flops.get("tensor")
    b = None
    if m.optimum is not None and tensor is not None:
        b = bandwidth_limit(m.optimum, useful_flops(tensor, set(part.symbols)), sizes,
                            tensor_rate=profile.rate("tensor", dtype),
                            bandwidth_bytes_per_s=lv.bandwidth_bytes_per_s,
                            bytes_per_value=bytes_per_value(dtype), memory_bytes=lv.memory_bytes)
    if b is not None:
        limit = BandwidthLimitOut(
            compute_per_transfer=b.compute_per_transfer,
            min_memory_bytes=None if b.min_memory_values is None
            else b.min_memory_values * bytes_per_value(dtype),
            min_sizes=b.min_sizes, tile_sizes=b.tile_sizes, min_sizes_at_memory=b.min_sizes_at_memory)
    optimum = None
    if m.optimum is not None:
        optimum = OptimumOut(
            h_star=to_text(m.optimum.h_star),
            h_star_bytes=to_text(m.optimum_bytes.h_star) if m.optimum_bytes else None,
            standard_form=[StandardTermOut(alpha=to_text(t.alpha), beta=to_text(t.beta))
                           for t in m.optimum.terms],
            memory_lead=to_text(m.optimum.memory_lead),
            group_sizes={s.name: to_text(v) for s, v in m.optimum.group_sizes.items()})
    latex = {"transfers": sympy.latex(cost.transfers), "per_group": sympy.latex(cost.per_group),
             "groups": sympy.latex(cost.groups), "memory": sympy.latex(cost.memory)}
    if m.optimum is not None:
        latex["h_star"] = sympy.latex(m.optimum.h_star)
    return LevelOut(
        level=lv.name, role=lv.role, drawn=lv.drawn, source=lv.source,
        bandwidth_bytes_per_s=lv.bandwidth_bytes_per_s, weight_s_per_byte=lv.weight_s_per_byte,
        memory_limit_bytes=lv.memory_bytes, children=lv.children,
        group={a: s.name for a, s in part.group},
        stream={part.stream[0]: part.stream[1].name} if part.stream else {},
        transfers=to_text(cost.transfers), transfer_bytes=to_text(cost.transfer_bytes),
        per_group=to_text(cost.per_group), groups=to_text(cost.groups), memory=to_text(cost.memory),
        memory_bytes=to_text(cost.memory_bytes), optimum=optimum, bandwidth_limit=limit,
        chosen={s.name: v for s, v in c.values.items()}, constraints=list(c.constraints),
        transfers_values=c.metrics["transfers"], transfers_bytes_value=c.metrics["transfer_bytes"],
        memory_values=c.metrics["memory"], memory_bytes_value=c.metrics["memory_bytes"],
        groups_value=c.metrics["groups"], received_bytes_value=moved,
        transfer_time_s=moved * _weight(lv, profile), latex=latex)
