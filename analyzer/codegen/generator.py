"""The pipeline of `napkin kernel`: diagram + GPU + configuration -> a standalone kernel file.

    the backend and its configured kernels (analyzer.config.launch; analyzer.config.kernels: weave,
    schedule, configuration per head dim, plan)
    -> the model's expectation at the sizes --set gives, the diagram's defaults elsewhere
       (analyzer.config.launch.expected, what napkin analyze leads with), for the header
    -> a backend renders the file: Gluon for Hopper (analyzer.codegen.hopper: the warp-specialised
       attention kernel, configured by analyzer.config.hopper), Triton (analyzer.codegen.triton: kernels,
       configurations, module) or CUDA C++ and its loader (analyzer.codegen.cuda)

Without a backend named, a GPU with warpgroup MMA and TMA (a Hopper profile) gets the Hopper kernel
where the diagram is one it realises (analyzer.config.hopper.realisable) and no tile of the portable
kernel is pinned (--set g_q=...); a configuration the diagram names (--config NAME) is realised as the
Hopper kernel runs it where it can be (analyzer.config.hopper.named: fragment strategy, fp16 or bf16),
by the portable module otherwise; every other call gets the portable Triton module. Attention the
Hopper kernel does not realise on a Hopper GPU (a softmax with a sink, say) gets the portable module with
a note that says why (napkin kernel prints it).
"""

from __future__ import annotations

import shlex
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, fields, replace
from pathlib import Path

from analyzer import hardware
from analyzer.codegen.cuda import as_run, cuda_files
from analyzer.codegen.cuda.limits import CudaLimits
from analyzer.codegen.files import write_kernel
from analyzer.codegen.hopper import hopper_module
from analyzer.codegen.hopper.contraction_module import contraction_module
from analyzer.codegen.triton import triton_module
from analyzer.common.progress import Progress, silent
from analyzer.common.units import seconds, si
from analyzer.config.contraction import Tables
from analyzer.config.element_type import GENERATED
from analyzer.config.family import FAMILIES, Family, family
from analyzer.config.hopper_table import HopperTables
from analyzer.config.kernels import Configured, KernelConfigs
from analyzer.config.launch import Expected, Launch, expected, launch, sizes_of
from analyzer.diagram.compiled import Diagram
from analyzer.diagram.interface import Attention
from analyzer.hardware import Profile

DTYPES = GENERATED                 # the element types a generated kernel takes


@dataclass(frozen=True, kw_only=True)
class KernelFile(Configured):
    """What a backend renders: the configured kernels, their family, the command that regenerates the
    file and the model's prediction its header states; for CUDA the GPU's limits its kernels respect,
    for Hopper the configurations by head dim and size."""

    family: Family
    command: str
    prediction: str
    prediction_at: str
    cuda_limits: CudaLimits | None = None    # from the profile, for the CUDA backend
    hopper: HopperTables | None = None       # from the profile, for the Hopper backend
    contraction: Tables | None = None        # from the profile, for the Hopper contraction backend
    expected: Expected | None = None         # the prediction the header states, as values

    @property
    def backend(self) -> str:
        """The family's name: the backend that renders the file (--backend)."""
        return self.family.name

    @property
    def as_launch(self) -> Launch:
        """What napkin kernel launched to render this file, as the model's questions take it."""
        return Launch(self.family, self, self.hopper, contraction=self.contraction)


@dataclass(frozen=True, kw_only=True)
class Generated(KernelFile):
    """A rendered kernel file: its source and its companions (CUDA: the Python loader)."""

    source: str
    extra: Mapping[str, str] = field(default_factory=dict)

    def write(self, path: str | Path) -> list[Path]:
        """The source at `path` and its companions beside it (CUDA: the .py loader), all or none."""
        return write_kernel(path, self.backend, self.source, dict(self.extra))


@dataclass(frozen=True)
class Generator:
    """A family's generator: a kernel file -> (its source, its companion files by suffix); `prepare`
    first fills in what the family's kernels need of the GPU, and the launch its header predicts."""

    render: Callable[[KernelFile], tuple[str, dict[str, str]]]
    prepare: Callable[[KernelFile, Launch, Profile], tuple[KernelFile, Launch]] = \
        lambda file, launched, profile: (file, launched)


def _cuda_prepared(file: KernelFile, launched: Launch, profile: Profile) -> tuple[KernelFile, Launch]:
    """The CUDA kernels respect the GPU's limits, and the header predicts what they run: the variants,
    clamped (analyzer.codegen.cuda.as_run)."""
    file = replace(file, cuda_limits=CudaLimits.of(profile))
    return file, replace(launched, configured=replace(launched.configured, kernels=as_run(file)))


# The families (analyzer.config.family) say what they realise and how the model times them; codegen sits
# above config, so their generators join them here, by name (tests/unit/test_families.py holds the two
# lists to each other).
GENERATORS: dict[str, Generator] = {
    "hopper": Generator(lambda f: (hopper_module(f), {})),
    "hopper-contraction": Generator(lambda f: (contraction_module(f), {})),
    "triton": Generator(lambda f: (triton_module(f), {})),
    "cuda": Generator(cuda_files, _cuda_prepared),
}
BACKENDS = tuple(f.name for f in FAMILIES)


def generate(diagram: str | Diagram, gpu: str | Profile, *, backend: str | None = None, dtype: str | None = None,
             config: str | None = None, sets: dict[str, int] | None = None,
             progress: Progress = silent) -> Generated:
    """The kernel file of `diagram` for `gpu`; `backend`: hopper, triton or cuda, default hopper where
    the GPU and the diagram allow it and triton elsewhere; `dtype`: fp16 or bf16, default the diagram's
    own (analyzer.config.element_type: a type the kernel cannot honour is refused; `note` says where it
    generates another than the file declares)."""
    if backend is not None:
        family(backend)         # a word that names no family: the one-line error before any work
    profile = hardware.load(gpu)
    progress("generate", 0, 3)
    launched = launch(diagram, profile, backend=backend, dtype=dtype, config=config, sets=sets)
    configured, generator = launched.configured, GENERATORS[launched.backend]
    if launched.portable_why:      # what the GPU's preferred family refused: attention, or a contraction
        preferred = "the Hopper kernel" if isinstance(configured.roles, Attention) else "the Hopper contraction kernel"
        why = f"{launched.family.title}, not {preferred}: {launched.portable_why}"
        configured = replace(configured, note="; ".join(filter(None, (configured.note, why))))
    progress("generate", 1, 3)
    file = KernelFile(**_fields(configured), family=launched.family,
                      command=_command(diagram, _gpu_word(gpu, profile), launched.backend, configured.dtype,
                                       config, sets or {}),
                      prediction="", prediction_at="", hopper=launched.hopper, contraction=launched.contraction)
    file, launched = generator.prepare(file, launched, profile)
    e, prediction, prediction_at = _prediction(launched, profile, sets or {})
    file = replace(file, prediction=prediction, prediction_at=prediction_at, expected=e)
    progress("generate", 2, 3)
    source, extra = generator.render(file)
    progress("generate", 3, 3)
    return Generated(**_fields(file), source=source, extra=extra)


def _fields(value) -> dict:
    """A dataclass's fields by name, shallow: to build the next stage's value from this one's."""
    return {f.name: getattr(value, f.name) for f in fields(value)}


def _prediction(launched: Launch, profile: Profile, sets: dict[str, int]) -> tuple[Expected, str, str]:
    """The header's prediction at the sizes `sets` gives, the diagram's defaults elsewhere (one batch
    entry and head), as napkin analyze states it (analyzer.config.launch); it names the sizes --set gave."""
    c = launched.configured
    sizes = sizes_of(c, sets)
    if launched.hopper is not None and len(launched.hopper.tables) == 1:   # --config NAME: its head dim alone
        (head_dim,) = launched.hopper.tables
        size = c.diagram.size(c.roles.head_dim)
        sizes.update({s.name: head_dim for s in size.free_symbols} if size.is_Symbol else {})
    e = expected(launched, profile, sizes)
    shown = ", ".join(f"{k}={v}" for k, v in e.sizes.items())
    given = [k for k in sets if k in e.sizes]
    return (e, (f"{seconds(e.time_s)}, {si(e.throughput_flops_per_s, 'FLOP/s')} ({e.configuration}"
                f"{launched.family.as_run}), "
                f"{e.bound}-bound; {e.model}"),
            f"{profile.name}, {shown}" + (f"; {', '.join(given)} from --set" if given else ""))


def _gpu_word(gpu: str | Profile, profile: Profile) -> str:
    """The --gpu of the command that regenerates the file: a profile file as given (its name alone would
    not load), a shipped profile by its name."""
    return gpu if isinstance(gpu, str) and gpu.endswith((".yaml", ".yml")) else profile.name


def _command(diagram: str | Diagram, gpu, backend, dtype, config, sets) -> str:
    """The command that generates the file; for a diagram compiled in code (a file's unmasked form,
    analyzer.diagram.unmasked), the file's command and the diagram's name."""
    word = diagram.source if isinstance(diagram, Diagram) else diagram
    words = ["napkin", "kernel", word, "--gpu", gpu, "--backend", backend, "--dtype", dtype]
    if config:
        words += ["--config", config]
    for k, v in sets.items():
        words += ["--set", f"{k}={v}"]
    command = " ".join(shlex.quote(w) for w in words)
    if isinstance(diagram, Diagram) and diagram.name != Path(diagram.source).stem:
        command += f" (for the file's diagram; this is {diagram.name}, derived from it in code)"
    return command


__all__ = ["BACKENDS", "DTYPES", "Generated", "KernelConfigs", "KernelFile", "generate"]
