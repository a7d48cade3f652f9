"""Writing output files whole or not at all: each goes to a temporary file in its target folder first,
and only a complete set of them is renamed into place (os.replace, atomic within a folder).

Every command that writes (`-o`, `--report`, `--plot`) goes through here, so a missing folder, a
folder named as the file, a read-only folder, a full disk or an over-long name gives one NapkinError
naming the option, and no half-written file is left behind. `check_target` asks the same questions
before a command does its work, so that a two-minute fit does not end in a path error.
"""

from __future__ import annotations

import errno
import os
import tempfile
from pathlib import Path

from analyzer.common.errors import NapkinError

TEMP_PREFIX = ".napkin-"       # temporary files: short names, so that a long target name still fits


def check_target(path: str | Path, option: str) -> Path:
    """`path` as a file napkin could write: its folder exists and takes files, and it is no folder."""
    path = Path(path)
    try:
        if path.is_dir():
            raise _error(path, option, errno.EISDIR)
        folder = _folder(path)
        if not folder.is_dir():
            raise _error(path, option, errno.ENOENT if not folder.exists() else errno.ENOTDIR)
        if len(os.fsencode(path.name)) > _name_max(folder):
            raise _error(path, option, errno.ENAMETOOLONG)
        fd, probe = tempfile.mkstemp(dir=folder, prefix=TEMP_PREFIX, suffix=".tmp")
        os.close(fd)
        os.unlink(probe)
    except OSError as exc:
        raise _error(path, option, exc.errno, exc.strerror) from None
    return path


def write_files(files: dict[Path, str | bytes], option: str | dict[Path, str]) -> list[Path]:
    """Write every file, or none: all are written to temporary files first, then renamed in order.
    `option` names the command-line option each file came from (one for all, or per file)."""
    temps: dict[Path, str] = {}
    current = None
    named = (lambda p: option) if isinstance(option, str) else (lambda p: option[p])
    try:
        for path, content in files.items():
            current = path = Path(path)
            if path.is_dir():
                raise _error(path, named(path), errno.EISDIR)
            temps[path] = _write_temp(path, content)
        for path, temp in temps.items():
            current = path
            os.replace(temp, path)
    except OSError as exc:
        raise _error(current, named(current), exc.errno, exc.strerror) from None
    finally:
        for temp in temps.values():
            if os.path.exists(temp):
                os.unlink(temp)
    return list(temps)


def write_text(path: str | Path, text: str, option: str) -> Path:
    return write_files({Path(path): text}, option)[0]


def _write_temp(path: Path, content: str | bytes) -> str:
    fd, temp = tempfile.mkstemp(dir=_folder(path), prefix=TEMP_PREFIX, suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(content.encode("utf-8") if isinstance(content, str) else content)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(temp, _mode(path))
    except BaseException:
        os.unlink(temp)
        raise
    return temp


def _mode(path: Path) -> int:
    """The permissions the file would get from open(): its own if it exists, else 0o666 less the umask."""
    try:
        return path.stat().st_mode & 0o777
    except OSError:
        umask = os.umask(0)
        os.umask(umask)
        return 0o666 & ~umask


def _folder(path: Path) -> Path:
    return path.parent if str(path.parent) else Path(".")


def _name_max(folder: Path) -> int:
    try:
        return os.pathconf(folder, "PC_NAME_MAX")
    except (OSError, ValueError, AttributeError):
        return 255


def _error(path: Path | None, option: str, code: int | None, strerror: str | None = None) -> NapkinError:
    shown = repr(str(path)) if path is not None and len(str(path)) <= 80 else \
        repr(f"{str(path)[:40]}...{str(path)[-30:]}")
    folder = repr(str(_folder(path))) if path is not None else "its folder"
    what, hint = {
        errno.ENOENT: (f"folder {folder} does not exist", "create it first or write elsewhere"),
        errno.ENOTDIR: (f"{folder} is not a folder", "write into an existing folder"),
        errno.EISDIR: ("it is a folder", "name a file, e.g. inside that folder"),
        errno.EACCES: (f"folder {folder} does not take new files (permission denied)", "write elsewhere"),
        errno.EPERM: (f"folder {folder} does not take new files (not permitted)", "write elsewhere"),
        errno.EROFS: (f"folder {folder} is on a read-only file system", "write elsewhere"),
        errno.ENOSPC: ("the disk is full; nothing was written", "free some space or write elsewhere"),
        errno.EDQUOT: ("the disk quota is used up; nothing was written", "free some space or write "
                                                                          "elsewhere"),
        errno.ENAMETOOLONG: ("the name is longer than the file system allows", "use a shorter name"),
    }.get(code, (f"cannot write it ({strerror or 'error ' + str(code)})", None))
    return NapkinError(f"{shown}: {what}", field=option, hint=hint)
