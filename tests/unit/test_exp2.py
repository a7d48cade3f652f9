"""exp2 on the FMA lanes (analyzer.codegen.hopper.exp2): the PTX that `ptx()` renders, run by a small
interpreter of exactly the instructions it emits (an instruction outside that subset fails the test
rather than going unchecked), against 2^x in float64; the polynomial's degree and error; the refusals;
and the inline assembly call in attention.gluon's _attn_exp2, whose constraints and pack must be the
module's."""

from __future__ import annotations

import math
import re
from functools import cache
from pathlib import Path

import numpy as np
import pytest

from analyzer.codegen.hopper import exp2

ROOT = Path(__file__).resolve().parents[2]
TEMPLATE = ROOT / "analyzer" / "codegen" / "hopper" / "attention.gluon"
TYPES = ("e4m3", "bf16", "fp16")
SLACK = 4 * 2.0 ** -24      # float32 rounding of the Horner steps on top of the polynomial's own error
MASK = 2 ** 32 - 1

# the PTX subset ptx() emits: opcode -> (type of the destination, type of each source); "any" copies bits
OPCODES = {
    "max.f32": ("f32", ("f32", "f32")),
    "add.rm.f32": ("f32", ("f32", "f32")),
    "sub.f32": ("f32", ("f32", "f32")),
    "fma.rn.f32": ("f32", ("f32", "f32", "f32")),
    "mov.b32": ("any", ("any",)),
    "shl.b32": ("b32", ("b32", "b32")),
    "add.s32": ("b32", ("b32", "b32")),
    "ex2.approx.ftz.f32": ("f32", ("f32",)),
}
KIND = {".f32": "f32", ".b32": "b32"}


# --- the interpreter ---------------------------------------------------------------------------------

def parse(text: str) -> tuple[dict[str, str], list[tuple[str, str, tuple[str, ...]]]]:
    """The declared registers (name -> f32 or b32; $0..$15 are f32, the constraints' "=f" and "f") and the
    instructions (opcode, destination, sources) of `text`; an opcode outside OPCODES raises."""
    types = {f"${n}": "f32" for n in range(2 * exp2.PACK)}
    program = []
    for line in text.splitlines():
        line = line.strip()
        if line in ("", "{", "}"):
            continue
        if line.startswith(".reg"):
            match = re.fullmatch(r"\.reg\s+(\.\w+)\s+([\w\s,]+);", line)
            assert match and match[1] in KIND, f"a declaration the interpreter does not model: {line}"
            for name in match[2].split(","):
                types[name.strip()] = KIND[match[1]]
            continue
        match = re.fullmatch(r"([\w.]+)\s+(.+);", line)
        assert match, f"not an instruction: {line}"
        if match[1] not in OPCODES:
            raise NotImplementedError(f"the interpreter does not model {match[1]}: {line}")
        operands = tuple(o.strip() for o in match[2].split(","))
        if len(operands) != 1 + len(OPCODES[match[1]][1]):
            raise ValueError(f"operand count: {line}")
        program.append((match[1], operands[0], operands[1:]))
    return types, program


def _bits(value) -> int:
    return int(np.float32(value).view(np.uint32)) if isinstance(value, np.float32) else value


def _from_bits(bits: int) -> np.float32:
    return np.uint32(bits).view(np.float32)


def _two_sum(a: float, b: float) -> tuple[float, float]:
    """s = fl64(a + b) and the exact error a + b - s (Knuth's TwoSum)."""
    s = a + b
    if not math.isfinite(s):
        return s, 0.0
    bb = s - a
    return s, (a - (s - bb)) + (b - bb)


def _to_f32(s: float, err: float, down: bool) -> np.float32:
    """The exact value s + err (err below half an ulp of s in float64) rounded to float32: toward -inf
    where `down`, else to nearest, ties to even."""
    r = np.float32(s)
    if not math.isfinite(s):
        return r
    if down:
        if float(r) > s or (float(r) == s and err < 0):
            r = np.nextafter(r, np.float32(-np.inf))
        return r
    if float(r) != s and err != 0:      # s may be a tie between two float32 that err breaks
        lo, hi = (np.nextafter(r, np.float32(-np.inf)), r) if float(r) > s else (r, np.nextafter(r, np.float32(np.inf)))
        if s - float(lo) == float(hi) - s:
            r = hi if err > 0 else lo
    return r


def execute(op: str, values: list) -> object:
    if op == "max.f32":
        return np.fmax(values[0], values[1])        # PTX's max: a NaN operand yields the other
    if op == "add.rm.f32":
        return _to_f32(*_two_sum(float(values[0]), float(values[1])), down=True)
    if op == "sub.f32":
        return _to_f32(*_two_sum(float(values[0]), -float(values[1])), down=False)
    if op == "fma.rn.f32":
        product = float(values[0]) * float(values[1])     # exact: 24 + 24 bits
        return _to_f32(*_two_sum(product, float(values[2])), down=False)
    if op == "mov.b32":
        return _bits(values[0])
    if op == "shl.b32":
        return (values[0] << values[1]) & MASK if values[1] < 32 else 0
    if op == "add.s32":
        return (values[0] + values[1]) & MASK
    if op == "ex2.approx.ftz.f32":
        y = np.float32(np.exp2(float(values[0])))
        return np.float32(0.0) if abs(float(y)) < 2.0 ** -126 else y
    raise NotImplementedError(op)


def operand(registers: dict, name: str, want: str):
    """A source's value: a register (read before it is written raises), 0fXXXXXXXX, or a decimal."""
    if name.startswith("0f"):
        value = _from_bits(int(name[2:], 16))
    elif re.fullmatch(r"-?\d+", name):
        value = int(name) & MASK
    else:
        value = registers[name]
    kind = "f32" if isinstance(value, np.float32) else "b32"
    if want != "any" and kind != want:
        raise TypeError(f"{name} is {kind}, the instruction reads {want}")
    return value


def run(text: str, xs) -> list[np.float32]:
    """$0..$7 after running `text` on $8..$15 = xs."""
    types, program = parse(text)
    registers = {f"${exp2.PACK + i}": np.float32(x) for i, x in enumerate(xs)}
    for op, destination, sources in program:
        result_type, source_types = OPCODES[op]
        result = execute(op, [operand(registers, s, t) for s, t in zip(sources, source_types)])
        if op == "mov.b32":
            result = _from_bits(result) if types[destination] == "f32" else result
        elif types[destination] != result_type:
            raise TypeError(f"{op} writes {result_type} into {destination}, a {types[destination]}")
        registers[destination] = result
    return [registers[f"${i}"] for i in range(exp2.PACK)]


@cache
def program(count: int, probability_type: str) -> str:
    return exp2.ptx(count, probability_type)


def in_groups(xs: np.ndarray, count: int, probability_type: str) -> np.ndarray:
    """2^xs by the PTX, xs taken 8 at a time (padded with 0)."""
    xs = np.concatenate([xs, np.zeros(-len(xs) % exp2.PACK, np.float32)]).reshape(-1, exp2.PACK)
    return np.array([run(program(count, probability_type), group) for group in xs], np.float32)


def inputs() -> np.ndarray:
    """Scores as the softmax passes them: x <= 0 down to -126 (2^x still a normal float32), random and at
    the edges where the floor and the fraction change (integers, and one float32 either side of them)."""
    rng = np.random.default_rng(20240611)
    edges = [0.0, -0.0, -1.0, -0.5, -125.9, -126.0, -2.0 ** -30, float(np.nextafter(np.float32(0), np.float32(-1)))]
    edges += [float(k) for k in range(-126, 1)]
    edges += [float(np.nextafter(np.float32(k), np.float32(0))) for k in range(-126, 0)]
    edges += [float(np.nextafter(np.float32(k), np.float32(-np.inf))) for k in range(-125, 1)]
    return np.concatenate([rng.uniform(-126.0, 0.0, 1024), edges]).astype(np.float32)


# --- the tests ---------------------------------------------------------------------------------------

def test_the_interpreter_models_the_roundings_it_claims():
    """The interpreter's own arithmetic: add.rm rounds down where float64 alone would round to the
    rounder (x = -2^-30), ties of fma.rn go to even, and an opcode outside the subset is refused, so
    that a change to ptx() cannot pass unmodelled."""
    rounder = np.float32(exp2.ROUNDER)
    assert execute("add.rm.f32", [np.float32(-2.0 ** -30), rounder]) == rounder - 1
    assert execute("add.rm.f32", [np.float32(-3.5), rounder]) == rounder - 4
    assert execute("add.rm.f32", [np.float32(-3.0), rounder]) == rounder - 3
    one, tie = np.float32(1.0), np.float32(2.0 ** -24)      # 1 + 2^-24 is halfway between 1 and 1 + 2^-23
    assert execute("fma.rn.f32", [tie, one, one]) == one
    assert execute("fma.rn.f32", [tie, np.float32(1 + 2.0 ** -23), one]) == np.float32(1 + 2.0 ** -23)
    with pytest.raises(NotImplementedError, match="mul.f32"):
        parse("{\nmul.f32 $0, $8, $9;\n}")


@pytest.mark.parametrize("probability_type", TYPES)
@pytest.mark.parametrize("count", [1, 3, 7, 8])
def test_ptx_computes_exp2(count, probability_type):
    """Each of the 8 outputs is 2^x of its own input: on the FMA lanes (the first `count`) within the
    minimax polynomial's error plus a few float32 roundings, on ex2 (the rest) as float32(2^x)."""
    xs = inputs()
    ys = in_groups(xs, count, probability_type).astype(np.float64).reshape(-1)[:len(xs)]
    exact = np.exp2(xs.astype(np.float64))
    error = np.abs(ys / exact - 1.0)
    lanes = (np.arange(len(xs)) % exp2.PACK) < count
    bound = exp2.minimax(exp2.degree(probability_type))[1] + SLACK
    worst = int(np.argmax(np.where(lanes, error, 0.0)))
    assert error[lanes].max() <= bound, f"2^{xs[worst]!r}: {ys[worst]!r}, error {error[worst]:.3g} > {bound:.3g}"
    if not lanes.all():
        assert np.allclose(ys[~lanes], exact.astype(np.float32)[~lanes], rtol=1e-6, atol=0.0)


@pytest.mark.parametrize("probability_type", TYPES)
@pytest.mark.parametrize("count", [1, 3, 8])
def test_ptx_underflows_to_zero(count, probability_type):
    """Below -126 (down to -inf, a masked score) 2^x is essentially 0 on every slot: the clamp to -127
    keeps floor(x) from wrapping the exponent bits to a large number or a NaN."""
    just_above = float(np.nextafter(np.float32(-127), np.float32(0)))
    xs = np.array([-126.5, -126.9999, -127.0, -127.5, -128.0, -150.0, -1000.0, -3.0e38, float("-inf"),
                   float(np.finfo(np.float32).min), -200.25, -130.0, just_above, -127.00001, -160.0, float("-inf")],
                  np.float32)
    ys = in_groups(xs, count, probability_type).reshape(-1)
    assert not np.isnan(ys).any()
    assert (np.abs(ys.astype(np.float64)) < 2.0 ** -120).all(), ys


@pytest.mark.parametrize("probability_type", TYPES)
def test_degree_is_the_lowest_within_a_quarter_of_the_unit_roundoff(probability_type):
    """degree(): the polynomial's error is at most a quarter of the probabilities' unit roundoff (their own
    rounding dominates), and one degree less would not be (no FMA spent for nothing)."""
    d = exp2.degree(probability_type)
    bound = exp2.UNIT_ROUNDOFF[probability_type] / 4
    assert exp2.minimax(d)[1] <= bound
    assert d == 1 or exp2.minimax(d - 1)[1] > bound
    assert d == {"e4m3": 2, "bf16": 3, "fp16": 3}[probability_type]


def test_minimax_error_falls_with_the_degree():
    """More terms, a smaller error (up to degree 6, where float32 coefficients stop helping); p(f) near
    1 + ln2 f + ..., so the linear coefficient is close to ln 2."""
    errors = [exp2.minimax(d)[1] for d in range(1, 7)]
    assert all(a > b for a, b in zip(errors, errors[1:])), errors
    coefficients, _ = exp2.minimax(3)
    assert len(coefficients) == 3
    assert abs(coefficients[0] - math.log(2)) < 0.01
    assert all(c == float(np.float32(c)) for c in coefficients)


@pytest.mark.parametrize("probability_type", TYPES)
def test_ptx_refusals(probability_type):
    """count 0 is no assembly at all (the kernel calls gl.exp2), and a count beyond 0..PACK is refused."""
    assert exp2.ptx(0, probability_type) == ""
    for count in (-1, exp2.PACK + 1):
        with pytest.raises(ValueError, match="count"):
            exp2.ptx(count, probability_type)


@pytest.mark.parametrize("probability_type", TYPES)
@pytest.mark.parametrize("count", range(1, exp2.PACK + 1))
def test_every_output_written_once(count, probability_type):
    """Each output $0..$7 is written exactly once and no input $8..$15 is written (an output left
    unwritten would be garbage in the probabilities; an input written would clobber the caller)."""
    _, instructions = parse(exp2.ptx(count, probability_type))
    written = [destination for _, destination, _ in instructions if destination.startswith("$")]
    assert sorted(written, key=lambda r: int(r[1:])) == [f"${i}" for i in range(exp2.PACK)]


def test_template_call_matches_the_module():
    """_attn_exp2's inline_asm_elementwise call in attention.gluon passes exp2.CONSTRAINTS and exp2.PACK
    (the template spells them out literally; they must not drift from the assembly's registers)."""
    text = TEMPLATE.read_text()
    body = re.search(r"def _attn_exp2\(.*?(?=\n@gluon\.jit|\ndef |\Z)", text, re.S)
    assert body, "no _attn_exp2 in attention.gluon"
    call = re.search(r"inline_asm_elementwise\(\s*\w+\s*,\s*\"([^\"]*)\"(.*?)\)\s*\n", body[0], re.S)
    assert call, "no inline_asm_elementwise call in _attn_exp2"
    assert call[1] == exp2.CONSTRAINTS
    pack = re.search(r"\bpack\s*=\s*(\d+)", call[2])
    assert pack and int(pack[1]) == exp2.PACK
