"""napkin sweep's rankings as values: one legal configuration a row, its predicted time, fastest first.

The portable module's rows carry tiles, warps and stages (`Row`); the Hopper attention kernel's its whole
configuration (`HopperRow`). `Sweep` is one kernel's ranking, with the row napkin kernel launches there.
"""

from __future__ import annotations

from dataclasses import dataclass

from analyzer.config.choose import TIE
from analyzer.config.contraction import ContractionConfig
from analyzer.config.family.base import Expected
from analyzer.config.hopper import HopperConfig


def portable_label(c) -> str:
    """A portable configuration (a Choice, or napkin sweep's Row) as napkin sweep and analyze print it."""
    tiles = " ".join(f"{k}={v}" for k, v in c.tiles.items())
    return f"{tiles} warps={c.num_warps} stages={c.num_stages}"


@dataclass(frozen=True)
class Row:
    """One legal configuration and what the model predicts for it."""

    kernel: str
    tiles: dict[str, int]              # the lowest level's tile sizes
    woven: dict[str, int]              # tiles of the weaved axes (batch, heads): one index a block
    num_warps: int
    num_stages: int
    time_s: float
    tensor_flops: float
    bound: str                         # compute, power (a lowered clock) or transfers

    @property
    def label(self) -> str:
        return portable_label(self)

    @property
    def throughput_flops_per_s(self) -> float:
        return self.tensor_flops / self.time_s if self.time_s else 0.0

    def as_dict(self) -> dict:
        return {"kernel": self.kernel, "tiles": self.tiles, "num_warps": self.num_warps,
                "num_stages": self.num_stages, "time_s": self.time_s,
                "tensor_flops": self.tensor_flops,
                "throughput_flops_per_s": self.throughput_flops_per_s, "bound": self.bound}


@dataclass(frozen=True)
class ConfigRow:
    """One legal configuration of a Hopper kernel, whole (its `config` has label() and entry()), and its
    predicted time."""

    kernel: str
    config: HopperConfig | ContractionConfig
    time_s: float
    tensor_flops: float
    bound: str

    @property
    def label(self) -> str:
        return self.config.label()

    @property
    def throughput_flops_per_s(self) -> float:
        return self.tensor_flops / self.time_s if self.time_s else 0.0

    def as_dict(self) -> dict:
        return {"kernel": self.kernel, "configuration": self.config.entry(), "time_s": self.time_s,
                "tensor_flops": self.tensor_flops, "throughput_flops_per_s": self.throughput_flops_per_s,
                "bound": self.bound}


@dataclass(frozen=True)
class HopperRow(ConfigRow):
    """The Hopper attention kernel's (analyzer.config.hopper); bound: tensor, threads (the softmax) or loads."""

    config: HopperConfig


@dataclass(frozen=True)
class ContractionRow(ConfigRow):
    """The Hopper contraction kernel's (analyzer.config.contraction); bound: tensor, smem, l2, latency or gmem."""

    config: ContractionConfig


@dataclass(frozen=True)
class Sweep:
    diagram: str
    gpu: str
    calibrated: bool
    dtype: str
    kernel: str
    sizes: dict[str, int]
    rows: list[Row] | list[HopperRow] | list[ContractionRow]  # fastest first (ties: the kernel's tie rule)
    seconds: float                     # how long ranking took
    backend: str = "triton"            # whose configurations: the Triton module's or the Hopper kernel's
    model: str = ""                    # which model timed the rows, and where its parameters come from
    launched: int | None = None        # the row napkin kernel's module launches at these sizes (None: none)
    expected: Expected | None = None   # that configuration's time, as napkin analyze and kernel state it
    tie: float = TIE                   # rows within this relative time tie, ordered by the kernel's tie rule

    def as_dict(self) -> dict:
        return {"diagram": self.diagram, "gpu": self.gpu, "calibrated": self.calibrated, "model": self.model,
                "dtype": self.dtype, "kernel": self.kernel, "backend": self.backend, "sizes": self.sizes,
                "seconds": self.seconds, "launched": self.launched, "tie": self.tie,
                "expected": {k: v for k, v in self.expected.as_dict().items() if k != "tensor_flops"}
                if self.expected else None,
                "rows": [r.as_dict() for r in self.rows]}


__all__ = ["ConfigRow", "ContractionRow", "HopperRow", "Row", "Sweep", "portable_label"]
