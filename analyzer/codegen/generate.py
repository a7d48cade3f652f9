"""The pipeline of `napkin kernel`: diagram + GPU + configuration -> a standalone kernel file.

    configured kernels (analyzer.config.kernels: weave, schedule, configuration per head dim, plan)
    -> the model's prediction at the diagram's default sizes (analyzer.config.predict), for the header
    -> a backend renders the file: Gluon for Hopper (analyzer.codegen.hopper: the warp-specialised
       attention kernel, configured by analyzer.config.hopper), Triton (analyzer.codegen.triton: kernels,
       configurations, module) or CUDA C++ and its loader (analyzer.codegen.cuda)

Without a backend named, a GPU with warpgroup MMA and TMA (a Hopper profile) gets the Hopper kernel
where the diagram is one it realises (analyzer.config.hopper.realisable) and no tile of the portable
kernel is pinned (--set g_q=...); a configuration the diagram names (--config NAME) is realised as the
Hopper kernel runs it where it can be (analyzer.config.hopper.named: fragment strategy, fp16 or bf16),
by the portable module otherwise; every other call gets the portable Triton module.
"""

from __future__ import annotations

import math
import shlex
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, fields, replace
from pathlib import Path

from analyzer import hardware
from analyzer.codegen.cuda import cuda_files
from analyzer.codegen.cuda.limits import CudaLimits
from analyzer.codegen.files import write_kernel
from analyzer.codegen.hopper import hopper_module
from analyzer.codegen.triton import triton_module
from analyzer.common.errors import NapkinError
from analyzer.common.units import seconds, si
from analyzer.config.by_size import instance_axes
from analyzer.config.element_type import GENERATED
from analyzer.config.hopper import (
    HopperParams,
    HopperTables,
    hopper_capable,
    hopper_tables,
    named,
    one_config_tables,
    predicted_time,
    refusal,
)
from analyzer.config.kernels import Configured, KernelConfigs, configure_kernels
from analyzer.config.predict import predict_configured
from analyzer.hardware import Profile

DTYPES = GENERATED                 # the element types a generated kernel takes


@dataclass(frozen=True, kw_only=True)
class KernelFile(Configured):
    """What a backend renders: the configured kernels, the backend, the command that regenerates the
    file and the model's prediction its header states; for CUDA the GPU's limits its kernels respect,
    for Hopper the configurations by head dim and size."""

    backend: str
    command: str
    prediction: str
    prediction_at: str
    cuda_limits: CudaLimits | None = None    # from the profile, for the CUDA backend
    hopper: HopperTables | None = None       # from the profile, for the Hopper backend


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
    "hopper": lambda f: (hopper_module(f), {}),
    "triton": lambda f: (triton_module(f), {}),
    "cuda": cuda_files,
}
BACKENDS = tuple(RENDERERS)
SIZED = {"triton"}      # backends whose wrapper chooses a configuration per call (analyzer.config.by_size)


def generate(diagram: str, gpu: str | Profile, *, backend: str | None = None, dtype: str | None = None,
             config: str | None = None, sets: dict[str, int] | None = None) -> Generated:
    """The kernel file of `diagram` for `gpu`; `backend`: hopper, triton or cuda, default hopper where
    the GPU and the diagram allow it and triton elsewhere; `dtype`: fp16 or bf16, default the diagram's
    own (analyzer.config.element_type: a type the kernel cannot honour is refused; `note` says where it
    generates another than the file declares)."""
    if backend is not None and backend not in RENDERERS:
        raise NapkinError(f"{backend!r}: expected {' or '.join(BACKENDS)}", field="--backend")
    profile = hardware.load(gpu)
    chosen = backend or "triton"
    configured = chosen_config = None
    if backend == "hopper" or (backend is None and hopper_capable(profile)):
        configured = configure_kernels(diagram, profile, dtype=dtype, config=config, sets=sets, sized=False)
        why = refusal(profile, configured, sets)
        chosen_config = named(profile, configured, config) if config and why is None else None
        if isinstance(chosen_config, str):
            why = chosen_config
        if why and backend == "hopper":
            raise NapkinError(why, field="--backend", hint="use --backend triton")
        if why is None:
            chosen = "hopper"
        else:
            configured = None      # the portable module: configured again, with its tables by size
    if configured is None:
        configured = configure_kernels(diagram, profile, dtype=dtype, config=config, sets=sets,
                                       sized=chosen in SIZED)
    tables = None
    if chosen == "hopper":
        if config:     # the named configuration's head dim alone: the wrapper refuses the others
            head_dim, one = chosen_config
            (k,) = configured.kernels
            if head_dim not in k.choices:
                raise NapkinError(f"--config {config} is for head dim {head_dim}, which {diagram} does not "
                                  "configure", field="--config", hint="use --backend triton")
            configured = replace(configured, kernels=(replace(k, choices={head_dim: k.choices[head_dim]}),))
            tables = one_config_tables(profile, head_dim, one)
        else:
            tables = _hopper_tables(configured, profile)
    prediction, prediction_at = _prediction(configured, profile, tables)
    file = KernelFile(**_fields(configured), backend=chosen,
                      command=_command(diagram, profile.name, chosen, configured.dtype, config, sets or {}),
                      prediction=prediction, prediction_at=prediction_at,
                      cuda_limits=CudaLimits.of(profile) if chosen == "cuda" else None, hopper=tables)
    source, extra = RENDERERS[chosen](file)
    return Generated(**_fields(file), source=source, extra=extra)


def _hopper_tables(c: Configured, profile: Profile) -> HopperTables:
    """The Hopper configurations for every head dim the configured kernel carries."""
    return hopper_tables(profile, tuple(k for k in c.kernels[0].choices if k is not None), c.dtype,
                         causal=c.roles.causal)


def _fields(value) -> dict:
    """A dataclass's fields by name, shallow: to build the next stage's value from this one's."""
    return {f.name: getattr(value, f.name) for f in fields(value)}


def _prediction(c: Configured, profile: Profile, hopper: HopperTables | None) -> tuple[str, str]:
    """The header's prediction: the diagram's default sizes, one batch entry and head."""
    sizes = {s.name: int(v) for s, v in c.diagram.defaults.items()}
    shown = ", ".join(f"{k}={v}" for k, v in sizes.items())
    if hopper is not None:
        r = c.roles
        def size(axis: str) -> int:
            return int(c.diagram.size(axis).subs(c.diagram.defaults))

        head_dim, seq_q, seq_k = size(r.head_dim), size(r.seq_q), size(r.seq_k)
        table = hopper.tables.get(head_dim) or next(iter(hopper.tables.values()))
        instances = math.prod(size(a) for a in instance_axes(r))
        chosen = table.at(math.sqrt(seq_q * seq_k), instances)
        params = HopperParams.of(profile)
        time = predicted_time(profile, chosen, head_dim, c.dtype, seq_q=seq_q, seq_k=seq_k,
                              instances=instances, causal=r.causal, params=params)
        flops = 4 * instances * seq_q * seq_k * head_dim / (2 if r.causal else 1)
        model = (f"the Hopper kernel's model {params.source}" if params.calibrated else
                 "the paper's idealised model: no one measured this kernel on this GPU")
        return (f"{seconds(time)}, {si(flops / time, 'FLOP/s')} ({chosen.label()}); {model}",
                f"analyzer.config.hopper, {profile.name}, {shown}")
    p = predict_configured(c, profile, sizes)
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
