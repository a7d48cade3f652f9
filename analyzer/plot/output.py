"""Writing a figure: PNG, SVG or PDF, chosen by the output file's extension."""

from __future__ import annotations

from pathlib import Path

import matplotlib
from matplotlib.figure import Figure

from analyzer.errors import NapkinError

FORMATS = {".png": "png", ".svg": "svg", ".pdf": "pdf"}


def output_format(path: str | Path) -> str:
    """The format for `path`, or a one-line error naming the option."""
    suffix = Path(path).suffix.lower()
    if suffix not in FORMATS:
        raise NapkinError(f"--output {str(path)!r}: cannot tell the format from {suffix or 'no extension'!r}",
                          hint="end the file name with .png, .svg or .pdf")
    return FORMATS[suffix]


def save(figure: Figure, path: str | Path) -> Path:
    """Write `figure` to `path` (deterministic metadata, so re-running gives the same SVG/PDF)."""
    fmt = output_format(path)
    path = Path(path)
    if path.parent and not path.parent.exists():
        raise NapkinError(f"--output {str(path)!r}: folder {str(path.parent)!r} does not exist",
                          hint="create it first or write elsewhere")
    metadata = {"png": {"Software": None}, "svg": {"Date": None, "Creator": None},
                "pdf": {"CreationDate": None, "Producer": None, "Creator": None}}[fmt]
    try:
        with matplotlib.rc_context({"svg.hashsalt": "napkin"}):   # stable SVG ids across runs
            figure.savefig(path, format=fmt, dpi=150, bbox_inches="tight", metadata=metadata)
    except OSError as exc:
        raise NapkinError(f"--output {str(path)!r}: cannot write it ({exc.strerror or exc})") from None
    return path
