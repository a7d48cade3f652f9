"""The Hopper contraction family's rendered elementwise functions (_mm_prologue, _mm_tail, _ch_mid) run on
numpy arrays, numpy standing in for Gluon's `gl`: what tests/kernels/test_contraction.py and
test_chain.py hold against float64 without a GPU."""

from __future__ import annotations

import re

import numpy as np


class Array(np.ndarray):
    """A numpy array with Gluon's .to(dtype)."""

    def to(self, dtype):
        return self


class Pointer:
    """A pointer argument: an array and the offsets added to it."""

    def __init__(self, values: np.ndarray, offsets=None):
        self.values, self.offsets = values, offsets

    def __add__(self, offsets):
        return Pointer(self.values, np.asarray(offsets) if self.offsets is None else self.offsets + offsets)


class Gluon:
    """What the rendered functions call of `gl`, on numpy."""

    float32 = np.float64
    exp = staticmethod(np.exp)
    rsqrt = staticmethod(lambda x: (1 / np.sqrt(x)).view(Array))
    maximum = staticmethod(np.maximum)
    where = staticmethod(np.where)

    @staticmethod
    def load(p: Pointer, mask=None, other=0.0):
        flat = p.values.reshape(-1)
        safe = np.where(mask, p.offsets, 0) if mask is not None else p.offsets
        out = np.where(mask, flat[safe], other) if mask is not None else flat[safe]
        return out.view(Array)


def function(source: str, name: str, end: str, constexpr: str):
    """The module's function `name` (its body up to the line `end`) as a numpy function: its decorator
    dropped, its constexpr parameter `constexpr` a plain one, numpy for Gluon, tanh for the SFU's."""
    text = re.search(rf"@gluon\.jit\n(def {name}\(.*?\n    {end}\n)", source, re.S).group(1)
    scope = {"gl": Gluon, "_mm_tanh": np.tanh}
    exec(compile(text.replace(f"{constexpr}: gl.constexpr", constexpr), f"<{name}>", "exec"), scope)
    return scope[name]
