"""napkin calibrate --kernel hopper: the Hopper kernel's model (analyzer.config.hopper) fitted to a sweep
of that kernel's configurations (bench/hopper_sweep.py), and held against what it did not see.

    recording -> measured records (configuration, shape, seconds) -> held-out split: one sequence length
    of the grid and every shape beyond it -> robust fit of HopperParams' parameters on the rest
    (scipy.optimize.least_squares, Huber loss on log errors, each parameter bounded to its meaning),
    uncertainties from the fit's Jacobian -> errors per split and shape class, the model's choice per
    shape against the best measured, and (given a second GPU's recording) the fit carried across GPUs
"""

from __future__ import annotations

import math
import zlib
from collections.abc import Callable
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Any, Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field
from scipy.optimize import least_squares

from analyzer import hardware
from analyzer.calibrate.ranges import at_bounds_text
from analyzer.calibrate.record import MAX_SIZE, Seconds, check_gpu, read_json
from analyzer.calibrate.validate import HELD_OUT_SHARE
from analyzer.common.errors import NapkinError
from analyzer.common.progress import Progress, silent
from analyzer.config.hopper import (
    CHUNKS,
    OVERLAPS,
    SCHEDULES,
    STAGES,
    HopperConfig,
    HopperParams,
    configuration,
    legal,
    predicted_time,
    ranked,
)
from analyzer.config.hopper_params import MODELLED_SCHEDULES, UNMASKED_ONLY
from analyzer.config.scores import SOFTMAX, Scores
from analyzer.hardware import Estimate, HopperFit, Profile

HELD_OUT_SEQLEN = 4096       # the grid's sequence length left out of the fit
REAL_MODEL = "real model: "  # the shape class of real models' short shapes (bench/hopper_sweep.py --parts real)
# what a call pays whatever its work: a launch, a tile's own overhead and each consumer's (`fit`'s second stage)
FIXED_COSTS = ("tile_overhead_s", "consumer_overhead_s", "launch_overhead_s")
BIAS = "bias_efficiency"     # the variants' fit: the bandwidth an additive bias is read at,
BIAS_ROW = "bias_row_clocks"  # and what a row of its tile costs the copy engine beyond its bytes
FP8_TENSOR = "fp8_tensor_efficiency"   # and, where FP8 records are, FP8 wgmma's rate against the 16-bit one's
BIAS_TERMS = (BIAS, BIAS_ROW, FP8_TENSOR)     # the variants' terms that are no score op's cost
HUBER_SCALE = 0.05           # log errors beyond 5 % count linearly: a few odd timings cannot pull the fit
# name -> (start, lower, upper, scale): each parameter's range is where it means what HopperFit says
PARAMETERS = {
    "tensor_efficiency": (1.0, 0.2, 1.2, 1.0),       # up to the boost clock over the tensor clock
    "softmax_overhead": (0.66, 0.0, 4.0, 1.0),       # Section 6.3's 0.66 to start
    "l2_efficiency": (1.0, 0.1, 1.5, 1.0),
    "chunk_overhead_s": (0.0, 0.0, 1e-5, 1e-7),      # below a chunk's own time
    "prologue_chunks": (1.0, 0.0, 8.0, 1.0),
    "tile_overhead_s": (0.0, 0.0, 1e-4, 1e-6),
    "consumer_overhead_s": (0.0, 0.0, 1e-5, 1e-6),
    "launch_overhead_s": (0.0, 0.0, 1e-5, 1e-6),     # a launch from a CUDA graph: microseconds
    "lone_overlap": (0.0, 0.0, 1.0, 1.0),            # between no overlap and intra
    # a causally masked step adds up to two chunks: the mask's compares and selects (about four integer
    # operations a score) are no more thread work than the softmax's, which one chunk's period bounds
    "mask_overhead": (0.0, 0.0, 2.0, 1.0),
    # the tensor cores' and the threads' work a period combine as a p-norm, softness 1/p: from Section 6's
    # perfect overlap (0, the longer alone) to a quadrature sum (1/2); started between
    "overlap_softness": (0.25, 0.0, 0.7, 1.0),
    # from nothing of a tile's fixed cost hidden under the tile before to all of it; fitted only where the
    # recording holds the persistent schedule (otherwise absent, and the model does not rank it)
    "persistent_hidden": (0.5, 0.0, 1.0, 1.0),
    "persistent_slowdown": (0.0, 0.0, 0.3, 0.01),
    # the prefetch schedule's: fitted only where the recording holds it
    "prefetch_hidden": (0.5, 0.0, 1.0, 1.0),
}
# each persistent schedule's own terms, fitted where a record runs it
SCHEDULE_TERMS = {"persistent": ("persistent_hidden", "persistent_slowdown"),
                  "prefetch": ("prefetch_hidden", "persistent_slowdown")}


class HopperConfigEntry(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    WARPGROUPS: int = Field(ge=1, le=8)
    BLOCK_X: Literal[CHUNKS]
    STAGES: Literal[STAGES]
    OVERLAP: Literal[OVERLAPS]
    SCHEDULE: Literal[SCHEDULES]


class HopperRecord(BaseModel):
    """One configuration at one shape, as bench/hopper_sweep.py records it."""

    model_config = ConfigDict(extra="ignore", frozen=True)

    kind: str = Field(description="grid, or the validation's shape class")
    diagram: str
    dtype: Literal["fp16", "bf16", "fp8"]
    head_dim: int = Field(ge=1, le=MAX_SIZE)
    causal: bool
    batch: int = Field(ge=1, le=MAX_SIZE)
    heads_q: int = Field(ge=1, le=MAX_SIZE)
    heads_kv: int = Field(ge=1, le=MAX_SIZE)
    seq_q: int = Field(ge=1, le=MAX_SIZE)
    seq_k: int = Field(ge=1, le=MAX_SIZE)
    value_dim: int | None = Field(None, ge=1, le=MAX_SIZE, description="V's head dim where it has its own (MLA)")
    config: HopperConfigEntry
    status: Literal["ok", "error"]
    time_s: Seconds | None = None

    @property
    def shape(self) -> tuple:
        return (self.kind, self.diagram, self.head_dim, self.batch, self.heads_q, self.heads_kv, self.seq_q,
                self.seq_k)

    def label(self) -> str:
        return f"{self.diagram} d={self.head_dim} b={self.batch} h={self.heads_q} {self.seq_q}x{self.seq_k}"


class HopperRecording(BaseModel):
    model_config = ConfigDict(extra="ignore", frozen=True)

    meta: dict
    records: list[HopperRecord]


def load(path: str, field: str = "RECORDING", bench: str = "hopper_sweep") -> tuple[HopperRecording,
                                                                                    list[HopperRecord]]:
    """The recording and its measured records, of either schedule (bench/hopper_sweep.py --schedules)."""
    rec = read_json(Path(path), HopperRecording, missing=f"no such recording: {path}", field=field,
                    hint=f"give a recording's path, or record one with python bench/{bench}.py on "
                         f"an H100 or H200; napkin ships bench/results/{bench}_h100.json")
    # a schedule the model has no terms for (MODELLED_SCHEDULES) would be priced as another's, and one it
    # does not rank under a mask (`unranked`) would pull its term toward what it does not explain
    measured = [r for r in rec.records if r.status == "ok" and r.time_s and r.config.SCHEDULE in MODELLED_SCHEDULES
                and not unranked(r)]
    if not measured:
        raise NapkinError(f"{path} has no measured records of the Hopper kernel", file=path, field="records")
    return rec, measured


def unranked(r: HopperRecord) -> bool:
    """Whether `r` is a measured record of a schedule the model does not rank under its mask (UNMASKED_ONLY)."""
    return r.status == "ok" and bool(r.time_s) and r.causal and r.config.SCHEDULE in UNMASKED_ONLY


def config_of(profile: Profile, r: HopperRecord, chain: Scores = SOFTMAX) -> HopperConfig:
    c = r.config
    return configuration(profile, r.head_dim, r.dtype, warpgroups=c.WARPGROUPS, chunk=c.BLOCK_X, stages=c.STAGES,
                         overlap=c.OVERLAP, schedule=c.SCHEDULE, causal=r.causal, value_dim=r.value_dim,
                         scores=chain)


def predict(profile: Profile, records: list[HopperRecord], params: HopperParams,
            chains: list[Scores] | None = None) -> np.ndarray:
    """The model's seconds for each record; `chains`, each record's chain of scores (softmax by default)."""
    chains = chains or [SOFTMAX] * len(records)
    return np.array([predicted_time(profile, config_of(profile, r, chain), r.head_dim, r.dtype, seq_q=r.seq_q,
                                    seq_k=r.seq_k, instances=r.batch * r.heads_q, causal=r.causal, params=params,
                                    scores=chain, value_dim=r.value_dim)
                     for r, chain in zip(records, chains, strict=True)])


def _params(spec: dict, x: np.ndarray, source: str = HopperParams.source) -> HopperParams:
    return HopperParams(**dict(zip(spec, map(float, x), strict=True)), source=source)


def parameters(records: list[HopperRecord]) -> dict[str, tuple[float, float, float, float]]:
    """What a fit on `records` can fit: PARAMETERS, less each persistent schedule's terms where no record
    runs it."""
    ran = {r.config.SCHEDULE for r in records}
    terms = {t for terms in SCHEDULE_TERMS.values() for t in terms}
    kept = {t for s, terms in SCHEDULE_TERMS.items() if s in ran for t in terms}
    return {k: v for k, v in PARAMETERS.items() if k not in terms or k in kept}


@dataclass(frozen=True)
class Fitted:
    params: HopperParams
    uncertainty: dict[str, float]     # one standard error per parameter (the Jacobian's)
    rms_log_error: float
    training: int
    at_bounds: dict[str, str] = field(default_factory=dict)   # name -> "lower" or "upper": least_squares'
                                                              # active_mask (a bound it pushed it to)


def solve(spec: dict[str, tuple[float, float, float, float]], residuals) -> tuple[np.ndarray, dict[str, float],
                                                                                float, dict[str, str]]:
    """Least squares of `residuals(x)` (log errors) over the parameters `spec` names (start, lower, upper,
    scale), Huber loss: the values, one standard error each (the Jacobian's), the rms log error and the
    parameters left at a bound (least_squares' active_mask)."""
    start, low, high, scale = (np.array(v) for v in zip(*spec.values(), strict=True))
    found = least_squares(residuals, start, bounds=(low, high), loss="huber", f_scale=HUBER_SCALE,
                          x_scale=scale, diff_step=1e-3)
    r = residuals(found.x)
    dof = max(len(r) - len(start), 1)
    try:     # the Gauss-Newton covariance, (J^T J)^-1 times the residual variance, in units of each
        jac = found.jac * scale      # parameter's scale: seconds and shares differ by 10^7
        cov = np.linalg.pinv(jac.T @ jac) * float(r @ r) / dof
        error = np.sqrt(np.clip(np.diag(cov), 0, None)) * scale
        # a parameter no training record moves (no configuration it describes) is undetermined, not exact
        unmoved = np.linalg.norm(jac, axis=0) <= 1e-9 * max(float(np.abs(jac).max()), 1e-300)
        error = np.where(unmoved, np.inf, error)
    except np.linalg.LinAlgError:
        error = np.full(len(start), np.nan)
    at = {n: "lower" if m < 0 else "upper" for n, m in zip(spec, found.active_mask, strict=True) if m}
    return found.x, {n: float(e) for n, e in zip(spec, error, strict=True)}, float(np.sqrt(np.mean(r ** 2))), at


def fit(profile: Profile, records: list[HopperRecord], source: str) -> Fitted:
    """Least squares on log(predicted / measured), Huber loss, bounded parameters, in two stages where
    real models' short shapes train too: every parameter on the grid, then the costs no size of the work
    changes (FIXED_COSTS) on the grid and the short shapes together, the rest held at the grid's. Fitted
    jointly, the short shapes (all at head dim 64, where the threads set the period) moved the grid's
    terms too, Section 6.3's o from 0.33 to 0.43 on the H200, and the variants' held-out configurations
    went from 4.8 % to 8.9 % (docs/section6.md, "Short shapes")."""
    grid = [r for r in records if not r.kind.startswith(REAL_MODEL)]
    first = _fit(profile, grid, parameters(grid), source)
    if len(grid) == len(records):
        return first
    spec = {k: v for k, v in parameters(records).items() if k in FIXED_COSTS}
    second = _fit(profile, records, spec, source, base=first.params)
    held = {k: v for k, v in first.at_bounds.items() if k not in spec}
    return Fitted(second.params, {**first.uncertainty, **second.uncertainty}, second.rms_log_error, len(records),
                  {**held, **second.at_bounds})


def _fit(profile: Profile, records: list[HopperRecord], spec: dict[str, tuple[float, float, float, float]],
         source: str, base: HopperParams | None = None) -> Fitted:
    """The parameters `spec` names fitted on `records`, the others at `base`'s values (None: all of them
    fitted, from their starts)."""
    measured = np.array([r.time_s for r in records])
    if len(records) < 3 * len(spec):
        raise NapkinError(f"{source}: {len(records)} training records are too few to fit {len(spec)} "
                          "parameters", hint="record more configurations (python bench/hopper_sweep.py)")

    def params(x: np.ndarray) -> HopperParams:
        named = dict(zip(spec, map(float, x), strict=True))
        return _params(spec, x, f"calibrated on {profile.name}") if base is None else replace(base, **named)

    def residuals(x: np.ndarray) -> np.ndarray:
        return np.log(predict(profile, records, params(x)) / measured)

    x, error, rms, at = solve(spec, residuals)
    return Fitted(params(x), error, rms, len(records), at)


@dataclass(frozen=True)
class Errors:
    """|predicted / measured - 1| of a set of records."""

    count: int
    median: float
    p90: float
    worst: float

    @classmethod
    def of(cls, predicted: np.ndarray, measured: np.ndarray) -> Errors:
        e = np.abs(predicted / measured - 1)
        if not len(e):
            return cls(0, math.nan, math.nan, math.nan)
        return cls(len(e), float(np.median(e)), float(np.percentile(e, 90)), float(e.max()))


@dataclass(frozen=True)
class Choice:
    """At one shape: the model's first choice among the measured configurations, and the best measured."""

    shape: tuple
    label: str
    chosen: dict
    best: dict
    regret: float        # measured time of the choice / the best's, less 1


def choices(profile: Profile, records: list[HopperRecord], params: HopperParams,
            chain_of: Callable[[HopperRecord], Scores] = lambda r: SOFTMAX) -> list[Choice]:
    """Per shape, `ranked`'s order (its ties included) restricted to the configurations measured there;
    `chain_of`, a record's chain of scores."""
    by_shape: dict[tuple, list[HopperRecord]] = {}
    for r in records:
        by_shape.setdefault(r.shape, []).append(r)
    out = []
    for shape, recs in by_shape.items():
        r0 = recs[0]
        order = [c.entry() for _, c in ranked(profile, r0.head_dim, r0.dtype, seq_q=r0.seq_q, seq_k=r0.seq_k,
                                              instances=r0.batch * r0.heads_q, causal=r0.causal, params=params,
                                              scores=chain_of(r0), value_dim=r0.value_dim)]
        measured = {tuple(r.config.model_dump().items()): r for r in recs}
        chosen = next((measured[tuple(e.items())] for e in order if tuple(e.items()) in measured), None)
        if chosen is None:
            continue
        best = min(recs, key=lambda r: r.time_s)
        out.append(Choice(shape, f"{r0.kind}: {r0.label()}", chosen.config.model_dump(), best.config.model_dump(),
                          chosen.time_s / best.time_s - 1))
    return out


@dataclass(frozen=True)
class Result:
    source: str
    recording: HopperRecording
    records: list[HopperRecord]
    base: Profile
    fitted: Fitted
    split: list[str]                       # per record: train, held-out configs, held-out size, beyond
    errors: dict[str, dict[str, Errors]]   # model (idealised, calibrated) -> split or shape class -> errors
    choices: dict[str, list[Choice]]       # model -> per shape
    across: dict[str, Errors] | None       # this fit on the other GPU's records: split -> errors
    other: str | None                      # the other GPU's recording
    refused: int                           # records of configurations the legality rule now refuses
    # the score ops' costs fitted on a sweep of the variants (analyzer.calibrate.hopper_variants.Variants,
    # which that module's calibrate sets), or None
    variants: Any = None
    unranked: int = 0       # measured records of a schedule the model does not rank under a mask (UNMASKED_ONLY)


def split_of(r: HopperRecord, held_out: int) -> str:
    """beyond (every shape outside the grid but real models'), held-out size (the grid's `held_out`
    rows), held-out configs (one configuration in HELD_OUT_SHARE, by a hash of it, at every other size: as
    the portable kernels' validation holds them out), or train. Real models' short shapes (REAL_MODEL)
    train beside the grid, their configurations held out alike: the grid's 16k tokens run for 70 us and
    more, in which a launch's microseconds and a tile's per-consumer epilogue hide (fitted on the grid
    alone, launch_overhead_s went to its 10 us bound and the model read an H200's 15 us call as 22 us)."""
    if r.kind.startswith(REAL_MODEL):
        return held_out_split(r, held_out=None)
    return "beyond" if r.kind != "grid" else held_out_split(r, held_out)


def held_out_split(r: HopperRecord, held_out: int | None, salt: str = "") -> str:
    """held-out size (a record at the `held_out` length; None: none), held-out configs (one configuration
    in HELD_OUT_SHARE, by a hash of it and `salt`), or train."""
    if held_out in (r.seq_q, r.seq_k):
        return "held-out size"
    c = r.config
    key = f"{salt} " * bool(salt) + f"{c.WARPGROUPS} {c.BLOCK_X} {c.STAGES} {c.OVERLAP} {c.SCHEDULE}"
    return "held-out configs" if zlib.crc32(key.encode()) % HELD_OUT_SHARE == 0 else "train"


def calibrate(recording: str, gpu: str | Profile, *, held_out: int = HELD_OUT_SEQLEN, other: str | None = None,
              other_gpu: str | Profile | None = None, allow_gpu_mismatch: bool = False,
              progress: Progress = silent) -> Result:
    """The softmax attention's parameters fitted on `recording` (analyzer.calibrate.hopper_variants
    fits the score ops' costs on top)."""
    rec, records = load(recording)
    base = hardware.load(gpu)
    base = base.model_copy(update={"calibration": None})
    check_gpu(rec.meta, recording, base, allowed=allow_gpu_mismatch)
    if other is not None:     # checked before the fit
        other_rec, theirs = load(other)
        them = hardware.load(other_gpu or gpu).model_copy(update={"calibration": None})
        check_gpu(other_rec.meta, other, them, option="--across", allowed=allow_gpu_mismatch)
    # what the legality rule refuses today (a register reserve learnt after the sweep) the model never ranks
    refused = sum(not legal(base, config_of(base, r)) for r in records)
    records = [r for r in records if legal(base, config_of(base, r))]
    if not records:
        raise NapkinError(f"{recording}: no record is a legal configuration on {base.name}", file=recording,
                          field="records", hint="calibrate against the profile the recording was swept on")
    split = [split_of(r, held_out) for r in records]
    train = [r for r, s in zip(records, split, strict=True) if s == "train"]
    progress("fit", 0, 1)
    fitted = fit(base, train, recording)
    progress("fit", 1, 1)
    models = {"idealised": HopperParams(), "calibrated": fitted.params}
    measured = np.array([r.time_s for r in records])
    errors, picked = {}, {}
    for i, (name, params) in enumerate(models.items()):
        progress("choices", i, len(models))
        predicted = predict(base, records, params)
        groups: dict[str, list[int]] = {}
        for i, (r, s) in enumerate(zip(records, split, strict=True)):
            groups.setdefault(s, []).append(i)
            groups.setdefault(f"{'grid' if r.kind == 'grid' else r.kind}", []).append(i)
        errors[name] = {g: Errors.of(predicted[ix], measured[ix]) for g, ix in groups.items()}
        picked[name] = choices(base, records, params)
    progress("choices", len(models), len(models))
    across = None
    if other is not None:
        theirs = [r for r in theirs if legal(them, config_of(them, r))]
        predicted = predict(them, theirs, replace(fitted.params, source=f"calibrated on {base.name}"))
        t = np.array([r.time_s for r in theirs])
        across = {"all": Errors.of(predicted, t),
                  **{s: Errors.of(predicted[ix], t[ix]) for s in ("train", "held-out configs", "held-out size",
                                                                     "beyond")
                     if (ix := [i for i, r in enumerate(theirs) if split_of(r, held_out) == s])}}
    return Result(recording, rec, records, base, fitted, split, errors, picked, across, other, refused,
                  unranked=sum(map(unranked, rec.records)))


def hopper_fit(r: Result, command: str) -> HopperFit:
    """The fit as a profile carries it."""
    f = r.fitted
    meta = r.recording.meta
    values = {fld.name: _estimate(getattr(f.params, fld.name), f.uncertainty[fld.name])
              for fld in fields(HopperParams) if fld.name in f.uncertainty}
    held = r.errors["calibrated"]
    at = at_bounds_text(f.at_bounds, {n: getattr(f.params, n) for n in f.at_bounds})
    ops, variants = {}, {}
    if (v := r.variants) is not None:
        # a cost no training record moves (undetermined) stays as counted: the profile holds measurements only
        ops = {"score_clocks": {n: _estimate(v.value(n), e) for n, e in v.uncertainty.items()
                                if n not in BIAS_TERMS and math.isfinite(e)},
               **{n: _estimate(v.value(n), v.uncertainty[n]) for n in BIAS_TERMS if n in v.uncertainty}}
        variants = {"variants_source": f"{v.source}: {v.recording.meta.get('command', '?')}, "
                                       f"{v.recording.meta.get('date', '?')}",
                    "variants_training_records": v.training,
                    "variants_held_out_median_error": float(
                        f"{v.errors['calibrated']['all variants']['held-out size'].median:.3g}")}
        at_v = at_bounds_text(v.at_bounds, {n: v.value(n) for n in v.at_bounds})
        if at_v:
            variants["variants_at_bounds"] = at_v
    return HopperFit(
        source=(f"{r.source}: {meta.get('command', '?')} on one {meta.get('gpu', 'GPU')}, {meta.get('date', '?')}; "
                f"{f.training} training configurations, least squares with Huber loss ({command})"),
        **values,
        fit={"training_records": f.training, "rms_log_error": float(f"{f.rms_log_error:.3g}"),
             # a recording of the grid alone (napkin measure --sweep) has no shapes beyond it
             **{key: float(f"{held[split].median:.3g}") for key, split in
                (("held_out_median_error", "held-out size"), ("beyond_median_error", "beyond")) if split in held},
             **({"at_bounds": at} if at else {}), **variants},
        **ops)


def _estimate(value: float, error: float) -> Estimate:
    return Estimate(value=float(f"{value:.4g}"), uncertainty=float(f"{error:.2g}") if math.isfinite(error) else None)


__all__ = ["HopperRecord", "HopperRecording", "Result", "calibrate", "choices", "fit", "hopper_fit", "load",
           "predict"]
