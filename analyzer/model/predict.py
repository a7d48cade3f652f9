"""Predicted time: compute time against weighted transfer time, and which bounds it.

Stated assumptions (docs/model.md):
- pipelines run concurrently, so compute time is the slowest pipeline's: FLOPs over the pipeline's
  rate (tensor cores at the element type's dense peak; the special function unit; fp32 vector lanes);
- every level's transfers take H_l / Hdot_l and add up (Equation 2), with no overlap between levels;
- the kernel overlaps compute with transfers, so its time is the larger of the two;
- a group (thread block) keeps one SM busy, and groups run in waves of N_SM: with N_g groups the
  SMs are busy u = N_g / (N_SM ceil(N_g / N_SM)) of the time (wave quantization, which the paper
  leaves out of scope in Section 7); blocks of unequal work (block skipping) end unevenly, which
  divides u by their imbalance (analyzer.model.imbalance).

A calibrated profile (napkin calibrate, docs/validation.md) states how far each assumption is off,
with named parameters (absent ones keep the datasheet value: efficiencies 1, overheads 0):
- pipeline p runs at eta_p of its peak, and level l's feed at eta_l of its bandwidth;
- levels stream concurrently (HBM fills L2 while L2 fills SMEM): omega of the shorter levels' time
  hides under the longest level's, so transfers = sum_l T_l - omega (sum_l T_l - max_l T_l), between
  Equation 2's sum (omega 0) and the longest level alone (omega 1);
- sigma of the non-tensor pipelines' time is not hidden behind the tensor cores (Section 6.3's
  softmax overhead), less so the more blocks an SM holds, since one block's softmax runs under
  another's GEMMs (Section 6's overlap; the warpgroups of one block wait at the same barriers, so it is
  independent blocks that overlap): with k blocks resident per SM,
  compute = max_p(T_p) + sigma k^-beta (T_sfu + T_vector);
- every streamed chunk costs its block t_step more (Section 6.3's small-tile overhead), and a
  streamed load takes lambda to arrive and then its transfer time; the stages - 1 loads in flight
  per block (5.6) and the k blocks resident on an SM overlap them (Little's law): with C chunks per
  SM, compute gains t_step C / k, and can go no faster than (lambda C + transfers) / ((stages - 1) k);
- the SM clock is not the datasheet's under load: the GPU lowers it as the kernel's activity rises
  (bench/results/sweep_h200.json records it beside every timing). Each pipeline p and level l at its
  datasheet rate (T_p, T_l before any efficiency) draws a share a_p, a_l of what the clock can
  sustain, so the work takes at least sum_p a_p T_p + sum_l a_l T_l (the energy of its operations
  over the power the GPU holds): compute is the larger of that and the cycles above, and where the
  bound holds the clock runs at (the cycles) / (the bound) of the datasheet's;
- a block's prologue and epilogue transfers (arrays outside its streamed loop) are exposed: e times
  their time at HBM bandwidth is added;
- a block alone on its SM leaves it idle while it starts (its first loads fill the pipeline) and
  finishes (it stores its output): t_block per block is added when an SM holds one block at a time,
  once per wave; with two or more resident, one block's main loop covers another's start and end;
- every launch costs t_launch.
Works elementwise on numpy arrays, so whole grids of configurations are ranked at once.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from functools import reduce

import numpy as np

from analyzer.hardware import Profile
from analyzer.model.imbalance import imbalance


def datasheet(name: str) -> float:
    """A parameter's uncalibrated value: efficiencies 1, overheads 0."""
    return 1.0 if "efficiency" in name else 0.0


def params_of(profile: Profile) -> dict[str, float]:
    return profile.calibration.as_params() if profile.calibration else {}


def utilization(groups, sm_count: int, ramp=1.0, resident=1.0):
    """Fraction of SM time doing work when N_g groups run in waves of N_SM, and, when their work ramps
    1 .. `ramp` (block skipping), end unevenly on the N_SM x `resident` slots."""
    groups = np.maximum(np.asarray(groups, dtype=np.float64), 1.0)
    return groups / (sm_count * np.ceil(groups / sm_count)) / imbalance(groups, ramp, resident, sm_count)


@dataclass(frozen=True)
class Parts:
    """The model's seconds, elementwise: each term that can set a kernel's time, apart."""

    pipes: dict[str, np.ndarray]       # per pipeline, efficiency and wave quantization included
    latency: np.ndarray                # loads in flight (5.6): (lambda C + transfers) / ((stages - 1) k)
    softmax: np.ndarray                # calibrated, added to the slowest: sigma k^-beta (sfu + vector)
    steps: np.ndarray                  # calibrated, added to the slowest: t_step C / k
    power: np.ndarray                  # the power bound (0: none)
    transfer: np.ndarray               # sum over levels
    exposed: np.ndarray                # prologue/epilogue transfers and launch, outside the overlap

    @property
    def added(self) -> np.ndarray:
        """The calibrated overheads added to the slowest pipeline or the loads in flight."""
        return self.softmax + self.steps

    @property
    def cycles(self) -> np.ndarray:
        """The slowest pipeline, or the loads in flight, plus the overheads added to it."""
        return reduce(np.maximum, [self.latency, *self.pipes.values()]) + self.softmax + self.steps

    @property
    def compute(self) -> np.ndarray:
        return np.maximum(self.cycles, self.power)

    @property
    def total(self) -> np.ndarray:
        return np.maximum(self.compute, self.transfer) + self.exposed

    @property
    def power_bound(self) -> np.ndarray:
        """Where the power bound, not the cycles, sets the compute time."""
        return (self.power > 0) & (self.power >= self.cycles)

    def bound(self, i: int) -> str:
        """What sets configuration i's time: transfers (also where the loads in flight take as long
        as the transfers themselves: stages - 1 = 1 with no latency), compute, or power (the clock its
        activity allows sets the compute time)."""
        slowest_pipe = max((float(t[i]) for t in self.pipes.values()), default=0.0)
        if self.compute[i] <= self.transfer[i] or (self.latency[i] > slowest_pipe and not self.power_bound[i]):
            return "transfers"
        return "power" if self.power_bound[i] else "compute"

    @property
    def clock_share(self) -> np.ndarray:
        """The share of its datasheet clock the SM runs at: the time at that clock over the time."""
        return (np.maximum(self.cycles, self.transfer) + self.exposed) / self.total


def seconds(pipes: Mapping[str, np.ndarray], transfers: Mapping[str, np.ndarray],
            params: Mapping[str, float], *, chunks=0.0, stages=2.0, resident=1.0, edge=0.0,
            waves=0.0) -> Parts:
    """The model's formula. `pipes`: each pipeline's datasheet seconds (wave quantization included);
    `transfers`: each level's datasheet seconds; `chunks`: streamed chunks per SM (waves included);
    `edge`: prologue and epilogue transfer seconds at HBM bandwidth; `waves`: blocks each SM runs in
    turn; `params`: flat parameter names."""
    get = lambda name: params.get(name, datasheet(name))
    shape = np.broadcast_shapes(*(np.shape(v) for v in (*pipes.values(), *transfers.values())), ())
    zero = np.zeros(shape)
    per_pipe = {p: np.asarray(t, dtype=np.float64) / get(f"pipeline_efficiency.{p}")
                for p, t in pipes.items()}
    chunks = np.asarray(chunks, dtype=np.float64)
    resident = np.maximum(np.asarray(resident, dtype=np.float64), 1.0)
    transfer = overlapped([np.asarray(t, dtype=np.float64) / get(f"bandwidth_efficiency.{lv}")
                           for lv, t in transfers.items()], get("level_overlap"), zero)
    in_flight = np.maximum(np.asarray(stages, dtype=np.float64) - 1, 1) * resident
    latency = zero + (get("load_latency_s") * chunks + transfer) / in_flight   # never above `transfer` at lambda 0
    other = sum((t for p, t in per_pipe.items() if p != "tensor"), zero)
    exposed_share = get("softmax_overhead") * resident ** -get("softmax_overlap")
    softmax = exposed_share * other
    steps = get("step_overhead_s") * chunks / resident
    power = power_bound({**pipes, **transfers}, params, zero)
    alone = np.asarray(waves, dtype=np.float64) * (resident < 2)      # blocks that start and end alone
    exposed = (get("edge_exposed") * np.asarray(edge, dtype=np.float64) + get("block_overhead_s") * alone
               + get("launch_overhead_s") + zero)
    return Parts({p: zero + t for p, t in per_pipe.items()}, latency, softmax, steps, power, transfer, exposed)


def power_bound(work: Mapping[str, np.ndarray], params: Mapping[str, float], zero=0.0):
    """The least time the work takes at the clock its activity allows: sum over pipelines and levels of
    power.<name> (its share of what the clock sustains, at its datasheet rate) times its datasheet
    seconds; 0 without those parameters (the datasheet model: the clock never drops)."""
    return sum((params[f"power.{name}"] * np.asarray(t, dtype=np.float64) for name, t in work.items()
                if f"power.{name}" in params), zero)


def overlapped(levels: list, omega: float, zero=0.0):
    """Transfer time of levels that stream concurrently: Equation 2's sum less omega (at most 1) of
    what the shorter levels add to the longest, elementwise."""
    if not levels:
        return zero
    total = sum(levels, zero)
    return total - min(omega, 1.0) * (total - reduce(np.maximum, levels))


def datasheet_pipes(flops: Mapping[str, np.ndarray], profile: Profile, dtype: str, groups, ramp=1.0,
                    resident=1.0) -> dict:
    """Seconds per pipeline at peak rate, wave quantization and the imbalance of unequal blocks
    included."""
    util = utilization(groups, profile.sm_count, ramp, resident)
    return {p: np.asarray(n, dtype=np.float64) / profile.rate(p, dtype) / util for p, n in flops.items()}


def waves_of(groups, profile: Profile):
    """Blocks each SM runs in turn: ceil(N_g / N_SM)."""
    return np.ceil(np.maximum(np.asarray(groups, dtype=np.float64), 1.0) / profile.sm_count)


def chunks_per_sm(steps, groups, profile: Profile, ramp=1.0, resident=1.0):
    """Streamed chunks each SM works through: all blocks' chunks over N_SM, waves and imbalance
    included."""
    return np.asarray(steps, dtype=np.float64) / (profile.sm_count * utilization(
        groups, profile.sm_count, ramp, resident))


def edge_seconds(edge_bytes, profile: Profile):
    return np.asarray(edge_bytes, dtype=np.float64) / profile.levels[0].bandwidth_bytes_per_s


def kernel_parts(values: Mapping[str, np.ndarray], levels: Mapping[str, float], profile: Profile,
                 dtype: str) -> Parts:
    """The model's seconds of a kernel from evaluated terms, elementwise: `values` has flops_<pipeline>,
    groups and <level>_bytes, and may have steps, ramp, edge_bytes, stages and resident;
    `levels` maps level -> seconds per byte at the datasheet bandwidth feeding it."""
    flops = {k.removeprefix("flops_"): v for k, v in values.items() if k.startswith("flops_")}
    groups, ramp, resident = values["groups"], values.get("ramp", 1.0), values.get("resident", 1.0)
    return seconds(datasheet_pipes(flops, profile, dtype, groups, ramp, resident),
                   {lv: values[f"{lv}_bytes"] * w for lv, w in levels.items()}, params_of(profile),
                   chunks=chunks_per_sm(values.get("steps", 0.0), groups, profile, ramp, resident),
                   stages=values.get("stages", 2.0), resident=resident,
                   edge=edge_seconds(values.get("edge_bytes", 0.0), profile),
                   waves=waves_of(groups, profile))


def kernel_time(values: Mapping[str, np.ndarray], levels: Mapping[str, float], profile: Profile,
                dtype: str) -> np.ndarray:
    return kernel_parts(values, levels, profile, dtype).total


@dataclass(frozen=True)
class Prediction:
    """One configuration's time, term by term: every term that can set it is here, so what a report
    shows adds up to `time_s` (max(compute, power, transfers) + exposed)."""

    compute_s: dict[str, float]        # per pipeline
    transfer_s: dict[str, float]       # per level
    utilization: float
    paths: dict[str, str]              # level -> "source->level", to name a transfer bound
    latency_s: float = 0.0             # loads in flight (5.6): at most the transfers with no load latency
    added_s: float = 0.0               # calibrated: exposed non-tensor time and per-chunk overhead
    exposed_s: float = 0.0             # calibrated: prologue/epilogue transfers and launch
    level_overlap: float = 0.0         # calibrated: omega, the share of the shorter levels hidden
    power_s: float = 0.0               # calibrated: the least time at the clock the work's activity allows

    @property
    def cycles_s(self) -> float:
        """The slowest pipeline or the loads in flight, with the overheads added to it."""
        return max(self.latency_s, *self.compute_s.values(), 0.0) + self.added_s

    @property
    def compute_time_s(self) -> float:
        return max(self.cycles_s, self.power_s)

    @property
    def transfer_time_s(self) -> float:
        return float(overlapped(list(self.transfer_s.values()), self.level_overlap))

    @property
    def time_s(self) -> float:
        return max(self.compute_time_s, self.transfer_time_s) + self.exposed_s

    @property
    def bound(self) -> str:
        """The term that sets the time: the transfers (ties included: with no load latency the loads
        in flight take exactly the transfers' time), the loads' latency, the power bound, or the
        slowest pipeline."""
        slowest = max(self.compute_s.values(), default=0.0)
        level = max(self.transfer_s, key=self.transfer_s.get) if self.transfer_s else ""
        path = self.paths.get(level, level)
        if self.transfer_time_s >= self.compute_time_s * (1 - 1e-9):
            return f"transfers ({path})"
        pipe = max(self.compute_s, key=self.compute_s.get) if self.compute_s else "tensor"
        if self.power_s > 0 and self.power_s >= self.cycles_s * (1 - 1e-9):
            return f"power ({pipe}, clock lowered)"
        if self.latency_s > slowest:
            return f"load latency ({path}, loads in flight)"
        return f"compute ({pipe})"


def predict(flops: dict[str, float], transfer_bytes: dict[str, float], weights: dict[str, float],
            groups: float, profile: Profile, dtype: str, paths: dict[str, str] | None = None,
            steps: float = 0.0, edge_bytes: float = 0.0, ramp: float = 1.0) -> Prediction:
    """One configuration (napkin analyze): two buffers per streamed load, one block per SM."""
    values = {**{f"flops_{p}": n for p, n in flops.items()}, "groups": groups, "steps": steps,
              "ramp": ramp, "edge_bytes": edge_bytes,
              **{f"{lv}_bytes": b for lv, b in transfer_bytes.items()}}
    parts = kernel_parts(values, weights, profile, dtype)
    params = params_of(profile)
    transfers = {lv: float(transfer_bytes[lv] * weights[lv] / params.get(f"bandwidth_efficiency.{lv}", 1.0))
                 for lv in transfer_bytes}
    return Prediction({p: float(t) for p, t in parts.pipes.items()}, transfers,
                      float(utilization(groups, profile.sm_count, ramp)), paths or {},
                      float(parts.latency), float(parts.added), float(parts.exposed),
                      params.get("level_overlap", 0.0), float(parts.power))
