"""napkin measure --sweep of the portable Triton module: every configuration napkin sweep ranks legal,
checked against float64 and timed on the GPU at hand, written as the recording `napkin calibrate` (the
portable kernels' fit) reads, the format bench/sweep_h200.py writes. The portable fit has two families:
attention (an attention diagram: FlashAttention-3's grid of lengths and head dims) and matmul (any other
one-kernel diagram: square problems, every length alike); a diagram of several kernels is refused.
"""

from __future__ import annotations

from dataclasses import dataclass

from analyzer.codegen.triton.module import config_names
from analyzer.common.errors import NapkinError
from analyzer.config.sweep import sweep as ranked_sweep
from analyzer.diagram.interface import Attention
from analyzer.measure.run import SEED
from analyzer.measure.trial import Trials, attention_sizes, finish, small, square

ATTENTION_LENGTHS = (512, 1024, 2048, 4096, 8192, 16384)   # bench/sweep_h200.py's; 8192 held out by default
MATMUL_SIDES = (1024, 2048, 4096, 6144, 8192)               # ... and 6144


@dataclass(frozen=True)
class PortableGrid:
    tokens: int = 16384
    hidden: int = 2048
    lengths: tuple[int, ...] = ATTENTION_LENGTHS
    head_dims: tuple[int, ...] = (64, 128, 256)
    sides: tuple[int, ...] = MATMUL_SIDES


@dataclass
class PortableRun(Trials):
    """One portable sweep: the module's one kernel, ranked by napkin sweep (`diagram` as the user named
    it), its checks and its timings."""

    diagram: str = ""

    def records(self, grid: PortableGrid) -> list[dict]:
        if len(self.g.kernels) != 1:
            raise NapkinError(f"napkin measure --sweep of the portable module takes a diagram of one kernel; "
                              f"{self.g.diagram.name} has {len(self.g.kernels)}", field="--sweep",
                              hint="sweep attention, causal_attention or matmul, the portable fit's families")
        attention = isinstance(self.g.roles, Attention)
        if attention:
            keys = sorted(k for k in self.g.kernels[0].choices if k in grid.head_dims) or \
                [self.g.axis_sizes({})(self.g.roles.head_dim)]
            points = [(d, n, attention_sizes(self.g, grid.tokens, grid.hidden, n, d))
                      for d in keys for n in grid.lengths]
        else:
            points = [(None, n, square(self.g, n)) for n in grid.sides]
        ranked = [self._ranked(sizes) for _, _, sizes in points]
        self.ahead([(at, self._entry(row)) for (head_dim, _, sizes), rows in zip(points, ranked)
                    for row in rows for at in (small(self.g, head_dim), sizes)])   # where it is checked, and timed
        out = []
        for i, ((head_dim, length, sizes), rows) in enumerate(zip(points, ranked)):
            self.progress("sweep", i, len(points))
            out += self._point("attention" if attention else "matmul", head_dim, length, sizes, rows)
        self.progress("sweep", len(points), len(points))
        return out

    def _ranked(self, sizes: dict) -> list:
        """napkin sweep's rows at `sizes`: every legal configuration, the model's ranking."""
        (s,) = ranked_sweep(self.diagram, self.profile, dtype=self.g.dtype, sets=sizes, backend="triton",
                            sibling_fit=False)
        return s.rows

    def _entry(self, row) -> dict:
        k = self.g.kernels[0]
        return {k.plan.name: {**{name: row.tiles.get(symbol, 1) for symbol, name in config_names(self.g, k).items()},
                              "num_warps": row.num_warps, "num_stages": row.num_stages}}

    def _point(self, family: str, head_dim: int | None, length: int, sizes: dict, rows: list) -> list[dict]:
        self.check(head_dim, [(row.label, self._entry(row)) for row in rows])
        xs, kwargs = self.tensors(sizes, SEED + length)
        records = []
        for rank, row in enumerate(rows, 1):
            entry = self._entry(row)
            rec = {"family": family, "diagram": self.g.diagram.name, "dtype": self.g.dtype, "head_dim": head_dim,
                   "causal": bool(getattr(self.g.roles, "causal", False)), "seqlen": length, "sizes": sizes,
                   "kernel": row.kernel, "tiles": row.tiles, "woven": row.woven, "num_warps": row.num_warps,
                   "num_stages": row.num_stages, "config": next(iter(entry.values())), "flops": row.tensor_flops,
                   "predicted_s": row.time_s, "model_rank": rank}
            records.append(finish(rec, self.failed.get((head_dim, row.label)), self.timer,
                                  lambda entry=entry: self.launch(self.wrapper, xs, kwargs, entry), self.rep_ms,
                                  self.methods))
        return records


__all__ = ["ATTENTION_LENGTHS", "MATMUL_SIDES", "PortableGrid", "PortableRun"]
