"""The terminal napkin's commands print to: stdout's console (a terminal's width, or whole lines when
piped) and progress bars on stderr for long work. The layers below never draw; they report through
analyzer.common.progress, and the command line turns that into a bar here."""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager

from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TextColumn,
    TimeElapsedColumn,
)

from analyzer.common.progress import Progress as Report

PIPE_WIDTH = 1000      # columns when stdout is not a terminal: a pipe or a file gets whole lines


def console() -> Console:
    """stdout's console: a terminal's width, or, piped or redirected (no COLUMNS set), lines as long as
    their text, so that `napkin hardware list | cat` shows the names one types and no verdict wraps
    mid-sentence (rich would cut to 80 columns)."""
    out = Console(highlight=False, soft_wrap=False)
    if not out.is_terminal and not os.environ.get("COLUMNS"):
        out = Console(highlight=False, soft_wrap=False, width=PIPE_WIDTH)
    return out


@contextmanager
def progress(title: str) -> Iterator[Report]:
    """A progress bar on stderr for long work: yields the callback that the work reports its stages
    through (one bar a stage); gone when the work ends, so stdout stays the result alone. Drawn only
    where stderr is a terminal: a log or a pipe gets no bar."""
    err = Console(stderr=True)
    if not err.is_terminal:
        yield lambda what, done, total: None
        return
    bars = Progress(TextColumn(f"{title}: {{task.description}}"), BarColumn(), MofNCompleteColumn(),
                    TimeElapsedColumn(), console=err, transient=True)
    tasks: dict[str, int] = {}

    def report(what: str, done: int, total: int) -> None:
        if what not in tasks:
            tasks[what] = bars.add_task(what, total=total)
        bars.update(tasks[what], completed=done, total=total)

    with bars:
        yield report


__all__ = ["PIPE_WIDTH", "console", "progress"]
