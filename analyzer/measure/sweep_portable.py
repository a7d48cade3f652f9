"""napkin measure --sweep of the portable Triton module: every configuration napkin sweep ranks legal,
checked against float64 and timed on the GPU at hand, written as the recording `napkin calibrate` (the
portable kernels' fit) reads, the format bench/sweep_h200.py writes. The portable fit has two families:
attention (an attention diagram: FlashAttention-3's grid of lengths and head dims) and matmul (any other
one-kernel diagram: square problems, every length alike); a diagram of several kernels is refused.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from analyzer.codegen.triton.module import config_names
from analyzer.common.errors import NapkinError
from analyzer.common.progress import Progress
from analyzer.config.by_size import length_axes
from analyzer.config.sweep import sweep as ranked_sweep
from analyzer.diagram.interface import Attention
from analyzer.measure.reference import inputs, reduction, reference, tolerance
from analyzer.measure.run import SEED

ATTENTION_LENGTHS = (512, 1024, 2048, 4096, 8192, 16384)   # bench/sweep_h200.py's; 8192 held out by default
MATMUL_SIDES = (1024, 2048, 4096, 6144, 8192)               # ... and 6144
CHECK_SIDE = 97                                              # a square problem no tile divides


@dataclass(frozen=True)
class PortableGrid:
    tokens: int = 16384
    hidden: int = 2048
    lengths: tuple[int, ...] = ATTENTION_LENGTHS
    head_dims: tuple[int, ...] = (64, 128, 256)
    sides: tuple[int, ...] = MATMUL_SIDES


@dataclass
class PortableRun:
    """One portable sweep: the module's one kernel, its checks (once a head dim and configuration) and
    its timings, as analyzer.measure.sweep's Hopper run."""

    diagram: str
    g: Any
    profile: Any
    wrapper: Callable[..., Any]
    torch: Any
    element: Any
    tensors_on: str
    timer: Callable
    launch: Callable
    rep_ms: float
    progress: Progress
    done: int = 0
    methods: set = field(default_factory=set)
    failed: dict = field(default_factory=dict)
    checked: set = field(default_factory=set)

    def records(self, grid: PortableGrid, small_of: Callable[[int | None], dict], sized: Callable) -> list[dict]:
        if len(self.g.kernels) != 1:
            raise NapkinError(f"napkin measure --sweep of the portable module takes a diagram of one kernel; "
                              f"{self.g.diagram.name} has {len(self.g.kernels)}", field="--sweep",
                              hint="sweep attention, causal_attention or matmul, the portable fit's families")
        attention = isinstance(self.g.roles, Attention)
        if attention:
            keys = sorted(k for k in self.g.kernels[0].choices if k in grid.head_dims) or \
                [self.g.axis_sizes({})(self.g.roles.head_dim)]
            points = [(d, n, sized(self.g, grid, n, d)) for d in keys for n in grid.lengths]
        else:
            axes = length_axes(self.g.diagram, self.g.roles)
            names = {self.g.diagram.size(a).name for a in axes}
            points = [(None, n, {s.name: int(v) for s, v in self.g.diagram.defaults.items()}
                       | dict.fromkeys(names, n)) for n in grid.sides]
        out = []
        for i, (head_dim, length, sizes) in enumerate(points):
            self.progress("sweep", i, len(points))
            out += self._point("attention" if attention else "matmul", head_dim, length, sizes, small_of)
        self.progress("sweep", len(points), len(points))
        return out

    def _tensors(self, sizes: dict[str, int], seed: int) -> tuple[list, dict]:
        shapes, kwargs = inputs(self.g, sizes)
        generator = self.torch.Generator(device=self.tensors_on).manual_seed(seed)
        return [self.torch.randn(*s, generator=generator, device=self.tensors_on, dtype=self.element)
                for s in shapes], kwargs

    def _entry(self, row) -> dict:
        k = self.g.kernels[0]
        return {k.plan.name: {**{name: row.tiles.get(symbol, 1) for symbol, name in config_names(self.g, k).items()},
                              "num_warps": row.num_warps, "num_stages": row.num_stages}}

    def _check(self, head_dim: int | None, rows: list, small_of: Callable[[int | None], dict]) -> None:
        todo = [r for r in rows if (head_dim, r.label) not in self.checked]
        if not todo:
            return
        small = small_of(head_dim)
        xs, kwargs = self._tensors(small, SEED)
        want = reference(self.torch, self.g, xs, small)
        allowed = tolerance(self.g.dtype, reduction(self.g, small))
        for row in todo:
            self.checked.add((head_dim, row.label))
            try:
                out = self.launch(self.wrapper, xs, kwargs, self._entry(row))
                error = float((out.double() - want).abs().max() / want.abs().max())
                if not (math.isfinite(error) and error <= allowed):
                    self.failed[(head_dim, row.label)] = (f"largest error {error:.3g} of the largest value, "
                                                          f"above {allowed:.3g}")
            except Exception as exc:  # noqa: BLE001 - a configuration that fails is a record of its failure
                self.failed[(head_dim, row.label)] = f"{type(exc).__name__}: {str(exc)[:300]}"

    def _point(self, family: str, head_dim: int | None, length: int, sizes: dict, small_of) -> list[dict]:
        (s,) = ranked_sweep(self.diagram, self.profile, dtype=self.g.dtype, sets=sizes, backend="triton",
                            sibling_fit=False)
        self._check(head_dim, s.rows, small_of)
        xs, kwargs = self._tensors(sizes, SEED + length)
        records = []
        for rank, row in enumerate(s.rows, 1):
            entry = self._entry(row)
            rec = {"family": family, "diagram": self.g.diagram.name, "dtype": self.g.dtype, "head_dim": head_dim,
                   "causal": bool(getattr(self.g.roles, "causal", False)), "seqlen": length, "sizes": sizes,
                   "kernel": row.kernel, "tiles": row.tiles, "woven": row.woven, "num_warps": row.num_warps,
                   "num_stages": row.num_stages, "config": next(iter(entry.values())), "flops": row.tensor_flops,
                   "predicted_s": row.time_s, "model_rank": rank}
            error = self.failed.get((head_dim, row.label))
            if error is None:
                try:
                    t = self.timer(lambda entry=entry: self.launch(self.wrapper, xs, kwargs, entry), self.rep_ms)
                    self.methods.add(t.method)
                    rec.update(status="ok", time_s=t.time_s, time_s_p20=t.time_s_p20, time_s_p80=t.time_s_p80)
                except Exception as exc:  # noqa: BLE001 - as above
                    error = f"{type(exc).__name__}: {str(exc)[:300]}"
            if error is not None:
                rec.update(status="error", error=error)
            records.append(rec)
        return records


__all__ = ["ATTENTION_LENGTHS", "CHECK_SIDE", "MATMUL_SIDES", "PortableGrid", "PortableRun"]
