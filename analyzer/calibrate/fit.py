"""Fit the model's stated assumptions to measured times (napkin calibrate).

The formula is the model's own (analyzer.model.predict.seconds); the parameters it names
(the tensor cores' efficiency, the overlap of levels, the softmax overhead, the per-chunk overhead,
the load latency, the exposed prologue and epilogue, the start and end of a block alone on its SM,
the launch overhead) are fitted by
Levenberg-Marquardt on log(model / measured), so each configuration counts by its relative error,
reweighted (Huber) so that a few configurations the model cannot describe do not pull the rest.
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

from analyzer.common.progress import Progress, silent
from analyzer.model.predict import Parts, datasheet, seconds

HUBER = 0.1          # log residual beyond which a configuration counts linearly (about 10 % off)
IRLS = 6             # reweighting rounds
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


def _residual(c: Components, names, theta, weights=None) -> np.ndarray:
    r = np.log(c.time(dict(zip(names, np.exp(theta), strict=True)))) - np.log(c.measured)
    return r if weights is None else r * weights


def _objective(c: Components, names, theta, weights) -> np.ndarray:
    """What Levenberg-Marquardt minimises the square of: the weighted log errors, and per size the
    square root of CHOICE times its choice regret."""
    r = _residual(c, names, theta, weights)
    regret = choice_regret(c, c.time(dict(zip(names, np.exp(theta), strict=True))))
    return np.concatenate([r, np.sqrt(CHOICE * np.maximum(regret, 0.0))])


LATENCY_STARTS = (1e-7, 5e-7, 1e-6, 2e-6)   # the latency bound is flat until it binds: several starts


def fit(c: Components, names=FITTED, *, start: dict[str, float] | None = None, huber: float | None = HUBER,
        max_iterations: int = 100) -> Fit:
    """The parameters `names` that best explain `c.measured` (robust least squares in log space): the
    best of fits started at several load latencies, or at `start` alone."""
    if start is not None or "load_latency_s" not in names:
        return _fit(c, tuple(names), start or {}, huber, max_iterations)
    fits = [_fit(c, tuple(names), {"load_latency_s": s}, huber, max_iterations) for s in LATENCY_STARTS]
    return min(fits, key=lambda f: f.rms_log_error)


def _fit(c: Components, names: tuple[str, ...], start: dict[str, float], huber: float | None,
         max_iterations: int) -> Fit:
    values = {n: start.get(n, START.get(n, datasheet(n) or 1e-3)) for n in names}
    base = np.sqrt(c.weights())
    weights, result = base, None
    for _ in range(IRLS if huber else 1):
        result = _lm(c, names, values, weights, max_iterations)
        values = result.values
        r = _residual(c, names, np.log([values[n] for n in names]))
        if huber:
            weights = base * np.sqrt(np.minimum(1.0, huber / np.maximum(np.abs(r), 1e-12)))
    assert result is not None
    r = _residual(c, names, np.log([values[n] for n in names]))
    return Fit(names, values, {}, float(np.sqrt(np.mean(r * r))), result.iterations)


def _lm(c: Components, names: tuple[str, ...], start: dict[str, float], weights, max_iterations: int) -> Fit:
    theta = np.log([start[n] for n in names])
    r = _objective(c, names, theta, weights)
    cost, lam, iterations = float(r @ r), 1e-3, 0
    for _ in range(max_iterations):
        iterations += 1
        jac = np.empty((len(r), len(names)))
        for j in range(len(names)):
            step = np.zeros(len(names))
            step[j] = 1e-6
            jac[:, j] = (_objective(c, names, theta + step, weights) - r) / 1e-6
        jtj, jtr = jac.T @ jac, jac.T @ r
        gain = 0.0
        while lam < 1e12:
            a = jtj + lam * np.diag(np.maximum(np.diag(jtj), 1e-12))
            trial = theta + np.clip(np.linalg.lstsq(a, -jtr, rcond=None)[0], -5, 5)
            r_trial = _objective(c, names, trial, weights)
            cost_trial = float(r_trial @ r_trial)
            if np.isfinite(cost_trial) and cost_trial < cost:
                gain = cost - cost_trial
                theta, r, cost, lam = trial, r_trial, cost_trial, max(lam / 10, 1e-9)
                break
            lam *= 10
        if gain <= 1e-10 * max(cost, 1e-30):
            break
    return Fit(names, dict(zip(names, (float(v) for v in np.exp(theta)), strict=True)),
               iterations=iterations)


def bootstrap(c: Components, best: Fit, *, samples: int = 40, seed: int = 0,
              progress: Progress = silent) -> Fit:
    """`best` with bootstrap standard errors: the fit repeated on records drawn with replacement."""
    rng = np.random.default_rng(seed)
    rows = []
    for i in range(samples):
        progress("bootstrap", i, samples)
        refit = fit(c.take(rng.integers(0, len(c), len(c))), best.names, start=best.values)
        rows.append([refit.values[n] for n in best.names])
    progress("bootstrap", samples, samples)
    draws = np.array(rows)
    spread = np.std(draws, axis=0, ddof=1) if samples > 1 else np.full(len(best.names), np.nan)
    return Fit(best.names, best.values, {n: float(s) for n, s in zip(best.names, spread, strict=True)},
               best.rms_log_error, best.iterations, samples)
