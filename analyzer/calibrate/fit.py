"""Fit the model's stated assumptions to measured times (napkin calibrate).

The formula is the model's own (analyzer.model.predict.seconds); the parameters it names
(the tensor cores' efficiency, the overlap of levels, the softmax overhead, the per-chunk overhead,
the load latency, the exposed prologue and epilogue, the start and end of a block alone on its SM,
the launch overhead) are fitted by scipy.optimize.least_squares on log(model / measured), so each
configuration counts by its relative error, with a Huber loss so that a few configurations the model
cannot describe do not pull the rest, and each parameter bounded to the range in which it means what
docs/model.md says (analyzer.calibrate.ranges). It replaced a hand-written Levenberg-Marquardt with
reweighting, which had no bounds and whose finite-difference steps let a change in the last bit of one
term move the fitted overlap of levels from 0.54 to 1.49 (outside its range).
A configuration also counts by how near it runs to the best measured at its size (near_best_weights):
the model exists to choose among the fast ones, and a configuration three times slower than the best
says little about them. Each parameter is fitted in log space, which keeps it positive.
The objective also holds a choice term per problem size (choice_regret): how much slower than the best
measured the model's choice runs, the choice softened over the configurations predicted within about
SOFT of the fastest. Squared log errors alone let a few per cent of error fall where it decides which
configuration ranks first; the choice term makes the fit pay for exactly that.

Uncertainties are bootstrap standard errors: the fit repeated on configurations drawn with
replacement.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
from scipy.optimize import least_squares

from analyzer.common.progress import Progress, silent
from analyzer.model.predict import Parts, datasheet, seconds

HUBER = 0.1          # log residual beyond which a configuration counts linearly (about 10 % off)
NEAR_BEST = 0.5      # weight exp(-(t / t_best - 1) / NEAR_BEST): 1 at the best, 0.37 at 1.5 x the best
FLOOR = 0.05         # ... plus this, so that slow configurations still count
CHOICE = 1.0         # weight of a size's choice regret against one record's squared log error
SOFT = 0.01          # softness of the model's choice, in log time: candidates within ~1 % share it,
                     # one timing's noise on the H200 (round-to-round, bench/results/choice_h200.md)
START = {"level_overlap": 0.5, "softmax_overhead": 0.3, "softmax_overlap": 0.3, "step_overhead_s": 1e-7,
         "load_latency_s": 5e-7, "edge_exposed": 1.0, "block_overhead_s": 1e-6, "launch_overhead_s": 5e-6,
         "power.tensor": 1.2, "power.vector": 0.2, "power.smem": 0.3}
# The L2 -> SMEM bandwidth keeps its profile value (itself a measurement): fitted beside the overlap of
# levels, the two trade against each other (both shorten the transfers), and fitted alone it came out
# 1.02 +- 0.04 of the profile's.
# The power bound's shares: the tensor cores, the fp32 vector lanes (the softmax) and the L2 -> SMEM
# feed (the streamed tiles). HBM's share fitted to 0 beside them; the special-function unit's took part
# of the vector lanes' and chose worse (docs/model.md, "The choice").
FITTED = ("pipeline_efficiency.tensor", "level_overlap", "softmax_overhead", "softmax_overlap",
          "step_overhead_s", "load_latency_s", "edge_exposed", "block_overhead_s", "launch_overhead_s",
          "power.tensor", "power.vector", "power.smem")


@dataclass(frozen=True)
class Components:
    """The model's datasheet terms of each recorded configuration (arrays, one entry per record)."""

    pipes: dict[str, np.ndarray]          # pipeline -> seconds at peak rate, wave quantization included
    transfers: dict[str, np.ndarray]      # level -> seconds at datasheet bandwidth
    chunks: np.ndarray                    # streamed chunks per SM
    stages: np.ndarray                    # buffers per streamed load
    resident: np.ndarray                  # thread blocks one SM holds at once
    edge: np.ndarray                      # prologue and epilogue transfer seconds at HBM bandwidth
    measured: np.ndarray                  # seconds
    weight: np.ndarray | None = None      # per record, in the fit (near_best_weights); None: all 1
    size: np.ndarray | None = None        # per record, its problem size's number (the choice term's
                                          # groups); None: no choice term
    ranked: np.ndarray | None = None      # per record, whether napkin sweep ranks it; None: all
    waves: np.ndarray | None = None       # blocks each SM runs in turn; None: no block overhead

    def __len__(self) -> int:
        return len(self.measured)

    def take(self, index) -> Components:
        index = np.asarray(index)
        pick = lambda a: None if a is None else a[index]
        return Components({k: v[index] for k, v in self.pipes.items()},
                          {k: v[index] for k, v in self.transfers.items()}, self.chunks[index],
                          self.stages[index], self.resident[index], self.edge[index], self.measured[index],
                          pick(self.weight), pick(self.size), pick(self.ranked),
                          pick(self.waves))

    def weights(self) -> np.ndarray:
        return np.ones(len(self)) if self.weight is None else self.weight

    def parts(self, params: dict[str, float]) -> Parts:
        """The model's terms per record with these parameters (absent ones at datasheet values)."""
        return seconds(self.pipes, self.transfers, params, chunks=self.chunks, stages=self.stages,
                       resident=self.resident, edge=self.edge,
                       waves=0.0 if self.waves is None else self.waves)

    def time(self, params: dict[str, float]) -> np.ndarray:
        """The model's seconds per record with these parameters."""
        return self.parts(params).total


@dataclass(frozen=True)
class Fit:
    names: tuple[str, ...]                # the fitted parameters
    values: dict[str, float]
    uncertainty: dict[str, float] = field(default_factory=dict)   # bootstrap standard errors
    rms_log_error: float = float("nan")
    iterations: int = 0
    samples: int = 0                      # bootstrap fits
    at_bounds: dict[str, str] = field(default_factory=dict)   # name -> "lower" or "upper" (reached)


def near_best_weights(measured: np.ndarray, shapes: list) -> np.ndarray:
    """Per record: exp(-(t / t_best - 1) / NEAR_BEST) + FLOOR, t_best the fastest of its shape."""
    best: dict = {}
    for t, shape in zip(measured, shapes, strict=True):
        best[shape] = min(best.get(shape, np.inf), t)
    ratio = np.array([t / best[shape] for t, shape in zip(measured, shapes, strict=True)])
    return np.exp(-(ratio - 1) / NEAR_BEST) + FLOOR


def choice_regret(c: Components, predicted: np.ndarray) -> np.ndarray:
    """Per problem size (c.size) with two or more ranked records: the measured time of the model's
    choice over the best measured, less 1, the choice softened to weights exp(-log(t / t_fastest) / SOFT)
    over the predicted times t."""
    if c.size is None:
        return np.zeros(0)
    index = np.arange(len(c)) if c.ranked is None else np.flatnonzero(c.ranked)
    sizes, of = np.unique(c.size[index], return_inverse=True)
    log_t, measured = np.log(predicted[index]), c.measured[index]
    fastest, best = np.full(len(sizes), np.inf), np.full(len(sizes), np.inf)
    np.minimum.at(fastest, of, log_t)
    np.minimum.at(best, of, measured)
    p = np.exp(-(log_t - fastest[of]) / SOFT)
    regret = np.bincount(of, p * (measured / best[of] - 1), len(sizes)) / np.bincount(of, p, len(sizes))
    return regret[np.bincount(of, minlength=len(sizes)) >= 2]


def rms_log_error(c: Components, values: dict[str, float]) -> float:
    """RMS of log(model / measured) over c's records, unweighted, with these parameters."""
    r = np.log(c.time(values)) - np.log(c.measured)
    return float(np.sqrt(np.mean(r * r)))


def huber_residuals(r: np.ndarray, scale: float | None) -> np.ndarray:
    """Residuals whose squares are twice Huber's loss of `r` at `scale`: r itself within it, beyond it
    sign(r) sqrt(scale (2 |r| - scale)), so a log error counts linearly past `scale` (None: r)."""
    if scale is None:
        return r
    a = np.abs(r)
    return np.where(a <= scale, r, np.sign(r) * np.sqrt(scale * np.maximum(2 * a - scale, 0.0)))


def _objective(c: Components, values: dict[str, float], weights, scale: float | None = HUBER) -> np.ndarray:
    """What the fit minimises the square of: the log errors under Huber's loss, each times its weight,
    and per size the square root of CHOICE times its choice regret (squared as it is: the loss is
    the log errors', the choice term is not an outlier to discount)."""
    t = c.time(values)
    r = huber_residuals(np.log(t) - np.log(c.measured), scale) * weights
    regret = choice_regret(c, t)
    return np.concatenate([r, np.sqrt(CHOICE * np.maximum(regret, 0.0))])


LATENCY_STARTS = (1e-7, 5e-7, 1e-6, 2e-6)   # the latency bound is flat until it binds: several starts
Bounds = dict[str, tuple[float, float]]     # name -> the closed range it means what it says in (ranges.py)


def fit(c: Components, names=FITTED, *, start: dict[str, float] | None = None, huber: float | None = HUBER,
        bounds: Bounds | None = None, max_evaluations: int = 400) -> Fit:
    """The parameters `names` that best explain `c.measured` (robust least squares on log errors, each
    parameter within `bounds`): the best of fits started at several load latencies, or at `start` alone."""
    if start is not None or "load_latency_s" not in names:
        return _fit(c, tuple(names), start or {}, huber, bounds or {}, max_evaluations)
    fits = [_fit(c, tuple(names), {"load_latency_s": s}, huber, bounds or {}, max_evaluations)
            for s in LATENCY_STARTS]
    return min(fits, key=lambda f: f.rms_log_error)


def _fit(c: Components, names: tuple[str, ...], start: dict[str, float], huber_scale: float | None,
         bounds: Bounds, max_evaluations: int) -> Fit:
    """scipy.optimize.least_squares (trust region reflective) with each parameter bounded to its range
    (default: non-negative), in units of its starting value so that seconds and shares step alike;
    Huber's loss on the log errors (huber_residuals: least_squares' own loss= would discount the choice
    term too). Parameters stay linear: in log space one that drifts towards 0 loses its gradient."""
    first = np.array([start.get(n, START.get(n, datasheet(n) or 1e-3)) for n in names])
    unit = _unit(names, start)
    low, high = _scaled_bounds(names, bounds, unit)
    inside = 1e-9 * np.maximum(1.0, np.where(np.isfinite(high), high - low, 1.0))
    x0 = np.clip(first / unit, low + inside, np.where(np.isfinite(high), high - inside, np.inf))
    weights = np.sqrt(c.weights())
    as_values = (lambda x: dict(zip(names, (float(v) for v in x * unit), strict=True)))
    result = least_squares(lambda x: _objective(c, as_values(x), weights, huber_scale), x0, bounds=(low, high),
                           max_nfev=max_evaluations)
    values = as_values(result.x)
    reached = {n: "lower" if m < 0 else "upper" for n, m in zip(names, result.active_mask, strict=True) if m}
    return Fit(names, values, {}, rms_log_error(c, values), int(result.nfev), at_bounds=reached)


def _unit(names: tuple[str, ...], start: dict[str, float]) -> np.ndarray:
    """Each parameter's unit in the fit: its starting value (1e-3 where that is 0)."""
    first = np.array([start.get(n, START.get(n, datasheet(n) or 1e-3)) for n in names])
    return np.where(first > 0, first, 1e-3)


def _scaled_bounds(names: tuple[str, ...], bounds: Bounds, unit: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    low = np.array([bounds.get(n, (0.0, np.inf))[0] for n in names]) / unit
    high = np.array([bounds.get(n, (0.0, np.inf))[1] for n in names]) / unit
    return low, high


XTOL = 1e-8     # least_squares' default xtol: how near a bound its active_mask calls the bound reached


def reached_bounds(values: dict[str, float], bounds: Bounds) -> dict[str, str]:
    """The parameters at a bound of their range, as least_squares' active_mask says of a fit's result
    (within XTOL of the bound, relative to it and at least 1, in the fit's units): for parameters
    given rather than fitted (a calibrated profile's, validated again)."""
    names = tuple(values)
    unit = _unit(names, {})
    x = np.array([values[n] for n in names]) / unit
    low, high = _scaled_bounds(names, bounds, unit)
    out = {}
    for n, v, lo, hi in zip(names, x, low, high, strict=True):
        if v - lo <= XTOL * max(1.0, abs(lo)):
            out[n] = "lower"
        elif np.isfinite(hi) and hi - v <= XTOL * max(1.0, abs(hi)):
            out[n] = "upper"
    return out


def bootstrap(c: Components, best: Fit, *, samples: int = 40, seed: int = 0, bounds: Bounds | None = None,
              progress: Progress = silent) -> Fit:
    """`best` with bootstrap standard errors: the fit repeated, from its own starts, on records drawn with
    replacement (started at `best` instead, a refit stays in best's basin: the data leave the tensor
    cores' efficiency and the power bound to trade, and the spread would be understated tenfold)."""
    rng = np.random.default_rng(seed)
    rows = []
    for i in range(samples):
        progress("bootstrap", i, samples)
        refit = fit(c.take(rng.integers(0, len(c), len(c))), best.names, bounds=bounds)
        rows.append([refit.values[n] for n in best.names])
    progress("bootstrap", samples, samples)
    draws = np.array(rows)
    spread = np.std(draws, axis=0, ddof=1) if samples > 1 else np.full(len(best.names), np.nan)
    return Fit(best.names, best.values, {n: float(s) for n, s in zip(best.names, spread, strict=True)},
               best.rms_log_error, best.iterations, samples, best.at_bounds)
