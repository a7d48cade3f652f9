"""napkin measure: the kernel napkin kernel generates, run on the GPU at hand, checked against float64,
timed, and set beside the model's prediction of the same launch.

    the device (analyzer.measure.device: its profile found from its properties, or given)
    -> the generated module (analyzer.codegen.generate, as napkin kernel writes it), imported
    -> inputs at the diagram's sizes (its defaults and --set), N(0, 1), on the device
    -> the check: the largest error over the largest float64 value, at most sqrt(L) u
       (analyzer.measure.reference); a kernel that fails it is not timed
    -> the timing (analyzer.measure.timing) beside the prediction (the file header's: analyzer.config.launch)
"""

from __future__ import annotations

import hashlib
import math
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from analyzer import hardware
from analyzer.codegen import generate
from analyzer.codegen.files import SUFFIX, import_file
from analyzer.codegen.generator import Generated
from analyzer.common.errors import NapkinError
from analyzer.common.progress import Progress, silent
from analyzer.config.launch import expected_out
from analyzer.diagram.interface import Attention
from analyzer.measure.device import Device, local_device, profile_for, torch_module
from analyzer.measure.reference import inputs, reduction, reference, tolerance
from analyzer.measure.result import CheckOut, DeviceOut, Measurement, TimingOut
from analyzer.measure.timing import REP_MS, timed

DTYPES = {"fp16": "float16", "bf16": "bfloat16"}      # the kernels' element types, as torch names them
SEED = 0


def measure(diagram: str, gpu: str | None = None, *, sets: dict[str, int] | None = None, dtype: str | None = None,
            backend: str | None = None, config: str | None = None, rep_ms: float = REP_MS,
            device: Device | None = None, tensors_on: str = "cuda",
            timer: Callable[[Callable[[], Any], float], TimingOut] = timed,
            progress: Progress = silent) -> Measurement:
    """Generate `diagram`'s kernel for the local GPU (its profile found, or `gpu`), check it and time it.
    `device`, `tensors_on` and `timer` are for running the pipeline elsewhere than on a CUDA device
    (the tests run it on the CPU under Triton's interpreter with a timer of their own)."""
    torch = torch_module()
    device = device or local_device()
    profile_name, found = (gpu, "given with --gpu") if gpu else (
        profile_for(device), "found from the device's compute capability, SM count and memory")
    profile = hardware.load(profile_name)
    progress("measure", 0, 3)
    g = generate(diagram, profile, backend=backend, dtype=dtype, config=config, sets=sets)
    measurable(g)
    sizes = {s.name: int(v) for s, v in g.diagram.defaults.items()} | {
        k: v for k, v in (sets or {}).items() if k in {s.name for s in g.diagram.size_symbols}}
    progress("measure", 1, 3)
    with tempfile.TemporaryDirectory(prefix="napkin-measure-") as tmp:
        wrapper = wrapper_of(g, Path(tmp))
        shapes, kwargs = inputs(g, sizes)
        generator = torch.Generator(device=tensors_on).manual_seed(SEED)
        element = getattr(torch, DTYPES[g.dtype])
        xs = [torch.randn(*s, generator=generator, device=tensors_on, dtype=element) for s in shapes]
        out = wrapper(*xs, **kwargs)
        want = reference(torch, g, xs, sizes)
        largest = float(want.abs().max()) or 1.0
        error = float((out.double() - want).abs().max()) / largest
        allowed = tolerance(g.dtype, reduction(g, sizes))
        passed = math.isfinite(error) and error <= allowed
        del out, want
        progress("measure", 2, 3)
        timing = timer(lambda: wrapper(*xs, **kwargs), rep_ms) if passed else None
    progress("measure", 3, 3)
    predicted = expected_out(g.expected)
    ratio = timing.time_s / predicted.time_s if timing and predicted.time_s else None
    return Measurement(
        diagram=g.diagram.name, dtype=g.dtype, sizes=dict(g.expected.sizes),
        device=DeviceOut(name=device.name, compute_capability=device.compute_capability, sm_count=device.sm_count,
                         memory_bytes=device.memory_bytes, profile=profile.name, profile_found=found),
        check=CheckOut(max_error=error if math.isfinite(error) else float("inf"), tolerance=allowed, passed=passed),
        timing=timing, predicted=predicted, measured_over_predicted=ratio,
        throughput_flops_per_s=g.expected.tensor_flops / timing.time_s if timing else None)


def measurable(g: Generated) -> None:
    """Refuse a kernel napkin measure cannot check and time: an FP8 one (its inputs are quantised, and its
    check is against e4m3's rounding: bench/hopper_fp8.py and bench/hopper_variants.py --dtype fp8)."""
    if g.dtype not in DTYPES:
        raise NapkinError(f"{g.source_file} generates a {g.dtype} kernel; napkin measure checks and times "
                          f"{' and '.join(DTYPES)} kernels", field="--dtype",
                          hint="pass --dtype fp16 or bf16; the FP8 kernel is measured by python bench/hopper_fp8.py")


def wrapper_of(g: Generated, folder: Path) -> Callable[..., Any]:
    """The generated module's entry point, its files written to `folder` and imported."""
    return written(g, folder)[2]


def written(g: Generated, folder: Path) -> tuple[Path, str, Callable[..., Any]]:
    """The generated module's files written to `folder`: the Python file that is imported, its entry
    point's name, and the entry point."""
    name = f"napkin_measure_{hashlib.sha256(g.source.encode()).hexdigest()[:16]}"
    paths = g.write(folder / f"{name}{SUFFIX[g.backend]}")       # CUDA: the .cu source and its .py loader
    path = next(p for p in paths if p.suffix == ".py")
    module = import_file(path, name)
    exported = getattr(module, "__all__", None)       # the CUDA loader has none: its wrapper is named as
    # the Python modules' (attention's `attention`, any other diagram's its own name)
    entry = exported[0] if exported else "attention" if isinstance(g.roles, Attention) else g.diagram.name
    return path, entry, getattr(module, entry)


__all__ = ["DTYPES", "SEED", "measurable", "measure", "wrapper_of", "written"]
