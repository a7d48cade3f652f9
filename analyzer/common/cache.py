"""Results on disk, for the commands a user repeats (napkin analyze and napkin kernel of one diagram on
one GPU).

An entry is keyed by everything the result depends on: napkin's own code (the size and modification
time of every module of the package, so an edited checkout never reads an older answer), the bytes of
the input files, and the options (which name the diagram as it was given: see analyzer.cli.cached).
The cache never changes an answer or an exit code: an entry that is missing, unreadable, damaged or
not the one stored under its name is a miss (computed again and written over), and a write that fails
is skipped.

An entry is a file of its own: one header line, `napkin-cache 1 KIND KEY SHA256`, then the payload,
whose SHA-256 the header states. A read opens regular files only (no link, no FIFO, no device: a FIFO
in the cache folder would block napkin, a link to /dev/zero fill its memory) and reads at most
`MAX_BYTES`.

Where: $NAPKIN_CACHE_DIR, else $XDG_CACHE_HOME/napkin, else ~/.cache/napkin. NAPKIN_CACHE=off turns
it off (the test suite does, but for the tests of the cache itself).
"""

from __future__ import annotations

import hashlib
import json
import os
import stat
import tempfile
from collections.abc import Iterable
from pathlib import Path

_PACKAGE = Path(__file__).resolve().parent.parent       # analyzer/

MAGIC = "napkin-cache 1"
MAX_BYTES = 32 * 2**20      # the largest entry read or written; napkin's largest answers are ~1 MB
# Errors of the file system or of a path (a NUL byte, no home folder), never raised out of the cache
_FAILURES = (OSError, ValueError, RuntimeError)


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


def _header(kind: str, name: str, payload: bytes) -> bytes:
    return f"{MAGIC} {kind} {name} {hashlib.sha256(payload).hexdigest()}\n".encode()


def _path(kind: str, name: str) -> Path:
    return folder() / kind / f"{name}.json"


def load(kind: str, name: str) -> str | None:
    """The payload stored under `kind` and `name`, or None: where there is none, or the file is not a
    regular file, is larger than MAX_BYTES, or is not the entry stored for this kind and key with its
    payload whole."""
    if not enabled():
        return None
    try:
        data = _read_regular(_path(kind, name))
    except _FAILURES:
        return None
    if data is None:
        return None
    header, newline, payload = data.partition(b"\n")
    if not newline or header + newline != _header(kind, name, payload):
        return None
    try:
        return payload.decode("utf-8")
    except UnicodeDecodeError:
        return None


def _read_regular(path: Path) -> bytes | None:
    """The bytes of `path` if it is a regular file of at most MAX_BYTES: the file is opened without
    following a link and without waiting for a FIFO's writer, and checked before it is read."""
    flags = os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0)
    if not stat.S_ISREG(os.lstat(path).st_mode):      # where O_NOFOLLOW is missing (Windows)
        return None
    fd = os.open(path, flags)
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or st.st_size > MAX_BYTES:
            return None
        chunks, size = [], 0
        while size <= MAX_BYTES:
            chunk = os.read(fd, MAX_BYTES + 1 - size)
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
        return b"".join(chunks) if size <= MAX_BYTES else None
    finally:
        os.close(fd)


def store(kind: str, name: str, text: str) -> None:
    """Write the entry whole (a temporary file renamed over whatever holds its name), or not at all:
    a cache that cannot be written is skipped, never an error of the command's."""
    if not enabled():
        return
    tmp = None
    try:
        payload = text.encode("utf-8")
        if len(payload) > MAX_BYTES:
            return
        target = _path(kind, name)
        target.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=".", suffix=".tmp")
        with os.fdopen(fd, "wb") as out:
            out.write(_header(kind, name, payload) + payload)
        os.replace(tmp, target)
        tmp = None
    except _FAILURES:
        pass
    finally:
        if tmp is not None:
            try:
                os.unlink(tmp)
            except OSError:
                pass


__all__ = ["MAX_BYTES", "enabled", "folder", "key", "load", "store"]
