"""Turn a pydantic ValidationError into one NapkinError: the first problem, with its field path."""

from __future__ import annotations

from pydantic import ValidationError

from analyzer.common.errors import NapkinError

# Tags of discriminated unions appear in pydantic's locations; they are not fields of the file, and
# cannot be names (analyzer.diagram.schema.OpEntry).
UNION_TAGS = {"<op>", "<concat>"}


def field_path(loc: tuple) -> str:
    text = ""
    for part in loc:
        if part in UNION_TAGS:
            continue
        if isinstance(part, int):
            text += f"[{part}]"
        else:
            text += f".{part}" if text else str(part)
    return text or "(top level)"


def from_validation_error(exc: ValidationError, *, file: str, hint: str | None = None) -> NapkinError:
    errors = exc.errors(include_url=False)
    first = errors[0]
    loc = tuple(first.get("loc", ()))
    kind = first.get("type", "")
    if "[key]" in loc:     # pydantic's location of a bad mapping key: (..., the key, "[key]")
        at_key = loc.index("[key]")
        key, loc = loc[at_key - 1] if at_key else None, loc[:max(at_key - 1, 0)]
        message = f"the key {key!r} is not valid: {first.get('msg', 'invalid key')}"
    elif kind == "missing":
        message = f"missing required key {loc[-1]!r}" if loc else "missing required key"
        loc = loc[:-1]
    elif kind == "model_type" or kind == "dict_type":
        value = first.get("input")    # at the top level, the file's own text is not quoted back
        got = _describe(value) if loc or not isinstance(value, str) else "text"
        message = f"expected a mapping (key: value), got {got}"
    elif kind == "list_type":
        message = f"expected a list, got {_describe(first.get('input'))}"
    else:
        message = first.get("msg", "invalid value").removeprefix("Value error, ")
        value = first.get("input")
        if kind != "unknown_key" and isinstance(value, str | int | float | bool) and len(str(value)) <= 40:
            message += f" (got {value!r})"
    more = f"; {len(errors) - 1} more problem(s) after this one" if len(errors) > 1 else ""
    return NapkinError(message + more, file=file, field=field_path(loc), hint=hint)


def _describe(value: object) -> str:
    if value is None:
        return "nothing"
    if isinstance(value, str):
        return f"the text {value[:30]!r}"
    return type(value).__name__
