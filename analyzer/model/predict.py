"""Predicted time: compute time against weighted transfer time, and which bounds it.

Stated assumptions (docs/model.md):
- pipelines run concurrently, so compute time is the slowest pipeline's: FLOPs over the pipeline's
  rate (tensor cores at the element type's dense peak; the special function unit; fp32 vector lanes);
- every level's transfers take H_l / Hdot_l and add up (Equation 2), with no overlap between levels;
- the kernel overlaps compute with transfers, so its time is the larger of the two;
- a group (thread block) keeps one SM busy, and groups run in waves of N_SM: with N_g groups the
  SMs are busy N_g / (N_SM ceil(N_g / N_SM)) of the time (wave quantization, which the paper leaves
  out of scope in Section 7).
Works elementwise on numpy arrays too, so the optimizer can rank whole grids of configurations.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from analyzer.hardware import Profile


def utilization(groups, sm_count: int):
    """Fraction of SM time doing work when N_g groups run in waves of N_SM."""
    groups = np.maximum(np.asarray(groups, dtype=np.float64), 1.0)
    return groups / (sm_count * np.ceil(groups / sm_count))


def compute_times(flops: dict, profile: Profile, dtype: str, groups) -> dict:
    """Seconds per pipeline, wave quantization included."""
    util = utilization(groups, profile.sm_count)
    return {p: np.asarray(n, dtype=np.float64) / profile.rate(p, dtype) / util for p, n in flops.items()}


@dataclass(frozen=True)
class Prediction:
    compute_s: dict[str, float]        # per pipeline
    transfer_s: dict[str, float]       # per level
    utilization: float
    paths: dict[str, str]              # level -> "source->level", to name a transfer bound

    @property
    def compute_time_s(self) -> float:
        return max(self.compute_s.values(), default=0.0)

    @property
    def transfer_time_s(self) -> float:
        return sum(self.transfer_s.values())

    @property
    def time_s(self) -> float:
        return max(self.compute_time_s, self.transfer_time_s)

    @property
    def bound(self) -> str:
        if self.compute_time_s >= self.transfer_time_s:
            pipe = max(self.compute_s, key=self.compute_s.get)
            return f"compute ({pipe})"
        level = max(self.transfer_s, key=self.transfer_s.get)
        return f"transfers ({self.paths.get(level, level)})"


def predict(flops: dict[str, float], transfer_bytes: dict[str, float], weights: dict[str, float],
            groups: float, profile: Profile, dtype: str, paths: dict[str, str] | None = None) -> Prediction:
    compute = {p: float(t) for p, t in compute_times(flops, profile, dtype, groups).items()}
    transfers = {lv: float(transfer_bytes[lv] * weights[lv]) for lv in transfer_bytes}
    return Prediction(compute, transfers, float(utilization(groups, profile.sm_count)), paths or {})
