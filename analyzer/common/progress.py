"""How long work reports how far it is: a callback the command line turns into a progress bar on stderr
(the layers below the report never draw; analyzer.cli does)."""

from __future__ import annotations

from collections.abc import Callable

# progress(what, done, total): `done` of `total` steps of the stage named `what` are finished
Progress = Callable[[str, int, int], None]


def silent(what: str, done: int, total: int) -> None:
    """No report: the default where no one watches."""


__all__ = ["Progress", "silent"]
