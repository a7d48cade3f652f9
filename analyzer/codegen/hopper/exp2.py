"""exp2 on the FMA lanes: a share of the softmax's exponentials taken off the special function unit
(FlashAttention-4's emulation, here as PTX for Hopper).

An SM's special function unit evaluates 16 ex2 a clock, its FMA lanes 128 operations. Where the
scores' threads are bound by the exponentials (FP8 at head dims 64 and 128, 16 bits at 64), some of
them can run as a polynomial on the FMA lanes instead: 2^x = 2^floor(x) 2^f, f = x - floor(x) in
[0, 1), 2^f a polynomial p(f) with p(0) = 1, 2^floor(x) added to p's exponent bits. That is degree + 6
operations on the lanes (a max, three adds for floor and f, the degree's FMAs, a shift and an integer
add) against one issue and 1/16 of the SM's clock on the unit.

The polynomial's coefficients are derived here, not tabulated: the minimax of the relative error on
[0, 1) (a linear program, scipy's linprog), of the lowest degree whose error is at most a quarter of
the unit roundoff of the type the probabilities are rounded to, so that rounding them still dominates.
`ptx(count)` is the inline assembly the kernel's `_attn_exp2` runs on 8 values at a time, `count` of
them on the lanes.
"""

from __future__ import annotations

from functools import cache

import numpy as np

PACK = 8            # values a call of the inline assembly takes: `count` of every PACK go to the FMA lanes
FLOOR = -127.0      # below it 2^x is 0 to fp32 (the exponent bits would wrap): inputs are clamped to it
ROUNDER = 12582912.0    # 2^23 + 2^22: adding it and rounding down leaves floor(x) in the low mantissa bits
UNIT_ROUNDOFF = {"e4m3": 2.0 ** -4, "bf16": 2.0 ** -8, "fp16": 2.0 ** -11}     # of the probabilities' type


@cache
def minimax(degree: int, samples: int = 2001) -> tuple[tuple[float, ...], float]:
    """The coefficients c_1..c_degree of p(f) = 1 + c_1 f + ... + c_degree f^degree, rounded to float32,
    that minimise max |p(f) / 2^f - 1| over [0, 1] (a linear program on `samples` points), and that
    error measured at ten times as many points with the rounded coefficients."""
    from scipy.optimize import linprog

    f = np.linspace(0.0, 1.0, samples)
    y = np.exp2(f)
    powers = np.stack([f ** j for j in range(1, degree + 1)], axis=1)
    # |1 + powers c - y| <= t y as two sets of rows over (c, t); minimise t
    a_ub = np.vstack([np.hstack([powers, -y[:, None]]), np.hstack([-powers, -y[:, None]])])
    b_ub = np.concatenate([y - 1.0, 1.0 - y])
    cost = np.zeros(degree + 1)
    cost[-1] = 1.0
    solved = linprog(cost, A_ub=a_ub, b_ub=b_ub, bounds=[(None, None)] * (degree + 1), method="highs")
    if not solved.success:      # a linear program this small and bounded always solves
        raise RuntimeError(f"the minimax polynomial of degree {degree} for 2^f: {solved.message}")
    coefficients = tuple(float(np.float32(c)) for c in solved.x[:degree])
    fine = np.linspace(0.0, 1.0, 10 * samples)
    p = 1.0 + sum(c * fine ** (j + 1) for j, c in enumerate(coefficients))
    return coefficients, float(np.max(np.abs(p / np.exp2(fine) - 1.0)))


def degree(probability_type: str) -> int:
    """The lowest degree whose relative error is at most a quarter of the unit roundoff of
    `probability_type` (e4m3, bf16 or fp16): 2, 3 and 3."""
    bound = UNIT_ROUNDOFF[probability_type] / 4
    return next(d for d in range(1, 8) if minimax(d)[1] <= bound)


def _f32(x: float) -> str:
    """A float32 literal of PTX: 0f and its bits in hex."""
    return "0f" + np.float32(x).view(np.uint32).item().to_bytes(4, "big").hex().upper()


def ptx(count: int, probability_type: str) -> str:
    """Inline PTX for PACK values ($PACK..$2 PACK-1 in, $0..$PACK-1 out): the first `count` as p(f) 2^floor
    on the FMA lanes, the rest by ex2.approx on the special function unit. "" where count is 0."""
    if not 0 <= count <= PACK:
        raise ValueError(f"exp2 on the FMA lanes: count {count} must be 0 to {PACK}")
    if count == 0:
        return ""
    coefficients, _ = minimax(degree(probability_type))
    lines = ["{", ".reg .f32 x, whole, f, p;", ".reg .b32 bits, shift;"]
    for i in range(count):
        lines += [f"max.f32 x, ${PACK + i}, {_f32(FLOOR)};",
                  f"add.rm.f32 whole, x, {_f32(ROUNDER)};",        # ROUNDER + floor(x)
                  f"sub.f32 f, whole, {_f32(ROUNDER)};",
                  "sub.f32 f, x, f;"]                                # the fraction, in [0, 1)
        lines.append(f"fma.rn.f32 p, f, {_f32(coefficients[-1])}, {_f32(coefficients[-2] if len(coefficients) > 1 else 1.0)};")
        for c in reversed(coefficients[:-2]):
            lines.append(f"fma.rn.f32 p, p, f, {_f32(c)};")
        if len(coefficients) > 1:
            lines.append(f"fma.rn.f32 p, p, f, {_f32(1.0)};")
        lines += ["mov.b32 shift, whole;", "shl.b32 shift, shift, 23;",     # floor(x) into the exponent's place
                  "mov.b32 bits, p;", "add.s32 bits, bits, shift;", f"mov.b32 ${i}, bits;"]
    lines += [f"ex2.approx.ftz.f32 ${i}, ${PACK + i};" for i in range(count, PACK)]
    lines.append("}")
    return "\n".join(lines)


CONSTRAINTS = ",".join(["=f"] * PACK + ["f"] * PACK)    # PACK float outputs, then PACK float inputs

__all__ = ["CONSTRAINTS", "PACK", "UNIT_ROUNDOFF", "degree", "minimax", "ptx"]
