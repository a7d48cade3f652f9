"""The pipeline of `napkin sweep`: every legal configuration of a diagram's kernels, each with its
predicted time at one problem size, fastest first.

    raw diagram -> weave over batch (and heads) -> legal configurations per head dim
    (analyzer.config.choose: candidates, napkin configure's Table 2, divisor rules)
    -> the model's terms at each configuration (analyzer.model.analysis.TermModel: H per level, FLOPs per
    pipeline, N_g, chunks) -> predicted time (analyzer.model.predict; calibrated when the profile is)
    -> ranked as the kernel generator ranks them

The first row is the model's choice at exactly these sizes; `launched` marks the row the generated
module launches there (its by-size table's nearest grid point, analyzer.config.launch), whose time
napkin analyze and the kernel's header state. Whose configurations: the kernel family napkin kernel
generates (analyzer.config.family), which ranks its own: for streamed attention on a Hopper GPU the
Hopper attention kernel's (analyzer.config.hopper: warpgroups, chunk, stages, overlap, schedule, ranked
by Section 6's model); `backend="triton"` ranks the portable module's. Sizes are the weaved
diagram's: batch, heads and the diagram's own (q, x, d, ...); legality is judged as the generator
judges it, at the diagram's default sizes with the head dim of these.
"""

from __future__ import annotations

from analyzer import hardware
from analyzer.common.errors import NapkinError
from analyzer.common.progress import Progress, silent
from analyzer.common.version import __version__
from analyzer.config.family import FAMILIES, tried
from analyzer.config.ranking import HopperRow, Row, Sweep
from analyzer.config.sweep_result import SweepOut, SweepReport
from analyzer.diagram.compiled import Diagram
from analyzer.model.analysis import load

RANKED = tuple(f.name for f in FAMILIES if f.ranks)     # the families whose configurations napkin sweep ranks


def report(sweeps: list[Sweep]) -> SweepReport:
    """napkin sweep --json: the rankings in their documented schema (napkin schema sweep)."""
    return SweepReport(napkin_version=__version__, sweeps=[SweepOut.model_validate(s.as_dict()) for s in sweeps])


def sweep(diagram: str | Diagram, gpu, *, dtype: str = "fp16", sets: dict[str, int] | None = None,
          kernel: str | None = None, backend: str | None = None, progress: Progress = silent,
          sibling_fit: bool = True) -> list[Sweep]:
    """One ranking per kernel of `diagram` (or of `kernel` alone) at the sizes `sets` gives (weaved
    size symbols; tile symbols pin a tile). `backend`: whose configurations, as napkin kernel chooses
    it (default: the Hopper kernel's where the GPU and the diagram allow it, else the Triton module's).
    `progress` hears of each kernel ranked. `sibling_fit`: a shipped datasheet profile ranks the portable
    configurations with its calibrated sibling's fit, as napkin kernel does (hardware.portable_model);
    False: with its own figures (napkin calibrate's datasheet column)."""
    progress("configure", 0, 1)
    profile = hardware.load(gpu)
    if backend is not None and backend not in RANKED:
        raise NapkinError(f"--backend {backend!r}: napkin sweep ranks the {' or the '.join(RANKED)} backend's "
                          "configurations")
    families = tried(profile, backend)
    diagram = load(diagram)         # read once: each family tried ranks it as compiled here
    why = None
    for chosen in families:
        got = chosen.sweep(diagram, profile, dtype=dtype, sets=dict(sets or {}), kernel=kernel,
                           progress=progress, sibling_fit=sibling_fit)
        if not isinstance(got, str):
            return got
        if backend is not None:
            raise NapkinError(got, field="--backend", hint="use --backend triton")
        why = got
    raise AssertionError(f"the portable module ranks every diagram ({why})")


__all__ = ["HopperRow", "Row", "Sweep", "report", "sweep"]
