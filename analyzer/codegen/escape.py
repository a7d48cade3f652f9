"""Text from a diagram, a profile or a path, made safe for the place it lands in generated source.

Generated files carry text the generator does not control: a diagram's title, paper and doc, file paths,
the command that regenerates them. None of it may become code. Each escaper below is made for one place
and keeps the text readable there; identifiers never go through them (analyzer.codegen.names makes those).

- `py_str`: a Python string literal (any text);
- `py_comment`: the text of one Python comment line;
- `py_doc`: the text inside a triple-quoted Python docstring;
- `cpp_comment`: the text of one C++ `//` comment line;
- `cpp_str`: a C++ string literal (the text's UTF-8 bytes).
"""

from __future__ import annotations


def _visible(text: str) -> str:
    """`text` on one line: characters that are not printable (newlines, carriage returns, tabs, the
    Unicode line and paragraph separators, bidirectional controls) written as Python escapes."""
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in text)


def py_str(text: str) -> str:
    """A Python string literal whose value is `text`."""
    return repr(str(text))


def py_comment(text: str) -> str:
    """`text` as the body of one `#` comment: nothing in it can end the line."""
    return _visible(str(text))


def py_doc(text: str) -> str:
    """`text` inside a triple-quoted docstring: backslashes and quotes escaped, on one line."""
    return _visible(str(text).replace("\\", "\\\\").replace('"', '\\"'))


def cpp_comment(text: str) -> str:
    """`text` as the body of one `//` comment. Besides line breaks, a backslash at the end of a line would
    splice the next line into the comment, and `??/` is a backslash where trigraphs are on: each
    backslash is written `\\x5c` and each `?` after a `?` as `\\x3f`."""
    out = []
    for c in _visible(str(text).replace("\\", "\\x5c")):
        out.append("\\x3f" if c == "?" and out and out[-1] in ("?", "\\x3f") else c)
    return "".join(out)


def cpp_str(text: str) -> str:
    """A C++ string literal whose bytes are `text` in UTF-8: printable ASCII as it is, every other byte
    (and `"`, `\\`, `?`) as a three-digit octal escape, which never runs into the next character; a
    lone surrogate, which has no UTF-8, as its Python escape."""
    safe = {b for b in range(0x20, 0x7F)} - set(b'"\\?')
    data = str(text).encode("utf-8", "backslashreplace")
    return '"' + "".join(chr(b) if b in safe else f"\\{b:03o}" for b in data) + '"'


__all__ = ["py_str", "py_comment", "py_doc", "cpp_comment", "cpp_str"]
