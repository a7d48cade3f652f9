"""Recordings of measured configurations (bench/sweep_h200.py writes them; napkin calibrate reads them).

A recording is a JSON document: `meta` (date, command, GPU, versions, timer) and `records`, one per
configuration and problem size: the diagram and its sizes, the tiles, warps and stages, and the
measured median time. The model's terms are not stored: napkin calibrate derives them again from the
diagram, so a recording stays valid when the counting rules improve.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Literal, TypeVar

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from analyzer.errors import NapkinError
from analyzer.validation import from_validation_error

M = TypeVar("M", bound=BaseModel)


class Record(BaseModel):
    model_config = ConfigDict(extra="ignore", frozen=True)

    family: str = Field(description="attention or matmul: which algorithm the record measures.")
    diagram: str = Field(pattern=r"^[A-Za-z0-9_.\-/]+$", description="A shipped diagram name.")
    dtype: Literal["fp16", "bf16"]
    kernel: str
    sizes: dict[str, int] = Field(description="Sizes of the weaved diagram (batch, heads, q, d, ...).")
    tiles: dict[str, int] = Field(description="The lowest level's tile sizes.")
    woven: dict[str, int] = Field(default_factory=dict, description="Tiles of the weaved axes (1).")
    num_warps: int = Field(gt=0)
    num_stages: int = Field(gt=0)
    head_dim: int | None = None
    seqlen: int = Field(gt=0, description="The size that is held out: attention's sequence length, "
                                          "matmul's side.")
    status: Literal["ok", "error"]
    time_s: float | None = Field(None, gt=0)
    flops: float | None = None
    sm_clock_mhz: float | None = Field(None, gt=0, description="Mean SM clock while it was timed, "
                                                               "where the recording sampled it.")

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
                          hint="run python bench/sweep_h200.py on an H200, or pass "
                               "bench/results/sweep_h200.json")
    if not any(r.status == "ok" for r in recording.records):
        raise NapkinError(f"{path} has no measured records", file=str(path), field="records")
    return recording


def read_json(path: Path, model: type[M], *, missing: str, field: str, hint: str) -> M:
    """A JSON file validated by `model`, or a one-line error naming the file and the field."""
    try:
        found = path.is_file()
    except OSError as exc:      # a name longer than the file system allows (ENAMETOOLONG), ...
        raise NapkinError(f"cannot look up {str(path)[:80]!r}: {exc.strerror or exc}", field=field,
                          hint=hint) from None
    if not found:
        raise NapkinError(missing, field=field, hint=hint)
    try:
        data = json.loads(path.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise NapkinError(f"{path} is not JSON: {exc}",
                          hint="pass a recording that bench/sweep_h200.py wrote") from None
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        raise from_validation_error(exc, file=str(path), hint="see bench/README.md") from None
