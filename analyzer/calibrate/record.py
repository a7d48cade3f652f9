"""Recordings of measured configurations (bench/sweep_h200.py writes them; napkin calibrate reads them).

A recording is a JSON document: `meta` (date, command, GPU, versions, timer) and `records`, one per
configuration and problem size: the diagram and its sizes, the tiles, warps and stages, and the
measured median time. The model's terms are not stored: napkin calibrate derives them again from the
diagram, so a recording stays valid when the counting rules improve.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Annotated, Literal, TypeVar

from pydantic import BaseModel, ConfigDict, Field, StrictInt, ValidationError

from analyzer.common import resources
from analyzer.common.errors import NapkinError
from analyzer.common.validation import from_validation_error
from analyzer.hardware import Profile

M = TypeVar("M", bound=BaseModel)

MAX_SIZE = 2**40          # as napkin analyze --set: beyond any size napkin accepts
MIN_TIME_S = 1e-7         # a kernel's launch alone takes microseconds: a time below 100 ns measured none
MAX_TIME_S = 1e4          # ... and a time of hours is no kernel's either
MAX_BYTES = 1 << 30       # a recording is a few MB (bench/results/sweep_h200.json: 2 MB)
MAX_DEPTH = 64            # nesting of a recording (it needs 4)

Size = Annotated[StrictInt, Field(ge=1, le=MAX_SIZE)]
Count = Annotated[StrictInt, Field(ge=1, le=1024)]     # warps, stages
Seconds = Annotated[float, Field(ge=MIN_TIME_S, le=MAX_TIME_S, allow_inf_nan=False)]


class Record(BaseModel):
    model_config = ConfigDict(extra="ignore", frozen=True)

    family: str = Field(description="attention or matmul: which algorithm the record measures.")
    diagram: str = Field(pattern=r"^[A-Za-z0-9_.\-/]+$", description="A shipped diagram name.")
    dtype: Literal["fp16", "bf16"]
    kernel: str
    sizes: dict[str, Size] = Field(description="Sizes of the weaved diagram (batch, heads, q, d, ...).")
    tiles: dict[str, Size] = Field(description="The lowest level's tile sizes.")
    woven: dict[str, Size] = Field(default_factory=dict, description="Tiles of the weaved axes (1).")
    num_warps: Count
    num_stages: Count
    head_dim: Size | None = None
    seqlen: Size = Field(description="The size that is held out: attention's sequence length, "
                                     "matmul's side.")
    status: Literal["ok", "error"]
    time_s: Seconds | None = Field(None, description="The measured median, seconds.")
    flops: float | None = Field(None, ge=0, allow_inf_nan=False)
    sm_clock_mhz: float | None = Field(None, gt=0, le=1e5, allow_inf_nan=False,
                                       description="Mean SM clock while it was timed, where the "
                                                   "recording sampled it.")

    @property
    def config_key(self) -> str:
        tiles = " ".join(f"{k}={v}" for k, v in sorted(self.tiles.items()))
        return f"{self.diagram} d={self.head_dim} {tiles} w{self.num_warps} s{self.num_stages}"


class Recording(BaseModel):
    model_config = ConfigDict(extra="ignore", frozen=True)

    meta: dict
    records: list[Record]


def load_recording(path: str | Path) -> Recording:
    path = Path(path)
    recording = read_json(path, Recording, missing=f"no such recording: {path}", field="RECORDING",
                          hint="give a recording's path, or record one with python bench/sweep_h200.py "
                               "on a GPU; napkin ships bench/results/sweep_h200.json")
    if not any(r.status == "ok" for r in recording.records):
        raise NapkinError(f"{path} has no measured records", file=str(path), field="records")
    return recording


def read_json(path: Path, model: type[M], *, missing: str, field: str, hint: str) -> M:
    """A JSON file validated by `model`, or a one-line error naming the file and the field. A shipped
    recording is found by its checkout path from any folder (analyzer.common.resources.recording)."""
    path = resources.recording(path)
    try:
        found = path.is_file()
        if path.is_dir():
            raise NapkinError(f"{path} is a folder, not a recording file", field=field, hint=hint)
    except OSError as exc:      # a name longer than the file system allows (ENAMETOOLONG), ...
        raise NapkinError(f"cannot look up {str(path)[:80]!r}: {exc.strerror or exc}", field=field,
                          hint=hint) from None
    if not found:
        raise NapkinError(missing, field=field, hint=hint)
    written_by = "pass a recording that bench/sweep_h200.py wrote"
    try:
        if path.stat().st_size > MAX_BYTES:
            raise NapkinError(f"larger than {MAX_BYTES} bytes", file=str(path), hint=written_by)
        data = json.loads(path.read_text(encoding="utf-8"), parse_constant=_no_constant)
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise NapkinError(f"{path} is not JSON: {exc}", hint=written_by) from None
    except RecursionError:
        raise NapkinError("not a recording: nested too deeply", file=str(path), hint=written_by) from None
    except ValueError as exc:     # an integer of more than 4300 digits, Infinity, NaN
        raise NapkinError(f"not a recording: {exc}", file=str(path), hint=written_by) from None
    if _depth(data) > MAX_DEPTH:
        raise NapkinError(f"not a recording: nested deeper than {MAX_DEPTH} levels", file=str(path),
                          hint=written_by)
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        raise from_validation_error(exc, file=str(path), hint="see bench/README.md") from None


def _no_constant(name: str):
    """JSON has no Infinity or NaN; Python's reader takes them unless told not to."""
    raise ValueError(f"{name} is not a JSON number (every time and count must be finite)")


def _depth(data, limit: int = MAX_DEPTH) -> int:
    """How deeply `data` nests (lists and mappings), counted no further than limit + 1."""
    deepest, stack = 0, [(data, 1)]
    while stack:
        node, depth = stack.pop()
        if isinstance(node, dict | list):
            deepest = max(deepest, depth)
            if depth <= limit:
                stack.extend((child, depth + 1) for child in (node.values() if isinstance(node, dict)
                                                               else node))
    return deepest


MISMATCH = "--allow-gpu-mismatch"


def gpu_model(text: str) -> str | None:
    """The GPU model a name states, its first word of letters and digits: "NVIDIA H100 80GB HBM3" (as the
    device reports itself) and "NVIDIA H100 SXM5 80GB" (a profile's description) both say H100."""
    return next((w.upper() for w in re.findall(r"[A-Za-z0-9]+", text)
                 if any(c.isalpha() for c in w) and any(c.isdigit() for c in w)), None)


def check_gpu(meta: dict, source: str, profile: Profile, *, option: str = "--gpu",
              allowed: bool = False, fields: dict[str, str] | None = None) -> None:
    """A NapkinError where the recording says it was measured on another GPU model than `profile`'s (its
    meta.gpu, the device's own name, or else meta.profile, the profile it was swept with); silent where
    either says no model, or where `allowed` (--allow-gpu-mismatch: fit one GPU's times to another's
    figures on purpose). `fields`: where the recording keeps "gpu" and "profile", as the error names them,
    where that is not meta."""
    key, said = next(((k, v) for k in ("gpu", "profile") if isinstance(v := meta.get(k), str) and v),
                     ("", ""))
    theirs, ours = gpu_model(said), gpu_model(profile.description)
    if allowed or theirs is None or ours is None or theirs == ours:
        return
    swept = meta.get("profile")
    name = swept if isinstance(swept, str) and gpu_model(swept) == theirs else theirs.lower()
    raise NapkinError(f"measured on {said}, not on {profile.name} ({ours}) as {option} says", file=source,
                      field=(fields or {}).get(key, f"meta.{key}"),
                      hint=f"name the recording's GPU ({name}) in {option}, or pass {MISMATCH} to use it with "
                           f"{profile.name} anyway")
