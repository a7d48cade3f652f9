"""A kernel family: one kind of kernel napkin generates, and everything napkin knows of it.

A family says which diagrams it realises and why not (`take`), its legal configurations and the model's
ranking of them (`sweep`), the model's time of what it launches (`expected`), the SMEM it allocates
(`allocated`), and which fit in a GPU's profile times it (`fit`, `accuracy`). napkin kernel, analyze,
configure, sweep, report and calibrate ask the registry (analyzer.config.family) for a family and then
the family, never a backend's name. The layers keep the model below the code: a family's generator
(analyzer.codegen.generator.GENERATORS) and its calibration (analyzer.calibrate.fits.FITS) join it one
layer up, keyed by its `name` and its `fit`; tests/unit/test_families.py holds every family to both.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Any, ClassVar

from analyzer.common.progress import Progress
from analyzer.config.choose import Choice
from analyzer.config.hopper import HopperConfig
from analyzer.config.hopper_table import HopperTables
from analyzer.config.kernels import Configured
from analyzer.diagram.compiled import Diagram
from analyzer.hardware import Profile


@dataclass(frozen=True)
class Launch:
    """What napkin kernel generates: the family and its configured kernels."""

    family: Family
    configured: Configured
    hopper: HopperTables | None = None   # the Hopper attention kernel's configurations by head dim and size
    contraction: Any = None              # the Hopper contraction kernel's (analyzer.config.contraction.Tables)
    portable_why: str | None = None      # why a GPU that prefers another family gets this one (None: it does not)

    @property
    def backend(self) -> str:
        """The family's name: napkin kernel's --backend word and the reports' `backend`."""
        return self.family.name


@dataclass(frozen=True)
class Expected:
    """The launched configuration at one problem size and the model's time for it."""

    backend: str
    configuration: str           # as napkin sweep labels its rows
    time_s: float
    tensor_flops: float          # the useful tensor-core FLOPs (block skipping included)
    bound: str
    model: str                   # which model, and where its parameters come from
    calibrated: bool             # False: the idealised model, no one fitted this kernel's model on this GPU
    sizes: dict[str, int]        # the weaved diagram's size symbols it was predicted at
    hopper: HopperConfig | None = None
    portable: tuple[Choice, ...] = ()    # the portable module's: each kernel's configuration launched
    contraction: tuple[Any, ...] = ()    # the Hopper contraction kernel's: each kernel's ContractionConfig
    kernel: str = ""                     # how a sentence names the kernel: its family's title

    @property
    def throughput_flops_per_s(self) -> float:
        return self.tensor_flops / self.time_s if self.time_s else 0.0

    def as_dict(self) -> dict:
        return {"backend": self.backend, "kernel": self.kernel, "configuration": self.configuration, "time_s": self.time_s,
                "tensor_flops": self.tensor_flops, "throughput_flops_per_s": self.throughput_flops_per_s,
                "bound": self.bound, "model": self.model, "calibrated": self.calibrated, "sizes": self.sizes}


@dataclass(frozen=True)
class Accuracy:
    """How well the fit that times a family's kernels on a GPU predicted the records held out of it."""

    model: str                   # "the Hopper attention kernel's model"
    carrier: str                 # the profile that carries the fit
    held_out: dict[str, str]     # what was held out -> its median error, as a sentence's phrase

    @classmethod
    def of_fit(cls, model: str, found) -> Accuracy | None:
        """A Hopper kernel's fit as hardware.hopper_fit and contraction_fit find it ((fit, carrier) or
        None): each held-out part's median error."""
        if found is None:
            return None
        fit, carrier = found
        return cls(model, carrier, {what: f"{100 * h.median:.1f} % on {what}" for what, h in fit.held_out().items()})


class Family(ABC):
    """One kernel family. Subclasses are stateless: the registry holds one instance of each."""

    name: ClassVar[str]          # napkin kernel's --backend word
    title: ClassVar[str]         # how a sentence names its kernel: "the Hopper kernel"
    fit: ClassVar[str]           # the fit in a profile that times it (napkin calibrate --kernel FIT)
    other_fits: ClassVar[tuple[str, ...]] = ()    # fits that time its other kernels (the contraction family's chain)
    sized: ClassVar[bool] = False     # its wrapper chooses a configuration per call (analyzer.config.by_size)
    ranks: ClassVar[bool] = True      # napkin sweep ranks its configurations
    language: ClassVar[str] = "python"     # the language of the file -o names (the report highlights it)
    as_run: ClassVar[str] = ""        # the header's words where the configuration is what the kernel runs, not chose

    def preferred_on(self, profile: Profile) -> bool:
        """Whether napkin kernel tries this family first on `profile`'s GPU (where it realises the diagram)."""
        return False

    @abstractmethod
    def take(self, diagram: str | Diagram, profile: Profile, *, dtype: str | None, config: str | None,
             sets: dict[str, int], tables: bool) -> Launch | str:
        """The family's launch of `diagram` (a name, a file, or the diagram as compiled from its file) on
        `profile`, or why it does not realise it (one line). `tables` False: what one expected time
        needs, not the by-size tables a module carries."""

    @abstractmethod
    def expected(self, launched: Launch, profile: Profile, sizes: dict[str, int]) -> Expected:
        """What the launched kernel takes at `sizes` (size symbols of the weaved diagram), by its model."""

    @abstractmethod
    def allocated(self, launched: Launch, profile: Profile, sizes: dict[str, int]) -> list[int | None]:
        """The SMEM a block of each kernel launched at `sizes` allocates, as legality counts it (None:
        not counted)."""

    @abstractmethod
    def sweep(self, diagram: str | Diagram, profile: Profile, *, dtype: str, sets: dict[str, int], kernel: str | None,
              progress: Progress, sibling_fit: bool) -> list[Any] | str:
        """napkin sweep's rankings (analyzer.config.ranking.Sweep), or why the family does not realise
        the diagram."""

    @abstractmethod
    def accuracy(self, profile: Profile) -> Accuracy | None:
        """The held-out error of the fit that times this family on `profile`'s GPU (None: no fit)."""

    def __repr__(self) -> str:
        return f"<family {self.name}>"


__all__ = ["Accuracy", "Expected", "Family", "Launch"]
