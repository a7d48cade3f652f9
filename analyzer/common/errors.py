"""The one exception type the library raises for bad input.

Every user-facing failure carries the file it came from, the field path inside it and a hint, so that
the command line can print it as a single line and exit with code 1.
"""

from __future__ import annotations


class NapkinError(Exception):
    """Bad input: a diagram, a profile, a size or a request that napkin cannot use."""

    def __init__(self, message: str, *, file: str | None = None, field: str | None = None,
                 hint: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.file = file
        self.field = field
        self.hint = hint

    def located(self, *, file: str | None = None, field_prefix: str | None = None) -> NapkinError:
        """The same error with a file filled in and/or a field path prefixed (for re-raising)."""
        field = self.field
        if field_prefix:
            field = f"{field_prefix}.{field}" if field else field_prefix
        return NapkinError(self.message, file=self.file or file, field=field, hint=self.hint)

    def one_line(self) -> str:
        parts = [p for p in (self.file, self.field) if p]
        text = ": ".join([*parts, self.message])
        if self.hint:
            text += f" (hint: {self.hint})"
        return " ".join(text.split())  # one line, whatever the message held

    def __str__(self) -> str:
        return self.one_line()


class UsageError(NapkinError):
    """The command line is wrong (exit code 2), as click's own usage errors are: a malformed option
    value, options that conflict, an output option that names no file."""
