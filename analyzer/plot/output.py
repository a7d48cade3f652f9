"""Writing a figure: PNG, SVG or PDF, chosen by the output file's extension (analyzer.common.atomic writes it)."""

from __future__ import annotations

import io
from pathlib import Path

import matplotlib
from matplotlib.figure import Figure

from analyzer.common.atomic import write_files
from analyzer.common.errors import NapkinError

FORMATS = {".png": "png", ".svg": "svg", ".pdf": "pdf"}


def output_format(path: str | Path, option: str = "--output") -> str:
    """The format for `path`, or a one-line error naming the option."""
    suffix = Path(path).suffix.lower()
    if suffix not in FORMATS:
        raise NapkinError(f"{option} {str(path)!r}: cannot tell the format from {suffix or 'no extension'!r}",
                          hint="end the file name with .png, .svg or .pdf")
    return FORMATS[suffix]


def save(figure: Figure, path: str | Path, option: str = "--output") -> Path:
    """Write `figure` to `path`, whole or not at all (deterministic metadata, so re-running gives the
    same SVG/PDF)."""
    return write_files({Path(path): render(figure, path)}, option)[0]


def render(figure: Figure, path: str | Path) -> bytes:
    """The file's bytes in the format `path`'s extension names."""
    fmt = output_format(path)
    metadata = {"png": {"Software": None}, "svg": {"Date": None, "Creator": None},
                "pdf": {"CreationDate": None, "Producer": None, "Creator": None}}[fmt]
    buffer = io.BytesIO()
    with matplotlib.rc_context({"svg.hashsalt": "napkin"}):   # stable SVG ids across runs
        figure.savefig(buffer, format=fmt, dpi=150, bbox_inches="tight", metadata=metadata)
    return buffer.getvalue()
