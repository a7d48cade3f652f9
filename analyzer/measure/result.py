"""What `napkin measure` prints as JSON (`napkin schema measurement`): the device, the kernel it ran,
its check against float64, the timing and its method, and the model's prediction of the same launch."""

from __future__ import annotations

from pathlib import Path

from pydantic import Field, ValidationError

from analyzer.common.errors import NapkinError
from analyzer.common.validation import from_validation_error
from analyzer.common.version import __version__
from analyzer.model.result import ExpectedOut, Out

SCHEMA_VERSION = 1


class DeviceOut(Out):
    name: str = Field(description="The CUDA driver's name of the GPU.")
    compute_capability: str
    sm_count: int
    memory_bytes: int
    profile: str = Field(description="The napkin profile the kernel was generated and predicted for.")
    profile_found: str = Field(description="How the profile was chosen: given with --gpu, or found from the "
                                           "device's compute capability, SM count and memory.")


class CheckOut(Out):
    max_error: float = Field(description="Largest absolute error over the largest float64 reference value.")
    tolerance: float = Field(description="sqrt(L) u: L the diagram's longest reduction, u the element type's "
                                         "unit roundoff.")
    passed: bool


class TimingOut(Out):
    method: str = Field(description="How the kernel was timed: CUDA graph replays or CUDA events.")
    repetitions_ms: float = Field(description="The time each repetition of the timer ran for.")
    time_s: float = Field(description="The median.")
    time_s_p20: float
    time_s_p80: float


class Measurement(Out):
    """One generated kernel run on the GPU at hand, beside the model's prediction of the same launch."""

    schema_version: int = SCHEMA_VERSION
    napkin_version: str = __version__
    diagram: str
    dtype: str
    sizes: dict[str, int] = Field(description="The weaved diagram's sizes the kernel ran at.")
    device: DeviceOut
    check: CheckOut
    timing: TimingOut | None = Field(description="None where the check failed: a wrong kernel is not timed.")
    predicted: ExpectedOut
    measured_over_predicted: float | None
    throughput_flops_per_s: float | None = Field(description="The model's tensor FLOPs over the measured time.")


MAX_BYTES = 1 << 20       # a measurement is a few kB
WRITTEN_BY = "pass a file that napkin measure --json or -o wrote"


def load_measurement(path: str | Path, field: str = "--measurement") -> Measurement:
    """A measurement napkin measure wrote, or a one-line error naming the file."""
    path = Path(path)
    try:
        if not path.is_file():
            raise NapkinError(f"no such measurement: {path}", field=field, hint=WRITTEN_BY)
        if path.stat().st_size > MAX_BYTES:
            raise NapkinError(f"larger than {MAX_BYTES} bytes: not a measurement", file=str(path), hint=WRITTEN_BY)
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise NapkinError(f"cannot read {path}: {exc}", field=field, hint=WRITTEN_BY) from None
    try:
        return Measurement.model_validate_json(text)
    except ValidationError as exc:
        if any(e["type"] == "json_invalid" for e in exc.errors()):
            raise NapkinError(f"{path} is not JSON", field=field, hint=WRITTEN_BY) from None
        raise from_validation_error(exc, file=str(path), hint=WRITTEN_BY) from None


__all__ = ["CheckOut", "DeviceOut", "Measurement", "SCHEMA_VERSION", "TimingOut", "load_measurement"]
