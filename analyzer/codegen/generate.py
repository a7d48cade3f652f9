"""The pipeline of `napkin kernel`: diagram + GPU + configuration -> a standalone kernel file.

    configured kernels (analyzer.config.kernels: weave, schedule, configuration per head dim, plan)
    -> the model's prediction at the diagram's default sizes (analyzer.config.predict), for the header
    -> a backend renders the file: Triton (analyzer.codegen.triton: kernels, configurations, module) or
       CUDA C++ and its loader (analyzer.codegen.cuda)
"""

from __future__ import annotations

import shlex
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, fields
from pathlib import Path

from analyzer import hardware
from analyzer.codegen.cuda import cuda_files
from analyzer.codegen.cuda.limits import CudaLimits
from analyzer.codegen.files import write_kernel
from analyzer.codegen.triton import triton_module
from analyzer.common.errors import NapkinError
from analyzer.common.units import seconds, si
from analyzer.config.element_type import GENERATED
from analyzer.config.kernels import Configured, KernelConfigs, configure_kernels
from analyzer.config.predict import predict_configured
from analyzer.hardware import Profile

DTYPES = GENERATED                 # the element types a generated kernel takes


@dataclass(frozen=True, kw_only=True)
class KernelFile(Configured):
    """What a backend renders: the configured kernels, the backend, the command that regenerates the
    file and the model's prediction its header states; for CUDA the GPU's limits its kernels respect."""

    backend: str
    command: str
    prediction: str
    prediction_at: str
    cuda_limits: CudaLimits | None = None    # from the profile, for the CUDA backend


@dataclass(frozen=True, kw_only=True)
class Generated(KernelFile):
    """A rendered kernel file: its source and its companions (CUDA: the Python loader)."""

    source: str
    extra: Mapping[str, str] = field(default_factory=dict)

    def write(self, path: str | Path) -> list[Path]:
        """The source at `path` and its companions beside it (CUDA: the .py loader), all or none."""
        return write_kernel(path, self.backend, self.source, dict(self.extra))


# Each backend: a kernel file -> (its source, its companion files by suffix)
Renderer = Callable[[KernelFile], tuple[str, dict[str, str]]]
RENDERERS: dict[str, Renderer] = {
    "triton": lambda f: (triton_module(f), {}),
    "cuda": cuda_files,
}
BACKENDS = tuple(RENDERERS)
SIZED = {"triton"}      # backends whose wrapper chooses a configuration per call (analyzer.config.by_size)


def generate(diagram: str, gpu: str | Profile, *, backend: str = "triton", dtype: str | None = None,
             config: str | None = None, sets: dict[str, int] | None = None) -> Generated:
    """The kernel file of `diagram` for `gpu`; `dtype`: fp16 or bf16, default the diagram's own
    (analyzer.config.element_type: a type the kernel cannot honour is refused; `note` says where it
    generates another than the file declares)."""
    if backend not in RENDERERS:
        raise NapkinError(f"{backend!r}: expected {' or '.join(BACKENDS)}", field="--backend")
    profile = hardware.load(gpu)
    configured = configure_kernels(diagram, profile, dtype=dtype, config=config, sets=sets,
                                   sized=backend in SIZED)
    prediction, prediction_at = _prediction(configured, profile)
    file = KernelFile(**_fields(configured), backend=backend,
                      command=_command(diagram, profile.name, backend, configured.dtype, config, sets or {}),
                      prediction=prediction, prediction_at=prediction_at,
                      cuda_limits=CudaLimits.of(profile) if backend == "cuda" else None)
    source, extra = RENDERERS[backend](file)
    return Generated(**_fields(file), source=source, extra=extra)


def _fields(value) -> dict:
    """A dataclass's fields by name, shallow: to build the next stage's value from this one's."""
    return {f.name: getattr(value, f.name) for f in fields(value)}


def _prediction(c: Configured, profile: Profile) -> tuple[str, str]:
    """The header's prediction: the diagram's default sizes, one batch entry and head."""
    sizes = {s.name: int(v) for s, v in c.diagram.defaults.items()}
    p = predict_configured(c, profile, sizes)
    shown = ", ".join(f"{k}={v}" for k, v in sizes.items())
    return (f"{seconds(p.time_s)}, {si(p.flops / p.time_s, 'FLOP/s')}, {p.bound}-bound",
            f"napkin sweep's model, {profile.name}, {shown}")


def _command(diagram, gpu, backend, dtype, config, sets) -> str:
    words = ["napkin", "kernel", diagram, "--gpu", gpu, "--backend", backend, "--dtype", dtype]
    if config:
        words += ["--config", config]
    for k, v in sets.items():
        words += ["--set", f"{k}={v}"]
    return " ".join(shlex.quote(w) for w in words)


__all__ = ["BACKENDS", "DTYPES", "Generated", "KernelConfigs", "KernelFile", "generate"]
