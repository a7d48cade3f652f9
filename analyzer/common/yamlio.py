"""Safe YAML loading with errors that name the file and the line.

Only plain data is accepted, read by the YAML 1.2 core schema, so that a value is what it looks like:
`0100` is 100 (not octal 64), `1:30` and `2026-11-24` are text (not 90 and a date), `yes`, `no`, `on`
and `off` are text, and `1.98e9` is a number. PyYAML implements YAML 1.1; _CoreLoader replaces its
implicit resolvers and scalar constructors with the core schema's (yaml.org/spec/1.2.2, 10.3).
Refused, with the file, line and column: every explicit tag but the core ones (`!!str`, `!!int`,
`!!float`, `!!bool`, `!!null`, `!!map`, `!!seq`), so no `!!set` (whose order depends on the hash seed),
`!!binary`, `!!timestamp` or `!!python/...`; anchors and aliases (`&name`, `*name`: a small file could
expand into a huge document); merge keys (`<<`) are plain text keys; duplicate keys (PyYAML would
silently keep the last one); files larger than MAX_BYTES.
"""

from __future__ import annotations

import copy
import math
import re
from pathlib import Path
from typing import Any

import yaml

from analyzer.common.errors import NapkinError

MAX_BYTES = 1 << 20
CORE = "tag:yaml.org,2002:"
CORE_TAGS = {CORE + name for name in ("str", "int", "float", "bool", "null", "map", "seq")}

# YAML 1.2 core schema (10.3.2): what a plain scalar resolves to, and the first characters it may have
_RESOLVERS = [
    ("null", r"~|null|Null|NULL|", ["~", "n", "N", ""]),
    ("bool", r"true|True|TRUE|false|False|FALSE", list("tTfF")),
    ("int", r"[-+]?[0-9]+|0o[0-7]+|0x[0-9a-fA-F]+", list("-+0123456789")),
    ("float", r"[-+]?(?:\.[0-9]+|[0-9]+(?:\.[0-9]*)?)(?:[eE][-+]?[0-9]+)?", list("-+.0123456789")),
    ("float", r"[-+]?\.(?:inf|Inf|INF)", list("-+.")),
    ("float", r"\.(?:nan|NaN|NAN)", ["."]),
]


class _Refused(yaml.constructor.ConstructorError):
    """Valid YAML that napkin does not read: a tag, an anchor, a scalar its tag does not fit."""


class _CoreLoader(yaml.SafeLoader):
    yaml_implicit_resolvers: dict = {}

    def compose_node(self, parent, index):  # noqa: ANN001 - PyYAML's signature
        event = self.peek_event()
        if isinstance(event, yaml.AliasEvent):
            raise yaml.constructor.ConstructorError(
                None, None, "anchors and aliases (*name) are not supported", event.start_mark)
        if getattr(event, "anchor", None) is not None:
            raise _Refused(
                None, None, f"anchors and aliases (&{event.anchor}) are not supported", event.start_mark)
        tag = getattr(event, "tag", None)
        if tag is not None and tag not in CORE_TAGS:
            shown = "!!" + tag.removeprefix(CORE) if tag.startswith(CORE) else tag
            raise _Refused(
                None, None, f"the tag {shown} is not supported (only !!str, !!int, !!float, !!bool, "
                            "!!null, !!map and !!seq)", event.start_mark)
        return super().compose_node(parent, index)

    def construct_mapping(self, node, deep=False):  # noqa: ANN001
        seen: set = set()
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=deep)
            try:
                duplicate = key in seen
            except TypeError:
                raise yaml.constructor.ConstructorError(
                    None, None, f"mapping key {key!r} is not a plain value", key_node.start_mark) from None
            if duplicate:
                raise yaml.constructor.ConstructorError(
                    None, None, f"duplicate key {key!r}", key_node.start_mark)
            seen.add(key)
        return super().construct_mapping(node, deep=deep)

    def flatten_mapping(self, node):  # noqa: ANN001 - no merge keys: `<<` is a plain key in YAML 1.2
        pass

    def construct_core_null(self, node):  # noqa: ANN001
        value = self.construct_scalar(node)
        if value not in ("~", "null", "Null", "NULL", ""):
            raise self._not(node, "a null")
        return None

    def construct_core_bool(self, node):  # noqa: ANN001
        value = self.construct_scalar(node)
        if value in ("true", "True", "TRUE"):
            return True
        if value in ("false", "False", "FALSE"):
            return False
        raise self._not(node, "a bool (true or false)")

    def construct_core_int(self, node):  # noqa: ANN001
        value = self.construct_scalar(node)
        if re.fullmatch(r"[-+]?[0-9]+", value):
            return int(value, 10)                 # 0100 is 100: no octal without 0o
        if re.fullmatch(r"0o[0-7]+", value):
            return int(value[2:], 8)
        if re.fullmatch(r"0x[0-9a-fA-F]+", value):
            return int(value[2:], 16)
        raise self._not(node, "an int")

    def construct_core_float(self, node):  # noqa: ANN001
        value = self.construct_scalar(node)
        if re.fullmatch(r"[-+]?\.(?:inf|Inf|INF)", value):
            return -math.inf if value.startswith("-") else math.inf
        if re.fullmatch(r"\.(?:nan|NaN|NAN)", value):
            return math.nan
        if re.fullmatch(_RESOLVERS[3][1], value):
            return float(value)
        return float(self.construct_core_int(node))      # !!float 0x10; else "... is not an int"

    @staticmethod
    def _not(node, what: str) -> _Refused:  # noqa: ANN001
        return _Refused(None, None, f"{node.value!r} is not {what}",
                                                 node.start_mark)


for _kind, _pattern, _first in _RESOLVERS:
    _CoreLoader.add_implicit_resolver(CORE + _kind, re.compile(f"^(?:{_pattern})$"), _first)
_CoreLoader.add_constructor(CORE + "map", _CoreLoader.construct_mapping)
for _kind in ("null", "bool", "int", "float"):
    _CoreLoader.add_constructor(CORE + _kind, getattr(_CoreLoader, f"construct_core_{_kind}"))


_PARSED: dict[tuple[str, str], Any] = {}   # (text, source) -> its data: one command reads a file many times
_PARSED_MAX = 48     # every shipped diagram and profile (a test process reads them all), files of 1 MiB at most


def load_text(text: str, *, source: str) -> Any:
    """The data of YAML `text`, a fresh copy on every call (callers may change what they are given);
    `source` names the file in errors. A text already read in this process is not parsed again."""
    key = (text, source)
    if key not in _PARSED:
        if len(_PARSED) >= _PARSED_MAX:
            _PARSED.pop(next(iter(_PARSED)))
        _PARSED[key] = _parse(text, source)
    return copy.deepcopy(_PARSED[key])


def _parse(text: str, source: str) -> Any:
    try:
        return yaml.load(text, Loader=_CoreLoader)  # noqa: S506 - a SafeLoader subclass
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None) or getattr(exc, "context_mark", None)
        where = f"line {mark.line + 1}, column {mark.column + 1}" if mark is not None else None
        problem = getattr(exc, "problem", None) or str(exc)
        refused = isinstance(exc, _Refused)
        raise NapkinError(f"invalid YAML: {problem}", file=source, field=where,
                          hint="napkin reads plain YAML 1.2 data: write each value out, without tags, "
                               "anchors or aliases (docs/diagram-format.md)" if refused else
                               "check indentation, colons and quoting") from None
    except RecursionError:
        raise NapkinError("invalid YAML: nested too deeply", file=source) from None
    except (ValueError, OverflowError) as exc:   # e.g. an integer of more than 4300 digits
        raise NapkinError(f"invalid YAML: a value cannot be read ({exc})", file=source) from None


def load_file(path: Path) -> Any:
    source = str(path)
    try:
        size = path.stat().st_size
    except OSError as exc:
        raise NapkinError(f"cannot read file: {exc.strerror}", file=source) from None
    if size > MAX_BYTES:
        raise NapkinError(f"file is larger than {MAX_BYTES} bytes", file=source)
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise NapkinError(f"cannot read file: {exc}", file=source, hint="files must be UTF-8 text") from None
    return load_text(text, source=source)
