"""napkin calibrate --kernel contraction: the Hopper contraction kernel's model (analyzer.config.contraction)
fitted to a sweep of that kernel's configurations (bench/hopper_contraction.py), and held against what it
did not see.

    recording -> measured records (diagram, sizes, configuration, seconds) -> held out: every record at
    the held-out size (4096^3 by default) and every record of rmsnorm_matmul -> robust fit of ContractionParams on the rest
    (scipy.optimize.least_squares, Huber loss on log errors, each parameter bounded to its meaning),
    uncertainties from the fit's Jacobian -> errors on the fit, the held-out size and the recording's
    targets (the generated modules' own choice at the issue's shapes, diagrams the sweep never ran
    among them), and the model's choice per swept shape against the fastest measured there
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np
from pydantic import BaseModel, ConfigDict, Field
from scipy.optimize import least_squares

from analyzer import hardware
from analyzer.calibrate.record import MAX_SIZE, check_gpu, read_json
from analyzer.common.errors import NapkinError
from analyzer.common.progress import Progress, silent
from analyzer.config.contraction import (
    ContractionConfig,
    ContractionParams,
    Counts,
    configuration,
    counted,
    legal,
    predicted_time,
)
from analyzer.config.family.hopper_contraction import counts_at, launched_contraction
from analyzer.hardware import ContractionFit, Estimate, Profile

HELD_OUT = 4096              # the swept shapes whose geometric mean is this are left out of the fit
# diagrams held out whole: rmsnorm_matmul's prologue (A's chunk in registers) is a term no other swept
# diagram has, so its records say whether the model carries to it unfitted
HELD_OUT_DIAGRAMS = ("rmsnorm_matmul",)
HUBER_SCALE = 0.05           # log errors beyond 5 % count linearly: a few odd timings cannot pull the fit
# name -> (start, lower, upper, scale): each parameter's range is where it means what ContractionFit says
PARAMETERS = {
    "tensor_efficiency": (0.8, 0.2, 1.2, 1.0),       # up to the boost clock over the tensor clock
    "l2_efficiency": (1.0, 0.1, 1.5, 1.0),
    "smem_efficiency": (1.0, 0.1, 1.5, 1.0),
    "load_latency_s": (5e-7, 0.0, 1e-5, 1e-7),       # a load's latency: about a microsecond
    "chunk_overhead_s": (0.0, 0.0, 1e-5, 1e-7),      # below a chunk's own time
    "tile_overhead_s": (0.0, 0.0, 1e-4, 1e-6),
    "launch_overhead_s": (0.0, 0.0, 2e-5, 1e-6),     # a launch from a CUDA graph: microseconds
}
# more starts, the fit of least cost kept: the SMEM and latency terms bind at few records each, so one start
# can settle where another term does their work (the H100's recording, from the start above alone: 7.5 %
# fitted against 6.2 %)
RESTARTS = tuple({"smem_efficiency": smem, "load_latency_s": latency} for smem in (0.5, 1.0, 1.5)
                 for latency in (0.0, 5e-7))


class Entry(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    BLOCK_M: int = Field(ge=16, le=512)
    BLOCK_N: int = Field(ge=16, le=512)
    BLOCK_K: int = Field(ge=16, le=512)
    STAGES: int = Field(ge=1, le=16)
    WARPGROUPS: int = Field(ge=1, le=4)


class SweptRecord(BaseModel):
    """One configuration at one shape, as bench/hopper_contraction.py records it."""

    model_config = ConfigDict(extra="forbid")

    diagram: str
    dtype: str
    sizes: dict[str, int]
    config: Entry
    seconds: float | None = Field(None, gt=0, allow_inf_nan=False)
    p20: float | None = None
    p80: float | None = None
    error: str | None = None
    predicted_s: float | None = None         # napkin measure --sweep's: the model's time and rank there
    model_rank: int | None = None


class Target(BaseModel):
    """A generated module's own choice at one of the issue's shapes, timed beside its peer."""

    model_config = ConfigDict(extra="allow")

    diagram: str
    dtype: str
    sizes: dict[str, int]
    ours_s: float = Field(gt=0, allow_inf_nan=False)
    configuration: str              # what it launched: a label a kernel, "; " between them


class ContractionRecording(BaseModel):
    model_config = ConfigDict(extra="allow")

    env: dict[str, Any] = Field(default_factory=dict)
    gpu_profile: str | None = None
    records: list[SweptRecord] = Field(max_length=MAX_SIZE)
    targets: list[Target] = Field(default_factory=list)


@dataclass(frozen=True)
class Row:
    """One measured time and what the model needs of it."""

    diagram: str
    sizes: dict[str, int]
    label: str                          # the configuration (or configurations) it ran
    parts: tuple[tuple[Any, Counts], ...]    # a kernel each: its configuration and counts
    dtype: str
    seconds: float
    split: str                          # train, held out, target
    timer: Callable[..., tuple[float, str]] = predicted_time    # the kernel's model (the chain's: its own)

    def predicted(self, profile: Profile, params: ContractionParams) -> float:
        return sum(self.timer(profile, c, n, self.dtype, params)[0] for c, n in self.parts)


@dataclass(frozen=True)
class Result:
    base: Profile
    recording: str
    params: ContractionParams
    uncertainty: dict[str, float]
    at_bounds: dict[str, str]
    rows: list[Row]
    errors: dict[str, dict[str, float]]       # model -> split -> median |predicted / measured - 1|
    choices: list[dict[str, Any]]             # per swept shape: the model's choice against the fastest
    kernel: str = "contraction"               # the profile's fit it makes (calibration.contraction, .chain)
    parameters: dict[str, tuple[float, float, float, float]] = field(default_factory=lambda: PARAMETERS)
    held_out_what: str = f"{HELD_OUT}^3"      # the held-out size, in words

    def fit(self, command: str) -> ContractionFit:
        est = {k: Estimate(value=float(f"{getattr(self.params, k):.4g}") if getattr(self.params, k) > 1e-15 else 0.0,
                           uncertainty=float(f"{self.uncertainty[k]:.2g}") if math.isfinite(self.uncertainty[k])
                           else None) for k in self.parameters}
        cal = self.errors["calibrated"]
        info: dict[str, float | int | str] = {
            "records": len(self.rows), "train_median_error": round(cal["train"], 4),
            "held_out_median_error": round(cal["held out"], 4)}
        if self.at_bounds:
            info["at_bounds"] = ", ".join(f"{k} ({side})" for k, side in self.at_bounds.items())
        unknown = [k for k in self.parameters if not math.isfinite(self.uncertainty[k])]
        if unknown:
            info["not_identified"] = ", ".join(unknown)
        if "target" in cal:
            info["targets_median_error"] = round(cal["target"], 4)
        if "held-out configuration" in cal:
            info["held_out_configuration_median_error"] = round(cal["held-out configuration"], 4)
        if "held-out diagram" in cal:
            info["held_out_diagram_median_error"] = round(cal["held-out diagram"], 4)
        if self.choices:
            info["choice_median_slowdown"] = round(float(np.median([c["slowdown"] for c in self.choices])), 4)
            info["choice_worst_slowdown"] = round(max(c["slowdown"] for c in self.choices), 4)
        return ContractionFit(source=f"{self.recording}: {command}", fit=info, **est)


def calibrate(recording: str, gpu: str | Profile, *, other: str | None = None, other_gpu: str | Profile | None = None,
              allow_gpu_mismatch: bool = False, progress: Progress = silent) -> Result:
    """The contraction kernel's parameters fitted on `recording` (a recording of bench/hopper_contraction.py)."""
    rec, given = opened(recording, ContractionRecording, gpu, other, "contraction", "bench/hopper_contraction.py")
    base = given.model_copy(update={"calibration": None})
    check_gpu({"gpu": rec.env.get("gpu"), "profile": rec.gpu_profile}, recording, base, allowed=allow_gpu_mismatch,
              fields={"gpu": "env.gpu", "profile": "gpu_profile"})     # where bench/hopper_contraction.py keeps them
    progress("count", 0, 1)
    rows = _rows(base, rec)
    progress("count", 1, 1)
    return result_of(base, rows, recording, PARAMETERS, RESTARTS, progress=progress)


def opened(recording: str, schema: type[BaseModel], gpu: str | Profile, other: str | None, kernel: str,
           wrote: str) -> tuple[Any, Profile]:
    """A contraction-family fit's recording read against `schema` (what `wrote` writes), and the profile of
    `gpu`; --across (`other`) is refused: these fits take one GPU's recording."""
    if other is not None:
        raise NapkinError(f"--across is not taken by --kernel {kernel} yet: one GPU's recording is fitted",
                          field="--across", hint="leave it out")
    rec = read_json(Path(recording), schema, missing=f"{recording}: no such recording", field="RECORDING",
                    hint=f"pass a recording that {wrote} wrote")
    return rec, hardware.load(gpu)


def result_of(base: Profile, rows: list[Row], recording: str,
              parameters: dict[str, tuple[float, float, float, float]], restarts: tuple[dict[str, float], ...] = (),
              *, progress: Progress = silent, **kind: Any) -> Result:
    """`parameters` fitted on the training rows of `rows` (`restarts`: other starts, as `fitted`), with the
    errors per split and the choice per swept shape; `kind`: Result's fields that say which fit it is."""
    train = [r for r in rows if r.split == "train"]
    if len(train) < len(parameters):
        raise NapkinError(f"{recording}: {len(train)} records to fit {len(parameters)} parameters",
                          field="records", hint="sweep more configurations")
    progress("fit", 0, 1)
    params, uncertainty, at_bounds = fitted(base, train, recording, parameters, restarts)
    progress("fit", 1, 1)
    return Result(base, recording, params, uncertainty, at_bounds, rows, median_errors(base, rows, params),
                  choices(base, rows, params), parameters=parameters, **kind)


def median_errors(base: Profile, rows: list[Row], params: ContractionParams) -> dict[str, dict[str, float]]:
    """The idealised and the calibrated model's median |predicted / measured - 1| per split of `rows`."""
    errors = {}
    for name, p in (("idealised", ContractionParams()), ("calibrated", params)):
        by: dict[str, list[float]] = {}
        for r in rows:
            by.setdefault(r.split, []).append(abs(r.predicted(base, p) / r.seconds - 1))
        errors[name] = {k: float(np.median(v)) for k, v in by.items()}
    return errors


def _rows(base: Profile, rec: ContractionRecording) -> list[Row]:
    """The recording's measured times with the engine's counts of what each ran."""
    out = []
    taken: dict[tuple[str, str], list] = {}     # each diagram configured once, whatever its records
    shapes: dict[tuple, list[tuple[SweptRecord, ContractionConfig]]] = {}
    for r in rec.records:
        if r.seconds is None:
            continue
        if (r.diagram, r.dtype) not in taken:
            taken[(r.diagram, r.dtype)] = launched_contraction(r.diagram, base, r.dtype)
        st = taken[(r.diagram, r.dtype)][0][0]
        c = configuration(base, st, r.dtype, block_m=r.config.BLOCK_M, block_n=r.config.BLOCK_N,
                          block_k=r.config.BLOCK_K, stages=r.config.STAGES, warpgroups=r.config.WARPGROUPS)
        if legal(base, c):
            shapes.setdefault((r.diagram, r.dtype, tuple(sorted(r.sizes.items()))), []).append((r, c))
    for (diagram, dtype, _), measured in shapes.items():     # one evaluation of the model a shape
        st, plan, model = taken[(diagram, dtype)][0]
        sizes = measured[0][0].sizes
        length = math.prod(sizes.values()) ** (1 / len(sizes))
        split = ("held out" if round(length) == HELD_OUT else
                 "held-out diagram" if diagram in HELD_OUT_DIAGRAMS else "train")
        for (r, c), n in zip(measured, counted(model, plan, st, sizes, [c for _, c in measured]), strict=True):
            out.append(Row(r.diagram, r.sizes, c.label(), ((c, n),), r.dtype, r.seconds, split))
    for t in rec.targets:      # what each generated module launched by itself: its by-size table's choice
        parts = counts_at(t.diagram, base, t.dtype, t.sizes, t.configuration)
        out.append(Row(t.diagram, t.sizes, "; ".join(c.label() for c, _ in parts), tuple(parts), t.dtype, t.ours_s,
                       "target"))
    return out


def fitted(base: Profile, train: list[Row], recording: str, parameters: dict[str, tuple[float, float, float, float]],
           restarts: tuple[dict[str, float], ...] = ()) -> tuple[ContractionParams, dict[str, float], dict[str, str]]:
    """`parameters` (name -> start, lower, upper, scale) fitted to `train`; the others keep the idealised
    model's values. Their standard errors, and which ended at a bound. `restarts`: other starts (a
    parameter -> its start), the fit of least cost kept: a bound that binds at none of the records where
    the fit starts has no gradient there (the model is a maximum of bounds), so one start may leave it."""
    names = list(parameters)
    start = np.array([parameters[k][0] for k in names])
    lower = np.array([parameters[k][1] for k in names])
    upper = np.array([parameters[k][2] for k in names])
    scale = np.array([parameters[k][3] for k in names])
    measured = np.array([r.seconds for r in train])

    def params_of(x) -> ContractionParams:
        return ContractionParams(**dict(zip(names, (float(v) for v in x * scale), strict=True)))

    def residuals(x):
        p = params_of(x)
        return np.log(np.array([r.predicted(base, p) for r in train]) / measured)

    starts = [start] + [np.array([r.get(k, parameters[k][0]) for k in names]) for r in restarts]
    out = min((least_squares(residuals, x / scale, bounds=(lower / scale, upper / scale), loss="huber",
                             f_scale=HUBER_SCALE) for x in starts), key=lambda o: o.cost)
    if not out.success:
        raise NapkinError(f"{recording}: the fit did not converge ({out.message})", field="records")
    jac = out.jac
    dof = max(len(train) - len(names), 1)
    s2 = float(np.sum(out.fun ** 2)) / dof
    try:
        cov = np.linalg.pinv(jac.T @ jac) * s2
        sd = np.sqrt(np.clip(np.diag(cov), 0, None)) * scale
    except np.linalg.LinAlgError:
        sd = np.full(len(names), float("nan"))
    # a parameter no record's time moves at the solution: the recording does not identify it
    sd = np.where(np.abs(jac).max(axis=0) > 0, sd, float("nan"))
    at_bounds = {}
    for k, v, lo, hi in zip(names, out.x * scale, lower * scale, upper * scale, strict=True):
        if math.isclose(v, lo, rel_tol=1e-3, abs_tol=1e-12 if lo == 0 else 0):
            at_bounds[k] = "lower"
        elif math.isclose(v, hi, rel_tol=1e-3):
            at_bounds[k] = "upper"
    params = replace(params_of(out.x), source=f"fitted on {recording}")
    return params, dict(zip(names, (float(x) for x in sd), strict=True)), at_bounds


def choices(base: Profile, rows: list[Row], params: ContractionParams) -> list[dict[str, Any]]:
    """Per swept shape: the configuration the model ranks first among those measured there, and how much
    slower it ran than the fastest measured."""
    out = []
    shapes: dict[str, list[Row]] = {}
    for r in rows:
        if r.split != "target":
            shapes.setdefault(f"{r.diagram} {r.dtype} {r.sizes}", []).append(r)
    for shape, rs in shapes.items():
        picked = min(rs, key=lambda r: r.predicted(base, params))
        fastest = min(rs, key=lambda r: r.seconds)
        out.append({"shape": shape, "chosen": picked.label, "chosen_s": picked.seconds, "fastest": fastest.label,
                    "fastest_s": fastest.seconds, "slowdown": picked.seconds / fastest.seconds - 1,
                    "held_out": rs[0].split != "train"})
    return out


__all__ = ["HELD_OUT", "HELD_OUT_DIAGRAMS", "PARAMETERS", "RESTARTS", "Result", "Row", "calibrate", "choices", "fitted",
           "median_errors", "result_of"]
