"""How well the model predicts measured times: held-out splits, errors, rank correlation, and how far
the configuration the model chooses is from the best measured one (docs/validation.md).

Held out of the fit: a quarter of the configurations (chosen by a hash of the configuration, so the
split is the same on every run) at every size, and every configuration at one size per family
(attention's sequence length 8192, matmul's 6144 by default).
"""

from __future__ import annotations

import zlib
from collections import defaultdict
from dataclasses import dataclass

import numpy as np

from analyzer.calibrate.record import Record

HELD_OUT_SIZE = {"attention": 8192, "matmul": 6144}
HELD_OUT_SHARE = 4          # one configuration in 4


def split(records: list[Record], held_out_size: dict[str, int] | None = None) -> np.ndarray:
    """Per record: "train", "configs" (a held-out configuration) or "size" (the held-out size)."""
    sizes = held_out_size or HELD_OUT_SIZE
    out = []
    for r in records:
        if sizes.get(r.family) == r.seqlen:
            out.append("size")
        elif zlib.crc32(r.config_key.encode()) % HELD_OUT_SHARE == 0:
            out.append("configs")
        else:
            out.append("train")
    return np.array(out)


@dataclass(frozen=True)
class Errors:
    count: int
    median: float           # of |predicted / measured - 1|
    p90: float
    worst: float
    bias: float             # median of predicted / measured


def errors(predicted: np.ndarray, measured: np.ndarray) -> Errors:
    if len(measured) == 0:
        return Errors(0, float("nan"), float("nan"), float("nan"), float("nan"))
    ratio = predicted / measured
    e = np.abs(ratio - 1)
    return Errors(len(e), float(np.median(e)), float(np.quantile(e, 0.9)), float(e.max()),
                  float(np.median(ratio)))


def spearman(a: np.ndarray, b: np.ndarray) -> float:
    """Rank correlation (ties share their mean rank)."""
    if len(a) < 2:
        return float("nan")
    ra, rb = _ranks(a), _ranks(b)
    if ra.std() == 0 or rb.std() == 0:
        return float("nan")
    return float(np.corrcoef(ra, rb)[0, 1])


def _ranks(x: np.ndarray) -> np.ndarray:
    order = np.argsort(x, kind="stable")
    ranks = np.empty(len(x))
    ranks[order] = np.arange(len(x))
    for value in np.unique(x):          # ties: the mean rank
        tied = x == value
        if tied.sum() > 1:
            ranks[tied] = ranks[tied].mean()
    return ranks


def shape_of(r: Record) -> tuple:
    return (r.family, r.diagram, r.head_dim or 0, r.seqlen)


@dataclass(frozen=True)
class ShapeResult:
    """One problem size: how the model ranks its configurations against the measurement."""

    shape: tuple
    configs: int
    spearman: float
    chosen: str                  # the model's first configuration
    chosen_s: float              # its measured time
    best: str
    best_s: float

    @property
    def chosen_over_best(self) -> float:
        return self.chosen_s / self.best_s


def by_shape(records: list[Record], predicted: np.ndarray, choice: dict[tuple, str] | None = None
             ) -> list[ShapeResult]:
    """Per shape: rank correlation of predicted and measured time, and the measured time of the model's
    first choice (`choice`: shape -> configuration key; default: the fastest predicted)."""
    groups: dict[tuple, list[int]] = defaultdict(list)
    for i, r in enumerate(records):
        groups[shape_of(r)].append(i)
    out = []
    for shape, index in sorted(groups.items()):
        measured = np.array([records[i].time_s for i in index])
        pred = predicted[index]
        best = index[int(np.argmin(measured))]
        keys = {records[i].config_key: i for i in index}
        first = keys.get((choice or {}).get(shape, ""), index[int(np.argmin(pred))])
        out.append(ShapeResult(shape, len(index), spearman(pred, measured), records[first].config_key,
                               float(records[first].time_s), records[best].config_key,
                               float(records[best].time_s)))
    return out


@dataclass(frozen=True)
class ClassErrors:
    """The held-out errors of one class of configurations: where the model's error sits."""

    family: str
    by: str                 # what the class is drawn by: "diagram, head dim", "warps", "stages", "registers"
    value: str              # the class: "causal_attention, 128", "4", "at the cap, spilling"
    errors: Errors


def register_class(compiler: int, spills: int, cap: int) -> str:
    """A configuration's class by what the compiler allotted it (a compile recording's counts)."""
    if compiler >= cap:
        return "at the cap, spilling" if spills else "at the cap"
    return "below the cap, spilling" if spills else "below the cap"


def by_class(records: list[Record], predicted: np.ndarray, held_out: np.ndarray,
             registers: dict[str, str] | None = None) -> list[ClassErrors]:
    """Held-out errors per family and class: by diagram and head dim, warps, stages and, with
    `registers` (configuration key -> register_class), by what the compiler allotted."""
    measured = np.array([r.time_s for r in records])
    keys = {"diagram, head dim": lambda r: f"{r.diagram}, {r.head_dim}" if r.head_dim else r.diagram,
            "warps": lambda r: str(r.num_warps),
            "stages": lambda r: str(r.num_stages)}
    if registers is not None:
        keys["registers"] = lambda r: registers.get(r.config_key, "not compiled")
    out = []
    for fam in sorted({r.family for r in records}):
        for by, key in keys.items():
            groups: dict[str, list[int]] = defaultdict(list)
            for i, r in enumerate(records):
                if held_out[i] and r.family == fam:
                    groups[key(r)].append(i)
            for value in sorted(groups, key=lambda v: (len(v), v)):
                index = groups[value]
                out.append(ClassErrors(fam, by, value, errors(predicted[index], measured[index])))
    return out


@dataclass(frozen=True)
class ClockCheck:
    """The SM clock the model predicts (the datasheet boost, lowered where the power bound holds: boost x
    time without the bound / time with it) against the one sampled beside each timing."""

    count: int
    lowered: int             # records measured below LOWERED x boost
    correlation: float       # Pearson, of the clocks' logarithms
    median: float            # of |predicted / measured - 1|
    median_lowered: float    # the same, on the records measured lowered
    caught: int              # of the lowered, how many the model predicts lowered
    spared: int              # of the rest, how many it predicts at the boost clock


LOWERED = 0.985              # a clock below this share of the boost counts as lowered


def clock_check(records: list[Record], predicted_hz: np.ndarray, boost_hz: float) -> ClockCheck | None:
    """None where the recording sampled no clock."""
    index = [i for i, r in enumerate(records) if r.sm_clock_mhz]
    if len(index) < 2:
        return None
    measured = np.array([records[i].sm_clock_mhz * 1e6 for i in index])
    pred = np.asarray(predicted_hz, dtype=np.float64)[index]
    low, low_pred = measured < LOWERED * boost_hz, pred < LOWERED * boost_hz
    err = np.abs(pred / measured - 1)
    corr = float(np.corrcoef(np.log(pred), np.log(measured))[0, 1]) if pred.std() > 0 else float("nan")
    return ClockCheck(len(index), int(low.sum()), corr, float(np.median(err)),
                      float(np.median(err[low])) if low.any() else float("nan"),
                      int((low & low_pred).sum()), int((~low & ~low_pred).sum()))


@dataclass(frozen=True)
class Validation:
    """Errors per family and split, before (datasheet) and after calibration."""

    errors: dict[tuple[str, str, str], Errors]   # (model, family, split)
    shapes: dict[str, list[ShapeResult]]         # model -> per shape


def validate(records: list[Record], predictions: dict[str, np.ndarray], splits: np.ndarray,
             choices: dict[str, dict[tuple, str]] | None = None) -> Validation:
    """`predictions`: model name (datasheet, calibrated) -> seconds per record."""
    errors_of: dict[tuple[str, str, str], Errors] = {}
    shapes: dict[str, list[ShapeResult]] = {}
    families = sorted({r.family for r in records})
    measured = np.array([r.time_s for r in records])
    family = np.array([r.family for r in records])
    for model, pred in predictions.items():
        for fam in families:
            for name, mask in (("train", splits == "train"), ("held-out configs", splits == "configs"),
                               ("held-out size", splits == "size"), ("held out", splits != "train"),
                               ("all", np.ones(len(records), bool))):
                m = mask & (family == fam)
                errors_of[(model, fam, name)] = errors(pred[m], measured[m])
        shapes[model] = by_shape(records, pred, (choices or {}).get(model))
    return Validation(errors_of, shapes)
