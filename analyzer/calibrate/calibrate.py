"""The pipeline of `napkin calibrate`: recording + GPU profile -> calibrated profile + validation.

    [compile recording -> the compiler's register count, fitted: resident blocks and legality follow it]
    recording (bench/sweep_h200.py) -> measured records -> the model's terms of each, derived again
    from its diagram (components), weighted by how near each runs to its size's best -> held-out
    split -> robust fit on the training records (log errors and each size's choice regret), bootstrap
    uncertainties -> predictions before (datasheet) and after -> errors, rank correlation and the
    model's first choice per shape (napkin sweep with each profile) -> a calibrated profile
    [another GPU's recording -> this fit with that GPU's datasheet figures: its errors and choices there]
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from analyzer import hardware
from analyzer.calibrate.components import components, measured, model_of
from analyzer.calibrate.fit import (
    FITTED,
    Components,
    Fit,
    bootstrap,
    fit,
    near_best_weights,
    reached_bounds,
    rms_log_error,
)
from analyzer.calibrate.ranges import at_bounds_text, check_ranges, parameter_range
from analyzer.calibrate.record import Record, Recording, check_gpu, load_recording
from analyzer.calibrate.registers import RegisterCheck, check_registers, fit_registers
from analyzer.calibrate.validate import (
    ClockCheck,
    Errors,
    ShapeResult,
    Validation,
    by_shape,
    clock_check,
    errors,
    shape_of,
    split,
    validate,
)
from analyzer.common.errors import NapkinError
from analyzer.common.progress import Progress, silent
from analyzer.config.kernels import configure_kernels
from analyzer.config.sweep import sweep
from analyzer.hardware import (
    SCALARS,
    Calibration,
    Estimate,
    HeldOut,
    Profile,
    RegisterRelation,
    held_out_fit,
)
from analyzer.model.analysis import resolve_sizes


@dataclass(frozen=True)
class Result:
    recording: Recording
    source: str                      # the recording's path as given
    records: list[Record]            # measured, in order
    splits: np.ndarray
    base: Profile                    # the datasheet profile
    calibrated: Profile
    fit: Fit
    predictions: dict[str, np.ndarray]
    validation: Validation
    ranking_seconds: float           # the slowest napkin sweep of the calibrated profile
    registers: RegisterCheck | None = None   # the compiler's register counts, with --registers
    clocks: ClockCheck | None = None         # the predicted SM clock against the sampled one
    components: Components | None = None     # the model's terms of each record, the fit's input
    across: Across | None = None             # the fit carried to another GPU's recording


@dataclass(frozen=True)
class Across:
    """This fit on another GPU's recording, with that GPU's datasheet figures: what a calibration carried
    to a GPU it was not fitted on predicts there (every record of it unseen by the fit)."""

    source: str                              # the other recording's path as given
    gpu: str                                 # the other GPU, as its recording names it
    errors: dict[str, Errors]                # family -> errors over all its records
    shapes: list[ShapeResult]                # per shape: the carried fit's first choice against the best


def calibrate(recording: str, gpu: str | Profile, *, held_out_size: dict[str, int] | None = None,
              samples: int = 40, name: str | None = None, registers: str | None = None,
              fitted: Fit | None = None, other: str | None = None, other_gpu: str | Profile | None = None,
              allow_gpu_mismatch: bool = False, progress: Progress = silent) -> Result:
    """`registers`: a compile recording; the compiler's register count is fitted first, and resident
    blocks and legality follow it in the time fit and in the calibrated profile. `fitted`: parameters
    (with their uncertainties) to validate instead of fitting them, such as a calibrated profile's;
    their RMS log error is taken on the training records. `other`, `other_gpu`: another GPU's recording
    and profile, to carry the fit across GPUs (Result.across). A recording measured on another GPU model
    than the profile's is refused unless `allow_gpu_mismatch`. `progress` hears of each stage and each
    bootstrap refit."""
    rec = load_recording(recording)
    records = measured(rec)
    base = hardware.load(gpu)
    base = base.model_copy(update={"calibration": None})
    check_gpu(rec.meta, recording, base, allowed=allow_gpu_mismatch)
    theirs = None
    if other is not None:     # checked before the fit, which takes minutes
        theirs = (load_recording(other), hardware.load(other_gpu or gpu).model_copy(update={"calibration": None}))
        check_gpu(theirs[0].meta, other, theirs[1], option="--across", allowed=allow_gpu_mismatch)
    if held_out_size:
        check_held_out(records, held_out_size, recording)
    check_records(rec, recording, base)
    reg_fit = fit_registers(records, registers, base) if registers else None
    relation = reg_fit.register_relation() if reg_fit else None
    c = components(records, base, counted(base, relation))
    shapes = [shape_of(r) for r in records]
    number = {s: i for i, s in enumerate(dict.fromkeys(shapes))}
    c = replace(c, weight=near_best_weights(c.measured, shapes), size=np.array([number[s] for s in shapes]))
    splits = split(records, held_out_size)
    train = np.where(splits == "train")[0]
    if len(train) < 2 * len(FITTED):
        raise NapkinError(f"{recording}: {len(train)} training records are too few to fit "
                          f"{len(FITTED)} parameters", hint="record more configurations")
    if fitted is None:
        bounds = fit_bounds(base, c)
        progress("fit", 0, 1)
        found = fit(c.take(train), bounds=bounds)
        progress("fit", 1, 1)
        check_ranges(found.values, **range_limits(base, c), source=recording)
        best = bootstrap(c.take(train), found, samples=samples, bounds=bounds, progress=progress)
    else:   # parameters given, not fitted: at a bound as least_squares would have said of them
        best = replace(fitted, rms_log_error=rms_log_error(c.take(train), fitted.values),
                       at_bounds=fitted.at_bounds or reached_bounds(fitted.values, fit_bounds(base, c)))
    predictions = {"datasheet": c.time({}), "calibrated": c.time(best.values)}
    calibrated = calibrated_profile(base, best, rec, recording, name, len(train), relation,
                                    held_out_errors(records, predictions["calibrated"], splits))
    choices, slowest = {}, 0.0
    for i, (label, profile) in enumerate((("datasheet", base), ("calibrated", calibrated))):
        progress("choices", i, 2)
        choices[label], seconds = first_choices(records, profile)
        slowest = max(slowest, seconds) if label == "calibrated" else slowest
    progress("choices", 2, 2)
    v = validate(records, predictions, splits, choices)
    v.shapes[KERNEL] = by_shape(records, predictions["calibrated"], kernel_choices(records, calibrated))
    check = check_registers(reg_fit, records, predictions["calibrated"], v.shapes["calibrated"]) \
        if reg_fit else None
    clocks = clock_check(records, base.clocks.boost_hz * c.parts(best.values).clock_share,
                         base.clocks.boost_hz)
    across = carried(other, *theirs, best, relation) if other is not None and theirs is not None else None
    return Result(rec, recording, records, splits, base, calibrated, best, predictions, v, slowest, check,
                  clocks, c, across)


def carried(recording: str, rec: Recording, base: Profile, fitted: Fit, relation: RegisterRelation | None
            ) -> Across:
    """`fitted` on another GPU's recording `rec` (read from `recording`), with that GPU's datasheet figures
    (`base`). The register relation travels with it: it describes the compiler (one Triton for sm_90 on
    both Hopper GPUs), not the GPU."""
    records = measured(rec)
    check_records(rec, recording, base)
    predicted = components(records, base, counted(base, relation)).time(fitted.values)
    family = np.array([r.family for r in records])
    measured_s = np.array([r.time_s for r in records])
    theirs = calibrated_profile(base, fitted, rec, recording, None, 0, relation)
    return Across(recording, rec.meta.get("gpu", base.name),
                  {f: errors(predicted[family == f], measured_s[family == f]) for f in sorted(set(family))},
                  by_shape(records, predicted, first_choices(records, theirs)[0]))


def check_held_out(records: list[Record], sizes: dict[str, int], source: str) -> None:
    """A NapkinError where --held-out names a family or a size no measured record has: it would hold
    nothing out, and the report's held-out errors would be of no record."""
    present: dict[str, set[int]] = {}
    for r in records:
        present.setdefault(r.family, set()).add(r.seqlen)
    for family, size in sizes.items():
        if family not in present:
            raise NapkinError(f"--held-out {family}={size}: no measured record is of family {family!r}",
                              file=source, hint=f"its families: {', '.join(sorted(present))}")
        if size not in present[family]:
            raise NapkinError(f"--held-out {family}={size}: no measured {family} record has size {size}",
                              file=source, hint=f"its {family} sizes: "
                                                f"{', '.join(map(str, sorted(present[family])))}")


def counted(base: Profile, relation: RegisterRelation | None) -> Profile:
    """`base` counting registers by the compiler's fitted relation (resident blocks and legality follow
    it), or by Table 1 without one."""
    return base if relation is None else base.model_copy(update={"calibration": Calibration(
        source=relation.source, registers=relation)})


KERNEL = "napkin kernel"      # the shapes' view of what the generated kernel launches (calibrated)


def range_limits(base: Profile, c: Components) -> dict[str, float]:
    """What the parameters' ranges depend on (analyzer.calibrate.ranges): the boost over the tensor
    clock, and the longest measured time."""
    return {"efficiency_max": base.clocks.boost_hz / base.clocks.tensor_hz, "longest_s": float(c.measured.max())}


def fit_bounds(base: Profile, c: Components) -> dict[str, tuple[float, float]]:
    """Each fitted parameter's range, as the fit's bounds."""
    return {n: parameter_range(n, **range_limits(base, c)) for n in FITTED}


def check_records(rec: Recording, source: str, profile: Profile) -> None:
    """Each measured record's sizes and tiles fit its diagram's weaved form, or a NapkinError naming the
    record's field in the recording (not a --set: the sizes are the recording's)."""
    models: dict[tuple, object] = {}
    seen: set[tuple] = set()
    for i, r in enumerate(rec.records):
        shape = (r.diagram, r.dtype, r.kernel, tuple(sorted(r.sizes.items())), tuple(sorted(r.tiles)),
                 tuple(sorted(r.woven)))
        if r.status != "ok" or shape in seen:
            continue
        seen.add(shape)
        key = (r.diagram, r.dtype, r.kernel)
        if key not in models:
            try:
                models[key] = model_of(r.diagram, r.dtype, r.kernel, profile)[2]
            except NapkinError as exc:
                raise NapkinError(f"record of diagram {r.diagram!r}, kernel {r.kernel!r}: {exc.message}",
                                  file=source, field=f"records[{i}]", hint=exc.hint) from None
        model = models[key]
        try:
            resolve_sizes(model.diagram, r.sizes, option="size")
        except NapkinError as exc:
            raise NapkinError(exc.message, file=source, field=f"records[{i}].sizes", hint=exc.hint) from None
        missing = sorted(set(model.tiles) - set(r.tiles) - set(r.woven))
        unknown = sorted(set(r.tiles) - set(model.tiles))
        if missing or unknown:
            raise NapkinError(f"tiles {', '.join(map(repr, r.tiles))} are not kernel {r.kernel}'s "
                              f"({', '.join(t for t in model.tiles if t not in r.woven)})", file=source,
                              field=f"records[{i}].tiles", hint="record with the diagram's tile names")


def kernel_choices(records: list[Record], profile: Profile) -> dict[tuple, str]:
    """Per shape, the configuration the Triton kernel `napkin kernel` generates with `profile` launches
    at that shape: its by-size table's (analyzer.config.by_size), or its one configuration."""
    out, generated = {}, {}
    for r in records:
        shape = shape_of(r)
        if shape in out:
            continue
        g = generated.get((r.diagram, r.dtype))
        if g is None:
            g = generated[(r.diagram, r.dtype)] = configure_kernels(r.diagram, profile, dtype=r.dtype)
        (c,) = [c for k, c in zip(g.kernels, g.launched(r.sizes), strict=True) if k.plan.name == r.kernel]
        out[shape] = _key(r, c.tiles, c.num_warps, c.num_stages)
    return out


def _key(r: Record, tiles: dict[str, int], warps: int, stages: int) -> str:
    """A configuration of r's shape as Record.config_key names it."""
    return r.model_copy(update={"tiles": tiles, "num_warps": warps, "num_stages": stages}).config_key


def first_choices(records: list[Record], profile: Profile) -> tuple[dict[tuple, str], float]:
    """Per shape, the configuration napkin sweep ranks first with `profile`; and the longest time a
    ranking took."""
    out, slowest = {}, 0.0
    seen: dict[tuple, Record] = {}
    for r in records:
        seen.setdefault(shape_of(r), r)
    for shape, r in seen.items():
        s = sweep(r.diagram, profile, dtype=r.dtype, sets=r.sizes, kernel=r.kernel, backend="triton",
                  sibling_fit=False)[0]
        slowest = max(slowest, s.seconds)
        top = s.rows[0]
        out[shape] = _key(r, top.tiles, top.num_warps, top.num_stages)
    return out, slowest


def _estimate(value: float, error: float | None) -> Estimate:
    return Estimate(value=float(f"{value:.4g}"),
                    uncertainty=None if error is None or not np.isfinite(error) else float(f"{error:.2g}"))


def held_out_errors(records: list[Record], predicted: np.ndarray, splits: np.ndarray) -> dict[str, HeldOut]:
    """Per family, how far `predicted` is off on the records held out of the fit (held-out
    configurations and size together: the report's "held out" row)."""
    family = np.array([r.family for r in records])
    measured_s = np.array([r.time_s for r in records])
    out = {}
    for f in sorted(set(family)):
        held = (splits != "train") & (family == f)
        if held.any():
            e = errors(predicted[held], measured_s[held])
            out[f] = HeldOut(e.median, e.p90)
    return out


def calibrated_profile(base: Profile, f: Fit, rec: Recording, source: str, name: str | None,
                       train: int, registers: RegisterRelation | None = None,
                       held_out: dict[str, HeldOut] | None = None) -> Profile:
    """The calibrated profile: `f`'s parameters with their errors, and how the fit did (its RMS log
    error on the `train` training records and, per family, its error on the `held_out` records)."""
    meta = rec.meta
    grouped: dict = {"pipeline_efficiency": {}, "bandwidth_efficiency": {}, "power": {}}
    for n in f.names:
        e = _estimate(f.values[n], f.uncertainty.get(n))
        group, _, key = n.partition(".")
        if key:
            grouped[group][key] = e
        elif n in SCALARS:
            grouped[n] = e
    cal = Calibration(
        source=(f"{source}: {meta.get('command', '?')} on one {meta.get('gpu', 'GPU')}, "
                f"{meta.get('date', '?')}; {train} training configurations, robust fit with "
                f"{f.samples} bootstrap refits (napkin calibrate)"),
        **grouped, registers=registers,
        fit={"training_records": train, "rms_log_error": float(f"{f.rms_log_error:.3g}"),
             **held_out_fit(held_out or {}),
             **({"at_bounds": at_bounds_text(f.at_bounds, f.values)} if f.at_bounds else {})})
    return base.model_copy(update={"name": name or f"{base.name}-calibrated", "aliases": [],
                                   "description": f"{base.description}, model fitted to measurements",
                                   "calibration": cal})
