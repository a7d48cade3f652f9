"""The pipeline of `napkin configure`: diagram + GPU + configuration -> the tables of Section 5.

    load diagram -> kernel schedule at the lowest level -> configuration numbers (named in the file,
    --set, or the tiles napkin analyze chooses) -> divisor checks (5.4) -> variables (5.5, Table 1)
    -> maximum analysis (Table 2) -> compute analysis (Table 3) -> throughput (B.0.1)
    -> warpgroup overlap (Section 6)
"""

from __future__ import annotations

import difflib
import math
from dataclasses import dataclass, replace

from analyzer import hardware
from analyzer.common.errors import NapkinError
from analyzer.common.expr import at
from analyzer.common.version import __version__
from analyzer.config.compute import Compute, compute
from analyzer.config.lowering import variables as lower
from analyzer.config.overlap import overlap as schedule_overlap
from analyzer.config.result import (
    BlockOut,
    CapacityOut,
    ColumnOut,
    ComputeOut,
    ConfigurationOut,
    ConfigurationReport,
    OverlapOut,
    ThroughputOut,
    VariableOut,
)
from analyzer.config.setting import Names, Setting, contraction_dtype
from analyzer.config.tables import capacities, problems
from analyzer.config.throughput import throughput
from analyzer.diagram.compiled import Diagram, Kernel
from analyzer.diagram.spec import ConfigurationSpec
from analyzer.hardware import Profile
from analyzer.model.analysis import analyze, load, partition_symbols, resolve_sizes
from analyzer.model.constraints import hardware_divisors
from analyzer.model.fusion import Schedule, schedule

KNOBS = ("N", "stages", "rows")   # --set names that are not sizes: warpgroups, buffers, rows per load


def configurations(diagram: str | Diagram, *, dtype: str | None = None) -> tuple[Diagram, tuple]:
    d = load(diagram, dtype=dtype) if isinstance(diagram, str) else diagram
    return d, d.configurations


def configure(diagram: str | Diagram, gpu: str | Profile, *, config: str | None = None,
              sets: dict[str, int] | None = None, dtype: str | None = None, overhead: float = 0.0,
              strategy: str | None = None, overlap: str | None = None,
              kernel: str | None = None, dtypes: dict[str, str] | None = None,
              schedule_overlap_: bool = True, loads_from: str | None = None) -> ConfigurationReport:
    """Every table of Section 5 for one configuration; `strategy`, `overlap` and `kernel` override its
    own. schedule_overlap_=False skips Section 6's warpgroup schedule (what legality does not need).
    `loads_from`: the level the throughput analysis loads the streamed chunks from (default GMEM)."""
    d = load(diagram, dtype=dtype) if isinstance(diagram, str) else diagram
    profile = hardware.load(gpu)
    gpu_source = profile.source
    if not 0 <= overhead <= 10:
        raise NapkinError(f"--overhead {overhead}: expected a fraction from 0 to 10, such as 0.66 "
                          "(66%)")
    spec, config_field = _spec(d, config)
    if kernel is not None:
        spec = spec.model_copy(update={"kernel": kernel})
    if dtypes:
        spec = spec.model_copy(update={"dtypes": {**spec.dtypes, **dtypes}})
    for key, value, allowed in (("strategy", strategy, ("fragment", "staged")),
                                ("overlap", overlap, ("inter", "intra"))):
        if value is not None:
            if value not in allowed:
                raise NapkinError(f"--{key} {value!r}: expected {' or '.join(allowed)}")
            spec = spec.model_copy(update={key: value})
    setting = resolve(d, profile, spec, config_field, sets or {})
    if loads_from is not None:
        setting = replace(setting, loads_from=profile.level(loads_from).name)
    variables = lower(setting)
    caps = capacities(setting, variables)
    trouble = problems(setting, variables, caps)
    comp = compute(setting)
    thr = throughput(setting, variables, comp)
    if not schedule_overlap_:
        return _report(d, profile, gpu_source, setting, variables, caps, trouble, comp, thr, None)
    try:
        ov = schedule_overlap(comp, groups=setting.warpgroups, strategy=setting.overlap,
                              overhead=overhead)
    except ValueError as exc:
        where = Where(config_field, d.source)
        raise NapkinError(f"configuration {spec.name!r}: {exc}", **where.key("overlap", "--overlap"),
                          hint="use overlap: inter") from None
    return _report(d, profile, gpu_source, setting, variables, caps, trouble, comp, thr, ov)


# -- which configuration -------------------------------------------------------------------------------

def _spec(d: Diagram, name: str | None) -> tuple[ConfigurationSpec, str | None]:
    if name is None:
        return ConfigurationSpec(name="derived", title="from --set and napkin analyze's tiles"), None
    for i, spec in enumerate(d.configurations):
        if spec.name == name:
            return spec, f"configurations[{i}]"
    known = [c.name for c in d.configurations]
    close = difflib.get_close_matches(name, known, n=1)
    raise NapkinError(f"--config {name!r}: {d.name} has no such configuration",
                      hint=f"did you mean {close[0]}?" if close else
                      (f"its configurations: {', '.join(known)}" if known else
                       "it names none; leave out --config to derive one"))


@dataclass(frozen=True)
class Where:
    """Where a configuration's numbers come from, so that an error names the right field."""

    config: str | None        # "configurations[i]" in the diagram file; None: derived, from options
    source: str               # the diagram file
    sets: frozenset[str] = frozenset()   # names given with --set

    def size(self, key: str) -> dict:
        if self.config is None or key in self.sets:
            return {"field": f"--set {key}"}
        return {"file": self.source, "field": f"{self.config}.sizes.{key}"}

    def key(self, key: str, option: str) -> dict:
        """A configuration key (warpgroups, dtypes, kernel), or the option that replaces it."""
        if self.config is None:
            return {"field": option}
        return {"file": self.source, "field": f"{self.config}.{key}"}


def _kernel(d: Diagram, spec: ConfigurationSpec, where: Where) -> Schedule:
    level = d.levels[-1]
    kernels: list[Kernel] = list(d.kernels)
    if spec.kernel is not None:
        kernels = [k for k in kernels if k.name == spec.kernel]
    for k in kernels:
        s = schedule(d, k, level)
        if s.partition.stream and any(o.primitive.contraction for o in s.ops):
            return s
    raise NapkinError(f"{d.name}: no kernel streams an axis into a contraction at {level}, so there "
                      "is nothing to configure below SMEM", file=d.source,
                      field=f"{where.config}.kernel" if where.config else None,
                      hint="napkin configure takes streamed kernels with a contraction (attention, "
                           "matmul)")


def schedule_of(d: Diagram, kernel: str | None = None) -> Schedule:
    """The schedule napkin configure takes for `kernel` (default: the first it can configure)."""
    spec = ConfigurationSpec(name="derived", kernel=kernel)
    return _kernel(d, spec, Where(None, d.source))


def names_of(s: Schedule) -> Names:
    groups = s.partition.group_sizes
    first = next(o for o in s.ops if o.primitive.contraction)
    rows = tuple(a for a in first.primitive.tensor_roles(first.applied)["m"] if a in groups)
    if not rows:
        raise NapkinError(f"kernel {s.kernel.name!r}: the rows of its first contraction {first.name!r} "
                          "are not grouped, so no thread block owns rows to split over warpgroups",
                          file=s.diagram.source, field=f"{s.kernel.path}.partition.{s.level}",
                          hint="group the m axis of the first contraction (e.g. q -> g_q)")
    b, sym = s.partition.stream
    reducer = next((r for r in s.reducers if r.op.primitive.contraction), None)
    out = None
    if reducer is not None:
        others = [a for a in reducer.op.applied.output if a not in rows and a not in groups]
        out = others[-1] if others else None
    return Names(rows, tuple(groups[a].name for a in rows), f"w_{rows[-1]}", b, sym.name, f"u_{b}",
                 f"c_{b}", out, f"c_{out}" if out else None, f"e_{out}" if out else None)


# -- numbers --------------------------------------------------------------------------------------------

def resolve(d: Diagram, profile: Profile, spec: ConfigurationSpec, config: str | None,
            sets: dict[str, int]) -> Setting:
    where = Where(config, d.source, frozenset(sets))
    s = _kernel(d, spec, where)
    names = names_of(s)
    own = set(names.variables(spec.strategy))
    given = {**spec.sizes, **sets}
    tiles, sizes_known = partition_symbols(d), {x.name for x in d.size_symbols}
    for key, value in given.items():
        if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
            raise NapkinError(f"{key}={value}: sizes, tiles and counts are positive whole numbers",
                              **where.size(key))
        if key not in own and key not in KNOBS and key not in tiles and key not in sizes_known:
            known = sorted(own) + list(KNOBS)
            close = difflib.get_close_matches(key, known + sorted(tiles) + sorted(sizes_known), n=1)
            raise NapkinError(f"{key}: not a size or configuration variable of {d.name} "
                              f"({spec.strategy} strategy)", **where.size(key),
                              hint=f"did you mean {close[0]}?" if close else
                              f"configuration variables: {', '.join(known)}")
    sizes, pins = resolve_sizes(d, {k: v for k, v in given.items() if k not in own and k not in KNOBS})
    dtypes = _dtypes(d, s, spec, where, profile)
    values: dict[str, int] = {sym.name: int(v) for sym, v in sizes.items()}
    values.update({a: int(at(d.size(a), sizes)) for a in d.axes})
    first = next(o for o in s.ops if o.primitive.contraction)
    mma = profile.divisors.mma.get(contraction_dtype(s, first, dtypes))
    w = given.get(names.w) or (mma.m if mma else profile.threads.warp_size)
    n_given = given.get("N") or spec.warpgroups
    by_name = {sym.name: sym for sym in s.partition.symbols}
    row_group = by_name[names.row_groups[0]]
    if n_given and len(names.row_groups) == 1 and row_group not in pins:
        pins[row_group] = n_given * w    # g = N w (Section 5.6)
    derived_from = "--set" if config is None else f"{d.name}'s configuration {spec.name!r}"
    open_tiles = [sym.name for sym in s.partition.symbols if sym not in pins]
    if open_tiles:
        pins = _analyzed(d, profile, s, pins)
        chosen = f"napkin analyze's {', '.join(open_tiles)} for {profile.name}"
        derived_from = (chosen if config is None and not sets else
                        f"{'--set' if config is None else derived_from} and {chosen}")
    values.update({sym.name: int(v) for sym, v in pins.items()})
    rows = math.prod(values[g] for g in names.row_groups)
    if rows % w:
        raise NapkinError(f"{names.w}={w} does not divide the block's {rows} rows "
                          f"({' x '.join(names.row_groups)})", **where.size(names.w),
                          hint=f"pick {names.w} dividing {rows}, or set N so that g = N {names.w}")
    n = rows // w
    if n_given and n_given != n:
        raise NapkinError(f"N={n_given} {profile_unit(profile)}s of {names.w}={w} rows make "
                          f"{n_given * w} rows, but the block has {rows}",
                          **(where.size("N") if "N" in where.sets else
                             where.key("warpgroups", "--set N")),
                          hint="leave out one of N and the group size")
    values[names.w] = w
    values[names.u] = given.get(names.u, values[names.s])
    if spec.strategy == "staged":
        values[names.c_stream] = given.get(names.c_stream, values[names.u])
        if names.out:
            values[names.c_out] = given.get(names.c_out, values[names.out])
            values[names.e_out] = given.get(names.e_out, values[names.c_out])
    notes = []
    stages = given.get("stages", spec.stages)
    if config is None and "stages" not in given:   # as napkin analyze counts memory: one chunk
        stages = 1
        notes.append("one buffer per streamed load, as napkin analyze counts memory; --set stages=2 "
                     "double-buffers the loads (the paper's 'extra loaded')")
    rows_per_load = given.get("rows") or spec.rows_per_load or rows
    spec = spec.model_copy(update={"stages": stages})
    setting = Setting(spec, s, profile, names, values, dtypes, n, rows_per_load, derived_from,
                      tuple(notes))
    _check_divisors(setting, where)
    return setting


def profile_unit(profile: Profile) -> str:
    return "warpgroup" if profile.divisors.mma_threads > profile.threads.warp_size else "warp"


def _analyzed(d: Diagram, profile: Profile, s: Schedule, pins: dict) -> dict:
    """Tiles from napkin analyze for the symbols the configuration leaves open."""
    sets = {sym.name: v for sym, v in pins.items()}
    result = analyze(d, profile, sets={**{k.name: v for k, v in d.defaults.items()}, **sets})
    kernel = next(k for k in result.kernels if k.name == s.kernel.name)
    chosen = kernel.levels[-1].chosen
    symbols = {sym.name: sym for sym in s.partition.symbols}
    return {**pins, **{symbols[k]: v for k, v in chosen.items() if k in symbols}}


def _dtypes(d: Diagram, s: Schedule, spec: ConfigurationSpec, where: Where, profile: Profile) -> dict:
    arrays = set(s.arrays) | {"aux", "P"}
    for key, dtype in spec.dtypes.items():
        if key not in arrays:
            raise NapkinError(f"kernel {s.kernel.name!r} has no array {key!r}",
                              **where.key(f"dtypes.{key}", "--dtype"),
                              hint=f"its arrays: {', '.join(sorted(s.arrays))}, and aux for the "
                                   "softmax auxiliaries")
        if dtype == "fp8" and key == "aux":
            raise NapkinError("auxiliaries need at least fp16", **where.key(f"dtypes.{key}", "--dtype"))
    dtypes = dict(spec.dtypes)
    for op in s.ops:
        if op.primitive.contraction:
            dt = contraction_dtype(s, op, dtypes)
            if dt != "fp32" and dt not in profile.tensor_dtypes:
                raise NapkinError(f"{profile.name} has no {dt} tensor cores for {op.name} "
                                  f"({', '.join(op.inputs)})", **where.key("dtypes", "--dtype"),
                                  hint=f"{profile.name} takes: {', '.join(profile.tensor_dtypes)}")
    return dtypes


def _check_divisors(setting: Setting, where: Where) -> None:
    """Section 5.4: tensor-core tile multiples and 128-byte rows, naming the variable that breaks one."""
    s, p, n, v = setting.schedule, setting.profile, setting.names, setting.values

    def need(name: str | None, divisor: int, why: str) -> None:
        if name and divisor > 1 and v[name] % divisor:
            raise NapkinError(f"{name}={v[name]} breaks a divisor: it must be a multiple of {divisor} "
                              f"({why})", **where.size(name),
                              hint=f"try {name}={max(divisor, v[name] - v[name] % divisor)}")

    def divides(small: str | None, big: str | None) -> None:
        if small and big and v[big] % v[small]:
            raise NapkinError(f"{small}={v[small]} must divide {big}={v[big]} (a subloop takes whole "
                              "chunks, Section 5.2)", **where.size(small))

    staged = setting.strategy == "staged"
    for op in (o for o in s.ops if o.primitive.contraction):
        mma = p.divisors.mma.get(setting.contraction_dtype(op))
        if mma is None:
            continue
        roles = op.primitive.tensor_roles(op.applied)
        instr = f"{p.divisors.mma_instruction} {{}} of {op.name}"
        if set(roles["m"]) & set(n.rows):
            need(n.w, mma.m, instr.format("m"))
        for role, size in (("n", mma.n), ("k", mma.k)):
            if n.stream in roles[role]:
                need(n.s, size, instr.format(role))
                if staged and role == "k":
                    need(n.c_stream, size, instr.format(role))
            if staged and n.out in roles[role] and role == "n":
                need(n.c_out, size, instr.format(role))
        if n.stream in roles["n"] and staged:
            need(n.u, mma.n, instr.format("n") + ": a subloop reads whole fragments")
    divides(n.u, n.s)
    if staged:
        divides(n.c_stream, n.u)
        divides(n.c_out, n.out)
        divides(n.e_out, n.c_out)
    for rule in hardware_divisors(s, p):     # the tiles napkin analyze searches (5.4)
        numbers = {x: v[x.name] for x in rule.factor.free_symbols}
        value = math.prod(v[sym.name] for sym in rule.symbols) * int(rule.factor.subs(numbers))
        if value % rule.divisor:
            named = "*".join(f"{sym.name}={v[sym.name]}" for sym in rule.symbols)
            raise NapkinError(f"{named} breaks a divisor: {rule.reason}",
                              **where.size(rule.symbols[0].name))


# -- the report -----------------------------------------------------------------------------------------

def _report(d, profile, gpu_source, setting: Setting, variables, caps, trouble, comp: Compute, thr,
            ov) -> ConfigurationReport:
    spec = setting.spec
    n = setting.names
    divisors = [f"{n.w}={setting.w}: multiple of the tensor cores' m, and g = N {n.w}"]
    divisors += [r.reason for r in hardware_divisors(setting.schedule, profile)]
    return ConfigurationReport(
        napkin_version=__version__, diagram=d.name, source=d.source, gpu=profile.name,
        gpu_source=gpu_source,
        configuration=ConfigurationOut(
            name=spec.name, title=spec.title, paper=spec.paper, kernel=setting.schedule.kernel.name,
            strategy=spec.strategy, overlap=spec.overlap, unit=setting.unit,
            threads_per_group=setting.threads_per_group, groups=setting.warpgroups,
            stages=spec.stages, derived_from=setting.derived_from),
        values=dict(sorted(setting.values.items())), divisors=divisors,
        variables=[VariableOut(name=v.name, array=v.array, doc=v.doc, shape=v.shape, dims=dict(v.dims),
                               dtype=v.dtype, level=v.level, storage=v.storage, scope=v.scope,
                               multiple=v.multiple, buffers=v.buffers, bytes=v.bytes)
                   for v in variables],
        capacity=[CapacityOut(storage=c.storage, max_bytes=c.max_bytes, block_bytes=c.block_bytes,
                              group_bytes=c.group_bytes,
                              n_max=None if math.isinf(c.n_max) else c.n_max, n=c.n,
                              excess_block_bytes=c.excess_block, excess_group_bytes=c.excess_group,
                              excess_thread_bytes=c.excess_thread,
                              thread_limit_excess_bytes=c.thread_limit_excess, fits=c.fits)
                  for c in caps],
        compute=ComputeOut(
            columns=[ColumnOut(label=c.label, op=c.op, pipeline=c.pipeline, dtype=c.dtype,
                               formula=c.formula, ops_per_row=c.ops_per_row,
                               ops_per_clock=c.ops_per_clock, clocks_per_row=c.clocks_per_row)
                     for c in comp.columns],
            clocks_per_row={p: comp.clocks(p) for p in dict.fromkeys(c.pipeline for c in comp.columns)},
            limiting_pipeline=comp.limiting, overhead_ops_per_row=comp.overhead_ops_per_row),
        throughput=ThroughputOut(
            tensor_clocks_per_row=thr.tensor_clocks_per_row, bytes_per_chunk=thr.bytes_per_chunk,
            clock_hz=thr.clock_hz, bandwidth_bytes_per_s=thr.bandwidth_bytes_per_s,
            sm_count=thr.sm_count, rows=thr.rows, load_time_s=thr.load_time_s, min_rows=thr.min_rows,
            compute_time_s=thr.compute_time_s, ops_per_chunk=thr.ops_per_chunk,
            throughput_flops_per_s=thr.throughput_flops_per_s, bound=thr.bound,
            loads_from=thr.loads_from or profile.levels[0].name),
        overlap=None if ov is None else OverlapOut(
            strategy=ov.strategy, groups=ov.groups, overhead=ov.overhead,
            stages={st.name: st.clocks for st in ov.stages}, period_clocks_per_row=ov.period,
            bound_clocks_per_row=ov.bound,
            utilization=ov.utilization,
            accommodation=None if math.isinf(ov.accommodation) else ov.accommodation,
            blocks=[BlockOut(group=b.group, iteration=b.iteration, stage=b.stage, lane=b.lane,
                             start=b.start, work=b.work, overhead=b.overhead)
                    for b in ov.blocks if b.iteration < 4]),
        fits=not trouble, problems=trouble, notes=list(setting.notes))
