"""napkin measure --sweep of the Hopper contraction kernel: every legal configuration of a one-kernel
contraction diagram (matmul, a matmul with bias and GELU, RMSNorm feeding a matmul, or a diagram of the
user's that the family takes), checked against float64 and timed on the GPU at hand at square problems,
written as the recording `napkin calibrate --kernel contraction` fits (the format
bench/hopper_contraction.py writes), each record with the model's prediction and rank beside it.

    the diagram's kernel (analyzer.config.family.hopper_contraction): its structure, plan and counts
    -> at each side of the grid (every length axis that side; the 4096 side is what the fit holds out):
       every legal configuration, ranked by the profile's model (analyzer.config.contraction.ranked)
    -> each checked once against float64 at a square problem no tile divides (CHECK_SIDE), then timed
"""

from __future__ import annotations

from dataclasses import dataclass

from analyzer.common.errors import NapkinError
from analyzer.config.contraction import ContractionParams, Structure, ranked
from analyzer.config.family.hopper_contraction import launched_contraction
from analyzer.measure.run import SEED
from analyzer.measure.trial import Trials, finish, small, square

SIDES = (2048, 4096, 8192)      # bench/hopper_contraction.py's matmul sweep; napkin calibrate holds 4096 out


@dataclass(frozen=True)
class ContractionGrid:
    sides: tuple[int, ...] = SIDES


@dataclass
class ContractionRun(Trials):
    """One sweep of the Hopper contraction kernel: the diagram's one kernel at each side of the grid."""

    diagram: str = ""

    def records(self, grid: ContractionGrid) -> list[dict]:
        kernels = launched_contraction(self.diagram, self.profile, self.g.dtype)
        if len(kernels) != 1 or not isinstance(kernels[0][0], Structure):
            raise NapkinError(f"napkin measure --sweep of the Hopper contraction kernel takes a diagram of one "
                              f"contraction (the family's model that napkin calibrate --kernel contraction fits); "
                              f"{self.g.diagram.name} is {len(kernels)} kernel(s) or a chain of contractions",
                              field="--sweep", hint="sweep matmul, matmul_bias_gelu or rmsnorm_matmul")
        st, plan, model = kernels[0]
        params = ContractionParams.of(self.profile)
        points = [(side, square(self.g, side)) for side in grid.sides]
        rows = [ranked(self.profile, model, plan, st, self.g.dtype, sizes, params) for _, sizes in points]
        self.total = sum(map(len, rows)) + len({r.config.label() for rs in rows for r in rs})
        self.ahead([(at, r.config.entry()) for (_, sizes), rs in zip(points, rows, strict=True) for r in rs
                    for at in (small(self.g, None), sizes)])     # where it is checked, and timed
        out = []
        for (side, sizes), rs in zip(points, rows, strict=True):
            self.check(None, [(r.config.label(), r.config.entry()) for r in rs])
            xs, kwargs = self.tensors(sizes, SEED + side)
            for rank, r in enumerate(rs, 1):
                self.progress("sweep: time", self.done, self.total)
                self.done += 1
                rec = {"diagram": self.g.diagram.name, "dtype": self.g.dtype, "sizes": sizes,
                       "config": r.config.entry(), "predicted_s": r.time_s, "model_rank": rank}
                out.append(_swept(finish(rec, self.failed.get((None, r.config.label())), self.timer,
                                         lambda e=r.config.entry(): self.launch(self.wrapper, xs, kwargs, e),
                                         self.rep_ms, self.methods)))
        return out


def _swept(rec: dict) -> dict:
    """A record as bench/hopper_contraction.py writes it: seconds, p20 and p80, or the error."""
    status = rec.pop("status")
    if status != "ok":
        return rec
    times = {"seconds": rec.pop("time_s"), "p20": rec.pop("time_s_p20"), "p80": rec.pop("time_s_p80")}
    return rec | times


__all__ = ["SIDES", "ContractionGrid", "ContractionRun"]
