"""Results on disk, for the commands a user repeats (napkin analyze and napkin kernel of one diagram on
one GPU).

An entry is keyed by everything the result depends on: napkin's own code (the size and modification
time of every module of the package, so an edited checkout never reads an older answer), the bytes of
the input files, and the options. The cache never changes an answer or an exit code: an entry that is
missing, unreadable or damaged is a miss, and a write that fails is skipped.

Where: $NAPKIN_CACHE_DIR, else $XDG_CACHE_HOME/napkin, else ~/.cache/napkin. NAPKIN_CACHE=off turns
it off (the test suite does, but for the tests of the cache itself).
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from collections.abc import Iterable
from pathlib import Path

_PACKAGE = Path(__file__).resolve().parent.parent       # analyzer/


def enabled() -> bool:
    return os.environ.get("NAPKIN_CACHE", "on").lower() not in ("off", "0", "no", "false")


def folder() -> Path:
    if os.environ.get("NAPKIN_CACHE_DIR"):
        return Path(os.environ["NAPKIN_CACHE_DIR"])
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "napkin"


def _code() -> list[tuple[str, int, int]]:
    """napkin's modules, each with its size and modification time: any edit is a new key."""
    out = []
    for path in sorted(_PACKAGE.rglob("*.py")):
        st = path.stat()
        out.append((str(path.relative_to(_PACKAGE)), st.st_size, st.st_mtime_ns))
    return out


def key(kind: str, files: Iterable[Path], options: dict) -> str:
    """The entry's name: a hash of napkin's code, the files' bytes and the options (JSON-able)."""
    h = hashlib.sha256()
    h.update(json.dumps([kind, _code(), options], sort_keys=True, default=str).encode())
    for path in files:
        h.update(str(path.name).encode())
        h.update(path.read_bytes())
    return h.hexdigest()[:32]


def load(kind: str, name: str) -> str | None:
    """The entry's text, or None."""
    if not enabled():
        return None
    try:
        return (folder() / kind / f"{name}.json").read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        return None


def store(kind: str, name: str, text: str) -> None:
    """Write the entry whole (a temporary file renamed over it), or not at all."""
    if not enabled():
        return
    target = folder() / kind / f"{name}.json"
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=".", suffix=".tmp")
        with os.fdopen(fd, "w", encoding="utf-8") as out:
            out.write(text)
        os.replace(tmp, target)
    except OSError:
        with_tmp = locals().get("tmp")
        if with_tmp:
            Path(with_tmp).unlink(missing_ok=True)


__all__ = ["enabled", "folder", "key", "load", "store"]
