"""The tables napkin's terminal reports are made of: a bold title on the left, plain-text cells."""

from __future__ import annotations

from rich.table import Table
from rich.text import Text


def titled_table(title: str, *columns: str) -> Table:
    table = Table(title=title, title_justify="left", title_style="bold", header_style="bold",
                  show_edge=False, pad_edge=False)
    for c in columns:
        table.add_column(c, overflow="fold")
    return table


def row(table: Table, *cells: str) -> None:
    table.add_row(*(Text(c) for c in cells))   # plain text: "[q, x]" is not markup
