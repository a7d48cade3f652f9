"""napkin calibrate --kernel hopper --variants: what each op of a diagram's chain of scores costs, fitted on
a sweep of the Hopper kernel's variants (bench/hopper_variants.py), with the softmax attention's parameters
held at their own fit (analyzer.calibrate.hopper).

    variants recording -> each record's chain of scores, read off its diagram (analyzer.config.scores)
    -> one parameter per costed op lowering the recording holds (HopperParams.score_clocks: the SM clocks
    a score costs the threads; a tanh, ALiBi's lane work, a bias add) and, where a bias is read, the
    bandwidth it is read at -> the same held-out split as the grid's (one sequence length, one
    configuration in HELD_OUT_SHARE) -> errors per diagram for the model carried from softmax attention
    (the ops as counted) and the model with the ops' fitted costs, and the choice per shape

The softmax diagrams a variants recording holds beside the variants (mha, causal_attention) move no
parameter of this fit: they are reported, as the softmax fit carried to the same run.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from functools import cache

import numpy as np

from analyzer import hardware
from analyzer.calibrate.hopper import (
    BIAS,
    BIAS_ROW,
    BIAS_TERMS,
    FP8_TENSOR,
    HELD_OUT_SEQLEN,
    Choice,
    Errors,
    HopperRecord,
    HopperRecording,
    Result,
    check_gpu,
    choices,
    config_of,
    held_out_split,
    load,
    predict,
    solve,
)
from analyzer.calibrate.hopper import calibrate as calibrate_softmax
from analyzer.common.errors import NapkinError
from analyzer.common.progress import Progress, silent
from analyzer.config.hopper import HopperParams, legal, scores
from analyzer.config.kernels import configure_kernels
from analyzer.config.scores import Scores, counted_clocks
from analyzer.hardware import Profile

UP_TO = 8.0            # an op's cost may fit up to this many times its counted operations


@dataclass(frozen=True)
class Variants:
    """The fit of the ops' costs and how well each model predicts the variants."""

    source: str
    profile: Profile                         # the datasheet profile the fit describes
    recording: HopperRecording
    records: list[HopperRecord]
    chains: list[Scores]
    split: list[str]                         # per record: train, held-out configs, held-out size, softmax
    params: HopperParams                     # the softmax fit with the ops' fitted costs
    uncertainty: dict[str, float]            # per fitted parameter (score_clocks' by lowering, BIAS_TERMS)
    at_bounds: dict[str, str]
    training: int
    rms_log_error: float
    errors: dict[str, dict[str, dict[str, Errors]]]   # model -> diagram -> split -> errors
    choices: dict[str, list[Choice]]                  # model -> per shape

    def value(self, name: str) -> float:
        return getattr(self.params, name) if name in BIAS_TERMS else dict(self.params.score_clocks)[name]


def counted(lowering: str, profile: Profile) -> float:
    """SM clocks a score the op costs as counted: its SFU and lane operations at the datasheet rates."""
    return counted_clocks(lowering, profile.per_sm_per_clock.sfu_ops, profile.per_sm_per_clock.fp32_fma)


def chain_reader(profile: Profile, path: str):
    """A record's chain of scores, read off its diagram once a diagram and dtype."""
    @cache
    def chain(diagram: str, dtype: str) -> Scores:
        try:
            c = configure_kernels(diagram, profile, dtype=dtype, sized=False, ranked=False, fp8=True)
        except NapkinError as e:
            raise NapkinError(f"{path}: a record's diagram {diagram!r} does not load: {e.message}", file=path,
                              field="records.diagram", hint="record shipped diagrams, or give the diagram files' "
                                                            "names as the recording names them") from e
        found = scores(c)
        if isinstance(found, str):
            raise NapkinError(f"{path}: the Hopper kernel does not realise {diagram}: {found}", file=path,
                              field="records.diagram")
        return found
    return lambda r: chain(r.diagram, r.dtype)


def split_of(r: HopperRecord, chain: Scores, held_out: int) -> str:
    """softmax (a record no op cost moves), held-out size, held-out configs (one configuration in
    HELD_OUT_SHARE, by a hash of it and its diagram), or train."""
    if not chain.costed and chain.bias is None:
        return "softmax"
    return held_out_split(r, held_out, salt=r.diagram)


def fit_variants(path: str, base: Profile, softmax: HopperParams, held_out: int) -> Variants:
    """The ops' costs of the chains in the recording at `path`, on top of the softmax fit `softmax`."""
    rec, records = load(path, field="--variants", bench="hopper_variants")
    chain_of = chain_reader(base, path)
    records = [r for r in records if legal(base, config_of(base, r, chain_of(r)))]
    chains = [chain_of(r) for r in records]
    split = [split_of(r, c, held_out) for r, c in zip(records, chains, strict=True)]
    lowerings = sorted({lo for c in chains for lo in c.costed})
    spec = {lo: (counted(lo, base), 0.0, UP_TO * max(counted(lo, base), 1 / base.per_sm_per_clock.sfu_ops),
                 counted(lo, base) or 0.05) for lo in lowerings}
    if any(c.bias is not None for c in chains):
        spec[BIAS] = (1.0, 0.05, 1.5, 1.0)
        spec[BIAS_ROW] = (2.0, 0.0, 64.0, 1.0)     # SM clocks a row: 0 to a 128-byte row at 2 bytes a clock
    if any(r.dtype == "fp8" for r in records):     # FP8 wgmma's achieved rate, as a share of the 16-bit one's
        spec[FP8_TENSOR] = (1.0, 0.3, 1.5, 1.0)
    train = [i for i, s in enumerate(split) if s == "train"]
    if len(train) < 3 * len(spec):
        raise NapkinError(f"{path}: {len(train)} training records are too few to fit the {len(spec)} costs of "
                          f"{', '.join(spec)}", file=path, field="records",
                          hint="record more configurations (python bench/hopper_variants.py)")
    measured = np.array([r.time_s for r in records])

    def params(x: np.ndarray) -> HopperParams:
        fitted = dict(zip(spec, map(float, x), strict=True))
        bias = {name: fitted.pop(name) for name in BIAS_TERMS if name in fitted}
        return replace(softmax, **bias, score_clocks=tuple(sorted(fitted.items())))

    def residuals(x: np.ndarray) -> np.ndarray:
        p = params(x)
        return np.log(predict(base, [records[i] for i in train], p, [chains[i] for i in train]) / measured[train])

    x, error, rms, at = solve(spec, residuals)
    fitted = params(x)
    models = {"carried from softmax": softmax, "calibrated": fitted}
    errors, picked = {}, {}
    for name, p in models.items():
        predicted = predict(base, records, p, chains)
        groups: dict[str, dict[str, list[int]]] = {}
        for i, (r, s) in enumerate(zip(records, split, strict=True)):
            groups.setdefault(r.diagram, {}).setdefault(s, []).append(i)
            groups.setdefault("all variants", {}).setdefault(s, []).append(i)
        errors[name] = {d: {s: Errors.of(predicted[ix], measured[ix]) for s, ix in by.items()}
                        for d, by in groups.items()}
        picked[name] = choices(base, records, p, chain_of)
    return Variants(path, base, rec, records, chains, split, fitted, error, at, len(train), rms, errors, picked)


def calibrate(recording: str, gpu: str | Profile, *, variants: str | None = None, held_out: int = HELD_OUT_SEQLEN,
              allow_gpu_mismatch: bool = False, progress: Progress = silent, **options) -> Result:
    """napkin calibrate --kernel hopper: the softmax attention's parameters fitted on `recording`
    (analyzer.calibrate.hopper) and, with `variants` (a recording of bench/hopper_variants.py), the
    score ops' costs fitted on it on top."""
    if variants is not None:      # checked before any fit
        rec, _ = load(variants, field="--variants", bench="hopper_variants")
        check_gpu(rec.meta, variants, hardware.load(gpu), allowed=allow_gpu_mismatch)
    result = calibrate_softmax(recording, gpu, held_out=held_out, allow_gpu_mismatch=allow_gpu_mismatch,
                               progress=progress, **options)
    if variants is None:
        return result
    progress("variants", 0, 1)
    fitted = fit_variants(variants, result.base, result.fitted.params, held_out)
    progress("variants", 1, 1)
    return replace(result, variants=fitted)


__all__ = ["Variants", "calibrate", "counted", "fit_variants"]
