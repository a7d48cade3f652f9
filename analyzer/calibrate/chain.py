"""napkin calibrate --kernel chain: the Hopper chain kernel's model (analyzer.config.chain: two
contractions, the second fed by the first in registers) fitted to a sweep of that kernel's configurations
(napkin measure mlp2 --sweep, napkin measure linear_attention_queries --sweep), and held against what it
did not see. Until a GPU carries this fit, the chain kernel is timed with the contraction kernel's,
carried over.

    recording -> measured records (diagram, sizes, configuration, seconds) -> held out: every record at
    the held-out side (rows and stream 4096) and one configuration in four (by a hash of its label, at
    every size) -> robust fit of the chain's parameters on the rest (analyzer.calibrate.contraction.fitted:
    least squares, Huber loss on log errors, each parameter bounded to its meaning), uncertainties from
    the fit's Jacobian -> errors per split, and the model's choice per swept shape against the fastest
    measured there
"""

from __future__ import annotations

import zlib

from pydantic import BaseModel, ConfigDict, Field

from analyzer.calibrate.contraction import HELD_OUT, HUBER_SCALE, Result, Row, SweptRecord, opened, result_of
from analyzer.calibrate.contraction import PARAMETERS as CONTRACTION_PARAMETERS
from analyzer.calibrate.record import MAX_SIZE, check_gpu
from analyzer.common.errors import NapkinError
from analyzer.common.progress import Progress, silent
from analyzer.config import chain as chains
from analyzer.config.chain import Chain
from analyzer.config.contraction import ContractionParams
from analyzer.config.family.hopper_contraction import launched_contraction
from analyzer.hardware import Profile

# the contraction kernel's parameters, a consumer's wait a chunk (about the latency of a wgmma group and
# its drain, a microsecond at most) and the tensor rate the whole GPU sustains at its power limit
PARAMETERS = {**CONTRACTION_PARAMETERS, "wait_s": (2e-7, 0.0, 2e-6, 1e-7),
              "power_efficiency": (1.0, 0.3, 1.2, 1.0),     # up to the boost clock over the tensor clock
              "thread_efficiency": (1.0, 0.05, 2.0, 1.0)}   # counted FLOPs over the instructions they take
# where the power bound binds from the start (at 1.0 it binds at no record, and has no gradient there)
RESTARTS = ({"power_efficiency": 0.8}, {"power_efficiency": 0.6}, {"wait_s": 0.0})
HELD_OUT_SHARE = 4            # one configuration in HELD_OUT_SHARE is held out at every size


class ChainEntry(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    BLOCK_M: int = Field(ge=64, le=512)
    BLOCK_F: int = Field(ge=16, le=512)
    STAGES: int = Field(ge=1, le=16)
    WARPGROUPS: int = Field(ge=1, le=4)


class ChainRecord(SweptRecord):
    """One configuration of the chain kernel at one shape, as napkin measure --sweep records it."""

    config: ChainEntry            # type: ignore[assignment] - the chain's own configuration


class ChainRecording(BaseModel):
    model_config = ConfigDict(extra="allow")

    env: dict = Field(default_factory=dict)
    meta: dict = Field(default_factory=dict)
    gpu_profile: str | None = None
    records: list[ChainRecord] = Field(max_length=MAX_SIZE)


def held_out_configuration(label: str) -> bool:
    """Whether a configuration is among those held out at every size (a stable hash of its label)."""
    return zlib.crc32(label.encode()) % HELD_OUT_SHARE == 0


def calibrate(recording: str, gpu: str | Profile, *, other: str | None = None, other_gpu: str | Profile | None = None,
              allow_gpu_mismatch: bool = False, progress: Progress = silent) -> Result:
    """The chain kernel's parameters fitted on `recording` (napkin measure --sweep of chain diagrams)."""
    rec, given = opened(recording, ChainRecording, gpu, other, "chain", "napkin measure mlp2 --sweep")
    base = given.model_copy(update={"calibration": None})
    carried = ContractionParams.of(given)       # the contraction kernel's fit, carried to the chain: one more start
    restarts = (*RESTARTS, {k: getattr(carried, k) for k in PARAMETERS})
    meta = rec.meta or {"gpu": rec.env.get("gpu"), "profile": rec.gpu_profile}
    check_gpu(meta, recording, base, allowed=allow_gpu_mismatch)
    progress("count", 0, 1)
    rows = _rows(base, rec, recording)
    progress("count", 1, 1)
    return result_of(base, rows, recording, PARAMETERS, restarts, progress=progress, kernel="chain",
                     held_out_what=f"rows and stream {HELD_OUT}")


def _rows(base: Profile, rec: ChainRecording, recording: str) -> list[Row]:
    """The recording's measured times with the engine's counts of what each ran (one evaluation of the
    model a shape)."""
    taken: dict[tuple[str, str], tuple] = {}
    shapes: dict[tuple, list[tuple[ChainRecord, chains.ChainConfig]]] = {}
    for r in rec.records:
        if r.seconds is None:
            continue
        if (r.diagram, r.dtype) not in taken:
            kernels = launched_contraction(r.diagram, base, r.dtype)
            if len(kernels) != 1 or not isinstance(kernels[0][0], Chain):
                raise NapkinError(f"{recording}: {r.diagram} is not one chain kernel on {base.name}", field="records",
                                  hint="fit a contraction's records with --kernel contraction")
            taken[(r.diagram, r.dtype)] = kernels[0]
        ch, plan, _ = taken[(r.diagram, r.dtype)]
        c = chains.configuration(base, ch, r.dtype, chains.widths_of(plan, ch, r.sizes), block_m=r.config.BLOCK_M,
                                 block_f=r.config.BLOCK_F, stages=r.config.STAGES, warpgroups=r.config.WARPGROUPS)
        if chains.legal(base, c):
            shapes.setdefault((r.diagram, r.dtype, tuple(sorted(r.sizes.items()))), []).append((r, c))
    out = []
    for (diagram, dtype, _), measured in shapes.items():
        ch, plan, model = taken[(diagram, dtype)]
        sizes = measured[0][0].sizes
        side = {sizes[n] for dim in (ch.m, ch.f) for n in _names(plan, dim)}
        for (r, c), n in zip(measured, chains.counted(model, plan, ch, sizes, [c for _, c in measured]), strict=True):
            split = ("held out" if side == {HELD_OUT} else
                     "held-out configuration" if held_out_configuration(c.label()) else "train")
            out.append(Row(r.diagram, r.sizes, c.label(), ((c, n),), r.dtype, r.seconds, split,
                           chains.predicted_time))
    return out


def _names(plan, dim: str) -> list[str]:
    """The size symbols of a plan's dim."""
    d = plan.diagram
    return [d.size(a).name for a in plan.dim(dim).axes]


__all__ = ["HELD_OUT_SHARE", "HUBER_SCALE", "PARAMETERS", "calibrate", "held_out_configuration"]
