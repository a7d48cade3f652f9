"""Size expressions: a whitelist parser from text to sympy, and napkin's symbols.

Files may write sizes as expressions (`size: q`, `scale: d**-0.5`). Such text is never handed to
`eval` or to sympy's string parser: it is parsed with Python's `ast` and only names, numbers,
`+ - * / **` and parentheses are accepted. Exponents must be small numeric constants, so no input can
ask sympy for a huge computation.
"""

from __future__ import annotations

import ast
import functools
import math
import re
from fractions import Fraction

import sympy

from analyzer.common.errors import NapkinError

MAX_TEXT = 200          # characters in one expression
MAX_NODES = 64          # syntax-tree nodes in one expression
MAX_EXPONENT = 16       # |exponent| of any power
MAX_CONSTANT = 10**15   # |number| anywhere in an expression
MAX_SIZE = 2**40        # the largest size napkin accepts for an axis or a tile

NAME = re.compile(r"[A-Za-z][A-Za-z0-9_]{0,31}")   # the whole string (fullmatch)
RESERVED = {"M"}  # M is the lower-level memory of the optimum H*(a, M) (Equation 4)

_BINOPS = {ast.Add: sympy.Add, ast.Sub: None, ast.Mult: sympy.Mul, ast.Div: None, ast.Pow: None}


def symbol(name: str) -> sympy.Symbol:
    """The one symbol napkin uses for a name: sizes, tile sizes and memory are all positive."""
    return sympy.Symbol(name, positive=True)


MEMORY = symbol("M")  # lower-level memory in the optimum H*(a, M)


def at(expr: sympy.Expr, values: dict) -> sympy.Expr:
    """`expr` with its own free symbols replaced by `values` (keyed by symbol or by name).

    The same as expr.subs(values), but sympy's subs sorts and sympifies the whole dict on every call:
    with a dict of every size of a diagram of n axes, evaluating each axis cost O(n) and the diagram
    O(n^2) (100 unused axes took 17 s to analyse). Only the symbols `expr` has are handed to subs."""
    expr = sympy.sympify(expr)
    if expr.is_Number:
        return expr
    if expr.is_Symbol:         # most sizes: a lookup, not a substitution
        value = values[expr] if expr in values else values.get(expr.name, expr)
        return sympy.sympify(value)
    rule = {}
    for s in expr.free_symbols:
        if s in values:
            rule[s] = values[s]
        elif s.name in values:
            rule[s] = values[s.name]
    if not rule:
        return expr
    try:
        return _substituted(expr, frozenset(rule.items()))
    except TypeError:          # a value that is no hashable number: substitute without the memo
        return expr.subs(rule)


@functools.lru_cache(maxsize=1 << 16)
def _substituted(expr: sympy.Expr, rule: frozenset) -> sympy.Expr:
    """expr.subs(rule), remembered: a sweep evaluates the same few expressions at the same sizes for
    every candidate configuration (a calibration's sweeps, 70 000 substitutions, repeat most)."""
    return expr.subs(dict(rule))


def check_name(name: str, *, what: str, field: str | None = None) -> str:
    if not isinstance(name, str) or not NAME.fullmatch(name):
        raise NapkinError(f"{what} {name!r} is not a valid name", field=field,
                          hint="use a letter followed by letters, digits or '_' (at most 32 characters)")
    if name in RESERVED:
        raise NapkinError(f"{what} {name!r} is reserved", field=field,
                          hint="M names the lower-level memory in H*(a, M); pick another name")
    return name


def parse_expr(text: str | int | float, *, names: set[str] | None = None,
               field: str | None = None) -> sympy.Expr:
    """Parse a size expression. `names`, when given, is the set of symbols it may use."""
    if isinstance(text, bool):
        raise NapkinError("expected a number or an expression, got a boolean", field=field)
    if isinstance(text, int):
        return _constant(text, field)
    if isinstance(text, float):
        return _constant(text, field)
    if not isinstance(text, str):
        raise NapkinError(f"expected a number or an expression, got {type(text).__name__}", field=field)
    if len(text) > MAX_TEXT:
        raise NapkinError(f"expression is longer than {MAX_TEXT} characters", field=field)
    try:
        tree = ast.parse(text.strip(), mode="eval")
    except SyntaxError:
        raise NapkinError(f"{text!r} is not a size expression", field=field,
                          hint="only names, numbers, + - * / ** and parentheses are allowed") from None
    if sum(1 for _ in ast.walk(tree)) > MAX_NODES:
        raise NapkinError(f"expression {text!r} is too long", field=field)
    expr = _build(tree.body, text, names, field)
    for power in expr.atoms(sympy.Pow):  # (q**16)**16 folds into q**256: refuse it too
        if power.exp.is_number and abs(power.exp) > MAX_EXPONENT:
            raise NapkinError(f"{text!r} is not a size expression: exponents are limited to "
                              f"+-{MAX_EXPONENT}", field=field)
    return expr


def _constant(value: int | float | Fraction, field: str | None) -> sympy.Expr:
    if isinstance(value, float) and (value != value or value in (float("inf"), float("-inf"))):
        raise NapkinError("numbers must be finite", field=field)
    if abs(value) > MAX_CONSTANT:
        raise NapkinError(f"number {value} is out of range (at most {MAX_CONSTANT:.0e})", field=field)
    if isinstance(value, float):
        return sympy.Rational(str(value))  # exact decimal: 0.5 -> 1/2
    return sympy.Integer(value) if isinstance(value, int) else sympy.Rational(value.numerator,
                                                                              value.denominator)


def _build(node: ast.AST, text: str, names: set[str] | None, field: str | None) -> sympy.Expr:
    def bad(why: str) -> NapkinError:
        return NapkinError(f"{text!r} is not a size expression: {why}", field=field,
                           hint="only names, numbers, + - * / ** and parentheses are allowed")

    if isinstance(node, ast.Constant):
        if isinstance(node.value, bool) or not isinstance(node.value, int | float):
            raise bad(f"{node.value!r} is not a number")
        return _constant(node.value, field)
    if isinstance(node, ast.Name):
        if not NAME.fullmatch(node.id) or node.id in RESERVED:
            raise bad(f"{node.id!r} is not an allowed name")
        if names is not None and node.id not in names:
            known = ", ".join(sorted(names)) or "none"
            raise NapkinError(f"unknown name {node.id!r} in {text!r}", field=field,
                              hint=f"known size names: {known}")
        return symbol(node.id)
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub | ast.UAdd):
        operand = _build(node.operand, text, names, field)
        return -operand if isinstance(node.op, ast.USub) else operand
    if isinstance(node, ast.BinOp) and type(node.op) in _BINOPS:
        left = _build(node.left, text, names, field)
        if isinstance(node.op, ast.Pow):
            exponent = _numeric_exponent(node.right)
            if exponent is None:
                raise bad("an exponent must be a number such as 2, -1 or 0.5")
            if abs(exponent) > MAX_EXPONENT:
                raise bad(f"exponents are limited to +-{MAX_EXPONENT}")
            if left.is_number and left != 0 and abs(float(exponent)) * abs(math.log10(abs(float(left)))) > 15:
                raise bad(f"a number in it is out of range (at most {MAX_CONSTANT:.0e})")
            return _bounded(left ** sympy.Rational(exponent.numerator, exponent.denominator), bad)
        right = _build(node.right, text, names, field)
        if isinstance(node.op, ast.Add):
            return _bounded(left + right, bad)
        if isinstance(node.op, ast.Sub):
            return _bounded(left - right, bad)
        if isinstance(node.op, ast.Mult):
            return _bounded(left * right, bad)
        if right == 0:
            raise bad("division by zero")
        return _bounded(left / right, bad)
    raise bad(f"{type(node).__name__} is not allowed")


def _bounded(expr: sympy.Expr, bad) -> sympy.Expr:
    """Refuse any number beyond MAX_CONSTANT, alone or as a coefficient, as soon as it appears."""
    for atom in expr.atoms(sympy.Number):
        if abs(atom) > MAX_CONSTANT or (atom != 0 and abs(atom) < 1 / MAX_CONSTANT):
            raise bad(f"a number in it is out of range (at most {MAX_CONSTANT:.0e})")
    return expr


def _numeric_exponent(node: ast.AST) -> Fraction | None:
    """A power's exponent: a number, a signed number, or a quotient of numbers."""
    if isinstance(node, ast.Constant) and isinstance(node.value, int | float) \
            and not isinstance(node.value, bool):
        if isinstance(node.value, float) and not abs(node.value) < 1e6:
            return None
        return Fraction(str(node.value)) if isinstance(node.value, float) else Fraction(node.value)
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub | ast.UAdd):
        inner = _numeric_exponent(node.operand)
        if inner is None:
            return None
        return -inner if isinstance(node.op, ast.USub) else inner
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Div):
        num, den = _numeric_exponent(node.left), _numeric_exponent(node.right)
        if num is None or den is None or den == 0:
            return None
        return num / den
    return None


@functools.lru_cache(maxsize=1 << 12)
def to_text(expr: sympy.Expr) -> str:
    """An expression as text that `sympy.sympify` parses back to the same expression."""
    return sympy.sstr(expr, order="lex")
