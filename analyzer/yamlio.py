"""Safe YAML loading with errors that name the file and the line.

Only plain data is accepted: no tags that build objects (yaml.SafeLoader), no anchors or aliases
(they let a small file expand into a huge document), no duplicate keys (PyYAML would silently keep the
last one) and no file larger than MAX_BYTES.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import yaml

from analyzer.errors import NapkinError

MAX_BYTES = 1 << 20


class _StrictLoader(yaml.SafeLoader):
    def compose_node(self, parent, index):  # noqa: ANN001 - PyYAML's signature
        if self.check_event(yaml.AliasEvent):
            event = self.peek_event()
            raise yaml.constructor.ConstructorError(
                None, None, "anchors and aliases (*name) are not supported", event.start_mark)
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


_StrictLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG,
                              _StrictLoader.construct_mapping)
# YAML 1.1 reads 1.98e9 (no sign in the exponent) as text; read it as a number, as YAML 1.2 does.
_StrictLoader.add_implicit_resolver(
    "tag:yaml.org,2002:float",
    re.compile(r"^[-+]?(?:[0-9][0-9_]*)(?:\.[0-9_]*)?[eE][-+]?[0-9]+$"), list("-+0123456789"))


def load_text(text: str, *, source: str) -> Any:
    try:
        return yaml.load(text, Loader=_StrictLoader)  # noqa: S506 - a SafeLoader subclass
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None) or getattr(exc, "context_mark", None)
        where = f"line {mark.line + 1}, column {mark.column + 1}" if mark is not None else None
        problem = getattr(exc, "problem", None) or str(exc)
        raise NapkinError(f"invalid YAML: {problem}", file=source, field=where,
                          hint="check indentation, colons and quoting") from None
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
