"""Writing output files whole or not at all: each goes to a temporary file in its target folder first,
and only a complete set of them is renamed into place (os.replace, atomic within a folder).

Every command that writes (`-o`, `--report`, `--plot`) goes through here, so a missing folder, a
read-only folder or one that takes no files (/proc), a full disk or an over-long name gives one
NapkinError naming the option, and no half-written file is left behind; a name that names no file
(empty, `.`, `out/`, a folder) is a UsageError, the command line's mistake. `check_target` asks the
same questions before a command does its work, so that a two-minute fit does not end in a path error.
"""

from __future__ import annotations

import errno
import os
import tempfile
from pathlib import Path

from analyzer.common.errors import NapkinError, UsageError

TEMP_PREFIX = ".napkin-"       # temporary files: short names, so that a long target name still fits


def named_file(path: str | Path, option: str) -> Path:
    """`path` as the name of a file: empty, or naming a folder (`.`, `/`, `out/`, a folder that exists),
    the command line is wrong (UsageError, exit 2), whatever the command would have written."""
    text = str(path)
    if not text:
        raise UsageError("'' names no file", field=option, hint="name the file to write")
    path = Path(text)
    try:
        folder = text.endswith(("/", os.sep)) or path.name in ("", ".", "..") or path.is_dir()
    except OSError:            # a name too long to look up: check_target says so
        folder = False
    if folder:
        raise UsageError(f"{_shown(text)}: it is a folder, and {option} names a file", field=option,
                         hint="name a file, e.g. inside that folder")
    return path


def check_target(path: str | Path, option: str) -> Path:
    """`path` as a file napkin could write: a file's name (named_file), whose folder exists and takes
    files."""
    path = named_file(path, option)
    try:
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


def _is_dir(path: Path) -> bool:
    try:
        return path.is_dir()
    except OSError:
        return False


def _name_max(folder: Path) -> int:
    try:
        return os.pathconf(folder, "PC_NAME_MAX")
    except (OSError, ValueError, AttributeError):
        return 255


def _shown(path: Path | str) -> str:
    """The path quoted, its middle left out past 80 characters."""
    text = str(path)
    return repr(text) if len(text) <= 80 else repr(f"{text[:40]}...{text[-30:]}")


def _error(path: Path | None, option: str, code: int | None, strerror: str | None = None) -> NapkinError:
    shown = _shown(path) if path is not None else "''"
    folder = repr(str(_folder(path))) if path is not None else "its folder"
    if code == errno.ENOENT and path is not None and _is_dir(_folder(path)):
        # the folder is there, and creating a file in it says "no such file": not a folder of files
        # (/proc, /sys: the kernel's own), or one that vanished as napkin wrote
        return NapkinError(f"{shown}: folder {folder} does not take new files ({strerror or 'no such file'}: "
                           "not an ordinary folder, such as /proc or /sys)", field=option,
                           hint="write into a folder of your own")
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
