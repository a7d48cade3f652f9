"""napkin measure --sweep of the Hopper contraction family: every legal configuration of a one-kernel
contraction diagram (matmul, a matmul with bias and GELU, RMSNorm feeding a matmul, or a diagram of the
user's that the family takes) or of a chain of two (mlp2, linear attention queries first: the chain
kernel), checked against float64 and timed on the GPU at hand, written as the recording `napkin calibrate
--kernel contraction` (or `--kernel chain`) fits (the format bench/hopper_contraction.py writes), each
record with the model's prediction and rank beside it.

    the diagram's kernel (analyzer.config.family.hopper_contraction): its structure (or chain), plan and counts
    -> at each side of the grid (the 4096 side is what the fits hold out): a contraction at a square
       problem (every length axis that side); a chain with its rows and its stream that side, the axes it
       holds whole (k and n, at most 256) as the module was generated (--set moves them: a second sweep
       into the same recording adds another width)
    -> every legal configuration there, ranked by the profile's model (analyzer.config.contraction.ranked,
       analyzer.config.chain.ranked)
    -> each checked once against float64 where no tile divides the problem (CHECK_SIDE), then timed
"""

from __future__ import annotations

from dataclasses import dataclass

from analyzer.common.errors import NapkinError
from analyzer.config import chain as chains
from analyzer.config import contraction as contractions
from analyzer.config.chain import Chain
from analyzer.config.contraction import ContractionParams
from analyzer.config.family.hopper_contraction import launched_contraction
from analyzer.measure.run import SEED
from analyzer.measure.trial import CHECK_SIDE, Trials, finish, small, square

SIDES = (2048, 4096, 8192)      # bench/hopper_contraction.py's matmul sweep; napkin calibrate holds 4096 out
# a chain's rows and stream: a tile is 64 to 192 rows, so up to 8192 rows are one wave of 132 SMs or less;
# 16384 and 32768 put two or more tiles on an SM
CHAIN_SIDES = (2048, 4096, 8192, 16384, 32768)


@dataclass(frozen=True)
class ContractionGrid:
    sides: tuple[int, ...] = SIDES
    chain_sides: tuple[int, ...] = CHAIN_SIDES


@dataclass
class ContractionRun(Trials):
    """One sweep of the Hopper contraction kernel: the diagram's one kernel at each side of the grid."""

    diagram: str = ""
    fit: str = ""                     # the napkin calibrate --kernel that fits the records (the family's)
    where: str = ""                   # the sizes swept, in words

    def records(self, grid: ContractionGrid) -> list[dict]:
        kernels = launched_contraction(self.diagram, self.profile, self.g.dtype)
        if len(kernels) != 1:
            raise NapkinError(f"napkin measure --sweep of the Hopper contraction family takes a diagram of one "
                              f"kernel (each fit models one kernel at a time); {self.g.diagram.name} is "
                              f"{len(kernels)} kernels", field="--sweep",
                              hint="sweep matmul, matmul_bias_gelu, rmsnorm_matmul, mlp2 or linear_attention_queries")
        st, plan, model = kernels[0]
        kind = chains if isinstance(st, Chain) else contractions
        family = self.g.family
        self.fit = family.other_fits[0] if kind is chains else family.fit
        params = ContractionParams.of(self.profile, chain=kind is chains)
        sides = grid.chain_sides if kind is chains else grid.sides
        self.where = (f"rows and stream of {list(sides)}, the whole axes at {self.g.expected.sizes}" if kind is chains
                      else f"squares of sides {list(sides)}")
        points = [(side, self.at(st, plan, side)) for side in sides]
        checked_at = self.at(st, plan, CHECK_SIDE) if kind is chains else small(self.g, None)
        rows = [kind.ranked(self.profile, model, plan, st, self.g.dtype, sizes, params) for _, sizes in points]
        self.total = sum(map(len, rows)) + len({r.config.label() for rs in rows for r in rs})
        self.ahead([(at, r.config.entry()) for (_, sizes), rs in zip(points, rows, strict=True) for r in rs
                    for at in (checked_at, sizes)])     # where it is checked, and timed
        out = []
        for (side, sizes), rs in zip(points, rows, strict=True):
            self.check(None, [(r.config.label(), r.config.entry()) for r in rs], at=checked_at)
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

    def at(self, st, plan, side: int) -> dict[str, int]:
        """The sizes at one side of the grid: a contraction's square problem; a chain's rows and stream
        `side`, its whole axes as the module was generated (the chain kernel holds them in one box)."""
        if not isinstance(st, Chain):
            return square(self.g, side)
        d = self.g.diagram
        swept = {d.size(a).name for dim in (st.m, st.f) for a in plan.dim(dim).axes}
        return {k: side if k in swept else v for k, v in self.g.expected.sizes.items()}


def _swept(rec: dict) -> dict:
    """A record as bench/hopper_contraction.py writes it: seconds, p20 and p80, or the error."""
    status = rec.pop("status")
    if status != "ok":
        return rec
    times = {"seconds": rec.pop("time_s"), "p20": rec.pop("time_s_p20"), "p80": rec.pop("time_s_p80")}
    return rec | times


__all__ = ["CHAIN_SIDES", "SIDES", "ContractionGrid", "ContractionRun"]
