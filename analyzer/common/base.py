"""The base of napkin's file schemas: strict, frozen pydantic models with clear unknown-key errors."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, model_validator
from pydantic_core import PydanticCustomError

DType = Literal["fp32", "fp16", "bf16", "fp8"]


class Strict(BaseModel):
    """Frozen, keyword-only, and an unknown key is an error that lists the allowed keys."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    @model_validator(mode="before")
    @classmethod
    def _known_keys(cls, data: Any) -> Any:
        if isinstance(data, dict):
            for key in data:
                if key not in cls.model_fields:
                    raise PydanticCustomError(
                        "unknown_key", "unknown key '{key}'; allowed keys: {allowed}",
                        {"key": key, "allowed": ", ".join(cls.model_fields)})
        return data
