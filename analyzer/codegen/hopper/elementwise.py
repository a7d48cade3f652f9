"""What the Hopper contraction family's two kernels render alike from a plan: the elementwise ops on
values in registers (Gluon's spelling, analyzer.codegen.render.pointwise), the loads of the vectors and
tiles those ops read, the names the diagram's arrays and ops take in a kernel's scope, and the
parameters an entry point takes for them (analyzer.codegen.hopper.contraction_module's tails and
prologues, analyzer.codegen.hopper.chain_module's ops between two contractions).
"""

from __future__ import annotations

from analyzer.codegen.escape import py_comment, py_str
from analyzer.codegen.names import Scope
from analyzer.codegen.render import BINARY, UNARY, Spelling, pointwise

# Gluon's spelling of the elementwise ops on the accumulator (analyzer.codegen.render): tanh and the
# functions built on it run on the special function unit (_mm_tanh: PTX tanh.approx.f32, one operation)
SPELLING = Spelling(
    unary={
        "exp": "gl.exp({x})",
        "sigmoid": "(0.5 * _mm_tanh(0.5 * {x}) + 0.5)",       # 1/(1 + exp(-v)) = tanh(v/2)/2 + 1/2
        "relu": "gl.maximum({x}, 0.0)",
        "tanh": "_mm_tanh({x})",
        # GELU, tanh form: 0.5 x (1 + tanh u), u = sqrt(2/pi) (x + 0.044715 x^3)
        "gelu": "{x} * (0.5 * _mm_tanh(0.7978845608028654 * ({x} + 0.044715 * {x} * {x} * {x})) + 0.5)",
        "reciprocal": "1.0 / {x}",
        "rsqrt": "gl.rsqrt({x})",
    },
    binary={"add": "+", "sub": "-", "mul": "*", "div": "/"},
    zero="0.0", neg_inf="float('-inf')", log2e="1.4426950408889634", number="{!r}")
assert set(SPELLING.unary) == set(UNARY) and set(SPELLING.binary) == set(BINARY)


class OpIds:
    """The names one kernel's ops and entry point give the diagram's arrays and ops (claimed in a scope of
    their own under the module's, beside the kernel's `fixed` locals), as render.pointwise asks them."""

    def __init__(self, module: Scope, fixed: tuple[str, ...]) -> None:
        self.scope = Scope(fixed, parent=module)

    def ptr(self, array: str) -> str:
        return self.scope("{}_ptr", array)

    def stride(self, array: str, dim: str) -> str:
        return self.scope("stride_{}_{}", array, dim)

    def scale(self, op: str) -> str:
        return self.scope("scale_{}", op)

    def value(self, op: str) -> str:
        return self.scope("{}_val", op, case="lower")


def read_params(ids: OpIds, p, reads, ops) -> tuple[list[str], list[str]]:
    """The entry point's parameters for what `ops` read (each loaded array's pointer and strides, each
    scale) and what the launcher passes for them (expressions of its t and scale)."""
    params, passed = [], []
    for x in reads:
        params.append(ids.ptr(x))
        passed.append(f"t[{py_str(x)}]")
        for i, dim in enumerate(p.tiles_of[x]):
            params.append(ids.stride(x, dim))
            passed.append(f"t[{py_str(x)}].stride({i})")
    for op in ops:
        if op.applied.scale is not None:
            params.append(ids.scale(op.name))
            passed.append(f"scale[{py_str(op.name)}]")
    return params, passed


def unpacked(params: list[str]) -> str:
    """A branch's first line: the parameters it reads, unpacked from `extras`."""
    return f"{', '.join(params)}, = extras" if params else "# reads nothing besides the kernel's own values"


def load(ids: OpIds, x: str, dims: tuple[str, ...], at: dict) -> str:
    """A loaded vector or tile `x` in fp32, laid out like the values it meets (`at`: a dim -> its index
    variable, its size, how a vector along it broadcasts)."""
    if len(dims) == 1:
        idx, size, keep = at[dims[0]]
        return (f"{ids.value(x)} = gl.load({ids.ptr(x)} + {idx} * {ids.stride(x, dims[0])}, mask={idx} < {size}, "
                f"other=0.0).to(gl.float32){keep}  # {py_comment(x)}")
    offs = " + ".join(f"{at[d][0]}{at[d][2]} * {ids.stride(x, d)}" for d in dims)
    (r, rs, _), (c, cs, _) = (at[d] for d in dims)
    return (f"{ids.value(x)} = gl.load({ids.ptr(x)} + {offs}, mask=({r}[:, None] < {rs}) & ({c}[None, :] < {cs}), "
            f"other=0.0).to(gl.float32)  # {py_comment(x)}")


def ops(ops, vals: dict[str, str], ids: OpIds) -> list[str]:
    lines = []
    for op in ops:
        out = ids.value(op.name)
        lines.append(f"{out} = {pointwise(SPELLING, op, [vals[i] for i in op.inputs], ids)}  "
                     f"# {py_comment(op.name)}: {op.primitive.name}")
        vals[op.name] = out
    return lines


__all__ = ["SPELLING", "OpIds", "load", "ops", "read_params", "unpacked"]
