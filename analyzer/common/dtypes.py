"""Element types: the quantization q of the paper (bytes per value, Section 4.3)."""

from __future__ import annotations

from typing import Literal

DType = Literal["fp32", "fp16", "bf16", "fp8"]

BYTES_PER_VALUE: dict[str, int] = {"fp32": 4, "fp16": 2, "bf16": 2, "fp8": 1}


def bytes_per_value(dtype: str) -> int:
    return BYTES_PER_VALUE[dtype]
